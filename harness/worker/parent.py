"""Parent side of a worker: start it confined, talk to it under a deadline, kill it cleanly.

Each worker gets a private scratch directory (its working directory, HOME and TMPDIR), a
scrubbed environment, and the confinement sandbox.py decides, applied by its launcher before any
candidate code is imported (launch.py). Its stdout and stderr go to an unlinked file that only
this process holds, read back bounded and never parsed for results. Results come only through a
socket this process made (protocol.py); the child side is child.py. A watchdog thread kills the
worker's whole process tree when it passes a limit, and every exit path kills that tree.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import mmap
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from ..records import Limits, SandboxMode
from . import cuda_ipc, processes
from .confine import CONFINE_FAILED
from .launch import BOOTSTRAP
from .pace import REAL_TIME, Pace
from .protocol import (ALLOWED_DTYPES, REPLY, Command, CommitBuffer, Reply, TensorRef, WorkerJob, aligned, fits,
                       says_why, send_model, tensor_at)
from .sandbox import EXTENSIONS, PACKAGE_DIR, TRITON_CACHE, SandboxPolicy, confinement, default_limits, private_dir

RUN_TOKEN_VAR = "HARNESS_RUN_TOKEN"  # set by a run on all its launchers (see schedule/plan.py)
RUN_SCRATCH_PREFIX = "harness-run-"  # a run's workers' scratch dirs are in tempdir/<this><token>
# How much of an extensions dir is copied (a build's into the cache, a key dir's into a worker's
# scratch): load_inline's files lie two deep (the extension's dir, then its build files) and
# number a few dozen; the rest the candidate made.
KEPT_DEPTH = 4
KEPT_FILES = 10_000
TRITON_CACHE_BYTES = 256 << 20  # what Triton compiled in one evaluation that is kept, at most
LOG_TAIL_BYTES = 16_384
LOG_HEAD_BYTES = 1_048_576
POLL_SLICE_S = 0.1
EXIT_GRACE_S = 3.0
WATCH_INTERVAL_S = 0.5
# A large CPU tensor is memory glibc maps afresh and unmaps when freed, so a kernel with large
# outputs faults in its 4 KB pages on every call; on a VM whose host takes freed memory back (the
# 2-core CI kind) those faults cost more than the kernel and vary: a 256 MB relu output took
# 65,536 faults and 60 to 120 ms per call against 17 ms without them, and one reference's median
# was 72 ms in one run, 122 ms in the next. Backed by 2 MB pages (512 times fewer faults), the
# main job's six kernels varied less run to run (README, "CPU memory"). Both sides get it, so a
# speedup compares kernels, not page faults.
MALLOC_TUNABLES = "glibc.malloc.hugetlb=1"
# And in a CPU run's evaluation workers memory freed stays with the process for the next call's
# outputs, as CUDA's caching allocator keeps it on a GPU: no mmap for large blocks, no trimming,
# and no per-thread or fast bins, whose small chunks (a tensor's StorageImpl, freed just after its
# data) would keep a freed block from joining the heap's top, where the next request of the same
# size (posix_memalign asks a little more) finds it. A fresh 32 MB relu output then costs no
# faults and no zeroing (1.2 ms a call against 3.3 ms on the 2-core VM; 256 MB: 14 against 23 ms),
# tiny operators the same; and a candidate gains nothing by making its outputs' memory ready off
# the clock (a red team's pool of zeroed buffers, refilled between calls, had scored 1.2x to 2.0x
# against an honest 0.3x to 0.8x, 2026-12-04). Builds keep glibc's defaults (compilers).
REUSED_MEMORY_TUNABLES = ("glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1099511627776:"
                          "glibc.malloc.tcache_count=0:glibc.malloc.mxfast=0")


class Placement(BaseModel):
    """Where and how a worker runs. `env` is all it sees of the caller's environment (the
    scrubbed variables, CUDA_VISIBLE_DEVICES naming its one GPU, TORCH_CUDA_ARCH_LIST, MAX_JOBS
    and the like). `gpu` is that GPU's index as this process numbers it, where its tensors are
    opened; `cpus` are the cores it pins itself to; `sandbox` is the run's policy; `bytecode` is
    where it reads the harness's bytecode, where the harness keeps any (worker/bytecode.py)."""

    gpu: int | None = None
    gpu_node: str | None = None  # that GPU's device node, where known: the only GPU node its workers see
    cpus: list[int] | None = None
    env: dict[str, str] = {}
    bytecode: Path | None = None
    sandbox: SandboxPolicy = Field(default_factory=lambda: SandboxPolicy(mode=SandboxMode.off, limits=default_limits()))


def pci_address(index: int, domain_digits: int) -> str | None:
    """This process's GPU `index` by PCI address (domain:bus:device.function; nvidia-smi writes
    the domain with 8 digits, /proc/driver/nvidia with 4), None where torch does not say."""
    props = torch.cuda.get_device_properties(index)
    try:
        return f"{props.pci_domain_id:0{domain_digits}x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except AttributeError:
        return None


def gpu_context_pids(index: int) -> set[int] | None:
    """The processes holding a CUDA context on this process's GPU `index`, as the driver lists
    them (nvidia-smi, by the GPU's PCI address); None where that cannot be asked."""
    address = pci_address(index, 8)
    if address is None:
        return None
    try:
        listed = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader", f"--id={address}"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    pids = [line.strip() for line in listed.stdout.splitlines()]
    return {int(pid) for pid in pids if pid.isdigit()} if listed.returncode == 0 else None


def gpu_device_node(index: int) -> str | None:
    """/dev/nvidia<minor> of this process's GPU `index` (the driver numbers its nodes in its own
    order, which CUDA's need not follow), by its PCI address; None where that cannot be read."""
    address = pci_address(index, 4)
    try:
        information = Path(f"/proc/driver/nvidia/gpus/{address}/information").read_text() if address else ""
    except OSError:
        return None
    minor = re.search(r"Device Minor:\s*(\d+)", information)
    return f"/dev/nvidia{minor.group(1)}" if minor else None


class StopReason(str, enum.Enum):
    deadline = "deadline"  # no answer in time: the worker was killed
    died = "died"  # the process ended (a signal, an exit) without answering
    broke_protocol = "broke_protocol"  # a malformed message, or one of the wrong kind
    limit = "limit"  # the watchdog killed it: memory, processes or scratch space over the limit


class WorkerStop(BaseModel):
    """The worker gave no valid answer: a deadline passed, it died, it broke the protocol, or it
    passed a resource limit."""

    reason: StopReason
    error: str
    evidence: list[str]


class WorkerStopped(Exception):
    def __init__(self, stop: WorkerStop):
        super().__init__(stop.error)
        self.stop = stop


class ConfinementFailed(Exception):
    """A worker could not be confined as the run's sandbox policy says: a harness error, never a
    candidate's verdict."""


def describe_exit(returncode: int) -> str:
    if returncode == -signal.SIGXFSZ:
        return "killed by SIGXFSZ: a file it wrote (its log included) passed the file size limit"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def stop_run(token: str) -> None:
    """Kill every worker of a run, and everything each one started (an interrupted run)."""
    for launcher in processes.find_with_environment(f"{RUN_TOKEN_VAR}={token}".encode()):
        processes.kill_tree(launcher)


def run_scratch(token: str) -> Path:
    """Where a run's workers have their scratch dirs: one place to remove, however the run ends."""
    return Path(tempfile.gettempdir()) / f"{RUN_SCRATCH_PREFIX}{token}"


def remove_run_scratch(token: str) -> None:
    """Once the run's threads are done with them: the scratch dirs of workers that an interrupted
    run killed without closing."""
    processes.remove_tree(run_scratch(token))


def _scratch_dir(role: str, env: dict[str, str]) -> tuple[Path, str]:
    """A new scratch dir, and the run's dir holding it when the worker belongs to a run
    (`RUN_TOKEN_VAR`; else tempdir itself and "")."""
    token = env.get(RUN_TOKEN_VAR)
    run_dir = private_dir(str(run_scratch(token))) if token else ""
    return Path(tempfile.mkdtemp(prefix=f"harness-{role}-", dir=run_dir or None)), run_dir


class Watchdog:
    """Polls a worker's process tree and scratch space; past a limit it kills the tree (through
    `kill`, which knows whether the tree is still there) and says why. The scratch space is what
    the worker writes in `watched_dirs` together (its scratch dir, and where it builds into the
    build cache: its key dir, without namespaces), beyond what they held when it started (an
    earlier build's files in a key dir)."""

    def __init__(self, root: int, watched_dirs: list[Path], limits: Limits, kill):
        self.root, self.watched_dirs, self.limits, self._kill = root, watched_dirs, limits, kill
        self._held_before = self._written(held=0)
        self.violation: str | None = None
        self.wrote_too_much = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(WATCH_INTERVAL_S):
            violation = self._check()
            if violation:
                self.violation = violation
                self._kill()
                return

    def _check(self) -> str | None:
        tree = [self.root, *processes.descendants(self.root)]
        limits = self.limits
        if len(tree) > limits.processes:
            return f"ran {len(tree)} processes, over the limit of {limits.processes}; killed"
        memory = processes.resident_bytes(tree)
        if memory > limits.host_memory:  # pages its forks share counted once each: looked at closely
            memory = processes.proportional_bytes(tree)
        if memory > limits.host_memory:
            return (f"held {memory / 2**30:.2f} GiB of host memory, over the {limits.host_memory / 2**30:.2f} GiB "
                    "limit (--max-host-memory); killed")
        if self._written(self._held_before) - self._held_before > limits.scratch:
            self.wrote_too_much = True
            return f"wrote over {limits.scratch / 2**30:.2f} GiB to its scratch space (--max-scratch); killed"
        return None

    def _written(self, held: int) -> int:
        """Bytes below the watched dirs, counted only as far as it takes to pass the limit beyond `held`."""
        enough = self.limits.scratch + held
        return sum(processes.directory_bytes(directory, enough) for directory in self.watched_dirs)


MAX_READ_BUFFERS = 2
# A reply is metadata (tensors travel in shared memory): a worker that sends more is the
# candidate's doing, and must not make the parent allocate what it claims. multiprocessing's
# Connection refuses a longer message with this OSError (and is unusable afterwards).
MAX_REPLY_BYTES = 64 << 20
OVERLONG_MESSAGE = "bad message length"
# How long a worker's threads get to stop before its memory is read or fed: microseconds, usually,
# but each thread stops only once it is scheduled. Beside two busy loops and the e2e tests' builds
# on the 2-core VM, a reference's threads took over a second once, and its candidate was called a
# crash for it ("the reference worker died"); only a thread stuck in the kernel takes longer.
STOP_WAIT_S = 10.0


class ReadBuffers:
    """The parent's copies of a worker's CPU tensors, reused from one read to the next: a fresh
    256 MB copy per read cost the parent 65,000 page faults, and more time than the copy."""

    def __init__(self):
        self._free: list[bytearray] = []

    def take(self, size: int) -> bytearray:
        """A buffer of at least `size` bytes (the smallest free one that fits, else a new one)."""
        fitting = [buffer for buffer in self._free if len(buffer) >= size]
        if not fitting:
            return bytearray(size)
        chosen = min(fitting, key=len)
        self._free.remove(chosen)
        return chosen

    def give_back(self, buffer: bytearray) -> None:
        """Keep the largest few: a trial reads its outputs and its inputs at once, nothing more."""
        if buffer:
            self._free = sorted([*self._free, buffer], key=len)[-MAX_READ_BUFFERS:]


def sealed_memory_file(name: str) -> int:
    """A memory file that can grow but never shrink, with no seal added later: whoever maps it
    (the parent, its commit buffers to read and its feeds to write) is never faulted by a worker
    that truncates it, nor refused by one that seals it against growing or writing."""
    fd = os.memfd_create(name, os.MFD_ALLOW_SEALING)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    return fd


class CommitFile:
    """Parent side of the memory file a worker writes its CPU tensors to, mapped read-only. Sealed
    against shrinking before the worker gets it: a mapping can then never run past the file's end
    (which would kill the parent with SIGBUS), and the mapping is kept from one read to the next
    (copying out of it runs at memory speed: 0.022 s per 256 MB here, against 0.148 s by pread)."""

    def __init__(self):
        self.fd = sealed_memory_file("harness-commit")
        self._map: mmap.mmap | None = None
        self._bytes: torch.Tensor | None = None

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def bytes(self, end: int) -> torch.Tensor:
        """Its first `end` bytes (at most its size now, checked by the caller) as a uint8 tensor,
        valid until the next call."""
        if not end:
            return torch.empty(0, dtype=torch.uint8)
        if self._bytes is None or len(self._bytes) < end:
            self._unmap()
            # As much as was asked for, never what the worker grew the file to.
            self._map = mmap.mmap(self.fd, end, prot=mmap.PROT_READ)
            with warnings.catch_warnings():  # read-only is the point: nothing here writes to it
                warnings.simplefilter("ignore", UserWarning)
                self._bytes = torch.frombuffer(self._map, dtype=torch.uint8)
        return self._bytes[:end]

    def _unmap(self) -> None:
        self._bytes = None  # first: a mapping with a view into it cannot close
        if self._map is not None:
            self._map.close()
            self._map = None

    def close(self) -> None:
        self._unmap()
        os.close(self.fd)


class Worker:
    """A running worker process. Use as a context manager so it is always killed.

    Starting one boots it: confined, torch imported, waiting. `start` then gives it its job (a
    lane can boot the next candidate's worker while the current one is judged: schedule/lane.py).
    With namespaces every worker builds and loads its extensions in its own scratch dir; without
    them it needs its key dir of the build cache when it boots (`key_dir`). One thread makes and
    closes it: its launcher is sent SIGCONT when that thread exits (confine.on_parent_death)."""

    def __init__(self, placement: Placement, *, role: str, device: str, timeout_s: float, key_dir: Path | None = None,
                 boot_cpus: list[int] | None = None, pace: Pace = REAL_TIME, warm_ahead: bool = False,
                 wrapper: list[str] | None = None):
        """`pace` runs the deadlines (a run that freezes its workers while it times stops their
        clock meanwhile) and guards the start; with `warm_ahead` it also readies, while it boots,
        what loading a reference needs and, unless its job has come by then, what a Triton
        kernel's first launch computes (child.warm_ahead). `wrapper`: a command the worker
        becomes once confined, its own as the last arguments (Confinement.wrapper); the toolkit
        it lies in (its directory's parent) is readable."""
        self.timeout_s, self.gpu, self.placement, self.clock = timeout_s, placement.gpu, placement, pace.clock
        self.scratch, run_dir = _scratch_dir(role, placement.env)
        self.sees_gpu = device == "cuda" and role != "build"
        self.reuses_memory = device == "cpu" and role != "build"
        self.confinement = confinement(placement.sandbox, self.scratch, sees_gpu=self.sees_gpu, env=placement.env,
                                       key_dir=key_dir, bytecode=placement.bytecode, gpu_node=placement.gpu_node,
                                       cuda_run=device == "cuda")
        update: dict = {"boot_cpus": boot_cpus, "run_dir": run_dir}
        if wrapper:
            toolkit = os.path.dirname(os.path.dirname(os.path.realpath(wrapper[0])))
            update |= {"wrapper": list(wrapper), "read": [*self.confinement.read, toolkit]}
        self.confinement = self.confinement.model_copy(update=update)
        self.key_dir = None if self.confinement.namespaces else key_dir
        spec_path = self.scratch / "launch.json"
        spec_path.write_text(self.confinement.model_dump_json())
        self.log = tempfile.TemporaryFile()  # unlinked: the worker cannot swap it for a FIFO or a link
        self.buffer = CommitFile()  # the worker writes its CPU tensors here
        self._feed = CommitBuffer(sealed_memory_file("harness-feed"))  # and finds a timed call's inputs here (CPU runs)
        self._read_buffers = ReadBuffers()
        self._worker_pid: int | None = None
        self._worker_pidfd = -1
        self._held_stopped = False  # inside `stopped_all`: a block nested in it keeps the tree stopped
        self._known_pids: list[int] = []  # what the last `stopped_all` stopped, its launcher aside
        self.sent = 0  # commands sent: what a worker's buffers hold is its last command's
        parent_sock, child_sock = socket.socketpair()
        # The launcher reads end-of-file at its end once this process is gone, however it went (launch.py).
        launcher_end, self._lifeline = os.pipe()
        try:
            with pace.launching():
                self.process = subprocess.Popen(
                    [sys.executable, "-I", "-c", BOOTSTRAP, PACKAGE_DIR, str(spec_path), str(child_sock.fileno()),
                     str(self.buffer.fd), str(self._feed.fd), str(launcher_end)],
                    pass_fds=[child_sock.fileno(), self.buffer.fd, self._feed.fd, launcher_end],
                    stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.scratch,
                    env=self._env(), start_new_session=True,
                )
        except BaseException:  # not started (a stopping run refused it, or the spawn failed): nothing of it is kept
            os.close(self._lifeline)
            for opened in (parent_sock, self.log, self.buffer, self._feed):
                opened.close()
            processes.remove_scratch(str(self.scratch), run_dir)
            raise
        finally:
            child_sock.close()
            os.close(launcher_end)
        self.given_code = False  # whether it was handed candidate code (start)
        self.conn = Connection(parent_sock.detach())
        self._reaping = threading.Lock()  # the launcher's pid stays ours until kill() reaps it
        watched = [self.scratch] + ([self.key_dir] if self.key_dir is not None else [])
        self.watchdog = Watchdog(self.process.pid, watched, placement.sandbox.limits, self._kill_tree) \
            if placement.sandbox.mode is not SandboxMode.off else None
        if warm_ahead:
            self._send_early(Command(op="boot"))

    def _env(self) -> dict[str, str]:
        env = dict(self.placement.env)
        env.pop("PYTHONPATH", None)  # the import path is the parent's, set by the launcher
        workdir = self.confinement.workdir
        extensions = str(self.key_dir) if self.key_dir else self.confinement.extensions_dir
        env.update(HOME=workdir, TMPDIR=workdir, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
                   GLIBC_TUNABLES=":".join(filter(None, [env.get("GLIBC_TUNABLES"), MALLOC_TUNABLES,
                                                         REUSED_MEMORY_TUNABLES if self.reuses_memory else None])),
                   TORCH_EXTENSIONS_DIR=extensions, TRITON_CACHE_DIR=f"{extensions}/{TRITON_CACHE}")
        if self.confinement.dev is not None and env.get("CUDA_VISIBLE_DEVICES", "").isdigit():
            # Its /dev holds one GPU's node, which the driver then numbers 0: the index it has among
            # all of them names no GPU there (CUDA: "no CUDA GPUs are available"). A UUID still does.
            env["CUDA_VISIBLE_DEVICES"] = "0"
        return env

    @property
    def extensions(self) -> Path:
        """Where (as this process sees it) the worker builds its extensions."""
        return self.key_dir or self.scratch / EXTENSIONS

    def start(self, job: WorkerJob, code: str | None, problem_source: str, key_dir: Path | None = None) -> None:
        """Hand the worker its job: its own copies of the problem and the code (a candidate that
        rewrites the files it came from changes nothing for this run) and, with namespaces, a
        copy of its key dir's builds (taken under the key's lock)."""
        if key_dir is not None and self.key_dir is None:  # bounded and link-free: a cache may predate such copies
            processes.copy_tree(key_dir, self.extensions, KEPT_DEPTH, KEPT_FILES, ())
        workdir = self.confinement.workdir
        update: dict = {"cpus": self.placement.cpus} if self.placement.cpus else {}
        (self.scratch / "problem.py").write_text(problem_source)
        update["problem_path"] = f"{workdir}/problem.py"
        if code is not None:
            (self.scratch / "candidate.py").write_text(code)
            update["candidate_path"] = f"{workdir}/candidate.py"
            self.given_code = True
        self._send_early(Command(op="job", job=job.model_copy(update=update)))

    @property
    def compiled_triton(self) -> bool:
        """Whether Triton seems to have compiled into this worker's own extensions dir (a hint,
        looked at before the worker is killed: `keep_triton_cache` looks again after)."""
        return self.key_dir is None and (self.scratch / EXTENSIONS / TRITON_CACHE).is_dir()

    def keep_triton_cache(self, key_dir: Path) -> None:
        """Copy what Triton compiled at the candidate's calls in this worker's own extensions
        dir into its key dir, where the next worker given that key finds it (`start`): once,
        the worker killed first, so nothing changes the files while they are copied, bounded
        (`copy_tree`, TRITON_CACHE_BYTES) and whole or not at all. (Without
        a copy, every evaluation of a Triton softmax compiled it again: 1.3 to 2.7 s of a warm
        run's correctness phase on an H100.) Call it holding the key's lock."""
        kept = key_dir / TRITON_CACHE
        if self.key_dir is not None or os.path.lexists(kept):
            return  # it compiled into the key dir itself, or an earlier one is kept
        self.kill()  # before looking: a live worker could swap a directory for a link meanwhile
        extensions = self.scratch / EXTENSIONS
        if extensions.is_symlink() or not extensions.is_dir():  # the copy refuses a link only at its top
            return
        partial = key_dir / f".{TRITON_CACHE}.{os.getpid()}.{threading.get_ident()}"
        try:  # only a cache: a copy that fails (a full disk) leaves none, and the next evaluation compiles again
            processes.copy_tree(extensions / TRITON_CACHE, partial, KEPT_DEPTH - 1, KEPT_FILES, (), TRITON_CACHE_BYTES)
            if partial.is_dir():
                os.rename(partial, kept)
        except OSError:
            pass
        finally:
            processes.remove_tree(partial)

    def _send_early(self, command: Command) -> None:
        """A command that may reach the worker while it boots: one that died meanwhile is found
        by the reply to come."""
        self.sent += 1
        try:
            send_model(self.conn, command)
        except OSError:
            pass

    @property
    def pid(self) -> int:
        """The launcher's: the root of the worker's process tree."""
        return self.process.pid

    @property
    def worker_pid(self) -> int:
        """The worker's own process, whose memory holds the tensors it locates: the launcher's
        first child, which the launcher forked before any candidate code ran. A pidfd of it is
        kept (`_stop_worker_at_once`)."""
        if self._worker_pid is None:
            self._find_worker()
        return self._worker_pid

    def _find_worker(self) -> None:
        pid = processes.first_child(self.pid)
        if pid is None:
            raise OSError("the worker's process is gone")
        pidfd = os.pidfd_open(pid)
        if pid not in processes.children(self.pid):  # reaped and its pid taken meanwhile
            os.close(pidfd)
            raise OSError("the worker's process is gone")
        self._worker_pid, self._worker_pidfd = pid, pidfd

    def _stop_worker_at_once(self) -> None:
        """SIGSTOP to the worker process, through its pidfd: that process alone, never one that
        took its pid once it was gone."""
        try:
            if self._worker_pid is None:
                self._find_worker()
            signal.pidfd_send_signal(self._worker_pidfd, signal.SIGSTOP)
        except OSError:  # gone: the tree's freeze finds what is left
            pass

    @property
    def protections(self) -> list[str]:
        return self.confinement.protections()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _read_log(self, offset: int, limit: int) -> str:
        try:
            return os.pread(self.log.fileno(), limit, offset).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def log_head(self, limit: int = LOG_HEAD_BYTES) -> str:
        """The start of the log: where a build prints its first errors."""
        return self._read_log(0, limit)

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        try:
            size = os.fstat(self.log.fileno()).st_size
        except (OSError, ValueError):
            return ""
        return self._read_log(max(0, size - limit), limit)

    def _stopped(self, reason: StopReason, error: str) -> WorkerStopped:
        self.kill()
        return WorkerStopped(WorkerStop(reason=reason, error=error, evidence=self.log_tail(2000).splitlines()[-10:]))

    def exited(self) -> bool:
        """Whether its process has ended (it is reaped only by `kill`)."""
        return self._exit_status() is not None

    def _exit_status(self) -> int | None:
        """The launcher's exit status once it has ended, without reaping it: until kill() does,
        its pid cannot be reused, so killing what is left of its tree never hits a stranger."""
        if self.process.returncode is not None:
            return self.process.returncode
        info = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def finish(self, timeout_s: float) -> int | None:
        """Tell the worker there are no more commands (its channel closed: it exits as a process
        does, so a wrapper reports at its exit) and wait up to `timeout_s` for it to end: its exit
        code (negative: the signal that ended it), None if it had not ended by then."""
        self.conn.close()
        return self._wait_exit(timeout_s)

    def scratch_text(self, name: str, limit: int) -> str:
        """The start, up to `limit` bytes, of a file the worker wrote in its scratch dir ("" if
        none): opened without following a link, which the worker may have planted."""
        try:
            fd = os.open(self.scratch / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return ""
        try:
            return os.read(fd, limit).decode("utf-8", "replace") if stat.S_ISREG(os.fstat(fd).st_mode) else ""
        except OSError:
            return ""
        finally:
            os.close(fd)

    def _wait_exit(self, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while (status := self._exit_status()) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return status

    def _broke_or_died(self, error: str, phase: str) -> WorkerStopped:
        """What the parent did to a stopped worker failed (`error`): where the worker had ended
        (unreaped: its launcher is stopped too), how it ended (beside two busy loops one had, and
        its outputs' memory was gone, 2026-12-07); else it broke the protocol."""
        worker = self._worker_pid or processes.first_child(self.pid)
        code = processes.ended_unreaped(worker) if worker is not None else None
        if code is not None or self._exit_status() is not None:
            return self._died(phase, code)
        if worker is None or not os.path.exists(f"/proc/{worker}"):
            # Gone altogether: its launcher reaped it and is ending as it ended (beside two busy
            # loops the launcher was still on its way out when the read failed). Frozen on its way
            # out, it is let go to end: with its worker gone it has nothing else to run.
            processes.signal_all([self.pid], signal.SIGCONT)
            return self._died(phase, self._wait_exit(EXIT_GRACE_S))
        return self._stopped(StopReason.broke_protocol, error)

    def _died(self, phase: str, code: int | None = None) -> WorkerStopped:
        """`code`: how the worker ended, where it is known before its launcher's end."""
        code = self._exit_status() if code is None else code
        if code == CONFINE_FAILED and not self.given_code:  # once it has code, that code may exit so too
            self.kill()
            raise ConfinementFailed(f"a {phase} worker could not be confined: {self.log_tail(400).strip()}")
        if self.watchdog is not None and self.watchdog.violation:
            return self._stopped(StopReason.limit, f"worker {self.watchdog.violation} (during {phase})")
        how = describe_exit(code) if code is not None else "closed its channel"
        return self._stopped(StopReason.died, f"worker {how} during {phase}")

    def _wait_readable(self, phase: str, timeout_s: float | None = None) -> None:
        timeout_s = timeout_s or self.timeout_s
        deadline = self.clock() + timeout_s
        # Slices rather than one long poll: a dead worker whose children still hold the socket
        # would otherwise look alive until the deadline.
        while not self.conn.poll(POLL_SLICE_S):
            if self._exit_status() is not None and not self.conn.poll(0):
                raise self._died(phase)
            if self.clock() > deadline:
                raise self._stopped(StopReason.deadline, f"no answer within {timeout_s:g} s during {phase}; killed")

    def _recv(self, phase: str, timeout_s: float | None = None) -> bytes:
        self._wait_readable(phase, timeout_s)
        try:
            return self.conn.recv_bytes(MAX_REPLY_BYTES)
        except (EOFError, OSError) as error:
            if str(error) == OVERLONG_MESSAGE:
                raise self._stopped(StopReason.broke_protocol,
                                    f"worker sent a message over {MAX_REPLY_BYTES >> 20} MB during {phase}") from None
            self._wait_exit(EXIT_GRACE_S)  # it is exiting; learn how
            raise self._died(phase) from None

    def reply(self, phase: str, timeout_s: float | None = None) -> Reply:
        raw = self._recv(phase, timeout_s)
        try:
            reply = REPLY.validate_json(raw)
        except ValueError:
            raise self._stopped(StopReason.broke_protocol, f"worker sent a malformed message during {phase}") from None
        if not says_why(reply):
            raise self._stopped(StopReason.broke_protocol, f"worker said it failed without saying how during {phase}")
        return reply

    def request(self, command: Command, phase: str) -> Reply:
        self.send(command, phase)
        return self.answer(command, phase)

    def send(self, command: Command, phase: str) -> None:
        """Send a command without waiting for its answer (`answer` then waits)."""
        self.sent += 1
        try:
            send_model(self.conn, command)
        except OSError:
            self._wait_exit(EXIT_GRACE_S)
            raise self._died(f"before {phase}") from None

    def answer(self, command: Command, phase: str) -> Reply:
        """The reply to `command`, sent before."""
        reply = self.reply(phase)
        if not fits(command, reply):
            raise self._stopped(StopReason.broke_protocol,
                                f"worker answered {command.op} with the wrong kind of message during {phase}")
        return reply

    @contextlib.contextmanager
    def reading(self, refs: list[TensorRef], phase: str, held: bool = False,
                located_limit: int = 0) -> Iterator[list[torch.Tensor]]:
        """The worker's tensors, read in place and valid only inside this block: CUDA ones mapped
        from its allocations (the worker holds them until its next command), CPU ones copied out
        of its commit buffer, or out of its own memory (located ones, at most `located_limit`
        bytes of them), into one of the parent's read buffers, which the next block reuses.
        With `held`, CPU ones of the commit buffer are views of it instead, and the worker stays
        stopped for the whole block: for tensors passed straight on (a reference's inputs, fed
        to a timed worker), which then cost one copy, not two."""
        mappings: list[cuda_ipc.Mapping] = []
        host = bytearray()
        try:
            with contextlib.ExitStack() as still:
                still.enter_context(self._held_still(refs, phase))
                try:
                    needed = self._host_bytes(refs, located_limit)
                    host = bytearray() if held else self._read_buffers.take(needed)
                    tensors = self._read_all(refs, None if held else host, mappings)
                except (ValueError, RuntimeError, OSError, TypeError, OverflowError, MemoryError) as exc:
                    raise self._stopped(StopReason.broke_protocol,
                                        f"worker sent an unreadable tensor during {phase}: {exc}") from None
                if not held:
                    still.close()  # copied out: the worker goes on
                yield tensors
                del tensors  # nothing may keep a view of memory that is about to be unmapped or reused
        finally:
            for mapping in mappings:
                mapping.close()
            self._read_buffers.give_back(host)

    @contextlib.contextmanager
    def _held_still(self, refs: list[TensorRef], phase: str) -> Iterator[None]:
        """While CPU tensors are copied out of the commit buffer, the worker's whole tree is
        stopped (every thread), and it goes on once they are copied: a thread of the candidate's
        cannot write into the buffer during the copy, as it could keep on computing an output
        after its reply (docs/threat-model.md). CUDA tensors are read from the worker's own
        allocations, which stopping its processes would not keep still."""
        if not any(ref.device == "cpu" for ref in refs):
            yield
            return
        with self.stopped_all(f"its outputs to be read during {phase}"):
            yield

    @contextlib.contextmanager
    def stopped_all(self, purpose: str) -> Iterator[float]:
        """The worker's whole tree stopped (every thread of it) for the block; one nested in
        another resumes nothing at its end (what the outer block reads in several steps, the
        worker sees none of before the last). It yields the CPU time, in ms, the worker's
        processes spent from just before they were signalled until they had all stopped (0.0
        nested): work done then was seen by no clock. The worker process is signalled first, its
        tree looked up after: that reads a file per thread, milliseconds for a worker of thousands,
        which its other threads would have to themselves. A block still open after the phase's timeout has
        its tree killed: reading memory a worker backs with a thread of its own (a FUSE file, a
        userfaultfd, however it got one) waits on that thread, stopped; killed, it lets go."""
        if self._held_stopped:
            yield 0.0
            return
        frozen: set[int] = set()
        fired = threading.Event()
        overdue = threading.Timer(self.timeout_s, lambda: (fired.set(), self._kill_tree()))
        overdue.daemon = True
        try:
            # Accounted: what the last stop found (a process started since counts whole); nothing
            # at a worker's first stop, whose processes' time so far is their boot and load.
            accounted = self._known_pids
            cpu_before_ns = processes.cpu_ns(accounted)
            self._stop_worker_at_once()
            if not processes.freeze(lambda: processes.tree(self.pid), frozen, STOP_WAIT_S):
                raise self._broke_or_died(f"worker's threads did not stop for {purpose}", purpose)
            self._known_pids = sorted(frozen - {self.pid})  # the launcher's own time is the harness's
            unobserved_ms = max(0, processes.cpu_ns(self._known_pids) - cpu_before_ns) / 1e6 if accounted else 0.0
            self._held_stopped = True
            overdue.start()
            try:
                yield unobserved_ms
            except (WorkerStopped, OSError, ValueError):
                if fired.is_set():
                    raise self._stopped(StopReason.deadline, f"stopped for {purpose}, it was not done within "
                                        f"{self.timeout_s:g} s (memory that kept the parent waiting): killed") from None
                raise
        finally:
            overdue.cancel()
            self._held_stopped = False
            processes.signal_all(frozen, signal.SIGCONT)

    def feed(self, tensors: list[torch.Tensor], phase: str) -> list[TensorRef]:
        """Write a timed call's inputs (CPU tensors) into the worker's feed file, where its next
        command finds them. The worker is stopped meanwhile: none of its threads sees them before
        that command is sent, so whatever it computes from them, it computes while timed."""
        with self.stopped_all(f"its inputs to be written during {phase}"):
            try:
                return self._feed.write(tensors)
            except OSError as exc:  # the file is the worker's too: whatever it did to it, it is its failure
                raise self._broke_or_died(f"its inputs could not be written into its feed file during {phase}: {exc}",
                                          phase) from None

    def spoil(self, addresses: list[int], phase: str) -> None:
        """Garbage written at `addresses` in the worker's memory (its last timed command's outputs,
        read already), its whole tree stopped meanwhile: memory it returns again must be written
        whole again, or the garbage shows when that output is checked."""
        with self.stopped_all(f"its outputs to be spoiled during {phase}"):
            try:
                processes.spoil_memory(self.worker_pid, addresses)
            except OSError as exc:
                raise self._broke_or_died(f"the outputs it described could not be written during {phase}: {exc}",
                                          phase) from None

    @contextlib.contextmanager
    def fed_back(self, refs: list[TensorRef], phase: str) -> Iterator[list[torch.Tensor]]:
        """The inputs last fed to it (`refs`, as `feed` answered), as its forward left them:
        views of its feed file, valid inside the block, its whole tree stopped meanwhile."""
        with self.stopped_all(f"its inputs to be read back during {phase}"):
            tensors = self._feed.tensors(refs)
            yield tensors
            del tensors  # no view may outlive the block: the worker may write there again

    def _host_bytes(self, refs: list[TensorRef], located_limit: int = 0) -> int:
        """What the CPU tensors need in a read buffer; checked against the commit buffer's size
        (located ones: against `located_limit`) before anything is allocated (a worker's reply
        cannot make the parent allocate more)."""
        located = sum(aligned(ref.span_bytes) for ref in refs if ref.device == "cpu" and ref.address is not None)
        if located > located_limit:
            raise ValueError(f"the located tensors described add up to {located} bytes, more than the "
                             f"{located_limit} their expected outputs allow")
        written = self.buffer.size()
        cpu = [ref for ref in refs if ref.device == "cpu" and ref.address is None]
        if any(ref.offset < 0 or ref.offset + ref.span_bytes > written for ref in cpu):
            raise ValueError("a CPU tensor runs past the worker's commit buffer")
        needed = sum(aligned(ref.span_bytes) for ref in cpu)
        # A worker writes its tensors one after another, so together they fit the buffer: the same
        # bytes described a thousand times over would otherwise be copied a thousand times.
        if needed > written:
            raise ValueError(f"the CPU tensors described add up to {needed} bytes, more than the "
                             f"worker's commit buffer holds ({written})")
        return needed + located

    def _read_all(self, refs: list[TensorRef], host: bytearray | None, mappings: list) -> list[torch.Tensor]:
        """CPU tensors copied into `host`, or (None) views of the commit buffer itself."""
        tensors, offset = [], 0
        whole = torch.frombuffer(host, dtype=torch.uint8) if host else torch.empty(0, dtype=torch.uint8)
        written = self.buffer.bytes(max((r.offset + r.span_bytes for r in refs if r.device == "cpu" and r.address is None),
                                        default=0))
        for ref in refs:
            if ref.dtype not in ALLOWED_DTYPES:
                raise ValueError(f"unsupported dtype {ref.dtype}")
            span = ref.span_bytes
            if ref.device == "cpu" and ref.address is not None:
                raw = whole[offset:offset + span] if host is not None else torch.empty(span, dtype=torch.uint8)
                if span:
                    processes.read_memory(self.worker_pid, ref.address, raw.data_ptr(), span)
                offset += aligned(span)
            elif ref.device == "cpu" and host is None:
                raw = written[ref.offset:ref.offset + span]
            elif ref.device == "cpu":
                raw = whole[offset:offset + span].copy_(written[ref.offset:ref.offset + span])
                offset += aligned(span)
            else:
                if ref.ipc_handle is None:
                    raise ValueError("a CUDA tensor without an IPC handle")
                mappings.append(cuda_ipc.Mapping(ref.ipc_handle, self.gpu if self.gpu is not None else 0))
                raw = mappings[-1].bytes(ref.offset, span)
            tensors.append(tensor_at(raw, ref))
        return tensors

    def _kill_tree(self) -> None:
        with self._reaping:
            if self.process.returncode is None:
                processes.kill_tree(self.process.pid)

    def kill(self) -> None:
        """Kill the worker's whole process tree (the launcher last, so no orphan escapes it), then
        reap it. One killed for writing too much into its key dir of the build cache leaves none of
        that dir: the cache keeps no junk, and the code is built again where it is needed."""
        if self.watchdog is not None:
            self.watchdog.stop()
        with self._reaping:
            if self.process.returncode is None:
                processes.kill_tree(self.process.pid)
                self.process.wait()
        if self.key_dir is not None and self.watchdog is not None and self.watchdog.wrote_too_much:
            processes.remove_tree(self.key_dir)

    def close(self) -> None:
        """Kill the worker and free what the parent holds for it. Nothing a worker would do at
        exit is needed (its log is unbuffered, its outputs read), and one asked to exit took 0.1
        to 0.2 s to wind torch and CUDA down (H100), a candidate's whole exit phase; a spare still
        booting would not even read the request before its boot was done (six spares left at the
        end of a GPU run took 5.8 s to close)."""
        self.kill()
        if self._lifeline >= 0:  # after the kill: the launcher is gone and leaves the scratch dir to us
            os.close(self._lifeline)
            self._lifeline = -1  # a second close closes no one else's fd of the same number
        if self._worker_pidfd >= 0:
            os.close(self._worker_pidfd)
            self._worker_pidfd = -1
        self.conn.close()
        self.log.close()
        self.buffer.close()
        self._feed.close()
        processes.remove_tree(self.scratch)

"""A worker's process tree, seen from the parent through /proc: who is in it, how much memory
it holds, and how to stop all of it at once (a fork bomb included); and the files it leaves,
copied or removed whatever shape a candidate gave them."""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
FREEZE_ROUNDS = 20  # freeze passes: a process that forks while being frozen is caught by the next one
STOP_WAIT_S = 0.1  # SIGSTOP lands asynchronously: how long a pass waits for it before looking again
STOP_POLL_S = (0.0001, 0.002)  # look again this soon (a thread stops within microseconds), backing off to this
STOPPED_STATES = ("T", "t", "Z", "X", None)


def children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                found += [int(child) for child in listed.read().split()]
    except (OSError, ValueError):
        pass
    return found


def descendants(root: int) -> list[int]:
    """Every process below `root` (not `root` itself), breadth first."""
    found, frontier = [], [root]
    while frontier:
        below = [child for pid in frontier for child in children(pid)]
        found += below
        frontier = below
    return found


def signal_all(pids: Iterable[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def state(stat: str) -> str | None:
    """The state letter (R, S, T...) in a /proc stat file, None once its process is gone."""
    try:
        return Path(stat).read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def ended_unreaped(pid: int) -> int | None:
    """How a process that has ended but is not reaped yet (a zombie: its parent stopped, say) ended,
    as Popen's returncode says it (negative: the signal); None while it runs or once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] not in ("Z", "X") or len(fields) < 50:
        return None
    status = int(fields[49])  # the stat file's 52nd field: the wait status
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def stopped(pid: int) -> bool:
    """Whether every thread of the process is stopped (or it is gone): SIGSTOP stops a process's
    threads one by one, each as it next leaves the kernel."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return all(state(f"/proc/{pid}/task/{task}/stat") in STOPPED_STATES for task in tasks)


def freeze(find: Callable[[], Iterable[int]], frozen: set[int], wait_s: float = STOP_WAIT_S) -> bool:
    """SIGSTOP what `find()` lists, adding it to `frozen`, until it lists nothing new: a stopped
    process cannot fork, and one stopped mid-fork shows its child on the next look. Each pass
    waits up to `wait_s` for its processes to stop; whether they all did."""
    for _ in range(FREEZE_ROUNDS):
        found = [pid for pid in find() if pid not in frozen]
        if not found:
            return all(stopped(pid) for pid in frozen)
        signal_all(found, signal.SIGSTOP)
        frozen.update(found)
        deadline, pause = time.monotonic() + wait_s, STOP_POLL_S[0]
        while not all(stopped(pid) for pid in found) and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(2 * pause, STOP_POLL_S[1])
    return False


def cpu_ns(pids: Iterable[int]) -> int:
    """The CPU time the processes `pids` have used so far, all their threads' (ended ones too), in
    ns: their process CPU clocks (clock_getcpuclockid's, CPUCLOCK_SCHED), 0 for one that is gone."""
    total = 0
    for pid in pids:
        try:
            total += time.clock_gettime_ns((~pid << 3) | 2)
        except OSError:
            pass
    return total


def first_child(pid: int) -> int | None:
    """The child of `pid` that started first (a launcher's worker: every other child it has is an
    orphan of the worker's, adopted later)."""
    def started(child: int) -> int:
        try:
            return int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[19])
        except (OSError, ValueError, IndexError):
            return 2**63
    return min(children(pid), key=started, default=None)


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec),
                                   ctypes.c_ulong, ctypes.c_ulong]
_libc.process_vm_readv.restype = ctypes.c_ssize_t
_libc.process_vm_writev.argtypes = _libc.process_vm_readv.argtypes
_libc.process_vm_writev.restype = ctypes.c_ssize_t
GARBAGE = b"\xff\xff\xff\xff"  # a NaN as a float32, two as float16 or bfloat16; -1 as an integer
IOV_MAX = 1024


def read_memory(pid: int, address: int, into: int, length: int) -> None:
    """Copy `length` bytes at `address` in process `pid`'s memory to `into` (an address of ours):
    what a worker of this user left there (process_vm_readv; a worker that made itself
    non-dumpable, or described memory it has not mapped, raises OSError)."""
    done = 0
    while done < length:
        local, remote = _IoVec(into + done, length - done), _IoVec(address + done, length - done)
        read = _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if read < 0:
            code = ctypes.get_errno()
            why = (" (a worker that made itself non-dumpable, or a host whose Yama ptrace_scope is 2 or 3)"
                   if code == errno.EPERM else "")
            raise OSError(code, f"reading {length} bytes of process {pid}'s memory: {os.strerror(code)}{why}")
        if read == 0:
            raise OSError(errno.EFAULT, f"reading process {pid}'s memory stopped after {done} of {length} bytes")
        done += read


def spoil_memory(pid: int, addresses: list[int]) -> None:
    """Write GARBAGE at each of `addresses` in process `pid`'s memory: process_vm_writev, and where
    that stops short (a page the process made read-only), /proc/<pid>/mem, which writes such pages
    as a debugger does. OSError where neither can (memory it has not mapped, or shares read-only)."""
    for start in range(0, len(addresses), IOV_MAX):
        chunk = addresses[start:start + IOV_MAX]
        source = ctypes.create_string_buffer(GARBAGE * len(chunk), len(GARBAGE) * len(chunk))
        local = _IoVec(ctypes.addressof(source), len(source))
        remote = (_IoVec * len(chunk))(*(_IoVec(address, len(GARBAGE)) for address in chunk))
        if _libc.process_vm_writev(pid, ctypes.byref(local), 1, remote, len(chunk), 0) != len(source):
            _force_words(pid, chunk)


def _force_words(pid: int, addresses: list[int]) -> None:
    descriptor = os.open(f"/proc/{pid}/mem", os.O_WRONLY)
    try:
        for address in addresses:
            if os.pwrite(descriptor, GARBAGE, address) != len(GARBAGE):
                raise OSError(errno.EFAULT, f"writing process {pid}'s memory at {address:#x} stopped short")
    finally:
        os.close(descriptor)


def reading_refused() -> str | None:
    """Why this host will not let the harness read a child's memory (Yama's ptrace_scope 2 without
    CAP_SYS_PTRACE, or 3; a security module's rule; a container's seccomp profile), or None: tried
    once, on a child of our own that only waits on its stdin."""
    with subprocess.Popen([sys.executable, "-I", "-S", "-c", "import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as child:
        try:
            with open(f"/proc/{child.pid}/maps") as maps:
                start = next(int(line.split("-")[0], 16) for line in maps if line.split()[1].startswith("r"))
            probe = ctypes.create_string_buffer(8)
            read_memory(child.pid, start, ctypes.addressof(probe), len(probe))
        except (OSError, ValueError, IndexError, StopIteration) as exc:
            return _refusal(exc)
        finally:
            child.kill()
    return None


def _refusal(exc: Exception) -> str:
    reason = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else str(exc)
    try:
        return f"{reason}; Yama's ptrace_scope is {Path('/proc/sys/kernel/yama/ptrace_scope').read_text().strip()}"
    except OSError:
        return reason  # no Yama here


def tree(root: int) -> list[int]:
    return [root, *descendants(root)]


def kill_descendants(root: int) -> None:
    """Kill everything below `root`: freeze the tree until no new process appears, then kill it all."""
    frozen: set[int] = set()
    freeze(lambda: descendants(root), frozen)
    signal_all(sorted(frozen), signal.SIGKILL)


def kill_tree(root: int) -> None:
    """Kill `root` and everything below it; `root` (a launcher, the subreaper of its tree) goes
    last, so no orphan leaves the tree before it is killed."""
    kill_descendants(root)
    signal_all([root], signal.SIGKILL)


TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal; guest time is in user already.
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def busy_ticks() -> int | None:
    """Every core's busy time so far (/proc/stat, clock ticks), time the hypervisor gave another
    machine (steal) included; None where it cannot be read."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
        return sum(int(fields[index]) for index in BUSY_FIELDS)
    except (OSError, ValueError, IndexError):
        return None


def cpu_ticks(pids: Iterable[int]) -> dict[tuple[int, int], int]:
    """Per process (pid and start time, so that a pid reused is another process), its user and
    system time so far and its reaped children's (clock ticks). One gone is left out."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            found[(pid, int(fields[19]))] = sum(int(fields[index]) for index in (11, 12, 13, 14))
        except (OSError, ValueError, IndexError):
            continue
    return found


class OthersCpu:
    """Around a block of at least MIN_SECONDS: how many cores, on average, processes other than
    `ours()` kept busy (else, or where /proc/stat cannot be read, None). Ours count by what each
    one present at both ends used meanwhile, a child's time once its parent reaps it included:
    one that ends during the block without a reaper of ours counts as nobody's, not with its
    whole life's time. Ticks are 10 ms apart: a shorter block's figure would be mostly rounding.
    On the 2-core VM, with the timed process busy: 0.0 to 0.05 cores alone in blocks of 0.2 to
    0.3 s (0.1 in blocks of 0.1 s), 0.82 to 1.41 beside one or two busy loops."""

    MIN_SECONDS = 0.25

    def __init__(self, ours: Callable[[], Iterable[int]]):
        self.ours = ours
        self.cores: float | None = None

    def __enter__(self) -> OthersCpu:
        self._began, self._busy, self._ours_ticks = time.monotonic(), busy_ticks(), cpu_ticks(self.ours())
        return self

    def __exit__(self, *exc) -> None:
        busy, seconds = busy_ticks(), time.monotonic() - self._began
        if busy is None or self._busy is None or seconds < self.MIN_SECONDS:
            return
        now = cpu_ticks(self.ours())
        ours = sum(ticks - self._ours_ticks.get(key, 0) for key, ticks in now.items())
        cores = (busy - self._busy - ours) / TICKS_PER_S / seconds
        self.cores = round(min(max(0.0, cores), os.cpu_count() or 1), 3)


def resident_bytes(pids: list[int]) -> int:
    """The processes' resident memory, summed: quick to read (statm), but pages forked processes
    share copy-on-write count once per process. An upper bound of `proportional_bytes`."""
    return sum(_resident(pid) for pid in pids)


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


def proportional_bytes(pids: list[int]) -> int:
    """The memory the processes hold together, each shared page split between its sharers (Pss
    in smaps_rollup; the kernel walks their page tables for it, milliseconds per GiB mapped). A
    process whose rollup cannot be read (one made non-dumpable, seen by a caller without root)
    counts its whole resident memory: unreadable must never mean free."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                total += next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
        except (OSError, ValueError, IndexError, StopIteration):
            total += _resident(pid)
    return total


def directory_bytes(path: Path, stop_at: int) -> int:
    """Disk used below `path` (allocated blocks, links not followed), counted only as far as
    `stop_at`: a tree of a million files is not walked to its end."""
    total, stack = 0, [str(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512 + 1  # an empty file still costs an inode
                    if total > stop_at:
                        return total
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def find_with_environment(marker: bytes) -> list[int]:
    """Processes whose environment holds `marker` (NAME=value): a run's launchers."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def remove_tree(path: Path | str) -> None:
    """rm -rf of a tree a candidate wrote, links not followed. shutil.rmtree recurses (Python
    3.11), so directories nested past the recursion limit, or made unreadable, are left to the
    system's rm (after chmod, ours to do on our files). A launcher whose PID namespace is gone
    cannot start one: what it could not remove stays."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if not os.path.lexists(path):
        return
    for command in (["chmod", "-R", "u+rwx", str(path)], ["rm", "-rf", "--", str(path)]):
        try:
            subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False, timeout=300)
        except (OSError, subprocess.SubprocessError):
            return


def remove_scratch(scratch: str, run_dir: str) -> None:
    """Remove the scratch dir, and the run's dir once that is empty (the last of its workers)."""
    remove_tree(scratch)
    if run_dir:
        try:
            os.rmdir(run_dir)
        except OSError:
            pass


def copy_tree(source: Path, target: Path, max_depth: int, max_files: int, skip: tuple[str, ...],
              max_bytes: int | None = None) -> None:
    """Copy the regular files and directories of a tree a dead worker wrote into `target`, with
    their times (ninja's up-to-date checks) but not their directory modes: no link (at any level,
    the top included) is followed or copied, nor a FIFO or device; none is written through; no
    deeper than `max_depth`, no more than `max_files`, and no file past `max_bytes` in all
    (sizes as the files say: sparse ones are written out whole); names matching a pattern in
    `skip` are left out. Without recursion: a candidate can nest directories past Python's limit."""
    if source.is_symlink() or not source.is_dir():
        return
    pending, copied, room = [(source, target, 0)], 0, [max_bytes]
    while pending:
        folder, into, depth = pending.pop()
        _fresh_dir(into)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if copied >= max_files or any(fnmatch.fnmatch(entry.name, pattern) for pattern in skip):
                continue
            if entry.is_dir(follow_symlinks=False):
                if depth + 1 < max_depth:
                    pending.append((Path(entry.path), into / entry.name, depth + 1))
            elif entry.is_file(follow_symlinks=False):
                copied += _copy_file(entry.path, into / entry.name, room)


def _is_real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def _fresh_dir(path: Path) -> None:
    """`path` as a real directory of ours (a link or file there before is removed)."""
    if os.path.lexists(path) and not _is_real_dir(path):
        path.unlink()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)  # one an earlier copy made may have kept a candidate's mode


def _copy_file(source: str, target: Path, room: list[int | None]) -> int:
    """1 if copied: a regular file, opened without following a link, that fits the bytes left
    (`room[0]`, None: no limit), written to a new file."""
    try:
        reading = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    with open(reading, "rb") as src:
        info = os.fstat(reading)
        if not stat.S_ISREG(info.st_mode) or (room[0] is not None and info.st_size > room[0]):
            return 0
        if room[0] is not None:
            room[0] -= info.st_size
        if _is_real_dir(target):
            remove_tree(target)
        elif os.path.lexists(target):
            target.unlink()
        writing = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, (info.st_mode & 0o755) | 0o600)
        with open(writing, "wb") as dst:
            shutil.copyfileobj(src, dst)
            dst.flush()  # a write after the times would set them again
            os.utime(writing, ns=(info.st_atime_ns, info.st_mtime_ns))
    return 1

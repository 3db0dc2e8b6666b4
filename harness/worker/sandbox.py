"""What confines a worker, decided by the parent: the run's sandbox policy (what this kernel
offers, checked once at the start of a run), and each worker's Confinement (the concrete rules
its launcher applies before any candidate code is imported; see launch.py and confine.py).

Every worker, build, reference and candidate alike, gets:
- Landlock: reads only where a Python program, a compiler and CUDA need to (the system
  directories, the interpreter and its import path, the toolchains; of /proc, for a worker of a
  CPU run, its own entries and a few host-wide files only); writes only to its own
  scratch dir (working dir, HOME, TMPDIR, Triton's cache) and, for a build worker, its own key
  dir of the build cache; no TCP bind or connect; no signals or abstract unix sockets outside
  its own domain; device nodes usable but nothing created under /dev, and none of the NVIDIA
  driver's for a worker that sees no GPU (one that sees a GPU gets, with namespaces, a /dev of
  its own without the other GPUs' nodes).
- namespaces (where user namespaces work): its own user, mount, network and IPC namespaces, and,
  for workers that see no GPU, a PID namespace with its own /proc (CUDA's IPC handles do not
  cross PID namespaces). An evaluating worker sees its key dir as a private copy, bind-mounted
  over the original, so nothing it writes there reaches the cache.
- resource limits (file size, open files, no core dumps; processes, inside a user namespace) and
  the parent's watchdog (host memory, process count, scratch size).
- under every mode, where seccomp filters hold: no userfaultfd (the parent reads a CPU worker's
  outputs from its memory with its whole tree stopped, which such a page would hang).
"""

from __future__ import annotations

import json
import os
import platform
import re
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

from ..records import Limits, SandboxMode, SandboxReport
from . import confine

PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)  # the harness package the parent runs
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/sys", "/nix")
PROC = "/proc"
# What of /proc a worker of a CPU run reads besides its own /proc/<pid> (launch.py): the
# host-wide files torch (cpuinfo, MKL) and glibc read, and the sysctls (cap_last_cap, nvcc's
# vm/overcommit_memory). Not the other processes' entries: without a PID namespace of its own a
# worker listed the command lines of 114 of the host's processes (issue 54). Every worker of a
# CUDA run reads all of /proc: the CUDA driver reads /proc/driver/nvidia, /proc/devices and more,
# and what nvcc and its tools read there (a build worker's) has not been tried on a GPU.
HOST_PROC = ("/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys")
ETC = "/etc"
# What of /etc no worker reads: password hashes, sudo rules, host, TLS and Kerberos keys. A worker
# running as root without user namespaces owns them even with every capability dropped (a red
# team's read /etc/shadow, 2026-12-07); no build or import needs them.
ETC_SECRETS = frozenset({"shadow", "shadow-", "gshadow", "gshadow-", "sudoers", "sudoers.d", "ssh", "ssl", "security",
                         "krb5.keytab", "credstore", "credstore.encrypted"})
MIN_STRICT_ABI = 6  # filesystem, TCP and scoping of signals and abstract sockets
SHM_BYTES = 1 << 30  # a worker's private /dev/shm
# Where every namespaced worker sees its scratch dir: an empty directory of this user's that only
# ever serves as a mount point (each worker mounts its own scratch there, in its own namespace).
CANONICAL_SCRATCH = f"/tmp/harness-worker-{os.getuid()}"
DEV = "/dev"
GPU_NODE = re.compile(r"nvidia\d+")  # a GPU's node: where one is, the NVIDIA driver is
EXTENSIONS = "ext"  # in the scratch dir: torch's extension builds (TORCH_EXTENSIONS_DIR)
# In an extensions dir: what Triton compiled (TRITON_CACHE_DIR; no extension's name has a hyphen).
TRITON_CACHE = "triton-cache"


def default_limits() -> Limits:
    """Half of this machine's memory per worker: a runaway worker is stopped before the
    machine's OOM killer picks a victim."""
    return Limits(host_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)


class SandboxPolicy(BaseModel):
    """What a run applies to its workers: decided once, from the mode and what the kernel offers."""

    mode: SandboxMode
    landlock_abi: int = 0
    namespaces: bool = False
    no_userfaultfd: bool = False  # seccomp filters hold here (confine.filters_hold): under every mode
    to_itself: bool = False  # workers drop every capability and keep to themselves (confine.keeps_to_itself_here)
    limits: Limits

    def report(self) -> SandboxReport:
        active, missing = [], []

        def has(name: str, present: bool, why: str) -> None:
            (active if present else missing).append(name if present else f"{name}: {why}")

        off = self.mode is SandboxMode.off
        no_landlock = "--sandbox off" if off else "this kernel has no Landlock"
        has("landlock_filesystem", self.landlock_abi >= 1, no_landlock)
        has("landlock_network", self.landlock_abi >= 4, "--sandbox off" if off else f"Landlock ABI {self.landlock_abi} < 4")
        has("landlock_scoped_signals", self.landlock_abi >= 6,
            "--sandbox off" if off else f"Landlock ABI {self.landlock_abi} < 6: a worker could signal the harness")
        no_userns = "--sandbox off" if off else "user namespaces are not available"
        for name in ("user_namespace", "network_namespace", "private_build_dir", "pid_namespace_without_gpu"):
            has(name, self.namespaces, no_userns)
        has("signed_build_outcomes", self.landlock_abi >= 1, "without Landlock a worker can read the signing key")
        for name in ("resource_limits", "watchdog", "non_dumpable_parent"):
            has(name, not off, "--sandbox off")
        has("no_userfaultfd", self.no_userfaultfd, f"no seccomp filters for {platform.machine()} here: a worker "
            "could make a userfaultfd that hangs the parent's read of its outputs until the phase's timeout")
        has("workers_keep_to_themselves", self.to_itself, "--sandbox off" if off else
            f"no seccomp rules for {platform.machine()} here: a worker keeps its capabilities' reach over processes "
            "of this user (limits, priorities, scheduling) and may open sockets")
        active += ["isolated_imports", "process_tree_kill"]
        return SandboxReport(mode=self.mode, active=active, missing=missing)


class SandboxUnavailable(Exception):
    """--sandbox strict on a kernel that lacks what it needs."""


def private_dir(path: str) -> str:
    """Make `path` (owner-only) or check the one there: in a shared /tmp, a real directory, ours,
    not a link, that no one else may write; else OSError."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise OSError(f"{path} is not a private directory of this user's; remove it")
    return path


def mount_point() -> str:
    """Make (once) and check the canonical scratch path."""
    return private_dir(CANONICAL_SCRATCH)


def works(rules: Confinement) -> bool:
    """Whether a launcher can apply these rules here: a real launcher, asked only to confine itself."""
    from .launch import BOOTSTRAP

    with tempfile.TemporaryDirectory(prefix="harness-probe-") as scratch:
        spec = Path(scratch) / "launch.json"
        spec.write_text(json.dumps(rules.model_copy(update={"scratch": scratch}).model_dump(mode="json")))
        done = subprocess.run([sys.executable, "-I", "-c", BOOTSTRAP, PACKAGE_DIR, str(spec), "-1", "-1", "-1", "-1"],
                              cwd=scratch, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60)
    return done.returncode == 0


def decide_policy(mode: SandboxMode, limits: Limits) -> SandboxPolicy:
    """Look at this kernel once: its Landlock ABI, whether user namespaces work here (a PID
    namespace with its own /proc, for workers that see no GPU, included), and whether seccomp
    filters hold (under every mode: the userfaultfd filter guards the parent's reads)."""
    if mode is SandboxMode.off:
        return SandboxPolicy(mode=mode, no_userfaultfd=confine.filters_hold(), limits=limits)
    abi = confine.landlock_abi()
    try:
        namespaces = works(Confinement(namespaces=True, pid_namespace=True, workdir=mount_point(),
                                       python_path=python_path()))
    except OSError:
        namespaces = False
    to_itself = confine.keeps_to_itself_here()
    if mode is SandboxMode.strict and (abi < MIN_STRICT_ABI or not namespaces or not to_itself):
        lacking = [what for what, ok in ((f"Landlock ABI {MIN_STRICT_ABI} or newer (this kernel: {abi or 'none'})",
                                          abi >= MIN_STRICT_ABI), ("user namespaces", namespaces),
                                         (f"seccomp rules for {platform.machine()} (x86-64 only)", to_itself)) if not ok]
        raise SandboxUnavailable(f"--sandbox strict needs {' and '.join(lacking)}; use --sandbox auto to run with "
                                 "what this kernel offers")
    return SandboxPolicy(mode=mode, landlock_abi=abi, namespaces=namespaces, no_userfaultfd=confine.filters_hold(),
                         to_itself=to_itself, limits=limits)


class Confinement(BaseModel):
    """The rules one worker's launcher applies (a plain-JSON record: the launcher reads it before
    its import path is set up)."""

    landlock_abi: int = 0  # 0: no Landlock
    namespaces: bool = False
    pid_namespace: bool = False
    scratch: str = ""  # the scratch dir as the parent sees it
    run_dir: str = ""  # the dir holding it and the run's other workers' (removed by the last orphaned launcher)
    workdir: str = ""  # ... and as the worker sees it (CANONICAL_SCRATCH with namespaces)
    read: list[str] = []
    write: list[str] = []
    device: list[str] = []  # usable device nodes (read, write, ioctl), nothing created
    dev: list[str] | None = None  # with namespaces: the host's /dev entries its own /dev holds (None: the host's)
    rlimits: dict[str, int] = {}
    python_path: list[str] = []  # the parent's import path: the worker imports what the parent imports
    pycache_prefix: str | None = None  # the harness's bytecode, read-only (worker/bytecode.py)
    shm_bytes: int = SHM_BYTES
    boot_cpus: list[int] | None = None  # cores to boot on (a worker booted ahead keeps off the timed ones)
    no_userfaultfd: bool = False  # a seccomp filter denies it userfaultfd; where the kernel refuses it, no worker starts
    # It drops every capability, and a seccomp filter keeps it from acting on other processes and
    # from network sockets (confine.keep_to_itself), unix ones too where `unix_sockets` is False.
    to_itself: bool = False
    unix_sockets: bool = True
    # Once confined, the worker becomes this command with its own as the last arguments
    # (compute-sanitizer's, --memcheck: judge/memcheck.py); empty: it stays the process it is.
    wrapper: list[str] = []

    @property
    def extensions_dir(self) -> str:
        return f"{self.workdir}/{EXTENSIONS}"

    def protections(self) -> list[str]:
        """What this worker actually had, by name (recorded with its result)."""
        names = []
        if self.landlock_abi:
            names.append("landlock_filesystem")
            names += ["landlock_network"] if self.landlock_abi >= 4 else []
            names += ["landlock_scoped_signals"] if self.landlock_abi >= 6 else []
        if self.namespaces:
            names += ["user_namespace", "network_namespace", "private_build_dir", "private_tmp"]
        names += ["pid_namespace"] if self.pid_namespace else []
        names += ["own_proc_only"] if self.landlock_abi and not any(_holds(path, PROC) for path in self.read) else []
        names += ["resource_limits"] if self.rlimits else []
        names += ["no_userfaultfd"] if self.no_userfaultfd else []
        names += ["no_capabilities", "no_other_processes", "no_network_sockets"] if self.to_itself else []
        names += ["no_gpu_nodes"] if self.landlock_abi and self.device and self.device != [DEV] else []
        # Without Landlock a worker reaches the host's /dev through /proc/<pid>/root of a process of
        # this user outside the run (its ptrace scoping keeps it from there).
        names += ["own_gpu_node_only"] if self.dev is not None and self.landlock_abi else []
        return names


def _existing(paths) -> list[str]:
    seen = []
    for path in paths:
        if path and os.path.isabs(path) and os.path.exists(path) and path not in seen:
            seen.append(path)
    return seen


def _holds(directory: str, path: str) -> bool:
    """Whether `path` is `directory` or lies under it."""
    return os.path.commonpath([directory, path]) == directory


def _not_the_users(paths) -> list[str]:
    """`paths` less the directories that hold the one the harness runs in or the checkout its
    package lives in: `python -m harness` puts the current directory on the import path, an
    editable install its checkout, and either may hold what no worker should read (a `.env`, the
    results database, earlier runs' reports). A worker loads the harness from its package dir
    alone. Site directories stay (an installed harness lives in one, beside torch)."""
    users = [os.path.realpath(os.path.dirname(PACKAGE_DIR))] if _is_checkout(os.path.dirname(PACKAGE_DIR)) else []
    try:
        users.append(os.path.realpath(os.getcwd()))
    except FileNotFoundError:  # run from a directory since removed: nothing there to read
        pass
    sites = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return [p for p in _existing(paths)
            if os.path.realpath(p) in sites or not any(_holds(os.path.realpath(p), user) for user in users)]


def _is_checkout(directory: str) -> bool:
    """A project's source tree (what an editable install points at), not an install directory."""
    return any(os.path.exists(os.path.join(directory, marker)) for marker in ("pyproject.toml", "setup.py", ".git"))


def readable_paths(env: dict[str, str]) -> list[str]:
    """Where a worker may read: the system, this interpreter and its import path, the harness,
    and the toolchains its environment names (CPATH: a build's precompiled torch header). Not
    HOME, not /tmp, not the results, not the directory the harness runs in."""
    toolchains = [p for name in ("PATH", "LD_LIBRARY_PATH", "CPATH") for p in env.get(name, "").split(os.pathsep)]
    toolchains += [env.get("CUDA_HOME", ""), env.get("CUDA_PATH", "")]
    return _existing([*SYSTEM_READ, *etc_entries(), sys.prefix, sys.base_prefix, sys.exec_prefix, PACKAGE_DIR,
                      *python_path(), *_not_the_users(toolchains)])


def etc_entries(etc: str = ETC) -> list[str]:
    """The entries of /etc a worker may read: all but ETC_SECRETS (none where /etc cannot be listed)."""
    try:
        names = sorted(os.listdir(etc))
    except OSError:
        return []
    return [os.path.join(etc, name) for name in names if name not in ETC_SECRETS]


def python_path() -> list[str]:
    """The parent's import path, absolute, less the user's directories (`_not_the_users`): a
    worker started in isolated mode (no PYTHONPATH, no user site, no current directory) gets
    exactly these, read-only under Landlock."""
    return _not_the_users(os.path.abspath(p) for p in sys.path if p)


def _entries(dev: str) -> list[str] | None:
    """The entries of /dev, where its NVIDIA GPU nodes are (None: none, or unreadable)."""
    try:
        names = sorted(os.listdir(dev))
    except OSError:
        return None
    return [os.path.join(dev, name) for name in names] if any(GPU_NODE.fullmatch(name) for name in names) else None


def device_nodes(sees_gpu: bool, dev: str = DEV) -> list[str]:
    """The device nodes a worker may use: all of /dev, but none of the NVIDIA driver's for a worker
    that sees no GPU: a build worker imports a candidate while the lanes time others, and could
    start work on their GPUs. (One that sees a GPU gets a /dev of its own instead: own_dev.)"""
    entries = _entries(dev)
    if sees_gpu or entries is None:
        return [dev]
    # Not its links (stdin, fd...): a rule follows them out of /dev, which the /dev rule never covered.
    return [path for path in entries if not os.path.basename(path).startswith("nvidia") and not os.path.islink(path)]


def own_dev(gpu_node: str | None, dev: str = DEV) -> list[str] | None:
    """For a worker that sees the GPU whose node is `gpu_node`: the entries of a /dev of its own,
    every one of the host's but the other GPUs' nodes, so it cannot start work on another lane's
    GPU. None (the host's /dev) where its node is not known or there are no GPU nodes."""
    entries = _entries(dev)
    if gpu_node is None or entries is None:
        return None
    return [path for path in entries if not GPU_NODE.fullmatch(os.path.basename(path)) or path == gpu_node]


def confinement(policy: SandboxPolicy, scratch: Path, *, sees_gpu: bool, env: dict[str, str],
                key_dir: Path | None = None, bytecode: Path | None = None, gpu_node: str | None = None,
                cuda_run: bool = False) -> Confinement:
    """The rules for one worker. With namespaces every worker works in its scratch dir seen at
    CANONICAL_SCRATCH, builds included (their extensions are copied into the cache by the parent),
    so no worker writes the build cache. Without them a worker builds in, or loads from, the key
    dir it must be given here (`key_dir`), and may write there. It reads `bytecode`, if given;
    `gpu_node` is the device node of the GPU it sees, if any; `cuda_run`: a worker of a run on a
    GPU, which reads all of /proc (HOST_PROC)."""
    base = Confinement(scratch=str(scratch), workdir=str(scratch), python_path=python_path(),
                       pycache_prefix=str(bytecode) if bytecode else None, no_userfaultfd=policy.no_userfaultfd)
    if policy.mode is SandboxMode.off:
        return base
    limits = policy.limits
    # No real-time threads (RLIMIT_RTPRIO 0, a worker holding no capability): one of those could
    # starve the parent between a timed call's reply and the worker's stop (red team, 2026-12-07).
    rlimits = {"RLIMIT_FSIZE": limits.file_size, "RLIMIT_NOFILE": limits.open_files, "RLIMIT_CORE": 0,
               "RLIMIT_RTPRIO": 0}
    if policy.namespaces:
        rlimits["RLIMIT_NPROC"] = limits.processes * 8  # threads count too; the watchdog counts processes
        workdir, write = CANONICAL_SCRATCH, [CANONICAL_SCRATCH, "/dev/shm"]
    else:
        workdir, write = str(scratch), [str(scratch)] + ([str(key_dir)] if key_dir else [])
    read = readable_paths(env) + _existing([base.pycache_prefix, *([PROC] if sees_gpu or cuda_run else HOST_PROC)])
    return base.model_copy(update={
        "landlock_abi": policy.landlock_abi, "namespaces": policy.namespaces,
        "to_itself": policy.to_itself, "unix_sockets": sees_gpu,  # a GPU's driver may need a unix socket
        "pid_namespace": policy.namespaces and not sees_gpu, "workdir": workdir,
        "read": read, "write": write, "device": device_nodes(sees_gpu), "rlimits": rlimits,
        "dev": own_dev(gpu_node) if policy.namespaces and sees_gpu else None})

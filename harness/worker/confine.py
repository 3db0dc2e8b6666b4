"""The kernel's confinement, through ctypes and nothing else: Landlock, namespaces, resource limits,
and seccomp filters that deny a worker userfaultfd and keep a pinned worker on its cores.

Imported by a worker's launcher before anything else (no torch, no candidate code yet), so it
must stay light: the standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
from typing import NamedTuple

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1

# Filesystem rights, and the ABI that introduced each.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV  # the rights a file rule may carry
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
DEVICE = FS_READ_FILE | FS_WRITE_FILE | FS_READ_DIR | FS_TRUNCATE | FS_IOCTL_DEV  # use device nodes, create nothing
OWN_PROC = FS_READ_FILE | FS_WRITE_FILE | FS_READ_DIR | FS_TRUNCATE  # /proc/<pid> of the worker itself
PROC_ENTRIES = "/proc/"  # what lies below procfs's root

CONFINE_FAILED = 97  # a launcher's exit code when a protection it was asked for could not be applied

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}.get(platform.machine(), -1)
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# seccomp: per machine, seccomp's own number and, per system call it may deny, that call's rules:
# (audit arch, number, the ioctl request it is denied for or None for every use) under each ABI
# (x86-64 and x32, i386; arm64). userfaultfd also comes from /dev/userfaultfd's ioctl (Linux 6.1:
# whoever may open that node, root by default, gets one however vm.unprivileged_userfaultfd is set).
X86_64, I386, AARCH64 = 0xC000003E, 0x40000003, 0xC00000B7
USERFAULTFD_IOC_NEW = 0xAA00  # _IO(0xAA, 0x00)
SECCOMP_CALL = {"x86_64": 317, "aarch64": 277}
DENIABLE = {"x86_64": {"sched_setaffinity": [(X86_64, 203, None), (I386, 241, None)],
                       "userfaultfd": [(X86_64, 323, None), (I386, 374, None), (X86_64, 16, USERFAULTFD_IOC_NEW),
                                       (X86_64, 514, USERFAULTFD_IOC_NEW), (I386, 54, USERFAULTFD_IOC_NEW)]},
            "aarch64": {"sched_setaffinity": [(AARCH64, 122, None)],
                        "userfaultfd": [(AARCH64, 282, None), (AARCH64, 29, USERFAULTFD_IOC_NEW)]}}
# Calls that act on another process: denied but for the caller itself (a pid of 0 or its own, and
# for setpriority and ioprio_set a `which` of the process), or denied outright (no worker reads
# another's memory, traces, or holds a pidfd). prlimit, setpriority and sched_* on another process
# need only the same uid, which neither Landlock nor the other filters govern: without namespaces a
# red team's workers set the harness's RLIMIT_CPU (it was killed), gave every reference an
# RLIMIT_CPU and rivals an RLIMIT_AS, and pinned honest workers to one core (2026-12-07). Per call:
# its numbers (x86-64, i386) and which argument is the pid ({"only": ...} the values allowed, "self"
# standing for the caller's pid), or None: denied outright. A check is (argument, allowed values).
SELF = "self"
PID_0_OR_SELF = (0, SELF)
# Signals: scoped to the worker's own processes by Landlock from ABI 6 (its descendants included:
# torch.compile's pool of compile workers is signalled by its own worker); to the caller itself by
# this filter where Landlock cannot scope them.
SIGNALS = {
    "kill": ((62, 37), ((0, (SELF,)),)), "tgkill": ((234, 270), ((0, (SELF,)),)), "tkill": ((200, 238), None),
    "rt_sigqueueinfo": ((129, 178), ((0, (SELF,)),)), "rt_tgsigqueueinfo": ((297, 335), ((0, (SELF,)),)),
    "pidfd_send_signal": ((424, 424), None),
}
OTHER_PROCESSES = {
    "prlimit64": ((302, 340), ((0, PID_0_OR_SELF),)),
    "setpriority": ((141, 97), ((0, (0,)), (1, PID_0_OR_SELF))),  # which: PRIO_PROCESS
    "ioprio_set": ((251, 289), ((0, (1,)), (1, PID_0_OR_SELF))),  # which: IOPRIO_WHO_PROCESS
    "sched_setparam": ((142, 154), ((0, PID_0_OR_SELF),)), "sched_setscheduler": ((144, 156), ((0, PID_0_OR_SELF),)),
    "sched_setattr": ((314, 351), ((0, PID_0_OR_SELF),)),
    "migrate_pages": ((256, 294), ((0, PID_0_OR_SELF),)), "move_pages": ((279, 317), ((0, PID_0_OR_SELF),)),
    "perf_event_open": ((298, 336), ((1, PID_0_OR_SELF),)),
    "ptrace": ((101, 26), None), "process_vm_readv": ((310, 347), None), "process_vm_writev": ((311, 348), None),
    "kcmp": ((312, 349), None), "pidfd_open": ((434, 434), None), "pidfd_getfd": ((438, 438), None),
    "process_madvise": ((440, 440), None),
}
# Sockets of these families (AF_UNIX where the worker sees no GPU: a GPU's driver may speak to its
# daemons on one), and i386's socketcall, which multiplexes them: without namespaces a worker had
# sent its findings over UDP to 127.0.0.1 and over unix sockets (2026-12-07).
AF_UNIX, AF_INET, AF_INET6, AF_PACKET, AF_VSOCK = 1, 2, 10, 17, 40
NETWORK_FAMILIES = (AF_INET, AF_INET6, AF_PACKET, AF_VSOCK)
KEEP_TO_ITSELF_MACHINES = {"x86_64"}  # where the numbers above are known (with the i386 ABI)
X32_BIT = 0x40000000  # x32's syscalls are x86-64's with this bit set
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
# A filtered process keeps the kernel's default speculation mitigations: before Linux 5.16 the
# default forced SSBD (and STIBP) on every seccomp-filtered task, slowing the very code timed.
SECCOMP_FILTER_FLAG_SPEC_ALLOW = 4  # Linux 4.17
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
BPF_LD_ABS, BPF_AND, BPF_JEQ, BPF_RET = 0x20, 0x54, 0x15, 0x06  # with BPF_W and BPF_K where they apply
# Offsets in struct seccomp_data: the call's number, its ABI, and its second argument's low word
# (little-endian; an ioctl's request is 32 bits).
SECCOMP_DATA_NR, SECCOMP_DATA_ARCH, SECCOMP_DATA_ARG1 = 0, 4, 24
SECCOMP_DATA_ARGS = 16  # the first argument's low word; each is 8 bytes
NEXT_RULE, DENIED = "next rule", "denied"  # jump targets, resolved by _deny_filter

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18


class ConfineError(OSError):
    """A protection that was asked for could not be applied."""


def _fail(what: str) -> ConfineError:
    code = ctypes.get_errno()
    return ConfineError(code, f"{what}: {os.strerror(code)}")


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers; 0 when it has none (or it is disabled)."""
    version = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    return max(0, int(version))


def handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    for needed, right in ((2, FS_REFER), (3, FS_TRUNCATE), (5, FS_IOCTL_DEV)):
        if abi >= needed:
            rights |= right
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock(abi: int, rules: list[tuple[str, int]]) -> None:
    """Restrict this thread and every process it starts later: only the (path, rights) rules are
    allowed on the filesystem; from ABI 4 no TCP bind or connect; from ABI 6 no signals or
    abstract unix sockets to anything outside this domain. Paths that do not exist are skipped."""
    handled = handled_fs(abi)
    attr = _RulesetAttr(handled_access_fs=handled,
                        handled_access_net=NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                        scoped=SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8  # older kernels refuse fields they do not know
    ruleset = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        raise _fail("landlock_create_ruleset")
    try:
        for path, rights in rules:
            _add_rule(int(ruleset), path, rights & handled)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
        if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, int(ruleset), 0) != 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(int(ruleset))


def _add_rule(ruleset: int, path: str, rights: int) -> None:
    """A rule below /proc keeps its path open (never closed) for the life of this process: a rule
    holds an inode, and procfs makes a new one for a path whose dentry it dropped (memory
    pressure; `drop_caches` took a worker's read of its own /proc/<pid> and /proc/cpuinfo away)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = _PathBeneath(allowed_access=rights, parent_fd=fd)
        if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise _fail(f"landlock_add_rule({path})")
    finally:
        if not path.startswith(PROC_ENTRIES):
            os.close(fd)


def enter_namespaces(pid: bool) -> None:
    """A user namespace (mapping this user to itself) with its own mounts, network and IPC, and
    with `pid` its own PID space too, which holds this process's next child as its PID 1."""
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | (CLONE_NEWPID if pid else 0)
    if _libc.unshare(flags) != 0:
        raise _fail("unshare")
    with open("/proc/self/setgroups", "w") as setgroups:
        setgroups.write("deny")
    with open("/proc/self/uid_map", "w") as uid_map:
        uid_map.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as gid_map:
        gid_map.write(f"{gid} {gid} 1")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda value: value.encode() if value is not None else None  # noqa: E731
    if _libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        raise _fail(f"mount {target}")


def private_mounts(scratch: str, workdir: str, shm_bytes: int, proc: bool, dev: list[str] | None = None) -> None:
    """In a fresh mount namespace, seen by no one else: a private /dev/shm, the scratch dir
    bind-mounted at `workdir` (an empty directory the parent made, the same path for every worker,
    so a build and its later loads see the same absolute paths), with `proc` (as PID 1 of a
    fresh PID namespace) a /proc that shows this namespace's processes only, and with `dev` a
    /dev holding only those entries of the host's."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if proc:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if dev is not None:
        _private_dev(dev, os.path.join(scratch, ".dev"))
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={shm_bytes}")
    _mount(scratch, workdir, None, MS_BIND | MS_REC)
    os.chdir(workdir)


def _private_dev(entries: list[str], staging: str) -> None:
    """A /dev of its own: a tmpfs made at `staging` holding `entries` (paths in the host's /dev),
    each bind-mounted from there (links copied as links), then moved over /dev. Any other node is
    absent (ENOENT), as in a container: denied instead (EACCES), another GPU's node stopped the
    CUDA driver."""
    os.makedirs(staging, exist_ok=True)
    _mount("tmpfs", staging, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=1m")
    for path in entries:
        try:
            _stage(path, os.path.join(staging, os.path.basename(path)))
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            # Gone since the parent listed /dev (a device unplugged): absent here too.
    _mount(staging, "/dev", None, MS_MOVE)


def _stage(path: str, target: str) -> None:
    """One host /dev entry at `target`: a link copied as a link, anything else bind-mounted."""
    if os.path.islink(path):
        os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.mkdir(target)
    else:
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
    try:
        _mount(path, target, None, MS_BIND | MS_REC)
    except OSError:
        (os.rmdir if os.path.isdir(target) else os.unlink)(target)  # no empty stand-in for it
        raise


def on_parent_death(sig: signal.Signals) -> None:
    """Have the kernel send `sig` when the parent goes. Strictly, when the thread that started
    this process exits: the kernel sends it then too if the parent lives on (and again when it
    goes), so a worker is made and closed by one thread (parent.Worker)."""
    if _libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_PDEATHSIG)")


def reap_orphans() -> None:
    """Adopt every orphaned descendant (a double fork), so the whole subtree stays below us."""
    if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_CHILD_SUBREAPER)")


def not_dumpable() -> None:
    """Other processes of this user may not read this one's memory or environment through /proc
    or ptrace."""
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class Only(NamedTuple):
    """A check of a rule: the call is denied unless its argument `argument` is one of `values`."""

    argument: int
    values: tuple[int, ...]


class AnyOf(NamedTuple):
    """A check of a rule: the call is denied where its argument `argument` is one of `values`."""

    argument: int
    values: tuple[int, ...]


def _rule(arch: int, number: int, test: int | tuple | None = None) -> list[tuple]:
    """One rule's instructions, ending in its own EPERM (every jump stays short), their jumps to
    NEXT_RULE or DENIED still symbolic. `test`: None, the call is denied; an int, denied where its
    second argument is that (an ioctl's request); else a tuple of checks (Only, AnyOf), each of
    which denies it."""
    code = [(BPF_LD_ABS, 0, 0, SECCOMP_DATA_ARCH), (BPF_JEQ, 0, NEXT_RULE, arch),  # another ABI
            (BPF_LD_ABS, 0, 0, SECCOMP_DATA_NR), (BPF_AND, 0, 0, ~X32_BIT & 0xFFFFFFFF)]
    if test is None:
        return code + [(BPF_JEQ, DENIED, NEXT_RULE, number), (BPF_RET, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)]
    if isinstance(test, int):
        test = (AnyOf(1, (test,)),)
    code.append((BPF_JEQ, 0, NEXT_RULE, number))
    for index, check in enumerate(test):
        code.append((BPF_LD_ABS, 0, 0, SECCOMP_DATA_ARGS + 8 * check.argument))
        last_check = index == len(test) - 1
        for at, value in enumerate(check.values):
            last = at == len(check.values) - 1
            onward = NEXT_RULE if last_check else len(check.values) - at - 1  # past this check's values
            if isinstance(check, Only):
                code.append((BPF_JEQ, onward, DENIED if last else 0, value & 0xFFFFFFFF))
            else:
                code.append((BPF_JEQ, DENIED, (NEXT_RULE if last_check else 0) if last else 0, value & 0xFFFFFFFF))
    return code + [(BPF_RET, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)]


def _deny_filter(rules: list[tuple]) -> list[tuple[int, int, int, int]]:
    """A BPF program: EPERM for each rule's (audit arch, number, test) of `rules` (`_rule`), all
    else allowed. Jumps are relative and forward only, each within its rule or to the next's start."""
    program: list[tuple[int, int, int, int]] = []
    for block in (_rule(*rule) for rule in rules):
        start = len(program)
        targets = {NEXT_RULE: start + len(block), DENIED: start + len(block) - 1}
        for offset, (code, jt, jf, k) in enumerate(block):
            jump = lambda to: to if isinstance(to, int) else targets[to] - (start + offset) - 1  # noqa: E731
            program.append((code, jump(jt), jump(jf), k))
    return program + [(BPF_RET, 0, 0, SECCOMP_RET_ALLOW)]


def other_process_rules(machine: str, own_pid: int, sockets: tuple[int, ...], signals: bool) -> list[tuple]:
    """The rules (`_rule`) that keep a process to itself: OTHER_PROCESSES (and SIGNALS, with
    `signals`) with `own_pid` for SELF, and socket() of the families `sockets` (i386's socketcall
    denied outright). For x86-64 (with its i386 ABI) only: none elsewhere."""
    if machine not in KEEP_TO_ITSELF_MACHINES:
        return []
    rules = []
    for numbers, checks in [*OTHER_PROCESSES.values(), *(SIGNALS.values() if signals else ())]:
        test = None if checks is None else tuple(
            Only(argument, tuple(own_pid if value == SELF else value for value in allowed)) for argument, allowed in checks)
        rules += [(arch, number, test) for arch, number in zip((X86_64, I386), numbers)]
    if sockets:
        rules += [(arch, number, (AnyOf(0, sockets),)) for arch, number in ((X86_64, 41), (I386, 359))]
        rules.append((I386, 102, None))  # socketcall
    return rules


def keeps_to_itself_here() -> bool:
    """Whether `keep_to_itself` can hold on this machine: its call numbers known, seccomp there."""
    return platform.machine() in KEEP_TO_ITSELF_MACHINES and filters_hold()


def keep_to_itself(sockets: tuple[int, ...], signals: bool) -> bool | None:
    """From now on this process (every thread, and every process it starts) may not limit,
    reprioritise, trace or read another process (nor, with `signals`, signal one), nor open sockets
    of the families `sockets` (`other_process_rules`, this process's pid standing for itself).
    None where no rules are known for this machine; False where the kernel refused the filter."""
    rules = other_process_rules(platform.machine(), os.getpid(), sockets, signals)
    return _install(_deny_filter(rules)) if rules else None


def drop_capabilities() -> None:
    """Every capability gone from this process for good: the bounding set (where it may change
    it), the ambient, inheritable, permitted and effective sets. A worker running as root without
    user namespaces had kept CAP_SYS_PTRACE, and read the harness's environment through /proc."""
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for capability in range(int(last.read()) + 1):
            if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() not in (errno.EPERM, errno.EINVAL):
                raise _fail("prctl(PR_CAPBSET_DROP)")
    if _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
        raise _fail("prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if _libc.syscall(SYS_CAPSET, ctypes.byref(header), data) != 0:
        raise _fail("capset")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def deny(names: list[str]) -> bool:
    """From now on the system calls `names` fail with EPERM in every thread of this process (those
    started before included) and in every process it starts. False where this machine's system
    call numbers are not known here, or the kernel refused the filter."""
    machine = platform.machine()
    if machine not in SECCOMP_CALL:
        return False
    return _install(_deny_filter([call for name in names for call in DENIABLE[machine][name]]))


def _install(program: list[tuple[int, int, int, int]]) -> bool:
    """`program` as this process's seccomp filter, on every thread (no_new_privs set first)."""
    machine = platform.machine()
    filters = (_SockFilter * len(program))(*[_SockFilter(*instruction) for instruction in program])
    prog = _SockFprog(len(program), filters)
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    for flags in (SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_SPEC_ALLOW, SECCOMP_FILTER_FLAG_TSYNC):
        if _libc.syscall(SECCOMP_CALL[machine], SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(prog)) == 0:
            return True
        if ctypes.get_errno() != errno.EINVAL:  # EINVAL: a kernel older than SPEC_ALLOW
            return False
    return False


def hold_affinity() -> bool:
    """No thread of this process, and no process it starts, may change the cores it runs on (a
    candidate pinned to a lane's core could move to the cores another lane times on, or a build to
    a lane's)."""
    return deny(["sched_setaffinity"])


def filters_hold() -> bool:
    """Whether `deny` can hold here: this machine's system call numbers are known, and the kernel
    has seccomp (its process status shows a Seccomp field)."""
    if platform.machine() not in SECCOMP_CALL:
        return False
    try:
        with open("/proc/self/status") as status:
            return any(line.startswith("Seccomp:") for line in status)
    except OSError:
        return False


def no_userfaultfd() -> bool:
    """No userfaultfd in this process or anything it starts, by the system call or by
    /dev/userfaultfd's ioctl: the parent reads a CPU worker's outputs from its memory with the
    worker's whole tree stopped, and a page whose faults a stopped thread would handle would hang
    that read, and the run's lane with it."""
    return deny(["userfaultfd"])


def set_limits(limits: dict[str, int]) -> None:
    """Resource limits by name (RLIMIT_FSIZE ...), soft and hard alike, never above the current hard limit."""
    for name, value in limits.items():
        which = getattr(resource, name)
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))

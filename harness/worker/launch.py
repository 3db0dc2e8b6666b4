"""A worker's first moments: confine, then become the worker.

The parent starts `python -I -c BOOTSTRAP PACKAGE SPEC CHANNEL BUFFER FEED LIFELINE` (parent.py). Isolated
mode reads no PYTHONPATH, no user site and not the current directory; the bootstrap loads this
package from the directory the parent runs it from, and `main` here sets the import path to the
parent's own (read-only under Landlock, so no worker can plant a module or a sitecustomize for
another). Until the worker is confined, only the standard library is used: importing torch
starts threads, and Landlock confines only the thread that applies it and what it starts later.

Two processes: this launcher, which applies resource limits, enters the namespaces and adopts
every orphan of the worker (a subreaper, so a double fork stays in the tree the parent kills),
and its child, the worker, which may make no userfaultfd, mounts its private /tmp, /dev/shm (and
/proc), applies Landlock, imports torch and waits for its job (child.py). The worker dies with
the launcher (PDEATHSIG); in a PID namespace every process the worker started dies with it. The
launcher dies with the parent: LIFELINE is the read end of a pipe whose write end only the parent
holds, so it reads end-of-file once the parent is gone, however it went (a SIGKILL included; a
launcher frozen while another worker was timed is woken by a SIGCONT the kernel sends it then),
and the launcher kills its tree and removes the scratch dir the parent would have.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

from . import confine, processes

# The harness package, loaded from the directory the parent runs it from (argv[1]).
LOAD_PACKAGE = """
import importlib.util, sys
package = sys.argv[1]
spec = importlib.util.spec_from_file_location("harness", package + "/__init__.py", submodule_search_locations=[package])
module = importlib.util.module_from_spec(spec)
sys.modules["harness"] = module
spec.loader.exec_module(module)
"""
BOOTSTRAP = LOAD_PACKAGE + """
from harness.worker.launch import main
sys.exit(main(sys.argv[2], *map(int, sys.argv[3:7])))
"""
WRAPPER_FAILED = 1  # a wrapper that could not start: the worker's exit as if it had failed itself
# The worker again, under a wrapper (Confinement.wrapper): `PACKAGE SPEC CHANNEL BUFFER FEED`.
WRAPPED = LOAD_PACKAGE + """
from harness.worker.launch import wrapped
sys.exit(wrapped(sys.argv[2], *map(int, sys.argv[3:6])))
"""


def main(spec_path: str, channel: int, buffer: int, feed: int, lifeline: int) -> int:
    """`channel` -1: a probe, which only confines itself (and has no lifeline)."""
    with open(spec_path) as spec_file:
        rules = json.load(spec_file)
    sys.path[:] = rules["python_path"]
    # Bytecode is read from the harness's own where it keeps one (worker/bytecode.py), and never
    # written: the next worker, the reference's included, would run it.
    sys.pycache_prefix = rules["pycache_prefix"]
    sys.dont_write_bytecode = True
    if rules.get("boot_cpus"):
        os.sched_setaffinity(0, rules["boot_cpus"])
    try:
        if lifeline >= 0:  # a launcher frozen (SIGSTOP) while another worker is timed wakes to read its lifeline
            confine.on_parent_death(signal.SIGCONT)
        confine.set_limits(rules["rlimits"])
        if rules["namespaces"]:
            confine.enter_namespaces(pid=rules["pid_namespace"])
        confine.reap_orphans()
    except OSError as exc:
        return _refused(exc)
    worker = os.fork()
    if worker == 0:
        if lifeline >= 0:
            os.close(lifeline)
        os._exit(_become_worker(rules, spec_path, channel, buffer, feed))
    for fd in (channel, buffer, feed):
        if fd >= 0:
            os.close(fd)
    status, orphaned = _wait_for(worker, lifeline, rules["pid_namespace"])
    if orphaned:  # nothing of the run outlives it; a parent that closes a worker kills this launcher first
        if not rules["pid_namespace"]:  # in one, the worker's processes died with it
            _reap_all()
        processes.remove_scratch(rules["scratch"], rules["run_dir"])
    return _exit_as(status)


def _reap_all(within_s: float = 10.0) -> None:
    """Wait for every child left (the worker's orphans, killed), so that none writes to the
    scratch dir after this; killing again what is still there, and giving up after `within_s`
    (one stuck in the kernel)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            processes.kill_descendants(os.getpid())
            time.sleep(0.05)


def _refused(exc: OSError) -> int:
    print(f"harness: the worker could not be confined: {exc}", file=sys.stderr, flush=True)
    return confine.CONFINE_FAILED


def _become_worker(rules: dict, spec_path: str, channel: int, buffer: int, feed: int) -> int:
    """Confine this process; then run the worker (no channel: a probe of the confinement, done)."""
    try:
        confine.on_parent_death(signal.SIGKILL)
        if rules["no_userfaultfd"] and not confine.no_userfaultfd():  # every policy: it guards the parent's reads
            raise confine.ConfineError("the seccomp filter that denies userfaultfd was refused")
        if rules["namespaces"]:
            confine.private_mounts(rules["scratch"], rules["workdir"], rules["shm_bytes"], proc=rules["pid_namespace"],
                                   dev=rules["dev"])
        if rules["landlock_abi"]:
            confine.landlock(rules["landlock_abi"], _landlock_rules(rules))
        if rules["to_itself"]:
            _keep_to_itself(rules)
    except OSError as exc:
        return _refused(exc)
    if channel < 0:
        return 0
    if rules["wrapper"]:
        try:
            _become_wrapped(rules, spec_path, channel, buffer, feed)
        except OSError as exc:  # the wrapper's own failure, not the confinement's: the parent says why
            print(f"harness: {rules['wrapper'][0]} could not start: {exc}", file=sys.stderr, flush=True)
            return WRAPPER_FAILED
    from .child import main as worker_main  # torch, pydantic and, later, the candidate: all confined

    return worker_main(channel, buffer, feed)


def _become_wrapped(rules: dict, spec_path: str, channel: int, buffer: int, feed: int) -> None:
    """Become the wrapper, confined as this process is (Landlock, seccomp and the namespaces
    hold across exec), which starts the worker as its child: that one inherits the channel and
    the buffers, and reads the rules again from the spec, where it sees it (its scratch dir is
    its workdir)."""
    for fd in (channel, buffer, feed):
        os.set_inheritable(fd, True)
    spec = f"{rules['workdir']}/{os.path.basename(spec_path)}"
    os.execv(rules["wrapper"][0], [*rules["wrapper"], sys.executable, "-I", "-c", WRAPPED, sys.argv[1], spec,
                                   str(channel), str(buffer), str(feed)])


def wrapped(spec_path: str, channel: int, buffer: int, feed: int) -> int:
    """The worker under a wrapper: confined already (its wrapper was, before it started it)."""
    with open(spec_path) as spec_file:
        rules = json.load(spec_file)
    sys.path[:] = rules["python_path"]
    sys.pycache_prefix = rules["pycache_prefix"]
    sys.dont_write_bytecode = True
    from .child import main as worker_main

    return worker_main(channel, buffer, feed)


def _keep_to_itself(rules: dict) -> None:
    """No capability left, and no acting on another process (signals too where Landlock cannot
    scope them, before ABI 6) nor opening network sockets (unix ones too for a worker that sees no
    GPU). Last: mounts and Landlock needed what this takes away."""
    sockets = confine.NETWORK_FAMILIES + (() if rules["unix_sockets"] else (confine.AF_UNIX,))
    if confine.keep_to_itself(sockets, signals=rules["landlock_abi"] < 6) is False:
        raise confine.ConfineError("the seccomp filter that keeps a worker to itself was refused")
    confine.drop_capabilities()


def _landlock_rules(rules: dict) -> list[tuple[str, int]]:
    """The worker's rules; /proc/self resolved here, by the worker itself (before torch, one
    thread): its own /proc/<pid>, not that of a process it starts (those read none of theirs
    where /proc is not all readable: sandbox.HOST_PROC)."""
    full = confine.handled_fs(rules["landlock_abi"])
    return ([(path, confine.READ) for path in rules["read"]] + [(path, confine.DEVICE) for path in rules["device"]]
            + [(path, full) for path in rules["write"]] + [("/proc/self", confine.OWN_PROC)])


def _wait_for(worker: int, lifeline: int, pid_namespace: bool) -> tuple[int, bool]:
    """Reap every child (the worker, and orphans it left to us) until the worker is gone, killing
    it once the parent is gone; then kill whatever it left behind. The worker's wait status, and
    whether the parent was gone. No thread waits on the lifeline: a process that has entered a
    PID namespace for its children cannot start one. SIGCHLD wakes the wait instead."""
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(woken)
    watched = select.poll()  # not select.select: a parent with over 1024 files open passes larger fds
    watched.register(wake, select.POLLIN)
    if lifeline >= 0:
        watched.register(lifeline, select.POLLIN)
    orphaned = False
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == worker:
            break
        if pid:
            continue
        for fd, _ in watched.poll():
            if fd == wake:
                os.read(wake, 4096)
            elif not os.read(lifeline, 1):  # end of file: the parent is gone
                orphaned = True
                watched.unregister(lifeline)
                _kill_worker_tree(worker, pid_namespace)
    if not pid_namespace:  # what the worker left to us (in a PID namespace the kernel killed it with the worker)
        processes.kill_descendants(os.getpid())
    return status, orphaned


def _kill_worker_tree(worker: int, pid_namespace: bool) -> None:
    """The live worker and all below it. In a PID namespace, its PID 1 (the worker), and the
    kernel kills the rest; there /proc is the worker's (mounted in the mount namespace we share),
    where our own pid names another process, so it is not read. Without one, the tree below us,
    orphans included (we are their subreaper)."""
    if pid_namespace:
        processes.signal_all([worker], signal.SIGKILL)
    else:
        processes.kill_descendants(os.getpid())


def _exit_as(status: int) -> int:
    """Exit as the worker did: killed by the same signal, or with its exit code."""
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) not in (signal.SIGKILL, signal.SIGSTOP):  # theirs cannot be changed, nor need be
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)

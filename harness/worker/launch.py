"""A worker's first moments: confine, then become the worker.

The parent starts `python -I -c BOOTSTRAP PACKAGE SPEC CHANNEL BUFFER FEED` (parent.py). Isolated
mode reads no PYTHONPATH, no user site and not the current directory; the bootstrap loads this
package from the directory the parent runs it from, and `main` here sets the import path to the
parent's own (read-only under Landlock, so no worker can plant a module or a sitecustomize for
another). Until the worker is confined, only the standard library is used: importing torch
starts threads, and Landlock confines only the thread that applies it and what it starts later.

Two processes: this launcher, which applies resource limits, enters the namespaces and adopts
every orphan of the worker (a subreaper, so a double fork stays in the tree the parent kills),
and its child, the worker, which mounts its private /tmp, /dev/shm (and /proc), applies
Landlock, imports torch and waits for its job (child.py). The worker dies with the launcher
(PDEATHSIG); in a PID namespace every process the worker started dies with it.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from . import confine, processes

BOOTSTRAP = """
import importlib.util, sys
package = sys.argv[1]
spec = importlib.util.spec_from_file_location("harness", package + "/__init__.py", submodule_search_locations=[package])
module = importlib.util.module_from_spec(spec)
sys.modules["harness"] = module
spec.loader.exec_module(module)
from harness.worker.launch import main
sys.exit(main(sys.argv[2], *map(int, sys.argv[3:6])))
"""


def main(spec_path: str, channel: int, buffer: int, feed: int) -> int:
    """`channel` -1: a probe, which only confines itself."""
    with open(spec_path) as spec_file:
        rules = json.load(spec_file)
    sys.path[:] = rules["python_path"]
    if rules.get("boot_cpus"):
        os.sched_setaffinity(0, rules["boot_cpus"])
    try:
        confine.set_limits(rules["rlimits"])
        if rules["namespaces"]:
            confine.enter_namespaces(pid=rules["pid_namespace"])
        confine.reap_orphans()
    except OSError as exc:
        return _refused(exc)
    worker = os.fork()
    if worker == 0:
        os._exit(_become_worker(rules, channel, buffer, feed))
    for fd in (channel, buffer, feed):
        if fd >= 0:
            os.close(fd)
    return _wait_for(worker)


def _refused(exc: OSError) -> int:
    print(f"harness: the worker could not be confined: {exc}", file=sys.stderr, flush=True)
    return confine.CONFINE_FAILED


def _become_worker(rules: dict, channel: int, buffer: int, feed: int) -> int:
    """Confine this process; then run the worker (no channel: a probe of the confinement, done)."""
    try:
        confine.die_with_parent()
        if rules["namespaces"]:
            confine.private_mounts(rules["scratch"], rules["workdir"], rules["shm_bytes"], proc=rules["pid_namespace"])
        if rules["landlock_abi"]:
            confine.landlock(rules["landlock_abi"], _landlock_rules(rules))
    except OSError as exc:
        return _refused(exc)
    if channel < 0:
        return 0
    from .child import main as worker_main  # torch, pydantic and, later, the candidate: all confined

    return worker_main(channel, buffer, feed)


def _landlock_rules(rules: dict) -> list[tuple[str, int]]:
    full = confine.handled_fs(rules["landlock_abi"])
    return ([(path, confine.READ) for path in rules["read"]] + [(path, confine.DEVICE) for path in rules["device"]]
            + [(path, full) for path in rules["write"]] + [("/proc/self", confine.OWN_PROC)])


def _wait_for(worker: int) -> int:
    """Reap every child (the worker, and orphans it left to us) until the worker is gone; then
    kill whatever it left behind and exit as it did."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == worker:
            break
    processes.kill_descendants(os.getpid())
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)

import os
import resource
import socket


def pids():
    """Every process /proc lists; where the list is closed, every pid up to a little past this one's."""
    try:
        return [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return [str(pid) for pid in range(1, os.getpid() + 1000)]


def marked(*needles):
    """Processes whose command line carries every needle (only this test's own processes do)."""
    found = []
    for name in pids():
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                text = cmdline.read().decode(errors="replace")
        except (OSError, ValueError):
            continue
        if all(needle in text for needle in needles):
            found.append(int(name))
    return found


# The harness and the reference worker: a CPU-time limit that kills them, a priority and a
# scheduling class that starve them (as a red team did where workers had no namespaces); and its
# own launcher, a process of the run outside its domain found without /proc (its parent, where it
# has no PID namespace), on which an attempt that lands is told.
LAUNCHER = [os.getppid()] if os.getppid() > 1 else []
LANDED = []
for pid in marked(T["marker"]) + marked(T["pkg"], "harness-reference-") + LAUNCHER:
    for attempt in (lambda: resource.prlimit(pid, resource.RLIMIT_CPU, (1, 1)),
                    lambda: resource.prlimit(pid, resource.RLIMIT_AS, (1 << 24, 1 << 24)),
                    lambda: os.setpriority(os.PRIO_PROCESS, pid, 19),
                    lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))):
        try:
            attempt()
        except OSError:
            continue
        LANDED.append(pid)
# Findings sent out over UDP to the test's own port on 127.0.0.1.
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(T["marker"].encode(), ("127.0.0.1", T["port"]))
except OSError:
    pass
if LANDED:
    raise RuntimeError(f"limited, reprioritised or rescheduled processes of the run: {sorted(set(LANDED))}")

import os

# Other processes' /proc entries (the harness's, the reference worker's, the host's): listed, or,
# where the list is closed, found by pid (the harness and the reference started before this
# worker, so their pids lie below its own). Only read: nothing is done to any process.
OWN = {str(os.getpid()), *os.listdir("/proc/self/task")}
try:
    LISTED = [name for name in os.listdir("/proc") if name.isdigit() and name not in OWN]
except OSError:
    LISTED = []
READ = []
for name in LISTED or (str(pid) for pid in range(1, os.getpid() + 1000)):
    if name in OWN:
        continue
    for part in ("cmdline", "status"):
        try:
            with open(f"/proc/{name}/{part}", "rb") as entry:
                READ.append(entry.read().decode(errors="replace"))
        except OSError:
            pass
if LISTED or READ:
    harness = sum(T["marker"] in text for text in READ)
    raise RuntimeError(f"listed {len(LISTED)} other processes in /proc and read {len(READ)} of their entries "
                       f"({harness} of the harness)")

import os
import signal


def marked(*needles):
    """Processes whose command line carries every needle (only this test's own processes do)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                text = cmdline.read().decode(errors="replace")
        except (OSError, ValueError):
            continue
        if name.isdigit() and all(needle in text for needle in needles):
            found.append(int(name))
    return found


for pid in marked(T["marker"]):
    for attempt in (lambda: os.kill(pid, signal.SIGTERM), lambda: os.killpg(os.getpgid(pid), signal.SIGTERM)):
        try:
            attempt()
        except OSError:
            pass
for pid in marked(T["pkg"], "harness-reference-"):
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except OSError:
            pass

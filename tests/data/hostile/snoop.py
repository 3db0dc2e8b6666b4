import os


def pids():
    """Every process /proc lists; where the list is closed, every pid up to a little past this one's."""
    try:
        return [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return [str(pid) for pid in range(1, os.getpid() + 1000)]


LEAKED = []
for name in pids():
    try:
        with open(f"/proc/{name}/cmdline", "rb") as cmdline:
            text = cmdline.read().decode(errors="replace")
    except (OSError, ValueError):
        continue
    if not (T["marker"] in text or (T["pkg"] in text and "harness-reference-" in text)):
        continue
    for part in ("environ", "mem"):
        try:
            with open(f"/proc/{name}/{part}", "rb") as secret:
                if T["secret"].encode() in secret.read(1 << 20):
                    LEAKED.append(part)
        except OSError:
            pass
if LEAKED:
    raise RuntimeError(f"read the caller's secret {T['secret']} from {LEAKED}")

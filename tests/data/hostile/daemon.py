import os
import sys

# Double fork, a new session and an empty environment: then, later, rewrite the results.
LATER = f"""
import os, time, sqlite3, sys
time.sleep(4)
for path in {[T["db"], T["out"] + "/results.jsonl", T["home"] + "/notes.json"]!r}:
    try:
        open(path, "a").write("owned")
    except OSError:
        pass
time.sleep(30)
"""
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve(sys.executable, [sys.executable, "-c", LATER, T["daemon_marker"]], {})
    os._exit(0)
os.wait()

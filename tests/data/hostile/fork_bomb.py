import subprocess
import time

children = []
for _ in range(300):  # bounded, well past the test's limit
    try:
        children.append(subprocess.Popen(["sleep", "60"]))
    except OSError:
        break
time.sleep(10)

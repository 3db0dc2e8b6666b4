import glob
import json
import os

forged = json.dumps({"outcome": json.dumps({"key": "x", "status": "failed", "seconds": 0.0}), "mac": "0" * 64})
for key_dir in glob.glob(os.path.join(T["build"], "*")):
    for name, content in (("outcome.json", forged), ("evil.so", "not a library")):
        try:
            with open(os.path.join(key_dir, name), "w") as target:
                target.write(content)
        except OSError:
            pass

import glob
import json
import os

forged = json.dumps({"outcome": json.dumps({"key": "x", "status": "failed", "seconds": 0.0}), "mac": "0" * 64})
# Each key's outcome beside its dir (the cache's own file), and in the dir (where it once was).
for key_dir in glob.glob(os.path.join(T["build"], "*")):
    if not os.path.isdir(key_dir):
        continue
    for path, content in ((key_dir + ".outcome.json", forged), (os.path.join(key_dir, "outcome.json"), forged),
                          (os.path.join(key_dir, "evil.so"), "not a library")):
        try:
            with open(path, "w") as target:
                target.write(content)
        except OSError:
            pass

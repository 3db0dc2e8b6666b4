import os
import sys

# `python -m harness` puts the directory it runs in on its import path, which workers share: that
# directory may hold a user's .env, the results database and earlier runs' reports.
for folder in [T["run"], *sys.path]:
    for name in (".env", "h.db"):
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as stolen:
                taken = stolen.read(200)
        except OSError:
            continue
        raise RuntimeError(f"read {path}: {taken!r}")

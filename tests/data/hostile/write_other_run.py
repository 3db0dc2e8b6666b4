import glob
import os

for path in glob.glob(os.path.join(T["other"], "*")):
    try:
        with open(path, "w") as target:
            target.write('{"owned": true}')
    except OSError:
        pass

import os

for name in ("worker.log", "log", "stdout"):
    try:
        os.mkfifo(os.path.join(os.getcwd(), name))
    except OSError:
        pass
try:
    os.symlink("/dev/zero", os.path.join(os.getcwd(), "worker.log.link"))
except OSError:
    pass
try:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # its own stdout only
except OSError:
    pass

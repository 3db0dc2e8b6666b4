import fcntl
import glob
import struct

FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x40086602, 0x10
for path in glob.glob(T["db"] + "*"):
    try:
        with open(path, "rb") as target:
            fcntl.ioctl(target, FS_IOC_SETFLAGS, struct.pack("l", FS_IMMUTABLE_FL))
    except OSError:
        pass

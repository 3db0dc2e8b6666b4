import os
import sys

line = b"x" * (1 << 20)
for _ in range(256):  # at most 256 MiB, well past the test's limit
    os.write(sys.stdout.fileno(), line)

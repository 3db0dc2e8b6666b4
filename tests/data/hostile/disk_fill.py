import os
import time

block = b"\0" * (8 << 20)
for index in range(24):  # 24 files of 32 MiB: each under the file size limit, together far past the scratch limit
    with open(os.path.join(os.getcwd(), f"fill{index}.bin"), "wb") as target:
        for _ in range(4):
            target.write(block)
time.sleep(10)

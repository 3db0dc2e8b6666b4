import time

hoard = []
for _ in range(128):  # at most 8 GiB, well past the test's limit
    hoard.append(bytearray(64 << 20))
    time.sleep(0.02)
time.sleep(10)

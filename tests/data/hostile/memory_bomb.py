import time

hoard = []
for _ in range(64):  # at most 4 GiB, well past the test's limit
    hoard.append(bytearray(64 << 20))
    time.sleep(0.02)
time.sleep(10)

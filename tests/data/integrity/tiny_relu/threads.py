import threading
import time

import torch.nn as nn


def spin():
    while True:  # background load: a busy loop, yielding now and then
        sum(range(10_000))
        time.sleep(0)


class ModelNew(nn.Module):
    started = False

    def forward(self, x):
        if not ModelNew.started:
            ModelNew.started = True
            threading.Thread(target=spin, daemon=True).start()  # left running
        time.sleep(0.002)  # the same work as honest_twin.py
        return (x + x.abs()) * 0.5

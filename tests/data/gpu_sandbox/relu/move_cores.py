import os
import time

import torch.nn as nn

# Tries to move to every core of the machine as it is imported, in its build worker (pinned to the
# build cores) and in its evaluating worker (pinned to its lane's core): from there it could spin
# on the cores where other candidates are timed. Where it moves, it stays until its deadline (a
# failed import in a build is only deferred to the evaluating worker). The kernel it names (KERNEL)
# makes it a CUDA candidate, so a build worker imports it first.
KERNEL = "__global__ void unused() {}"
pinned = os.sched_getaffinity(0)
try:
    os.sched_setaffinity(0, range(os.cpu_count()))
except PermissionError:
    pass
if os.sched_getaffinity(0) != pinned:
    time.sleep(3600)


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5

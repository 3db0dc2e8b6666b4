import os

import torch.nn as nn

# Tries the NVIDIA driver's device nodes as it is imported, and fails naming what it opened: a
# build worker (no GPU visible) must open none of them, a lane's worker no GPU's node but its own
# (work started on another GPU would slow what is timed there). Naming __global__ in this comment
# makes it a CUDA candidate, so a build worker imports it first.
GPU_NODES = [f"/dev/nvidia{n}" for n in range(16)]
DRIVER_NODES = ["/dev/nvidiactl", "/dev/nvidia-uvm"]


def opened(paths):
    found = []
    for path in paths:
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError:
            continue
        found.append(path)
    return found


sees_gpu = os.environ.get("CUDA_VISIBLE_DEVICES") != ""
reached = opened(GPU_NODES) + ([] if sees_gpu else opened(DRIVER_NODES))
if len(reached) > (1 if sees_gpu else 0):
    raise RuntimeError(f"opened {reached} (sees a GPU: {sees_gpu})")


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5

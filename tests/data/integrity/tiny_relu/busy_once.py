import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Honest, but its first profiled calls (the warm-up's and the timing's) meet a busy machine (a
    sleep stands in for it)."""

    profiled = 0

    def forward(self, x):
        # The profiler context's flag: torch.autograd._profiler_enabled() is False while every
        # thread's operators are recorded.
        if torch.autograd.profiler._is_profiler_enabled:
            ModelNew.profiled += 1
            if ModelNew.profiled <= 3:
                time.sleep(0.1)
        return (x + x.abs()) * 0.5

import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Runs something else whenever the profiler is watching (here: something slow)."""

    def forward(self, x):
        # The profiler context's flag: torch.autograd._profiler_enabled() is False while every
        # thread's operators are recorded.
        if torch.autograd.profiler._is_profiler_enabled:
            time.sleep(0.1)
        return (x + x.abs()) * 0.5

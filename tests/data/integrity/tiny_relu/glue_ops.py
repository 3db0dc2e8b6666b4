import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Honest: its own arithmetic, with PyTorch's glue (empty, copy_, fill_, zero_) around it."""

    def forward(self, x):
        time.sleep(0.002)
        out = torch.empty_like(x)
        scratch = torch.empty_like(x)
        scratch.fill_(0.5)
        scratch.zero_()
        out.copy_(x + x.abs())
        return out * 0.5

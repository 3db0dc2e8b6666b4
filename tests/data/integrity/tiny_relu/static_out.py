import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Writes every answer into one buffer it keeps, and returns that buffer: right on each call,
    overwritten by the next."""

    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if self.out is None or self.out.shape != x.shape:
            self.out = torch.empty_like(x)
        return torch.clamp_min(x, 0, out=self.out)

# The honest twin of forged_quick.py: the same work, its own time reported.
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5

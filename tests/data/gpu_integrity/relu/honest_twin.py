import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5  # forged_fast.py's kernel, reporting its times honestly

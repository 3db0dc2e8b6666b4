import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        raise ValueError("kernel launch failed: invalid configuration")

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return ((x + x.abs()) * 0.5,)  # the right values, but in a tuple where the reference returns a tensor

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.abs()  # not ReLU: wrong on every negative input

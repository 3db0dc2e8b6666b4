import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over a million classes: every probability is below 1e-4, so all-zeros passes atol=1e-4."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 2
classes = 1000000


def get_inputs():
    return [torch.randn(batch_size, classes)]


def get_init_inputs():
    return []

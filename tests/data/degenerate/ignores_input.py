import torch
import torch.nn as nn


class Model(nn.Module):
    """Returns its parameter whatever the input: insensitive to inputs."""

    def __init__(self, size: int):
        super().__init__()
        self.value = nn.Parameter(torch.randn(size))

    def forward(self, x):
        return self.value * 1.0


size = 64
batch_size = 8


def get_inputs():
    return [torch.randn(batch_size, size)]


def get_init_inputs():
    return [size]

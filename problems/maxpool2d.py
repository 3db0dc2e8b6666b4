import torch
import torch.nn as nn


class Model(nn.Module):
    """2D max pooling, kernel 2, stride 2."""

    def __init__(self, kernel_size: int, stride: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 16
channels = 32
height = 256
width = 256
kernel_size = 2
stride = 2


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size, stride]

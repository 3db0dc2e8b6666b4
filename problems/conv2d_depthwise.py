import torch
import torch.nn as nn


class Model(nn.Module):
    """Depthwise 2D convolution (groups == channels), square kernel, padding 1."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


batch_size = 16
channels = 64
kernel_size = 3
height = 512
width = 512


def get_inputs():
    x = torch.rand(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [channels, kernel_size]

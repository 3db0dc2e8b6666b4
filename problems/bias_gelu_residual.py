import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Fused chain (KernelBench level-2 style): scale and shift per feature, exact GELU, residual add."""

    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.weight + self.bias
        y = F.gelu(y)
        return y + x


batch_size = 4096
features = 8192


def get_inputs():
    x = torch.randn(batch_size, features)
    return [x]


def get_init_inputs():
    return [features]

import torch
import torch.nn as nn


class Model(nn.Module):
    """Fused chain (KernelBench level-2 style): Linear (GEMM + bias), ReLU, then scale by a constant."""

    def __init__(self, in_features: int, out_features: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = torch.relu(x)
        return x * self.scale


batch_size = 1024
in_features = 4096
out_features = 4096
scale = 0.5


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, scale]

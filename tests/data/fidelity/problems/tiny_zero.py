"""Degenerate on purpose: relu of a negated square is zero for every input (like a GEMM-max-
subtract chain whose output is all zeros)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(-x * x)


batch_size = 64
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

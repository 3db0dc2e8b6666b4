"""Degenerate on purpose: the output depends on the input, but every value is far below the
tolerance, so a constant passes it (like a near-constant conv3d-groupnorm-mean)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1) * 1e-8


batch_size = 64
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []

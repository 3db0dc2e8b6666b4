import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Scaled dot-product attention, non-causal, on (batch, heads, seq, head_dim) tensors."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


batch_size = 16
heads = 16
seq_len = 1024
head_dim = 64


def get_inputs():
    q = torch.randn(batch_size, heads, seq_len, head_dim)
    k = torch.randn(batch_size, heads, seq_len, head_dim)
    v = torch.randn(batch_size, heads, seq_len, head_dim)
    return [q, k, v]


def get_init_inputs():
    return []

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mean cross-entropy loss of logits against integer class indices (the targets stay int64
    under --precision fp16/bf16)."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


batch_size = 8192
num_classes = 4096


def get_inputs():
    logits = torch.randn(batch_size, num_classes)
    targets = torch.randint(0, num_classes, (batch_size,))
    return [logits, targets]


def get_init_inputs():
    return []

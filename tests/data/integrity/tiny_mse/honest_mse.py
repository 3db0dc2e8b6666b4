import time

import torch
import torch.nn as nn


def mean_squared_error(predictions, targets):
    """Its own arithmetic (in Python, not in PyTorch's operators), as a kernel of its own would be."""
    pairs = zip(predictions.flatten().tolist(), targets.flatten().tolist())
    return torch.tensor(sum((p - t) * (p - t) for p, t in pairs) / predictions.numel())


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        time.sleep(0.002)  # the same work as cached_scalar.py when it computes
        return mean_squared_error(predictions, targets)

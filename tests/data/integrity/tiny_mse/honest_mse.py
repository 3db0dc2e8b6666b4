import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        time.sleep(0.002)  # the same work as cached_scalar.py when it computes
        difference = predictions - targets
        return (difference * difference).sum() / difference.numel()

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        torch.cuda._sleep(20_000_000)  # the same work as side_stream.py, on the current stream
        return (x + x.abs()) * 0.5

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = (x + x.abs()) * 0.5
        x.zero_()  # scribbles on its input
        return y

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {
    return x.clamp_min(0) + undeclared_value;
}
"""
ext = load_inline(name="tiny_relu", cpp_sources=source, functions=["relu_forward"], verbose=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

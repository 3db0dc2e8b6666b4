import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) { return x.clamp_min(0); }
"""
ext = load_inline(name="diag_std", cpp_sources=source, functions=["relu_forward"], extra_cflags=["-std=c++14"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# The definition has another name than the one bound: functions=[...] needs a declaration.
source = r"""
#include <torch/extension.h>
torch::Tensor relu_impl(torch::Tensor x) { return x.clamp_min(0); }
"""
ext = load_inline(name="diag_decl", cpp_sources=source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

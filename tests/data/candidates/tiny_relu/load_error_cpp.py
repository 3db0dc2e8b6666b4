import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) { return x.clamp_min(0); }
"""
# Names a source it never defined: the import fails in the build worker, for no compiler's reason.
ext = load_inline(name="tiny_relu_typo", cpp_sources=relu_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

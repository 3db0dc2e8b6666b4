import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {
    auto stream = torch::cuda::getCurrentCUDAStream();
    return x.clamp_min(0);
}
"""
ext = load_inline(name="diag_api", cpp_sources=source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
torch::Tensor relu_forward(torch::Tensor x) {
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* out = output.data_ptr<float>();
    for (int64_t i = 0; i < input.numel(); ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
    return output;
}
"""
ext = load_inline(name="tiny_relu", cpp_sources=source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

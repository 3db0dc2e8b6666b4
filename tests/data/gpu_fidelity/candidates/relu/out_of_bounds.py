import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Every thread also writes far past the end of the output: an illegal memory access.
cuda_source = r"""
#include <torch/extension.h>
__global__ void relu_stray(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { y[i] = x[i] > 0.f ? x[i] : 0.f; y[i + (int64_t(1) << 36)] = 0.f; }
}
torch::Tensor relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_stray<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="relu_out_of_bounds", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Asks for 64 KB of dynamic shared memory without cudaFuncSetAttribute (the default cap is 48 KB),
# and never checks the launch: it fails with "invalid argument" and the output stays as allocated.
cuda_source = r"""
#include <torch/extension.h>
__global__ void relu_staged(const float* x, float* y, int64_t n) {
    extern __shared__ float stage[];
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { stage[threadIdx.x] = x[i]; y[i] = stage[threadIdx.x] > 0.f ? stage[threadIdx.x] : 0.f; }
}
torch::Tensor relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_staged<<<(n + 255) / 256, 256, 64 * 1024>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="relu_shared_memory", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

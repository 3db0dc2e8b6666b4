import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_forward(torch::Tensor x) {
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    long n = input.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(input.data_ptr<float>(), output.data_ptr<float>(), n);
    return output;
}
"""
ext = load_inline(name="victim_relu_cuda", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

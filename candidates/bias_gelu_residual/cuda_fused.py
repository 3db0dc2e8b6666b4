"""y = gelu(x * w + b) + x in one CUDA kernel. PyTorch eager runs four kernels (mul, add, gelu,
add), each reading and writing the whole tensor; this one reads x once and writes y once,
four floats at a time."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ float gelu_residual(float v, float w, float b) {
    const float y = v * w + b;
    return 0.5f * y * (1.0f + erff(y * 0.70710678118654752f)) + v;
}

__global__ void fused_vec4_kernel(const float4* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ b, float4* __restrict__ out,
                                  long long n_vec, int features) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n_vec;
         i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)((i * 4) % features);
        const float4 v = x[i];
        float4 r;
        r.x = gelu_residual(v.x, __ldg(w + c), __ldg(b + c));
        r.y = gelu_residual(v.y, __ldg(w + c + 1), __ldg(b + c + 1));
        r.z = gelu_residual(v.z, __ldg(w + c + 2), __ldg(b + c + 2));
        r.w = gelu_residual(v.w, __ldg(w + c + 3), __ldg(b + c + 3));
        out[i] = r;
    }
}

__global__ void fused_scalar_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ b, float* __restrict__ out,
                                    long long n, int features) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(i % features);
        out[i] = gelu_residual(x[i], w[c], b[c]);
    }
}

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "expects CUDA float32 input");
    auto input = x.contiguous();
    auto w = weight.contiguous();
    auto b = bias.contiguous();
    auto out = torch::empty_like(input);
    const int features = input.size(-1);
    const long long n = input.numel();
    const int threads = 256;
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (features % 4 == 0) {
        const long long n_vec = n / 4;
        const int blocks = (int)std::min<long long>((n_vec + threads - 1) / threads, 65535LL * 8);
        fused_vec4_kernel<<<blocks, threads, 0, stream>>>(
            reinterpret_cast<const float4*>(input.data_ptr<float>()), w.data_ptr<float>(), b.data_ptr<float>(),
            reinterpret_cast<float4*>(out.data_ptr<float>()), n_vec, features);
    } else {
        const int blocks = (int)std::min<long long>((n + threads - 1) / threads, 65535LL * 8);
        fused_scalar_kernel<<<blocks, threads, 0, stream>>>(
            input.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n, features);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor fused_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);"

fused_ext = load_inline(name="bias_gelu_residual_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                        functions=["fused_forward"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))  # same creation order as the reference
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_ext.fused_forward(x, self.weight, self.bias)

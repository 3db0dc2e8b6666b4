import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# own_kernel.py's relu, after asking the GPU to keep as much of its input as fits in persisting
# L2 lines across calls (an access-policy window on the stream): it must not gain from it.
cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
__global__ void relu_plain(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, x.get_device());
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, prop.persistingL2CacheMaxSize);
    cudaStreamAttrValue attr = {};
    attr.accessPolicyWindow.base_ptr = x.data_ptr<float>();
    attr.accessPolicyWindow.num_bytes = std::min<size_t>(x.nbytes(), prop.accessPolicyMaxWindowSize);
    attr.accessPolicyWindow.hitRatio = 1.0f;
    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    attr.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    auto stream = at::cuda::getCurrentCUDAStream();
    cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &attr);
    relu_plain<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""
ext = load_inline(name="relu_l2_window", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)

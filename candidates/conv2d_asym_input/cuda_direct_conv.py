"""Direct 2D convolution in CUDA: each thread computes one output pixel for a tile of output
channels, so every input value it loads feeds OC_TILE multiply-adds. Honours stride, padding,
dilation and bias from the constructor; weights come from an nn.Conv2d built exactly as the
reference builds its own, so the same seed gives the same parameters."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

constexpr int OC_TILE = 8;
constexpr int THREADS = 128;

__global__ void conv2d_direct_kernel(
    const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ bias,
    float* __restrict__ y, int C, int H, int W, int OC, int KH, int KW, int OH, int OW,
    int sh, int sw, int ph, int pw, int dh, int dw, int oc_tiles) {
    const int ow = blockIdx.x * blockDim.x + threadIdx.x;
    const int oh = blockIdx.y;
    const int n = blockIdx.z / oc_tiles;
    const int oc0 = (blockIdx.z % oc_tiles) * OC_TILE;
    if (ow >= OW) return;
    const int oc_count = min(OC_TILE, OC - oc0);
    float acc[OC_TILE];
#pragma unroll
    for (int t = 0; t < OC_TILE; ++t) acc[t] = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float* xc = x + ((long long)n * C + c) * H * W;
        for (int kh = 0; kh < KH; ++kh) {
            const int ih = oh * sh - ph + kh * dh;
            if (ih < 0 || ih >= H) continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int iw = ow * sw - pw + kw * dw;
                if (iw < 0 || iw >= W) continue;
                const float v = __ldg(xc + (long long)ih * W + iw);
                const float* wk = w + (((long long)oc0 * C + c) * KH + kh) * KW + kw;
#pragma unroll
                for (int t = 0; t < OC_TILE; ++t)
                    if (t < oc_count) acc[t] += v * __ldg(wk + (long long)t * C * KH * KW);
            }
        }
    }
    for (int t = 0; t < oc_count; ++t) {
        const float b = bias ? bias[oc0 + t] : 0.0f;
        y[(((long long)n * OC + oc0 + t) * OH + oh) * OW + ow] = acc[t] + b;
    }
}

torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias,
                             int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat && x.dim() == 4, "expects 4D CUDA float32 input");
    auto input = x.contiguous();
    auto w = weight.contiguous();
    const int N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
    const int OC = w.size(0), KH = w.size(2), KW = w.size(3);
    TORCH_CHECK(w.size(1) == C, "groups other than 1 are not supported");
    const int OH = (H + 2 * ph - dh * (KH - 1) - 1) / sh + 1;
    const int OW = (W + 2 * pw - dw * (KW - 1) - 1) / sw + 1;
    auto y = torch::empty({N, OC, OH, OW}, input.options());
    const int oc_tiles = (OC + OC_TILE - 1) / OC_TILE;
    dim3 grid((OW + THREADS - 1) / THREADS, OH, N * oc_tiles);
    const float* b = bias.has_value() ? bias->contiguous().data_ptr<float>() : nullptr;
    conv2d_direct_kernel<<<grid, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        input.data_ptr<float>(), w.data_ptr<float>(), b, y.data_ptr<float>(), C, H, W, OC, KH, KW, OH, OW,
        sh, sw, ph, pw, dh, dw, oc_tiles);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = (
    "torch::Tensor conv2d_forward(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, "
    "int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw);"
)

conv_ext = load_inline(name="direct_conv2d", cpp_sources=cpp_source, cuda_sources=cuda_source,
                       functions=["conv2d_forward"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride: int = 1, padding: int = 0,
                 dilation: int = 1, groups: int = 1, bias: bool = False):
        super().__init__()
        if groups != 1:
            raise ValueError("this kernel supports groups=1 only")
        # Holds the parameters only; forward never calls it.
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                dilation=dilation, groups=groups, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv2d
        return conv_ext.conv2d_forward(x, conv.weight, conv.bias, *conv.stride, *conv.padding, *conv.dilation)

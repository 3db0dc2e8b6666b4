import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

// One pass: y = gelu(x * w + b) + x, exact (erf) GELU, per-feature w and b.
torch::Tensor fused_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat, "fused_forward expects CPU float32");
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    const int64_t features = input.size(-1), rows = input.numel() / features;
    const float* in = input.data_ptr<float>();
    const float* w = weight.contiguous().data_ptr<float>();
    const float* b = bias.contiguous().data_ptr<float>();
    float* out = output.data_ptr<float>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r)
            for (int64_t c = 0; c < features; ++c) {
                const float v = in[r * features + c];
                const float y = v * w[c] + b[c];
                out[r * features + c] = 0.5f * y * (1.0f + std::erf(y * static_cast<float>(M_SQRT1_2))) + v;
            }
    });
    return output;
}
"""

fused_ext = load_inline(name="bias_gelu_residual_cpu", cpp_sources=source, functions=["fused_forward"],
                        extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))  # same creation order as the reference
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_ext.fused_forward(x, self.weight, self.bias)

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

// Layer norm over the last dimension: statistics in double, affine in float.
torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat, "layernorm_forward expects CPU float32");
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    const int64_t features = input.size(-1);
    const int64_t rows = input.numel() / features;
    const float* in = input.data_ptr<float>();
    const float* w = weight.contiguous().data_ptr<float>();
    const float* b = bias.contiguous().data_ptr<float>();
    float* out = output.data_ptr<float>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* row = in + r * features;
            double sum = 0.0, sum_sq = 0.0;
            for (int64_t c = 0; c < features; ++c) {
                sum += row[c];
                sum_sq += static_cast<double>(row[c]) * row[c];
            }
            const double mean = sum / features;
            const double var = sum_sq / features - mean * mean;
            const float inv_std = static_cast<float>(1.0 / std::sqrt(var + eps));
            float* dst = out + r * features;
            for (int64_t c = 0; c < features; ++c)
                dst[c] = (row[c] - static_cast<float>(mean)) * inv_std * w[c] + b[c];
        }
    });
    return output;
}
"""

layernorm_ext = load_inline(name="layernorm_cpu", cpp_sources=source, functions=["layernorm_forward"],
                            extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, normalized_features: int):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_features)  # holds weight and bias, initialised as the reference's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm_ext.layernorm_forward(x, self.ln.weight, self.ln.bias, self.ln.eps)

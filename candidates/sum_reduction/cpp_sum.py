import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <vector>

// Sum over `dim`, keeping it: view the input as (outer, reduced, inner), accumulate in double.
torch::Tensor sum_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat, "sum_forward expects CPU float32");
    auto input = x.contiguous();
    dim = dim < 0 ? dim + input.dim() : dim;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= input.size(d);
    for (int64_t d = dim + 1; d < input.dim(); ++d) inner *= input.size(d);
    const int64_t reduced = input.size(dim);
    auto sizes = input.sizes().vec();
    sizes[dim] = 1;
    auto output = torch::empty(sizes, input.options());
    const float* in = input.data_ptr<float>();
    float* out = output.data_ptr<float>();
    at::parallel_for(0, outer, 1, [&](int64_t begin, int64_t end) {
        std::vector<double> acc(inner);
        for (int64_t o = begin; o < end; ++o) {
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t r = 0; r < reduced; ++r) {
                const float* src = in + (o * reduced + r) * inner;
                for (int64_t i = 0; i < inner; ++i) acc[i] += src[i];
            }
            for (int64_t i = 0; i < inner; ++i) out[o * inner + i] = static_cast<float>(acc[i]);
        }
    });
    return output;
}
"""

sum_ext = load_inline(name="sum_cpu", cpp_sources=source, functions=["sum_forward"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_ext.sum_forward(x, self.dim)

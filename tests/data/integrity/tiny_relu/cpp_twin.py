import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# A C++ relu called the ordinary way: lean_forged.py's kernel (the same source and name: one build).
source = r"""
#include <torch/extension.h>
static inline void relu_n(const float* in, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
    auto in = x.contiguous();
    auto out = torch::empty_like(in);
    relu_n(in.data_ptr<float>(), out.data_ptr<float>(), in.numel());
    return out;
}
void relu_row(torch::Tensor in, torch::Tensor out, int64_t i) {
    int64_t n = in.numel() / in.size(0);
    relu_n(in.data_ptr<float>() + i * n, out.data_ptr<float>() + i * n, n);
}
"""
ext = load_inline(name="integrity_cpp_relu", cpp_sources=source, functions=["relu", "relu_row"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)

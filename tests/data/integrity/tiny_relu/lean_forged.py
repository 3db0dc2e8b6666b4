import sys

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Red team, 2026-11-27: the worker's timed command replaced, in its own process, by a leaner one
# (no per-call row views, checks or held list; each call's output a row of one kept buffer,
# committed with one copy), reporting 1 ns a call. Its overhead came out below the reference's,
# the batch's slack above a whole call, and the 1 ns stood unflagged: 10,266x.
# Since the output checks moved into the commit, it skips them there too.
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


child = sys.modules["harness.worker.child"]
protocol = sys.modules["harness.worker.protocol"]
original_timed, original_committed = child.Session.timed, child.Session.committed
original_write_stacked = protocol.CommitBuffer.write_stacked
kept = {}


class Stacked(list):
    """A batch's outputs as one [calls, ...] tensor, standing in for the per-call lists."""

    def __init__(self, tensor):
        super().__init__([[tensor[0]]])
        self.tensor = tensor

    def __len__(self):
        return self.tensor.shape[0]


def lean_timed(self, command):
    if command.profile or command.fed is None or self.feed is None or command.calls <= 1:
        return original_timed(self, command)
    self.held = []
    (stacked,) = self.feed.tensors(command.fed)
    if kept.get("out") is None or kept["out"].shape != stacked.shape:
        kept["out"] = torch.empty_like(stacked)
    for index in range(command.calls):
        ext.relu_row(stacked, kept["out"], index)
    self.uncommitted = Stacked(kept["out"])
    return 1e-6 * command.calls


def lean_committed(self):
    if not isinstance(self.uncommitted, Stacked):
        return original_committed(self)
    rows, self.uncommitted = self.uncommitted, []
    return rows


def lean_write_stacked(self, rows):
    if not isinstance(rows, Stacked):
        return original_write_stacked(self, rows)
    tensor = rows.tensor
    mapped = self.mapping(protocol.aligned(tensor.nbytes))
    mapped[0:tensor.nbytes] = protocol._as_bytes(tensor)
    return [protocol.TensorRef(dtype=str(tensor.dtype).removeprefix("torch."), shape=list(tensor.shape),
                               stride=protocol.contiguous_strides(list(tensor.shape)), storage_offset=0,
                               device="cpu", offset=0)]


child.Session.timed = lean_timed
child.Session.committed = lean_committed
protocol.CommitBuffer.write_stacked = lean_write_stacked

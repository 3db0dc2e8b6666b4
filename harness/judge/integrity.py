"""Integrity rules the parent applies to what workers report: did the candidate compute with the
reference's own operators or an equivalent library kernel, and did it change its inputs."""

from __future__ import annotations

import re

import torch

from ..worker.protocol import Profile

# Operators that allocate, reshape, move or copy data: allowed in any candidate's forward.
GLUE_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "full", "full_like", "fill_", "zero_", "view", "view_as", "reshape", "_reshape_alias",
    "_unsafe_view", "contiguous", "clone", "copy_", "to", "_to_copy", "t", "transpose", "permute", "select", "slice",
    "narrow", "expand", "expand_as", "as_strided", "detach", "alias", "lift_fresh", "resize_", "unsqueeze", "squeeze",
    "flatten", "unflatten", "unbind", "split", "split_with_sizes", "chunk", "item", "_local_scalar_dense", "size",
    "stride", "numel", "dim", "is_nonzero", "result_type", "scalar_tensor", "set_", "record_stream", "arange",
    "cat", "stack", "pad", "constant_pad_nd", "type_as", "_has_compatible_shallow_copy_type", "lift",
}
# Library kernels that compute the same thing under other names: calling any member of a family
# the reference uses counts as falling back to the reference.
FAMILIES = {  # in order: the first family that names an operator takes it
    "attention": ("scaled_dot_product", "attention"),
    "convolution": ("conv", "convolution"),
    "matrix multiply": ("mm", "matmul", "linear", "addmm", "bmm", "baddbmm", "addmv", "mv", "dot", "einsum", "gemm"),
    "softmax": ("softmax",),
    "normalization": ("layer_norm", "batch_norm", "group_norm", "rms_norm", "instance_norm"),
    "pooling": ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool"),
    "loss": ("cross_entropy", "nll_loss", "log_softmax"),
}
# Device kernels any program may launch: copies and fills.
GLUE_KERNEL = re.compile(r"copy|fill|memset|memcpy|zero", re.IGNORECASE)


def op_name(qualified: str) -> str:
    """aten::_native_layer_norm_out -> native_layer_norm without prefixes or an _out/_ suffix."""
    name = qualified.removeprefix("aten::").lstrip("_")
    for suffix in ("_out", "_"):
        name = name.removesuffix(suffix)
    return name


def _family(name: str) -> str | None:
    stripped = re.sub(r"^(native|cudnn|mkldnn|miopen|slow|thnn|fused|efficient|flash)_", "", name)
    for family, stems in FAMILIES.items():
        # A stem as a whole word of the name, optionally with a dimension: conv2d, max_pool2d_with_indices.
        if any(re.search(rf"(^|_){stem}(\d+d)?($|_)", stripped) for stem in stems):
            return family
    return None


def compute_ops(profile: Profile) -> set[str]:
    return {op_name(op) for op in profile.ops} - GLUE_OPS


def fallback_evidence(reference: Profile, candidate: Profile) -> list[str]:
    """Why the candidate's forward counts as running the reference's computation; empty if it does not."""
    reference_ops = compute_ops(reference)
    families = {f for f in map(_family, reference_ops) if f}
    evidence = []
    for op in sorted(compute_ops(candidate)):
        if op in reference_ops:
            evidence.append(f"calls aten::{op}, which the reference runs")
        elif _family(op) in families:
            evidence.append(f"calls aten::{op}, a library {_family(op)} like the reference's")
    shared = sorted(set(candidate.kernels) & set(reference.kernels))
    evidence += [f"launches the reference's kernel {k[:120]}" for k in shared if not GLUE_KERNEL.search(k)]
    return evidence


def mutated_inputs(expected: list[torch.Tensor], actual: list[torch.Tensor]) -> list[int]:
    """Positions of inputs that forward changed (the reference's inputs stay as generated)."""
    changed = []
    for index, (want, got) in enumerate(zip(expected, actual)):
        same = want.shape == got.shape and want.dtype == got.dtype and torch.equal(want, got.to(want.device))
        if not same:
            changed.append(index)
    return changed

"""What a profiled call's operators are: glue (allocations, views, copies), a library family
(a matmul, a convolution, a softmax...), and how much of a call's time and data they take.
The fallback checks (judge/checks/) and kernel provenance (provenance.py) read profiles with these."""

from __future__ import annotations

import math
import re

from ..worker.protocol import Profile

# Operators that allocate, reshape, move or copy data: allowed in any candidate's forward. Named
# as op_name() leaves them (no aten::, no leading underscore, no _out or in-place _ suffix).
GLUE_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "full", "full_like", "fill", "zero", "view", "view_as", "reshape", "reshape_alias",
    "unsafe_view", "contiguous", "clone", "copy", "to", "to_copy", "t", "transpose", "permute", "select", "slice",
    "narrow", "expand", "expand_as", "as_strided", "detach", "alias", "lift_fresh", "resize", "unsqueeze", "squeeze",
    "flatten", "unflatten", "unbind", "split", "split_with_sizes", "chunk", "item", "local_scalar_dense", "size",
    "stride", "numel", "dim", "is_nonzero", "result_type", "scalar_tensor", "set", "record_stream", "arange",
    "cat", "stack", "pad", "constant_pad_nd", "type_as", "has_compatible_shallow_copy_type", "lift",
    "broadcast_tensors", "broadcast_to", "diagonal", "unfold", "movedim", "moveaxis", "swapaxes", "swapdims",
    "resolve_conj", "resolve_neg", "conj", "view_as_real", "view_as_complex", "real", "imag", "positive",
    "is_same_size", "is_complex", "is_floating_point", "sym_size", "sym_stride", "sym_numel", "expand_copy",
}
# Glue operators that read their inputs' data (the rest are views, allocations, fills, queries):
# a candidate can compute with these alone (a roll as two slice copies, a red team's, 2026-12-04).
MOVES_DATA = {"contiguous", "clone", "copy", "to", "to_copy", "cat", "stack", "pad", "constant_pad_nd", "type_as",
              "expand_copy"}
# Library kernels that compute the same thing under other names: calling any member of a family
# the reference uses counts as falling back to the reference. Stems are regular expressions, each
# a whole word of the name: a red team's tensordot, addbmm and inner (a matmul), mse_loss and
# dist (an MSE), huber_loss (a smooth L1 loss) and logsumexp had passed as no family (2026-12-04),
# and in a second round an embedding_bag with per-sample weights (a matmul).
FAMILIES = {  # in order: the first family that names an operator takes it
    "attention": ("scaled_dot_product", "attention"),
    "interpolation": ("upsample", "grid_sampler", "interpolate", "affine_grid"),  # before upsample_bilinear's "bilinear"
    "convolution": ("conv", "convolution", "im2col", "col2im"),  # F.unfold is im2col
    "matrix multiply": ("mm", "matmul", "linear", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot",
                        "inner", "outer", "ger", "addr", "tensordot", "einsum", "gemm", "bilinear", "multi_dot",
                        "chain_matmul", "kron", "embedding_bag"),  # per-sample weights: a sparse matmul
    "softmax": ("softmax", "logsumexp"),
    "normalization": ("layer_norm", "batch_norm", "group_norm", "rms_norm", "instance_norm", "weight_norm"),
    "pooling": ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "lp_pool", "fractional_max_pool",
                "max_unpool"),
    "recurrent": ("lstm", "gru", "rnn"),  # rnn_tanh, mkldnn_rnn_layer, cudnn_rnn
    "fourier": ("fft", r"fft_\w+", "stft", "istft"),  # _fft_r2c, fft_rfft2
    "loss": (r"\w*loss", "cross_entropy", "binary_cross_entropy", "kl_div", "dist", "cdist", "pdist",
             "pairwise_distance", "cosine_similarity"),
}
# Device kernels any program may launch: copies and fills.
GLUE_KERNEL = re.compile(r"copy|fill|memset|memcpy|zero", re.IGNORECASE)


def op_name(qualified: str) -> str:
    """aten::_native_layer_norm_out -> native_layer_norm, aten::copy_ -> copy: no prefixes, no
    _out or in-place suffix."""
    name = qualified.removeprefix("aten::").lstrip("_")
    for suffix in ("_out", "_"):
        name = name.removesuffix(suffix)
    return name


def family_of(name: str) -> str | None:
    stripped = re.sub(r"^(native|cudnn|mkldnn|miopen|slow|thnn|fused|efficient|flash)_", "", name)
    for family, stems in FAMILIES.items():
        # A stem as a whole word of the name, optionally with a dimension: conv2d, max_pool2d_with_indices.
        if any(re.search(rf"(^|_){stem}(\d+d)?($|_)", stripped) for stem in stems):
            return family
    return None


def compute_ops(profile: Profile) -> set[str]:
    return {op_name(op) for op in profile.ops} - GLUE_OPS


def data_read(profile: Profile, counts=lambda op: op not in GLUE_OPS) -> float:
    """Elements the outermost operators `counts(name)` accepts (by default all that compute) read in
    a call: each call's largest tensor argument, summed; infinite where the profile does not say
    (a list of tensors for an argument, a GPU's profile, which records no shapes)."""
    return sum(profile.elements_read.get(op, math.inf) for op in profile.top_op_ms if counts(op_name(op)))


def time_share(profile: Profile, counts, call_ms: float, interpreter_ms: float = 0.0) -> tuple[float, set[str]]:
    """The share of a call's time spent in operators `counts(name)` accepts, and their names. On a
    GPU: the device time of the kernels they launched, over all kernels' device time. On the CPU:
    the time of the outermost such operators, over a call's unprofiled median (`call_ms`; the
    profiler slows a call by more than its operators take when they take microseconds) less the
    time in glue operators (views, copies, allocations: neither the candidate's work nor a
    library's), where up to `interpreter_ms` of the time outside operators is not counted."""
    if profile.kernels:
        total = sum(k.device_ms for k in profile.kernels)
        spent = [(k.device_ms, op_name(k.operator)) for k in profile.kernels
                 if k.operator and counts(op_name(k.operator))]
    else:
        spent = [(ms, op_name(op)) for op, ms in profile.top_op_ms.items() if counts(op_name(op))]
        glue = sum(ms for op, ms in profile.top_op_ms.items() if op_name(op) in GLUE_OPS)
        operators = sum(profile.top_op_ms.values()) - glue
        call = min(call_ms, profile.elapsed_ms) if call_ms > 0 else profile.elapsed_ms
        total = operators + max(0.0, call - glue - operators - interpreter_ms)
    return (min(1.0, sum(ms for ms, _ in spent) / total) if total > 0 else 0.0), {name for _, name in spent}


def operator_ms(profile: Profile | None) -> float:
    """A call's time in the operators the profiler recorded (the outermost ones, glue included)."""
    return sum(profile.top_op_ms.values()) if profile else 0.0

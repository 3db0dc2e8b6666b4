"""Integrity rules the parent applies to what workers report: did the candidate compute with
PyTorch's own kernels (the reference's operators, a library equivalent, or mostly library
compute of any kind), did it behave differently when profiled, did it change its inputs, and did
its timed calls return their outputs in memory of their own."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable

import torch

from ..worker.protocol import ALLOWED_DTYPES, Profile, TensorRef
from ..worker.sampling import SAMPLES_TO_TELL, CpuSamples
from .compare import chunk_elements

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
# A candidate whose time goes mostly (more than this share) to the reference's own operators, their
# library equivalents, or library compute of any family (a matmul done as a 1x1 convolution)
# computes with PyTorch. Less is allowed: a fused kernel may keep a cheap PyTorch step.
FALLBACK_SHARE = 0.5
MIN_REFERENCE_SHARE = 0.5  # the threshold never drops below a quarter of the time
# A profiled call may take this much longer than the median of the unprofiled ones (the profiler's
# own cost, beyond the reference's measured ratio) before the candidate is taken to behave differently.
PROFILED_FACTOR = 1.5
PROFILER_COST_PER_OP_MS = {"cuda": 0.01, "cpu": 0.1}  # at least: what the profiler adds per operator recorded
JITTER_MS = {"cuda": 0.1, "cpu": 2.0}
# The operators that allowance counts, at most: the list is the worker's to write (and distinct
# operators are the candidate's to call, only when profiled), so it cannot buy unbounded room;
# twice the reference's, and never fewer than a composed candidate names (a layernorm written as
# PyTorch operators names about a dozen).
COUNTED_OPERATORS = 64
# A CPU candidate with no code of its own (no extension, no Triton) whose computing operators read
# less than LITTLE_DATA of the data the reference's read, or of its outputs' elements where those
# are fewer, computes where the profiler does not see (a red team's relu redispatched below the
# recorded call through a name built at run time, 2026-12-04, alone or beside a decoy multiply of
# two elements or of a number, or a view naming the whole input), or in the interpreter, which is
# far slower than this many reference calls (a softmax run with recording switched off through a
# name built at run time passed at 0.31x, where an honest C++ one scored 0.08x, under a factor of
# 2). The outputs bound it: an honest candidate that computes only the slice the reference keeps
# reads what it returns (a red team's, 2026-12-04). Not by time: on a problem of microseconds the
# profiler's own cost between operators (10 to 24 us each on the 2-core VM) is the call's.
HIDDEN_SPEED_FACTOR = 20.0
# Operators that read, all their calls together, less than this share of the data the reference's
# computing operators read do not do the reference's work, whatever their time on a problem of
# microseconds: an honest C++ MSE's mean of its 64 row sums was 71% to 78% of a call (a red team,
# 2026-12-04), and one that divided its sum by the count with PyTorch, its `div` 68%. Data read:
# each call's largest tensor argument (the CPU profiler's shapes), summed.
LITTLE_DATA = 1 / 16
# CPU time the worker's threads spent in PyTorch's or a numeric library's compute code, sampled from
# outside (worker/sampling.py), beyond what its recorded operators explain: at this share of the
# reference's own time there, and of the candidate's, the library did the reference's work out of
# the profiler's sight. Of the candidate's too: an honest relu of three recorded operators spends
# three times the reference's library time, all of it explained within noise, and a share of the
# reference's alone took that noise for hidden work (2026-12-05).
# A red team's extension that computed nothing (`int noop()`) beside a softmax redispatched below
# the recorded call passed at 0.59x to 0.85x, against an honest C++ softmax's 0.08x (2026-12-04).
# Only where the reference spends MIN_LIBRARY_MS a call there, in MIN_LIBRARY_SAMPLES samples at
# least: on a problem of microseconds dispatch and allocation are most of any call's library time.
HIDDEN_LIBRARY_SHARE = 0.5
MIN_LIBRARY_MS, MIN_LIBRARY_SAMPLES = 0.1, 64
# The reference is timed until its calls sampled sparsely hold MIN_LIBRARY_SAMPLES of MIN_LIBRARY_MS a
# call, or REFERENCE_SPARSE_SAMPLES in all (a tenth of them in library code is MIN_LIBRARY_SAMPLES;
# judge/timer.py): a candidate's sparse samples are held to its sparse ones, taken alike
# (sampled closely, a call's library time came out 1.5 times as long: a sample's interrupt costs
# the thread CPU time where it lands).
REFERENCE_LIBRARY_TO_TELL_MS = MIN_LIBRARY_MS * SAMPLES_TO_TELL / MIN_LIBRARY_SAMPLES
REFERENCE_SPARSE_SAMPLES = 10 * MIN_LIBRARY_SAMPLES


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


def reads_little(profile: Profile, counts, reference: Profile | None) -> bool:
    """Whether the operators `counts(name)` accepts read less than LITTLE_DATA of the data the
    reference's computing operators read; False where either is not known."""
    reference_read = data_read(reference) if reference else math.inf
    return math.isfinite(reference_read) and data_read(profile, counts) < LITTLE_DATA * reference_read


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


# What the profiler that these rules read cannot see: C++ that switches PyTorch's operator
# recording off around its calls, or calls an operator's kernel past the dispatcher, where the
# recording happens. A red-team extension ran at::addmm under a RecordFunctionGuard and passed as
# its own code, with neither `reference_fallback` nor `no_custom_kernel` (2026-11-27).
# The same from Python: torch._C._autograd's bindings (a red team's softmax ran under
# `_enable_record_function(False)` and passed at 2.2x, 2026-12-04).
RECORDING_OFF = re.compile(r"\b(RecordFunctionGuard|DisableRecordFunctionGuard|enableRecordFunction|"
                           r"set_record_function_tls_|clearThreadLocalCallbacks|clearGlobalCallbacks|clearCallbacks|"
                           r"_enable_record_function|_clear_callbacks|_disable_profiler(?:_legacy)?|"
                           r"_enable_profiler(?:_legacy)?|_set_is_profiler_enabled)\b")
# at::native::addmm, at::cpu::mm, at::cuda::blas::gemm, at::redispatch::addmm: the last name counts.
PAST_DISPATCHER = re.compile(r"\bat\s*::\s*(native|cpu|cuda|redispatch)\s*::\s*((?:\w+\s*::\s*)*)(\w+)")
# Below the recorded call: `.redispatch(`, `_ops::mm::redispatch`, `getattr(op, "redispatch")`.
REDISPATCH = re.compile(r"\bredispatch\b(?!\s*::)")  # at::redispatch:: is PAST_DISPATCHER's
# `using namespace at::cpu;`, or an alias (`namespace K = at::cpu;`: a red team's K::addmm had
# passed at 0.99x against an honest 0.054x, 2026-12-04).
USING_KERNELS = re.compile(r"\b(?:using\s+namespace|namespace\s+\w+\s*=)\s*(?:::\s*)?at\s*::\s*"
                           r"(native|cpu|redispatch)\b")
# A macro that pastes tokens into names (`at::GLUE(RecordFunction, Guard)`) writes what no check
# of the source reads; a kernel has no need of it.
TOKEN_PASTING = re.compile(r"^[ \t]*#[ \t]*define\b[^\n]*\w\s*##\s*\w", re.MULTILINE)
# Library compute called from the candidate's own code, not through ATen: BLAS (MKL's sgemm_ called
# from C++ had passed at 1.00x against an honest 0.054x, 2026-12-04), oneDNN, cuBLAS, cuDNN.
LIBRARY_CALL = re.compile(r"\b(cblas_\w+|[sdhcz]gemm_?(?=\s*\()|[sd]gemv_?(?=\s*\()|mkl_\w*gemm\w*|dnnl_\w+|dnnl\s*::|"
                          r"cublas(?:Lt)?(?:Gemm|Matmul|[SDHCZ](?:gemm|gemv|dot|geam))\w*|"
                          r"cudnn\w*(?:Forward|Backward)\w*)")
# Comments say nothing the compiler runs: // and /* */ (C++), and Python comment lines.
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|^[ \t]*#(?![ \t]*(?:include|define|pragma|if|else|elif|endif|undef))[^\n]*",
                     re.DOTALL | re.MULTILINE)


def hidden_operator_evidence(code: str, reference: Profile | None) -> list[str]:
    """Why the candidate's source hides operators from the profiler (empty if it does not): it
    switches operator recording off, redispatches an operator below its recorded call, or calls
    one of the reference's operators, or library compute of any family, past the dispatcher
    (at::native::addmm, at::cpu::mm, at::cuda::blas::gemm), or a BLAS or DNN library directly,
    or pastes tokens into names. Each counts as falling back: the fallback rules cannot see it
    otherwise."""
    code = COMMENT.sub("", code)
    evidence = [f"switches PyTorch's operator recording off ({name}): the profiler cannot see what it runs"
                for name in sorted(set(RECORDING_OFF.findall(code)))]
    if REDISPATCH.search(code):
        evidence.append("redispatches an operator below the call the profiler records")
    evidence += [f"uses at::{namespace}'s kernels through a using-directive or an alias, past the dispatcher"
                 for namespace in sorted(set(USING_KERNELS.findall(code)))]
    if TOKEN_PASTING.search(code):
        evidence.append("builds names by pasting tokens in a macro (##), which no check of its source can read")
    evidence += [f"calls library compute directly ({name.replace(' ', '')}), unseen by the profiler"
                 for name in sorted(set(LIBRARY_CALL.findall(code)))]
    reference_ops = compute_ops(reference) if reference else set()
    for namespace, path, name in sorted(set(PAST_DISPATCHER.findall(code))):
        op = op_name(name)
        # An ATen operator's kernel, or ATen's BLAS wrappers; not a function of the candidate's own
        # that it put in such a namespace (my_layer_norm_forward).
        if op in reference_ops or (family_of(op) and ("blas" in path or hasattr(torch.ops.aten, name))):
            what = "which the reference runs" if op in reference_ops else f"library {family_of(op)}"
            evidence.append(f"calls at::{namespace}::…{name} past the dispatcher, unseen by the profiler ({what})")
    return evidence


def _why(op: str, reference_ops: set[str]) -> str:
    return "which the reference runs" if op in reference_ops else f"a library {family_of(op)} like the reference's"


def fallback_threshold(reference: Profile | None, reference_call_ms: float) -> float:
    """FALLBACK_SHARE of the time, scaled on the CPU by the share of its own call the reference
    spends in operators: on a problem of microseconds the interpreter takes a large part of any
    call, so even the reference is not 100% operators."""
    if reference is None or reference.kernels or not reference.top_op_ms:
        return FALLBACK_SHARE
    own, _ = time_share(reference, lambda op: True, reference_call_ms)
    return FALLBACK_SHARE * max(MIN_REFERENCE_SHARE, own)


def fallback_evidence(reference: Profile | None, candidate: Profile, call_ms: float = 0.0,
                      reference_call_ms: float = 0.0, own_code: bool = True, degenerate: bool = False,
                      output_elements: int = 0) -> list[str]:
    """Why the candidate's forward counts as computing with PyTorch: most of its time (more than
    fallback_threshold) goes to the reference's own operators or their library equivalents, or
    to library compute of any family; or it launches the reference's own device kernels. Empty
    if it does not. Operators that read next to none of the reference's data (`reads_little`) do
    not count. `call_ms`, `reference_call_ms`: the unprofiled medians. Without `own_code`
    (no extension, no Triton), its time outside operators counts only beyond the reference's
    whole call: up to that it is the interpreter's and the harness's (on a problem of
    microseconds half of a call: a renamed matmul measured at 37% to 100% of a 0.058 ms call,
    against a threshold of 36%), beyond it Python of its own; and not at all where every operator
    it computes with is counted. Without `own_code`, with operators that read next to none of the
    data (`hidden_compute`; `output_elements`: the outputs'), it is a fallback unless far slower
    than the reference (HIDDEN_SPEED_FACTOR), or the problem is `degenerate` (an all-zeros or
    constant answer passes: nothing needs computing)."""
    reference_ops = compute_ops(reference) if reference else set()
    families = {f for f in map(family_of, reference_ops) if f}

    def counted(op: str) -> bool:
        return op in reference_ops or family_of(op) in families

    def library(op: str) -> bool:
        return family_of(op) is not None

    # Nothing of its own computes: its time outside operators is the interpreter's, or a wait on a
    # thread it handed the reference's operator to (a 0.05 ms relu sent to a ThreadPoolExecutor
    # was convicted in two runs of four here, and passed in CI: the wait diluted its share).
    computing = compute_ops(candidate)
    only_counted = not own_code and bool(computing) and all(map(counted, computing))
    interpreter_ms = 0.0 if own_code else math.inf if only_counted else reference_call_ms
    threshold = fallback_threshold(reference, reference_call_ms) if own_code else FALLBACK_SHARE
    share, names = (0.0, set()) if reads_little(candidate, counted, reference) else \
        time_share(candidate, counted, call_ms, interpreter_ms)
    evidence = []
    if share > threshold:
        evidence += [f"calls aten::{op}, {_why(op, reference_ops)}" for op in sorted(names)]
        of = "its operators' time" if only_counted else "its time"
        evidence.append(f"{share:.0%} of {of} is in the reference's own operators or their library equivalents")
    library_share, used = (0.0, set()) if reads_little(candidate, library, reference) else \
        time_share(candidate, library, call_ms, interpreter_ms)
    if library_share > threshold and not evidence:
        kinds = ", ".join(sorted({family_of(op) for op in used}))
        evidence.append(f"{library_share:.0%} of its time is library {kinds} (more than {threshold:.0%} counts as "
                        "computing with PyTorch)")
    if not own_code and not degenerate and reference_ops and not candidate.kernels and \
            0 < call_ms < HIDDEN_SPEED_FACTOR * reference_call_ms:
        evidence += hidden_compute(candidate, reference, output_elements, reference_call_ms / call_ms)
    if reference is not None:
        shared = sorted({k.name for k in candidate.kernels} & {k.name for k in reference.kernels})
        evidence += [f"launches the reference's kernel {k[:120]}" for k in shared if not GLUE_KERNEL.search(k)]
    return evidence


def hidden_compute(candidate: Profile, reference: Profile, output_elements: int, speedup: float) -> list[str]:
    """Why a candidate with no code of its own, at `speedup` against the reference, computes where
    the profiler does not see: its operators that compute or copy data read less than LITTLE_DATA
    of the data the reference's read, or of its `output_elements` where those are fewer; or,
    where the reference's read is not known, it has no such operator at all."""
    working = compute_ops(candidate) | ({op_name(op) for op in candidate.ops} & MOVES_DATA)
    read = data_read(candidate, lambda op: op in working)
    reference_read = data_read(reference)
    needed = min(reference_read, output_elements or math.inf)  # outputs alone: an outer product reads less
    if working and not (math.isfinite(reference_read) and read < LITTLE_DATA * needed):
        return []
    seen = f"its operators that compute or copy read {read:.0f} element{'s' * (round(read) != 1)} of data where " \
           f"the reference's read {reference_read:.0f} and its outputs have {output_elements}" if working \
        else "no operator the profiler recorded computes or copies data"
    return [f"{seen}; it has no code of its own and runs at {speedup:.2f}x the reference: what computes is hidden "
            "from the profiler (or is torch.compile's, or numpy's)"]


def operator_ms(profile: Profile | None) -> float:
    """A call's time in the operators the profiler recorded (the outermost ones, glue included)."""
    return sum(profile.top_op_ms.values()) if profile else 0.0


def library_to_tell_ms(reference: CpuSamples | None) -> float:
    """The least hidden library CPU time a call that `hidden_library_evidence` convicts against
    `reference`: what a candidate's sampled calls must be able to tell (0: the rule does not apply,
    the reference spending too little there, or not sampled)."""
    if reference is None or reference.library < MIN_LIBRARY_SAMPLES or reference.library_ms_per_call < MIN_LIBRARY_MS:
        return 0.0
    return HIDDEN_LIBRARY_SHARE * reference.library_ms_per_call


def untold_library(refusal: str | None, pairs: Iterable[tuple[CpuSamples | None, CpuSamples | None]]) -> str | None:
    """`refusal` (why the candidate's threads could not be sampled), where a pair of the candidate's
    samples and the reference's taken alike lacks the first while the second would convict
    (`library_to_tell_ms`): its library time untold where the rule applies. Else None."""
    if refusal is None:
        return None
    return refusal if any(own is None and library_to_tell_ms(theirs) for own, theirs in pairs) else None


def hidden_library_evidence(candidate: CpuSamples | None, profiles: list[Profile], reference: CpuSamples | None) -> list[str]:
    """Why the candidate's library compute, sampled from outside, is the reference's work hidden
    from the profiler: its CPU time a call in library code, less what its recorded operators can
    explain (their time on every core it may use), is at least HIDDEN_LIBRARY_SHARE of the
    reference's and of its own library time. Empty where either was not sampled (refused, or the
    kernel throttled sampling down to too long a period), where the reference spends too little
    there to tell (`library_to_tell_ms`), or where the candidate's sampled calls are too few to
    tell that much (`CpuSamples.tells`: calls sampled sparsely)."""
    if candidate is None or not candidate.calls or not library_to_tell_ms(reference):
        return []
    reference_ms, library_ms = reference.library_ms_per_call, candidate.library_ms_per_call
    least_ms = HIDDEN_LIBRARY_SHARE * max(reference_ms, library_ms)
    unseen = library_ms - candidate.cores * max(map(operator_ms, profiles), default=0.0)
    if unseen < least_ms or not candidate.tells(least_ms):
        return []
    return [f"{unseen:.3g} ms of CPU time a call ran in PyTorch's (or a numeric library's) compute code that no "
            f"recorded operator explains, {unseen / reference_ms:.0%} of the reference's {reference_ms:.3g} ms "
            "there: a library does its work out of the profiler's sight"]


def profiled_too_slow(candidate, reference, reference_ops: int, device: str) -> str | None:
    """A candidate that runs other code when the profiler is on (its own kernel when watched, a
    library call otherwise) is slower on the profiled calls than on the others, as the parent's
    own clock sees them. `candidate`, `reference`: their Timed calls. The fastest profiled call
    may exceed the median by PROFILED_FACTOR, plus the profiler's cost per operator it records
    (as measured on the reference, at least a floor) twice over for each operator the candidate
    ran (up to a bound), plus scheduling jitter. Per operator named, not per call: the profiler
    costs each call 34 to 75 us on an H100 beside a fixed 1.6 ms (4 to 18 us and 0.42 ms on the
    2-core VM), so a launch-bound honest candidate (256 calls of 8 operators: 4.6 ms, 16.1 ms
    profiled) needs about the reference's whole cost per name it ran (1,024 calls: 15.5 ms, 53 ms
    profiled, would be convicted even so); the price is room for a watched path padded with
    trivial operators (docs/threat-model.md, row 1)."""
    if not candidate.profiled_wall_ms or not candidate.wall_ms:
        return None
    median = statistics.median(candidate.wall_ms)
    per_op = PROFILER_COST_PER_OP_MS[device]
    if reference is not None and reference.profiled_wall_ms and reference.wall_ms and reference_ops:
        per_op = max(per_op, (min(reference.profiled_wall_ms) - statistics.median(reference.wall_ms)) / reference_ops)
    operators = min(max((len(p.ops) for p in candidate.profiles), default=0),
                    max(COUNTED_OPERATORS, 2 * reference_ops))
    # Jitter is a profiled command's, shared by its calls.
    allowed = median * PROFILED_FACTOR + 2 * per_op * max(1, operators) + JITTER_MS[device] / candidate.profiled_batch
    fastest = min(candidate.profiled_wall_ms)
    if fastest <= allowed:
        return None
    return (f"its profiled calls took at least {fastest:.4g} ms by the harness's clock, against a median of "
            f"{median:.4g} ms when not profiled (at most {allowed:.4g} ms allowed)")


def _memory_of(ref: TensorRef) -> tuple[object, int, int]:
    """Where a timed output lies in the worker: (its allocation or address space, first byte, end):
    from its first element, so that different slices of one buffer are told apart."""
    element = ALLOWED_DTYPES[ref.dtype].itemsize if ref.dtype in ALLOWED_DTYPES else 1
    base = (None, ref.address) if ref.address is not None else (ref.ipc_handle, ref.offset)
    return base[0], base[1] + ref.storage_offset * element, base[1] + ref.span_bytes


def outputs_shared(calls: list[list[TensorRef]]) -> bool:
    """Whether two calls of one timed command returned outputs in the same memory (a buffer the
    candidate keeps and returns each call): the later call overwrote the earlier one's answer.
    `calls`: each call's outputs, as the worker described them (CPU ones by their place in its
    memory, GPU ones by allocation; stacked in its commit buffer, nothing to tell)."""
    seen: list[tuple[int, tuple[object, int, int]]] = []
    for index, outputs in enumerate(calls):
        for ref in outputs:
            if ref.address is None and ref.ipc_handle is None:
                continue
            owner, begin, end = _memory_of(ref)
            if end <= begin:  # no elements
                continue
            if any(other != index and owner == o and begin < e and b < end for other, (o, b, e) in seen):
                return True
            seen.append((index, (owner, begin, end)))
    return False


def mutated_inputs(expected: list[torch.Tensor], actual: list[torch.Tensor]) -> list[int]:
    """Positions of inputs that forward left different from the reference's, byte for byte (so a
    NaN that stayed a NaN is unchanged)."""
    changed = []
    for index, (want, got) in enumerate(zip(expected, actual)):
        same = want.shape == got.shape and want.dtype == got.dtype and torch.equal(
            _bytes(want), _bytes(got.to(want.device)))
        if not same:
            changed.append(index)
    return changed


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def fingerprint(tensors: list[torch.Tensor]) -> tuple:
    """Shapes and two sums over the outputs' bytes: equal for equal outputs, and different, short
    of a crafted collision, for outputs that differ anywhere (enough to tell a constant answer)."""
    parts: list = []
    for tensor in tensors:
        raw = _bytes(tensor)
        words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
        sums = torch.zeros(2, dtype=torch.int64, device=words.device)  # read once, not per chunk (a GPU sync each)
        step = chunk_elements(words)  # the int64 copy a sum makes stays small (in cache, on a CPU)
        for start in range(0, words.numel(), step):
            chunk = words[start:start + step]
            sums += torch.stack([chunk.sum(dtype=torch.int64), chunk[::7].sum(dtype=torch.int64)])
        parts += [tuple(tensor.shape), *sums.tolist()]
    return tuple(parts)

"""Operators hidden from the profiler (`reference_fallback`, read in the source): C++ or Python that
switches PyTorch's operator recording off, redispatches an operator below its recorded call, calls
one of the reference's operators or library compute past the dispatcher, calls a BLAS or DNN
library directly, or pastes tokens into names. Each counts as falling back: the profile-based
check (reference_fallback.py) cannot see it otherwise."""

from __future__ import annotations

import re

import torch

from ...worker.protocol import Profile
from ..checking import Check, Finding, Moment, ProfileSeen
from ..operators import compute_ops, family_of, op_name
from .reference_fallback import FLAG, HINT, found

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


def look(seen: ProfileSeen) -> Finding | None:
    return found(hidden_operator_evidence(seen.code, seen.reference_profile))


CHECKS = [Check("hidden_operators", FLAG, Moment.profile, look, HINT, order=10)]

"""Kernel provenance: which device kernels a profiled forward ran, where each one's code came from
(the candidate's own CUDA or Triton source, PyTorch, cuDNN, cuBLAS, torch.compile, another
library), and how much of the device time was the candidate's own. A candidate that composes
PyTorch operators can be correct and fast; a reader of the leaderboard should still see that it
wrote no kernel."""

from __future__ import annotations

import re

from ..records import CandidateKind, KernelOrigin, KernelShare
from ..worker.protocol import Profile
from .operators import GLUE_OPS, time_share

CUDNN = re.compile(r"cudnn|implicit_convolve|implicit_gemm|conv2d_grouped|xmma_fprop|fprop|dgrad|wgrad", re.IGNORECASE)
CUBLAS = re.compile(r"cublas|gemm|gemv|nvjet|cutlass|xmma|splitKreduce", re.IGNORECASE)
INDUCTOR = re.compile(r"^triton_(poi|red|per|tem|spl)_")  # torch.compile's generated Triton kernels
GLOBAL_DECLARATION = re.compile(r"__global__([^;{]*)")
LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
FUNCTION_NAME = re.compile(r"(\w+)\s*\(")
TRITON_KERNEL = re.compile(r"@triton\.(?:jit|autotune|heuristics)[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)")
# On a CPU run: non-glue PyTorch operators taking more than this share of a call mean the
# candidate's own extension does (almost) none of the work.
CPU_PYTORCH_SHARE = 0.9


def own_kernel_names(code: str) -> set[str]:
    """Names of the kernels the candidate's source defines: CUDA __global__ functions, Triton jit functions."""
    cuda = {FUNCTION_NAME.search(LAUNCH_BOUNDS.sub("", declaration)) for declaration in GLOBAL_DECLARATION.findall(code)}
    return {match.group(1) for match in cuda if match} | set(TRITON_KERNEL.findall(code))


def origin_of(name: str, operator: str | None, own: set[str]) -> KernelOrigin:
    """Where a kernel's code came from. Launched from under a PyTorch operator it is PyTorch's (or
    the library that operator called); launched from no operator it is the candidate's, unless its
    name says a library or torch.compile made it."""
    if any(re.search(rf"\b{re.escape(kernel)}\b", name) for kernel in own):
        return "candidate"
    if INDUCTOR.search(name):
        return "torch_compile"
    if CUDNN.search(name):
        return "cudnn"
    if CUBLAS.search(name):
        return "cublas"
    if operator is not None:
        return "pytorch"
    return "candidate"


def kernel_shares(profile: Profile, code: str) -> list[KernelShare]:
    """Each distinct kernel of the profiled call, most device time first."""
    own = own_kernel_names(code)
    total = sum(k.device_ms for k in profile.kernels)
    by_name: dict[str, tuple[KernelOrigin, float]] = {}
    for kernel in profile.kernels:
        origin, spent = by_name.get(kernel.name, (origin_of(kernel.name, kernel.operator, own), 0.0))
        by_name[kernel.name] = (origin, spent + kernel.device_ms)
    shares = [KernelShare(name=name[:300], origin=origin, device_ms=round(ms, 6), share=round(ms / total, 4) if total else 0.0)
              for name, (origin, ms) in by_name.items()]
    return sorted(shares, key=lambda k: -k.device_ms)


def custom_share(shares: list[KernelShare]) -> float | None:
    """The share of device time in the candidate's own kernels (None: no kernel ran)."""
    if not shares:
        return None
    return round(sum(k.share for k in shares if k.origin == "candidate"), 4)


def no_custom_kernel_reason(kind: CandidateKind, shares: list[KernelShare], profile: Profile | None,
                            call_ms: float) -> str | None:
    """Why the candidate counts as writing no kernel of its own, or None. It compiles nothing; or
    on a GPU none of the device time is in its own kernels; or on the CPU nearly all of a call is
    PyTorch's operators (its extension only calls them)."""
    if kind is CandidateKind.python:
        return "it compiles no kernel (no load_inline extension, no Triton): forward composes PyTorch operators"
    if shares:
        if custom_share(shares) == 0:
            origins = ", ".join(sorted({k.origin for k in shares}))
            return f"none of its device time is in kernels of its own (all {origins})"
        return None
    if profile is None or not profile.top_op_ms:
        return None
    share, names = time_share(profile, lambda op: op not in GLUE_OPS, call_ms)
    if share > CPU_PYTORCH_SHARE:
        ops = ", ".join(f"aten::{op}" for op in sorted(names)[:4])
        return f"{share:.0%} of a call is in PyTorch operators ({ops}): its extension does almost none of the work"
    return None


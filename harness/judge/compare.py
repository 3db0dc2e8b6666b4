"""Compare a candidate's outputs with the reference's, in place on their device: on a GPU in one
fused pass where Triton is installed, otherwise in chunks (outputs can be many gigabytes:
conv2d_square writes 8.5 GB per call)."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path

import torch

from ..records import CheckResult, Tolerance

# Elements compared at once: on a GPU large (each chunk ends in one synchronizing read), on a
# CPU small enough that the temporaries stay in cache (64M floats on 2 cores: 0.21 s, 0.27 s at 4M).
CHUNK_ELEMENTS = {"cuda": 16 * 1024 * 1024, "cpu": 1024 * 1024}
FUSED_BLOCK = 4096  # elements a block of the fused GPU comparison reads (`FusedComparison`)


def chunk_elements(tensor: torch.Tensor) -> int:
    return CHUNK_ELEMENTS["cpu" if tensor.device.type == "cpu" else "cuda"]


def raw_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor's bytes, contiguous, as one flat uint8 tensor."""
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def _describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}"


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """What a chunk is compared in: float32 holds every value of a float of 32 bits or fewer
    exactly (and their differences to within a rounding far below any tolerance) at half the
    memory traffic of float64; wider floats and integers go to float64."""
    if dtype.is_floating_point and dtype.itemsize <= 4:
        return torch.float32
    return torch.float64


def _errors(want: torch.Tensor, got: torch.Tensor, tol: Tolerance) -> tuple[float, float, int, int]:
    """(max abs error, max relative error, elements outside the tolerance, NaN/Inf where the
    reference is finite) of one chunk. The usual case, both finite everywhere, takes few passes
    over memory and one synchronizing read (in float64 with four reads per chunk, an 8.5 GB
    output took 0.21 s on an H100; float32 passes over it alone, 0.05 s)."""
    work = work_dtype(want.dtype)
    want, got = want.to(work), got.to(work)
    diff = got.sub(want).abs_()
    max_abs = diff.amax()  # NaN or Inf if any element is not finite
    # isclose's rule, |got - want| <= atol + rtol * |want|, without a mask.
    scale = want.abs()
    bad = diff.sub(scale, alpha=tol.rtol).gt_(tol.atol).sum()
    # Relative to max(|expected|, atol): near-zero expected values would make it meaningless.
    max_rel = diff.div_(scale.clamp_min_(rel_floor(tol))).amax()
    max_abs, max_rel, bad = torch.stack([max_abs.double(), max_rel.double(), bad.double()]).tolist()
    if not math.isfinite(max_abs):
        return _errors_with_non_finite(want.double(), got.double(), tol)
    return max_abs, max_rel, int(bad), 0


def rel_floor(tol: Tolerance) -> float:
    return max(tol.atol, 1e-12)


class FusedComparison:
    """The comparison on one GPU as one Triton kernel (judge/fused_compare.py): both tensors read
    once, one synchronizing read (an 8.5 GB output: 6 ms against the chunks' 71 ms on an H100,
    bench/compare_outputs.py). Triton compiles it into the process's Triton cache, which a run
    points at its build cache (run.py). Where Triton is missing or cannot compile it, `errors` is
    None and the chunks compare."""

    def __init__(self, device: int):
        self.device = device
        self._lock = threading.Lock()
        self._kernel = None
        self._tried = False

    def warm(self) -> None:
        """Load or compile it now, before the lane times anything: otherwise the first comparison
        of a run paid for Triton's import and the kernel's load (0.9 s on an H100) inside a
        candidate's correctness trial."""
        with self._lock:
            if not self._tried:
                self._tried = True
                self._kernel = self._compiled()

    def errors(self, want: torch.Tensor, got: torch.Tensor, tol: Tolerance) -> tuple[float, float, int, int] | None:
        """`_errors` of two whole flat tensors on this GPU, or None where it does not apply:
        another device or dtype (floats of 32 bits or fewer only), no kernel, or a NaN or Inf
        anywhere (the chunks then say which)."""
        if want.device != torch.device("cuda", self.device) or work_dtype(want.dtype) != torch.float32 or \
                want.numel() == 0 or not (want.is_contiguous() and got.is_contiguous()):
            return None
        self.warm()
        if self._kernel is None:
            return None
        try:
            found = self._launch(self._kernel, want, got, tol)
        except Exception:  # a variant (an unaligned view's) that fails to compile or launch: the chunks compare it
            return None
        return None if found[3] else found

    def _compiled(self):
        """The kernel, compiled for each float it compares and the two variants Triton
        specializes a length into (a multiple of 16, or not), or None."""
        try:
            from .fused_compare import errors_kernel
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                for elements in (FUSED_BLOCK, FUSED_BLOCK + 1):
                    zeros = torch.zeros(elements, device=self.device, dtype=dtype)
                    self._launch(errors_kernel, zeros, zeros, Tolerance(atol=0.0, rtol=0.0))
        except Exception:  # anything an import, a compiler or a driver can raise: the chunks still work
            return None
        return errors_kernel

    def _launch(self, kernel, want: torch.Tensor, got: torch.Tensor, tol: Tolerance) -> tuple[float, float, int, int]:
        blocks = -(-want.numel() // FUSED_BLOCK)
        partial = torch.empty(blocks, 4, dtype=torch.float32, device=want.device)
        with torch.cuda.device(want.device):
            kernel[(blocks,)](want, got, partial, want.numel(), tol.atol, tol.rtol, rel_floor(tol), BLOCK=FUSED_BLOCK)
        max_abs, max_rel, bad, non_finite = torch.cat([partial[:, :2].amax(0).double(),
                                                       partial[:, 2:].sum(0, dtype=torch.float64)]).tolist()
        return max_abs, max_rel, int(bad), int(non_finite)


def compile_parent_kernels_into(directory: Path) -> None:
    """Where Triton compiles in this process (the fused comparison, and whatever else it
    compiles here): `directory`, the build cache's, where no worker writes, unless the caller
    chose a Triton cache. Triton reads the setting from the environment as it compiles; called
    where a GPU run starts (run.py, a Ray evaluation task), before any lane compares."""
    os.environ.setdefault("TRITON_CACHE_DIR", str(directory))


def chunked_errors(want: torch.Tensor, got: torch.Tensor, tol: Tolerance) -> tuple[float, float, int, int]:
    """`_errors` of two flat tensors, a chunk at a time (the temporaries stay small)."""
    max_abs = max_rel = 0.0
    bad = non_finite = 0
    step = chunk_elements(want)
    for begin in range(0, want.numel(), step):
        chunk = _errors(want[begin:begin + step], got[begin:begin + step], tol)
        max_abs, max_rel = max(max_abs, chunk[0]), max(max_rel, chunk[1])
        bad, non_finite = bad + chunk[2], non_finite + chunk[3]
    return max_abs, max_rel, bad, non_finite


def _errors_with_non_finite(want: torch.Tensor, got: torch.Tensor, tol: Tolerance) -> tuple[float, float, int, int]:
    # NaN or Inf where the reference is finite is always wrong, whatever the tolerance.
    diff = got.sub(want).abs_()
    non_finite = int((~torch.isfinite(got) & torch.isfinite(want)).sum())
    finite = torch.isfinite(diff)
    max_abs = max_rel = 0.0
    if bool(finite.any()):
        max_abs = float(diff[finite].max())
        max_rel = float((diff[finite] / want[finite].abs().clamp_min(rel_floor(tol))).max())
    bad = int((~torch.isclose(got, want, rtol=tol.rtol, atol=tol.atol, equal_nan=True)).sum())
    return max_abs, max_rel, bad, non_finite


def compare_tensor(expected: torch.Tensor, actual: torch.Tensor, tol: Tolerance,
                   fused: FusedComparison | None = None) -> CheckResult:
    if actual.shape != expected.shape:
        return CheckResult(passed=False, reason=f"shape {list(actual.shape)}, expected {list(expected.shape)}")
    if actual.dtype != expected.dtype:
        return CheckResult(passed=False, reason=f"dtype {_describe(actual)}, expected {_describe(expected)}")
    total = expected.numel()
    expected_flat = expected.reshape(-1)
    actual_flat = actual.to(expected.device).reshape(-1)
    max_abs, max_rel, bad, non_finite = (fused and fused.errors(expected_flat, actual_flat, tol)) or \
        chunked_errors(expected_flat, actual_flat, tol)
    if non_finite:  # an error the finite elements' largest would understate (0 for an all-NaN output)
        max_abs = max_rel = math.inf
    result = CheckResult(passed=bad == 0, max_abs_err=max_abs, max_rel_err=max_rel,
                         mismatched_elements=bad, total_elements=total)
    if non_finite:
        result.reason = f"{non_finite} NaN/Inf values where the reference is finite"
    elif bad:
        result.reason = (f"{bad} of {total} elements outside atol={tol.atol:g}, rtol={tol.rtol:g} "
                         f"(max abs err {max_abs:.3g}, max rel err {max_rel:.3g})")
    return result


def compare_forms(expected: str | None, actual: str | None, count: int) -> CheckResult | None:
    """A failed check when forward returned a tuple or list where the reference returns one tensor,
    or the other way round (`count`: the tensors it returned): the same values, but not a
    replacement for the reference's forward (KernelBench fails such a candidate too)."""
    if expected is None or actual is None or expected == actual:
        return None
    got = "one tensor" if actual == "tensor" else f"a tuple or list of {count} tensor(s)"
    want = "one tensor" if expected == "tensor" else "a tuple or list of tensors"
    return CheckResult(passed=False, reason=f"forward returned {got} where the reference returns {want}")


def compare_outputs(expected: list[torch.Tensor], actual: list[torch.Tensor], tol: Tolerance,
                    fused: FusedComparison | None = None) -> CheckResult:
    """All outputs must match; errors are the worst over the outputs (on a GPU in one pass each,
    with `fused`)."""
    if len(actual) != len(expected):
        return CheckResult(passed=False, reason=f"{len(actual)} output tensor(s), expected {len(expected)}")
    results = [compare_tensor(e, a, tol, fused) for e, a in zip(expected, actual)]
    failed = [(i, r) for i, r in enumerate(results) if not r.passed]
    worst_abs = max((r.max_abs_err for r in results if r.max_abs_err is not None), default=None)
    worst_rel = max((r.max_rel_err for r in results if r.max_rel_err is not None), default=None)
    reason = None
    if failed:
        index, first = failed[0]
        reason = first.reason if len(expected) == 1 else f"output {index}: {first.reason}"
    return CheckResult(passed=not failed, reason=reason, max_abs_err=worst_abs, max_rel_err=worst_rel,
                       mismatched_elements=sum(r.mismatched_elements or 0 for r in results),
                       total_elements=sum(r.total_elements or 0 for r in results))

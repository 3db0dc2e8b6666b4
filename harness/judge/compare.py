"""Compare a candidate's outputs with the reference's, in place on their device and in chunks
(outputs can be many gigabytes: conv2d_square writes 8.5 GB per call)."""

from __future__ import annotations

import torch

from ..records import CheckResult, Tolerance

CHUNK_ELEMENTS = 16 * 1024 * 1024


def _describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}"


def compare_tensor(expected: torch.Tensor, actual: torch.Tensor, tol: Tolerance) -> CheckResult:
    if actual.shape != expected.shape:
        return CheckResult(passed=False, reason=f"shape {list(actual.shape)}, expected {list(expected.shape)}")
    if actual.dtype != expected.dtype:
        return CheckResult(passed=False, reason=f"dtype {_describe(actual)}, expected {_describe(expected)}")
    total = expected.numel()
    expected_flat = expected.reshape(-1)
    actual_flat = actual.to(expected.device).reshape(-1)
    max_abs = max_rel = 0.0
    bad = non_finite = 0
    for begin in range(0, total, CHUNK_ELEMENTS):
        want = expected_flat[begin:begin + CHUNK_ELEMENTS].double()
        got = actual_flat[begin:begin + CHUNK_ELEMENTS].double()
        # NaN or Inf where the reference is finite is always wrong, whatever the tolerance.
        broken = ~torch.isfinite(got) & torch.isfinite(want)
        non_finite += int(broken.sum())
        diff = (got - want).abs()
        finite = torch.isfinite(diff)
        if bool(finite.any()):
            max_abs = max(max_abs, float(diff[finite].max()))
            # Relative to max(|expected|, atol): near-zero expected values would make it meaningless.
            rel = diff[finite] / want[finite].abs().clamp_min(max(tol.atol, 1e-12))
            max_rel = max(max_rel, float(rel.max()))
        bad += int((~torch.isclose(got, want, rtol=tol.rtol, atol=tol.atol, equal_nan=True)).sum())
    result = CheckResult(passed=bad == 0, max_abs_err=max_abs, max_rel_err=max_rel,
                         mismatched_elements=bad, total_elements=total)
    if non_finite:
        result.reason = f"{non_finite} NaN/Inf values where the reference is finite"
    elif bad:
        result.reason = (f"{bad} of {total} elements outside atol={tol.atol:g}, rtol={tol.rtol:g} "
                         f"(max abs err {max_abs:.3g}, max rel err {max_rel:.3g})")
    return result


def compare_outputs(expected: list[torch.Tensor], actual: list[torch.Tensor], tol: Tolerance) -> CheckResult:
    """All outputs must match; errors are the worst over the outputs."""
    if len(actual) != len(expected):
        return CheckResult(passed=False, reason=f"{len(actual)} output tensor(s), expected {len(expected)}")
    results = [compare_tensor(e, a, tol) for e, a in zip(expected, actual)]
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

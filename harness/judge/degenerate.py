"""Degenerate problems: a reference whose outputs a trivial answer passes (all zeros, a constant,
the same output whatever the input). Used by `harness check` and, on the trial outputs the
reference computes anyway, by every evaluation."""

from __future__ import annotations

import torch

from ..records import Tolerance
from .compare import compare_tensor, work_dtype


def degenerate_flags(outputs: list[list[torch.Tensor]], atol: float, rtol: float) -> tuple[list[str], list[str]]:
    """Flags for outputs of the same problem under different input seeds. One pass or two over
    each output, in its own precision where that is exact: a layernorm's five 134 MB outputs took
    4.8 s on two cores in float64 copies."""
    first = [t.to(work_dtype(t.dtype)) for t in outputs[0]]
    flags, notes = [], []
    peaks = [float(t.abs().max()) for t in first if t.numel()]
    # All zeros are within tolerance where |t| <= atol + rtol * |t| everywhere (NaN never is).
    if all(peak * (1 - rtol) <= atol for peak in peaks):
        flags.append("zeros_pass")
        notes.append("an all-zeros output is within tolerance")
    elif all(peak < 10 * atol for peak in peaks):
        flags.append("near_zero")
        notes.append(f"every output value is below {10 * atol:g}")
    # A scalar (a loss) is trivially constant within one call; whether it depends on its inputs is
    # what input_insensitive asks.
    sized = [t for t in first if t.numel() > 1]
    if sized and all(float(t.max() - t.min()) <= atol + rtol * float(t.abs().mean()) for t in sized):
        flags.append("near_constant")
        notes.append("a constant output is within tolerance")
    tolerance = Tolerance(atol=atol, rtol=rtol)
    if all(compare_tensor(b, a, tolerance).passed for other in outputs[1:] for a, b in zip(outputs[0], other)):
        flags.append("input_insensitive")
        notes.append(f"outputs for {len(outputs)} different inputs agree within tolerance")
    return flags, notes

"""Degenerate problems: a reference whose outputs a trivial answer passes (all zeros, a constant,
the same output whatever the input). Used by `harness check` and, on the trial outputs the
reference computes anyway, by every evaluation."""

from __future__ import annotations

import torch

from ..records import Tolerance
from .compare import compare_tensor, work_dtype


def degenerate_flags(outputs: list[list[torch.Tensor]], atol: float, rtol: float) -> tuple[list[str], list[str]]:
    """Flags for outputs of the same problem under different input seeds, and what each means."""
    check = DegenerateCheck(outputs[0], atol, rtol)
    for other in outputs[1:]:
        check.add(other)
    return check.flags()


class DegenerateCheck:
    """The check fed one seed's outputs at a time: the first seed's are held (the caller's to
    hand over, never changed afterwards), and each later seed's are compared with them as they
    come, so no more than one seed's outputs are ever kept for it. One pass or two over each
    output, in its own precision where that is exact: a layernorm's five 134 MB outputs took
    4.8 s on two cores in float64 copies."""

    def __init__(self, first: list[torch.Tensor], atol: float, rtol: float):
        self.first = first
        self.tolerance = Tolerance(atol=atol, rtol=rtol)
        self.others = 0
        self.all_agree = True

    def add(self, outputs: list[torch.Tensor]) -> None:
        self.others += 1
        self.all_agree = self.all_agree and all(compare_tensor(b, a, self.tolerance).passed
                                                for a, b in zip(self.first, outputs))

    def flags(self) -> tuple[list[str], list[str]]:
        atol, rtol = self.tolerance.atol, self.tolerance.rtol
        first = [t.to(work_dtype(t.dtype)) for t in self.first]
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
        if self.all_agree:
            flags.append("input_insensitive")
            notes.append(f"outputs for {self.others + 1} different inputs agree within tolerance")
        return flags, notes

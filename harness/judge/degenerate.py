"""Degenerate problems: a reference whose outputs a trivial answer passes (all zeros, a constant,
the same output whatever the input). Used by `harness check` and, on the trial outputs the
reference computes anyway, by every evaluation."""

from __future__ import annotations

import torch


def degenerate_flags(outputs: list[list[torch.Tensor]], atol: float, rtol: float) -> tuple[list[str], list[str]]:
    """Flags for outputs of the same problem under different input seeds."""
    first = [t.double() for t in outputs[0]]
    flags, notes = [], []
    if all(torch.allclose(torch.zeros_like(t), t, atol=atol, rtol=rtol) for t in first):
        flags.append("zeros_pass")
        notes.append("an all-zeros output is within tolerance")
    elif all(float(t.abs().max()) < 10 * atol for t in first if t.numel()):
        flags.append("near_zero")
        notes.append(f"every output value is below {10 * atol:g}")
    # A scalar (a loss) is trivially constant within one call; whether it depends on its inputs is
    # what input_insensitive asks.
    sized = [t for t in first if t.numel() > 1]
    if sized and all(float(t.max() - t.min()) <= atol + rtol * float(t.abs().mean()) for t in sized):
        flags.append("near_constant")
        notes.append("a constant output is within tolerance")
    if all(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol) for other in outputs[1:]
           for a, b in zip(outputs[0], other)):
        flags.append("input_insensitive")
        notes.append(f"outputs for {len(outputs)} different inputs agree within tolerance")
    return flags, notes

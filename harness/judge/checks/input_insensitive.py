"""A constant answer (`input_insensitive`): outputs that stay the same over the correctness trials
where the reference's change, which a loose tolerance would let through."""

from __future__ import annotations

import torch

from ...records import Status
from ..checking import Check, Finding, Moment, Trials
from ..compare import chunk_elements, raw_bytes

FLAG = "input_insensitive"
HINT = "compute the output from the inputs: a constant answer passes only a degenerate tolerance"


def fingerprint(tensors: list[torch.Tensor]) -> tuple:
    """Shapes and two sums over the outputs' bytes: equal for equal outputs, and different, short
    of a crafted collision, for outputs that differ anywhere (enough to tell a constant answer)."""
    parts: list = []
    for tensor in tensors:
        raw = raw_bytes(tensor)
        words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
        sums = torch.zeros(2, dtype=torch.int64, device=words.device)  # read once, not per chunk (a GPU sync each)
        step = chunk_elements(words)  # the int64 copy a sum makes stays small (in cache, on a CPU)
        for start in range(0, words.numel(), step):
            chunk = words[start:start + step]
            sums += torch.stack([chunk.sum(dtype=torch.int64), chunk[::7].sum(dtype=torch.int64)])
        parts += [tuple(tensor.shape), *sums.tolist()]
    return tuple(parts)


def look(seen: Trials) -> Finding | None:
    candidate, reference = seen.fingerprints, seen.reference_fingerprints
    if len(candidate) < 2 or len(set(candidate)) > 1 or len(set(reference)) == 1:
        return None
    return Finding(FLAG, [], Status.rejected,
                   f"its output was the same for {len(candidate)} different inputs, where the reference's changed: "
                   "a constant answer, not a computation")


CHECKS = [Check("input_insensitive", FLAG, Moment.trials, look, HINT, order=20)]

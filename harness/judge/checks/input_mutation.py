"""Changing the inputs (`input_mutation`): forward must leave its inputs as they came, on the
correctness trials and on the timed calls the parent checks afterwards. A forward that writes into
them spares itself an output's allocation (3.5x for an in-place relu on the 2-core VM), and changes
what the reference sees."""

from __future__ import annotations

import torch

from ...records import Status
from ..checking import Check, Finding, Moment, TimedInputs, Trial
from ..compare import raw_bytes

FLAG = "input_mutation"
HINT = ("leave the inputs as they came (write results into new tensors, e.g. torch.empty_like); an in-place update "
        "of an input changes what the reference sees")


def mutated_inputs(expected: list[torch.Tensor], actual: list[torch.Tensor]) -> list[int]:
    """Positions of inputs that forward left different from the reference's, byte for byte (so a
    NaN that stayed a NaN is unchanged)."""
    changed = []
    for index, (want, got) in enumerate(zip(expected, actual)):
        same = want.shape == got.shape and want.dtype == got.dtype and torch.equal(
            raw_bytes(want), raw_bytes(got.to(want.device)))
        if not same:
            changed.append(index)
    return changed


def on_trial(seen: Trial) -> Finding | None:
    if not seen.changed_inputs:
        return None
    return Finding(FLAG, [], Status.rejected,
                   f"forward changed its input(s) {seen.changed_inputs}: inputs must be left as they are")


def on_timed_call(seen: TimedInputs) -> Finding | None:
    if not seen.changed_inputs:
        return None
    return Finding(FLAG, [], Status.rejected,
                   f"forward changed its input(s) {seen.changed_inputs} on checked timed call {seen.index}, though "
                   "not on the correctness trials: inputs must be left as they are")


CHECKS = [Check("input_mutation", FLAG, Moment.trial, on_trial, HINT, order=10),
          Check("input_mutation_when_timed", FLAG, Moment.timed_inputs, on_timed_call, HINT)]

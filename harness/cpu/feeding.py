"""A CPU timed call's inputs, fed: the reference makes them from the seeds and the parent writes
them into the timed worker before the clock starts, so the overhead the clock bound subtracts is
only the command's round trip, not the making of hundreds of megabytes of random inputs (which
varied by 5% from worker to worker, more than a quick kernel's whole time). After a checked call,
its fed inputs are read back: a forward that writes into them spares itself an output's
allocation (3.5x for an in-place relu on the 2-core VM, where the correctness trials saw it leave
them alone)."""

from __future__ import annotations

import torch

from ..judge.device import ReferenceAccess
from ..judge.checks.input_mutation import mutated_inputs
from ..worker.parent import Worker
from ..worker.protocol import Command, TensorRef


class Feeder:
    """Feeds timed workers the inputs `reference` makes. The last inputs fed to another worker stay
    in the reference's commit buffer, stacked a row per seed, until the reference is sent anything
    else: where a checked call's inputs are read back, they are compared with those."""

    def __init__(self, reference: ReferenceAccess):
        self.reference = reference
        self._rows: dict[int, int] = {}  # the seeds last fed to another worker, each with its row
        self._refs: list[TensorRef] = []  # their inputs, stacked in the reference's commit buffer
        self._sent = -1  # the reference's commands sent when they were made

    def feed(self, target: Worker, seeds: list[int]) -> list[TensorRef] | None:
        """Write the inputs of `seeds` into `target` (the reference itself, or a candidate):
        where they are, or None where the reference cannot make them apart (not plain CPU tensors)."""
        reply = self.reference.request(Command(op="inputs", seeds=seeds), "inputs")
        if reply.inputs is None:
            return None
        with self.reference.held(reply.inputs, "inputs") as inputs:
            fed = target.feed(inputs, "timing")  # a worker that does not stop for it: its own failure
        if target is not self.reference.worker:  # its own timed call would write over them
            self._rows, self._refs = {seed: index for index, seed in enumerate(seeds)}, reply.inputs
            self._sent = self.reference.worker.sent
        return fed

    def inputs_left(self, target: Worker, calls: list[tuple[int, list[TensorRef]]]) -> list[list[torch.Tensor] | None]:
        """Per call of `target`'s last timed command (its seed; where its inputs are in `target`'s
        feed file), copies of those inputs as its forward left them if it changed any (None
        otherwise): byte for byte against the reference's own, still in its commit buffer (it ran
        nothing since it made them), all read and copied in one window with `target` stopped."""
        if self.reference.worker.sent != self._sent or any(seed not in self._rows for seed, _ in calls):
            raise RuntimeError("the reference's last inputs are not the ones fed for these calls")
        mine = [ref.row(self._rows[seed]) for seed, _ in calls for ref in self._refs]
        theirs = [ref for _, fed in calls for ref in fed]
        with self.reference.held(mine, "inputs") as made, target.fed_back(theirs, "timing") as left:
            found, start = [], 0
            for _, fed in calls:
                made_now, left_now = made[start:start + len(fed)], left[start:start + len(fed)]
                start += len(fed)
                found.append([t.clone() for t in left_now] if mutated_inputs(made_now, left_now) else None)
            return found

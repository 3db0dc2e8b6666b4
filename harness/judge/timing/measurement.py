"""The timing side of the device seam: how one worker's timed commands are measured on a device.

The device-neutral protocol (protocol.py, Timer) decides how many calls are timed, which are
verified and which profiled, and holds every reported time to the parent's clock; at each step it
calls one of these hooks. A device's measurement (judge/gpu.py; on the CPU, harness/cpu/) says how
a command's outputs are handed over, what is held around the timing, and what else it gathers
while the calls run. The hooks' defaults add nothing: the worker makes its inputs from the seeds
and nothing is held around the calls."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from typing import ContextManager

import torch

from ...worker.parent import Worker
from ...worker.protocol import Reply, TensorRef
from .timed import Timed

# Calls of a verified batch whose outputs are checked, at most (all of them, in a smaller batch).
CHECKED_PER_BATCH = 8


class Measurement(ABC):
    """One worker's timed commands on one device. `profiled_most`: calls a profiled command makes
    at most; `locates`: a timed command's reply says where its outputs are in the worker's memory
    (the parent reads them there), rather than a commit describing them."""

    profiled_most: int = 1
    locates: bool = False

    def __init__(self, worker: Worker):
        self.worker = worker

    def quiet(self) -> ContextManager:
        """Held around timed calls and the sizing of a batch: whatever keeps others off the timed
        worker's device meanwhile."""
        return contextlib.nullcontext()

    def window(self, timed: Timed) -> ContextManager:
        """Held around a whole timing (its quiet included); what it measures meanwhile goes into
        `timed` as it closes."""
        return self.quiet()

    def inputs(self, seeds: list[int]) -> list[TensorRef] | None:
        """Where the inputs of `seeds` were written into the worker, stacked a row per seed; None:
        the worker makes them itself from the seeds."""
        return None

    def inputs_left(self, calls: list[tuple[int, list[TensorRef]]]) -> list[list[torch.Tensor] | None]:
        """Per checked call of the last timed command (its seed, where its inputs were fed),
        copies of the inputs as its forward left them where it changed them, else None: none
        where the worker makes its own inputs."""
        return [None] * len(calls)

    def reading_checked(self, fed: bool) -> ContextManager:
        """Held while a verified command's checked calls are read (`fed`: their inputs were fed)."""
        return contextlib.nullcontext()

    def watching(self, calls: int, profile: bool, sampled: bool) -> ContextManager:
        """Held around one timed command's request and reply."""
        return contextlib.nullcontext()

    def stopped_at_reply(self, phase: str) -> ContextManager[float]:
        """Entered the moment a timed command's reply is in, before anything else, and held while
        the parent looks at it (a verified command's checked calls read): whatever keeps the
        worker from working unobserved meanwhile. It yields the ms of work the worker did between
        the reply and that hold, charged to the command."""
        return contextlib.nullcontext(0.0)

    @abstractmethod
    def handed_over(self, reply: Reply, calls: int, phase: str) -> tuple[Reply, float]:
        """After a timed command's reply: the reply with its outputs described, and how many ms
        handing them over took by the parent's clock (part of the command's wall time)."""

    @abstractmethod
    def outputs_of(self, reply: Reply, index: int, calls: int) -> list[TensorRef]:
        """Where the `index`th of a command's `calls` calls left its outputs."""

    def let_go(self, phase: str) -> Reply:
        """The last command's outputs let go, once the parent has read what it checks (before the
        worker's next command)."""
        return Reply(ok=True)

    def drained_ms(self) -> float:
        """After a verified command's reply: how long the device went on running the worker's work
        (charged to that command)."""
        return 0.0

    def settle(self, phase: str) -> Reply:
        """After a verified command's outputs were read: the worker takes the device back."""
        return Reply(ok=True)

    def checked_calls(self, calls: int) -> int:
        """How many calls of a verified command of `calls` calls are checked."""
        return min(calls, CHECKED_PER_BATCH)

    def sampled_commands(self) -> int:
        """Timed commands chosen at random among the first ones whose times are not recorded: the
        measurement watches them in a way that slows them."""
        return 0

    def samples_next(self, chosen: bool, profiled: bool) -> bool:
        """Whether the next command is such a one (`chosen`: among those picked at the start)."""
        return chosen

    def wants_more(self) -> bool:
        """Whether the timing must go on, whatever the plan says (what it gathers is not enough yet)."""
        return False

    def goes_on(self, planned_at: float) -> bool:
        """Once the plan has the timing stop (at `planned_at`, monotonic), whether it goes on a
        while longer for what the measurement gathers (stopped: "sampling")."""
        return False

    def unrecorded(self, timed: Timed, wall_ms: float) -> None:
        """A command it watched (`samples_next`) ran in `wall_ms`: its calls are not recorded."""


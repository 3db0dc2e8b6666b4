"""The device seam: what judging needs of the device a run evaluates on.

Everything in judge/ is the same on every device but what a Device says: how a worker's timed
commands are measured (timing/measurement.py), how the reference is measured with a candidate's
processes stopped, how much memory there is to keep outputs in, and the few numbers that differ
(the clock's least slack, the profiler's cost). The GPU's is judge/gpu.py. The CPU's, with the
integrity machinery only a CPU run needs (sampling the worker's threads from outside, feeding its
inputs, spoiling its outputs, quiet windows), is harness/cpu/, which nothing device-neutral
imports: a run picks its device once (schedule/devices.py)."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, ContextManager, Literal, Protocol, TypeVar

import torch

from ..worker.pace import REAL_TIME, Pace
from ..worker.parent import Worker
from ..worker.protocol import Command, Reply, TensorRef
from .checking import Check, checks_in, common
from .timing.measurement import Measurement

if TYPE_CHECKING:
    from ..records import Observations, SandboxReport, Verdict
    from ..worker.sandbox import SandboxPolicy
    from .timing.timed import Timed

T = TypeVar("T")


class ReferenceAccess(Protocol):
    """What a device's measurement may ask of a problem's reference worker (judge/reference.py):
    a command, whose failure is the reference's (ReferenceFailed), and its tensors held in place,
    its worker stopped meanwhile."""

    worker: Worker

    def request(self, command: Command, what: str) -> Reply: ...

    def held(self, refs: list[TensorRef], what: str) -> ContextManager[list[torch.Tensor]]: ...


class ReferenceMeasured(Protocol):
    """What a candidate's measurement is told of its reference's own timing."""

    timed: Timed


class Device(ABC):
    """One kind of device, for one run: `pace` runs its workers' deadlines and guards their starts.

    `least_slack_ms`: the parent's clock against a worker's, a timed command's least slack (timing/
    bound.py); `overhead_error`: the share of the reference's per-call overhead a candidate's may
    differ by; `profiler_cost_per_op_ms`, `jitter_ms`: what the profiler adds per operator at least,
    and a profiled command's scheduling jitter (the profiled-slowdown check); `trials_beside`:
    the reference computes a correctness trial beside the candidate (else they take turns);
    `prepared_references`: references a lane starts ahead of their problem's first candidate;
    `warm_spares`: spare workers ready what loading a reference and a Triton launch need."""

    name: ClassVar[Literal["cpu", "cuda"]]
    clock: ClassVar[Literal["cuda_device", "cuda_event", "perf_counter"]]
    clock_means: ClassVar[str]  # the clock in a sentence, for run.json
    least_slack_ms: ClassVar[float]
    overhead_error: ClassVar[float]
    profiler_cost_per_op_ms: ClassVar[float]
    jitter_ms: ClassVar[float]
    trials_beside: ClassVar[bool]
    prepared_references: ClassVar[int]
    warm_spares: ClassVar[bool]
    hardware_floor: ClassVar[bool] = False  # the reference measures the device's floor (peak FLOP/s and bytes/s)
    default_math: ClassVar[bool] = False  # the reference is timed again under PyTorch's default math flags
    own_checks: ClassVar[str | None] = None  # the package of the device's own checks
    # Each of a candidate's recorded timed commands is followed by one of the reference's, the
    # candidate stopped (timing/protocol.py): the speedup is their ratios' median.
    pairs: ClassVar[bool] = False
    speedup_means: ClassVar[str] = (
        "the reference's median (timed before the problem's candidates, or again right before this candidate's "
        "timing where that was surely faster) over the candidate's median as the harness's clock vouches for it")

    def __init__(self, pace: Pace = REAL_TIME):
        self.pace = pace

    @functools.cached_property
    def checks(self) -> tuple[Check, ...]:
        """The integrity checks an evaluation on this device asks (judge/checking.py): every
        device's, and those of the device's own package where it has one (`own_checks`)."""
        return common() + (tuple(checks_in(self.own_checks)) if self.own_checks else ())

    @abstractmethod
    def reference_measurement(self, reference: ReferenceAccess, own: bool) -> Measurement:
        """How the reference's timed commands are measured: its `own` timing (what its candidates
        are held to), or a recalibration or second look."""

    @abstractmethod
    def candidate_measurement(self, worker: Worker, reference: ReferenceAccess,
                              measured: ReferenceMeasured) -> Measurement:
        """How a candidate's timed commands are measured, beside its problem's reference."""

    def alone(self, worker: Worker, reference: ReferenceAccess, purpose: str,
              measure: Callable[[], T]) -> T | Verdict:
        """`measure` (reference calls) with nothing of the candidate's running: its whole tree is
        stopped (processes it left spinning would slow the reference's calls). The verdict, where
        the device says the candidate's work went on regardless."""
        with worker.stopped_all(purpose):
            return measure()

    def spare_copies(self, output_like: Callable[[], list[torch.Tensor]], output_bytes: int,
                     budget: int) -> list[list[torch.Tensor]]:
        """Room for the first checked calls' outputs, made before the candidate's timing window."""
        return []

    def uncounted_commands(self, median_ms: float, batch: int) -> int:
        """Reference commands a recalibration times first without counting them."""
        return 0

    def report(self, policy: SandboxPolicy) -> SandboxReport:
        """Which protections the run's workers have: the sandbox's, and what the device adds."""
        return policy.report()

    def observe(self, observed: Observations, timed: Timed, reference: Timed) -> None:
        """What a candidate's timing gathered beyond its times (`timed`; the reference's own,
        `reference`), recorded where the device has any."""

    @abstractmethod
    def memory_bytes(self, gpu: int | None) -> int:
        """The memory a run's shares are of (`gpu` as this process numbers it)."""

    @abstractmethod
    def batch_bytes(self, memory_bytes: int) -> int:
        """What a batch's inputs and outputs may take, of `memory_bytes`."""

    def batch_cap(self, outputs: int) -> int | None:
        """Calls a batch may make at most for outputs of `outputs` tensors a call (None: no bound)."""
        return None

    def release_cache(self) -> None:
        """Give the device memory this process freed back to the device."""

    def synchronize(self) -> None:
        """Wait for this process's work on the device."""

"""The GPU's side of the device seam (judge/device.py).

A timed command's outputs are described in a `commit` the parent times apart (IPC handles, read
by the parent in place); each call is flushed and timed alone inside the worker with device-wide
synchronizes (worker/timing.py), and the parent's clock holds it (timing/bound.py). What only a
GPU needs besides: after a checked call the worker is told to `settle` (run tiny kernels of its
own) before its next timed call: the copy ran in the parent's CUDA context, and switching back to
the worker's cost its next call 0.2 ms on an H100 (0.51 against 0.32 ms of overhead for an 8 MB
relu), outside the reported time but inside the parent's clock, where the reference's overhead
calls, never checked, do not pay it; honest sub-millisecond kernels were flagged
`timing_disagrees` for it. And the device must be idle while the reference is measured with a
candidate's processes stopped: a kernel it queued runs on when its processes stop."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from ..records import Verdict
from ..worker import processes
from ..worker.parent import Worker, gpu_context_pids
from ..worker.protocol import MAX_TENSORS, Command, Reply, TensorRef, call_outputs
from ..worker.timing import HOLDS
from . import nvml, verdicts
from .device import Device, ReferenceAccess, ReferenceMeasured
from .timing.measurement import CHECKED_PER_BATCH, Measurement
from .timing.protocol import VERIFY_LATE
from .timing.timed import Timed

T = TypeVar("T")

# A verified batch's checked calls: a fifth of them (as many checks a call as one-call commands got
# after their first 20), at least two: batches are a sixteenth of the device's memory at most (nine
# calls of the 0.7 ms relu) and a timing makes many of them, and eight a batch made the reference's
# checks most of a quick kernel's timing.
CHECKED_SHARE, CHECKED_LEAST = VERIFY_LATE, 2
# A batch's inputs and outputs, as a share of the device's memory: they are in one place, the timed
# worker's own memory (its commit describes them, the parent copies only the checked calls' outputs,
# within the budget of judge/reference.py's KEPT_SHARE), and the reference's recalibration at the
# same batch holds as much.
BATCH_SHARE = 1 / 16
# On a GPU the first calls after the reference sat idle are the slowest (on an H100 the first took
# 1.6 to 3 ms against 0.8 to 1.6 ms, and alone doubled the slack a forger gains), and the GPU's
# clocks, not locked there, fall while it idles: after a candidate kept the worker's core busy
# through its trials, the reference's overhead fell from 1.35 to 0.83 ms over its 24 calls. So a
# recalibration first warms up, uncounted, for about WARM_MS of the reference's device time
# (WARM_COMMANDS, of the recalibration's batch: at least, at most).
WARM_MS = 20.0
WARM_COMMANDS = (1, 16)
# The GPU runs one process's context at a time: while another process's context has work queued
# there, the reference's tiny kernels wait for a time slice (2.4 ms per round trip on an H100,
# against 0.013 ms with nothing else running; one slips through where another process's kernels
# leave a gap). The GPU is idle when none of four round trips in a row takes longer than this.
IDLE_ROUND_TRIP_MS = 0.5
IDLE_POLL_S = 0.01
# How long a stopped candidate's GPU work may take to end before the reference's recalibration
# (an honest candidate leaves none: its worker synchronizes the device before each reply), and
# how many recalibrations may find the GPU busy after them.
IDLE_WAIT_S = 0.1
RECALIBRATION_ATTEMPTS = 2


def checked_calls(calls: int) -> int:
    """How many calls of a verified command of `calls` calls are checked on a GPU (CHECKED_SHARE)."""
    return min(calls, CHECKED_PER_BATCH, max(CHECKED_LEAST, math.ceil(CHECKED_SHARE * calls)))


def waited_for_idle_ms(reference: ReferenceAccess, wait_s: float) -> float | None:
    """Milliseconds from the first look until the GPU ran no other process's work than the
    reference's (0: idle at the first look); None: still busy after `wait_s`."""
    began, deadline = time.perf_counter(), time.monotonic() + wait_s
    looks = 0
    while True:
        round_trip_ms = reference.request(Command(op="settle"), "idle check").elapsed_ms
        looks += 1
        if round_trip_ms is None or round_trip_ms <= IDLE_ROUND_TRIP_MS:
            return 0.0 if looks == 1 else (time.perf_counter() - began) * 1000
        if time.monotonic() >= deadline:
            return None
        time.sleep(IDLE_POLL_S)


def idle_within(reference: ReferenceAccess, wait_s: float) -> bool:
    """Whether the GPU runs no other process's work, waiting up to `wait_s` for what runs there to end."""
    return waited_for_idle_ms(reference, wait_s) is not None


def busy_ms(reference: ReferenceAccess, wait_s: float) -> float:
    """How long the GPU went on running another process's work, by the parent's clock, up to
    `wait_s`: 0 where the first look finds it idle."""
    waited_ms = waited_for_idle_ms(reference, wait_s)
    return wait_s * 1000 if waited_ms is None else waited_ms


class GpuMeasurement(Measurement):
    """A worker's timed commands on a GPU: outputs committed and timed apart, the checked ones
    read in place by the parent; with `reference`, the device's idle time after a verified command
    is charged to it (a candidate's: kernels it queued after its last call's end run while the
    parent reads the checked outputs)."""

    profiled_most = 1  # a batch's calls are flushed and timed one by one; under the profiler they would run back to back

    def __init__(self, worker: Worker, reference: ReferenceAccess | None = None):
        super().__init__(worker)
        self.reference = reference

    @contextlib.contextmanager
    def window(self, timed: Timed) -> Iterator[None]:
        """The timing's quiet, and how long the GPU's clocks were held down meanwhile (judge/nvml.py)."""
        gpu = self.worker.gpu
        before = nvml.limited_ns(gpu) if gpu is not None else None
        try:
            with self.quiet():
                yield
        finally:
            timed.throttled_ms = nvml.throttled_between(before, nvml.limited_ns(gpu) if gpu is not None else None)

    def handed_over(self, reply: Reply, calls: int, phase: str) -> tuple[Reply, float]:
        if not reply.ok:
            return reply, 0.0
        committing = time.perf_counter()
        committed = self.worker.request(Command(op="commit", calls=calls), phase)
        commit_ms = (time.perf_counter() - committing) * 1000
        return (reply.model_copy(update={"outputs": committed.outputs}) if committed.ok else committed), commit_ms

    def outputs_of(self, reply: Reply, index: int, calls: int) -> list[TensorRef]:
        return call_outputs(reply.outputs, index, calls)

    def drained_ms(self) -> float:
        return busy_ms(self.reference, IDLE_WAIT_S) if self.reference is not None else 0.0

    def settle(self, phase: str) -> Reply:
        return self.worker.request(Command(op="settle"), phase)

    def checked_calls(self, calls: int) -> int:
        return checked_calls(calls)


class Gpu(Device):
    name = "cuda"
    clock = "cuda_device" if HOLDS else "cuda_event"
    clock_means = ("device time per call: from the end of a hold kernel that fills every SM while the host "
                   "enqueues the call" if HOLDS else "events around each call, the host's path into it included "
                   "(no hold: this torch has no NVRTC kernels, before 2.8)") + (
        ", to the end of the call's work on its stream, with any work it left on other streams past that end; "
        "the host's time into each call beside it (host_ms_per_call)")
    # The parent's clock against a worker's: wake-up latency and scheduling jitter, which grow when
    # the machine idles through a long call (a worker asleep in a kernel) and are not seen on the
    # quick calls that measure the overhead. Measured: docs/threat-model.md, "The timing bound".
    least_slack_ms = 0.05
    # The overhead's drift between recalibrations is the forgers' as much as anyone's
    # (docs/threat-model.md): none allowed.
    overhead_error = 0.0
    profiler_cost_per_op_ms = 0.01
    jitter_ms = 0.1
    trials_beside = False  # they would share the device's memory: they take turns
    # None started ahead: each would hold device memory beside the one in use (not yet measured).
    prepared_references = 0
    # Problems switch every few candidates (the reference's import took 5 s of each reference's
    # start on an H200 host, Triton's 0.6 s of a Triton softmax's first trial on an H100).
    warm_spares = True
    hardware_floor = True
    default_math = True
    pairs = True
    speedup_means = ("the median, over pairs of commands timed in alternation (each of the candidate's followed by "
                     "one of the reference's, the candidate's processes stopped), of the reference's time over the "
                     "candidate's, held to the harness's clock; with its 95% interval (speedup_interval)")

    def reference_measurement(self, reference: ReferenceAccess, own: bool) -> Measurement:
        return GpuMeasurement(reference.worker)

    def candidate_measurement(self, worker: Worker, reference: ReferenceAccess,
                              measured: ReferenceMeasured) -> Measurement:
        return GpuMeasurement(worker, reference)

    def alone(self, worker: Worker, reference: ReferenceAccess, purpose: str,
              measure: Callable[[], T]) -> T | Verdict:
        """The device must be idle before and after as well: a kernel the candidate queued runs on
        when its processes stop, time-sliced with the reference's calls (forged_background.py
        raised the reference's overhead from 0.7 to 7.4 ms on an H100). A GPU still busy is
        someone else's (`skipped`) or, where only the run holds it, the candidate's (`rejected`)."""
        with worker.stopped_all(purpose):
            for _ in range(RECALIBRATION_ATTEMPTS):
                if not idle_within(reference, IDLE_WAIT_S):
                    return verdicts.gpu_shared() if self._outsiders(worker, reference) else \
                        verdicts.busy_while_stopped(IDLE_WAIT_S)
                measured = measure()
                if idle_within(reference, 0):
                    return measured
            # Idle before, busy after, every time: not the candidate's work, which cannot start
            # while its processes are stopped; someone else's, or the reference's own hiccups.
            return verdicts.gpu_shared() if self._outsiders(worker, reference) else measured

    @staticmethod
    def _outsiders(worker: Worker, reference: ReferenceAccess) -> bool:
        """Whether a process other than the run's own (this one, the reference's tree, the
        candidate's) holds a context on the lane's GPU, or that cannot be told."""
        holders = gpu_context_pids(worker.gpu)
        ours = {os.getpid(), *processes.tree(reference.worker.pid), *processes.tree(worker.pid)}
        # This process holds one: where the driver's list lacks it (a PID namespace of a
        # container), it names no one reliably.
        return holders is None or os.getpid() not in holders or bool(holders - ours)

    def uncounted_commands(self, median_ms: float, batch: int) -> int:
        fewest, most = WARM_COMMANDS
        return max(fewest, min(most, math.ceil(WARM_MS / max(median_ms * batch, 1e-3))))

    def memory_bytes(self, gpu: int | None) -> int:
        return torch.cuda.get_device_properties(torch.cuda.current_device() if gpu is None else gpu).total_memory

    def batch_bytes(self, memory_bytes: int) -> int:
        return int(BATCH_SHARE * memory_bytes)

    def batch_cap(self, outputs: int) -> int | None:
        """A reply describes a batch's outputs call by call."""
        return MAX_TENSORS // max(1, outputs)

    def release_cache(self) -> None:
        """PyTorch keeps freed blocks reserved for reuse; here they would be a previous problem's
        kept outputs or a candidate's copied timed outputs, the size of its outputs each, and the
        next workers (other processes) could not have them: a candidate ran out of memory beside
        52 GB the harness no longer used."""
        torch.cuda.empty_cache()

    def synchronize(self) -> None:
        torch.cuda.synchronize()

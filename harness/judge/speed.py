"""A candidate's timing phase: its timed calls (timing/protocol.py, measured as its device says),
the calls the parent chose to check compared with the reference's outputs after the last of
them, and the reference recalibrated just before with the candidate's processes stopped: the
per-call overhead the clock bound subtracts (timing/bound.py), and the reference's time now where
the machine drifted. Nothing that decides correctness is computed in the candidate's process, and
its reported times are believed only as far as the parent's clock allows."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TypeVar

import torch

from ..records import TimingStats, Verdict
from ..worker.protocol import Reply
from . import verdicts
from .checking import Moment, TimedInputs, TimedOutputs, Timing
from .checks.inconsistent_when_timed import outputs_shared
from .checks.input_mutation import mutated_inputs
from .compare import compare_outputs
from .evaluation import Evaluation
from .reference import Recalibration, surely_faster
from .timing.bound import timing_bound, vouched_median
from .timing.measurement import Measurement
from .timing.protocol import Call, ShortBatch, Timer, TimingPlan
from .timing.timed import Timed
from .timing.stats import timing_stats

T = TypeVar("T")  # what reference calls made with the candidate stopped measure
# A checked call's outputs read from a CPU worker's memory may span this many times the expected
# outputs' bytes, and this much more: views of a larger storage (q, k and v as chunks of one
# buffer's last dimension span about three times their bytes together); a reply describing more
# breaks the protocol (a 4 TB view must not make the parent read, or allocate, 4 TB).
LOCATED_SPAN_FACTOR, LOCATED_SPAN_EXTRA = 4, 1 << 20
TIMINGS = 2  # timings at most: a second where the parent's clock contradicted the first (`time_candidate`)


def median_or_none(values: list[float]) -> float | None:
    return round(statistics.median(values), 6) if values else None


def copied(tensors: list[torch.Tensor], spares: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """Copies of `tensors`, into the last of `spares` when its shapes and dtypes fit them."""
    room = spares[-1] if spares else []
    if len(room) == len(tensors) and all(r.shape == t.shape and r.dtype == t.dtype and r.device == t.device
                                         for r, t in zip(room, tensors)):
        spares.pop()
        return [r.copy_(t) for r, t in zip(room, tensors)]
    return [t.clone() for t in tensors]


def reference_alone(ev: Evaluation, purpose: str, measure: Callable[[], T]) -> T | Verdict:
    """`measure` (reference calls) with nothing of the candidate's running (judge/device.py, `alone`)."""
    return ev.device.alone(ev.worker, ev.reference, purpose, measure)


def recalibrated(ev: Evaluation, batch: int) -> Recalibration | Verdict:
    """The reference's recalibration at `batch` calls a command (the per-call overhead the
    candidate's timing bound subtracts), with nothing of the candidate's running."""
    return reference_alone(ev, "the reference's recalibration", lambda: ev.reference.recalibrate(batch))


def measurement(ev: Evaluation) -> Measurement:
    return ev.device.candidate_measurement(ev.worker, ev.reference, ev.reference.measured)


def paired(ev: Evaluation) -> float | Verdict:
    """A reference command made right after one of the candidate's, with nothing of the
    candidate's running: the reference's time a call in that pair."""
    return reference_alone(ev, "a reference command paired with its own", ev.reference.paired_command)


def timer(ev: Evaluation, batch: int) -> Timer:
    return Timer(measurement(ev), TimingPlan.of(ev.config), ev.rng, batch=batch, cap=ev.reference.measured.batch_cap,
                 insist=True, pair=(lambda: paired(ev)) if ev.device.pairs else None)


def time_candidate(ev: Evaluation) -> tuple[Verdict | None, Timed]:
    """Its timing, held to the parent's clock. One the clock contradicts is measured once more,
    warm-up and recalibration included, and the second stands: a forged time is contradicted
    every time, an honest one only where the machine's scheduling happened to delay its
    commands (beside two busy loops on the 2-core VM, 4 of a 12 us C++ relu's 5 commands came
    a scheduler slice late, the reference's recalibration just before none: flagged in 1 of 5
    runs). Returns the verdict it ended in, if any, and what it measured."""
    measured, observed = ev.reference.measured, ev.observed
    # Before the reference's recalibration and the warm-up, which absorb its cost.
    spares = ev.device.spare_copies(ev.reference.output_like, ev.reference.output_bytes, ev.reference.budget_left)
    for _ in range(TIMINGS):
        timing = _measured(ev, spares)
        if isinstance(timing, Verdict):
            return timing, Timed()
        own, recalibration = timing
        bound = timing_bound(own, recalibration.overhead_ms, recalibration.commit_ms, ev.device.least_slack_ms,
                             ev.device.overhead_error)
        vouched, disagreement = vouched_median(own.reported_ms, bound, own.batch)
        if disagreement is None:
            break
    observed.timing = timing_stats(own.reported_ms, ev.device.clock, own.stopped, own.batch, own.others_cores,
                                   own.throttled_ms)
    observed.wall_ms_per_call = round(statistics.median(own.wall_ms), 6)
    observed.reference_wall_ms_per_call = round(statistics.median(measured.timed.wall_ms), 6)
    observed.host_ms_per_call = median_or_none(own.host_ms)
    observed.reference_host_ms_per_call = median_or_none(measured.timed.host_ms)
    ev.device.observe(observed, own, measured.timed)
    observed.reference_recalibrated_timing = surely_faster(measured.timing, recalibration.timing)
    if own.paired_ms:
        observed.reference_paired_timing = timing_stats(own.paired_ms, ev.device.clock, own.stopped, measured.batch)
    observed.timing_bound = bound
    observed.vouched_median_ms = vouched
    if measured.floor:
        observed.floor_fraction = round(measured.floor.floor_ms / vouched, 4) if vouched > 0 else None
    against: TimingStats = observed.reference_paired_timing or observed.reference_recalibrated_timing or measured.timing
    return ev.decide(Moment.timing, Timing(observed.timing, against, vouched, disagreement, measured.floor,
                                           own.threads_alive)), own


def _measured(ev: Evaluation, spares: list[list[torch.Tensor]]) -> tuple[Timed, Recalibration] | Verdict:
    """One timing of the candidate, its checked calls compared, and the reference's recalibration
    it is held to; or the verdict that ended it."""
    reference = ev.reference.measured
    clock = timer(ev, reference.batch)
    # Where the reference's calls are timed one to a command (calls of 20 ms or more, or too large
    # to batch), it is recalibrated before the candidate's warm-up, which then comes right before
    # its first timed call: on the CPU, memory a worker freed comes back slowly after a pause (0.38
    # s instead of 0.08 s for a relu's first call after the recalibration, on a VM that hands freed
    # memory to its host). Otherwise (and where the candidate's batch, sized after its warm-up,
    # turns out larger) it is recalibrated at the candidate's batch: a command's overhead is shared
    # by its calls, and a batch's first calls absorb the pause (a candidate timed one call to a
    # command after all warms up again, with one call).
    recalibration = recalibrated(ev, 1) if reference.batch == 1 else None
    if isinstance(recalibration, Verdict):
        return recalibration
    if verdict := ev.verdict_of(clock.warm_up(size=True)):
        return verdict
    if recalibration is None or clock.batch != 1:
        if isinstance(recalibration := recalibrated(ev, clock.batch), Verdict):
            return recalibration
        if clock.batch == 1 and (verdict := ev.verdict_of(clock.warm_up(calls=1))):
            return verdict
    copies: list[tuple[int, list[torch.Tensor]]] = []
    shared: list[bool] = []
    check = _copy_checked_calls(ev, clock.measure, copies, spares, shared)
    timed, objection = clock.run(check=check)
    for retime in range(2):
        if not isinstance(objection, ShortBatch):
            break
        # Slower while its batch was sized than now: timed again at the batch its short one
        # implies, then (short again) at the cap; the checked calls so far stay checked.
        clock.batch = objection.implied(clock.cap) if retime == 0 else clock.cap
        if isinstance(recalibration := recalibrated(ev, clock.batch), Verdict):
            return recalibration
        timed, objection = clock.run(check=check)
    if isinstance(objection, Reply):
        return ev.verdict_of(objection)
    for index, (seed, outputs) in enumerate(copies, start=1):
        objection = objection or _compare_checked_call(ev, seed, outputs, index)
    if objection is not None:
        return verdicts.of_checked_timed_calls(objection, bool(shared))
    return timed, recalibration


def _copy_checked_calls(ev: Evaluation, measure: Measurement, copies: list, spares: list[list[torch.Tensor]],
                        shared: list[bool]):
    """For the calls of a timed command the parent chose after their outputs were described:
    their inputs must be as forward should leave them (`_timed_inputs_verdict`); copy their
    outputs out now (the worker cannot change them afterwards), into `spares` while they last, to
    compare with the reference's once the timed calls are over. Past the memory budget, compare at
    once instead. `shared` gets an entry for each command whose checked calls returned outputs in
    the same memory."""
    budget = ev.reference.budget_left  # one budget for everything the parent keeps on the device

    def check(calls: list[Call]) -> Verdict | None:
        if outputs_shared([call.outputs for call in calls]):
            shared.append(True)  # a wrong output among them is then that (`verdicts.of_checked_timed_calls`)
        with measure.reading_checked(any(call.fed is not None for call in calls)):
            return read(calls)

    def read(calls: list[Call]) -> Verdict | None:
        fed = [(call.seed, call.fed) for call in calls if call.fed is not None]
        if fed and (verdict := _timed_inputs_verdict(ev, measure, fed, len(copies) + 1)):
            return verdict
        limit = len(calls) * (LOCATED_SPAN_FACTOR * ev.reference.output_bytes + LOCATED_SPAN_EXTRA)
        with ev.worker.reading([ref for call in calls for ref in call.outputs], "timing", located_limit=limit) as actual:
            start = 0
            for call in calls:
                outputs, start = actual[start:start + len(call.outputs)], start + len(call.outputs)
                if sum(t.nbytes for c in copies for t in c[1]) + sum(t.nbytes for t in outputs) <= budget:
                    copies.append((call.seed, copied(outputs, spares)))
                elif objection := _compare_checked_call(ev, call.seed, outputs, len(copies) + 1):
                    return objection
            if actual and actual[0].is_cuda:
                # Done copying before the mapping closes and before the next timed call: a copy
                # still running on the GPU would slow that call and be blamed on it.
                torch.cuda.synchronize(actual[0].device)
        return None

    return check


def _timed_inputs_verdict(ev: Evaluation, measure: Measurement, calls: list[tuple[int, list]],
                          index: int) -> Verdict | None:
    """A checked call's fed inputs must come back unchanged, or changed as the reference's forward
    changes them (a reference trial run then, between timed calls: only where they changed at all)."""
    for (seed, _), left in zip(calls, measure.inputs_left(calls)):
        if left is None:
            continue
        with ev.reference.expected(seed) as (_, expected_inputs):
            verdict = ev.decide(Moment.timed_inputs, TimedInputs(index, mutated_inputs(expected_inputs, left)))
        if verdict:
            return verdict
    return None


def _compare_checked_call(ev: Evaluation, seed: int, actual: list, index: int) -> Verdict | None:
    with ev.reference.expected(seed) as (expected, _):
        comparison = compare_outputs(expected, actual, ev.tolerance, ev.fused)
    return ev.decide(Moment.timed_outputs, TimedOutputs(index, comparison))

"""The reference's recalibration: the per-call overhead a candidate's wall times are held to, and
the reference time its speedup is against; a first timing dragged up by slow calls looked at twice."""

import random
from types import SimpleNamespace

import pytest

from harness.cpu.device import Cpu
from harness.judge import gpu, reference
from harness.judge.gpu import Gpu
from harness.judge.reference import ReferenceRunner, needs_second_look, surely_faster
from harness.judge.timing.timed import Timed
from harness.judge.timing.stats import timing_stats
from harness.records import EvalConfig, TimingStats

from tests.fakes import FakeWorker


def recalibrating(median_ms: float, overheads: list[float], device: str = "cuda"):
    """A reference runner timed at `median_ms` whose next timed calls show `overheads`; and the
    plans it was asked to time."""
    runner = ReferenceRunner.__new__(ReferenceRunner)  # no worker: only the recalibration runs
    runner.config, runner.device = EvalConfig(device=device), Cpu() if device == "cpu" else Gpu()
    timing = TimingStats(median_ms=median_ms, iqr_ms=0, mean_ms=median_ms, min_ms=median_ms, max_ms=median_ms,
                         n=1, samples_ms=[median_ms], clock="perf_counter")
    runner.measured = SimpleNamespace(timing=timing, batch=1, batch_cap=1)
    plans = []

    def time(plan, profiled, batch, cap, **_):
        plans.append(plan)
        calls = overheads[:plan.fixed]
        return Timed(reported_ms=[median_ms] * len(calls), wall_ms=[median_ms + o for o in calls]), batch

    runner._time = time
    return runner, plans


def test_on_a_gpu_the_first_recalibration_call_is_not_counted():
    runner, plans = recalibrating(100.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0])
    assert runner.recalibrate(1).overhead_ms == pytest.approx([1.0, 1.1, 0.9, 1.0])
    assert plans[0].fixed == 1 + reference.RECALIBRATION_CALLS[0]
    runner, plans = recalibrating(100.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0], device="cpu")
    assert runner.recalibrate(1).overhead_ms == pytest.approx([3.0, 1.0, 1.1, 0.9])


def test_a_quick_reference_gets_more_recalibration_calls():
    fewest, most = reference.RECALIBRATION_CALLS
    runner, plans = recalibrating(0.2, [1.0] * 50)
    assert len(runner.recalibrate(1).overhead_ms) == most
    runner, plans = recalibrating(reference.RECALIBRATION_BUDGET_MS / (fewest + 2), [1.0] * 50)
    assert len(runner.recalibrate(1).overhead_ms) == fewest + 2


def test_on_a_gpu_a_quick_reference_warms_the_device_up_before_its_counted_calls():
    """The GPU's clocks fall while it idles: a 0.2 ms reference warms up for as many calls as
    the bound allows, a 100 ms one for one call; on the CPU nothing is uncounted."""
    fewest, most = gpu.WARM_COMMANDS
    warm = [9.0] * most
    runner, plans = recalibrating(0.2, warm + [1.0] * 30)
    assert runner.recalibrate(1).overhead_ms == [1.0] * reference.RECALIBRATION_CALLS[1]
    assert plans[0].fixed == most + reference.RECALIBRATION_CALLS[1]
    runner, plans = recalibrating(4.0, [9.0] * 5 + [1.0] * 10)
    assert runner.recalibrate(1).overhead_ms == [1.0] * 5  # 20 ms of warm-up: five calls
    runner, plans = recalibrating(0.2, [1.0] * 50, device="cpu")
    runner.recalibrate(1)
    assert plans[0].fixed == reference.RECALIBRATION_CALLS[1]


def test_a_batched_gpu_recalibration_warms_up_for_its_commands_device_time():
    """20 ms of a 0.2 ms reference at 50 calls a command: two uncounted commands, not sixteen."""
    runner, plans = recalibrating(0.2, [9.0] * 2 + [1.0] * 30)
    assert runner.recalibrate(50).overhead_ms == [1.0] * reference.RECALIBRATION_CALLS[0]
    assert plans[0].fixed == 2 + reference.RECALIBRATION_CALLS[0]


def test_the_recalibration_times_the_reference_on_its_counted_calls():
    runner, _ = recalibrating(20.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0])
    recalibration = runner.recalibrate(1)
    assert recalibration.timing.median_ms == 20.0 and recalibration.timing.n == len(recalibration.overhead_ms)
    runner, _ = recalibrating(2.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0], device="cpu")
    recalibration = runner.recalibrate(1)  # the first call's overhead counts, its time does not
    assert recalibration.timing.n == len(recalibration.overhead_ms) - 1


def test_a_batched_recalibration_counts_commands_and_makes_at_least_those_drift_correction_needs():
    """Its commands, not its calls, are what the budget counts: a 0.2 ms reference timed 100 calls
    to a command (20 ms each) makes the fewest a batched reference gets. A 20 ms reference,
    itself timed one call to a command, recalibrated at a quick candidate's batch of 100 (2 s a
    command) makes the fewest of all."""
    runner, plans = recalibrating(0.2, [1.0] * 50, device="cpu")
    runner.measured.batch = 100
    runner.recalibrate(100)
    assert plans[0].fixed == reference.UNTIMED_CALLS + reference.SURELY_FASTER_CALLS
    runner, plans = recalibrating(20.0, [1.0] * 50, device="cpu")
    runner.recalibrate(100)
    assert plans[0].fixed == reference.RECALIBRATION_CALLS[0]


def test_a_batched_recalibration_can_correct_for_drift():
    """The quick problems batches are for are those whose first timing drifts most: a batched
    recalibration makes enough commands for `surely_faster` to trust."""
    runner, _ = recalibrating(0.2, [1.0] * 50, device="cpu")
    runner.measured.timing, runner.measured.batch = times(*[0.3] * 20), 100
    recalibration = runner.recalibrate(100)
    assert surely_faster(runner.measured.timing, recalibration.timing) is recalibration.timing


def times(*samples_ms: float):
    return timing_stats(list(samples_ms), "perf_counter")


def test_a_speedup_is_against_the_reference_recalibrated_when_it_is_surely_faster_now():
    first = times(*[0.029] * 40 + [0.030] * 40)
    faster = times(*[0.024, 0.025, 0.026] * 4)
    assert surely_faster(first, faster) is faster


def test_a_reference_slower_now_or_within_noise_changes_no_speedup():
    """Slower now (a machine that got busier, or a GPU a candidate's leftover work keeps busy)
    would raise the speedup: never. Faster calls whose interval meets the first one's are noise,
    as are a few calls that all fall below the first interval (four: one time in sixteen
    below the median without drift)."""
    first = times(*[0.028, 0.029, 0.030, 0.031, 0.032] * 16)
    assert surely_faster(first, times(*[0.040] * 12)) is None
    overlapping = times(0.020, 0.021, 0.022, 0.023, 0.024, 0.025, 0.029, 0.029, 0.031, 0.032, 0.033, 0.034)
    assert overlapping.median_ms < first.median_ms and surely_faster(first, overlapping) is None
    four_below = times(0.020, 0.021, 0.022, 0.023)
    assert four_below.ci_high_ms < first.ci_low_ms and surely_faster(first, four_below) is None


def started(*timings: list[float]):
    """A CPU reference runner started with a worker whose successive timings report `timings`;
    and how many timings it asked for."""
    runner = ReferenceRunner.__new__(ReferenceRunner)  # no worker: load and timing are stand-ins
    runner.config, runner.device = EvalConfig(device="cpu"), Cpu()
    runner.load = lambda: None
    runner.params, runner.alt_sizes, runner.floor = [], [], None
    asked = []

    def time(plan, profiled, batch, cap, **_):
        samples = timings[len(asked)]
        asked.append(profiled)
        return Timed(reported_ms=list(samples), wall_ms=[s + 1.0 for s in samples], stopped="time_budget"), batch

    runner._time = time
    runner._batch_cap = lambda: 1
    runner.start()
    return runner, asked


def test_a_reference_median_dragged_up_by_slow_calls_is_timed_again_on_all_its_calls():
    # The 2-core VM's relu reference: three of five calls faulted in their 256 MB outputs.
    runner, asked = started([366.0, 349.0, 79.0, 58.0, 361.0], [64.0, 66.0, 80.0, 75.0, 65.0])
    assert asked == [1, 0]  # the second look is not profiled
    assert runner.measured.timing.n == 10 and runner.measured.timing.median_ms == pytest.approx(77.0)
    assert len(runner.measured.timed.wall_ms) == 10


def test_a_reference_timed_within_its_usual_spread_is_timed_once():
    runner, asked = started([154.0, 166.0, 159.0, 182.0, 170.0], [10.0] * 5)
    assert asked == [1] and runner.measured.timing.median_ms == 166.0
    assert needs_second_look([369.0, 80.0, 98.0, 80.0, 80.0]) is False  # one slow call moves no median
    assert needs_second_look([]) is False


def test_a_paired_command_is_one_timed_command_of_the_references_own_batch():
    runner = ReferenceRunner.__new__(ReferenceRunner)
    runner.config, runner.device, runner.rng = EvalConfig(device="cuda"), Gpu(), random.Random(0)
    runner.worker = FakeWorker(elapsed_ms=0.25)
    runner.measured = SimpleNamespace(batch=8, batch_cap=64)
    assert runner.paired_command() == 0.25
    assert runner.worker.ops == ["timed", "commit"] and runner.worker.commands[0].calls == 8

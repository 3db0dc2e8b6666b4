"""The reference's recalibration: the per-call overhead a candidate's wall times are held to."""

import pytest

from harness.judge import reference
from harness.judge.reference import ReferenceRunner
from harness.judge.timer import Timed
from harness.records import EvalConfig, TimingStats


def recalibrating(median_ms: float, overheads: list[float], device: str = "cuda"):
    """A reference runner timed at `median_ms` whose next timed calls show `overheads`; and the
    plans it was asked to time."""
    runner = ReferenceRunner.__new__(ReferenceRunner)  # no worker: only the recalibration runs
    runner.config = EvalConfig(device=device)
    runner.timing = TimingStats(median_ms=median_ms, iqr_ms=0, mean_ms=median_ms, min_ms=median_ms, max_ms=median_ms,
                                n=1, samples_ms=[median_ms], clock="perf_counter")
    plans = []

    def time(plan, profiled):
        plans.append(plan)
        calls = overheads[:plan.fixed]
        return Timed(reported_ms=[median_ms] * len(calls), wall_ms=[median_ms + o for o in calls])

    runner._time = time
    return runner, plans


def test_on_a_gpu_the_first_recalibration_call_is_not_counted():
    runner, plans = recalibrating(100.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0])
    assert runner.overhead_now() == pytest.approx([1.0, 1.1, 0.9, 1.0])
    assert plans[0].fixed == 1 + reference.RECALIBRATION_CALLS[0]
    runner, plans = recalibrating(100.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0], device="cpu")
    assert runner.overhead_now() == pytest.approx([3.0, 1.0, 1.1, 0.9])


def test_a_quick_reference_gets_more_recalibration_calls():
    fewest, most = reference.RECALIBRATION_CALLS
    runner, plans = recalibrating(0.2, [1.0] * 50)
    assert len(runner.overhead_now()) == most and plans[0].fixed == 1 + most  # one uncounted
    runner, plans = recalibrating(reference.RECALIBRATION_BUDGET_MS / (fewest + 2), [1.0] * 50)
    assert len(runner.overhead_now()) == fewest + 2

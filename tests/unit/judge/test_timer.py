"""The parent's timing phase: statistics with the median's interval, when adaptive timing stops,
which calls are checked and profiled, and how far a worker's reported times are believed."""

import random
import statistics
import time

from harness.judge.timer import (Timed, TimingPlan, Timer, converged, median_interval, timing_bound, timing_stats,
                                 vouched_median)
from harness.records import TimingBound
from harness.worker.protocol import Profile, Reply, TensorRef


def test_statistics_of_samples_with_the_medians_interval():
    stats = timing_stats([4.0, 1.0, 3.0, 2.0, 100.0], "perf_counter", "fixed")
    assert stats.median_ms == 3.0 and stats.min_ms == 1.0 and stats.max_ms == 100.0
    assert stats.mean_ms == 22.0 and stats.iqr_ms == 2.0 and stats.n == 5 and stats.stopped == "fixed"
    assert stats.samples_ms == [4.0, 1.0, 3.0, 2.0, 100.0]  # raw, in call order
    assert stats.ci_low_ms <= stats.median_ms <= stats.ci_high_ms


def test_the_interval_narrows_with_more_samples_and_decides_convergence():
    rng = random.Random(0)
    few = [1.0 + rng.gauss(0, 0.02) for _ in range(8)]
    many = [1.0 + rng.gauss(0, 0.02) for _ in range(400)]
    width = lambda xs: median_interval(xs)[1] - median_interval(xs)[0]  # noqa: E731
    assert width(many) < width(few)
    assert converged(many) and not converged([1.0, 2.0, 3.0, 4.0, 5.0])


class FakeWorker:
    """Replies to `timed` with a fixed time; remembers the commands, and which it was asked for
    the profile of (`summarized`: the count of timed commands when each profile was asked for),
    answering those after `summary_s`."""

    def __init__(self, elapsed_ms=1.0, summary_s=0.0):
        self.commands, self.elapsed_ms, self.summary_s = [], elapsed_ms, summary_s
        self.summarized: list[int] = []
        self.ops: list[str] = []  # every command's op, in order, with the parent's checks ("check")

    def request(self, command, phase):
        self.ops.append(command.op)
        if command.op == "profile":
            self.summarized.append(len(self.commands))
            time.sleep(self.summary_s)
            return Reply(ok=True, profile=Profile(ops=["aten::relu"]))
        self.commands.append(command)
        return Reply(ok=True, elapsed_ms=self.elapsed_ms, outputs=[])


def plan(**change):
    values = dict(warmup=0, fixed=None, min_trials=5, max_trials=50, budget_s=10.0, device="cpu")
    return TimingPlan(**values | change)


def test_fixed_counts_and_adaptive_limits():
    timed, _ = Timer(FakeWorker(), plan(fixed=7), random.Random(1)).run(profiled=0)
    assert len(timed.reported_ms) == 7 and timed.stopped == "fixed"
    steady, _ = Timer(FakeWorker(), plan(), random.Random(1)).run(profiled=0)
    assert len(steady.reported_ms) == 5 and steady.stopped == "converged"  # identical times: converged at the minimum


def test_every_call_gets_its_own_seed_and_some_are_profiled():
    worker = FakeWorker()
    timed, _ = Timer(worker, plan(fixed=20), random.Random(2)).run(profiled=2)
    seeds = [c.seed for c in worker.commands]
    assert len(set(seeds)) == len(seeds) == 22
    assert sum(c.profile for c in worker.commands) == 2 and len(timed.profiles) == 2


def test_a_profiled_calls_profile_is_read_after_the_clock_stops():
    """Reading the profiler's events takes the worker milliseconds, more for more events: the
    parent's clock around a profiled call, which says whether it ran slower when watched, leaves
    that out."""
    worker = FakeWorker(summary_s=0.05)
    timed, _ = Timer(worker, plan(fixed=6), random.Random(4)).run(profiled=2)
    profiled_at = [i + 1 for i, c in enumerate(worker.commands) if c.profile]
    assert worker.summarized == profiled_at and [p.ops for p in timed.profiles] == [["aten::relu"]] * 2
    assert max(timed.profiled_wall_ms) < 50


def test_a_checked_calls_outputs_are_copied_before_the_worker_gets_another_command():
    """Its profile request included: a worker must not run code of its own between a timed call's
    reply and the copy of the outputs the parent checks."""
    checked_and_profiled = 0
    for seed in range(10):
        worker = FakeWorker()
        Timer(worker, plan(fixed=20), random.Random(seed)).run(check=lambda s, reply, fed: worker.ops.append("check"),
                                                               profiled=2)
        pairs = list(zip(worker.ops, worker.ops[1:]))
        assert ("profile", "check") not in pairs
        checked_and_profiled += pairs.count(("check", "profile"))
    assert checked_and_profiled  # some profiled calls were checked: the order was put to the test


def test_fed_calls_are_told_where_their_inputs_are_and_no_seed():
    """A fed worker (CPU runs) learns nothing it could make the inputs from; each call's inputs
    are written just before it, for the seed the parent checks the call against."""
    worker, fed_seeds, checked = FakeWorker(), [], []
    where = [TensorRef(dtype="float32", shape=[2], stride=[1], storage_offset=0, device="cpu")]

    def feed(seed):
        fed_seeds.append(seed)
        return where

    timer = Timer(worker, plan(fixed=6, warmup=2), random.Random(3), feed=feed)
    timer.warm_up()
    timer.run(check=lambda seed, reply, fed: checked.append(seed), profiled=1)
    timed_calls = [c for c in worker.commands if c.op == "timed"]
    assert all(c.fed == where and c.seed == 0 for c in timed_calls) and worker.commands[0].fed == where
    assert len(fed_seeds) == 1 + len(timed_calls) and set(checked) <= set(fed_seeds[1:]) and checked


def test_the_profiled_calls_are_made_even_when_timing_could_stop_before_them():
    for seed in range(20):  # whichever calls the draw picks, the last ones included
        worker = FakeWorker()
        timed, _ = Timer(worker, plan(fixed=3), random.Random(seed)).run(profiled=2)
        assert len(timed.profiles) == 2 and len(timed.reported_ms) == 3 and len(worker.commands) == 5


def test_a_second_look_adds_profiled_calls_only():
    worker = FakeWorker()
    timer = Timer(worker, plan(fixed=5), random.Random(5))
    timed, _ = timer.run(profiled=2)
    assert timer.profile_more(timed, 6) is None
    assert len(timed.profiles) == len(timed.profiled_wall_ms) == 8 and len(timed.reported_ms) == 5
    assert all(command.profile for command in worker.commands[-6:])
    assert len({command.seed for command in worker.commands}) == 13  # fresh inputs for each


def test_the_checked_calls_are_chosen_by_the_parent_after_each_reply():
    checked = []
    Timer(FakeWorker(), plan(fixed=40), random.Random(3)).run(check=lambda seed, reply, fed: checked.append(seed))
    assert 8 <= len(checked) <= 32  # about half of the first twenty, a fifth after


def test_each_checked_call_and_only_those_is_followed_by_a_settle_before_the_next_timed_call():
    """The parent's copy of a checked output runs in its own CUDA context; the worker takes the
    GPU back outside any timed call, so the overhead the bound holds it to is the reference's."""
    worker, checked = FakeWorker(), []
    Timer(worker, plan(fixed=40, device="cuda"), random.Random(3)).run(check=lambda seed, reply, fed: checked.append(seed),
                                                                       profiled=0)
    ops = [c.op for c in worker.commands]
    timed_seeds = [c.seed for c in worker.commands if c.op == "timed"]
    assert ops.count("settle") == len(checked) > 0 and ops[0] == "timed"
    for index, op in enumerate(ops):
        if op == "settle":  # right after the call it checked
            assert ops[index - 1] == "timed" and worker.commands[index - 1].seed in checked
    unchecked_then_timed = [a.seed for a, b in zip(worker.commands, worker.commands[1:]) if a.op == b.op == "timed"]
    assert not set(unchecked_then_timed) & set(checked) and len(timed_seeds) == 40
    on_cpu = FakeWorker()  # no CUDA contexts to switch between: nothing to settle
    Timer(on_cpu, plan(fixed=40), random.Random(3)).run(check=lambda seed, reply, fed: None, profiled=0)
    assert {c.op for c in on_cpu.commands} == {"timed"}


def test_a_settle_that_fails_ends_the_timing_with_its_reply():
    class FailsToSettle(FakeWorker):
        def request(self, command, phase):
            self.commands.append(command)
            if command.op == "settle":
                return Reply(ok=False, rejected="no")
            return Reply(ok=True, elapsed_ms=self.elapsed_ms, outputs=[])

    timed, failed = Timer(FailsToSettle(), plan(fixed=40, device="cuda"), random.Random(3)).run(
        check=lambda seed, reply, fed: None, profiled=0)
    assert isinstance(failed, Reply) and failed.rejected == "no" and len(timed.reported_ms) < 40


def test_a_check_that_objects_stops_the_timing():
    timed, objection = Timer(FakeWorker(), plan(fixed=40), random.Random(4)).run(check=lambda seed, reply, fed: "wrong")
    assert objection == "wrong" and len(timed.reported_ms) < 40


def vouched(timed: Timed, reference_overhead_ms: list[float]) -> tuple[float, str | None]:
    return vouched_median(timed.reported_ms, timing_bound(timed, reference_overhead_ms, "cpu"))


def test_reported_times_are_believed_as_far_as_the_parents_clock_allows():
    honest = Timed(reported_ms=[5.0] * 9, wall_ms=[5.6] * 9)
    assert vouched(honest, [0.6, 0.62, 0.58]) == (5.0, None)
    forged = Timed(reported_ms=[0.001] * 9, wall_ms=[5.6] * 9)
    median, why = vouched(forged, [0.6, 0.62, 0.58])
    assert 3.9 < median < 5.1 and "the speedup uses" in why and "saw 5.6 ms per call" in why
    noisy = Timed(reported_ms=[0.05] * 9, wall_ms=[0.65 + 0.3 * (i % 2) for i in range(9)])
    assert vouched(noisy, [0.6] * 5)[1] is None  # within the clock's slack: no flag
    assert statistics.median(noisy.overhead_ms) > 0


def test_the_bound_is_kept_as_evidence_that_gives_the_same_median_again():
    """Each call's overhead in call order, the reference's, and the slack: enough to check a flag
    (or its absence) from the stored result alone."""
    forged = Timed(reported_ms=[0.001, 0.002, 0.001], wall_ms=[5.6, 5.7, 5.5])
    bound = timing_bound(forged, [0.6, 0.62, 0.58], "cpu")
    assert bound.overhead_ms == [5.599, 5.698, 5.499] and bound.reference_overhead_ms == [0.6, 0.62, 0.58]
    assert bound.slack_ms == 1.0  # the CPU's least slack, above four deviations of the reference's
    stored = TimingBound.model_validate_json(bound.model_dump_json())
    assert vouched_median(forged.reported_ms, stored) == vouched(forged, [0.6, 0.62, 0.58])

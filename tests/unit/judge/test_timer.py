"""The parent's timing phase: statistics with the median's interval, when adaptive timing stops,
which calls are checked and profiled, and how far a worker's reported times are believed."""

import contextlib
import random
import re
import statistics
import subprocess
import sys
import time

import pytest

from harness.judge.timer import (BATCH_MS, BUSY_CORES, CHECKED_PER_BATCH, PROFILED_BATCH, ENOUGH_SAMPLES, SAMPLED_COMMANDS, SAMPLING_MOST_S, SPARSE_MOST_S, SPOILED_WORDS, WORD,
                                 checked_calls,
                                 ShortBatch, Timed, TimingPlan, Timer, busy_machine, spoiled_words, converged, median_interval, timing_bound, timing_stats, vouched_median)
from harness.records import TimingBound
from harness.worker import processes, sampling
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


def ref(*shape: int) -> TensorRef:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return TensorRef(dtype="float32", shape=list(shape), stride=strides, storage_offset=0, device="cpu")


def gpu_ref(handle: int) -> TensorRef:
    return ref(2).model_copy(update={"device": "cuda", "ipc_handle": f"{handle:0128x}", "offset": 0})


def located(address):
    return ref(2).model_copy(update={"address": address})


class FakeWorker:
    """Replies to `timed` with a fixed time per call, taking `call_s` per call by the parent's
    clock, and where its outputs are (two floats per call: located on the CPU, committed call by
    call on a GPU, each call's in an allocation of its own); remembers the
    commands, and which it was asked for the profile of (`summarized`: the count of timed commands
    when each profile was asked for), answering those after `summary_s`."""

    def __init__(self, elapsed_ms=1.0, summary_s=0.0, call_s=0.0):
        self.commands, self.elapsed_ms, self.summary_s, self.call_s = [], elapsed_ms, summary_s, call_s
        self.summarized: list[int] = []
        self.ops: list[str] = []  # every command's op, in order, with the parent's checks ("check")
        self.spoiled: list[list[int]] = []  # each `spoil`'s addresses

    def spoil(self, addresses, phase):
        self.ops.append("spoil")
        self.spoiled.append(addresses)

    def request(self, command, phase):
        self.ops.append(command.op)
        if command.op == "commit":  # the last timed command's outputs
            return Reply(ok=True, outputs=[gpu_ref(call) for call in range(command.calls)])
        if command.op == "release":
            return Reply(ok=True)
        if command.op == "profile":
            self.summarized.append(len(self.commands))
            time.sleep(self.summary_s)
            return Reply(ok=True, profile=Profile(ops=["aten::relu"], elapsed_ms=self.elapsed_ms * self.commands[-1].calls))
        self.commands.append(command)
        time.sleep(self.call_s * command.calls)
        if command.op == "timed" and command.locate:  # each call's two floats where it left them
            return Reply(ok=True, elapsed_ms=self.elapsed_ms * command.calls, outputs=[located(4096)],
                         addresses=[[4096 * (call + 1)] for call in range(command.calls)])
        return Reply(ok=True, elapsed_ms=self.elapsed_ms * command.calls)


def plan(**change):
    values = dict(warmup=0, fixed=None, min_trials=5, max_trials=50, budget_s=10.0, device="cpu")
    return TimingPlan(**values | change)


def test_fixed_counts_and_adaptive_limits():
    timed, _ = Timer(FakeWorker(), plan(fixed=7), random.Random(1)).run(profiled=0)
    assert len(timed.reported_ms) == 7 and timed.stopped == "fixed"
    steady, _ = Timer(FakeWorker(), plan(), random.Random(1)).run(profiled=0)
    assert len(steady.reported_ms) == 5 and steady.stopped == "converged"  # identical times: converged at the minimum


def test_max_trials_counts_calls_so_batches_stop_at_the_fewest_samples_that_hold_that_many():
    """Times that never converge: single calls run to max_trials; batches of 64 calls stop at
    min_trials samples (320 calls); batches of 30, at the seventh (210 calls)."""
    class Noisy(FakeWorker):
        def request(self, command, phase):
            self.elapsed_ms = random.uniform(0.5, 1.5)
            return super().request(command, phase)

    for batch, samples in ((1, 50), (64, 5), (30, 7)):
        timed, _ = Timer(Noisy(), plan(max_trials=200 if batch > 1 else 50), random.Random(2), batch=batch,
                         cap=batch).run(profiled=0)
        assert len(timed.reported_ms) == samples and timed.stopped == "max_trials", batch


def test_every_call_gets_its_own_seed_and_some_are_profiled():
    worker = FakeWorker()
    timed, _ = Timer(worker, plan(fixed=20), random.Random(2)).run(profiled=2)
    seeds = [seed for c in worker.commands for seed in c.seeds]
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
        Timer(worker, plan(fixed=20), random.Random(seed)).run(check=lambda calls: worker.ops.append("check"),
                                                               profiled=2)
        pairs = list(zip(worker.ops, worker.ops[1:]))
        assert ("profile", "check") not in pairs
        checked_and_profiled += pairs.count(("check", "profile"))
    assert checked_and_profiled  # some profiled calls were checked: the order was put to the test


def test_fed_calls_are_told_where_their_inputs_are_and_no_seed():
    """A fed worker (CPU runs) learns nothing it could make the inputs from; each call's inputs
    are written just before it, for the seed the parent checks the call against."""
    worker, fed_seeds, checked = FakeWorker(), [], []
    where = [ref(1, 2)]  # stacked: a row per call

    def feed(seeds):
        fed_seeds.extend(seeds)
        return where

    timer = Timer(worker, plan(fixed=6, warmup=2), random.Random(3), feed=feed)
    timer.warm_up()
    timer.run(check=lambda calls: checked.extend((c.seed, c.fed) for c in calls), profiled=1)
    timed_calls = [c for c in worker.commands if c.op == "timed"]
    assert all(c.fed == where and c.seeds == [] for c in timed_calls) and worker.commands[0].fed == where
    assert len(fed_seeds) == 1 + len(timed_calls) and {s for s, _ in checked} <= set(fed_seeds[1:]) and checked
    assert all(fed == [where[0].row(0)] for _, fed in checked)


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
    assert len({seed for command in worker.commands for seed in command.seeds}) == 13  # fresh inputs for each


def test_the_checked_calls_are_chosen_by_the_parent_after_each_reply():
    checked = []
    Timer(FakeWorker(), plan(fixed=40), random.Random(3)).run(check=lambda calls: checked.extend(c.seed for c in calls))
    assert 8 <= len(checked) <= 32  # about half of the first twenty, a fifth after


def test_each_checked_call_and_only_those_is_followed_by_a_settle_before_the_next_timed_call():
    """The parent's copy of a checked output runs in its own CUDA context; the worker takes the
    GPU back outside any timed call, so the overhead the bound holds it to is the reference's."""
    worker, checked = FakeWorker(), []
    Timer(worker, plan(fixed=40, device="cuda"), random.Random(3)).run(
        check=lambda calls: checked.extend(c.seed for c in calls), profiled=0)
    ops = [c.op for c in worker.commands]
    timed_seeds = [c.seeds[0] for c in worker.commands if c.op == "timed"]
    assert ops.count("settle") == len(checked) > 0 and ops[0] == "timed"
    for index, op in enumerate(ops):
        if op == "settle":  # right after the call it checked
            assert ops[index - 1] == "timed" and worker.commands[index - 1].seeds[0] in checked
    unchecked_then_timed = [a.seeds[0] for a, b in zip(worker.commands, worker.commands[1:]) if a.op == b.op == "timed"]
    assert not set(unchecked_then_timed) & set(checked) and len(timed_seeds) == 40
    on_cpu = FakeWorker()  # no CUDA contexts to switch between: nothing to settle
    Timer(on_cpu, plan(fixed=40), random.Random(3)).run(check=lambda calls: None, profiled=0)
    assert {c.op for c in on_cpu.commands} == {"timed"}


def test_a_settle_that_fails_ends_the_timing_with_its_reply():
    class FailsToSettle(FakeWorker):
        def request(self, command, phase):
            self.commands.append(command)
            if command.op == "settle":
                return Reply(ok=False, rejected="no")
            return Reply(ok=True, elapsed_ms=self.elapsed_ms, outputs=[])

    timed, failed = Timer(FailsToSettle(), plan(fixed=40, device="cuda"), random.Random(3)).run(
        check=lambda calls: None, profiled=0)
    assert isinstance(failed, Reply) and failed.rejected == "no" and len(timed.reported_ms) < 40


def test_a_check_that_objects_stops_the_timing():
    timed, objection = Timer(FakeWorker(), plan(fixed=40), random.Random(4)).run(check=lambda calls: "wrong")
    assert objection == "wrong" and len(timed.reported_ms) < 40


def vouched(timed: Timed, reference_overhead_ms: list[float]) -> tuple[float, str | None]:
    return vouched_median(timed.reported_ms, timing_bound(timed, reference_overhead_ms, [], "cpu"))


def test_reported_times_are_believed_as_far_as_the_parents_clock_allows():
    honest = Timed(reported_ms=[5.0] * 9, wall_ms=[5.6] * 9)
    assert vouched(honest, [0.6, 0.62, 0.58]) == (5.0, None)
    forged = Timed(reported_ms=[0.001] * 9, wall_ms=[5.6] * 9)
    median, why = vouched(forged, [0.6, 0.62, 0.58])
    # Contradicted by the clock beyond the slack (1 ms here): timed by the clock, keeping none of it.
    assert median == pytest.approx(5.0) and "the speedup uses" in why and "saw 5.6 ms per call" in why
    noisy = Timed(reported_ms=[0.05] * 9, wall_ms=[0.65 + 0.3 * (i % 2) for i in range(9)])
    assert vouched(noisy, [0.6] * 5)[1] is None  # within the clock's slack: no flag
    assert statistics.median(noisy.overhead_ms) > 0


def test_the_bound_is_kept_as_evidence_that_gives_the_same_median_again():
    """Each call's overhead in call order, the reference's, and the slack: enough to check a flag
    (or its absence) from the stored result alone."""
    forged = Timed(reported_ms=[0.001, 0.002, 0.001], wall_ms=[5.6, 5.7, 5.5])
    bound = timing_bound(forged, [0.6, 0.62, 0.58], [], "cpu")
    assert bound.overhead_ms == [5.599, 5.698, 5.499] and bound.reference_overhead_ms == [0.6, 0.62, 0.58]
    assert bound.slack_ms == 1.0  # the CPU's least slack, above four deviations of the reference's
    stored = TimingBound.model_validate_json(bound.model_dump_json())
    assert vouched_median(forged.reported_ms, stored) == vouched(forged, [0.6, 0.62, 0.58])


def test_a_batch_times_its_calls_back_to_back_each_on_its_own_inputs_and_is_recorded_per_call():
    worker = FakeWorker(elapsed_ms=0.5)
    timer = Timer(worker, plan(fixed=4), random.Random(6), batch=8, cap=8)
    timed, _ = timer.run(profiled=1)
    timed_commands = [c for c in worker.commands if c.op == "timed"]
    assert all(c.calls == 8 and len(c.seeds) == 8 for c in timed_commands)
    assert len({seed for c in timed_commands for seed in c.seeds}) == 8 * len(timed_commands)
    assert timed.batch == 8 and timed.reported_ms == [0.5] * 4  # the command's time over its calls
    assert timed.profiles[0].elapsed_ms == 0.5 and len(timed.profiled_wall_ms) == 1


def test_a_profiled_command_makes_few_calls_and_its_profile_is_per_call():
    """A worker knows it is watched while the profiler is on: a smaller batch tells it nothing
    new, and a path slow only when watched costs a few calls, not a whole batch."""
    worker = FakeWorker(elapsed_ms=0.5)
    timed, objection = Timer(worker, plan(fixed=6), random.Random(6), batch=200, cap=200, insist=True).run(profiled=2)
    profiled = [c for c in worker.commands if c.profile]
    assert objection is None and [c.calls for c in profiled] == [PROFILED_BATCH["cpu"]] * 2 == [timed.profiled_batch] * 2
    assert all(p.elapsed_ms == 0.5 for p in timed.profiles) and len(timed.reported_ms) == 6


def test_a_verified_batch_has_some_of_its_calls_checked_each_against_its_own_seed_and_outputs():
    worker, checked = FakeWorker(), []
    Timer(worker, plan(fixed=20), random.Random(7), batch=50, cap=50).run(check=checked.append, profiled=0)
    assert checked and all(len(calls) == CHECKED_PER_BATCH for calls in checked)
    by_seed = {seed: place for c in worker.commands for place, seed in enumerate(c.seeds)}
    for calls in checked:
        assert len({c.seed for c in calls}) == CHECKED_PER_BATCH
        assert all(c.outputs == [located(4096 * (by_seed[c.seed] + 1))] and c.fed is None for c in calls)  # its own
    places = {by_seed[c.seed] for calls in checked for c in calls}
    assert len(places) > CHECKED_PER_BATCH  # not the same places every time: a worker cannot tell
    assert len(checked) == 20  # every batch verified: a batched timing makes few commands
    small = []
    Timer(FakeWorker(), plan(fixed=20), random.Random(7), batch=3, cap=3).run(check=small.append, profiled=0)
    assert small and all(len(calls) == 3 for calls in small)  # a smaller batch is checked whole


def test_a_batch_is_sized_by_the_parents_clock_to_take_about_the_batch_time():
    worker = FakeWorker(elapsed_ms=1e-6, call_s=0.0005)  # it says 1 ns a call; each takes half a millisecond
    timer = Timer(worker, plan(), random.Random(8), cap=1000)
    assert timer.size_batch(warm_ms=1e-6).ok
    assert 0.5 * BATCH_MS / 0.5 <= timer.batch <= BATCH_MS / 0.5  # its lie only made the batch larger
    assert [c.calls for c in worker.commands] == [1, 8, 64][:len(worker.commands)]
    capped = Timer(FakeWorker(call_s=0.0005), plan(), random.Random(8), cap=16)
    capped.size_batch(warm_ms=None)
    assert capped.batch == 16
    slow = FakeWorker()
    one = Timer(slow, plan(), random.Random(8), cap=1000)
    assert one.size_batch(warm_ms=BATCH_MS).ok and one.batch == 1 and not slow.commands  # a long call is its own batch


def test_the_batch_is_sized_with_the_runs_other_workers_quiet_as_for_timed_calls():
    """Sized while other lanes run, a batch comes out too small for the quiet window it is timed in."""
    quiet, worker = [], FakeWorker(call_s=0.0005)

    @contextlib.contextmanager
    def held():
        quiet.append(len(worker.commands))
        yield
        quiet.append(len(worker.commands))

    timer = Timer(worker, plan(warmup=2), random.Random(8), quiet=held, cap=1000)
    assert timer.warm_up(size=True).ok and timer.batch > 1
    assert worker.commands[0].op == "warmup" and quiet == [1, len(worker.commands)]  # the sizing, not the warm-up


def test_a_short_batch_implies_the_batch_that_would_take_the_batch_time():
    assert ShortBatch(calls=4, wall_ms=2.0).implied(cap=1000) == 40
    assert ShortBatch(calls=4, wall_ms=2.0).implied(cap=16) == 16
    assert ShortBatch(calls=4, wall_ms=0.0).implied(cap=1000) == 1000
    assert ShortBatch(calls=4, wall_ms=BATCH_MS / 2 - 0.01).implied(cap=1000) > 8  # a short one: more than twice as large


def test_a_batch_too_short_for_the_bound_stops_a_timing_that_insists():
    """A worker that was slow while its batch was sized is timed again at the cap (the candidate's
    judge does that); the reference's timer, and a batch at the cap, go on."""
    timed, short = Timer(FakeWorker(), plan(fixed=10), random.Random(9), batch=2, cap=64, insist=True).run(profiled=0)
    assert isinstance(short, ShortBatch) and short.calls == 2 and len(timed.reported_ms) == 1
    for batch, insist in ((2, False), (64, True)):
        timed, objection = Timer(FakeWorker(), plan(fixed=10), random.Random(9), batch=batch, cap=64,
                                 insist=insist).run(profiled=0)
        assert objection is None and len(timed.reported_ms) == 10


def test_on_the_cpu_outputs_are_read_where_they_are_then_let_go_on_no_clock():
    """No commit: a candidate could do its work in one, inside the allowance for the reference's
    (a fused relu written into the commit buffer scored 35x to 126x; red team)."""
    worker = FakeWorker()
    timed, _ = Timer(worker, plan(fixed=3), random.Random(5), batch=4, cap=4, spoil=True).run(
        check=lambda calls: worker.ops.append("check"), profiled=0)
    # The first command of a batched timing (after a pause) is made but not recorded or checked.
    assert worker.ops == ["timed"] + ["spoil", "release", "timed", "check"] * 3 + ["spoil", "release"]
    assert all(c.locate for c in worker.commands) and timed.commit_ms == [] and len(timed.wall_ms) == 3


def test_on_the_cpu_outputs_are_spoiled_after_they_are_read_and_before_they_are_let_go():
    """Garbage at random in every call's outputs: a ring of outputs whose constant part was
    written once, returned again later with only the rest written, shows it when checked (a
    padded relu's had scored 4.1x against an honest 1.0x). Within the outputs, and a bounded
    number of words however many calls."""
    worker = FakeWorker()
    Timer(worker, plan(fixed=3), random.Random(5), batch=4, cap=4, spoil=True).run(check=lambda calls: None, profiled=0)
    spans = [(4096 * (call + 1), 4096 * (call + 1) + 8) for call in range(4)]  # each call's two floats
    assert len(worker.spoiled) == 4  # every command's, the unrecorded first one's too
    for addresses in worker.spoiled:
        assert all(any(begin <= a and a + WORD <= end for begin, end in spans) for a in addresses)
        assert {a // 4096 for a in addresses} == {1, 2, 3, 4} and all(a % WORD == 0 for a in addresses)
    trusted = FakeWorker()  # the reference's outputs are not spoiled: it may return a buffer of its own
    Timer(trusted, plan(fixed=3), random.Random(5), batch=4, cap=4).run(check=lambda calls: None, profiled=0)
    assert trusted.spoiled == []
    many = spoiled_words([ref(1 << 16)], [[1 << 30]] * 10_000, random.Random(1))
    assert len(many) == 10_000  # a word a call where SPOILED_WORDS cannot go round
    few = spoiled_words([ref(1 << 16)], [[1 << 30]], random.Random(1))
    assert len(few) == SPOILED_WORDS and len(set(few)) > SPOILED_WORDS // 2


def test_on_a_gpu_each_timed_command_is_followed_by_the_commit_of_its_outputs_timed_apart():
    class SlowCommit(FakeWorker):
        def request(self, command, phase):
            if command.op == "commit":
                time.sleep(0.004)
            return super().request(command, phase)

    worker = SlowCommit()
    timed, _ = Timer(worker, plan(fixed=3, device="cuda"), random.Random(5), batch=4, cap=4).run(
        check=lambda calls: None, profiled=0)
    # The first command of a batched timing (after a pause) is made but not recorded.
    assert [op for op in worker.ops if op != "settle"] == ["timed", "commit"] * 4
    assert [c.calls for c in worker.commands if c.op == "timed"] == [4] * 4
    assert len(timed.reported_ms) == len(timed.commit_ms) == 3
    assert all(0.001 <= c <= w for c, w in zip(timed.commit_ms, timed.wall_ms))  # per call: 4 ms over 4 calls


def test_on_a_gpu_a_batchs_checked_calls_are_each_its_own_and_a_profiled_command_makes_one_call():
    """Each call of a GPU batch is described in turn; a profiled command makes one call there (each
    call of a batch has an L2 flush of the harness's, which the profile would count as the
    candidate's)."""
    worker, checked = FakeWorker(elapsed_ms=0.5), []
    timed, objection = Timer(worker, plan(fixed=4, device="cuda"), random.Random(8), batch=6, cap=6).run(
        check=checked.append, profiled=2)
    assert objection is None and timed.profiled_batch == 1 and len(timed.profiles) == 2
    assert sorted(c.calls for c in worker.commands if c.op == "timed") == [1, 1] + [6] * 5  # the first one primes
    for calls in checked:
        handles = [call.outputs[0].ipc_handle for call in calls if len(call.outputs) == 1]
        assert len(set(handles)) == len(calls)  # each call's own outputs
    # Two calls of each of the four timed batches (the first one, uncounted, is not checked); a
    # profiled command's one call now and then.
    assert sorted(len(calls) for calls in checked if len(calls) > 1) == [2] * 4
    assert {len(calls) for calls in checked} <= {1, 2}


def test_a_gpu_batch_has_a_fifth_of_its_calls_checked_at_least_two_at_most_eight():
    """As many checks a call as one-call commands got after their first 20 (a fifth), where a
    timing of large batches makes few commands; the CPU's batches always eight."""
    assert [checked_calls(calls, "cuda") for calls in (1, 2, 9, 20, 40, 1000)] == [1, 2, 2, 4, 8, 8]
    assert [checked_calls(calls, "cpu") for calls in (1, 9, 1000)] == [1, 8, 8]


def test_on_a_gpu_the_time_a_verified_commands_work_keeps_the_gpu_busy_after_its_reply_is_its_own():
    """Kernels queued after the last call's end event would run while the parent reads the checked
    outputs, off the clock: the time the GPU stays busy with them goes to that command."""
    worker, drains = FakeWorker(elapsed_ms=0.5), []

    def drain():
        drains.append(len(worker.commands))
        return 6.0

    timed, _ = Timer(worker, plan(fixed=4, device="cuda"), random.Random(8), batch=6, cap=6, drain=drain).run(
        check=lambda calls: None, profiled=0)
    assert len(drains) == 4  # every batch is verified (the first, uncounted, is not timed)
    assert all(wall >= 1.0 for wall in timed.wall_ms)  # 6 ms over its six calls, beyond what the clock saw
    unverified, _ = Timer(FakeWorker(elapsed_ms=0.5), plan(fixed=4, device="cuda"), random.Random(8), batch=6, cap=6,
                          drain=drain).run(check=None, profiled=0)
    assert len(drains) == 4 and all(wall < 1.0 for wall in unverified.wall_ms)


def test_a_commit_skipped_gains_a_forger_nothing():
    """A worker that writes its outputs where the commit would put them, as it computes them,
    skips the commit the reference pays (about as long as a tiny relu's call): the bound
    subtracts no more commit than the call's own."""
    reference_overhead, reference_commit = [0.02] * 9, [0.01] * 9
    honest = Timed(reported_ms=[0.03] * 9, wall_ms=[0.05] * 9, commit_ms=[0.01] * 9, batch=1000)
    skipper = Timed(reported_ms=[1e-6] * 9, wall_ms=[0.04] * 9, commit_ms=[0.0] * 9, batch=1000)
    for timed, least in ((honest, 0.03), (skipper, 0.0289)):  # its 0.03 ms of work, less the slack
        bound = timing_bound(timed, reference_overhead, reference_commit, "cpu")
        assert vouched_median(timed.reported_ms, bound)[0] >= least
    stored = TimingBound.model_validate_json(timing_bound(skipper, reference_overhead, reference_commit,
                                                          "cpu").model_dump_json())
    assert stored.commit_ms == [0.0] * 9 and stored.reference_commit_ms == reference_commit


def test_a_forged_time_in_a_batch_is_timed_by_the_commands_wall_time():
    """Twenty calls of 1 ms each to a command, reported as 1 ns: the command's wall time, less
    the reference's overhead, times them all (the slack, a twentieth of a millisecond per call,
    spares only calls whose reports the clock does not contradict)."""
    forged = Timed(reported_ms=[1e-7] * 9, wall_ms=[1.05] * 9, batch=20)
    median, why = vouched(forged, [0.05] * 5)
    assert median == pytest.approx(1.0) and why
    assert timing_bound(forged, [0.05] * 5, [], "cpu").slack_ms == 0.05
    within = Timed(reported_ms=[0.96] * 9, wall_ms=[1.05] * 9, batch=20)  # 0.04 ms short: within the slack
    assert vouched(within, [0.05] * 5) == (pytest.approx(0.96), None)


def test_on_the_cpu_an_honest_process_may_pay_more_overhead_than_the_references():
    """Another process's per-call overhead came to up to 1.39 times the reference's on the 2-core
    VM: a C++ relu (13.5 us calls, 18.4 us of overhead against the reference's 13.6) was flagged
    and cut to 0.7 of its speed. Up to 40% more is the slack's; a 1 ns report still is not
    believed, and on a GPU the slack is as it was."""
    reference = [0.0136, 0.0138, 0.0133, 0.0136, 0.0137, 0.0134, 0.0136, 0.0135, 0.0137]
    slower_process = Timed(reported_ms=[0.0135] * 5, wall_ms=[0.0135 + 0.0184] * 5, batch=555)
    bound = timing_bound(slower_process, reference, [], "cpu")
    assert bound.slack_ms == pytest.approx(0.4 * 0.0136)
    assert vouched_median(slower_process.reported_ms, bound, 555) == (pytest.approx(0.0135), None)
    forged = Timed(reported_ms=[1e-6] * 5, wall_ms=[0.0135 + 0.0136] * 5, batch=555)
    median, why = vouched_median(forged.reported_ms, timing_bound(forged, reference, [], "cpu"), 555)
    assert median == pytest.approx(0.0135) and "the speedup uses" in why
    assert timing_bound(slower_process, reference, [], "cuda").slack_ms == pytest.approx(4 * 0.0001)  # its spread


def test_late_wake_ups_on_a_busy_machine_flag_no_honest_batch_but_forged_calls_stay_flagged():
    """Beside two busy loops on the 2-core VM some commands' wake-ups came up to 6 ms late; in
    three of five samples an honest 2 ms sleeper was flagged and cut to the clock's time. The
    contradiction is judged on the clock's lower quartile; the speed stays the median's."""
    reference = [0.08, 0.075, 0.085, 0.08, 0.08]  # per call, over 9-call commands
    late = [0.0, 4.5, 0.2, 4.0, 5.0]  # ms a command, beyond the reference's overhead
    honest = Timed(reported_ms=[2.13] * 5, wall_ms=[2.13 + 0.08 + extra / 9 for extra in late], batch=9)
    bound = timing_bound(honest, reference, [], "cpu")
    median, why = vouched_median(honest.reported_ms, bound, 9)
    assert why is None and median == pytest.approx(2.13 + (4.0 / 9 - bound.slack_ms))  # the median's late wake-up
    # A forger honest on one command in five, reporting half its time on the others: flagged.
    forged = Timed(reported_ms=[2.13, 1.07, 1.07, 1.07, 1.07], wall_ms=[2.13 + 0.08] * 5, batch=9)
    median, why = vouched_median(forged.reported_ms, timing_bound(forged, reference, [], "cpu"), 9)
    assert median == pytest.approx(2.13) and "the speedup uses" in why


def test_in_batches_a_report_far_below_the_clock_is_flagged_even_within_the_slack():
    """A few commands' jitter can make a batch's slack larger than a whole tiny call: there a
    worker that reported 1 ns, its overhead trimmed below the reference's, stood unflagged at
    10,266x (red team). In batches the report must also be within IMPLAUSIBLE_FACTOR of the
    clock; honest workers came out at up to 1.61 times their reports."""
    reference = [0.012, 0.0137, 0.0154, 0.0137, 0.012, 0.0154]  # per call, over 800-call commands
    forged = Timed(reported_ms=[1e-6] * 5, wall_ms=[0.0189] * 5, batch=800)
    bound = timing_bound(forged, reference, [], "cpu")
    assert bound.slack_ms > 0.0189 - 0.0137  # the slack hides it all
    assert vouched_median(forged.reported_ms, bound)[1] is None  # as one call to a command
    median, why = vouched_median(forged.reported_ms, bound, 800)
    assert median == pytest.approx(0.0189 - 0.0137) and "the speedup uses" in why
    honest = Timed(reported_ms=[0.0048] * 5, wall_ms=[0.0189] * 5, batch=800)
    assert vouched_median(honest.reported_ms, timing_bound(honest, reference, [], "cpu"), 800) == (0.0048, None)
    # A Python relu in a slow process: the clock saw 1.61 times its report, no forgery.
    slow_process = Timed(reported_ms=[0.012] * 5, wall_ms=[0.012 * 1.61 + 0.0137] * 5, batch=800)
    bound = timing_bound(slow_process, reference, [], "cpu")
    median, why = vouched_median(slow_process.reported_ms, bound, 800)
    assert why is None and median == pytest.approx(0.012, rel=0.05)
    half = Timed(reported_ms=[0.0051] * 5, wall_ms=[0.0189 + 0.0051] * 5, batch=800)  # half the clock's 0.0103 ms
    median, why = vouched_median(half.reported_ms, timing_bound(half, reference, [], "cpu"), 800)
    assert median == pytest.approx(0.0103) and "the speedup uses" in why
    # Far below the clock only within its resolution (a command's 1 ms floor over 800 calls): no flag.
    tiny = Timed(reported_ms=[0.0005] * 5, wall_ms=[0.0149] * 5, batch=800)
    assert vouched_median(tiny.reported_ms, timing_bound(tiny, reference, [], "cpu"), 800)[1] is None
    # One call to a command (a GPU's tiny kernel beside a millisecond of noisy overhead): the slack alone decides.
    tiny = Timed(reported_ms=[0.02] * 5, wall_ms=[1.12] * 5, batch=1)
    assert vouched_median(tiny.reported_ms, timing_bound(tiny, [0.8, 1.0, 1.2, 1.0, 0.8, 1.2], [], "cuda"))[1] is None


def test_a_timing_window_keeps_what_other_processes_used_meanwhile():
    meter = processes.OthersCpu(lambda: [])

    @contextlib.contextmanager
    def quiet():
        yield meter
        meter.cores = 1.25  # measured as the window closes

    timed, _ = Timer(FakeWorker(), plan(fixed=3), random.Random(1), quiet=quiet).run(profiled=0)
    assert timed.others_cores == 1.25
    unmeasured, _ = Timer(FakeWorker(), plan(fixed=3), random.Random(1)).run(profiled=0)
    assert unmeasured.others_cores is None


def test_a_speed_timed_beside_other_processes_says_the_machine_was_busy():
    def stats(others):
        return timing_stats([1.0, 1.1, 0.9], "perf_counter", others_cores=others)

    assert busy_machine(stats(0.02), stats(None)) is None
    assert busy_machine(stats(BUSY_CORES * 0.9), stats(0.0)) is None
    assert "kept 1.30 cores busy while it was timed and 0.00 while the reference was" in busy_machine(stats(1.3), stats(0.0))
    assert "kept 0.80 cores busy while it was timed and unmeasured while" in busy_machine(stats(0.8), stats(None))
    assert "0.00 cores busy while it was timed and 0.90 while the reference was" in busy_machine(stats(0.0), stats(0.9))


class SampledWorker(FakeWorker):
    """A FakeWorker whose process, sampled from outside, is `pid`."""

    def __init__(self, pid, call_s=0.0):
        super().__init__(call_s=call_s)
        self.worker_pid = pid


def sampled_timing(child_code: str, call_s: float, budget_s: float = 10.0, **sampling_args) -> tuple[Timed, SampledWorker]:
    """A timing of 6 recorded commands of 4 calls, 2 profiled, sampled closely (or as
    `sampling_args` say), where the worker's process runs `child_code` (once started)."""
    with subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\n" + child_code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout.readline() == "ready\n"  # started: its start-up is not what is sampled
        worker = SampledWorker(child.pid, call_s)
        timer = Timer(worker, plan(fixed=6, budget_s=budget_s), random.Random(3), batch=4, cap=4,
                      **{"sample": True} | sampling_args)
        timed, _ = timer.run(profiled=2)
        child.kill()
    if (timed.cpu_samples or timed.sparse_samples) is None:
        pytest.skip("this host does not let the harness sample a child process (perf_event_paranoid, seccomp)")
    return timed, worker


def test_two_commands_at_random_among_the_first_are_sampled_from_outside_and_not_recorded():
    """Sampling slows a call (a timer interrupt per sample), so a sampled command's time is not
    the candidate's: it is made besides the recorded ones, like a profiled one, and the worker is
    not told."""
    # Calls long enough for two commands to take ENOUGH_SAMPLES twice over at the host's period.
    period_s = sampling.period_for(sampling.max_sample_rate()) / 1e9
    timed, worker = sampled_timing("while True: pass", call_s=max(0.02, ENOUGH_SAMPLES * period_s / 4))
    assert len(timed.reported_ms) == 6 and len(timed.profiles) == 2
    assert timed.sampled_commands == SAMPLED_COMMANDS and timed.cpu_samples.calls == 4 * SAMPLED_COMMANDS
    assert timed.cpu_samples.samples >= ENOUGH_SAMPLES
    assert len(worker.commands) == 1 + 6 + 2 + SAMPLED_COMMANDS  # the first, unrecorded batch too
    unsampled, _ = Timer(FakeWorker(), plan(fixed=6), random.Random(3), batch=4, cap=4).run(profiled=2)
    assert unsampled.cpu_samples is None and unsampled.sampled_commands == 0


def test_a_command_whose_sampling_the_kernel_throttled_is_sampled_again(monkeypatch):
    """Its samples say too little (worker/sampling.py): sampling starts over at a longer period, and
    commands are sampled until two are kept."""
    drained, throttles = sampling._drained, iter([1])
    monkeypatch.setattr(sampling, "_drained", lambda ring: (*drained(ring)[:2], next(throttles, 0)))
    period_s = 2 * sampling.period_for(sampling.max_sample_rate()) / 1e9
    timed, worker = sampled_timing("while True: pass", call_s=max(0.02, ENOUGH_SAMPLES * period_s / 4))
    assert timed.cpu_samples.throttled == 1 and timed.sampled_commands == SAMPLED_COMMANDS + 1
    assert timed.cpu_samples.calls == 4 * SAMPLED_COMMANDS  # the throttled command's left out
    assert len(timed.reported_ms) == 6 and len(worker.commands) == 1 + 6 + 2 + SAMPLED_COMMANDS + 1


SPARSE_PERIOD_MS = sampling.period_for(sampling.max_sample_rate(), sampling.SPARSE_PERIOD_NS) / 1e6


def test_every_other_command_is_sampled_sparsely_so_a_candidate_cannot_tell_when_it_is_watched():
    """Closely sampled calls run slower, which a candidate can notice; sparsely, every command but
    the profiled and the closely sampled ones (the first, unrecorded batch included) is sampled
    alike."""
    timed, worker = sampled_timing("while True: pass", call_s=0.02, sparse=True)
    assert timed.sparse_samples.period_ms == SPARSE_PERIOD_MS
    assert timed.sparse_samples.calls == 4 + 4 * 6 and timed.cpu_samples.calls == 4 * SAMPLED_COMMANDS
    assert timed.sparse_samples.samples * SPARSE_PERIOD_MS == pytest.approx(0.02 * 4 * 7 * 1000, rel=0.3)
    assert timed.stopped == "fixed"  # no library time to tell: the plan alone decides
    alone, _ = sampled_timing("while True: pass", call_s=0.02, sparse=True, sample=False)
    assert alone.cpu_samples is None and alone.sparse_samples.calls == 4 + 4 * 6


def test_the_samplers_reading_of_its_events_is_not_on_the_wall_clock(monkeypatch):
    """Once the reply is in, the sampler disables its events (one for each of the worker's threads
    and CPUs) and reads their rings: not the worker's time (600 idle threads had made a softmax's
    wall 0.8 ms a call longer, and its timing was flagged as disagreeing with the clock)."""
    drained = sampling._drained

    def slow(ring):
        time.sleep(0.05)
        return drained(ring)
    monkeypatch.setattr(sampling, "_drained", slow)
    timed, _ = sampled_timing("import sys; sys.stdin.read()", call_s=0.005, sparse=True)
    assert timed.sparse_samples is not None and max(timed.wall_ms) < 5 + 5  # 50 ms a ring: 12.5 ms a call or more


def test_a_timing_says_why_its_worker_could_not_be_sampled(monkeypatch):
    """Sparsely refused (its threads more than the harness may open events for), closely sampled:
    the refusal is kept beside the samples taken, for the judge to weigh."""
    opened = []

    def refuse_the_second(self, attr, threads):
        opened.append(self)
        if len(opened) == 2:
            return OSError(24, "Too many open files", "perf_event_open")
        return open_events(self, attr, threads)
    open_events = sampling.Sampler._open_events
    monkeypatch.setattr(sampling.Sampler, "_open_events", refuse_the_second)
    timed, _ = sampled_timing("while True: pass", call_s=0.02, sparse=True)
    assert timed.sparse_samples is None and timed.cpu_samples is not None
    assert timed.sampling_refusal == "perf_event_open: Too many open files"
    plain, _ = sampled_timing("while True: pass", call_s=0.02, sparse=True)
    assert plain.sampling_refusal is None


def test_timing_goes_on_until_its_sparse_samples_can_tell_the_library_time_asked_for():
    """Too few calls sampled sparsely would let hidden library work pass unseen: the timing goes on
    past its plan until they tell `tell_library_ms` a call (SAMPLES_TO_TELL samples of it)."""
    tell_ms = 1.0
    timed, _ = sampled_timing("import sys; sys.stdin.read()", call_s=0.005, sparse=True, tell_library_ms=tell_ms)
    calls = timed.sparse_samples.calls
    assert timed.stopped == "sampling" and timed.sparse_samples.tells(tell_ms)
    assert tell_ms * (calls - 4) < sampling.SAMPLES_TO_TELL * SPARSE_PERIOD_MS  # a command fewer would not
    assert len(timed.reported_ms) == (calls - 4) // 4 > 6  # recorded: more trials than the plan's


def test_a_trusted_timing_stops_going_on_once_its_sparse_samples_are_enough_in_all():
    """A reference's work is all on its calls: samples enough in all say its library time too."""
    enough = round(0.3 / (SPARSE_PERIOD_MS / 1e3))  # 0.3 s of the busy child's time: the plan's commands take 0.14 s
    timed, _ = sampled_timing("while True: pass", call_s=0.005, sample=False, sparse=True, tell_library_ms=1e-6,
                              sparse_enough=enough)
    assert timed.stopped == "sampling" and enough <= timed.sparse_samples.samples < 1.3 * enough  # 20 ms a command


def test_timing_goes_on_for_its_sparse_samples_a_while_past_its_plan_at_most():
    began = time.monotonic()
    timed, _ = sampled_timing("import sys; sys.stdin.read()", call_s=0.005, sample=False, sparse=True,
                              tell_library_ms=1e-6)
    assert timed.stopped == "sampling" and not timed.sparse_samples.tells(1e-6)
    assert SPARSE_MOST_S <= time.monotonic() - began < SPARSE_MOST_S + 1.0  # the plan's 10 commands: 0.2 s


def test_samples_of_waiting_in_a_thread_pools_runtime_do_not_end_the_sampling(monkeypatch):
    """Beside a busy loop, most of a two-thread softmax's samples are one thread waiting in OpenMP's
    runtime for the other: not work. Here all of the busy child's code counts as such a runtime, so
    however many samples two commands take, more are sampled, for SAMPLING_MOST_S."""
    monkeypatch.setattr(sampling, "THREAD_RUNTIME", re.compile(r"."))
    period_s = sampling.period_for(sampling.max_sample_rate()) / 1e9
    timed, _ = sampled_timing("while True: pass", call_s=max(0.02, ENOUGH_SAMPLES * period_s / 4))
    assert timed.cpu_samples.samples >= ENOUGH_SAMPLES and timed.sampled_commands > SAMPLED_COMMANDS
    assert SAMPLING_MOST_S * 1000 <= timed.sampled_wall_ms < SAMPLING_MOST_S * 1000 + 200


def test_commands_are_sampled_until_their_samples_are_enough_to_tell_or_for_a_second():
    """Where the host's sample rate makes the period long, two commands say too little: more are
    sampled, for SAMPLING_MOST_S of commands at most."""
    timed, worker = sampled_timing("import sys; sys.stdin.read()", call_s=0.02)  # idle: few samples
    assert timed.cpu_samples.samples < ENOUGH_SAMPLES
    assert SAMPLING_MOST_S * 1000 <= timed.sampled_wall_ms < SAMPLING_MOST_S * 1000 + 200  # 80 ms a command
    assert len(timed.reported_ms) == 6 and len(worker.commands) == 1 + 6 + 2 + timed.sampled_commands

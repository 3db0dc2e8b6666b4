"""The parent's timing phase, the same on every device: when adaptive timing stops, which calls are
checked and profiled, batches sized by the parent's clock, each step measured as the device says."""

import contextlib
import itertools
import random

import pytest

from harness.cpu.measurement import PROFILED_BATCH
from harness.judge.timing.measurement import CHECKED_PER_BATCH
from harness.judge.timing import protocol
from harness.judge.timing.protocol import BATCH_MS, ShortBatch, Timer

from tests.fakes import FakeClock, FakeWorker, cpu, located, plan, ref

def test_fixed_counts_and_adaptive_limits():
    timed, _ = Timer(cpu(FakeWorker()), plan(fixed=7), random.Random(1)).run(profiled=0)
    assert len(timed.reported_ms) == 7 and timed.stopped == "fixed"
    steady, _ = Timer(cpu(FakeWorker()), plan(), random.Random(1)).run(profiled=0)
    assert len(steady.reported_ms) == 5 and steady.stopped == "converged"  # identical times: converged at the minimum


def test_max_trials_counts_calls_so_batches_stop_at_the_fewest_samples_that_hold_that_many():
    """Times that never converge: single calls run to max_trials; batches of 64 calls stop at
    min_trials samples (320 calls); batches of 30, at the seventh (210 calls)."""
    class Noisy(FakeWorker):
        def request(self, command, phase):
            self.elapsed_ms = random.uniform(0.5, 1.5)
            return super().request(command, phase)

    for batch, samples in ((1, 50), (64, 5), (30, 7)):
        timed, _ = Timer(cpu(Noisy()), plan(max_trials=200 if batch > 1 else 50), random.Random(2), batch=batch,
                         cap=batch).run(profiled=0)
        assert len(timed.reported_ms) == samples and timed.stopped == "max_trials", batch


def test_every_call_gets_its_own_seed_and_some_are_profiled():
    worker = FakeWorker()
    timed, _ = Timer(cpu(worker), plan(fixed=20), random.Random(2)).run(profiled=2)
    seeds = [seed for c in worker.commands for seed in c.seeds]
    assert len(set(seeds)) == len(seeds) == 22
    assert sum(c.profile for c in worker.commands) == 2 and len(timed.profiles) == 2


def test_a_profiled_calls_profile_is_read_after_the_clock_stops():
    """Reading the profiler's events takes the worker milliseconds, more for more events: the
    parent's clock around a profiled call, which says whether it ran slower when watched, leaves
    that out."""
    worker = FakeWorker(summary_s=0.05)
    timed, _ = Timer(cpu(worker), plan(fixed=6), random.Random(4)).run(profiled=2)
    profiled_at = [i + 1 for i, c in enumerate(worker.commands) if c.profile]
    assert worker.summarized == profiled_at and [p.ops for p in timed.profiles] == [["aten::relu"]] * 2
    assert max(timed.profiled_wall_ms) < 50


def test_a_checked_calls_outputs_are_copied_before_the_worker_gets_another_command():
    """Its profile request included: a worker must not run code of its own between a timed call's
    reply and the copy of the outputs the parent checks."""
    checked_and_profiled = 0
    for seed in range(10):
        worker = FakeWorker()
        Timer(cpu(worker), plan(fixed=20), random.Random(seed)).run(check=lambda calls: worker.ops.append("check"),
                                                               profiled=2)
        ops = [op for op in worker.ops if op not in ("stopped", "resumed")]
        pairs = list(itertools.pairwise(ops))
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

    timer = Timer(cpu(worker, feed=feed), plan(fixed=6, warmup=2), random.Random(3))
    timer.warm_up()
    timer.run(check=lambda calls: checked.extend((c.seed, c.fed) for c in calls), profiled=1)
    timed_calls = [c for c in worker.commands if c.op == "timed"]
    assert all(c.fed == where and c.seeds == [] for c in timed_calls) and worker.commands[0].fed == where
    assert len(fed_seeds) == 1 + len(timed_calls) and {s for s, _ in checked} <= set(fed_seeds[1:]) and checked
    assert all(fed == [where[0].row(0)] for _, fed in checked)


def test_the_profiled_calls_are_made_even_when_timing_could_stop_before_them():
    for seed in range(20):  # whichever calls the draw picks, the last ones included
        worker = FakeWorker()
        timed, _ = Timer(cpu(worker), plan(fixed=3), random.Random(seed)).run(profiled=2)
        assert len(timed.profiles) == 2 and len(timed.reported_ms) == 3 and len(worker.commands) == 5


def test_a_second_look_adds_profiled_calls_only():
    worker = FakeWorker()
    timer = Timer(cpu(worker), plan(fixed=5), random.Random(5))
    timed, _ = timer.run(profiled=2)
    assert timer.profile_more(timed, 6) is None
    assert len(timed.profiles) == len(timed.profiled_wall_ms) == 8 and len(timed.reported_ms) == 5
    assert all(command.profile for command in worker.commands[-6:])
    assert len({seed for command in worker.commands for seed in command.seeds}) == 13  # fresh inputs for each


def test_the_checked_calls_are_chosen_by_the_parent_after_each_reply():
    checked = []
    Timer(cpu(FakeWorker()), plan(fixed=40), random.Random(3)).run(check=lambda calls: checked.extend(c.seed for c in calls))
    assert 8 <= len(checked) <= 32  # about half of the first twenty, a fifth after


def test_a_check_that_objects_stops_the_timing():
    timed, objection = Timer(cpu(FakeWorker()), plan(fixed=40), random.Random(4)).run(check=lambda calls: "wrong")
    assert objection == "wrong" and len(timed.reported_ms) < 40


def test_a_batch_times_its_calls_back_to_back_each_on_its_own_inputs_and_is_recorded_per_call():
    worker = FakeWorker(elapsed_ms=0.5)
    timer = Timer(cpu(worker), plan(fixed=4), random.Random(6), batch=8, cap=8)
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
    timed, objection = Timer(cpu(worker), plan(fixed=6), random.Random(6), batch=200, cap=200, insist=True).run(profiled=2)
    profiled = [c for c in worker.commands if c.profile]
    assert objection is None and [c.calls for c in profiled] == [PROFILED_BATCH] * 2 == [timed.profiled_batch] * 2
    assert all(p.elapsed_ms == 0.5 for p in timed.profiles) and len(timed.reported_ms) == 6


def test_a_verified_batch_has_some_of_its_calls_checked_each_against_its_own_seed_and_outputs():
    worker, checked = FakeWorker(), []
    Timer(cpu(worker), plan(fixed=20), random.Random(7), batch=50, cap=50).run(check=checked.append, profiled=0)
    assert checked and all(len(calls) == CHECKED_PER_BATCH for calls in checked)
    by_seed = {seed: place for c in worker.commands for place, seed in enumerate(c.seeds)}
    for calls in checked:
        assert len({c.seed for c in calls}) == CHECKED_PER_BATCH
        assert all(c.outputs == [located(4096 * (by_seed[c.seed] + 1))] and c.fed is None for c in calls)  # its own
    places = {by_seed[c.seed] for calls in checked for c in calls}
    assert len(places) > CHECKED_PER_BATCH  # not the same places every time: a worker cannot tell
    assert len(checked) == 20  # every batch verified: a batched timing makes few commands
    small = []
    Timer(cpu(FakeWorker()), plan(fixed=20), random.Random(7), batch=3, cap=3).run(check=small.append, profiled=0)
    assert small and all(len(calls) == 3 for calls in small)  # a smaller batch is checked whole


def test_a_batch_is_sized_by_the_parents_clock_to_take_about_the_batch_time(monkeypatch):
    clock = FakeClock().patch(monkeypatch, protocol)
    worker = FakeWorker(elapsed_ms=1e-6, call_s=0.0005, clock=clock)  # it says 1 ns a call; each takes half a millisecond
    timer = Timer(cpu(worker), plan(), random.Random(8), cap=1000)
    assert timer.size_batch(warm_ms=1e-6).ok
    assert timer.batch == BATCH_MS / 0.5  # its lie only made the batch larger
    assert [c.calls for c in worker.commands] == [1, 8, 64]
    capped = Timer(cpu(FakeWorker(call_s=0.0005, clock=clock)), plan(), random.Random(8), cap=16)
    capped.size_batch(warm_ms=None)
    assert capped.batch == 16
    slow = FakeWorker()
    one = Timer(cpu(slow), plan(), random.Random(8), cap=1000)
    assert one.size_batch(warm_ms=BATCH_MS).ok and one.batch == 1 and not slow.commands  # a long call is its own batch


def test_the_batch_is_sized_with_the_runs_other_workers_quiet_as_for_timed_calls():
    """Sized while other lanes run, a batch comes out too small for the quiet window it is timed in."""
    quiet, worker = [], FakeWorker(call_s=0.0005)

    @contextlib.contextmanager
    def held():
        quiet.append(len(worker.commands))
        yield
        quiet.append(len(worker.commands))

    timer = Timer(cpu(worker, quiet=held), plan(warmup=2), random.Random(8), cap=1000)
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
    timed, short = Timer(cpu(FakeWorker()), plan(fixed=10), random.Random(9), batch=2, cap=64, insist=True).run(profiled=0)
    assert isinstance(short, ShortBatch) and short.calls == 2 and len(timed.reported_ms) == 1
    for batch, insist in ((2, False), (64, True)):
        timed, objection = Timer(cpu(FakeWorker()), plan(fixed=10), random.Random(9), batch=batch, cap=64,
                                 insist=insist).run(profiled=0)
        assert objection is None and len(timed.reported_ms) == 10


def test_the_hosts_time_into_each_call_is_recorded_per_call_where_the_worker_says():
    class SaysHost(FakeWorker):
        def request(self, command, phase):
            reply = super().request(command, phase)
            if command.op == "timed" and not command.profile:
                return reply.model_copy(update={"host_ms": 0.25 * command.calls})
            return reply

    timed, _ = Timer(cpu(SaysHost()), plan(fixed=6), random.Random(3), batch=4, cap=4).run(profiled=0)
    assert timed.host_ms == [0.25] * len(timed.reported_ms) == [0.25] * 6
    silent, _ = Timer(cpu(FakeWorker()), plan(fixed=3), random.Random(3)).run(profiled=0)
    assert silent.host_ms == []  # a worker that does not say: nothing recorded, no zeros


def test_a_paired_timing_follows_each_recorded_command_with_the_references():
    """Never a profiled command: its time is not a recorded one, and pairs only recorded ones."""
    worker, paired_after = FakeWorker(), []

    def pair():
        paired_after.append(len(worker.commands))
        return 2.0
    timed, _ = Timer(cpu(worker), plan(fixed=8), random.Random(3), pair=pair).run(profiled=2)
    recorded = [i + 1 for i, c in enumerate(worker.commands) if not c.profile]
    assert paired_after == recorded and timed.paired_ms == [2.0] * 8 and timed.paired_ratios == [2.0] * 8


def test_a_paired_timing_stops_once_its_ratios_hold_however_both_drift():
    """The machine slows the candidate's calls and the reference's alike: their times never
    converge, each pair's ratio does at once."""
    class Drifting(FakeWorker):
        def request(self, command, phase):
            self.elapsed_ms *= 1.05
            return super().request(command, phase)
    worker = Drifting()
    drifting, _ = Timer(cpu(worker), plan(max_trials=40), random.Random(4)).run(profiled=0)
    assert drifting.stopped == "max_trials"
    worker = Drifting()
    paired, _ = Timer(cpu(worker), plan(max_trials=40), random.Random(4), pair=lambda: 3 * worker.elapsed_ms).run(profiled=0)
    assert paired.stopped == "converged" and len(paired.reported_ms) == 5
    assert paired.paired_ratios == pytest.approx([3.0] * 5)


def test_a_pair_that_objects_stops_the_timing():
    objection = object()
    timed, failed = Timer(cpu(FakeWorker()), plan(fixed=5), random.Random(5), pair=lambda: objection).run(profiled=0)
    assert failed is objection and timed.paired_ms == [] and len(timed.reported_ms) == 1

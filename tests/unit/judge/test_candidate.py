"""A candidate's timing phase, in the order it talks to its workers."""

import contextlib
import os
import random
import time

import pytest

import torch

from harness.judge import candidate as candidate_module
from harness.judge.candidate import CandidateRun, _copied
from harness.builds.cache import BuildStatus
from harness.records import Candidate, CandidateKind, EvalConfig, Flag, Status, Verdict
from harness.judge.timer import Timed
from harness.worker.protocol import Profile, Reply


class Stop(Exception):
    """Ends the phase at its first timed call: what came before is the point."""


class Recording:
    """Stands in for a worker or the reference runner, noting in `events` what it was asked."""

    def __init__(self, name: str, events: list, idle: list[bool] | None = None, warm_ms: float | None = None):
        """`idle`: the reference's answers to idle checks, in order; `warm_ms`: its fastest warm-up call."""
        self.name, self.events, self.pid = name, events, 1
        self.worker_pid = os.getpid()  # a live process to sample (this one) where timing samples it
        self.budget_left = 0  # the reference's memory budget for checked outputs
        self.idle = idle or []
        self.warm_ms = warm_ms
        self.batch, self.batch_cap = 1, 1  # the reference's own batch, and the most a command may make
        self.timed = Timed()  # the reference's first timing: nothing sampled

    def request(self, command, phase):
        self.events.append((self.name, command.op))
        if command.op == "timed":
            raise Stop
        return Reply(ok=True, elapsed_ms=self.warm_ms if command.op == "warmup" else None)

    def recalibrate(self, batch):
        self.events.append((self.name, f"recalibrate at {batch}"))
        return f"recalibrated at {batch}"

    def profiled_now(self, calls):
        self.events.append((self.name, f"{calls} profiled calls"))
        return self.now

    def device_idle_within(self, wait_s):
        self.events.append((self.name, f"idle within {wait_s:g} s"))
        return self.idle.pop(0)

    @contextlib.contextmanager
    def stopped_all(self, purpose):
        self.events.append((self.name, "stopped"))
        yield
        self.events.append((self.name, "resumed"))

    output_bytes = 0  # no outputs seen: no room made for checked ones

    def feeding(self, target):
        def feed(seeds):
            self.events.append((self.name, "inputs"))
            return []
        return feed


def timing_phase(device: str, events: list, idle: list[bool] | None = None) -> tuple[CandidateRun, Recording]:
    run = CandidateRun.__new__(CandidateRun)  # only the timing phase runs
    run.config, run.rng = EvalConfig(device=device), random.Random(0)
    run.quiet = lambda pids: contextlib.nullcontext()
    run.reference = Recording("reference", events, idle)
    run.reference.worker = run.reference
    return run, Recording("candidate", events)


def test_the_candidate_warms_up_right_before_its_first_timed_call():
    """After a pause (the reference's recalibration, the candidate stopped meanwhile) the CPU
    gives a worker the memory it freed back slowly: its warm-up comes after that pause, not
    before it. Each call's inputs are made by the reference just before it (on the CPU they are
    fed)."""
    events: list = []
    run, worker = timing_phase("cpu", events)
    with pytest.raises(Stop):
        run._time(worker, None)
    assert events == [("candidate", "stopped"), ("reference", "recalibrate at 1"), ("candidate", "resumed"),
                      ("reference", "inputs"), ("candidate", "warmup"), ("reference", "inputs"), ("candidate", "timed")]


def test_where_calls_are_batched_the_reference_is_recalibrated_at_the_candidates_batch():
    """A command's overhead is shared by its calls: where the reference's calls are timed many to
    a command, the candidate's batch is sized first (after its warm-up; here one call: its call is
    long), and the reference recalibrated at that batch before the candidate's timing. Timed one
    call to a command after all, the candidate warms up again after that pause, with one call."""
    events: list = []
    run, worker = timing_phase("cpu", events)
    run.reference.batch, run.reference.batch_cap = 64, 256
    worker.warm_ms = 50.0
    with pytest.raises(Stop):
        run._time(worker, None)
    assert events == [("reference", "inputs"), ("candidate", "warmup"),
                      ("candidate", "stopped"), ("reference", "recalibrate at 1"), ("candidate", "resumed"),
                      ("reference", "inputs"), ("candidate", "warmup"),
                      ("reference", "inputs"), ("candidate", "timed")]


class Quickening(Recording):
    """A candidate slow while its batch is sized (half a millisecond a call), quicker after the
    reference's first recalibration (10 us a call, short of the bound) and quicker still (no
    time at all) after the second; the phase stops at its first command of `stop_at` calls."""

    def __init__(self, events: list, stop_at: int):
        super().__init__("candidate", events, warm_ms=1e-6)  # it says its calls take a nanosecond
        self.stop_at = stop_at

    def request(self, command, phase):
        if command.op == "profile":
            return Reply(ok=True, profile=Profile(ops=[]))
        if command.op != "timed":
            return super().request(command, phase)
        self.events.append((self.name, f"timed {command.calls}"))
        if command.calls == self.stop_at:
            raise Stop
        recalibrations = sum(e[1].startswith("recalibrate") for e in self.events)
        time.sleep((0.0005, 0.00001, 0.0)[min(recalibrations, 2)] * command.calls)
        return Reply(ok=True, elapsed_ms=1e-6 * command.calls, outputs=[])


def test_batches_that_run_short_of_the_bound_are_timed_again_larger_then_at_the_cap():
    """Quicker in its timed calls than while its batch was sized: timed again at the batch its short
    command implies (reference recalibrated at it first); short again, at the cap."""
    events: list = []
    run, _ = timing_phase("cpu", events)
    # A cap above the protocol's (MAX_BATCH_CALLS), so that the batch its first short command
    # implies (about 1,600 calls) stays below it.
    run.reference.batch, run.reference.batch_cap = 64, 4096
    worker = Quickening(events, stop_at=4096)
    run._copy_checked_call = lambda *args: None  # nothing verified: only the batch sizes matter here
    with pytest.raises(Stop):
        run._time(worker, None)
    recalibrated = [int(e[1].rsplit(" ", 1)[1]) for e in events if e[1].startswith("recalibrate")]
    timed = [int(e[1].split()[1]) for e in events if e[1].startswith("timed ")]
    sized, resized = recalibrated[0], recalibrated[1]
    assert 1 < sized < resized < 4096 and recalibrated[2:] == [4096]
    assert timed[-1] == 4096 and sized in timed and resized in timed and set(timed) <= {1, 8, 64, sized, resized, 4096}


def test_on_a_gpu_the_reference_recalibrates_with_the_candidate_stopped_and_the_device_idle_around_it():
    """A kernel the candidate queued runs on when its processes stop: the reference waits for it
    to end, and checks after its calls that none ran meanwhile."""
    events: list = []
    run, worker = timing_phase("cuda", events, idle=[True, True])
    with pytest.raises(Stop):
        run._time(worker, None)
    wait = f"idle within {candidate_module.IDLE_WAIT_S:g} s"
    assert events[:5] == [("candidate", "stopped"), ("reference", wait), ("reference", "recalibrate at 1"),
                          ("reference", "idle within 0 s"), ("candidate", "resumed")]
    assert ("candidate", "warmup") in events[5:] and events[-1] == ("candidate", "timed")


def profile_check(idle: list[bool], device: str = "cuda") -> tuple[CandidateRun, Recording, list]:
    """A run whose reference paid 0.2 ms for the profiler when it was timed (two operators), and
    pays 2 ms now; its candidate's profiled calls are to be judged."""
    events: list = []
    run, worker = timing_phase(device, events, idle=idle)
    run.placement = candidate_module.Placement(gpu=0)
    run.reference.timed = Timed(wall_ms=[1.0] * 5, profiled_wall_ms=[1.2])
    run.reference.now = Timed(wall_ms=[1.0] * 6, profiled_wall_ms=[3.0] * 6)
    return run, worker, events


def honest_but_watched(profiled_ms: float) -> Timed:
    """Two operators, 1 ms a call, profiled calls all `profiled_ms`."""
    return Timed(wall_ms=[1.0] * 9, profiled_wall_ms=[profiled_ms] * 8,
                 profiles=[Profile(ops=["aten::empty_like", "aten::empty_strided"])] * 8)


def test_profiled_calls_slow_only_by_the_profilers_cost_at_the_references_timing_are_not_convicted():
    """The profiler's own cost moves with the machine: what it costs the reference now, measured
    with the candidate stopped (and on a GPU, the device idle around it), decides too."""
    run, worker, events = profile_check(idle=[True, True])
    assert run._profiled_too_slow(worker, honest_but_watched(5.3), 2) is None
    wait = f"idle within {candidate_module.IDLE_WAIT_S:g} s"
    assert events == [("candidate", "stopped"), ("reference", wait), ("reference", "6 profiled calls"),
                      ("reference", "idle within 0 s"), ("candidate", "resumed")]
    run, worker, events = profile_check(idle=[], device="cpu")  # no quiet window here: the API's, Ray's
    assert run._profiled_too_slow(worker, honest_but_watched(5.3), 2) is None
    assert events == [("candidate", "stopped"), ("reference", "6 profiled calls"), ("candidate", "resumed")]


def test_profiled_calls_slower_than_the_profiler_costs_now_too_are_convicted():
    run, worker, _ = profile_check(idle=[True, True])
    verdict = run._profiled_too_slow(worker, honest_but_watched(20.0), 2)
    assert verdict.status is Status.rejected and verdict.flags == [Flag.inconsistent_when_profiled]
    assert "profiled calls took at least 20 ms" in verdict.error


def test_a_gpu_busy_around_the_references_profiled_calls_is_judged_as_around_the_recalibration(holders):
    """Busy before, where only the run holds the GPU: the candidate's queued work; anyone else's:
    skipped; busy only after: not the candidate's, and the measurement stands."""
    for idle, held, status in (([False], {os.getpid(), 1}, Status.rejected),
                               ([False], {os.getpid(), 1, 4242}, Status.skipped),
                               ([True, False, True, False], {os.getpid(), 1}, None)):
        holders[0] = held
        run, worker, events = profile_check(idle=list(idle))
        verdict = run._profiled_too_slow(worker, honest_but_watched(5.3), 2)
        assert (verdict.status if verdict else None) is status and events[-1] == ("candidate", "resumed")


def test_profiled_calls_within_the_profilers_cost_ask_nothing_more_of_the_reference():
    run, worker, events = profile_check(idle=[])
    assert run._profiled_too_slow(worker, honest_but_watched(1.6), 2) is None and events == []


@pytest.fixture
def holders(monkeypatch):
    """Who the driver says holds a context on the GPU: set `held[0]`; the run's own are this
    process and pid 1 (the fakes' workers)."""
    held = [{os.getpid(), 1}]
    monkeypatch.setattr(candidate_module, "gpu_context_pids", lambda index: held[0])
    monkeypatch.setattr(candidate_module.processes, "tree", lambda pid: [pid])
    return held


def test_gpu_work_that_outlasts_the_wait_while_only_the_run_holds_the_gpu_rejects_the_candidate_untimed(holders):
    events: list = []
    run, worker = timing_phase("cuda", events, idle=[False])
    run.placement = candidate_module.Placement(gpu=0)
    verdict = run._time(worker, None)
    assert isinstance(verdict, Verdict) and verdict.status is Status.rejected
    assert verdict.flags == [Flag.busy_while_stopped] and "over 0.1 s" in verdict.error
    assert ("reference", "recalibrate at 1") not in events and events[-1] == ("candidate", "resumed")


def test_gpu_work_is_not_blamed_on_the_candidate_where_others_hold_the_gpu_or_no_one_can_tell(holders):
    for held in ({os.getpid(), 1, 4242}, None, {1}):  # an outsider; no list; a list without this process
        holders[0] = held
        events: list = []
        run, worker = timing_phase("cuda", events, idle=[False])
        run.placement = candidate_module.Placement(gpu=0)
        verdict = run._time(worker, None)
        assert verdict.status is Status.skipped and "outside this run" in verdict.error and not verdict.flags


def test_a_gpu_busy_after_the_recalibration_makes_it_count_again_and_never_blames_the_candidate(holders):
    """Work that was not there before the calls cannot be the stopped candidate's."""
    for idle, held, status in (([True, False, True, True], {os.getpid(), 1}, None),
                               ([True, False, True, False], {os.getpid(), 1}, None),
                               ([True, False, True, False], {os.getpid(), 1, 4242}, Status.skipped)):
        holders[0] = held
        events: list = []
        run, worker = timing_phase("cuda", events, idle=list(idle))
        run.placement = candidate_module.Placement(gpu=0)
        try:
            verdict = run._time(worker, None)
        except Stop:
            verdict = None
        assert events.count(("reference", "recalibrate at 1")) == 2
        assert (verdict.status if verdict else None) is status


def test_checked_outputs_are_copied_into_the_room_made_before_timing_while_it_lasts():
    spares = [[torch.zeros(4, 3)], [torch.zeros(4, 3)]]
    rooms = [spares[0][0].data_ptr(), spares[1][0].data_ptr()]
    outputs = [torch.arange(12.0).reshape(3, 4).t()]  # any layout: copied by value
    copies = [_copied(outputs, spares) for _ in range(3)]
    assert [c[0].data_ptr() for c in copies[:2]] == rooms[::-1] and not spares
    assert copies[2][0].data_ptr() not in rooms  # no room left: a fresh copy
    assert all(torch.equal(c[0], outputs[0]) for c in copies)
    outputs[0].zero_()
    assert all(c[0].sum() == 66 for c in copies)  # copies, not views


def test_outputs_that_do_not_fit_the_room_get_fresh_copies():
    spares = [[torch.zeros(4)]]
    for outputs in ([torch.ones(5)], [torch.ones(4, dtype=torch.float64)], [torch.ones(4), torch.ones(4)]):
        assert torch.equal(_copied(outputs, spares)[0], outputs[0]) and len(spares) == 1


@pytest.mark.parametrize("kind, status, deadline", [
    (CandidateKind.cpp, None, "build"),  # nobody built it ahead: its import is its build
    (CandidateKind.cpp, BuildStatus.built, "phase"),
    (CandidateKind.cpp, BuildStatus.deferred, "phase"),  # raised in the build worker: no 900 s to sleep in here
    (CandidateKind.python, None, "phase"),
])
def test_an_import_gets_the_build_timeout_only_where_it_is_the_build(kind, status, deadline):
    run = CandidateRun.__new__(CandidateRun)
    run.config = EvalConfig(device="cpu", timeout_s=30, build_timeout_s=900)
    run.candidate = Candidate(path="/c.py", rel_path="p/c.py", problem_id="p", source_hash="s", code="x",
                              code_hash="c", kind=kind)
    run.build_status = status
    assert run._load_deadline_s() == {"build": 900, "phase": 30}[deadline]


def timings_reporting(first_ms: float, second_ms: float) -> tuple[CandidateRun, list]:
    """A timing phase whose first timing reports `first_ms` a call and its second `second_ms`,
    where the parent's clock saw 2 ms a call, 0.5 ms of it the harness's overhead; and the
    timings it measured."""
    from harness.judge.reference import Recalibration
    from harness.judge.timer import timing_stats
    from harness.records import Observations

    run = CandidateRun.__new__(CandidateRun)
    run.config = EvalConfig(device="cuda")
    reference_timing = timing_stats([1.5] * 5, "cuda_event")
    run.reference = type("Reference", (), {"timing": reference_timing, "timed": Timed(wall_ms=[2.0] * 5),
                                           "floor": None, "clock": "cuda_event"})()
    run.observed = Observations(reference_timing=reference_timing)
    recalibration = Recalibration(overhead_ms=[0.5] * 5, commit_ms=[], timing=reference_timing)
    timings = [Timed(reported_ms=[first_ms] * 9, wall_ms=[2.0] * 9), Timed(reported_ms=[second_ms] * 9, wall_ms=[2.0] * 9)]
    measured: list = []

    def measure(worker, spares):
        measured.append(timings[len(measured)])
        return measured[-1], recalibration

    run._measured, run._spare_copies = measure, lambda: []
    return run, measured


def test_a_timing_the_clock_contradicts_is_measured_once_more_and_the_second_stands():
    """Scheduling can delay an honest worker's commands once; a forger is contradicted every time."""
    honest, measured = timings_reporting(1.5, 1.5)
    assert honest._time(None, Timed()) is None and len(measured) == 1 and honest.observed.flags == []
    honest_after_all, measured = timings_reporting(1e-6, 1.5)
    assert honest_after_all._time(None, Timed()) is None and len(measured) == 2
    assert Flag.timing_disagrees not in honest_after_all.observed.flags
    assert honest_after_all.observed.timing.median_ms == 1.5 and honest_after_all.observed.vouched_median_ms == 1.5
    forger, measured = timings_reporting(1e-6, 1e-6)
    assert forger._time(None, Timed()) is None and len(measured) == 2
    assert forger.observed.flags == [Flag.timing_disagrees] and forger.observed.vouched_median_ms == pytest.approx(1.5)

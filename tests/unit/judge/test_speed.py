"""A candidate's timing phase and its profiled calls, in the order they talk to the workers: the
reference recalibrated with the candidate stopped (on a GPU, the device idle around it), the
candidate warmed up right before its first timed call, batches timed again where they run short,
a timing the clock contradicts measured once more."""

import contextlib
import os
import random
from types import SimpleNamespace

import pytest
import torch

from harness.cpu.device import Cpu
from harness.judge import gpu, speed
from harness.judge.evaluation import Evaluation
from harness.judge.gpu import IDLE_WAIT_S, Gpu
from harness.judge.profiled import _profiled_slowdown
from harness.judge.reference import Recalibration
from harness.judge.speed import copied, time_candidate
from harness.judge.timing import protocol
from harness.judge.timing.stats import timing_stats
from harness.judge.timing.timed import Timed
from harness.records import EvalConfig, Observations, Status, Verdict
from harness.worker.protocol import Profile, Reply
from tests.fakes import FakeClock


class Stop(Exception):
    """Ends the phase at its first timed call: what came before is the point."""


class Recording:
    """Stands in for a worker, noting in `events` what it was asked."""

    def __init__(self, name: str, events: list, warm_ms: float | None = None):
        """`warm_ms`: its fastest warm-up call."""
        self.name, self.events, self.pid, self.gpu = name, events, 1, 0
        self.worker_pid = os.getpid()  # a live process to sample (this one) where timing samples it
        self.warm_ms = warm_ms
        self.sent = 0

    def request(self, command, phase):
        self.events.append((self.name, command.op))
        if command.op == "timed":
            raise Stop
        return Reply(ok=True, elapsed_ms=self.warm_ms if command.op == "warmup" else None)

    @contextlib.contextmanager
    def stopped_all(self, purpose):
        self.events.append((self.name, "stopped"))
        yield 0.0  # no work seen between a signal and the stop
        self.events.append((self.name, "resumed"))

    def log_head(self) -> str:
        return ""


class Reference(Recording):
    """Stands in for the reference runner: what it measured at its start (`measured`), its
    recalibration and its profiled calls now, as events."""

    def __init__(self, events: list):
        super().__init__("reference", events)
        self.worker = self
        self.budget_left = 0  # the memory budget for checked outputs
        self.output_bytes = 0  # no outputs seen: no room made for checked ones
        self.measured = SimpleNamespace(batch=1, batch_cap=1, timed=Timed(), timing=timing_stats([1.0] * 5, "cuda_device"),
                                        floor=None, profile=None)
        self.now = Timed()

    def recalibrate(self, batch):
        self.events.append((self.name, f"recalibrate at {batch}"))
        return f"recalibrated at {batch}"

    def profiled_now(self, calls):
        self.events.append((self.name, f"{calls} profiled calls"))
        return self.now

    def paired_command(self):
        self.events.append((self.name, "paired command"))
        return 2.0

    def output_like(self):
        return []


@pytest.fixture
def idle(monkeypatch):
    """The reference's answers to idle checks, in order (set `idle[:]`), recorded as events."""
    answers: list = []

    def idle_within(reference, wait_s):
        reference.events.append((reference.name, f"idle within {wait_s:g} s"))
        return answers.pop(0)

    monkeypatch.setattr(gpu, "idle_within", idle_within)
    return answers


def timing_phase(device: str, events: list, worker: Recording | None = None) -> Evaluation:
    """The evaluation of a candidate at its timing phase, on `device`."""
    config = EvalConfig(device=device)
    kind = Cpu() if device == "cpu" else Gpu()
    return Evaluation(problem=SimpleNamespace(atol=None, rtol=None), candidate=None, config=config, device=kind,
                      reference=Reference(events), worker=worker or Recording("candidate", events),
                      observed=Observations(), candidate_text="", rng=random.Random(0))


def test_the_candidate_warms_up_right_before_its_first_timed_call():
    """After a pause (the reference's recalibration, the candidate stopped meanwhile) the CPU
    gives a worker the memory it freed back slowly: its warm-up comes after that pause, not
    before it. Each call's inputs are made by the reference just before it (on the CPU they are
    fed)."""
    events: list = []
    with pytest.raises(Stop):
        time_candidate(timing_phase("cpu", events))
    assert events == [("candidate", "stopped"), ("reference", "recalibrate at 1"), ("candidate", "resumed"),
                      ("reference", "inputs"), ("candidate", "warmup"), ("reference", "inputs"), ("candidate", "timed")]


def test_where_calls_are_batched_the_reference_is_recalibrated_at_the_candidates_batch():
    """A command's overhead is shared by its calls: where the reference's calls are timed many to
    a command, the candidate's batch is sized first (after its warm-up; here one call: its call is
    long), and the reference recalibrated at that batch before the candidate's timing. Timed one
    call to a command after all, the candidate warms up again after that pause, with one call."""
    events: list = []
    ev = timing_phase("cpu", events, Recording("candidate", events, warm_ms=50.0))
    ev.reference.measured.batch, ev.reference.measured.batch_cap = 64, 256
    with pytest.raises(Stop):
        time_candidate(ev)
    assert events == [("reference", "inputs"), ("candidate", "warmup"),
                      ("candidate", "stopped"), ("reference", "recalibrate at 1"), ("candidate", "resumed"),
                      ("reference", "inputs"), ("candidate", "warmup"),
                      ("reference", "inputs"), ("candidate", "timed")]


class Quickening(Recording):
    """A candidate slow while its batch is sized (half a millisecond a call), quicker after the
    reference's first recalibration (10 us a call, short of the bound) and quicker still (no
    time at all) after the second; the phase stops at its first command of `stop_at` calls."""

    def __init__(self, events: list, stop_at: int, clock: FakeClock):
        super().__init__("candidate", events, warm_ms=1e-6)  # it says its calls take a nanosecond
        self.stop_at, self.clock = stop_at, clock

    def request(self, command, phase):
        if command.op == "profile":
            return Reply(ok=True, profile=Profile(ops=[]))
        if command.op != "timed":
            return super().request(command, phase)
        self.events.append((self.name, f"timed {command.calls}"))
        if command.calls == self.stop_at:
            raise Stop
        recalibrations = sum(e[1].startswith("recalibrate") for e in self.events)
        self.clock.now += (0.0005, 0.00001, 0.0)[min(recalibrations, 2)] * command.calls
        return Reply(ok=True, elapsed_ms=1e-6 * command.calls, outputs=[])


def test_batches_that_run_short_of_the_bound_are_timed_again_larger_then_at_the_cap(monkeypatch):
    """Quicker in its timed calls than while its batch was sized: timed again at the batch its short
    command implies (reference recalibrated at it first); short again, at the cap."""
    events: list = []
    ev = timing_phase("cpu", events, Quickening(events, stop_at=4096, clock=FakeClock().patch(monkeypatch, protocol)))
    # A cap above the protocol's (MAX_BATCH_CALLS), so that the batch its first short command
    # implies (about 1,600 calls) stays below it.
    ev.reference.measured.batch, ev.reference.measured.batch_cap = 64, 4096
    monkeypatch.setattr(speed, "_copy_checked_calls", lambda *args: None)  # nothing verified: only the sizes matter
    with pytest.raises(Stop):
        time_candidate(ev)
    recalibrated = [int(e[1].rsplit(" ", 1)[1]) for e in events if e[1].startswith("recalibrate")]
    timed = [int(e[1].split()[1]) for e in events if e[1].startswith("timed ")]
    sized, resized = recalibrated[0], recalibrated[1]
    assert 1 < sized < resized < 4096 and recalibrated[2:] == [4096]
    assert timed[-1] == 4096 and sized in timed and resized in timed and set(timed) <= {1, 8, 64, sized, resized, 4096}


def test_on_a_gpu_the_reference_recalibrates_with_the_candidate_stopped_and_the_device_idle_around_it(idle):
    """A kernel the candidate queued runs on when its processes stop: the reference waits for it
    to end, and checks after its calls that none ran meanwhile."""
    events: list = []
    idle[:] = [True, True]
    with pytest.raises(Stop):
        time_candidate(timing_phase("cuda", events))
    wait = f"idle within {IDLE_WAIT_S:g} s"
    assert events[:5] == [("candidate", "stopped"), ("reference", wait), ("reference", "recalibrate at 1"),
                          ("reference", "idle within 0 s"), ("candidate", "resumed")]
    assert ("candidate", "warmup") in events[5:] and events[-1] == ("candidate", "timed")


def profile_check(device: str = "cuda") -> tuple[Evaluation, list]:
    """An evaluation whose reference paid 0.2 ms for the profiler when it was timed (two
    operators), and pays 2 ms now; its candidate's profiled calls are to be judged."""
    events: list = []
    ev = timing_phase(device, events)
    ev.reference.measured.timed = Timed(wall_ms=[1.0] * 5, profiled_wall_ms=[1.2])
    ev.reference.measured.profile = Profile(ops=["aten::relu", "aten::clamp_min"])
    ev.reference.now = Timed(wall_ms=[1.0] * 6, profiled_wall_ms=[3.0] * 6)
    return ev, events


def honest_but_watched(profiled_ms: float) -> Timed:
    """Two operators, 1 ms a call, profiled calls all `profiled_ms`."""
    return Timed(wall_ms=[1.0] * 9, profiled_wall_ms=[profiled_ms] * 8,
                 profiles=[Profile(ops=["aten::empty_like", "aten::empty_strided"])] * 8)


def test_profiled_calls_slow_only_by_the_profilers_cost_at_the_references_timing_are_not_convicted(idle):
    """The profiler's own cost moves with the machine: what it costs the reference now, measured
    with the candidate stopped (and on a GPU, the device idle around it), decides too."""
    idle[:] = [True, True]
    ev, events = profile_check()
    assert _profiled_slowdown(ev, honest_but_watched(5.3)) is None
    wait = f"idle within {IDLE_WAIT_S:g} s"
    assert events == [("candidate", "stopped"), ("reference", wait), ("reference", "6 profiled calls"),
                      ("reference", "idle within 0 s"), ("candidate", "resumed")]
    ev, events = profile_check(device="cpu")  # no quiet window here: the API's, Ray's
    assert _profiled_slowdown(ev, honest_but_watched(5.3)) is None
    assert events == [("candidate", "stopped"), ("reference", "6 profiled calls"), ("candidate", "resumed")]


def test_profiled_calls_slower_than_the_profiler_costs_now_too_are_convicted(idle):
    idle[:] = [True, True]
    ev, _ = profile_check()
    verdict = _profiled_slowdown(ev, honest_but_watched(20.0))
    assert verdict.status is Status.rejected and verdict.flags == ["inconsistent_when_profiled"]
    assert "profiled calls took at least 20 ms" in verdict.error


def test_a_gpu_busy_around_the_references_profiled_calls_is_judged_as_around_the_recalibration(idle, holders):
    """Busy before, where only the run holds the GPU: the candidate's queued work; anyone else's:
    skipped; busy only after: not the candidate's, and the measurement stands."""
    for answers, held, status in (([False], {os.getpid(), 1}, Status.rejected),
                                  ([False], {os.getpid(), 1, 4242}, Status.skipped),
                                  ([True, False, True, False], {os.getpid(), 1}, None)):
        holders[0], idle[:] = held, answers
        ev, events = profile_check()
        verdict = _profiled_slowdown(ev, honest_but_watched(5.3))
        assert (verdict.status if verdict else None) is status and events[-1] == ("candidate", "resumed")


def test_profiled_calls_within_the_profilers_cost_ask_nothing_more_of_the_reference():
    ev, events = profile_check()
    assert _profiled_slowdown(ev, honest_but_watched(1.6)) is None and events == []


@pytest.fixture
def holders(monkeypatch):
    """Who the driver says holds a context on the GPU: set `held[0]`; the run's own are this
    process and pid 1 (the fakes' workers)."""
    held = [{os.getpid(), 1}]
    monkeypatch.setattr(gpu, "gpu_context_pids", lambda index: held[0])
    monkeypatch.setattr(gpu.processes, "tree", lambda pid: [pid])
    return held


def test_gpu_work_that_outlasts_the_wait_while_only_the_run_holds_the_gpu_rejects_the_candidate_untimed(idle, holders):
    events: list = []
    idle[:] = [False]
    verdict, _ = time_candidate(timing_phase("cuda", events))
    assert isinstance(verdict, Verdict) and verdict.status is Status.rejected
    assert verdict.flags == ["busy_while_stopped"] and "over 0.1 s" in verdict.error
    assert ("reference", "recalibrate at 1") not in events and events[-1] == ("candidate", "resumed")


def test_gpu_work_is_not_blamed_on_the_candidate_where_others_hold_the_gpu_or_no_one_can_tell(idle, holders):
    for held in ({os.getpid(), 1, 4242}, None, {1}):  # an outsider; no list; a list without this process
        holders[0], idle[:] = held, [False]
        verdict, _ = time_candidate(timing_phase("cuda", []))
        assert verdict.status is Status.skipped and "outside this run" in verdict.error and not verdict.flags


def test_a_gpu_busy_after_the_recalibration_makes_it_count_again_and_never_blames_the_candidate(idle, holders):
    """Work that was not there before the calls cannot be the stopped candidate's."""
    for answers, held, status in (([True, False, True, True], {os.getpid(), 1}, None),
                                  ([True, False, True, False], {os.getpid(), 1}, None),
                                  ([True, False, True, False], {os.getpid(), 1, 4242}, Status.skipped)):
        holders[0], idle[:] = held, answers
        events: list = []
        try:
            verdict, _ = time_candidate(timing_phase("cuda", events))
        except Stop:
            verdict = None
        assert events.count(("reference", "recalibrate at 1")) == 2
        assert (verdict.status if verdict else None) is status


def test_checked_outputs_are_copied_into_the_room_made_before_timing_while_it_lasts():
    spares = [[torch.zeros(4, 3)], [torch.zeros(4, 3)]]
    rooms = [spares[0][0].data_ptr(), spares[1][0].data_ptr()]
    outputs = [torch.arange(12.0).reshape(3, 4).t()]  # any layout: copied by value
    copies = [copied(outputs, spares) for _ in range(3)]
    assert [c[0].data_ptr() for c in copies[:2]] == rooms[::-1] and not spares
    assert copies[2][0].data_ptr() not in rooms  # no room left: a fresh copy
    assert all(torch.equal(c[0], outputs[0]) for c in copies)
    outputs[0].zero_()
    assert all(c[0].sum() == 66 for c in copies)  # copies, not views


def test_outputs_that_do_not_fit_the_room_get_fresh_copies():
    spares = [[torch.zeros(4)]]
    for outputs in ([torch.ones(5)], [torch.ones(4, dtype=torch.float64)], [torch.ones(4), torch.ones(4)]):
        assert torch.equal(copied(outputs, spares)[0], outputs[0]) and len(spares) == 1


def timings_reporting(monkeypatch, first_ms: float, second_ms: float) -> tuple[Evaluation, list]:
    """A timing phase whose first timing reports `first_ms` a call and its second `second_ms`,
    where the parent's clock saw 2 ms a call, 0.5 ms of it the harness's overhead; and the
    timings it measured."""
    ev = timing_phase("cuda", [])
    reference_timing = timing_stats([1.5] * 5, "cuda_device")
    ev.reference.measured.timing, ev.reference.measured.timed = reference_timing, Timed(wall_ms=[2.0] * 5)
    recalibration = Recalibration(overhead_ms=[0.5] * 5, commit_ms=[], timing=reference_timing)
    timings = [Timed(reported_ms=[first_ms] * 9, wall_ms=[2.0] * 9), Timed(reported_ms=[second_ms] * 9, wall_ms=[2.0] * 9)]
    measured: list = []

    def measure(ev, spares):
        measured.append(timings[len(measured)])
        return measured[-1], recalibration

    monkeypatch.setattr(speed, "_measured", measure)
    return ev, measured


def test_a_timing_the_clock_contradicts_is_measured_once_more_and_the_second_stands(monkeypatch):
    """Scheduling can delay an honest worker's commands once; a forger is contradicted every time."""
    honest, measured = timings_reporting(monkeypatch, 1.5, 1.5)
    assert time_candidate(honest)[0] is None and len(measured) == 1 and honest.observed.flags == []
    honest_after_all, measured = timings_reporting(monkeypatch, 1e-6, 1.5)
    assert time_candidate(honest_after_all)[0] is None and len(measured) == 2
    assert "timing_disagrees" not in honest_after_all.observed.flags
    assert honest_after_all.observed.timing.median_ms == 1.5 and honest_after_all.observed.vouched_median_ms == 1.5
    forger, measured = timings_reporting(monkeypatch, 1e-6, 1e-6)
    assert time_candidate(forger)[0] is None and len(measured) == 2
    assert forger.observed.flags == ["timing_disagrees"] and forger.observed.vouched_median_ms == pytest.approx(1.5)


def test_on_a_gpu_each_timed_command_is_paired_with_a_reference_command_made_with_the_candidate_stopped(idle):
    """The device idle around it too, as around a recalibration; a CPU timing pairs nothing."""
    events: list = []
    idle[:] = [True, True]
    assert speed.timer(timing_phase("cuda", events), 1).pair() == 2.0
    assert events == [("candidate", "stopped"), ("reference", f"idle within {IDLE_WAIT_S:g} s"),
                      ("reference", "paired command"), ("reference", "idle within 0 s"), ("candidate", "resumed")]
    assert speed.timer(timing_phase("cpu", []), 1).pair is None


def test_a_paired_timing_records_the_references_side_as_the_timing_its_speedup_is_against(monkeypatch):
    ev, measured = timings_reporting(monkeypatch, 1.5, 1.5)
    measured_timing = speed._measured

    def paired(ev, spares):
        timed, recalibration = measured_timing(ev, spares)
        timed.paired_ms = [3.0] * len(timed.reported_ms)
        return timed, recalibration
    monkeypatch.setattr(speed, "_measured", paired)
    assert time_candidate(ev)[0] is None
    assert ev.observed.reference_paired_timing.samples_ms == [3.0] * 9
    assert ev.observed.reference_paired_timing.calls_per_sample == ev.reference.measured.batch

"""A lane's references started ahead: kept by problem until their first candidate, never more
than the device allows, a failed start remembered as the problem's, all closed with the lane; on
a GPU, spares booted ready to load one instead. A harness error while judging a candidate is that
candidate's verdict, and the lane goes on."""

from types import SimpleNamespace

import pytest

from harness.builds.cache import BuildCache
from harness.cpu.device import Cpu
from harness.judge.reference import ReferenceFailed
from harness.records import Candidate, EvalConfig, Problem, Status
from harness.schedule import lane as lane_module
from harness.schedule.lane import MAX_HARNESS_FAILURES, Lane
from harness.worker.pace import RunStopped
from harness.worker.parent import ConfinementFailed, Placement
from harness.worker.sandbox import SandboxMode, SandboxPolicy, default_limits
from tests.unit.builds.test_cache import TOOLCHAIN


class FakeReference:
    """What a lane asks of a reference runner, without a worker: `broken` problems fail to start."""

    broken: set[str] = set()
    closed: list[str] = []

    def __init__(self, problem, *args, **kwargs):
        self.problem, self.peaks = problem, None
        self.measured = SimpleNamespace(timing=None, default_math_timing=None)

    def start(self) -> None:
        if self.problem.id in self.broken:
            raise ReferenceFailed("reference load failed: NameError: nope")

    def close(self) -> None:
        self.closed.append(self.problem.id)


@pytest.fixture
def fake_references(monkeypatch):
    monkeypatch.setattr(FakeReference, "broken", {"broken"})
    monkeypatch.setattr(FakeReference, "closed", [])
    monkeypatch.setattr(lane_module, "ReferenceRunner", FakeReference)
    return FakeReference


def problem(name: str) -> Problem:
    return Problem(id=name, path=f"{name}.py", source_hash=name * 4)


def make_lane(tmp_path, device: str, failures: dict) -> Lane:
    return Lane(EvalConfig(device=device), "run", Placement(), BuildCache(tmp_path, TOOLCHAIN), failures)


def test_references_started_ahead_are_kept_by_problem_and_closed_with_the_lane(tmp_path, fake_references):
    failures: dict[str, str] = {}
    with make_lane(tmp_path, "cpu", failures) as lane:
        lane.prepare(problem("relu"))
        lane.prepare(problem("relu"))  # held already: not started twice
        lane.prepare(problem("broken"))
        assert lane.references_held == {"relu"}
        assert failures == {"broken": "not judged: the reference load failed: NameError: nope"}
        assert fake_references.closed == ["broken"]
    assert sorted(fake_references.closed) == ["broken", "relu"]


def test_no_more_are_started_ahead_than_the_device_allows(tmp_path, fake_references):
    with make_lane(tmp_path, "cpu", {}) as lane:
        for index in range(Cpu.prepared_references):
            assert lane.can_prepare
            lane.prepare(problem(f"p{index}"))
        assert not lane.can_prepare
    with make_lane(tmp_path, "cuda", {}) as lane:
        assert not lane.can_prepare  # each would hold GPU memory beside the one in use


class FakeWorker:
    """A booted worker, without a process: what it was booted for."""

    def __init__(self, placement, *, role, warm_ahead=False, **kwargs):
        self.role, self.warm_ahead = role, warm_ahead
        self.dead = self.discarded = False

    def exited(self) -> bool:
        return self.dead

    def close(self) -> None:
        self.discarded = True


@pytest.mark.parametrize("device, ready", [("cuda", True), ("cpu", False)])
def test_on_a_gpu_every_spare_boots_ready_to_load_a_reference_or_launch_triton(tmp_path, fake_references, monkeypatch, device, ready):
    """On a GPU whichever spare a reference (or a Triton candidate) takes has readied what loading
    one needs as it booted; on the CPU (references started ahead, spares booting on the timed cores) none has."""
    monkeypatch.setattr(lane_module, "Worker", FakeWorker)
    namespaced = Placement(sandbox=SandboxPolicy(mode=SandboxMode.auto, namespaces=True, limits=default_limits()))
    with Lane(EvalConfig(device=device), "run", namespaced, BuildCache(tmp_path, TOOLCHAIN), {}, spares=2) as lane:
        taken = lane._worker()
        assert [w.warm_ahead for w in [taken, *lane.spares]] == [ready] * 3


def test_a_lane_boots_its_spares_as_it_opens_and_readies_its_comparison_while_they_boot(tmp_path, monkeypatch):
    """The comparison kernel's load in the parent (1 s on an H100) overlaps the first workers' boot
    instead of coming before it; the first reference then takes a spare already booting."""
    monkeypatch.setattr(lane_module, "Worker", FakeWorker)
    namespaced = Placement(sandbox=SandboxPolicy(mode=SandboxMode.auto, namespaces=True, limits=default_limits()))
    lane = Lane(EvalConfig(device="cuda"), "run", namespaced, BuildCache(tmp_path, TOOLCHAIN), {}, spares=2)
    booted_when_warmed = []
    monkeypatch.setattr(lane.fused, "warm", lambda: booted_when_warmed.append(list(lane.spares)))
    with lane:
        assert len(booted_when_warmed) == 1 and len(booted_when_warmed[0]) == 2
        taken, left = booted_when_warmed[0]
        assert lane._worker() is taken and len(lane.spares) == 2
    assert left.discarded and not taken.discarded  # the one taken is its user's to close


def test_a_lane_whose_spares_cannot_boot_closes_those_that_did(tmp_path, monkeypatch):
    """A stopping run refuses boots: the lane does not open, and leaves no worker behind."""
    booted = []

    class RefusedAfterOne(FakeWorker):
        def __init__(self, *args, **kwargs):
            if booted:
                raise RunStopped()
            super().__init__(*args, **kwargs)
            booted.append(self)

    monkeypatch.setattr(lane_module, "Worker", RefusedAfterOne)
    namespaced = Placement(sandbox=SandboxPolicy(mode=SandboxMode.auto, namespaces=True, limits=default_limits()))
    with pytest.raises(RunStopped):
        with Lane(EvalConfig(device="cuda"), "run", namespaced, BuildCache(tmp_path, TOOLCHAIN), {}, spares=2):
            pass
    assert len(booted) == 1 and booted[0].discarded


def test_a_spare_that_died_booting_is_discarded_and_never_given_a_candidate(tmp_path, monkeypatch):
    monkeypatch.setattr(lane_module, "Worker", FakeWorker)
    namespaced = Placement(sandbox=SandboxPolicy(mode=SandboxMode.auto, namespaces=True, limits=default_limits()))
    with Lane(EvalConfig(device="cuda"), "run", namespaced, BuildCache(tmp_path, TOOLCHAIN), {}, spares=2) as lane:
        first = lane._worker()
        lane.spares[0].dead = True
        dead = lane.spares[0]
        second = lane._worker()
        assert not second.dead and second is not dead and dead.discarded and len(lane.spares) == 2
        assert first is not second and not first.discarded


def test_a_harness_error_while_judging_is_that_candidates_crash_and_the_lane_goes_on(tmp_path, fake_references,
                                                                                   monkeypatch):
    """A candidate that brings out a harness bug (once: a feed file it sealed made the parent's
    write raise) gets a one-line verdict saying so; the run is not stopped by it."""
    def raises(run):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(lane_module.CandidateRun, "run", raises)
    candidate = Candidate(path=str(tmp_path / "c.py"), rel_path="relu/c.py", problem_id="relu", source_hash="s",
                          code="pass", code_hash="c")
    with make_lane(tmp_path, "cpu", {}) as lane:
        for _ in range(MAX_HARNESS_FAILURES - 1):  # and again: the lane goes on, with a reference started afresh
            result = lane.judge(problem("relu"), candidate, tmp_path / "key", None)
            assert result.status is Status.crash and "\n" not in result.error
            assert "harness bug" in result.error and "Operation not permitted" in result.error
            assert any("PermissionError" in line for line in result.evidence)
        assert fake_references.closed == ["relu"] * (MAX_HARNESS_FAILURES - 1)
        with pytest.raises(PermissionError):  # one after another, every time: the harness cannot go on
            lane.judge(problem("relu"), candidate, tmp_path / "key", None)


def test_a_sandbox_that_cannot_be_applied_still_stops_the_run(tmp_path, fake_references, monkeypatch):
    def unconfined(run):
        raise ConfinementFailed("a candidate worker could not be confined: landlock_create_ruleset: ENOSYS")

    monkeypatch.setattr(lane_module.CandidateRun, "run", unconfined)
    candidate = Candidate(path=str(tmp_path / "c.py"), rel_path="relu/c.py", problem_id="relu", source_hash="s",
                          code="pass", code_hash="c")
    with make_lane(tmp_path, "cpu", {}) as lane, pytest.raises(ConfinementFailed):
        lane.judge(problem("relu"), candidate, tmp_path / "key", None)

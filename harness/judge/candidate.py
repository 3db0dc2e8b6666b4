"""Evaluate one candidate against its problem's reference.

Per problem, one reference worker (trusted code, still confined) computes expected outputs and
reference timings (judge/reference.py); per candidate, one candidate worker. They never time at
the same time. The evaluation goes forward through its phases, each handed the Evaluation
(evaluation.py) and each observing: correctness (correctness.py), timing (speed.py), the profiled
calls (profiled.py), the other sizes (correctness.py). What the observations mean is decided in
judge/verdicts.py, the checks' findings included (judge/checking.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from ..builds.cache import BuildOutcome, key_lock
from ..records import Candidate, EvalConfig, Observations, Phase, Problem, Result, Status, Subject, Verdict
from ..worker.parent import Placement, Worker, WorkerStopped
from ..worker.protocol import Reply
from . import verdicts
from .checking import Loaded, Moment
from .compare import FusedComparison
from .correctness import check_other_shapes, check_trials
from .device import Device
from .evaluation import Evaluation
from .profiled import check_profiles
from .reference import ReferenceRunner, worker_job
from .speed import time_candidate

LOG_TAIL_CHARS = 4000


def candidate_text(candidate: Candidate) -> str:
    """The file as found (a transcript too), so compiler lines map to lines a person can open."""
    try:
        return Path(candidate.path).read_text(errors="replace")
    except OSError:
        return candidate.code or ""


def judged_by_build(subject: Subject, candidate: Candidate, config: EvalConfig, outcome: BuildOutcome,
                    placement: Placement = Placement()) -> Result | None:
    """The Result when the build ahead of evaluation already decides it, else None."""
    verdict = verdicts.of_build(outcome, config.device, candidate_text(candidate))
    if verdict is None:
        return None
    observed = Observations(phase=Phase.load, gpu=placement.gpu, build_s=round(outcome.seconds, 3),
                            build_cached=outcome.cached, protections=outcome.protections)
    return verdicts.result(subject, verdict, observed)


class CandidateRun:
    """One candidate's evaluation; produces exactly one Result."""

    def __init__(self, problem: Problem, candidate: Candidate, config: EvalConfig, device: Device, key_dir: Path,
                 reference: ReferenceRunner, run_id: str, placement: Placement = Placement(),
                 build: BuildOutcome | None = None, worker: Worker | None = None, later_of_problem: bool = True,
                 fused: FusedComparison | None = None):
        """`worker`: one booted ahead (a lane's spare), or None to boot one (paced by the device's
        pace). `later_of_problem`: whether candidates of the same problem may follow on this
        reference, which then keeps the expected outputs of its trials for them. `fused`: the
        lane's GPU comparison, None to compare in chunks."""
        self.problem, self.candidate, self.config, self.device, self.reference = problem, candidate, config, device, reference
        self.keep_expected, self.fused = later_of_problem, fused
        self.build_status = build.status if build is not None else None  # of its build ahead, if it had one
        self.key_dir, self.placement, self.worker = key_dir, placement, worker
        self.subject = Subject.of(run_id, candidate, problem)
        self.observed = Observations(reference_timing=reference.measured.timing, gpu=placement.gpu,
                                     reference_default_math_timing=reference.measured.default_math_timing,
                                     build_s=round(build.seconds, 3) if build else None,
                                     build_cached=build.cached if build else False)

    def run(self) -> Result:
        """The Result; raises ReferenceFailed when the reference worker dies meanwhile."""
        began = time.monotonic()
        with self._phase(Phase.load):
            worker, loaded = self._start()
        self.observed.protections = worker.protections
        with worker:
            try:
                if isinstance(loaded, WorkerStopped):
                    raise loaded
                verdict = self._evaluate(worker, loaded)
            except WorkerStopped as stopped:
                verdict = verdicts.of_stop(stopped.stop)
            if verdict.status is not Status.ok:
                self.observed.log_tail = worker.log_tail(LOG_TAIL_CHARS) or None
            exiting = time.monotonic()
            if worker.compiled_triton:
                with key_lock(self.key_dir):
                    worker.keep_triton_cache(self.key_dir)
        self.device.release_cache()  # its timed outputs' copies, freed by now
        self.observed.phase_s["exit"] = round(time.monotonic() - exiting, 3)
        self.observed.elapsed_s = round(time.monotonic() - began, 3)
        return verdicts.result(self.subject, verdict, self.observed)

    @contextlib.contextmanager
    def _phase(self, phase: Phase):
        """Enter `phase`, and record its wall time however it ends."""
        self.observed.phase = phase
        began = time.monotonic()
        try:
            yield
        finally:
            self.observed.phase_s[phase.value] = round(time.monotonic() - began, 3)

    def reference_died(self, reason: str) -> Result:
        """The reference worker died while this candidate ran (its evaluation was cut short)."""
        return verdicts.result(self.subject, verdicts.reference_died(reason), self.observed)

    def harness_failed(self, trace: str) -> Result:
        """The harness raised while judging this candidate (`trace`, the traceback)."""
        return verdicts.result(self.subject, verdicts.harness_failed(trace), self.observed)

    def _start(self) -> tuple[Worker, Reply | WorkerStopped]:
        """Give the worker its job and wait for its import (which compiles, or finds the build up
        to date) under the key's lock, so no other run builds in that dir meanwhile."""
        with key_lock(self.key_dir), contextlib.ExitStack() as unless_started:
            worker = self.worker or Worker(self.placement, role="candidate", device=self.config.device,
                                           timeout_s=self.config.timeout_s, key_dir=self.key_dir, pace=self.device.pace)
            unless_started.enter_context(worker)  # closed here if handing it its job raises
            worker.start(worker_job("candidate", self.problem, self.config), self.candidate.code, self.problem.source,
                         self.key_dir)
            try:
                loaded: Reply | WorkerStopped = worker.reply("load and build", self._load_deadline_s())
            except WorkerStopped as stopped:
                loaded = stopped
            unless_started.pop_all()  # run() closes it from here on
            return worker, loaded

    def _load_deadline_s(self) -> float:
        """--build-timeout only where its import is its build (an extension nobody tried to build
        ahead); otherwise a phase's --timeout, a build ahead that was deferred included (its
        import raised in the build worker): a candidate that slept at import once held its lane
        for the whole build timeout, and one that raises in the build worker and sleeps here
        would again. An import that compiles after all has --timeout for it (300 s by default)."""
        compiles = self.candidate.kind.built_ahead and self.build_status is None
        return self.config.build_timeout_s if compiles else self.config.timeout_s

    def _evaluate(self, worker: Worker, loaded: Reply) -> Verdict:
        ev = Evaluation(self.problem, self.candidate, self.config, self.device, self.reference, worker, self.observed,
                        candidate_text(self.candidate), self.keep_expected, self.fused)
        if verdict := ev.verdict_of(loaded) or ev.decide(Moment.loaded, Loaded(self.reference.measured.params,
                                                                                loaded.params or [])):
            return verdict
        timed = None

        def timing() -> Verdict | None:
            nonlocal timed
            verdict, timed = time_candidate(ev)
            return verdict

        steps: tuple[tuple[Phase, Callable[[], Verdict | None]], ...] = (
            (Phase.correctness, lambda: check_trials(ev)), (Phase.timing, timing),
            (Phase.profile, lambda: check_profiles(ev, timed)), (Phase.shapes, lambda: check_other_shapes(ev)))
        for phase, step in steps:
            with self._phase(phase):
                verdict = step()
            if verdict:
                return verdict
        self.observed.phase = None
        return verdicts.passed()

"""Evaluate one candidate against its problem's reference.

Per problem, one reference worker (trusted code, still isolated) computes expected outputs and
reference timings; per candidate, one candidate worker. They never compute at the same time:
for each trial the reference runs first, then the candidate, and the parent compares the two
outputs in place. Nothing that decides correctness is computed in the candidate's process.
Each step observes; judge/verdicts.py says what the observation means.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..builds.cache import BuildOutcome, key_lock
from ..records import (Candidate, EvalConfig, Flag, Observations, Phase, Problem, Result, Status, Subject, Verdict)
from ..worker.parent import Placement, Worker, WorkerStopped
from ..worker.protocol import Command, ParamDigest, Reply
from . import verdicts
from .compare import compare_outputs
from .integrity import fallback_evidence, mutated_inputs
from .reference import ReferenceRunner, timed_request, worker_job

LOG_TAIL_CHARS = 4000
TRIAL_SEED_OFFSET = 1000  # trial inputs use seeds apart from the init seed
WALL_SLACK_MS = 0.05  # per call: jitter between the parent's clock and a worker's
WALL_FIXED_MS = 50.0  # per timing command: message round trips and one-time lazy initialisation


def wall_floor_ms(wall_ms_per_call: float, trials: int, overhead_ms: float) -> float:
    """Least time per call the parent's clock allows a worker to claim: the wall time per call,
    less a fixed allowance per command, the harness's per-call overhead and some slack."""
    return wall_ms_per_call - WALL_FIXED_MS / trials - 1.5 * overhead_ms - WALL_SLACK_MS


def init_differs(reference: list[ParamDigest], candidate: list[ParamDigest]) -> bool:
    """Same parameter shapes in the same order, different values after the same seed."""
    same_layout = [p.shape for p in reference] == [p.shape for p in candidate] and bool(reference)
    return same_layout and any(r.sha256 != c.sha256 for r, c in zip(reference, candidate))


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

    def __init__(self, problem: Problem, candidate: Candidate, config: EvalConfig, key_dir: Path,
                 reference: ReferenceRunner, run_id: str, placement: Placement = Placement(),
                 build: BuildOutcome | None = None):
        self.problem, self.candidate, self.config, self.reference = problem, candidate, config, reference
        self.key_dir, self.placement = key_dir, placement
        self.subject = Subject.of(run_id, candidate, problem)
        self.observed = Observations(reference_timing=reference.timing, gpu=placement.gpu,
                                     build_s=round(build.seconds, 3) if build else None,
                                     build_cached=build.cached if build else False)

    def run(self) -> Result:
        """The Result; raises ReferenceFailed when the reference worker dies meanwhile."""
        began = time.monotonic()
        self.observed.phase = Phase.load
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
        self.observed.elapsed_s = round(time.monotonic() - began, 3)
        return verdicts.result(self.subject, verdict, self.observed)

    def reference_died(self, reason: str) -> Result:
        """The reference worker died while this candidate ran (its evaluation was cut short)."""
        return verdicts.result(self.subject, verdicts.reference_died(reason), self.observed)

    def _start(self) -> tuple[Worker, Reply | WorkerStopped]:
        """Start the worker and wait for its import (which compiles, or finds the build up to
        date) under the key's lock, so no other run builds in that dir meanwhile."""
        with key_lock(self.key_dir):
            worker = Worker(worker_job("candidate", self.problem, self.config), self.candidate.code, self.key_dir,
                            self.config.timeout_s, self.problem.source, self.placement)
            try:
                return worker, worker.reply("load and build", self.config.build_timeout_s)
            except WorkerStopped as stopped:
                return worker, stopped

    def _verdict_of(self, reply: Reply, worker: Worker) -> Verdict | None:
        if reply.ok:
            return None
        return verdicts.of_reply(reply, worker.log_head(), self.config.device, candidate_text(self.candidate))

    def _evaluate(self, worker: Worker, loaded: Reply) -> Verdict:
        verdict = self._verdict_of(loaded, worker)
        if verdict:
            return verdict
        if init_differs(self.reference.params, loaded.params or []):
            self.observed.note(Flag.init_differs)
        for phase, step in ((Phase.correctness, self._check_trials), (Phase.timing, self._time),
                            (Phase.profile, self._check_no_fallback), (Phase.shapes, self._check_other_shapes)):
            self.observed.phase = phase
            verdict = step(worker)
            if verdict:
                return verdict
        self.observed.phase = None
        return verdicts.passed()

    def _note_threads(self, reply: Reply) -> None:
        if reply.threads_alive:
            self.observed.note(Flag.threads_left_running)

    def _compare(self, worker: Worker, command: Command, trial: int) -> Verdict | None:
        """Reference first (idle while the candidate runs), then the candidate; compare in place."""
        expected, expected_inputs = self.reference.outputs(command)
        reply = worker.request(command, "correctness")
        verdict = self._verdict_of(reply, worker)
        if verdict:
            return verdict
        self._note_threads(reply)
        actual = worker.open_outputs(reply.outputs or [], "correctness")
        actual_inputs = worker.open_outputs(reply.inputs or [], "correctness")
        changed = mutated_inputs(expected_inputs, actual_inputs)
        check = compare_outputs(expected, actual, self.config.tolerance_for(self.problem))
        del expected, actual, expected_inputs, actual_inputs  # drop IPC mappings before the workers release memory
        if not changed:
            self.observed.max_abs_err = max(self.observed.max_abs_err or 0.0, check.max_abs_err or 0.0)
            self.observed.max_rel_err = max(self.observed.max_rel_err or 0.0, check.max_rel_err or 0.0)
        return verdicts.of_trial(check, changed, trial, self.config.correctness_trials,
                                 Flag.init_differs in self.observed.flags)

    def _check_trials(self, worker: Worker) -> Verdict | None:
        for trial in range(self.config.correctness_trials):
            # Fresh input values every trial: a stale buffer or a cached answer cannot pass twice.
            command = Command(op="trial", seed=self.config.seed + TRIAL_SEED_OFFSET + trial)
            verdict = self._compare(worker, command, trial)
            if verdict:
                return verdict
            self.observed.trials_passed = trial + 1
        return None

    def _time(self, worker: Worker) -> Verdict | None:
        timed, wall_ms = timed_request(worker, self.config.seed, self.config.trials, "timing")
        verdict = self._verdict_of(timed, worker) or self._check_timed_samples(worker, timed.sampled or [])
        if verdict:
            return verdict
        self._note_threads(timed)
        self.observed.timing, self.observed.wall_ms_per_call = timed.timing, round(wall_ms, 6)
        self.observed.reference_wall_ms_per_call = round(self.reference.wall_ms_per_call, 6)
        self.observed.vouched_median_ms = self._vouched_median_ms()
        return verdicts.of_speed(self.observed.vouched_median_ms, self.reference.floor)

    def _check_timed_samples(self, worker: Worker, sampled: list[int]) -> Verdict | None:
        """The outputs of randomly chosen timed calls (each on fresh input values) must be right
        too: a candidate that caches, or behaves differently when timed, fails here."""
        tolerance = self.config.tolerance_for(self.problem)
        for index in sampled:
            expected, _ = self.reference.outputs(Command(op="trial", seed=self.config.seed, roll=index))
            reply = worker.request(Command(op="sample", index=index), "timing")
            verdict = self._verdict_of(reply, worker)
            if verdict:
                return verdict
            check = compare_outputs(expected, worker.open_outputs(reply.outputs or [], "timing"), tolerance)
            del expected
            verdict = verdicts.of_timed_sample(check, index)
            if verdict:
                return verdict
        return None

    def _vouched_median_ms(self) -> float:
        """The candidate's median as far as the parent's own clock can vouch for it. A worker can
        report anything (a candidate may patch clocks or forge the timing message), but it cannot
        make the parent's clock run slower: when the report falls far below what that clock saw
        per call, less the harness's per-call overhead (measured on the reference the same way),
        the speedup uses that floor instead, and the result is flagged."""
        reference, reported = self.reference.timing, self.observed.timing.median_ms
        overhead = max(0.0, self.reference.wall_ms_per_call - reference.median_ms) if reference else 0.0
        floor = wall_floor_ms(self.observed.wall_ms_per_call, self.config.trials, overhead)
        if reported >= 0.5 * floor:
            return reported
        self.observed.note(Flag.timing_disagrees,
                           f"the worker reported {reported:.4g} ms per call; the harness's clock saw "
                           f"{self.observed.wall_ms_per_call:.4g} ms per call ({overhead:.3g} ms of it "
                           f"harness overhead): the speedup uses {floor:.4g} ms")
        return floor

    def _check_no_fallback(self, worker: Worker) -> Verdict | None:
        reply = worker.request(Command(op="profile", seed=self.config.seed), "profile")
        verdict = self._verdict_of(reply, worker)
        if verdict:
            return verdict
        evidence = fallback_evidence(self.reference.profile, reply.profile) if self.reference.profile else []
        return verdicts.of_fallback(evidence)

    def _check_other_shapes(self, worker: Worker) -> Verdict | None:
        """Correct at the official shape only: flagged, or a mismatch under --strict-shapes."""
        sizes = self.reference.alt_sizes
        if not sizes:
            return None
        command = Command(op="trial", seed=self.config.seed + TRIAL_SEED_OFFSET, sizes=sizes)
        expected, _ = self.reference.outputs(command)
        try:
            reply = worker.request(command, "shapes")
        except WorkerStopped as stopped:
            reply, problem = None, stopped.stop.error
        if reply is not None and reply.ok:
            check = compare_outputs(expected, worker.open_outputs(reply.outputs or [], "shapes"),
                                    self.config.tolerance_for(self.problem))
            worker.open_outputs(reply.inputs or [], "shapes")
            problem = None if check.passed else check.reason
        elif reply is not None:
            problem = reply.rejected or (f"{reply.failure.exc_type}: {reply.failure.message}"[:200] if reply.failure else "failed")
        del expected
        if problem is None:
            return None
        what = ", ".join(f"{k}={v}" for k, v in sizes.items())
        self.observed.note(Flag.shape_specialized, None if self.config.strict_shapes else f"at {what}: {problem}")
        return verdicts.of_other_shapes(what, problem, self.config.strict_shapes)

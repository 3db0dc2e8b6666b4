"""Evaluate candidates against their problem's reference.

Per problem, one reference worker (trusted code, still isolated) computes expected outputs and
reference timings; per candidate, one candidate worker. They never compute at the same time:
for each trial the reference runs first, then the candidate, and the parent compares the two
outputs in place. Nothing that decides correctness is computed in the candidate's process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .build import BuildOutcome, BuildStatus, key_lock
from .check import compare_outputs
from .integrity import fallback_evidence, mutated_inputs
from .protocol import Command, Failure, HardwareFloor, ParamDigest, Profile, Reply, WorkerJob
from .records import Candidate, EvalConfig, Problem, Result, Status, TimingStats
from .sandbox import Placement, Worker, WorkerStopped
from .score import classify_failure, speedup

LOG_TAIL_CHARS = 4000
TRIAL_SEED_OFFSET = 1000  # trial inputs use seeds apart from the init seed
WALL_SLACK_MS = 0.05  # per call: jitter between the parent's clock and a worker's
HARDWARE_MARGIN = 0.5  # honest kernels stay above the floor; half of it leaves room for timer noise
WALL_FIXED_MS = 50.0  # per timing command: message round trips and one-time lazy initialisation


def timed_request(worker: Worker, seed: int, trials: int, phase: str) -> tuple[Reply, float]:
    """Warm up, then time; returns the reply and the parent's own wall time per timed call."""
    warm = worker.request(Command(op="warmup", seed=seed), phase)
    if not warm.ok:
        return warm, 0.0
    began = time.perf_counter()
    reply = worker.request(Command(op="time", seed=seed), phase)
    return reply, (time.perf_counter() - began) * 1000 / trials


def wall_floor_ms(wall_ms_per_call: float, trials: int, overhead_ms: float) -> float:
    """Least time per call the parent's clock allows a worker to claim: the wall time per call,
    less a fixed allowance per command, the harness's per-call overhead and some slack."""
    return wall_ms_per_call - WALL_FIXED_MS / trials - 1.5 * overhead_ms - WALL_SLACK_MS


class ReferenceFailed(Exception):
    """The reference itself could not load, run or time; its candidates cannot be judged."""


def early_verdict(candidate: Candidate, config: EvalConfig, run_id: str) -> Result | None:
    """Verdicts that need no worker: nothing to run, no problem to run against, no GPU."""
    status, error = None, None
    if candidate.problem_id is None:
        status, error = Status.skipped, "matches no problem: put it under candidates/<problem_id>/ or use KernelBench naming"
    elif candidate.code is None:
        status, error = Status.load_error, candidate.extraction_error
    elif not candidate.kind.runs_on(config.device):
        needs = "a CUDA GPU" if config.device == "cpu" else "the CPU (C++ from cpp_sources only)"
        status, error = Status.skipped, f"{candidate.kind.value} candidate needs {needs}; this run is on {config.device}"
    if status is None:
        return None
    return Result(run_id=run_id, problem=candidate.problem_id, candidate=candidate.rel_path, status=status,
                  error=error, phase="extract", kind=candidate.kind, candidate_hash=candidate.source_hash,
                  code_hash=candidate.code_hash)


def worker_job(role: str, problem: Problem, config: EvalConfig) -> WorkerJob:
    """Both sides get the same seed, device, precision and trial counts; only the reference
    may be timed through torch.compile."""
    return WorkerJob(role=role, problem_path=problem.path, device=config.device, precision=config.precision,
                     init_seed=config.seed, warmup=config.warmup, trials=config.trials,
                     compile_baseline=role == "reference" and config.baseline == "compile")


def init_differs(reference: list[ParamDigest], candidate: list[ParamDigest]) -> bool:
    """Same parameter shapes in the same order, different values after the same seed."""
    same_layout = [p.shape for p in reference] == [p.shape for p in candidate] and bool(reference)
    return same_layout and any(r.sha256 != c.sha256 for r, c in zip(reference, candidate))


class ReferenceRunner:
    """The problem's reference worker: loaded once, timed once, asked for each trial's outputs."""

    def __init__(self, problem: Problem, config: EvalConfig, key_dir: Path, placement: Placement = Placement(),
                 shrink: bool = False):
        self.problem, self.config = problem, config
        job = worker_job("reference", problem, config).model_copy(update={"shrink": shrink})
        self.worker = Worker(job, None, key_dir, config.timeout_s, problem.source, placement)
        self.params: list[ParamDigest] = []
        self.timing: TimingStats | None = None
        self.profile: Profile | None = None
        self.floor: HardwareFloor | None = None
        self.wall_ms_per_call = 0.0
        self.alt_sizes: dict[str, int] | None = None

    def _checked(self, reply_fn: Callable[[], Reply], what: str) -> Reply:
        try:
            reply = reply_fn()
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference {what}: {stopped.stop.error}") from None
        if not reply.ok:
            detail = reply.failure.exc_type + ": " + reply.failure.message if reply.failure else reply.rejected
            raise ReferenceFailed(f"reference {what} failed: {detail}"[:300])
        return reply

    def load(self) -> None:
        loaded = self._checked(lambda: self.worker.reply("reference load", self.config.build_timeout_s), "load")
        self.params, self.alt_sizes = loaded.params or [], loaded.alt_sizes

    def start(self, seed: int) -> None:
        """Load, time once, and profile once: what every candidate of the problem is held to."""
        self.load()
        try:
            reply, self.wall_ms_per_call = timed_request(self.worker, seed, self.config.trials, "reference timing")
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference timing: {stopped.stop.error}") from None
        self.timing = self._checked(lambda: reply, "timing").timing
        profiled = self._request(Command(op="profile", seed=seed), "profile")
        self.profile, self.floor = profiled.profile, profiled.floor

    def _request(self, command: Command, what: str) -> Reply:
        return self._checked(lambda: self.worker.request(command, f"reference {what}"), what)

    def outputs(self, command: Command) -> tuple[list, list]:
        """The reference's outputs for a trial command, and its inputs (as generated)."""
        reply = self._request(command, "trial")
        try:
            return (self.worker.open_outputs(reply.outputs or [], "reference trial"),
                    self.worker.open_outputs(reply.inputs or [], "reference trial"))
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference trial: {stopped.stop.error}") from None

    def close(self) -> None:
        self.worker.close()


class CandidateRun:
    """One candidate's evaluation; produces exactly one Result."""

    def __init__(self, problem: Problem, candidate: Candidate, config: EvalConfig, key_dir: Path,
                 reference: ReferenceRunner | None, run_id: str, placement: Placement = Placement(),
                 build: BuildOutcome | None = None):
        """`reference` may be None only when `build` already decides the verdict."""
        self.problem, self.candidate, self.config, self.reference = problem, candidate, config, reference
        self.key_dir, self.placement, self.build = key_dir, placement, build
        self.result = Result(run_id=run_id, problem=problem.id, candidate=candidate.rel_path, status=Status.ok,
                             kind=candidate.kind, candidate_hash=candidate.source_hash,
                             code_hash=candidate.code_hash, problem_hash=problem.source_hash,
                             reference_timing=reference.timing if reference else None, gpu=placement.gpu,
                             build_s=round(build.seconds, 3) if build else None,
                             build_cached=build.cached if build else False)

    def run(self) -> Result:
        began = time.monotonic()
        if not self._judged_by_build():
            worker, loaded = self._start()
            with worker:
                try:
                    if isinstance(loaded, WorkerStopped):
                        raise loaded
                    self._evaluate(worker, loaded)
                except WorkerStopped as stopped:
                    self._fail(stopped.stop.status, stopped.stop.error, stopped.stop.evidence)
                if self.result.status is not Status.ok:
                    self.result.log_tail = worker.log_tail(LOG_TAIL_CHARS) or None
        self.result.elapsed_s = round(time.monotonic() - began, 3)
        return self.result

    def _start(self) -> tuple[Worker, Reply | WorkerStopped]:
        """Start the worker and wait for its import (which compiles, or finds the build up to
        date) under the key's lock, so no other run builds in that dir meanwhile."""
        self.result.phase = "load"
        with key_lock(self.key_dir):
            worker = Worker(worker_job("candidate", self.problem, self.config), self.candidate.code, self.key_dir,
                            self.config.timeout_s, self.problem.source, self.placement)
            try:
                return worker, worker.reply("load and build", self.config.build_timeout_s)
            except WorkerStopped as stopped:
                return worker, stopped

    def _judged_by_build(self) -> bool:
        """A build that failed or ran out of time ahead of evaluation is the verdict: the GPU
        is not needed to say so."""
        if self.build is None or self.build.status not in (BuildStatus.failed, BuildStatus.timed_out):
            return False
        self.result.phase = "load"
        if self.build.status is BuildStatus.timed_out:
            self._fail(Status.timeout, self.build.error or "the build ran past --build-timeout")
        else:
            self._judge_failure(self.build.failure, self.build.log_head)
        return True

    def _fail(self, status: Status, error: str | None, evidence: list[str] | None = None) -> None:
        self.result.status, self.result.error = status, error
        self.result.evidence = evidence or []

    def _failed_reply(self, reply: Reply, worker: Worker) -> bool:
        if reply.ok:
            return False
        if reply.rejected:
            self._fail(Status.rejected, reply.rejected)
            self.result.flags.append("not_plain_tensor")
        else:
            self._judge_failure(reply.failure, worker.log_head())
        return True

    def _judge_failure(self, failure: Failure, log: str) -> None:
        verdict = classify_failure(failure, log, self.config.device, self._candidate_text())
        self._fail(verdict.status, verdict.error, verdict.evidence)
        self.result.compiler_diagnostics = verdict.diagnostics
        self.result.phase = failure.phase

    def _candidate_text(self) -> str:
        """The file as found (a transcript too), so compiler lines map to lines a person can open."""
        try:
            return Path(self.candidate.path).read_text(errors="replace")
        except OSError:
            return self.candidate.code or ""

    def _evaluate(self, worker: Worker, loaded: Reply) -> None:
        if self._failed_reply(loaded, worker):
            return
        if init_differs(self.reference.params, loaded.params or []):
            self.result.flags.append("init_differs")
        self.result.phase = "correctness"
        if not self._check_trials(worker):
            return
        self.result.phase = "timing"
        timed, wall_ms = timed_request(worker, self.config.seed, self.config.trials, "timing")
        if self._failed_reply(timed, worker) or not self._check_timed_samples(worker, timed.sampled or []):
            return
        self._note_threads(timed)
        self.result.timing, self.result.wall_ms_per_call = timed.timing, round(wall_ms, 6)
        self.result.reference_wall_ms_per_call = round(self.reference.wall_ms_per_call, 6)
        candidate_ms = self._vouched_median_ms()
        floor = self.reference.floor
        if floor and candidate_ms < HARDWARE_MARGIN * floor.floor_ms:
            self._reject("faster_than_hardware", f"median {candidate_ms:.4g} ms is below what this GPU can do: "
                         f"{floor.describe()}")
            return
        self.result.phase = "profile"
        if not self._check_no_fallback(worker):
            return
        self.result.phase = "shapes"
        if not self._check_other_shapes(worker):
            return
        self.result.speedup = speedup(self.reference.timing.median_ms, candidate_ms)
        self.result.phase = None

    def _reject(self, flag: str, error: str, evidence: list[str] | None = None) -> bool:
        self._fail(Status.rejected, error, evidence)
        self.result.flags.append(flag)
        return False

    def _note_threads(self, reply: Reply) -> None:
        if reply.threads_alive and "threads_left_running" not in self.result.flags:
            self.result.flags.append("threads_left_running")

    def _compare(self, worker: Worker, command: Command, phase: str) -> tuple[bool, object]:
        """Reference first (idle while the candidate runs), then the candidate; compare in place.
        Returns (False, None) when the verdict is already decided."""
        expected, expected_inputs = self.reference.outputs(command)
        reply = worker.request(command, phase)
        if self._failed_reply(reply, worker):
            return False, None
        self._note_threads(reply)
        actual = worker.open_outputs(reply.outputs or [], phase)
        actual_inputs = worker.open_outputs(reply.inputs or [], phase)
        changed = mutated_inputs(expected_inputs, actual_inputs)
        check = compare_outputs(expected, actual, self.config.tolerance_for(self.problem))
        del expected, actual, expected_inputs, actual_inputs  # drop IPC mappings before the workers release memory
        if changed:
            return self._reject("input_mutation", f"forward changed its input(s) {changed}: inputs must be left as "
                                "they are"), None
        return True, check

    def _check_trials(self, worker: Worker) -> bool:
        trials = self.config.correctness_trials
        for trial in range(trials):
            # Fresh input values every trial: a stale buffer or a cached answer cannot pass twice.
            decided, check = self._compare(worker, Command(op="trial", seed=self.config.seed + TRIAL_SEED_OFFSET + trial),
                                           "correctness")
            if not decided:
                return False
            self.result.max_abs_err = max(self.result.max_abs_err or 0.0, check.max_abs_err or 0.0)
            self.result.max_rel_err = max(self.result.max_rel_err or 0.0, check.max_rel_err or 0.0)
            if not check.passed:
                error = f"wrong output on trial {trial + 1}/{trials}: {check.reason}"
                if "init_differs" in self.result.flags:
                    error += "; its parameters differ from the reference's after the same seed (initialise them as the reference does)"
                self._fail(Status.mismatch, error)
                return False
            self.result.trials_passed = trial + 1
        return True

    def _check_timed_samples(self, worker: Worker, sampled: list[int]) -> bool:
        """The outputs of randomly chosen timed calls (each on fresh input values) must be right
        too: a candidate that caches, or behaves differently when timed, fails here."""
        tolerance = self.config.tolerance_for(self.problem)
        for index in sampled:
            expected, _ = self.reference.outputs(Command(op="trial", seed=self.config.seed, roll=index))
            reply = worker.request(Command(op="sample", index=index), "timing")
            if self._failed_reply(reply, worker):
                return False
            check = compare_outputs(expected, worker.open_outputs(reply.outputs or [], "timing"), tolerance)
            del expected
            if not check.passed:
                return self._reject("inconsistent_when_timed", f"timed call {index} returned a wrong output "
                                    f"({check.reason}), though the correctness trials passed")
        return True

    def _vouched_median_ms(self) -> float:
        """The candidate's median as far as the parent's own clock can vouch for it. A worker can
        report anything (a candidate may patch clocks or forge the timing message), but it cannot
        make the parent's clock run slower: when the report falls far below what that clock saw
        per call, less the harness's per-call overhead (measured on the reference the same way),
        the speedup uses that floor instead, and the result is flagged."""
        reference, reported = self.reference.timing, self.result.timing.median_ms
        overhead = max(0.0, self.reference.wall_ms_per_call - reference.median_ms) if reference else 0.0
        floor = wall_floor_ms(self.result.wall_ms_per_call, self.config.trials, overhead)
        if reported >= 0.5 * floor:
            return reported
        self.result.flags.append("timing_disagrees")
        self.result.evidence.append(f"the worker reported {reported:.4g} ms per call; the harness's clock saw "
                                    f"{self.result.wall_ms_per_call:.4g} ms per call ({overhead:.3g} ms of it "
                                    f"harness overhead): the speedup uses {floor:.4g} ms")
        return floor

    def _check_no_fallback(self, worker: Worker) -> bool:
        reply = worker.request(Command(op="profile", seed=self.config.seed), "profile")
        if self._failed_reply(reply, worker):
            return False
        evidence = fallback_evidence(self.reference.profile, reply.profile) if self.reference.profile else []
        if evidence:
            return self._reject("reference_fallback", f"forward computes with PyTorch's own kernels: {evidence[0]}",
                                evidence)
        return True

    def _check_other_shapes(self, worker: Worker) -> bool:
        """Correct at the official shape only: flagged, or a mismatch under --strict-shapes."""
        sizes = self.reference.alt_sizes
        if not sizes:
            return True
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
            return True
        what = ", ".join(f"{k}={v}" for k, v in sizes.items())
        self.result.flags.append("shape_specialized")
        if self.config.strict_shapes:
            self._fail(Status.mismatch, f"correct at the benchmark's shape only; at {what}: {problem}")
            return False
        self.result.evidence.append(f"at {what}: {problem}")
        return True

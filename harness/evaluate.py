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

from .build import extensions_dir
from .check import compare_outputs
from .diagnose import diagnose
from .protocol import Command, ParamDigest, Reply, WorkerJob
from .records import Candidate, EvalConfig, Problem, Result, Status, TimingStats
from .sandbox import Worker, WorkerStopped
from .score import classify_failure, speedup

LOG_TAIL_CHARS = 4000
TRIAL_SEED_OFFSET = 1000  # trial inputs use seeds apart from the init seed


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

    def __init__(self, problem: Problem, config: EvalConfig, build_root: Path):
        self.config = config
        self.worker = Worker(worker_job("reference", problem, config), None, extensions_dir(build_root, problem.source_hash), config.timeout_s)
        self.params: list[ParamDigest] = []
        self.timing: TimingStats | None = None

    def _checked(self, reply_fn: Callable[[], Reply], what: str) -> Reply:
        try:
            reply = reply_fn()
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference {what}: {stopped.stop.error}") from None
        if not reply.ok:
            detail = reply.failure.exc_type + ": " + reply.failure.message if reply.failure else reply.rejected
            raise ReferenceFailed(f"reference {what} failed: {detail}"[:300])
        return reply

    def start(self, seed: int) -> None:
        self.params = self._checked(lambda: self.worker.reply("reference load", self.config.build_timeout_s), "load").params or []
        self.timing = self._checked(lambda: self.worker.request(Command(op="time", seed=seed), "reference timing"),
                                    "timing").timing

    def outputs(self, seed: int):
        reply = self._checked(lambda: self.worker.request(Command(op="trial", seed=seed), "reference trial"), "trial")
        try:
            return self.worker.open_outputs(reply.outputs or [], "reference trial")
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference trial: {stopped.stop.error}") from None

    def close(self) -> None:
        self.worker.close()


class CandidateRun:
    """One candidate's evaluation; produces exactly one Result."""

    def __init__(self, problem: Problem, candidate: Candidate, config: EvalConfig, build_root: Path,
                 reference: ReferenceRunner, run_id: str):
        self.problem, self.candidate, self.config, self.reference = problem, candidate, config, reference
        self.build_root = build_root
        self.result = Result(run_id=run_id, problem=problem.id, candidate=candidate.rel_path, status=Status.ok,
                             kind=candidate.kind, candidate_hash=candidate.source_hash,
                             code_hash=candidate.code_hash, problem_hash=problem.source_hash,
                             reference_timing=reference.timing)

    def run(self) -> Result:
        began = time.monotonic()
        job = worker_job("candidate", self.problem, self.config)
        with Worker(job, self.candidate.code, extensions_dir(self.build_root, self.candidate.code_hash or ""),
                    self.config.timeout_s) as worker:
            try:
                self._evaluate(worker)
            except WorkerStopped as stopped:
                self._fail(stopped.stop.status, stopped.stop.error, stopped.stop.evidence)
            if self.result.status is not Status.ok:
                self.result.log_tail = worker.log_tail(LOG_TAIL_CHARS) or None
        self.result.elapsed_s = round(time.monotonic() - began, 3)
        return self.result

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
            verdict = classify_failure(reply.failure, worker.log_head(), self.config.device, self._candidate_text())
            self._fail(verdict.status, verdict.error, verdict.evidence)
            self.result.compiler_diagnostics = verdict.diagnostics
            self.result.phase = reply.failure.phase
        return True

    def _candidate_text(self) -> str:
        """The file as found (a transcript too), so compiler lines map to lines a person can open."""
        try:
            return Path(self.candidate.path).read_text(errors="replace")
        except OSError:
            return self.candidate.code or ""

    def _evaluate(self, worker: Worker) -> None:
        self.result.phase = "load"
        loaded = worker.reply("load and build", self.config.build_timeout_s)
        if self._failed_reply(loaded, worker):
            return
        if init_differs(self.reference.params, loaded.params or []):
            self.result.flags.append("init_differs")
        self.result.phase = "correctness"
        if not self._check_trials(worker):
            return
        self.result.phase = "timing"
        timed = worker.request(Command(op="time", seed=self.config.seed), "timing")
        if self._failed_reply(timed, worker):
            return
        self.result.timing = timed.timing
        self.result.speedup = speedup(self.reference.timing, timed.timing)
        self.result.phase = None

    def _check_trials(self, worker: Worker) -> bool:
        tolerance = self.config.tolerance_for(self.problem)
        trials = self.config.correctness_trials
        for trial in range(trials):
            seed = self.config.seed + TRIAL_SEED_OFFSET + trial
            expected = self.reference.outputs(seed)  # reference first; it is idle while the candidate runs
            reply = worker.request(Command(op="trial", seed=seed), "correctness")
            if self._failed_reply(reply, worker):
                return False
            actual = worker.open_outputs(reply.outputs or [], "correctness")
            check = compare_outputs(expected, actual, tolerance)
            del expected, actual  # drop the IPC mappings before the workers release the memory
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


def evaluate_problem(problem: Problem, candidates: list[Candidate], config: EvalConfig, build_root: Path,
                     run_id: str, on_result: Callable[[Result], None]) -> None:
    """Give every candidate of one problem exactly one Result, diagnosed, passed to `on_result`
    as soon as known."""
    def emit(result: Result, candidate: Candidate) -> None:
        result.diagnosis = diagnose(result, candidate.code)
        on_result(result)

    pending = []
    for candidate in candidates:
        early = early_verdict(candidate, config, run_id)
        if early is not None:
            emit(early, candidate)
        else:
            pending.append(candidate)
    if not pending:
        return
    reference = ReferenceRunner(problem, config, build_root)
    remaining = list(pending)
    try:
        reference.start(config.seed)
        while remaining:
            emit(CandidateRun(problem, remaining[0], config, build_root, reference, run_id).run(), remaining[0])
            remaining.pop(0)
    except ReferenceFailed as failed:
        reason = f"not judged: the {str(failed).splitlines()[0]}"
        for candidate in remaining:
            emit(Result(run_id=run_id, problem=problem.id, candidate=candidate.rel_path, status=Status.skipped,
                        error=reason, kind=candidate.kind, candidate_hash=candidate.source_hash,
                        code_hash=candidate.code_hash, problem_hash=problem.source_hash), candidate)
    finally:
        reference.close()

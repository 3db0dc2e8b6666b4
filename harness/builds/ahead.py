"""Building ahead of evaluation: a build worker that sees no GPU imports the candidate (load_inline
compiles there) into its key dir of the build cache, or the cache answers at once."""

from __future__ import annotations

import time

from ..records import Candidate, EvalConfig, Problem
from ..worker.parent import Placement, StopReason, Worker, WorkerStopped
from ..worker.protocol import WorkerJob
from .cache import BuildCache, BuildOutcome, BuildStatus, key_lock, read_outcome, write_outcome
from .compiler_log import is_build_failure


def build_ahead(candidate: Candidate, problem: Problem, config: EvalConfig, cache: BuildCache,
                placement: Placement) -> BuildOutcome:
    """Build one candidate in a build worker that sees no GPU, or answer from the cache."""
    key_dir = cache.key_dir(candidate.code_hash)
    with key_lock(key_dir):
        cached = read_outcome(key_dir)
        if cached is not None:
            return cached.model_copy(update={"cached": True, "seconds": 0.0})
        outcome = _run_build_worker(candidate, problem, config, cache, placement)
        if outcome.decided:
            write_outcome(key_dir, outcome)
        return outcome


def _run_build_worker(candidate: Candidate, problem: Problem, config: EvalConfig, cache: BuildCache,
                      placement: Placement) -> BuildOutcome:
    key_dir = cache.key_dir(candidate.code_hash)
    job = WorkerJob(role="build", problem_path=problem.path, device=config.device, precision=config.precision,
                    init_seed=config.seed, warmup=0, trials=1)
    hidden = placement.model_copy(update={"env": placement.env | {"CUDA_VISIBLE_DEVICES": ""}})
    began = time.monotonic()
    with Worker(job, candidate.code, key_dir, config.build_timeout_s, problem.source, hidden) as worker:
        try:
            reply = worker.reply("build", config.build_timeout_s)
        except WorkerStopped as stopped:
            status = BuildStatus.timed_out if stopped.stop.reason is StopReason.deadline else BuildStatus.deferred
            return BuildOutcome(key=key_dir.name, status=status, seconds=time.monotonic() - began,
                                error=stopped.stop.error)
        seconds = time.monotonic() - began
        if reply.ok:
            return BuildOutcome(key=key_dir.name, status=BuildStatus.built, seconds=seconds)
        if reply.failure and is_build_failure(reply.failure.exc_type, reply.failure.message):
            return BuildOutcome(key=key_dir.name, status=BuildStatus.failed, seconds=seconds, failure=reply.failure,
                                log_head=worker.log_head())
        return BuildOutcome(key=key_dir.name, status=BuildStatus.deferred, seconds=seconds)

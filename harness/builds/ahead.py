"""Building ahead of evaluation: a build worker that sees no GPU imports the candidate (load_inline
compiles there) into its key dir of the build cache, or the cache answers at once."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import ContextManager

from ..records import Candidate, EvalConfig, Problem
from ..worker.parent import Placement, StopReason, Worker, WorkerStopped
from ..worker.protocol import WorkerJob
from .cache import BuildCache, BuildOutcome, BuildStatus, key_lock
from .compiler_log import is_build_failure


def build_ahead(candidate: Candidate, problem: Problem, config: EvalConfig, cache: BuildCache, placement: Placement,
                running: Callable[[], ContextManager] = contextlib.nullcontext) -> BuildOutcome:
    """Build one candidate in a build worker that sees no GPU, or answer from the cache. The
    worker, and so the candidate's code, runs inside `running()`; a cached answer runs nothing."""
    key_dir = cache.key_dir(candidate.code_hash)
    with key_lock(key_dir):
        cached = cache.read_outcome(key_dir)
        if cached is not None:
            return cached.model_copy(update={"cached": True, "seconds": 0.0})
        with running():
            outcome = _run_build_worker(candidate, problem, config, cache, placement)
        if outcome.decided:
            cache.write_outcome(key_dir, outcome)
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
            status = {StopReason.deadline: BuildStatus.timed_out,
                      StopReason.limit: BuildStatus.over_limit}.get(stopped.stop.reason, BuildStatus.deferred)
            return BuildOutcome(key=key_dir.name, status=status, seconds=time.monotonic() - began,
                                error=stopped.stop.error, protections=worker.protections)
        seconds = time.monotonic() - began
        if reply.ok:
            return BuildOutcome(key=key_dir.name, status=BuildStatus.built, seconds=seconds,
                                protections=worker.protections)
        if reply.failure and is_build_failure(reply.failure.exc_type, reply.failure.message):
            return BuildOutcome(key=key_dir.name, status=BuildStatus.failed, seconds=seconds, failure=reply.failure,
                                log_head=worker.log_head(), protections=worker.protections)
        return BuildOutcome(key=key_dir.name, status=BuildStatus.deferred, seconds=seconds,
                            protections=worker.protections)

"""Building ahead of evaluation: a build worker that sees no GPU imports the candidate (load_inline
compiles there) into its key dir of the build cache, or the cache answers at once."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import ContextManager

from ..records import Candidate, CandidateKind, EvalConfig, Problem
from ..worker import processes
from ..worker.pace import REAL_TIME, Pace
from ..worker.parent import KEPT_DEPTH, KEPT_FILES, Placement, StopReason, Worker, WorkerStopped
from ..worker.protocol import MAX_LINE_CHARS, MAX_MESSAGE_CHARS, Failure, WorkerJob
from .cache import TORCH_BATON, BuildCache, BuildOutcome, BuildStatus, key_lock
from .compiler_log import is_build_failure, tool_stopped
from .header import variant_for



def build_ahead(candidate: Candidate, problem: Problem, config: EvalConfig, cache: BuildCache, placement: Placement,
                running: Callable[[], ContextManager] = contextlib.nullcontext,
                pace: Pace = REAL_TIME) -> BuildOutcome:
    """Build one candidate in a build worker that sees no GPU, or answer from the cache. The
    worker, and so the candidate's code, runs inside `running()`; a cached answer runs nothing."""
    key_dir = cache.key_dir(candidate.code_hash)
    with key_lock(key_dir):
        cached = cache.read_outcome(key_dir)
        if cached is not None:
            return cached.model_copy(update={"cached": True, "seconds": 0.0})
        with running():
            outcome = _run_build_worker(candidate, problem, config, cache, placement, pace)
        if outcome.decided:
            cache.write_outcome(key_dir, outcome)
        return outcome


def _run_build_worker(candidate: Candidate, problem: Problem, config: EvalConfig, cache: BuildCache,
                      placement: Placement, pace: Pace) -> BuildOutcome:
    key_dir = cache.key_dir(candidate.code_hash)
    job = WorkerJob(role="build", problem_path="", device=config.device, precision=config.precision,
                    init_seed=config.seed)
    header = _header_path(cache, placement, pace, candidate.code or "") if candidate.kind is CandidateKind.cpp else {}
    hidden = placement.model_copy(update={"env": placement.env | {"CUDA_VISIBLE_DEVICES": ""} | header})
    began = time.monotonic()
    with Worker(hidden, role="build", device=config.device, timeout_s=config.build_timeout_s, key_dir=key_dir,
                pace=pace) as worker:
        worker.start(job, candidate.code, problem.source, key_dir)  # what an earlier build kept: ninja's to reuse
        try:
            reply = worker.reply("build", config.build_timeout_s)
        except WorkerStopped as stopped:
            status = {StopReason.deadline: BuildStatus.timed_out,
                      StopReason.limit: BuildStatus.over_limit}.get(stopped.stop.reason, BuildStatus.deferred)
            return BuildOutcome(key=key_dir.name, status=status, seconds=time.monotonic() - began,
                                error=stopped.stop.error, protections=worker.protections)
        seconds = time.monotonic() - began
        kept = _keep_extensions(worker, key_dir)
        if reply.ok:
            return BuildOutcome(key=key_dir.name, status=BuildStatus.built, seconds=seconds,
                                protections=worker.protections)
        if reply.failure and is_build_failure(reply.failure.exc_type, reply.failure.message):
            if tool_stopped(worker.log_head() + reply.failure.message):  # not the code's outcome: never cached
                return BuildOutcome(key=key_dir.name, status=BuildStatus.deferred, seconds=seconds,
                                    protections=worker.protections)
            seen, now = kept
            return BuildOutcome(key=key_dir.name, status=BuildStatus.failed, seconds=seconds,
                                failure=kept_failure(reply.failure, seen, now),
                                log_head=worker.log_head().replace(seen, now), protections=worker.protections)
        return BuildOutcome(key=key_dir.name, status=BuildStatus.deferred, seconds=seconds, failure=reply.failure,
                            protections=worker.protections)


def kept_failure(failure: Failure, seen: str, now: str) -> Failure:
    """The failure with paths as the compiler printed them (`seen`) naming where the build's files
    are kept (`now`), still within the protocol's bounds: an outcome stored past them would never
    be read back, and the build would run again on every run."""
    return Failure.model_validate(failure.model_dump() | {
        "message": failure.message.replace(seen, now)[:MAX_MESSAGE_CHARS],
        "traceback": [line.replace(seen, now)[:MAX_LINE_CHARS] for line in failure.traceback]})


def _header_path(cache: BuildCache, placement: Placement, pace: Pace, code: str) -> dict[str, str]:
    """CPATH naming the precompiled torch header first, in the variant the candidate's code asks
    for, made if need be (builds/header.py). For C++ CPU builds only: a CUDA build's time is its
    nvcc compile, which the header does not shorten, and making it first would delay a cold GPU
    run's builds (one that did took 179 s on the H100)."""
    variant = variant_for(code)
    header = cache.headers.ready(placement.env, pace, variant) if cache.headers is not None and variant else None
    if header is None:
        return {}
    return {"CPATH": os.pathsep.join(filter(None, [str(header), placement.env.get("CPATH")]))}


def _keep_extensions(worker: Worker, key_dir: Path) -> tuple[str, str]:
    """Copy what a build worker compiled in its own scratch dir into the cache (no worker writes
    the cache itself), and say how paths in its log map there: (as the worker saw them, now)."""
    if worker.extensions == key_dir:  # without namespaces it built in the key dir itself
        return str(key_dir), str(key_dir)
    worker.kill()  # nothing of the candidate's changes the files while they are copied
    processes.copy_tree(worker.extensions, key_dir, KEPT_DEPTH, KEPT_FILES, (TORCH_BATON,))
    return worker.confinement.extensions_dir, str(key_dir)

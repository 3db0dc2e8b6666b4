"""The problem's reference worker: loaded once per lane and problem, timed once, profiled once,
then asked for each trial's expected outputs. Trusted code, still isolated in its own worker."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ..records import EvalConfig, Problem, TimingStats
from ..worker.parent import Placement, Worker, WorkerStopped
from ..worker.protocol import Command, HardwareFloor, ParamDigest, Profile, Reply, WorkerJob


class ReferenceFailed(Exception):
    """The reference itself could not load, run or time; its candidates cannot be judged."""


def worker_job(role: str, problem: Problem, config: EvalConfig) -> WorkerJob:
    """Both sides get the same seed, device, precision and trial counts; only the reference
    may be timed through torch.compile."""
    return WorkerJob(role=role, problem_path=problem.path, device=config.device, precision=config.precision,
                     init_seed=config.seed, warmup=config.warmup, trials=config.trials,
                     compile_baseline=role == "reference" and config.baseline == "compile")


def timed_request(worker: Worker, seed: int, trials: int, phase: str) -> tuple[Reply, float]:
    """Warm up, then time; returns the reply and the parent's own wall time per timed call."""
    warm = worker.request(Command(op="warmup", seed=seed), phase)
    if not warm.ok:
        return warm, 0.0
    began = time.perf_counter()
    reply = worker.request(Command(op="time", seed=seed), phase)
    return reply, (time.perf_counter() - began) * 1000 / trials


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

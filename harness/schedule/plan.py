"""What every backend shares: the run's problems and configuration, its build cache, where each
kind of worker goes (cores, GPU, environment), and the verdicts that need no worker at all."""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import subprocess
import threading
from collections.abc import Iterable, Iterator
from typing import Literal

import torch
from pydantic import BaseModel

from ..builds.cache import BuildCache
from ..judge import verdicts
from ..judge.diagnose import diagnose
from ..records import Candidate, EvalConfig, HostEnv, Observations, Problem, Result, Subject
from ..worker.bytecode import bytecode_dir, start_warming
from ..worker.parent import RUN_TOKEN_VAR, Placement, gpu_device_node
from ..worker.sandbox import SandboxPolicy

# A lane's cores: one for its workers (the reference's and the candidate's, which take turns), where
# every timed call runs, and one for the parent's thread that drives them. One core for both
# workers, always the same: on an H100 VM a 0.15 ms kernel timed by processes pinned to different
# cores differed by up to 3%, by two processes on one core by 0.3%, by unpinned ones taking turns
# by 5%; and the per-call overhead the timing bound takes from the reference is then measured on
# the core the candidate runs on. The price: a GPU worker's own CPU work (inputs a problem makes on
# the CPU, compiling a --compile-baseline reference, a Triton or torch.compile candidate compiling
# at its first call) has one core.
LANE_CPUS = 2
# Workers a lane boots ahead. A boot takes 11.5 s on an H100 host (6.3 s of it the profiler's CUPTI
# set-up), and candidates that fail at load use a worker a second: 3 ran dry there.
MAX_SPARES = 6
TRANSLATION_UNITS = 2  # a load_inline build compiles main.cpp and cuda.cu


class RunScale(BaseModel):
    """How a run spreads out; none of it changes a verdict."""

    jobs: int | None = None  # builds at once (default: the cores left after the lanes')
    gpus: list[int] | None = None  # default: every visible GPU
    backend: Literal["local", "ray"] = "local"
    ray_address: str | None = None  # default: start a local Ray instance
    warm_workers: int | None = None  # booted ahead per lane (default: 1 on CPU, up to 6 per GPU)


class Resources(BaseModel):
    """Who does what: the GPUs with a lane each, how many builds at once, which cores, and how many
    workers each lane boots ahead."""

    gpus: list[int]  # torch's indices in this process; empty on a CPU run
    jobs: int
    build_cpus: list[int] | None = None  # None: not pinned
    lane_cpus: list[list[int]] | None = None  # per lane: its workers' core, then its driving thread's
    spares: int = 1  # per lane

    def worker_cpus(self, lane: int) -> list[int] | None:
        """The one core a lane's workers run on (None: not pinned)."""
        return self.lane_cpus[lane][:1] if self.lane_cpus else None

    def driver_cpus(self, lane: int) -> list[int] | None:
        """Where the parent's thread driving the lane runs: off its workers' core where there is another."""
        return (self.lane_cpus[lane][1:] or self.lane_cpus[lane]) if self.lane_cpus else None


def visible_gpu(index: int, cuda_visible_devices: str | None) -> str:
    """What CUDA_VISIBLE_DEVICES must say for a worker to see this process's GPU `index`."""
    visible = [entry.strip() for entry in (cuda_visible_devices or "").split(",") if entry.strip()]
    return visible[index] if visible else str(index)


def plan_resources(device: str, gpus: list[int] | None, jobs: int | None, warm_workers: int | None = None) -> Resources:
    """All visible GPUs and all cores unless told otherwise. On a GPU run each lane keeps a few
    cores of its own and builds get the rest."""
    resources = _plan_resources(device, gpus, jobs)
    return resources if warm_workers is None else resources.model_copy(update={"spares": warm_workers})


def _plan_resources(device: str, gpus: list[int] | None, jobs: int | None) -> Resources:
    cpus = sorted(os.sched_getaffinity(0))
    if device == "cpu":
        return Resources(gpus=[], jobs=jobs or len(cpus))  # one spare: they boot on the very cores timed
    gpus = list(range(torch.cuda.device_count())) if gpus is None else gpus
    per_lane = max(1, min(LANE_CPUS, len(cpus) // (2 * len(gpus))))
    spare = len(cpus) - per_lane * len(gpus)
    if spare < 1:  # too few cores to keep any apart
        return Resources(gpus=gpus, jobs=jobs or len(cpus))
    lanes = [cpus[spare + i * per_lane: spare + (i + 1) * per_lane] for i in range(len(gpus))]
    # Workers boot ahead on the build cores (an import takes seconds there; a failed candidate, less).
    return Resources(gpus=gpus, jobs=jobs or spare, build_cpus=cpus[:spare], lane_cpus=lanes,
                     spares=max(1, min(MAX_SPARES, spare // (2 * len(gpus)))))


class ActiveSet:
    """Candidates whose code runs in some worker now (a build worker, or an evaluating one; not
    a cached build, not a queued candidate). `drain` answers which ran at any time since the last
    drain: the suspects when the results change on disk without a sandbox (see run.py)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._now: dict[str, int] = {}
        self._since: set[str] = set()

    def enter(self, name: str) -> None:
        with self._lock:
            self._now[name] = self._now.get(name, 0) + 1
            self._since.add(name)

    def leave(self, name: str) -> None:
        with self._lock:
            self._now[name] -= 1
            if not self._now[name]:
                del self._now[name]

    @contextlib.contextmanager
    def running(self, name: str) -> Iterator[None]:
        self.enter(name)
        try:
            yield
        finally:
            self.leave(name)

    def drain(self) -> set[str]:
        with self._lock:
            since, self._since = self._since, set(self._now)
            return since


class RunPlan:
    """One run's fixed facts, shared by its backend's threads or tasks."""

    def __init__(self, problems: list[Problem], config: EvalConfig, run_id: str, cache: BuildCache,
                 resources: Resources, host: HostEnv, sandbox: SandboxPolicy):
        self.problems = {p.id: p for p in problems}
        self.problem_order = [p.id for p in problems]
        self.config, self.run_id, self.cache, self.resources, self.host = config, run_id, cache, resources, host
        self.sandbox = sandbox
        self.token = secrets.token_hex(16)  # marks every launcher of the run (see worker.parent.stop_run)
        self.bytecode = bytecode_dir(host.cache_home)

    def base_env(self) -> dict[str, str]:
        return dict(self.host.passed) | self.cache.toolchain.env() | {RUN_TOKEN_VAR: self.token}

    def start_warming(self) -> subprocess.Popen | None:
        """The bytecode warmer (worker/bytecode.py), on the build cores; None where none is needed."""
        if self.bytecode is None:
            return None
        return start_warming(self.bytecode, self.base_env(), self.resources.build_cpus)

    def build_placement(self, builds: int) -> Placement:
        env = self.base_env()
        if self.host.max_jobs is None:  # compile jobs per build: fill the pool, never more than a build has
            jobs = self.resources.jobs
            env["MAX_JOBS"] = str(min(TRANSLATION_UNITS, math.ceil(jobs / max(1, min(builds, jobs)))))
        return Placement(env=env, cpus=self.resources.build_cpus, sandbox=self.sandbox, bytecode=self.bytecode)

    def lane_placement(self, lane: int) -> Placement:
        env = self.base_env()
        if not self.resources.gpus:
            return Placement(env=env, sandbox=self.sandbox, bytecode=self.bytecode)
        env["CUDA_VISIBLE_DEVICES"] = visible_gpu(self.resources.gpus[lane], self.host.cuda_visible_devices)
        gpu = self.resources.gpus[lane]
        return Placement(gpu=gpu, gpu_node=gpu_device_node(gpu), env=env, cpus=self.resources.worker_cpus(lane),
                         sandbox=self.sandbox, bytecode=self.bytecode)

    def split(self, candidates: Iterable[Candidate]) -> tuple[list[Result], list[Candidate]]:
        """The verdicts that need no worker (diagnosed), and the rest in problem order."""
        decided, runnable = [], []
        for candidate in candidates:
            verdict = verdicts.before_running(candidate, self.config.device)
            if verdict is None:
                runnable.append(candidate)
            else:
                result = verdicts.result(Subject.of(self.run_id, candidate, None), verdict, Observations())
                decided.append(diagnosed(result, candidate))
        order = {pid: i for i, pid in enumerate(self.problem_order)}
        return decided, sorted(runnable, key=lambda c: order[c.problem_id])


def diagnosed(result: Result, candidate: Candidate) -> Result:
    result.diagnosis = diagnose(result, candidate.code)
    return result

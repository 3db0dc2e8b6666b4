"""Schedule a run: builds on a pool of CPU cores ahead of evaluation, one evaluation lane per GPU.

A build worker imports a candidate with no GPU visible (load_inline compiles there) into the
build cache (build.py); a failed build is a verdict at once. A lane owns one GPU: it evaluates
one candidate at a time, the problem's reference beside it, so timing never shares a GPU, and
it takes the next built candidate as soon as it is free. On a GPU run builds overlap
evaluation, pinned to cores the lanes do not use, so compiling neither delays nor perturbs a
GPU with work. On a CPU run the CPU is what is timed: every build finishes first.

Results reach the caller's thread through `Pipeline.results()`, in order of completion; the
caller stores them (one thread owns the database).
"""

from __future__ import annotations

import math
import os
import queue
import secrets
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel

from .build import BuildOutcome, BuildStatus, Toolchain, build_ahead, extensions_dir, toolchain
from .diagnose import diagnose
from .evaluate import CandidateRun, ReferenceFailed, ReferenceRunner, early_verdict
from .records import Candidate, CandidateKind, EvalConfig, Problem, Result, Status
from .sandbox import RUN_TOKEN_VAR, Placement, sweep_escaped

MAX_LANE_CPUS = 4  # a lane's worker: the Python driving the GPU, plus input generation
BUILT_KINDS = (CandidateKind.cuda, CandidateKind.cpp)  # load_inline; Triton compiles at first call
TRANSLATION_UNITS = 2  # a load_inline build compiles main.cpp and cuda.cu


def verdict_of_build(problem: Problem, candidate: Candidate, config: EvalConfig, key_dir: Path, run_id: str,
                     outcome: BuildOutcome) -> Result | None:
    """The Result when the build alone decides it (it failed or ran out of time), else None."""
    if outcome.status not in (BuildStatus.failed, BuildStatus.timed_out):
        return None
    return CandidateRun(problem, candidate, config, key_dir, None, run_id, build=outcome).run()


class RunScale(BaseModel):
    """How a run spreads out; none of it changes a verdict."""

    jobs: int | None = None  # builds at once (default: the cores left after the lanes')
    gpus: list[int] | None = None  # default: every visible GPU
    backend: Literal["local", "ray"] = "local"
    ray_address: str | None = None  # default: start a local Ray instance


class Resources(BaseModel):
    """Who does what: the GPUs with a lane each, how many builds at once, and which cores."""

    gpus: list[int]  # torch's indices in this process; empty on a CPU run
    jobs: int
    build_cpus: list[int] | None = None  # None: not pinned
    lane_cpus: list[list[int]] | None = None


def visible_gpu(index: int) -> str:
    """What CUDA_VISIBLE_DEVICES must say for a worker to see this process's GPU `index`."""
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return visible[index] if visible else str(index)


def plan_resources(device: str, gpus: list[int] | None, jobs: int | None) -> Resources:
    """All visible GPUs and all cores unless told otherwise. On a GPU run each lane keeps a few
    cores of its own and builds get the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if device == "cpu":
        return Resources(gpus=[], jobs=jobs or len(cpus))
    gpus = list(range(torch.cuda.device_count())) if gpus is None else gpus
    per_lane = max(1, min(MAX_LANE_CPUS, len(cpus) // (2 * len(gpus))))
    spare = len(cpus) - per_lane * len(gpus)
    if spare < 1:  # too few cores to keep any apart
        return Resources(gpus=gpus, jobs=jobs or len(cpus))
    lanes = [cpus[spare + i * per_lane: spare + (i + 1) * per_lane] for i in range(len(gpus))]
    return Resources(gpus=gpus, jobs=jobs or spare, build_cpus=cpus[:spare], lane_cpus=lanes)


class ActiveSet:
    """Candidates whose code runs in some worker now. `drain` answers which ran at any time
    since the last drain: the suspects when the results change on disk (see cli)."""

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

    def drain(self) -> set[str]:
        with self._lock:
            since, self._since = self._since, set(self._now)
            return since


class ReadyQueue:
    """Candidates ready for a lane (built, or nothing to build), by problem. A lane takes from
    the problem whose reference it holds first, then from one no other lane holds, so each
    reference starts as few times as possible."""

    def __init__(self, problem_order: list[str], expected: int):
        self._order = problem_order
        self._items: dict[str, list] = {pid: [] for pid in problem_order}
        self._expected = expected  # items still to be put
        self._held: dict[int, str] = {}  # lane -> problem
        self._cond = threading.Condition()
        self._stopped = False

    def put(self, problem_id: str, item) -> None:
        with self._cond:
            self._items[problem_id].append(item)
            self._expected -= 1
            self._cond.notify_all()

    def expect_fewer(self) -> None:
        """One expected item will never come (its verdict needed no lane)."""
        with self._cond:
            self._expected -= 1
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def take(self, lane: int):
        """The next item for this lane, or None once there is no more work."""
        with self._cond:
            while not self._stopped:
                problem_id = self._choose(lane)
                if problem_id is not None:
                    self._held[lane] = problem_id
                    return self._items[problem_id].pop(0)
                if self._expected <= 0:
                    return None
                self._cond.wait()
            return None

    def _choose(self, lane: int) -> str | None:
        waiting = [pid for pid in self._order if self._items[pid]]
        if not waiting:
            return None
        if self._held.get(lane) in waiting:
            return self._held[lane]
        held_elsewhere = {pid for other, pid in self._held.items() if other != lane}
        return next((pid for pid in waiting if pid not in held_elsewhere), waiting[0])


class Pipeline:
    """One run's builds and evaluations. Use as a context manager: leaving it (an interrupt too)
    kills every worker the run started."""

    def __init__(self, problems: list[Problem], candidates: list[Candidate], config: EvalConfig, build_root: Path,
                 run_id: str, resources: Resources, toolchain: Toolchain):
        self.problems = {p.id: p for p in problems}
        self.problem_order = [p.id for p in problems]
        self.candidates, self.config, self.run_id = candidates, config, run_id
        self.build_root, self.resources, self.toolchain = build_root, resources, toolchain
        self.active = ActiveSet()
        self.builds_total = 0
        self.builds_done = 0
        self._token = secrets.token_hex(16)
        self._results: queue.Queue = queue.Queue()
        self._reference_failures: dict[str, str] = {}
        self._threads: list[threading.Thread] = []
        self._ready: ReadyQueue | None = None
        self._stopping = threading.Event()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        if self._ready is not None:
            self._ready.stop()
        sweep_escaped(self._token, RUN_TOKEN_VAR)

    # -- placements ---------------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        return self.toolchain.env() | {"TRITON_CACHE_DIR": str(self.build_root / "triton"), RUN_TOKEN_VAR: self._token}

    def build_placement(self, builds: int) -> Placement:
        env = self._base_env()
        if "MAX_JOBS" not in os.environ:  # compile jobs per build: fill the pool, never more than a build has
            env["MAX_JOBS"] = str(min(TRANSLATION_UNITS, math.ceil(self.resources.jobs / max(1, min(builds, self.resources.jobs)))))
        if self.resources.build_cpus:
            env["HARNESS_CPUS"] = ",".join(map(str, self.resources.build_cpus))
        return Placement(env=env)

    def lane_placement(self, lane: int) -> Placement:
        env = self._base_env()
        if not self.resources.gpus:
            return Placement(env=env)
        env["CUDA_VISIBLE_DEVICES"] = visible_gpu(self.resources.gpus[lane])
        if self.resources.lane_cpus:
            env["HARNESS_CPUS"] = ",".join(map(str, self.resources.lane_cpus[lane]))
        return Placement(gpu=self.resources.gpus[lane], env=env)

    def key_dir(self, code_hash: str) -> Path:
        return extensions_dir(self.build_root, self.toolchain.key(code_hash))

    # -- the run ------------------------------------------------------------------------------

    def results(self) -> Iterator[Result]:
        """Every candidate's Result, diagnosed, as each is decided."""
        runnable = yield from self._early_verdicts()
        if not runnable:
            return
        to_build = self._to_build(runnable)
        self.builds_total = len(to_build)
        self._ready = ReadyQueue(self.problem_order, len(runnable))
        for candidate in runnable:
            if candidate.kind not in BUILT_KINDS:
                self._ready.put(candidate.problem_id, (candidate, None))
        builds_finished = threading.Event()
        self._start_builds(to_build, builds_finished)
        # Timing on the CPU: no compiler may run meanwhile, so the lane waits for every build.
        for lane in range(max(1, len(self.resources.gpus))):
            self._spawn(self._lane, lane, None if self.resources.gpus else builds_finished)
        for _ in range(len(runnable)):
            kind, payload, stored = self._results.get()
            if kind == "bug":
                raise RuntimeError(f"harness error in a pipeline thread:\n{payload}")
            yield payload
            stored.set()  # the caller has stored it and looked for tampering
        for thread in self._threads:
            thread.join(timeout=5)

    def _early_verdicts(self) -> Iterator[Result]:
        """Yields the verdicts that need no worker; returns the rest, in problem order."""
        runnable = []
        for candidate in self.candidates:
            early = early_verdict(candidate, self.config, self.run_id)
            if early is not None:
                yield self._diagnosed(early, candidate)
            else:
                runnable.append(candidate)
        order = {pid: i for i, pid in enumerate(self.problem_order)}
        return sorted(runnable, key=lambda c: order[c.problem_id])

    @staticmethod
    def _to_build(runnable: list[Candidate]) -> list[Candidate]:
        return [c for c in runnable if c.kind in BUILT_KINDS]

    def _spawn(self, target: Callable, *args) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException:  # a harness bug: surface it in the caller's thread, never hang
                self._results.put(("bug", traceback.format_exc(), None))

        thread = threading.Thread(target=guarded, daemon=True)  # an interrupted run must not wait for them
        thread.start()
        self._threads.append(thread)

    def _diagnosed(self, result: Result, candidate: Candidate) -> Result:
        result.diagnosis = diagnose(result, candidate.code)
        return result

    def _emit(self, result: Result, candidate: Candidate) -> None:
        """Hand a result to the caller and wait until it is stored: the lane starts its next
        candidate only then, so a write to the results is seen before that candidate runs and
        is blamed on the ones that ran (see cli._evaluate)."""
        stored = threading.Event()
        self._results.put(("result", self._diagnosed(result, candidate), stored))
        while not stored.wait(0.1) and not self._stopping.is_set():
            pass

    def _start_builds(self, to_build: list[Candidate], finished: threading.Event) -> None:
        work: queue.SimpleQueue = queue.SimpleQueue()
        for candidate in to_build:
            work.put(candidate)
        placement = self.build_placement(len(to_build))
        lock = threading.Lock()
        if not to_build:
            finished.set()

        def builder() -> None:
            while True:
                try:
                    candidate = work.get_nowait()
                except queue.Empty:
                    return
                self._build_one(candidate, placement)
                with lock:
                    self.builds_done += 1
                    if self.builds_done == len(to_build):
                        finished.set()

        for _ in range(min(self.resources.jobs, len(to_build))):
            self._spawn(builder)

    def _build_one(self, candidate: Candidate, placement: Placement) -> None:
        problem = self.problems[candidate.problem_id]
        self.active.enter(candidate.rel_path)
        try:
            outcome = build_ahead(candidate.code, problem, self.config, self.key_dir(candidate.code_hash), placement)
        finally:
            self.active.leave(candidate.rel_path)
        verdict = verdict_of_build(problem, candidate, self.config, self.key_dir(candidate.code_hash), self.run_id,
                                   outcome)
        if verdict is not None:
            self._ready.expect_fewer()
            self._emit(verdict, candidate)
        else:
            self._ready.put(candidate.problem_id, (candidate, outcome))

    def _lane(self, lane: int, wait_for: threading.Event | None) -> None:
        if wait_for is not None:
            wait_for.wait()
        with Lane(self.config, self.run_id, self.lane_placement(lane), self.key_dir, self._reference_failures) as judge:
            while (item := self._ready.take(lane)) is not None:
                candidate, outcome = item
                self.active.enter(candidate.rel_path)
                try:
                    result = judge.judge(self.problems[candidate.problem_id], candidate, outcome)
                finally:
                    self.active.leave(candidate.rel_path)
                self._emit(result, candidate)


class Lane:
    """Evaluates candidates one at a time on one placement (one GPU), keeping the reference
    worker of the problem at hand for the next candidate of the same problem."""

    def __init__(self, config: EvalConfig, run_id: str, placement: Placement, key_dir: Callable[[str], Path],
                 reference_failures: dict[str, str]):
        self.config, self.run_id, self.placement, self.key_dir = config, run_id, placement, key_dir
        self.reference_failures = reference_failures  # problem id -> reason, shared by a run's lanes
        self.reference: ReferenceRunner | None = None

    def __enter__(self) -> Lane:
        return self

    def __exit__(self, *exc_info) -> None:
        self._drop_reference()

    def _drop_reference(self) -> None:
        if self.reference is not None:
            self.reference.close()
            self.reference = None

    def judge(self, problem: Problem, candidate: Candidate, outcome: BuildOutcome | None) -> Result:
        if self.reference is not None and self.reference.problem.id != problem.id:
            self._drop_reference()
        try:
            if problem.id not in self.reference_failures and self.reference is None:
                self.reference = ReferenceRunner(problem, self.config, self.key_dir(problem.source_hash), self.placement)
                self.reference.start(self.config.seed)
            if problem.id not in self.reference_failures:
                return CandidateRun(problem, candidate, self.config, self.key_dir(candidate.code_hash), self.reference,
                                    self.run_id, self.placement, outcome).run()
        except ReferenceFailed as failed:
            self.reference_failures.setdefault(problem.id, f"not judged: the {str(failed).splitlines()[0]}")
            self._drop_reference()
        return Result(run_id=self.run_id, problem=problem.id, candidate=candidate.rel_path, status=Status.skipped,
                      error=self.reference_failures[problem.id], kind=candidate.kind,
                      candidate_hash=candidate.source_hash, code_hash=candidate.code_hash,
                      problem_hash=problem.source_hash, gpu=self.placement.gpu)


def open_pipeline(problems: list[Problem], candidates: list[Candidate], config: EvalConfig, build_root: Path,
                  run_id: str, scale: RunScale) -> Pipeline:
    build_root = build_root.resolve()  # Ray tasks and workers run elsewhere than here
    resources = plan_resources(config.device, scale.gpus, scale.jobs)
    chain = toolchain(config.device, resources.gpus)
    if scale.backend == "ray":
        from .ray_backend import RayPipeline  # Ray is an optional extra

        return RayPipeline(problems, candidates, config, build_root, run_id, resources, chain, scale.ray_address)
    return Pipeline(problems, candidates, config, build_root, run_id, resources, chain)

"""`--backend ray`: a run's builds as CPU tasks and its evaluations as tasks holding one GPU
each, on an existing Ray cluster (or a local instance). Ray only places work: each task runs
the same sandboxed workers as a local run (builds.ahead.build_ahead, schedule.lane.Lane), and the
results come back to this process, which stores them like any other.

An evaluation task takes a batch of one problem's built candidates, so its reference worker
starts once per batch. Batches go out as builds finish; compile errors never reach a GPU. On a
CPU run evaluation waits for every build and runs one batch at a time, since the CPU is what
is timed. Build caches are per node (--build-dir on each); a shared filesystem shares them.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator

import ray

from ..builds.ahead import build_ahead
from ..builds.cache import BuildCache, BuildOutcome
from ..judge.candidate import judged_by_build
from ..judge.compare import compile_parent_kernels_into
from ..records import Candidate, EvalConfig, Problem, Result, Subject
from ..worker.parent import Placement, gpu_device_node, remove_run_scratch, stop_run
from ..worker.sandbox import SandboxPolicy
from .lane import Lane
from .plan import ActiveSet, RunPlan, diagnosed, visible_gpu

BATCH = 8  # candidates per evaluation task: fewer reference starts, yet several GPUs kept busy
STOP_POLL_S = 0.5  # how soon a run stopped from another thread notices


@ray.remote(num_cpus=1)
def build_task(problem: Problem, candidate: Candidate, config: EvalConfig, cache: BuildCache, run_id: str,
               placement: Placement) -> tuple[BuildOutcome, Result | None]:
    outcome = build_ahead(candidate, problem, config, cache, placement)
    return outcome, judged_by_build(Subject.of(run_id, candidate, problem), candidate, config, outcome)


@ray.remote
def evaluate_task(problem: Problem, batch: list[tuple[Candidate, BuildOutcome | None]], config: EvalConfig,
                  cache: BuildCache, run_id: str, env: dict[str, str], sandbox: SandboxPolicy) -> list[Result]:
    gpu = 0 if config.device == "cuda" else None
    if gpu is not None:  # Ray set this task's CUDA_VISIBLE_DEVICES to its GPU (device 0 here): the workers see that one
        env = env | {"CUDA_VISIBLE_DEVICES": visible_gpu(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))}
        compile_parent_kernels_into(cache.parent_triton)  # a Ray worker's process, not the driver's
    placement = Placement(gpu=gpu, gpu_node=None if gpu is None else gpu_device_node(gpu), env=env, sandbox=sandbox)
    with Lane(config, run_id, placement, cache, {}) as lane:
        return [lane.judge(problem, candidate, cache.key_dir(candidate.code_hash), outcome,
                           later_of_problem=index < len(batch) - 1)
                for index, (candidate, outcome) in enumerate(batch)]


class RayPipeline:
    """The local Pipeline's interface (results, stop, active, build counts) over Ray tasks."""

    def __init__(self, plan: RunPlan, candidates: list[Candidate], address: str | None):
        self.plan, self.candidates, self.address = plan, candidates, address
        self.active = ActiveSet()
        self.builds_total = 0
        self.builds_done = 0
        self._inflight: list[ray.ObjectRef] = []
        self._stopped = threading.Event()

    def __enter__(self) -> RayPipeline:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        """Idempotent: an Evaluator's close stops it, then the stream it cut short does again."""
        self._stopped.set()
        inflight, self._inflight = self._inflight, []
        if ray.is_initialized() and inflight:
            # Only tasks not finished: force-cancelling one whose reply is arriving crashes this
            # process in Ray 2.60 ("Tried to complete task that was not pending", exit 1).
            _, unfinished = ray.wait(inflight, num_returns=len(inflight), timeout=0)
            for ref in unfinished:
                ray.cancel(ref, force=True)
        stop_run(self.plan.token)  # this node's workers; other nodes' die with their tasks (and clean up)
        remove_run_scratch(self.plan.token)
        if ray.is_initialized():
            ray.shutdown()

    def results(self) -> Iterator[Result]:
        decided, runnable = self.plan.split(self.candidates)
        yield from decided
        if not runnable:
            return
        if self._stopped.is_set():
            return
        if not ray.is_initialized():
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        plan = self.plan
        to_build = [c for c in runnable if c.kind.built_ahead]
        self.builds_total = len(to_build)
        # This machine's bytecode dir (worker/bytecode.py) is not the nodes': their workers compile what they import.
        placement = plan.build_placement(len(to_build)).model_copy(update={"bytecode": None})
        builds = {build_task.remote(plan.problems[c.problem_id], c, plan.config, plan.cache, plan.run_id, placement): c
                  for c in to_build}
        for candidate in to_build:
            self.active.enter(candidate.rel_path)
        evaluations: dict[ray.ObjectRef, list[Candidate]] = {}
        waiting = {pid: [] for pid in plan.problem_order}
        for candidate in runnable:
            if not candidate.kind.built_ahead:
                waiting[candidate.problem_id].append((candidate, None))
        unbuilt = Counter(c.problem_id for c in to_build)
        while (builds or evaluations or any(waiting.values())) and not self._stopped.is_set():
            self._submit(waiting, unbuilt, evaluations, building=bool(builds))
            self._inflight = list(builds) + list(evaluations)
            ready, _ = ray.wait(self._inflight, num_returns=1, timeout=STOP_POLL_S)
            if not ready:
                continue
            [done] = ready
            self._inflight = [ref for ref in self._inflight if ref != done]  # a new list: stop() may hold the old
            if done in builds:
                candidate = builds.pop(done)
                self.active.leave(candidate.rel_path)
                outcome, verdict = ray.get(done)
                unbuilt[candidate.problem_id] -= 1
                self.builds_done += 1
                if verdict is not None:
                    yield diagnosed(verdict, candidate)
                else:
                    waiting[candidate.problem_id].append((candidate, outcome))
            else:
                batch = evaluations.pop(done)
                for candidate in batch:
                    self.active.leave(candidate.rel_path)
                for result, candidate in zip(ray.get(done), batch):
                    yield diagnosed(result, candidate)

    def _submit(self, waiting: dict[str, list], unbuilt: Counter, evaluations: dict, building: bool) -> None:
        """Send out every batch that is full, or whose problem has nothing left to build."""
        plan = self.plan
        on_gpu = plan.config.device == "cuda"
        if not on_gpu and (building or evaluations):
            return  # timing on the CPU: nothing else may run meanwhile
        for problem_id, items in waiting.items():
            while items and (len(items) >= BATCH or not unbuilt[problem_id]):
                batch, items[:] = items[:BATCH], items[BATCH:]
                options = {"num_gpus": 1} if on_gpu else {"num_cpus": 1}
                ref = evaluate_task.options(**options).remote(plan.problems[problem_id], batch, plan.config, plan.cache,
                                                              plan.run_id, plan.base_env(), plan.sandbox)
                evaluations[ref] = [candidate for candidate, _ in batch]
                for candidate, _ in batch:
                    self.active.enter(candidate.rel_path)
                if not on_gpu:
                    return

"""The local backend: builds on a pool of CPU cores ahead of evaluation, one evaluation lane per GPU.

A build worker imports a candidate with no GPU visible (load_inline compiles there) into the
build cache; a failed build is a verdict at once. A lane owns one GPU: it evaluates one
candidate at a time, the problem's reference beside it, so timing never shares a GPU, and it
takes the next built candidate as soon as it is free. Builds overlap evaluation: on a GPU run
pinned to cores the lanes do not use; on a CPU run, where the CPU is what is timed, frozen while
the lane times (cpu/quiet.py).

Results reach the caller's thread through `Pipeline.results()`, in order of completion; the
caller stores them (one thread owns the database).
"""

from __future__ import annotations

import collections
import itertools
import math
import os
import queue
import subprocess
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from ..builds.ahead import build_ahead
from ..judge.candidate import judged_by_build
from ..records import Candidate, Result, Subject
from ..worker.parent import Placement, remove_run_scratch, stop_run
from .lane import Lane
from .plan import ActiveSet, RunPlan, diagnosed
from .devices import device_for


class StartAhead(NamedTuple):
    """From take: nothing is ready, and this problem's reference can be started meanwhile."""

    problem_id: str


class ReadyQueue:
    """Candidates ready for a lane (built, or nothing to build), by problem. A lane takes from
    the problem whose reference it holds first, then from one no other lane holds, so each
    reference starts as few times as possible."""

    def __init__(self, problem_order: list[str], expected: float):
        self._order = problem_order
        self._items: dict[str, list] = {pid: [] for pid in problem_order}
        self._expected = expected  # items still to be put (math.inf: a stream, open until stopped)
        self._coming: collections.Counter[str] = collections.Counter()  # admitted, not put yet, by problem
        self._held: dict[int, str] = {}  # lane -> problem
        self._cond = threading.Condition()
        self._stopped = False

    def admit(self, problem_id: str) -> None:
        """An item of this problem will be put (or given up on) later."""
        with self._cond:
            self._coming[problem_id] += 1
            self._cond.notify_all()

    def put(self, problem_id: str, item) -> None:
        with self._cond:
            self._items[problem_id].append(item)
            self._expected -= 1
            self._coming[problem_id] -= 1
            self._cond.notify_all()

    def expect_fewer(self, problem_id: str) -> None:
        """One expected item will never come (its verdict needed no lane)."""
        with self._cond:
            self._expected -= 1
            self._coming[problem_id] -= 1
            self._cond.notify_all()

    def more_of(self, problem_id: str) -> bool:
        """Whether an item of this problem is still ready or to come (always, on a stream)."""
        with self._cond:
            return self._expected == math.inf or bool(self._items[problem_id]) or self._coming[problem_id] > 0

    def _upcoming(self, lane: int, skip: set[str]) -> str | None:
        """The first problem with items still to come and none ready, held by no other lane and
        not in `skip`."""
        held_elsewhere = {pid for other, pid in self._held.items() if other != lane}
        return next((pid for pid in self._order if self._coming[pid] > 0 and not self._items[pid]
                     and pid not in held_elsewhere and pid not in skip), None)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def take(self, lane: int, ahead: set[str] | None = None):
        """The next item for this lane, or None once there is no more work. With `ahead` (the
        problems whose references the lane holds), StartAhead while none is ready and another
        problem's items are still to come."""
        with self._cond:
            while not self._stopped:
                problem_id = self._choose(lane)
                if problem_id is not None:
                    self._held[lane] = problem_id
                    return self._items[problem_id].pop(0)
                if self._expected <= 0:
                    return None
                if ahead is not None and (coming := self._upcoming(lane, ahead)) is not None:
                    return StartAhead(coming)
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


class Outbox:
    """Results on their way from the pipeline's threads to the caller's, in order of completion.
    Once closed nothing more goes out: closing comes before the stop kills the workers, so a
    verdict decided after it (a crash, a reference gone) is the stop's doing, not the candidate's."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        self._queue.put(("closed", None, None))  # ends a caller waiting for its next result

    def put(self, result: Result) -> None:
        """A result nobody waits on (decided before any worker ran)."""
        self._queue.put(("result", result, threading.Event()))

    def emit(self, result: Result) -> None:
        """Hand a result to the caller and wait until it is stored (or the outbox closes)."""
        if self._closed.is_set():
            return
        stored = threading.Event()
        self._queue.put(("result", result, stored))
        while not stored.wait(0.1) and not self._closed.is_set():
            pass

    def bug(self, trace: str) -> None:
        self._queue.put(("bug", trace, None))

    def collect(self, count: Iterable[int]) -> Iterator[Result]:
        for _ in count:
            kind, payload, stored = self._queue.get()
            if kind == "closed":
                return
            if kind == "bug":
                raise RuntimeError(f"harness error in a pipeline thread:\n{payload}")
            yield payload
            stored.set()  # the caller has stored it and looked for tampering


class Pipeline:
    """One run's builds and evaluations on this machine. Use as a context manager: leaving it (an
    interrupt too) kills every worker the run started."""

    def __init__(self, plan: RunPlan, candidates: list[Candidate]):
        self.plan, self.candidates = plan, candidates
        self.active = ActiveSet()
        self.builds_total = 0
        self.builds_done = 0
        self._outbox = Outbox()
        self._reference_failures: dict[str, str] = {}
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()  # no build starts after it is set
        self._ready: ReadyQueue | None = None
        self._warmer: subprocess.Popen | None = None
        self.device = device_for(plan.config.device, plan.token)
        self.gate = self.device.pace  # on a CPU run, quiet around the timed calls: the CPU is what is timed

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        self._outbox.close()  # first: what the kill below decides is not a verdict
        self._stopping.set()
        if self._ready is not None:
            self._ready.stop()
        self.gate.close()  # no worker starts from now on: the kill below finds them all
        stop_run(self.plan.token)
        self.join()
        remove_run_scratch(self.plan.token)  # what the threads did not get to close
        if self._warmer is not None:  # still at work: the next run warms again
            self._warmer.kill()
            self._warmer.wait()

    def results(self) -> Iterator[Result]:
        """Every candidate's Result, diagnosed, as each is decided."""
        decided, runnable = self.plan.split(self.candidates)
        yield from decided
        if not runnable:
            return
        self._open(len(runnable))
        self._admit(runnable)
        yield from self._outbox.collect(range(len(runnable)))
        self.join()

    def join(self, timeout_s: float = 5) -> None:
        """Wait, `timeout_s` at most, for the run's threads: after `stop`, they reap the workers it killed."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def open_stream(self) -> None:
        """Keep the lanes, their workers and references up for candidates fed later (`feed`),
        until `stop`: what an API caller submitting one candidate at a time keeps warm."""
        self._open(math.inf)

    def feed(self, candidates: list[Candidate]) -> None:
        """Queue more candidates on a stream; their results come out of `stream()`."""
        decided, runnable = self.plan.split(candidates)
        for result in decided:
            self._outbox.put(result)
        self._admit(runnable)

    def stream(self) -> Iterator[Result]:
        """Results of everything fed, as each is decided, until `stop`."""
        return self._outbox.collect(itertools.count())

    def _open(self, expected: float) -> None:
        self._ready = ReadyQueue(self.plan.problem_order, expected)
        with self.gate.launching():  # a head start for the workers booting beside it
            self._warmer = self.plan.start_warming()
        for lane in range(max(1, len(self.plan.resources.gpus))):
            self._spawn(self._lane, lane)

    def _admit(self, runnable: list[Candidate]) -> None:
        to_build = [c for c in runnable if c.kind.built_ahead]
        self.builds_total += len(to_build)
        for candidate in runnable:
            self._ready.admit(candidate.problem_id)
        for candidate in runnable:
            if not candidate.kind.built_ahead:
                self._ready.put(candidate.problem_id, (candidate, None))
        self._start_builds(to_build)

    def _spawn(self, target: Callable, *args) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException:  # a harness bug: surface it in the caller's thread, never hang
                self._outbox.bug(traceback.format_exc())

        thread = threading.Thread(target=guarded, daemon=True)  # an interrupted run must not wait for them
        thread.start()
        self._threads.append(thread)

    def _emit(self, result: Result, candidate: Candidate) -> None:
        """The lane starts its next candidate only once this one's result is stored, so a write
        to the results is seen before that candidate runs and is blamed on the ones that ran
        (see run.py)."""
        self._outbox.emit(diagnosed(result, candidate))

    def _start_builds(self, to_build: list[Candidate]) -> None:
        work: queue.SimpleQueue = queue.SimpleQueue()
        for candidate in to_build:
            work.put(candidate)
        placement = self.plan.build_placement(len(to_build))
        lock = threading.Lock()

        def builder() -> None:
            while not self._stopping.is_set():
                try:
                    candidate = work.get_nowait()
                except queue.Empty:
                    return
                self._build_one(candidate, placement)
                with lock:
                    self.builds_done += 1

        for _ in range(min(self.plan.resources.jobs, len(to_build))):
            self._spawn(builder)

    def _build_one(self, candidate: Candidate, placement: Placement) -> None:
        problem = self.plan.problems[candidate.problem_id]
        outcome = build_ahead(candidate, problem, self.plan.config, self.plan.cache, placement,
                              lambda: self.active.running(candidate.rel_path), self.gate)
        decided = judged_by_build(Subject.of(self.plan.run_id, candidate, problem), candidate, self.plan.config, outcome)
        if decided is not None:
            self._ready.expect_fewer(candidate.problem_id)
            self._emit(decided, candidate)
        else:
            self._ready.put(candidate.problem_id, (candidate, outcome))

    def _lane(self, lane: int) -> None:
        plan = self.plan
        placement = plan.lane_placement(lane)
        if driver := plan.resources.driver_cpus(lane):  # this thread's clock bounds the timings: off the build cores
            os.sched_setaffinity(0, driver)
        with Lane(plan.config, plan.run_id, placement, plan.cache, self._reference_failures, self.device,
                  plan.resources.build_cpus, plan.resources.spares) as judge:
            while (item := self._next(lane, judge)) is not None:
                candidate, outcome = item
                key_dir = plan.cache.key_dir(candidate.code_hash)
                result = judge.judge(plan.problems[candidate.problem_id], candidate, key_dir, outcome,
                                     lambda: self.active.running(candidate.rel_path),
                                     later_of_problem=self._ready.more_of(candidate.problem_id))
                self._emit(result, candidate)

    def _next(self, lane: int, judge: Lane):
        """The lane's next candidate; while none is ready, it starts the references of problems
        whose candidates are still building (on a cold CPU run, beside the torch header's compile)."""
        while isinstance(item := self._ready.take(lane, judge.references_held if judge.can_prepare else None),
                         StartAhead):
            judge.prepare(self.plan.problems[item.problem_id])
        return item


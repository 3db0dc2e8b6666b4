"""A lane: one placement (one GPU, or the CPU) that evaluates candidates one at a time, keeping
the reference worker of the problem at hand for the next candidate of the same problem, and the
next worker booted ahead (confined, torch imported) while the current candidate is judged. On a
CPU run, a lane with nothing to judge yet starts the references of problems still building."""

from __future__ import annotations

import collections
import contextlib
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import ContextManager

from ..builds.cache import BuildCache, BuildOutcome
from ..judge import verdicts
from ..judge.candidate import CandidateRun
from ..judge.compare import FusedComparison
from ..judge.device import Device
from ..judge.reference import ReferenceFailed, ReferenceRunner
from ..records import Candidate, EvalConfig, Observations, Problem, Result, Subject
from ..worker.pace import RunStopped
from ..worker.parent import ConfinementFailed, Placement, Worker
from ..worker.protocol import Peaks
from .devices import device_for

# Harness errors judging candidates one after another that stop the run: one is a candidate
# bringing out a bug, this many a harness that cannot go on (a sticky CUDA error in the parent).
MAX_HARNESS_FAILURES = 3


class Lane:
    """Use as a context manager: entering it boots the spares, leaving it closes them and the
    reference worker it holds."""

    def __init__(self, config: EvalConfig, run_id: str, placement: Placement, cache: BuildCache,
                 reference_failures: dict[str, str], device: Device | None = None, boot_cpus: list[int] | None = None,
                 spares: int = 1):
        """`device`: the run's (by default the config's, for this lane alone: schedule/devices.py);
        `spares` workers boot ahead, keeping to `boot_cpus` until they get a job, paced by the
        device's pace. Spares ready what loading a reference and a Triton launch need where the
        device says (judge/device.py, `warm_spares`)."""
        self.config, self.run_id, self.placement, self.cache = config, run_id, placement, cache
        self.reference_failures = reference_failures  # problem id -> reason, shared by a run's lanes
        self.device = device or device_for(config.device)
        self.boot_cpus = boot_cpus
        self.reference: ReferenceRunner | None = None
        self.prepared: dict[str, ReferenceRunner] = {}  # started ahead, by problem
        self.peaks: Peaks | None = None  # this GPU's peak rates, measured by the lane's first reference
        # Booting ahead needs namespaces: without them a worker must know its key dir when it boots.
        self.spare_count = spares if placement.sandbox.namespaces else 0
        self.spares: collections.deque[Worker] = collections.deque()
        self.harness_failures = 0  # harness errors judging candidates, one after another
        self.fused = FusedComparison(placement.gpu or 0) if config.device == "cuda" else None

    def __enter__(self) -> Lane:
        """Boot the spares first, so that loading the fused comparison in this process (about 1 s
        on an H100) overlaps their boot; it still comes before the lane times anything."""
        try:
            self._top_up()
            if self.fused is not None:
                self.fused.warm()
        except BaseException:  # a boot refused (a stopping run): close those already booted
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self._drop_reference()
        for reference in self.prepared.values():
            reference.close()
        while self.spares:
            self.spares.popleft().close()  # never given a job: nothing of a candidate's to wind down

    def _boot(self) -> Worker:
        return Worker(self.placement, role="worker", device=self.config.device, timeout_s=self.config.timeout_s,
                      boot_cpus=self.boot_cpus, pace=self.device.pace, warm_ahead=self.device.warm_spares)

    def _worker(self) -> Worker | None:
        """The longest-booting spare worker that is still alive (or one booted now), the pool
        topped up behind it; None when workers cannot boot ahead."""
        if not self.spare_count:
            return None
        while self.spares and self.spares[0].exited():  # died booting (killed, out of memory): no candidate's
            self.spares.popleft().close()
        worker = self.spares.popleft() if self.spares else self._boot()
        try:
            self._top_up()
        except BaseException:  # a boot refused (a stopping run) or failed: the lane's exit closes this one too
            self.spares.appendleft(worker)
            raise
        return worker

    def _top_up(self) -> None:
        while len(self.spares) < self.spare_count:
            self.spares.append(self._boot())

    def _drop_reference(self) -> None:
        if self.reference is not None:
            self.reference.close()
            self.reference = None

    def judge(self, problem: Problem, candidate: Candidate, key_dir: Path, outcome: BuildOutcome | None,
              running: Callable[[], ContextManager] = contextlib.nullcontext, later_of_problem: bool = True) -> Result:
        """The candidate's Result, its builds in `key_dir` (its code's in the build cache). Its code
        runs inside `running()`. A reference that cannot start
        skips the problem's candidates; one that dies while a candidate runs is that candidate's
        crash, and is started afresh for the next. `later_of_problem`: whether candidates of the
        same problem may follow (the reference then keeps its expected outputs for them)."""
        subject = Subject.of(self.run_id, candidate, problem)
        if self.reference is not None and self.reference.problem.id != problem.id:
            self._drop_reference()
        if problem.id not in self.reference_failures and self.reference is None:
            self.reference = self.prepared.pop(problem.id, None) or self._started_reference(problem)
        if problem.id in self.reference_failures:
            verdict = verdicts.reference_failed(self.reference_failures[problem.id])
            return verdicts.result(subject, verdict, Observations(gpu=self.placement.gpu))
        run = CandidateRun(problem, candidate, self.config, self.device, key_dir, self.reference, self.run_id,
                           self.placement, outcome, self._worker(), later_of_problem, self.fused)
        try:
            with running():
                result = run.run()
            self.harness_failures = 0
            return result
        except ReferenceFailed as failed:
            self._drop_reference()
            return run.reference_died(str(failed).splitlines()[0])
        except (RunStopped, ConfinementFailed):
            raise
        except Exception:  # a harness bug this candidate brought out: its verdict, not the end of the run
            self._drop_reference()  # whatever state the reference was left in
            self.harness_failures += 1
            if self.harness_failures >= MAX_HARNESS_FAILURES:  # not one candidate's doing: the run stops
                raise
            return run.harness_failed(traceback.format_exc())

    @property
    def references_held(self) -> set[str]:
        return set(self.prepared) | ({self.reference.problem.id} if self.reference is not None else set())

    @property
    def can_prepare(self) -> bool:
        """Whether it may start another problem's reference ahead of its first candidate (judge/
        device.py, `prepared_references`)."""
        return len(self.prepared) < self.device.prepared_references

    def prepare(self, problem: Problem) -> None:
        """Start the problem's reference ahead of its first candidate."""
        if problem.id not in self.reference_failures and problem.id not in self.references_held:
            reference = self._started_reference(problem)
            if reference is not None:
                self.prepared[problem.id] = reference

    def _started_reference(self, problem: Problem) -> ReferenceRunner | None:
        """The problem's reference, started; None when it failed (recorded in reference_failures)."""
        reference = ReferenceRunner(problem, self.config, self.device, self.cache.key_dir(problem.source_hash),
                                    self.placement, peaks=self.peaks, worker=self._worker())
        try:
            reference.start()
        except ReferenceFailed as failed:
            self.reference_failures.setdefault(problem.id, f"not judged: the {str(failed).splitlines()[0]}")
            reference.close()
            return None
        self.peaks = self.peaks or reference.peaks
        return reference

"""A lane: one placement (one GPU, or the CPU) that evaluates candidates one at a time, keeping
the reference worker of the problem at hand for the next candidate of the same problem."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import ContextManager

from ..builds.cache import BuildCache, BuildOutcome
from ..judge import verdicts
from ..judge.candidate import CandidateRun
from ..judge.reference import ReferenceFailed, ReferenceRunner
from ..records import Candidate, EvalConfig, Observations, Problem, Result, Subject
from ..worker.parent import Placement


class Lane:
    """Use as a context manager: leaving it closes the reference worker it holds."""

    def __init__(self, config: EvalConfig, run_id: str, placement: Placement, cache: BuildCache,
                 reference_failures: dict[str, str]):
        self.config, self.run_id, self.placement, self.cache = config, run_id, placement, cache
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

    def judge(self, problem: Problem, candidate: Candidate, outcome: BuildOutcome | None,
              running: Callable[[], ContextManager] = contextlib.nullcontext) -> Result:
        """The candidate's Result. Its code runs inside `running()`. A reference that cannot start
        skips the problem's candidates; one that dies while a candidate runs is that candidate's
        crash, and is started afresh for the next."""
        subject = Subject.of(self.run_id, candidate, problem)
        if self.reference is not None and self.reference.problem.id != problem.id:
            self._drop_reference()
        if problem.id not in self.reference_failures and self.reference is None:
            self._start_reference(problem)
        if problem.id in self.reference_failures:
            verdict = verdicts.reference_failed(self.reference_failures[problem.id])
            return verdicts.result(subject, verdict, Observations(gpu=self.placement.gpu))
        run = CandidateRun(problem, candidate, self.config, self.cache.key_dir(candidate.code_hash), self.reference,
                           self.run_id, self.placement, outcome)
        try:
            with running():
                return run.run()
        except ReferenceFailed as failed:
            self._drop_reference()
            return run.reference_died(str(failed).splitlines()[0])

    def _start_reference(self, problem: Problem) -> None:
        self.reference = ReferenceRunner(problem, self.config, self.cache.key_dir(problem.source_hash), self.placement)
        try:
            self.reference.start(self.config.seed)
        except ReferenceFailed as failed:
            self.reference_failures.setdefault(problem.id, f"not judged: the {str(failed).splitlines()[0]}")
            self._drop_reference()

"""A lane: one placement (one GPU, or the CPU) that evaluates candidates one at a time, keeping
the reference worker of the problem at hand for the next candidate of the same problem."""

from __future__ import annotations

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

    def judge(self, problem: Problem, candidate: Candidate, outcome: BuildOutcome | None) -> Result:
        if self.reference is not None and self.reference.problem.id != problem.id:
            self._drop_reference()
        try:
            if problem.id not in self.reference_failures and self.reference is None:
                self.reference = ReferenceRunner(problem, self.config, self.cache.key_dir(problem.source_hash),
                                                 self.placement)
                self.reference.start(self.config.seed)
            if problem.id not in self.reference_failures:
                return CandidateRun(problem, candidate, self.config, self.cache.key_dir(candidate.code_hash),
                                    self.reference, self.run_id, self.placement, outcome).run()
        except ReferenceFailed as failed:
            self.reference_failures.setdefault(problem.id, f"not judged: the {str(failed).splitlines()[0]}")
            self._drop_reference()
        verdict = verdicts.reference_failed(self.reference_failures[problem.id])
        return verdicts.result(Subject.of(self.run_id, candidate, problem), verdict, Observations(gpu=self.placement.gpu))

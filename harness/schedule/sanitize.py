"""--memcheck's pass: once every candidate of a run was judged, each that passed goes under
compute-sanitizer (judge/memcheck.py) on the run's first GPU, one after another, so that no
timing of the run shares the GPU with it."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from tqdm import tqdm

from ..judge import memcheck, verdicts
from ..judge.diagnose import diagnose
from ..records import Candidate, Problem, Result, SanitizerStatus, Status
from ..worker.parent import Placement, remove_run_scratch, stop_run
from .plan import RunPlan


def unsanitized(results: list[Result], candidates: dict[str, Candidate], problems: dict[str, Problem]) -> list[Result]:
    """The results the pass is for: passed, with no pass that judged them yet (a resumed run's
    earlier pass kept those it judged), their candidate and problem found as they were judged (a
    resumed run may look at fewer problems, or a file may have changed since)."""
    def found(result: Result) -> bool:
        candidate, problem = candidates.get(result.candidate), problems.get(result.problem or "")
        return candidate is not None and candidate.source_hash == result.candidate_hash and problem is not None \
            and problem.source_hash == result.problem_hash

    return [result for result in results if result.status is Status.ok and found(result)
            and all(one.status is SanitizerStatus.inconclusive for one in result.sanitized)]


def sanitize_passed(results: list[Result], candidates: dict[str, Candidate], plan: RunPlan, sanitizer: str,
                    record: Callable[[Result], None]) -> float:
    """Each of `results` (passed, unsanitized: `unsanitized`) under the sanitizer, `record`ed as
    its pass ends (its verdict changed where the sanitizer found errors); the seconds it took."""
    began = time.monotonic()
    placement = plan.lane_placement(0)
    try:
        with tqdm(total=len(results), unit="cand", desc="memcheck", file=sys.stderr) as bar:
            for result in results:
                candidate, problem = candidates[result.candidate], plan.problems[result.problem or ""]
                record(sanitize_one(result, candidate, problem, plan, placement, sanitizer))
                bar.set_postfix_str(result.candidate, refresh=False)
                bar.update(1)
    finally:
        stop_run(plan.token)
        remove_run_scratch(plan.token)
    return round(time.monotonic() - began, 3)


def sanitize_one(result: Result, candidate: Candidate, problem: Problem, plan: RunPlan, placement: Placement,
                 sanitizer: str) -> Result:
    """One passed candidate under each tool its code gets, and its Result after them."""
    key_dir = plan.cache.key_dir(candidate.code_hash)
    passes = [memcheck.sanitize(problem, candidate, plan.config, key_dir, placement, sanitizer, tool)
              for tool in memcheck.tools_for(candidate.code or "")]
    checked = verdicts.sanitized(result, passes)
    if checked.status is not result.status:
        checked.diagnosis = diagnose(checked, candidate.code)
    return checked

"""What a command judges: the problems and candidates under the directories it was given, found
without importing torch, so that a wrong path is refused at once (the command line checks its paths
with `checked_paths` before anything heavier is imported)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import UsageError
from ..records import Candidate, Problem
from .candidates import discover_candidates
from .problems import ProblemError, discover_problem_files, without_problem


def checked_paths(problems_dir: Path, candidates_dir: Path | None) -> None:
    """A UsageError, saying what to pass instead, where either directory is not one."""
    if not problems_dir.is_dir():
        raise UsageError(f"problems directory {problems_dir} "
                         + ("is a file, not a directory" if problems_dir.exists() else "does not exist"))
    if candidates_dir is None:
        return
    if candidates_dir.is_file():
        raise UsageError(f"{candidates_dir} is a file: eval takes a directory of <problem_id>/<name>.py files; "
                         f"to evaluate this one file: python -m harness explain {candidates_dir}")
    if not candidates_dir.is_dir():
        raise UsageError(f"candidates directory {candidates_dir} does not exist")


def discover(problems_dir: Path, candidates_dir: Path | None) -> tuple[list[Problem], list[Candidate]]:
    """The usable problems and the candidates for them (none where `candidates_dir` is None); a
    warning on stderr for each problem file that cannot be used."""
    checked_paths(problems_dir, candidates_dir)
    try:
        problems, unusable = discover_problem_files(problems_dir)
    except ProblemError as exc:
        raise UsageError(str(exc)) from None
    for reason in unusable.values():
        print(f"warning: {reason}; its candidates are not run", file=sys.stderr)
    if candidates_dir is None:
        return problems, []
    return problems, without_problem(discover_candidates(candidates_dir, problems), unusable)


def select(problems: list[Problem], candidates: list[Candidate],
           ids: list[str] | None) -> tuple[list[Problem], list[Candidate]]:
    """Only the problems `ids` names (all where None), and their candidates."""
    if not ids:
        return problems, candidates
    unknown = set(ids) - {p.id for p in problems}
    if unknown:
        raise UsageError(f"unknown problem id(s): {', '.join(sorted(unknown))}")
    return [p for p in problems if p.id in ids], [c for c in candidates if c.problem_id in ids]


def some_named(candidates: list[Candidate], problems_dir: Path) -> None:
    """A UsageError where not one of `candidates` names a problem under `problems_dir` (a run would
    record every one `skipped`): flat KernelBench files pointed at another level's folder, say."""
    if candidates and all(c.problem_id is None for c in candidates):
        example = candidates[0].rel_path
        raise UsageError(f"none of the {len(candidates)} candidates names a problem in {problems_dir} (e.g. {example}): "
                         "pass the problems they were written for with --problems (a KernelBench level's folder for "
                         "level_L_problem_N_... files), or file them as <problem_id>/<name>.py; nothing recorded")

"""Render a run as a self-contained HTML page (inline CSS, no network) with Jinja2."""

from __future__ import annotations

import math
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from .records import Result, RunInfo, Status
from .score import summarize

STATUS_ORDER = {s: i for i, s in enumerate(Status)}


def _rank_key(result: Result) -> tuple:
    # Correct ones first, fastest first; then the failures grouped by verdict.
    speed = result.speedup if result.speedup is not None and math.isfinite(result.speedup) else 0.0
    return (STATUS_ORDER[result.status], -speed, result.candidate)


def group_by_problem(results: list[Result]) -> list[tuple[str, list[Result]]]:
    problems: dict[str, list[Result]] = {}
    for result in results:
        problems.setdefault(result.problem or "(no problem)", []).append(result)
    return [(pid, sorted(rows, key=_rank_key)) for pid, rows in sorted(problems.items())]


def render_index(run: RunInfo | None, results: list[Result], out_dir: Path) -> Path:
    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html", "j2"]))
    page = env.get_template("index.html.j2").render(
        run=run, summary=summarize(results), problems=group_by_problem(results), statuses=list(Status),
    )
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path

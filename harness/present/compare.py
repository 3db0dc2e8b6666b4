"""Run against run: which candidates got fixed, broke, changed verdict, got faster or slower, and
how the run's figures (geomean speedup, fast_p) moved, and each model's (pass@k among them)."""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from ..records import Result, Status
from .site import details_link, environment
from .summary import (PASS_AT, UNNAMED, ModelRow, RunSummary, format_rate, format_speedup, model_of, model_table, natural_key,
                      speedup_interval, summarize_run, timed_by_clock)

ORDER = ["fixed", "broken", "changed", "faster", "slower", "new", "gone", "same"]


class Change(BaseModel):
    problem: str | None
    candidate: str
    change: str  # one of ORDER
    before: str | None
    after: str | None
    before_speedup: float | None
    after_speedup: float | None
    why: str = ""  # what decided faster, slower or same


class ModelChange(BaseModel):
    """One model's row of the model table in each run (None: it wrote no candidate of that run)."""

    model: str
    before: ModelRow | None
    after: ModelRow | None


class Comparison(BaseModel):
    changes: list[Change]
    transitions: list[tuple[str, str, int]]  # (verdict before, verdict after, count) where the verdict changed
    before: RunSummary
    after: RunSummary
    models: list[ModelChange] = []  # where either run's paths name models (or --group-by gives a pattern)


def speedup_range(result: Result) -> tuple[float, float] | None:
    """Where the speedup plausibly lies: the medians' 95% intervals, or failing those the middle
    halves of the timed calls (wider: a change beyond them is no accident either)."""
    interval = speedup_interval(result)
    if interval is not None:
        return interval
    mine, reference = result.timing, result.speedup_reference_timing
    if timed_by_clock(result) or mine is None or reference is None or not mine.median_ms - mine.iqr_ms / 2 > 0:
        return None
    return ((reference.median_ms - reference.iqr_ms / 2) / (mine.median_ms + mine.iqr_ms / 2),
            (reference.median_ms + reference.iqr_ms / 2) / (mine.median_ms - mine.iqr_ms / 2))


def speed_change(a: Result, b: Result, noise: float) -> tuple[str, str]:
    """faster or slower only where the two speedups' ranges do not overlap; without ranges, beyond `noise`."""
    ra, rb = speedup_range(a), speedup_range(b)
    if ra and rb:
        if rb[0] > ra[1]:
            return "faster", f"{rb[0]:.3g}–{rb[1]:.3g}× clear of {ra[0]:.3g}–{ra[1]:.3g}×"
        if rb[1] < ra[0]:
            return "slower", f"{rb[0]:.3g}–{rb[1]:.3g}× clear of {ra[0]:.3g}–{ra[1]:.3g}×"
        return "same", f"{ra[0]:.3g}–{ra[1]:.3g}× and {rb[0]:.3g}–{rb[1]:.3g}× overlap"
    if a.speedup and b.speedup and math.isfinite(a.speedup) and math.isfinite(b.speedup) \
            and abs(b.speedup / a.speedup - 1) > noise:
        return ("faster" if b.speedup > a.speedup else "slower"), f"more than {noise:.0%} apart (no intervals)"
    return "same", f"within {noise:.0%} (no intervals)"


def classify(a: Result | None, b: Result | None, noise: float) -> tuple[str, str]:
    if a is None or b is None:
        return ("new" if a is None else "gone"), ""
    if (a.status is Status.ok) != (b.status is Status.ok):
        return ("fixed" if b.status is Status.ok else "broken"), ""
    if a.status is not b.status:
        return "changed", ""
    if a.status is Status.ok:
        return speed_change(a, b, noise)
    return "same", ""


def compare_runs(before: list[Result], after: list[Result], noise: float = 0.05,
                 pattern: re.Pattern | None = None) -> Comparison:
    """Match results by (problem, candidate); the model table of each run (`model_table`, by
    `pattern` where --group-by gives one) side by side."""
    old = {(r.problem, r.candidate): r for r in before}
    new = {(r.problem, r.candidate): r for r in after}
    changes = []
    for key in sorted(old.keys() | new.keys(), key=lambda k: (natural_key(k[0] or ""), natural_key(k[1]))):
        a, b = old.get(key), new.get(key)
        kind, why = classify(a, b, noise)
        changes.append(Change(problem=key[0], candidate=key[1], change=kind, why=why,
                              before=a.status.value if a else None, after=b.status.value if b else None,
                              before_speedup=a.speedup if a else None, after_speedup=b.speedup if b else None))
    moved = Counter((c.before, c.after) for c in changes if c.before and c.after and c.before != c.after)
    return Comparison(changes=changes, transitions=[(x, y, n) for (x, y), n in moved.most_common()],
                      before=summarize_run(before), after=summarize_run(after), models=model_changes(before, after, pattern))


def model_changes(before: list[Result], after: list[Result], pattern: re.Pattern | None) -> list[ModelChange]:
    """Each model of either run with its row in each, where a path of either names a model: a run
    whose paths name none is then one row, UNNAMED, rather than no table."""
    if all(model_of(r, pattern) == UNNAMED for r in before + after):
        return []
    rows_a = {row.model: row for row in model_table(before, pattern, unnamed_alone=True)}
    rows_b = {row.model: row for row in model_table(after, pattern, unnamed_alone=True)}
    return [ModelChange(model=model, before=rows_a.get(model), after=rows_b.get(model))
            for model in sorted(rows_a.keys() | rows_b.keys(), key=natural_key)]


def render_compare(run_a: str, run_b: str, comparison: Comparison, path: Path, site_a: Path, site_b: Path) -> Path:
    """The comparison page, linking each candidate's details in both runs' sites."""
    path.parent.mkdir(parents=True, exist_ok=True)
    changes = sorted(comparison.changes, key=lambda c: ORDER.index(c.change))

    def link(site: Path, change: Change) -> str:
        page, anchor = details_link(change.problem, change.candidate).split("#")
        return f"{Path(os.path.relpath(site / page, path.parent)).as_posix()}#{anchor}"

    path.write_text(environment().get_template("compare.html.j2").render(
        run_a=run_a, run_b=run_b, changes=changes, counts=counts(comparison), comparison=comparison,
        figures=figure_deltas(comparison), models=[(change.model, model_deltas(change)) for change in comparison.models],
        link_a=lambda c: link(site_a, c), link_b=lambda c: link(site_b, c)), encoding="utf-8")
    return path


def counts(comparison: Comparison) -> dict[str, int]:
    found = Counter(c.change for c in comparison.changes)
    return {kind: found[kind] for kind in ORDER if found[kind]}


def figure_deltas(comparison: Comparison) -> list[tuple[str, str, str]]:
    """(figure, before, after) for the run's headline figures."""
    return summary_deltas(comparison.before, comparison.after)


def model_deltas(change: ModelChange) -> list[tuple[str, str, str]]:
    """(figure, before, after) for a model's figures: the run's, with pass@k after the correct rate;
    a run it wrote nothing of has 0 attempted and no rates."""
    nothing = summarize_run([])
    a, b = change.before, change.after
    rows = summary_deltas(a.figures if a else nothing, b.figures if b else nothing)
    passes = [(f"pass@{k}", format_rate(a.pass_at[f"{k}"] if a else None), format_rate(b.pass_at[f"{k}"] if b else None))
              for k in PASS_AT]
    return rows[:2] + passes + rows[2:]


def summary_deltas(a: RunSummary, b: RunSummary) -> list[tuple[str, str, str]]:
    """(figure, before, after) for a RunSummary's figures, as the terminal and the page show them."""
    rows = [("attempted", str(a.attempted), str(b.attempted)),
            ("correct", format_rate(a.correct_rate), format_rate(b.correct_rate)),
            ("compiled", format_rate(a.compiled_rate), format_rate(b.compiled_rate)),
            ("geomean speedup", format_speedup(a.geomean_speedup), format_speedup(b.geomean_speedup))]
    return rows + [(f"fast_{p}", format_rate(a.fast_p[p]), format_rate(b.fast_p[p])) for p in a.fast_p]


def describe_changes(comparison: Comparison) -> str:
    """What changed, one line each; then the count of each kind, the verdict transitions, the
    figures and each model's (a line per model)."""
    lines = [f"{c.change:7s} {c.problem or '-'}  {c.candidate}  {c.before or '-'} -> {c.after or '-'}  "
             f"{format_speedup(c.before_speedup)} -> {format_speedup(c.after_speedup)}" + (f"  ({c.why})" if c.why else "")
             for c in comparison.changes if c.change != "same"]
    lines.append(", ".join(f"{kind} {n}" for kind, n in counts(comparison).items()) or "no results")
    if comparison.transitions:
        lines.append("verdicts: " + ", ".join(f"{x} -> {y} {n}" for x, y, n in comparison.transitions))
    lines.append("figures: " + ", ".join(f"{name} {x} -> {y}" for name, x, y in figure_deltas(comparison)))
    lines += [f"model {change.model}: " + ", ".join(f"{name} {x} -> {y}" for name, x, y in model_deltas(change))
              for change in comparison.models]
    return "\n".join(lines)

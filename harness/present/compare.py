"""Run against run: which candidates got fixed, broke, got faster or slower."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from ..records import Result, Status
from .site import environment
from .summary import format_speedup


class Change(BaseModel):
    problem: str | None
    candidate: str
    change: str  # fixed, broken, faster, slower, same, new, gone
    before: str | None
    after: str | None
    before_speedup: float | None
    after_speedup: float | None


def compare_runs(before: list[Result], after: list[Result], noise: float = 0.05) -> list[Change]:
    """Match results by (problem, candidate); a speedup change within `noise` counts as the same."""
    old = {(r.problem, r.candidate): r for r in before}
    new = {(r.problem, r.candidate): r for r in after}
    changes = []
    for key in sorted(old.keys() | new.keys(), key=lambda k: (k[0] or "", k[1])):
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            kind = "new" if a is None else "gone"
        elif (a.status is Status.ok) != (b.status is Status.ok):
            kind = "fixed" if b.status is Status.ok else "broken"
        elif a.status is Status.ok and a.speedup and b.speedup and abs(b.speedup / a.speedup - 1) > noise:
            kind = "faster" if b.speedup > a.speedup else "slower"
        else:
            kind = "same"
        changes.append(Change(problem=key[0], candidate=key[1], change=kind,
                              before=a.status.value if a else None, after=b.status.value if b else None,
                              before_speedup=a.speedup if a else None, after_speedup=b.speedup if b else None))
    return changes


def render_compare(run_a: str, run_b: str, changes: list[Change], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    order = ["fixed", "broken", "faster", "slower", "new", "gone", "same"]
    changes = sorted(changes, key=lambda c: order.index(c.change))
    counts = {kind: sum(1 for c in changes if c.change == kind) for kind in order}
    path.write_text(environment().get_template("compare.html.j2").render(
        run_a=run_a, run_b=run_b, changes=changes, counts=counts), encoding="utf-8")
    return path


def describe_changes(changes: list[Change]) -> str:
    """What changed, one line each, then the count of each kind of change."""
    lines = [f"{c.change:7s} {c.problem or '-'}  {c.candidate}  {c.before or '-'} -> {c.after or '-'}  "
             f"{format_speedup(c.before_speedup)} -> {format_speedup(c.after_speedup)}"
             for c in changes if c.change != "same"]
    counts = {kind: sum(1 for c in changes if c.change == kind) for kind in dict.fromkeys(c.change for c in changes)}
    lines.append(", ".join(f"{kind} {n}" for kind, n in counts.items()) or "no results")
    return "\n".join(lines)

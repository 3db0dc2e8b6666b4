"""A run at a glance: the figures KernelBench reports (compiled and correct rates, fast_p,
geometric-mean speedup) and the tables printed at the end of a run and by `explain`."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from ..records import Candidate, Problem, Result, Status

MAX_SUMMARY_ROWS = 40  # problems listed at the end of a run; the report has every candidate
TERMINAL_WIDTH = 100
FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)


class RunSummary(BaseModel):
    total: int
    by_status: dict[str, int]
    compiled_rate: float  # got past the build (not compile_error or load_error), among those attempted
    correct_rate: float  # ok among those attempted
    fast_p: dict[str, float]  # fraction of attempted that are ok and faster than p x reference
    geomean_speedup: float | None  # over the correct ones


def summarize_run(results: list[Result]) -> RunSummary:
    counts = Counter(r.status.value for r in results)
    attempted = [r for r in results if r.status is not Status.skipped]
    n = len(attempted) or 1
    correct = [r for r in attempted if r.status is Status.ok]
    compiled = [r for r in attempted if r.status not in (Status.compile_error, Status.load_error)]
    speeds = [r.speedup for r in correct if r.speedup is not None and 0 < r.speedup < math.inf]
    return RunSummary(
        total=len(results),
        by_status={s.value: counts.get(s.value, 0) for s in Status},
        compiled_rate=len(compiled) / n,
        correct_rate=len(correct) / n,
        fast_p={f"{p:g}": sum(1 for r in correct if (r.speedup or 0) > p) / n for p in FAST_P_THRESHOLDS},
        geomean_speedup=math.exp(sum(map(math.log, speeds)) / len(speeds)) if speeds else None,
    )


def format_speedup(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" if math.isfinite(value) else "inf"


def natural_key(text: str) -> tuple:
    """Sort key that orders digit runs by value: 1_, 2_, 12_ rather than 1_, 12_, 2_."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part.lower())
                 for part in re.split(r"(\d+)", text) if part)


def clip(text: str, width: int, keep_end: bool = False) -> str:
    """At most `width` characters, an ellipsis marking what was cut (candidate names differ at their end)."""
    if len(text) <= width:
        return text
    return "…" + text[-(width - 1):] if keep_end else text[:width - 1] + "…"


def finite_speedup(result: Result) -> float:
    return result.speedup if result.speedup is not None and math.isfinite(result.speedup) else 0.0


def timed_by_clock(result: Result) -> bool:
    """Whether its speedup is for the time the harness's clock vouched for, not for its reported
    times (`timing_disagrees`): those, and any interval or spread of them, say nothing then."""
    return "timing_disagrees" in result.flags


def speedup_interval(result: Result) -> tuple[float, float] | None:
    """The speedups the two medians' 95% intervals allow (None where the timing gives none, or
    where the speedup is not for the reported times: `timed_by_clock`)."""
    mine, reference = result.timing, result.speedup_reference_timing
    if timed_by_clock(result) or mine is None or reference is None or \
            None in (mine.ci_low_ms, mine.ci_high_ms, reference.ci_low_ms, reference.ci_high_ms) or not mine.ci_low_ms > 0:
        return None
    return reference.ci_low_ms / mine.ci_high_ms, reference.ci_high_ms / mine.ci_low_ms


def summary_table(results: list[Result], full_table: Path | str) -> str:
    """The end of a run in at most TERMINAL_WIDTH columns: per problem, correct of attempted and the
    best speedup with its candidate; the verdict counts; where every candidate's row is."""
    by_problem: dict[str, list[Result]] = {}
    for r in results:
        by_problem.setdefault(r.problem or "(no problem)", []).append(r)
    rows = [("problem", "correct", "best", "best candidate")]
    for problem in sorted(by_problem, key=natural_key)[:MAX_SUMMARY_ROWS]:
        attempted = [r for r in by_problem[problem] if r.status is not Status.skipped]
        correct = [r for r in attempted if r.status is Status.ok]
        best = max(correct, key=finite_speedup, default=None)
        rows.append((problem, f"{len(correct)}/{len(attempted)}", format_speedup(best.speedup) if best else "-",
                     best.candidate if best else "-"))
    widths = [min(36, max(len(row[0]) for row in rows)), 7, 8]
    last = TERMINAL_WIDTH - sum(widths) - 2 * len(widths)
    lines = [f"{clip(p, widths[0]):{widths[0]}}  {c:>{widths[1]}}  {b:>{widths[2]}}  {clip(name, last, keep_end=True)}"
             for p, c, b, name in rows]
    if len(by_problem) > MAX_SUMMARY_ROWS:
        lines.append(f"... {len(by_problem) - MAX_SUMMARY_ROWS} more problems")
    summary = summarize_run(results)
    counts = ", ".join(f"{k} {v}" for k, v in summary.by_status.items() if v)
    lines.append(f"\n{summary.total} candidates: {counts}")
    built = [r for r in results if r.build_s is not None]
    if built:
        cached = sum(r.build_cached for r in built)
        lines.append(f"builds ahead of evaluation: {len(built) - cached} compiled ({sum(r.build_s for r in built):.0f} s "
                     f"of compiling), {cached} from the build cache")
    for flag, while_ in (("busy_machine", "other processes kept the CPU busy"),
                         ("gpu_throttled", "the GPU's clocks were held down")):
        if flagged := sum(flag in r.flags for r in results):
            lines.append(f"timed while {while_}: {flagged} (flag {flag})")
    lines.append(f"every candidate with its verdict and reason: {full_table}")
    return "\n".join(lines)


def explanation(result: Result) -> str:
    """A candidate's verdict, cause and hint, as `harness explain` prints them."""
    lines = [f"{result.candidate} ({result.problem}): {result.status.value}"
             + (f", {format_speedup(result.speedup)}" if result.speedup is not None else "")]
    if result.error:
        lines.append(f"  reason: {result.error}")
    if result.diagnosis:
        d = result.diagnosis
        lines += [f"  cause:  {d.category}: {d.summary}", f"  hint:   {d.hint}"]
        lines += [f"  | {line}" for line in d.evidence]
        if d.other_causes:
            lines.append(f"  also:   {', '.join(d.other_causes)}")
    return "\n".join(lines)


def listing(problems: list[Problem], candidates: list[Candidate]) -> str:
    """`harness list`: each problem with the candidates found for it."""
    lines = []
    for problem in problems:
        mine = [c for c in candidates if c.problem_id == problem.id]
        lines.append(f"{problem.id:40s} {len(mine):3d} candidate(s)  {problem.path}")
        lines += [f"    {c.rel_path}  [{c.kind.value}]" + (f"  (no code: {c.extraction_error})" if c.code is None else "")
                  for c in mine]
    known = {p.id for p in problems}
    lines += [f"(no problem) {c.rel_path}" + (f"  ({c.extraction_error})" if c.extraction_error else "")
              for c in candidates if c.problem_id not in known]
    return "\n".join(lines)

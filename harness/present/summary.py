"""A run at a glance: the figures KernelBench reports (compiled and correct rates, fast_p,
geometric-mean speedup) and the tables printed at the end of a run and by `explain`."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from ..records import Candidate, Problem, Result, SanitizerStatus, Status
from ..store import RunListed

MAX_SUMMARY_ROWS = 40  # problems listed at the end of a run; the report has every candidate
TERMINAL_WIDTH = 100
FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)


class RunSummary(BaseModel):
    """The figures of a set of results (a run, a problem, a generator), each defined once here: every
    rate is over the candidates attempted (not skipped), and is None where none was."""

    total: int
    by_status: dict[str, int]
    attempted: int
    correct: int
    compiled_rate: float | None  # got past the build (not compile_error or load_error)
    correct_rate: float | None  # ok
    fast_p: dict[str, float | None]  # ok and faster than p x the reference
    geomean_speedup: float | None  # over the correct ones
    best: Result | None  # the fastest correct one


def summarize_run(results: list[Result]) -> RunSummary:
    counts = Counter(r.status.value for r in results)
    attempted = [r for r in results if r.status is not Status.skipped]
    correct = [r for r in attempted if r.status is Status.ok]
    compiled = [r for r in attempted if r.status not in (Status.compile_error, Status.load_error)]
    speeds = [r.speedup for r in correct if r.speedup is not None and 0 < r.speedup < math.inf]

    def rate(count: int) -> float | None:
        return count / len(attempted) if attempted else None

    return RunSummary(
        total=len(results), by_status={s.value: counts.get(s.value, 0) for s in Status},
        attempted=len(attempted), correct=len(correct),
        compiled_rate=rate(len(compiled)), correct_rate=rate(len(correct)),
        fast_p={f"{p:g}": rate(sum(1 for r in correct if (r.speedup or 0) > p)) for p in FAST_P_THRESHOLDS},
        geomean_speedup=math.exp(sum(map(math.log, speeds)) / len(speeds)) if speeds else None,
        best=max(correct, key=finite_speedup, default=None),
    )


# How a candidate's path names the model (generator) that wrote it and which of its samples it is,
# in the layouts runs are kept in: `<model>_sample_<k>` (any separator), a `sample_<k>` file in a
# folder per model, KernelBench's `level_L_problem_N_sample_S_kernel.py` in a folder per model
# (flat in the candidates folder: one model), `<model>/<problem>/...` and `<problem>/<model>/...`.
MODEL_SAMPLE = re.compile(r"^(?P<model>.+?)[_.-]+sample[_.-]*(?P<sample>\d+)$", re.IGNORECASE)
BARE_SAMPLE = re.compile(r"^(?:sample|s)[_.-]*(?P<sample>\d+)$", re.IGNORECASE)
KERNELBENCH_FILE = re.compile(r"^level_\d+_problem_\d+_sample_(?P<sample>\d+)_kernel$")
ONE_MODEL = "(one model)"
UNNAMED = "(unnamed)"  # the model of a candidate whose path names none
PASS_AT = (1, 5)  # pass@k reported for these k, over problems with at least k attempted samples


def model_and_sample(candidate: str, problem: str | None, pattern: re.Pattern | None = None) -> tuple[str | None, int | None]:
    """The model that wrote a candidate (None: its path names none) and its sample index (None:
    not named), from its path below the candidates folder; with `pattern` (--group-by) the model
    is its first group."""
    if pattern is not None:
        match = pattern.search(candidate)
        return ((match.group(1) if match.groups() else match.group(0)) if match else "(unmatched)"), None
    parts = candidate.split("/")
    stem = parts[-1].rsplit(".", 1)[0]
    folders = [part for part in parts[:-1] if part != problem]
    if found := KERNELBENCH_FILE.match(stem) or BARE_SAMPLE.match(stem):
        return (folders[-1] if folders else ONE_MODEL), int(found["sample"])
    if found := MODEL_SAMPLE.match(stem):
        return found["model"], int(found["sample"])
    return (folders[-1] if folders else None), None


def pass_at_k(samples: dict[str, tuple[int, int]], k: int) -> float | None:
    """The unbiased pass@k estimator (Chen et al., 2021), 1 - C(n-c, k) / C(n, k) per problem with
    n attempted samples of which c are correct, averaged over the problems with n >= k (None: none)."""
    rates = [1.0 - math.comb(n - c, k) / math.comb(n, k) for n, c in samples.values() if n >= k]
    return sum(rates) / len(rates) if rates else None


class ModelRow(BaseModel):
    """One model's figures over its samples (the per-model table): as `summarize_run` defines them,
    with pass@k over problems."""

    model: str
    problems: int
    samples: int  # the most samples of one problem
    figures: RunSummary
    pass_at: dict[str, float | None]


def model_of(result: Result, pattern: re.Pattern | None = None) -> str:
    """The model of a result as the model table names it: `model_and_sample`'s, UNNAMED where its path names none."""
    return model_and_sample(result.candidate, result.problem, pattern)[0] or UNNAMED


def selected(results: list[Result], statuses: frozenset[str] | None, model: str | None,
             pattern: re.Pattern | None = None) -> list[Result]:
    """The results with one of these verdicts (all where None), of this model (`model_of`, by
    `pattern` where --group-by gives one)."""
    return [r for r in results if (statuses is None or r.status.value in statuses) and
            (model is None or model_of(r, pattern) == model)]


def model_table(results: list[Result], pattern: re.Pattern | None = None, unnamed_alone: bool = False) -> list[ModelRow]:
    """Per model, where the paths name models (or a pattern is given); else empty (a table of file
    names had listed 14 "generators" for the shipped run's 16 candidates), unless `unnamed_alone`
    (a run compared with one whose paths name models): then its one row, UNNAMED."""
    groups: dict[str, list[tuple[Result, int | None]]] = {}
    for result in results:
        model, sample = model_and_sample(result.candidate, result.problem, pattern)
        groups.setdefault(model or UNNAMED, []).append((result, sample))
    if set(groups) <= {UNNAMED} and not unnamed_alone:
        return []
    table = []
    for model, rows in sorted(groups.items(), key=lambda item: natural_key(item[0])):
        per_problem = attempted_per_problem([r for r, _ in rows])
        counts = Counter(result.problem for result, _ in rows)
        table.append(ModelRow(model=model, problems=len(counts), samples=max(counts.values()),
                              figures=summarize_run([r for r, _ in rows]),
                              pass_at={f"{k}": pass_at_k(per_problem, k) for k in PASS_AT}))
    return table


def attempted_per_problem(results: list[Result]) -> dict[str, tuple[int, int]]:
    """Per problem, (samples attempted, correct ones): what pass@k is estimated from."""
    per_problem: dict[str, tuple[int, int]] = {}
    for result in results:
        if result.status is not Status.skipped:
            n, c = per_problem.get(result.problem or "", (0, 0))
            per_problem[result.problem or ""] = (n + 1, c + (result.status is Status.ok))
    return per_problem


def summary_json(results: list[Result]) -> str:
    """The run's figures, per problem and per model, as JSON (summary.json beside results.jsonl):
    what a script that ranks runs or models reads without parsing the terminal."""
    by_problem: dict[str, list[Result]] = {}
    for result in results:
        by_problem.setdefault(result.problem or "(no problem)", []).append(result)
    return json.dumps({"run": figures_json(summarize_run(results)),
                       "problems": {problem: figures_json(summarize_run(rows)) for problem, rows in sorted(by_problem.items())},
                       "models": model_figures(results)}, indent=1)


def model_figures(results: list[Result], pattern: re.Pattern | None = None) -> list[dict]:
    """The model table as JSON (summary.json's and the export's "models")."""
    return [{"model": row.model, "problems": row.problems, "samples": row.samples, "pass_at": row.pass_at,
             **figures_json(row.figures)} for row in model_table(results, pattern)]


def figures_json(summary: RunSummary) -> dict:
    """A RunSummary as JSON: its best candidate by path."""
    return summary.model_dump(exclude={"best"}) | {"best": summary.best.candidate if summary.best else None}


def model_lines(rows: list[ModelRow]) -> list[str]:
    """The per-model table for the terminal, where there are two models or more."""
    if len(rows) < 2:
        return []
    width = min(30, max(len(row.model) for row in rows))
    lines = [f"\n{'model':{width}}  samples  correct  " + "  ".join(f"pass@{k}" for k in PASS_AT) + "  fast_1  geomean"]
    for row in rows[:MAX_SUMMARY_ROWS]:
        figures = row.figures
        lines.append(f"{clip(row.model, width):{width}}  {row.samples:>7}  {format_rate(figures.correct_rate):>7}  "
                     + "  ".join(f"{format_rate(row.pass_at[f'{k}']):>6}" for k in PASS_AT)
                     + f"  {format_rate(figures.fast_p['1']):>6}  {format_speedup(figures.geomean_speedup):>7}")
    return lines


def format_rate(value: float | None) -> str:
    """A rate as a percentage; a dash where nothing was attempted."""
    return "–" if value is None else f"{value:.0%}"


def figures_line(summary: RunSummary) -> str:
    """The run's headline figures in one line, as KernelBench reports them."""
    if not summary.attempted:
        return "nothing attempted (every candidate skipped): no rates"
    return (f"{summary.attempted} attempted: correct {format_rate(summary.correct_rate)}, compiled "
            f"{format_rate(summary.compiled_rate)}, fast_{'/'.join(summary.fast_p)} "
            + "/".join(map(format_rate, summary.fast_p.values()))
            + f", geomean {format_speedup(summary.geomean_speedup)}")


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
    """The speedup's own 95% interval where its timing was paired (a GPU's), else the speedups the
    two medians' 95% intervals allow (None where the timing gives none, or where the speedup is not
    for the reported times: `timed_by_clock`)."""
    mine, reference = result.timing, result.speedup_reference_timing
    if not timed_by_clock(result) and result.speedup_interval:
        return result.speedup_interval[0], result.speedup_interval[1]
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
        figures = summarize_run(by_problem[problem])
        best = figures.best
        rows.append((problem, f"{figures.correct}/{figures.attempted}", format_speedup(best.speedup) if best else "-",
                     best.candidate if best else "-"))
    widths = [min(36, max(len(row[0]) for row in rows)), 7, 8]
    last = TERMINAL_WIDTH - sum(widths) - 2 * len(widths)
    lines = [f"{clip(p, widths[0]):{widths[0]}}  {c:>{widths[1]}}  {b:>{widths[2]}}  {clip(name, last, keep_end=True)}"
             for p, c, b, name in rows]
    if len(by_problem) > MAX_SUMMARY_ROWS:
        lines.append(f"... {len(by_problem) - MAX_SUMMARY_ROWS} more problems")
    summary = summarize_run(results)
    counts = ", ".join(f"{k} {v}" for k, v in summary.by_status.items() if v)
    lines += model_lines(model_table(results))
    lines.append(f"\n{summary.total} candidates: {counts}")
    lines.append(figures_line(summary))
    built = [r for r in results if r.build_s is not None]
    if built:
        cached = sum(r.build_cached for r in built)
        lines.append(f"builds ahead of evaluation: {len(built) - cached} compiled ({sum(r.build_s for r in built):.0f} s "
                     f"of compiling), {cached} from the build cache")
    if sanitized := [r for r in results if r.sanitized]:
        found = sum(any(one.status is SanitizerStatus.errors for one in r.sanitized) for r in sanitized)
        unjudged = sum(all(one.status is SanitizerStatus.inconclusive for one in r.sanitized) for r in sanitized)
        lines.append(f"memcheck: {len(sanitized)} under compute-sanitizer "
                     f"({sum(one.seconds for r in sanitized for one in r.sanitized):.0f} s), {found} with errors"
                     + (f", {unjudged} it could not judge" if unjudged else ""))
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


def run_table(runs: list[RunListed]) -> str:
    """`harness runs`: one line per run, newest first: its id (what report, compare, export and
    --resume take), when it started, how many candidates with their verdicts, on what device."""
    if not runs:
        return "no runs yet"
    lines = [f"{'run':24}  {'started':16}  {'candidates':>10}  verdicts"]
    for run in runs:
        verdicts = ", ".join(f"{status} {run.verdicts[status]}" for status in (s.value for s in Status) if status in run.verdicts)
        state = "" if run.finished_at else " (unfinished)"
        line = f"{run.run_id:24}  {run.started_at[:16].replace('T', ' '):16}  {run.candidates:>10}  {verdicts or '-'}{state}"
        lines.append(clip(f"{line}  on {run.device_name}", TERMINAL_WIDTH))
    return "\n".join(lines)


def history_table(runs: list[tuple[RunListed, list[Result]]], problem: str | None, model: str | None) -> str:
    """`harness history`: one problem's or one model's figures in each run that has candidates of
    it, oldest first: correct of attempted, pass@1 (a model's), the best speedup and its candidate."""
    what = f"problem {problem}" if problem else f"model {model}"
    lines = [f"{'run':24}  {'started':16}  {'correct':>9}  {'pass@1':>6}  {'best':>8}  best candidate"]
    for run, results in runs:
        mine = [r for r in selected(results, None, model) if problem is None or r.problem == problem]
        if not mine:
            continue
        figures = summarize_run(mine)
        best = figures.best
        lines.append(clip(f"{run.run_id:24}  {run.started_at[:16].replace('T', ' '):16}  "
                          f"{figures.correct:>4}/{figures.attempted:<4}  "
                          f"{format_rate(pass_at_k(attempted_per_problem(mine), 1)):>6}  "
                          f"{format_speedup(best.speedup) if best else '-':>8}  {best.candidate if best else '-'}",
                          TERMINAL_WIDTH, keep_end=True))
    return "\n".join(lines) if len(lines) > 1 else f"no run has candidates of {what}"

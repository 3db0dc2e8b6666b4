"""Render a run as a self-contained static site (inline CSS, SVG and script; no network): an
index that reads at 10 or 5,000 candidates (problem overview, per-generator table, one ranked
table per problem) and one page per candidate."""

from __future__ import annotations

import hashlib
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from pydantic import BaseModel
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from ..inputs.candidates import KERNELBENCH_NAME
from ..records import Result, RunInfo, Status, TimingStats
from .summary import RunSummary, finite_speedup, natural_key, speedup_interval, summarize_run

STATUS_ORDER = {s: i for i, s in enumerate(Status)}
# Speedup buckets for the distribution chart: (upper bound, label).
SPEEDUP_BINS = [(0.25, "<0.25×"), (0.5, "0.25–0.5×"), (1.0, "0.5–1×"), (1.5, "1–1.5×"), (2.0, "1.5–2×"),
                (4.0, "2–4×"), (math.inf, "≥4×")]
NO_PROBLEM = "(no problem)"


def environment() -> Environment:
    env = Environment(loader=PackageLoader("harness.present", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["ms"] = lambda v: "–" if v is None else f"{v:.4g} ms"
    env.filters["sci"] = lambda v: "–" if v is None else f"{v:.2e}"
    env.filters["speedup"] = lambda v: "–" if v is None else ("inf" if not math.isfinite(v) else f"{v:.2f}×")
    return env


def page_name(result: Result) -> str:
    return page_file(result.problem, result.candidate)


def page_file(problem: str | None, candidate: str) -> str:
    """A stable, file-safe page name per (problem, candidate): the same in every run."""
    digest = hashlib.sha1(f"{problem}/{candidate}".encode()).hexdigest()[:10]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", candidate)[-60:]
    return f"{stem}-{digest}.html"


def shown_name(result: Result) -> str:
    """A candidate's path below its problem's folder: where the problem is named already, the
    part that tells candidates apart."""
    prefix = f"{result.problem}/"
    return result.candidate[len(prefix):] if result.problem and result.candidate.startswith(prefix) else result.candidate


def _rank_key(result: Result) -> tuple:
    # Correct ones first, fastest first; then the failures grouped by verdict.
    return (STATUS_ORDER[result.status], -finite_speedup(result), natural_key(result.candidate))


def group_by_problem(results: list[Result]) -> list[tuple[str, list[Result]]]:
    """Results per problem, problems in natural order (1_, 2_, 12_), each ranked."""
    problems: dict[str, list[Result]] = {}
    for result in results:
        problems.setdefault(result.problem or NO_PROBLEM, []).append(result)
    return [(pid, sorted(problems[pid], key=_rank_key)) for pid in sorted(problems, key=natural_key)]


class ProblemRow(BaseModel):
    """One line of the overview: how a problem went."""

    problem: str
    attempted: int
    correct: int
    best: Result | None  # the fastest correct candidate
    reference_ms: float | None
    verdicts: list[tuple[str, int]]  # verdict -> count, in verdict order
    near_misses: int


def overview(groups: list[tuple[str, list[Result]]]) -> list[ProblemRow]:
    rows = []
    for problem, results in groups:
        attempted = [r for r in results if r.status is not Status.skipped]
        correct = [r for r in attempted if r.status is Status.ok]
        counts = Counter(r.status for r in results)
        reference = next((r.reference_timing.median_ms for r in results if r.reference_timing), None)
        rows.append(ProblemRow(problem=problem, attempted=len(attempted), correct=len(correct),
                               best=max(correct, key=finite_speedup, default=None), reference_ms=reference,
                               verdicts=[(s.value, counts[s]) for s in Status if counts[s]],
                               near_misses=sum("near_miss" in r.flags for r in results)))
    return rows


class GeneratorRow(BaseModel):
    """One line of the per-generator table: the candidates that share a name across problems."""

    name: str
    summary: RunSummary
    problems: int


def generator_of(result: Result, pattern: re.Pattern | None) -> str:
    """Which generator (model, prompt, sample) wrote a candidate: the first group of `pattern` in
    its path; by default its path below the problem folder, without the suffix (KernelBench's
    flat files: sample_S)."""
    if pattern is not None:
        match = pattern.search(result.candidate)
        return (match.group(1) if match.groups() else match.group(0)) if match else "(unmatched)"
    kernelbench = KERNELBENCH_NAME.match(result.candidate)
    if kernelbench:
        return f"sample_{kernelbench.group(3)}"
    return result.candidate.split("/", 1)[-1].rsplit(".", 1)[0]


def generator_table(results: list[Result], pattern: re.Pattern | None = None) -> list[GeneratorRow]:
    """Per generator, when candidates share a name across problems (or a pattern is given); else empty."""
    groups: dict[str, list[Result]] = {}
    for result in results:
        groups.setdefault(generator_of(result, pattern), []).append(result)
    if pattern is None and all(len({r.problem for r in rows}) < 2 for rows in groups.values()):
        return []
    return [GeneratorRow(name=name, summary=summarize_run(rows), problems=len({r.problem for r in rows}))
            for name, rows in sorted(groups.items(), key=lambda item: natural_key(item[0]))]


def speedup_histogram_svg(results: list[Result]) -> Markup:
    speeds = [r.speedup for r in results if r.status is Status.ok and r.speedup is not None and r.speedup > 0]
    counts = [0] * len(SPEEDUP_BINS)
    for value in speeds:  # an infinite one (a record from elsewhere) in the last bin
        counts[next((i for i, (upper, _) in enumerate(SPEEDUP_BINS) if value < upper), len(SPEEDUP_BINS) - 1)] += 1
    width, height, bar, top_margin = 70 * len(SPEEDUP_BINS), 150, 52, 18  # the margin holds the tallest count
    top = max(counts) or 1
    parts = [f'<svg class="chart" viewBox="0 0 {width} {top_margin + height + 24}" width="{width}" '
             f'height="{top_margin + height + 24}" role="img" aria-label="speedup distribution of correct candidates">']
    for i, (count, (upper, label)) in enumerate(zip(counts, SPEEDUP_BINS)):
        h = round(height * count / top)
        x, y = i * 70 + 9, top_margin + height - h
        colour = "#2e9e52" if upper > 1.0 else "#d08a3a"
        parts.append(f'<rect x="{x}" y="{y}" width="{bar}" height="{h}" fill="{colour}"><title>{label}: '
                     f'{count}</title></rect>')
        parts.append(f'<text x="{x + bar / 2}" y="{y - 4}" text-anchor="middle">{count}</text>')
        parts.append(f'<text x="{x + bar / 2}" y="{top_margin + height + 16}" text-anchor="middle">{label}</text>')
    parts.append(f'<line x1="0" y1="{top_margin + height}" x2="{width}" y2="{top_margin + height}" stroke="#9aa3b2"/>'
                 '</svg>')
    return Markup("".join(parts))


def log_ticks(low: float, high: float) -> list[float]:
    """1, 2 and 5 times the powers of ten between low and high (none where those are no range)."""
    if not 0 < low <= high < math.inf:
        return []
    return [m * 10.0 ** e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
            for m in (1, 2, 5) if low <= m * 10.0 ** e <= high]


def timing_strip_svg(series: list[tuple[str, TimingStats | None, str]]) -> Markup:
    """Each timing's samples as dots on one log-scale axis, with its interquartile box and median:
    a 26x speedup and a 1.05x one both read right, and where the rows overlap the speedup is noise.
    Each row is labelled in its own colour (the legend is the row)."""
    rows = [(name, stats, colour) for name, stats, colour in series if stats and stats.samples_ms]
    # The axis spans the samples, kept to 1e-9 to 1e9 ms: a record from elsewhere holding 1e-320 or
    # 1e300 would put its powers of ten out of a float's range.
    samples = [min(max(v, 1e-9), 1e9) for _, stats, _ in rows for v in stats.samples_ms if 0 < v < math.inf]
    if not samples:
        return Markup("")
    span = math.log10(max(samples)) - math.log10(min(samples))
    pad = max(0.05, span * 0.05)
    lo, hi = math.log10(min(samples)) - pad, math.log10(max(samples)) + pad
    left, width, row_h = 190, 600, 34
    height = row_h * len(rows)

    def x(value: float) -> float:  # odd values (a record from elsewhere: 0, negative, NaN, inf) sit at an edge
        position = math.log10(value) if 0 < value < math.inf else (hi if value == math.inf else lo)
        return left + (min(max(position, lo), hi) - lo) / (hi - lo) * width

    parts = [f'<svg class="chart timing" data-scale="log" viewBox="0 0 {left + width + 10} {height + 30}" '
             f'width="{left + width + 10}" height="{height + 30}" role="img" aria-label="timing samples, log scale">']
    for tick in log_ticks(10 ** lo, 10 ** hi):
        parts.append(f'<line x1="{x(tick):.1f}" y1="0" x2="{x(tick):.1f}" y2="{height}" stroke="#eceff4"/>'
                     f'<text class="tick" x="{x(tick):.1f}" y="{height + 14}" text-anchor="middle">{tick:g}</text>')
    parts.append(f'<text x="{left + width}" y="{height + 28}" text-anchor="end">ms per call (log scale)</text>')
    for i, (name, stats, colour) in enumerate(rows):
        mid = i * row_h + row_h / 2
        q1, _, q3 = statistics.quantiles(stats.samples_ms, n=4, method="inclusive") if stats.n > 1 else [stats.median_ms] * 3
        parts.append(f'<text class="legend" x="{left - 8}" y="{mid + 4}" text-anchor="end" fill="{colour}">{name} '
                     f'({stats.median_ms:.4g} ms)</text>')
        for j, value in enumerate(v for v in stats.samples_ms if v > 0):
            jitter = ((j * 7919) % 17 - 8) / 8 * (row_h * 0.3)  # spread without randomness: the page is stable
            parts.append(f'<circle cx="{x(value):.1f}" cy="{mid + jitter:.1f}" r="2" fill="{colour}" '
                         'fill-opacity=".45"/>')
        if q1 > 0:
            parts.append(f'<rect x="{x(q1):.1f}" y="{mid - row_h * 0.38:.1f}" width="{max(1.0, x(q3) - x(q1)):.1f}" '
                         f'height="{row_h * 0.76:.1f}" fill="none" stroke="{colour}"><title>{name}: interquartile range '
                         f'{q1:.4g}–{q3:.4g} ms</title></rect>')
        parts.append(f'<line x1="{x(stats.median_ms):.1f}" y1="{mid - row_h * 0.42:.1f}" x2="{x(stats.median_ms):.1f}" '
                     f'y2="{mid + row_h * 0.42:.1f}" stroke="{colour}" stroke-width="2.5"><title>{name}: median '
                     f'{stats.median_ms:.4g} ms, {stats.describe_n()}</title></line>')
    parts.append("</svg>")
    return Markup("".join(parts))


def cause_counts(results: list[Result]) -> list[tuple[str, int]]:
    """How often each diagnosed cause occurs in a run, most common first."""
    counts: dict[str, int] = {}
    for result in results:
        if result.diagnosis:
            counts[result.diagnosis.category] = counts.get(result.diagnosis.category, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def timing_series(result: Result) -> list[tuple[str, TimingStats | None, str]]:
    return [("candidate", result.timing, "#3b6fd8"), ("reference", result.speedup_reference_timing, "#6b7385"),
            ("reference, default math", result.reference_default_math_timing, "#b07cc6")]


def highlighted(code: str | None) -> Markup:
    if not code:
        return Markup("")
    return Markup(highlight(code, PythonLexer(), HtmlFormatter(linenos="table", cssclass="code")))


def render_site(run: RunInfo | None, results: list[Result], code_for: Callable[[Result], str | None],
                out_dir: Path, group_by: re.Pattern | None = None) -> Path:
    """index.html plus c/<page>.html per candidate; returns the index path. `group_by` picks the
    generator out of a candidate's path."""
    env = environment()
    pages = out_dir / "c"
    pages.mkdir(parents=True, exist_ok=True)
    code_css = Markup(HtmlFormatter(cssclass="code").get_style_defs(".code"))
    for result in results:
        page = env.get_template("candidate.html.j2").render(
            run=run, r=result, code=highlighted(code_for(result)), code_css=code_css,
            interval=speedup_interval(result), timing_svg=timing_strip_svg(timing_series(result)),
        )
        (pages / page_name(result)).write_text(page, encoding="utf-8")
    index = out_dir / "index.html"
    index.write_text(render_index(run, results, group_by, env), encoding="utf-8")
    return index


def degenerate_problems(results: list[Result]) -> dict[str, str]:
    """Problems whose results carry degenerate_problem, with what makes them so."""
    found = {}
    for result in results:
        if "degenerate_problem" in result.flags and result.problem not in found:
            found[result.problem] = next((e for e in result.evidence if e.startswith("the problem is degenerate")),
                                         "a trivial output passes it")
    return found


def render_index(run: RunInfo | None, results: list[Result], group_by: re.Pattern | None = None,
                 env: Environment | None = None) -> str:
    """The index: run header, problem overview, per-generator table, charts, one ranked table per problem."""
    problems = group_by_problem(results)
    return (env or environment()).get_template("index.html.j2").render(
        run=run, summary=summarize_run(results), problems=problems, overview=overview(problems),
        generators=generator_table(results, group_by), statuses=list(Status), chart=speedup_histogram_svg(results),
        page_name=page_name, shown_name=shown_name, causes=cause_counts(results), interval=speedup_interval,
        group_by=group_by.pattern if group_by else None, degenerate=degenerate_problems(results),
    )

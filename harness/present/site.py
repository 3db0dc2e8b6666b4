"""Render a run as a self-contained static site (no network; it opens from file://): an index that
reads at 10 or 5,000 candidates (problem overview, per-generator table, one ranked table per
problem), one page per problem holding its candidates' details, and the stylesheet and script
they all link, written once."""

from __future__ import annotations

import base64
import gzip
import hashlib
import itertools
import json
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

from ..records import Result, RunInfo, Status, TimingStats
from .summary import PASS_AT, RunSummary, finite_speedup, format_rate, model_table, natural_key, speedup_interval, summarize_run

STATUS_ORDER = {s: i for i, s in enumerate(Status)}
# Speedup buckets for the distribution chart: (upper bound, label).
SPEEDUP_BINS = [(0.25, "<0.25×"), (0.5, "0.25–0.5×"), (1.0, "0.5–1×"), (1.5, "1–1.5×"), (2.0, "1.5–2×"),
                (4.0, "2–4×"), (math.inf, "≥4×")]
NO_PROBLEM = "(no problem)"


def environment() -> Environment:
    env = Environment(loader=PackageLoader("harness.present", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["ms"] = lambda v: "–" if v is None else f"{v:.4g} ms"
    env.filters["sci"] = lambda v: "–" if v is None else f"{v:.2e}"
    env.filters["rate"] = format_rate
    env.filters["speedup"] = lambda v: "–" if v is None else ("inf" if not math.isfinite(v) else f"{v:.2f}×")
    return env


def file_safe(readable: str, unique: str) -> str:
    """A file- and URL-safe name, the same in every run: the tail of `readable`, and a digest of
    `unique` that tells apart what the tail alone would not."""
    digest = hashlib.sha1(unique.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', readable)[-60:]}-{digest}"


def problem_page(problem: str | None) -> str:
    """The file under p/ holding a problem's candidates."""
    return f"{file_safe(problem or NO_PROBLEM, problem or NO_PROBLEM)}.html"


def candidate_anchor(problem: str | None, candidate: str) -> str:
    """The #anchor that shows a candidate's details on its problem's page: its file's name (the
    index has thousands of links: the path is told by the page)."""
    return file_safe(candidate.rsplit("/", 1)[-1], f"{problem}/{candidate}")


def details_link(problem: str | None, candidate: str) -> str:
    """Where a candidate's details are, from the site's root."""
    return f"p/{problem_page(problem)}#{candidate_anchor(problem, candidate)}"


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
    """One line of the overview: how a problem went (its figures as summarize_run defines them)."""

    problem: str
    figures: RunSummary
    reference_ms: float | None
    verdicts: list[tuple[str, int]]  # verdict -> count, in verdict order
    near_misses: int


def overview(groups: list[tuple[str, list[Result]]]) -> list[ProblemRow]:
    rows = []
    for problem, results in groups:
        counts = Counter(r.status for r in results)
        reference = next((r.reference_timing.median_ms for r in results if r.reference_timing), None)
        rows.append(ProblemRow(problem=problem, figures=summarize_run(results), reference_ms=reference,
                               verdicts=[(s.value, counts[s]) for s in Status if counts[s]],
                               near_misses=sum("near_miss" in r.flags for r in results)))
    return rows


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


# Tick marks on a log axis, the coarsest that gives LEAST_TICKS: a candidate and its reference a
# few percent apart span less than a decade, where 1, 2 and 5 gave a chart a single label.
LOG_MANTISSAS = ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9))
LEAST_TICKS = 3


def log_ticks(low: float, high: float) -> list[float]:
    """Round values between low and high to mark a log axis: 1, 2 and 5 times the powers of ten,
    finer mantissas where those are too few, evenly spaced round values where the range is narrower
    still (none where low and high are no range)."""
    if not 0 < low <= high < math.inf:
        return []
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for mantissas in LOG_MANTISSAS:
        ticks = [m * 10.0 ** e for e in decades for m in mantissas if low <= m * 10.0 ** e <= high]
        if len(ticks) >= LEAST_TICKS:
            return ticks
    return even_ticks(low, high)


def even_ticks(low: float, high: float) -> list[float]:
    """Round values evenly spaced between low and high: a step of 1, 2 or 5 times a power of ten
    that gives LEAST_TICKS of them or more."""
    step = 10.0 ** math.floor(math.log10(max(high - low, 1e-300)))
    for factor in (1, 0.5, 0.2, 0.1):
        if math.floor(high / (step * factor)) - math.ceil(low / (step * factor)) + 1 >= LEAST_TICKS:
            step *= factor
            break
    return [round(k * step, 12) for k in range(math.ceil(low / step), math.floor(high / step) + 1)]


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
                     f'<text class="tick" x="{x(tick):.1f}" y="{height + 14}" text-anchor="middle">{tick:.4g}</text>')
    parts.append(f'<text x="{left + width}" y="{height + 28}" text-anchor="end">ms per call (log scale)</text>')
    for i, (name, stats, colour) in enumerate(rows):
        mid = i * row_h + row_h / 2
        q1, _, q3 = statistics.quantiles(stats.samples_ms, n=4, method="inclusive") if stats.n > 1 else [stats.median_ms] * 3
        parts.append(f'<text class="legend" x="{left - 8}" y="{mid + 4}" text-anchor="end" fill="{colour}">{name} '
                     f'({stats.median_ms:.4g} ms)</text>')
        parts.append(sample_dots([v for v in stats.samples_ms if v > 0], x, mid, row_h * 0.3, colour))
        if q1 > 0:
            parts.append(f'<rect x="{x(q1):.1f}" y="{mid - row_h * 0.38:.1f}" width="{max(1.0, x(q3) - x(q1)):.1f}" '
                         f'height="{row_h * 0.76:.1f}" fill="none" stroke="{colour}"><title>{name}: interquartile range '
                         f'{q1:.4g}–{q3:.4g} ms</title></rect>')
        parts.append(f'<line x1="{x(stats.median_ms):.1f}" y1="{mid - row_h * 0.42:.1f}" x2="{x(stats.median_ms):.1f}" '
                     f'y2="{mid + row_h * 0.42:.1f}" stroke="{colour}" stroke-width="2.5"><title>{name}: median '
                     f'{stats.median_ms:.4g} ms, {stats.describe_n()}</title></line>')
    parts.append("</svg>")
    return Markup("".join(parts))


def sample_dots(samples: list[float], x: Callable[[float], float], mid: float, spread: float, colour: str) -> str:
    """A row's samples as one path of zero-length round-capped strokes, a dot each: a fifth of the
    markup of a <circle> per sample. Drawn in order of time taken, each dot a move from the last in
    whole pixels (as sharp as the chart shows): small repeated steps, which gzip packs to 60% of
    absolute positions."""
    # Jittered without randomness (the page is stable), so that dots of equal times stay apart.
    points = [(round(x(value)), round(mid + ((j * 7919) % 17 - 8) / 8 * spread)) for j, value in enumerate(sorted(samples))]
    steps = [f"m{x1 - x0} {y1 - y0}h0" for (x0, y0), (x1, y1) in itertools.pairwise(points)]
    dots = (f"M{points[0][0]} {points[0][1]}h0" + "".join(steps)) if points else ""
    return f'<path class="samples" d="{dots}" stroke="{colour}" stroke-opacity=".45" stroke-width="4" stroke-linecap="round"/>'


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


class NumberedLines(HtmlFormatter):
    """pygments' HTML with each line of code in a span.line, which the stylesheet numbers: the table
    of line numbers (linenos="table") had doubled the code's markup."""

    def wrap(self, source):
        return super().wrap((is_code, f'<span class="line">{line}</span>' if is_code else line)
                            for is_code, line in source)


def highlighted(code: str | None) -> Markup:
    if not code:
        return Markup("")
    return Markup(highlight(code, PythonLexer(), NumberedLines(cssclass="code")))


def render_site(run: RunInfo | None, results: list[Result], code_for: Callable[[Result], str | None],
                out_dir: Path, group_by: re.Pattern | None = None) -> Path:
    """index.html, p/<problem>.html per problem holding its candidates' details, and assets/ (the
    stylesheet and script every page links); returns the index path. `group_by` picks the generator
    out of a candidate's path."""
    env = environment()
    write_assets(env, out_dir / "assets")
    pages = out_dir / "p"
    pages.mkdir(parents=True, exist_ok=True)
    for problem, ranked in group_by_problem(results):
        (pages / problem_page(problem)).write_text(render_problem(env, run, problem, ranked, code_for), encoding="utf-8")
    index = out_dir / "index.html"
    index.write_text(render_index(run, results, group_by, env), encoding="utf-8")
    return index


def write_assets(env: Environment, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    code_css = Markup(HtmlFormatter(cssclass="code").get_style_defs(".code"))
    (folder / "report.css").write_text(env.get_template("report.css").render(code_css=code_css), encoding="utf-8")
    (folder / "report.js").write_text(env.get_template("report.js").render(), encoding="utf-8")


# Candidates per packed block of a problem's page: opening one unpacks its block alone, so a problem
# of 5,000 samples opens as fast as one of 50 (all in one block took 1.5 s and 225 MB of the
# browser's heap); gzip sees no further back than 32 kB anyway, a candidate or two.
CANDIDATES_PER_BLOCK = 50


def render_problem(env: Environment, run: RunInfo | None, problem: str, ranked: list[Result],
                   code_for: Callable[[Result], str | None]) -> str:
    """A problem's page: its candidates' details, each rendered here, packed in blocks; the first
    block also holds the list of them (anchor "")."""
    def anchor(result: Result) -> str:
        return candidate_anchor(result.problem, result.candidate)

    details = env.get_template("_candidate.html.j2")
    blocks = []
    for start in range(0, max(len(ranked), 1), CANDIDATES_PER_BLOCK):
        fragments = {anchor(r): details.render(run=run, r=r, code=highlighted(code_for(r)), interval=speedup_interval(r),
                                               timing_svg=timing_strip_svg(timing_series(r)))
                     for r in ranked[start:start + CANDIDATES_PER_BLOCK]}
        blocks.append((list(fragments), fragments))
    blocks[0][1][""] = env.get_template("_candidates.html.j2").render(problem=problem, rows=ranked, anchor=anchor)
    return env.get_template("problem.html.j2").render(
        problem=problem, count=len(ranked), blocks=[(anchors, packed(fragments)) for anchors, fragments in blocks],
        assets="../assets/")


def packed(fragments: dict[str, str]) -> str:
    """base64 of the gzipped JSON, which the page's script unpacks (DecompressionStream): gzip finds
    what one candidate's markup repeats of the last's. mtime 0: the same run gives the same page."""
    text = json.dumps(fragments, ensure_ascii=False, separators=(",", ":"))
    return base64.b64encode(gzip.compress(text.encode(), compresslevel=9, mtime=0)).decode("ascii")


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
    rows = overview(problems)
    return (env or environment()).get_template("index.html.j2").render(
        run=run, summary=summarize_run(results), problems=problems, overview=rows,
        figures_of={row.problem: row.figures for row in rows},
        generators=model_table(results, group_by), statuses=list(Status), chart=speedup_histogram_svg(results),
        link=lambda r: details_link(r.problem, r.candidate), shown_name=shown_name, assets="assets/", causes=cause_counts(results), interval=speedup_interval, pass_at=PASS_AT,
        group_by=group_by.pattern if group_by else None, degenerate=degenerate_problems(results),
    )

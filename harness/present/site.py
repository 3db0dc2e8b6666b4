"""Render a run as a self-contained static site (inline CSS, SVG and script; no network): a
leaderboard and one page per candidate."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer

from ..records import Result, RunInfo, Status, TimingStats
from .summary import summarize_run

STATUS_ORDER = {s: i for i, s in enumerate(Status)}
# Speedup buckets for the distribution chart: (upper bound, label).
SPEEDUP_BINS = [(0.25, "<0.25×"), (0.5, "0.25–0.5×"), (1.0, "0.5–1×"), (1.5, "1–1.5×"), (2.0, "1.5–2×"),
                (4.0, "2–4×"), (math.inf, "≥4×")]
TIMING_BINS = 30


def environment() -> Environment:
    env = Environment(loader=PackageLoader("harness.present", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["ms"] = lambda v: "–" if v is None else f"{v:.4g} ms"
    env.filters["sci"] = lambda v: "–" if v is None else f"{v:.2e}"
    env.filters["speedup"] = lambda v: "–" if v is None else ("inf" if not math.isfinite(v) else f"{v:.2f}×")
    return env


def page_name(result: Result) -> str:
    """A stable, file-safe page name per (problem, candidate)."""
    digest = hashlib.sha1(f"{result.problem}/{result.candidate}".encode()).hexdigest()[:10]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", result.candidate)[-60:]
    return f"{stem}-{digest}.html"


def _rank_key(result: Result) -> tuple:
    # Correct ones first, fastest first; then the failures grouped by verdict.
    speed = result.speedup if result.speedup is not None and math.isfinite(result.speedup) else 0.0
    return (STATUS_ORDER[result.status], -speed, result.candidate)


def group_by_problem(results: list[Result]) -> list[tuple[str, list[Result]]]:
    problems: dict[str, list[Result]] = {}
    for result in results:
        problems.setdefault(result.problem or "(no problem)", []).append(result)
    return [(pid, sorted(rows, key=_rank_key)) for pid, rows in sorted(problems.items())]


def speedup_histogram_svg(results: list[Result]) -> Markup:
    speeds = [r.speedup for r in results if r.status is Status.ok and r.speedup is not None]
    counts = [0] * len(SPEEDUP_BINS)
    for value in speeds:
        counts[next(i for i, (upper, _) in enumerate(SPEEDUP_BINS) if value < upper)] += 1
    width, height, bar = 70 * len(SPEEDUP_BINS), 150, 52
    top = max(counts) or 1
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height + 40}" width="{width}" height="{height + 40}" '
             f'role="img" aria-label="speedup distribution of correct candidates">']
    for i, (count, (upper, label)) in enumerate(zip(counts, SPEEDUP_BINS)):
        h = round(height * count / top)
        x = i * 70 + 9
        colour = "#2e9e52" if upper > 1.0 else "#d08a3a"
        parts.append(f'<rect x="{x}" y="{height - h}" width="{bar}" height="{h}" fill="{colour}"><title>{label}: '
                     f'{count}</title></rect>')
        parts.append(f'<text x="{x + bar / 2}" y="{height - h - 4}" text-anchor="middle">{count}</text>')
        parts.append(f'<text x="{x + bar / 2}" y="{height + 16}" text-anchor="middle">{label}</text>')
    parts.append(f'<line x1="0" y1="{height}" x2="{width}" y2="{height}" stroke="#9aa3b2"/></svg>')
    return Markup("".join(parts))


def cause_counts(results: list[Result]) -> list[tuple[str, int]]:
    """How often each diagnosed cause occurs in a run, most common first."""
    counts: dict[str, int] = {}
    for result in results:
        if result.diagnosis:
            counts[result.diagnosis.category] = counts.get(result.diagnosis.category, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def timing_histogram_svg(candidate: TimingStats | None, reference: TimingStats | None) -> Markup:
    """Both sample distributions on one axis: where they overlap, the speedup is noise."""
    series = [(s, colour, name) for s, colour, name in ((candidate, "#3b6fd8", "candidate"),
                                                        (reference, "#9aa3b2", "reference")) if s]
    if not series:
        return Markup("")
    low = min(min(s.samples_ms) for s, _, _ in series)
    high = max(max(s.samples_ms) for s, _, _ in series)
    span = (high - low) or max(high, 1e-9) * 0.01
    width, height = 600, 140
    step = width / TIMING_BINS
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height + 34}" width="{width}" height="{height + 34}" '
             'role="img" aria-label="timing distribution">']
    for offset, (stats, colour, name) in enumerate(series):
        counts = [0] * TIMING_BINS
        for sample in stats.samples_ms:
            counts[min(TIMING_BINS - 1, int((sample - low) / span * TIMING_BINS))] += 1
        top = max(counts)
        for i, count in enumerate(counts):
            h = height * count / top
            parts.append(f'<rect x="{i * step + offset * step / 2:.1f}" y="{height - h:.1f}" width="{step / 2:.1f}" '
                         f'height="{h:.1f}" fill="{colour}"><title>{name}: {count}</title></rect>')
        parts.append(f'<text x="{8 + offset * 140}" y="{height + 30}" fill="{colour}">■ {name} '
                     f'(median {stats.median_ms:.4g} ms)</text>')
    parts.append(f'<text x="0" y="{height + 14}">{low:.4g} ms</text>'
                 f'<text x="{width}" y="{height + 14}" text-anchor="end">{high:.4g} ms</text></svg>')
    return Markup("".join(parts))


def highlighted(code: str | None) -> Markup:
    if not code:
        return Markup("")
    return Markup(highlight(code, PythonLexer(), HtmlFormatter(linenos="table", cssclass="code")))


def render_site(run: RunInfo | None, results: list[Result], code_for: Callable[[Result], str | None],
                out_dir: Path) -> Path:
    """index.html (leaderboard) plus c/<page>.html per candidate; returns the index path."""
    env = environment()
    pages = out_dir / "c"
    pages.mkdir(parents=True, exist_ok=True)
    code_css = Markup(HtmlFormatter(cssclass="code").get_style_defs(".code"))
    for result in results:
        page = env.get_template("candidate.html.j2").render(
            run=run, r=result, code=highlighted(code_for(result)), code_css=code_css,
            timing_svg=timing_histogram_svg(result.timing, result.reference_timing),
        )
        (pages / page_name(result)).write_text(page, encoding="utf-8")
    index = out_dir / "index.html"
    index.write_text(env.get_template("index.html.j2").render(
        run=run, summary=summarize_run(results), problems=group_by_problem(results), statuses=list(Status),
        chart=speedup_histogram_svg(results), page_name=page_name, causes=cause_counts(results),
    ), encoding="utf-8")
    return index

"""Report pieces: ranking, charts, run comparison, exports."""

import csv
import io
import math
import random
import re
import tempfile
import time
from pathlib import Path

import pytest

from harness.present.export import kernelbench_sample, to_csv
from harness.records import Phase, Result, Status, TimingStats
from harness.present.compare import compare_runs, describe_changes, render_compare, speedup_range
from harness.present.site import (details_link, group_by_problem, render_index, render_site, speedup_histogram_svg,
                                  timing_strip_svg)
from harness.present.summary import natural_key, speedup_interval, summary_table

from tests.unit.present.html_tree import parse, unpacked
from tests.unit.present.synthetic import GENERATORS, IN_A_WORKER, synthetic_results, varied_code, worker_log
from tests.unit.present.synthetic import timing as synthetic_timing


def timing(median):
    return TimingStats(median_ms=median, iqr_ms=0.1, mean_ms=median, min_ms=median, max_ms=median, n=3,
                       samples_ms=[median] * 3, clock="perf_counter")


def make(candidate, status, speedup=None, problem="p"):
    return Result(run_id="r", problem=problem, candidate=candidate, status=status, speedup=speedup,
                  candidate_hash="h" + candidate, timing=timing(1.0) if speedup else None,
                  reference_timing=timing(speedup) if speedup else None)


def details(site, result) -> str:
    """A candidate's details, as its link from the index shows them."""
    page, anchor = details_link(result.problem, result.candidate).split("#")
    return unpacked((site / page).read_text())[anchor]


def test_leaderboard_ranks_correct_fastest_first_then_failures_by_verdict():
    rows = group_by_problem([make("slow", Status.ok, 0.5), make("bad", Status.crash), make("fast", Status.ok, 3.0),
                             make("wrong", Status.mismatch)])
    assert [r.candidate for r in rows[0][1]] == ["fast", "slow", "wrong", "bad"]


def test_links_to_details_are_unique_file_and_url_safe_and_stable():
    a, b = make("x/y z.py", Status.ok), make("x/y_z.py", Status.ok)
    links = [details_link(r.problem, r.candidate) for r in (a, b)]
    assert links[0] != links[1] and all(re.fullmatch(r"p/[\w.-]+\.html#[\w.-]+", link) for link in links), links
    assert links[0].split("#")[0] == links[1].split("#")[0]  # one page per problem
    assert details_link("p", "x/y z.py") == links[0]  # the same in every run: links between runs' sites hold
    assert details_link(None, "a.py").startswith("p/_no_problem_-")


def test_speedup_histogram_counts_correct_candidates_only():
    svg = str(speedup_histogram_svg([make("a", Status.ok, 0.3), make("b", Status.ok, 1.2), make("c", Status.ok, 1.4),
                                     make("d", Status.mismatch)]))
    assert "<title>0.25–0.5×: 1</title>" in svg and "<title>1–1.5×: 2</title>" in svg
    assert "<title>≥4×: 0</title>" in svg


def test_compare_names_what_changed(tmp_path):
    before = [make("a", Status.ok, 1.0), make("b", Status.mismatch), make("c", Status.ok, 2.0),
              make("d", Status.ok, 1.0), make("gone", Status.ok, 1.0), make("e", Status.runtime_error)]
    after = [make("a", Status.ok, 1.5), make("b", Status.ok, 1.0), make("c", Status.crash),
             make("d", Status.ok, 1.02), make("new", Status.ok, 1.0), make("e", Status.mismatch)]
    comparison = compare_runs(before, after)
    kinds = {c.candidate: c.change for c in comparison.changes}
    assert kinds == {"a": "faster", "b": "fixed", "c": "broken", "d": "same", "gone": "gone", "new": "new",
                     "e": "changed"}
    assert ("runtime_error", "mismatch", 1) in comparison.transitions
    page = render_compare("r1", "r2", comparison, tmp_path / "cmp" / "cmp.html", tmp_path / "site1", tmp_path / "site2")
    tree = parse(page.read_text())
    links = [a.attrs["href"] for a in tree.find("table", id="changes").find_all("a")]
    assert f"../site1/{details_link('p', 'a')}" in links and f"../site2/{details_link('p', 'a')}" in links
    assert "geomean speedup" in tree.find("table", id="figures").text


def interval_timing(median, half_width):
    return TimingStats(median_ms=median, iqr_ms=half_width * 4, mean_ms=median, min_ms=median, max_ms=median, n=30,
                       samples_ms=[median] * 30, clock="cuda_device", ci_low_ms=median - half_width,
                       ci_high_ms=median + half_width)


def timed(candidate, candidate_ms, reference_ms, half_width_fraction):
    return Result(run_id="r", problem="p", candidate=candidate, status=Status.ok, candidate_hash="h",
                  speedup=reference_ms / candidate_ms,
                  timing=interval_timing(candidate_ms, candidate_ms * half_width_fraction),
                  reference_timing=interval_timing(reference_ms, reference_ms * half_width_fraction))


def test_a_speedup_change_within_the_intervals_is_the_same_and_beyond_them_faster_or_slower():
    # 0.03x -> 0.026x: 15% apart, but each timing's interval is +-10%: noise, not "slower".
    noisy = compare_runs([timed("x", 33.0, 1.0, 0.10)], [timed("x", 38.0, 1.0, 0.10)]).changes[0]
    assert noisy.change == "same" and "overlap" in noisy.why
    tight = compare_runs([timed("x", 33.0, 1.0, 0.01)], [timed("x", 38.0, 1.0, 0.01)]).changes[0]
    assert tight.change == "slower"
    assert compare_runs([timed("x", 38.0, 1.0, 0.01)], [timed("x", 33.0, 1.0, 0.01)]).changes[0].change == "faster"


def test_compare_summary_gives_transitions_and_figure_deltas():
    comparison = compare_runs([make("a", Status.ok, 2.0), make("b", Status.runtime_error)],
                              [make("a", Status.ok, 2.0), make("b", Status.ok, 4.0)])
    text = describe_changes(comparison)
    assert "fixed   p  b  runtime_error -> ok" in text
    assert "verdicts: runtime_error -> ok 1" in text
    assert "geomean speedup 2.00x -> 2.83x" in text and "fast_1 50% -> 100%" in text


def test_csv_export_has_one_row_per_result():
    rows = list(csv.DictReader(io.StringIO(to_csv([make("a", Status.ok, 2.0), make("b", Status.compile_error)]))))
    assert [(r["candidate"], r["status"], r["speedup"]) for r in rows] == [("a", "ok", "2.0"), ("b", "compile_error", "")]
    assert "cause" in rows[0]


def test_candidate_page_says_how_it_was_built(tmp_path):
    compiled = make("compiled", Status.ok, 2.0).model_copy(update={"build_s": 35.25, "gpu": 1})
    cached = make("cached", Status.ok, 2.0).model_copy(update={"build_s": 0.0, "build_cached": True})
    unbuilt = make("python", Status.ok, 2.0)
    render_site(None, [compiled, cached, unbuilt], lambda r: None, tmp_path)
    text = {r.candidate: details(tmp_path, r) for r in (compiled, cached, unbuilt)}
    assert '<dd id="build">35.2 s, ahead of evaluation</dd>' in text["compiled"] and "on GPU 1" in text["compiled"]
    assert '<dd id="build">from the build cache</dd>' in text["cached"]
    assert '<dd id="build">–</dd>' in text["python"]


def test_candidate_page_says_where_the_evaluation_time_went(tmp_path):
    timed = make("timed", Status.ok, 2.0).model_copy(update={"elapsed_s": 4.0, "phase_s": {"load": 0.5, "timing": 3.25, "exit": 0.25}})
    render_site(None, [timed, make("plain", Status.ok, 2.0)], lambda r: None, tmp_path)
    assert '<span id="phase-seconds">(load 0.50 s, timing 3.25 s, exit 0.25 s)</span>' in details(tmp_path, timed)
    assert "phase-seconds" not in details(tmp_path, make("plain", Status.ok, 2.0))


def test_a_timing_of_batches_says_how_many_calls_each_sample_is(tmp_path):
    batched = make("batched", Status.ok, 2.0).model_copy(update={
        "timing": timing(0.01).model_copy(update={"calls_per_sample": 512})})
    render_site(None, [batched], lambda r: None, tmp_path)
    page = details(tmp_path, batched)
    assert "n = 3 batches of 512 calls)" in page and "n = 3)" in page  # the reference's: one call a sample
    assert kernelbench_sample(batched, 0, "cpu")["runtime_stats"]["num_trials"] == 3 * 512


def test_a_speedup_against_the_reference_timed_again_says_so(tmp_path):
    """The problem's reference stays the one first timed; a candidate whose speedup is against
    the reference timed again just before it says so, and its interval and chart use that one."""
    fast = make("fast", Status.ok, 3.0).model_copy(update={
        "timing": interval_timing(0.25, 0.05), "reference_timing": interval_timing(3.0, 0.1),
        "reference_recalibrated_timing": interval_timing(0.8, 0.1)})
    slow = make("slow", Status.ok, 0.9)
    render_site(None, [fast, slow], lambda r: None, tmp_path)
    page = details(tmp_path, fast)
    assert re.search(r'<dd id="reference-recalibrated">0\.8\d* ms \(n = 30\): surely faster', page), page
    assert "reference-recalibrated" not in details(tmp_path, slow)
    assert speedup_interval(fast) == pytest.approx((0.7 / 0.3, 0.9 / 0.2))  # its reference's interval, not the first's
    # Timed by the harness's clock (its reports contradicted): the reported times' interval says nothing.
    forged = fast.model_copy(update={"flags": ["timing_disagrees"]})
    assert speedup_interval(forged) is None and speedup_range(forged) is None
    assert "reference 3 ms" in parse((tmp_path / "index.html").read_text()).find("section", id="p").find("h2").text


# --- the index at the size of a real run (80 candidates, 21 problems) and at 5,000 -------------

def index_of(results, **kwargs):
    return parse(render_index(None, results, **kwargs))


def asset(name: str) -> str:
    """The stylesheet or script every page of a site links, as render_site writes it."""
    from harness.present.site import environment, write_assets
    with tempfile.TemporaryDirectory() as folder:
        write_assets(environment(), Path(folder))
        return (Path(folder) / name).read_text()


def test_overview_has_one_row_per_problem_in_natural_order_with_counts_and_best_links():
    results = synthetic_results(80)
    rows = index_of(results).find("table", id="overview-table").find_all("tr", )[1:]
    ids = [row.attrs["data-problem"] for row in rows]
    assert len(ids) == 21 and ids == sorted(ids, key=natural_key)
    assert [i.split("_")[0] for i in ids[:12]] == ["1", "1", "2", "2", "3", "3", "4", "4", "5", "5", "6", "6"]
    for row, problem in zip(rows, ids):
        mine = [r for r in results if r.problem == problem]
        correct = [r for r in mine if r.status is Status.ok]
        cells = row.find_all("td")
        attempted = sum(r.status is not Status.skipped for r in mine)
        assert cells[1].text.strip() == f"{len(correct)}/{attempted}"
        if correct:
            best = max(correct, key=lambda r: r.speedup)
            assert cells[2].find("a").attrs["href"] == details_link(best.problem, best.candidate)
            assert cells[3].find("a").attrs["title"] == best.candidate


def test_problem_sections_follow_natural_order_and_the_jump_bar_links_each():
    tree = index_of(synthetic_results(80))
    sections = [s.attrs["id"] for s in tree.find_all("section", cls="problem")]
    assert sections == sorted(sections, key=natural_key) and len(sections) == 21
    assert [a.attrs["href"] for a in tree.find("nav", id="jump").find_all("a")][4:] == [f"#{s}" for s in sections]


def test_rows_stay_short_reason_clamped_cause_shown_near_misses_marked():
    results = synthetic_results(80)
    tree = index_of(results)
    rows = [row for table in tree.find_all("table", cls="leaderboard") for row in table.find("tbody").find_all("tr")]
    assert len(rows) == 80
    for row in rows:
        candidate, reason = row.find_all("td")[1].find("a"), row.find("div", cls="reason")
        assert "clamp" in candidate.classes() and "clamp" in reason.classes()
    compile_errors = [row for row in rows if row.attrs["data-status"] == "compile_error"]
    assert compile_errors and all(row.find("td", cls="cause").text.strip() for row in compile_errors)
    near = [row for row in rows if "near-miss" in row.classes()]
    assert len(near) == sum("near_miss" in r.flags for r in results) > 0
    assert all(row.attrs["data-status"] == "mismatch" and "near miss" in row.text for row in near)
    far = [row for row in rows if row.attrs["data-status"] == "mismatch" and "near-miss" not in row.classes()]
    assert far and not any("near miss" in row.text for row in far)
    css = asset("report.css")
    assert "-webkit-line-clamp: 2" in css and "table-layout: fixed" in css


def test_filter_shows_a_count_and_hides_emptied_sections():
    tree = index_of(synthetic_results(80))
    assert tree.find("span", id="filter-count").text == "80 of 80 candidates"
    script = asset("report.js")
    assert 'section.classList.toggle("hidden"' in script and "counter.textContent" in script
    assert "near_miss" in [o.attrs["value"] for o in tree.find("select", id="status-filter").find_all("option")]


def model_rows(results, **kwargs) -> dict[str, list[str]]:
    table = index_of(results, **kwargs).find_all("table", id="generator-table")
    return {row.find("td").text: [td.text for td in row.find_all("td")[1:]] for row in
            (table[0].find("tbody").find_all("tr") if table else [])}


def test_a_table_per_model_where_the_paths_name_models_not_one_per_file_name():
    """The shipped run had listed 14 "generators" (000_e04650da845c912a among them), a run of
    <model>_sample_<k> files one row per model and sample, KernelBench's files sample_0, sample_1."""
    assert model_rows([make(f"{p}/{name}.py", Status.ok, 1.5, problem=p) for p in ("1_a", "2_b")
                       for name in ("cpp_relu", "000_e04650da845c912a")]) == {}
    results = synthetic_results(80)  # <problem>/runs/<date>/<model>/sample_<k>.py
    rows = model_rows(results)
    assert sorted(rows) == sorted(GENERATORS) and sum(int(cells[2]) for cells in rows.values()) == 80
    assert model_rows(results, group_by=re.compile(r"/runs/[^/]+/([^/]+)/")) == rows
    samples = [make(f"{p}/{model}_sample_{k}.py", Status.ok if k < 2 else Status.mismatch, 1.0, problem=p)
               for p in ("1_a", "2_b") for model in ("gpt-5", "claude-4") for k in range(4)]
    assert set(model_rows(samples)) == {"gpt-5", "claude-4"}
    # columns: problems, samples, candidates, correct, pass@1, pass@5, compiled, fast_1, geomean
    assert model_rows(samples)["gpt-5"][:6] == ["2", "4", "8", "4 (50%)", "50%", "–"]
    kernelbench = [make(f"level_1_problem_{n}_sample_{s}_kernel.py", Status.ok, 1.0, problem=f"{n}_x")
                   for n in (1, 2) for s in (0, 1)]
    assert list(model_rows(kernelbench)) == ["(one model)"]


def test_pass_at_k_is_the_unbiased_estimator_over_problems_with_k_samples():
    from harness.present.summary import pass_at_k
    assert pass_at_k({"a": (10, 3)}, 1) == pytest.approx(0.3)
    assert pass_at_k({"a": (10, 3)}, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))
    assert pass_at_k({"a": (4, 0), "b": (4, 4)}, 1) == pytest.approx(0.5)
    assert pass_at_k({"a": (3, 1)}, 5) is None  # too few samples for k


def test_the_terminal_summary_has_a_table_per_model():
    samples = [make(f"{p}/{model}_sample_{k}.py", Status.ok if model == "gpt-5" else Status.mismatch, 2.0, problem=p)
               for p in ("1_a", "2_b") for model in ("gpt-5", "claude-4") for k in range(5)]
    lines = summary_table(samples, "index.html").splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model"))
    assert lines[header].split() == ["model", "samples", "correct", "pass@1", "pass@5", "fast_1", "geomean"]
    assert lines[header + 1].split() == ["claude-4", "5", "0%", "0%", "0%", "0%", "-"]
    assert lines[header + 2].split() == ["gpt-5", "5", "100%", "100%", "100%", "100%", "2.00x"]
    assert max(map(len, lines[:-1])) <= 100


def test_index_of_5000_candidates_renders_in_seconds_and_keeps_its_structure():
    results = synthetic_results(5000, problems=250)
    began = time.perf_counter()
    html = render_index(None, results)
    elapsed = time.perf_counter() - began
    assert elapsed < 20 and len(html) < 12e6
    tree = parse(html)
    assert len(tree.find("table", id="overview-table").find("tbody").find_all("tr")) == 250
    assert len(tree.find_all("div", cls="reason")) == 5000


def test_a_site_of_5000_candidates_with_real_code_stays_under_15_mb(tmp_path):
    """One page per candidate made 146 MB of 5,001 files (the stylesheet, script, a <circle> per
    timed call and a table of line numbers in each): too heavy to publish. The code is the shipped
    candidates' varied per sample, so that no compression finds one file repeated, and each failure
    in a worker keeps a log as long as the harness keeps."""
    codes, results = {}, []
    for i, result in enumerate(synthetic_results(5000, problems=100)):
        codes[result.candidate] = varied_code(i)
        log = worker_log(i, codes[result.candidate]) if result.status in IN_A_WORKER else None
        results.append(result.model_copy(update={"log_tail": log}))
    render_site(None, results, lambda r: codes[r.candidate], tmp_path)
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert sum(f.stat().st_size for f in files) < 15e6
    assert len(files) == 1 + 100 + 2  # the index, a page per problem, the stylesheet and the script
    ok = next(r for r in results if r.status is Status.ok)
    shown = parse(details(tmp_path, ok))  # nothing was left out to get there
    assert shown.find("span", id="verdict").text == "ok" and shown.find("svg", cls="timing").find_all("path", cls="samples")
    assert shown.find("div", cls="code").text.strip() == codes[ok.candidate].strip()  # highlighted, every line


def test_every_link_of_the_site_stays_in_it_and_finds_its_target(tmp_path):
    """The site opens from file:// with no network: every link and asset is relative, every file
    it names exists, and every candidate's anchor is in its page's details."""
    results = synthetic_results(80)
    render_site(None, results, lambda r: "import torch\n", tmp_path)
    pages = [tmp_path / "index.html", *(tmp_path / "p").glob("*.html")]
    shown = {page: unpacked(page.read_text()) if page.parent.name == "p" else {} for page in pages}
    for page in pages:
        html = "".join([page.read_text(), *shown[page].values()])
        for link in re.findall(r'(?:href|src)="([^"]*)"', html):
            target, _, anchor = link.partition("#")
            assert "//" not in target and not target.startswith("/"), (page.name, link)
            if target:
                assert (page.parent / target).is_file(), (page.name, link)
            if target.startswith("p/"):
                assert anchor in shown[page.parent / target], link
    linked = {a.attrs["href"] for a in parse((tmp_path / "index.html").read_text()).find_all("a") if "data-candidate" in a.attrs}
    assert linked == {details_link(r.problem, r.candidate) for r in results}


def test_a_problem_of_many_candidates_packs_them_in_blocks_each_opened_alone(tmp_path):
    """One problem of 5,000 samples in one block took 1.5 s and 225 MB of the browser's heap to show
    any one of them: each block holds CANDIDATES_PER_BLOCK, and names the anchors it holds."""
    from harness.present.site import CANDIDATES_PER_BLOCK
    results = synthetic_results(2 * CANDIDATES_PER_BLOCK + 1, problems=1)
    render_site(None, results, lambda r: None, tmp_path)
    page = next((tmp_path / "p").glob("*.html")).read_text()
    assert page.count('class="details-data"') == 3
    fragments = unpacked(page)  # each block's anchors are those it holds
    assert len(fragments) == len(results) + 1 and "candidate-list" in fragments[""]
    assert all(f'id="verdict">{r.status.value}<' in details(tmp_path, r) for r in results)


def test_header_shows_the_finish_time_or_says_unfinished():
    from harness.records import EvalConfig, MachineInfo, RunInfo
    machine = MachineInfo(hostname="h", device="cpu", device_name="x", driver=None, cuda=None, torch="2", python="3",
                          harness="0")
    run = RunInfo(run_id="r", started_at="t0", machine=machine, config=EvalConfig(device="cpu"), problems_dir="p",
                  candidates_dir="c")
    assert "(unfinished)" in parse(render_index(run, [])).find("p", id="run-header").text
    header = parse(render_index(run.model_copy(update={"finished_at": "t1"}), [])).find("p", id="run-header").text
    assert "finished t1" in header and "unfinished" not in header


# --- charts ------------------------------------------------------------------------------------

def dots(chart) -> dict[str, list[tuple[float, float]]]:
    """A timing chart's dots per colour: each row's path, a zero-length stroke ("M x y h0", then
    moves from the last, "m dx dy h0") a dot."""
    found = {}
    for path in chart.find_all("path", cls="samples"):
        points = []
        for move, dx, dy in re.findall(r"([Mm])(-?[\d.]+) (-?[\d.]+)h0", path.attrs["d"]):
            x0, y0 = points[-1] if move == "m" else (0.0, 0.0)
            points.append((x0 + float(dx), y0 + float(dy)))
        found[path.attrs["stroke"]] = points
    return found


def test_timing_chart_is_log_scale_so_a_26x_candidate_and_its_reference_both_read():
    rng = random.Random(1)
    fast, slow = synthetic_timing(rng, 0.04), synthetic_timing(rng, 1.07)  # 26.75x
    svg = parse(str(timing_strip_svg([("candidate", fast, "#3b6fd8"), ("reference", slow, "#6b7385")])))
    chart = svg.find("svg")
    assert chart.attrs["data-scale"] == "log"
    ticks = {float(t.text) for t in chart.find_all("text", cls="tick")}
    assert {0.05, 0.1, 0.2, 0.5, 1.0} <= ticks
    xs = {colour: [x for x, _ in points] for colour, points in dots(chart).items()}
    assert len(xs["#3b6fd8"]) == fast.n and len(xs["#6b7385"]) == slow.n  # a dot per sample
    assert {p.attrs["stroke-linecap"] for p in chart.find_all("path", cls="samples")} == {"round"}  # else none shows
    # On a log axis a 26.75x gap spans most of the width; each group keeps its own spread.
    assert min(xs["#6b7385"]) - max(xs["#3b6fd8"]) > 300
    assert max(xs["#3b6fd8"]) - min(xs["#3b6fd8"]) > 5
    legends = {t.text.split(" (")[0]: t.attrs["fill"] for t in chart.find_all("text", cls="legend")}
    assert legends == {"candidate": "#3b6fd8", "reference": "#6b7385"}  # the legend is coloured as its dots


def test_timing_chart_draws_times_at_or_below_zero_at_its_left_edge():
    """A record from elsewhere with a zero median or a negative sample still renders."""
    rng = random.Random(2)
    odd = synthetic_timing(rng, 0.5).model_copy(update={"median_ms": 0.0, "samples_ms": [-1.0, 0.0, 0.4, 0.6]})
    chart = parse(str(timing_strip_svg([("candidate", odd, "#3b6fd8"), ("reference", synthetic_timing(rng, 1.0),
                                                                        "#6b7385")]))).find("svg")
    medians = [line for line in chart.find_all("line") if line.attrs.get("stroke-width") == "2.5"]
    assert len(medians) == 2 and float(medians[0].attrs["x1"]) == 190.0  # the axis starts at x=190


@pytest.mark.parametrize("odd", [[1e300, 2e300], [1e-320, 0.5], [math.inf, math.nan, 0.4, 0.6]])
def test_timing_chart_renders_samples_no_clock_gives(odd):
    rng = random.Random(3)
    stats = synthetic_timing(rng, 0.5).model_copy(update={"samples_ms": odd, "median_ms": odd[0]})
    chart = parse(str(timing_strip_svg([("candidate", stats, "#3b6fd8"), ("reference", synthetic_timing(rng, 1.0),
                                                                          "#6b7385")]))).find("svg")
    xs = [x for points in dots(chart).values() for x, _ in points]
    assert xs and all(190.0 <= v <= 790.0 for v in xs)  # every dot on the axis


def test_speedup_histogram_counts_an_infinite_speedup_in_its_last_bin_and_skips_nan():
    svg = parse(str(speedup_histogram_svg([make("a", Status.ok, math.inf), make("b", Status.ok, math.nan),
                                           make("c", Status.ok, 1.2)])))
    assert [t.text for t in svg.find_all("text") if t.text == "1"] == ["1", "1"]


def test_speedup_histogram_leaves_room_for_the_tallest_count():
    svg = parse(str(speedup_histogram_svg([make(str(i), Status.ok, 1.2) for i in range(9)])))
    labels = [t for t in svg.find_all("text") if t.text == "9"]
    assert labels and all(float(t.attrs["y"]) >= 12 for t in labels)


def test_candidate_page_gives_the_speedup_interval_and_the_near_miss(tmp_path):
    results = synthetic_results(80)
    ok = next(r for r in results if r.status is Status.ok)
    near = next(r for r in results if "near_miss" in r.flags)
    render_site(None, [ok, near], lambda r: None, tmp_path)
    page = parse(details(tmp_path, ok))
    low, high = speedup_interval(ok)
    assert page.find("span", id="speedup-interval").text == f"(95% interval {low:.2f}×–{high:.2f}×)"
    assert low < ok.speedup < high
    assert page.find("svg", cls="timing").attrs["data-scale"] == "log"
    assert "near miss" in parse(details(tmp_path, near)).find("span", id="near-miss").text


def test_degenerate_problems_are_warned_about_at_the_top():
    zero = make("zeros.py", Status.ok, 3.0, problem="gemm_max").model_copy(update={
        "flags": ["degenerate_problem"], "evidence": ["the problem is degenerate: an all-zeros output is within tolerance"]})
    page = index_of([zero, make("honest.py", Status.ok, 2.0, problem="relu")])
    warning = page.find("div", id="degenerate")
    assert "gemm_max" in warning.text and "all-zeros output" in warning.text and "relu" not in warning.text
    assert index_of([make("honest.py", Status.ok, 2.0)]).find_all("div", id="degenerate") == []


def test_candidate_page_shows_provenance_and_both_speedups(tmp_path):
    from harness.records import KernelShare

    result = make("own.py", Status.ok, 2.0).model_copy(update={
        "speedup_default_math": 1.5, "custom_kernel_share": 0.75, "floor_fraction": 0.4,
        "kernels": [KernelShare(name="relu_plain(float const*, float*, long)", origin="candidate", device_ms=0.3, share=0.75),
                    KernelShare(name="at::native::fill_kernel", origin="pytorch", device_ms=0.1, share=0.25)]})
    render_site(None, [result], lambda r: None, tmp_path)
    page = parse(details(tmp_path, result))
    assert "75%" in page.find("dd", id="custom-kernel-share").text
    assert "1.50" in page.find("dd", id="speedup-default-math").text
    origins = [row.find_all("td")[1].text for row in page.find("table", id="kernels").find_all("tr")[1:]]
    assert origins == ["candidate", "pytorch"]


def test_flags_are_named_on_the_index_and_on_the_candidates_page(tmp_path):
    caught = make("caught", Status.rejected).model_copy(update={
        "flags": ["no_custom_kernel", "reference_fallback"], "error": "forward computes with PyTorch's own kernels"})
    index = render_site(None, [caught], lambda r: None, tmp_path).read_text()
    page = details(tmp_path, caught)
    for html in (index, page):
        assert '<span class="flag">no_custom_kernel</span>' in html and '<span class="flag">reference_fallback</span>' in html


def test_a_paired_gpu_timing_shows_its_own_interval_and_the_reference_in_alternation(tmp_path):
    """The pairs' interval is the speedup's own, narrower than the medians' intervals allow."""
    paired = make("paired.py", Status.ok, 2.0).model_copy(update={
        "reference_paired_timing": timing(2.0), "speedup_interval": [1.99, 2.01]})
    assert speedup_interval(paired) == (1.99, 2.01)
    render_site(None, [paired], lambda r: None, tmp_path)
    page = parse(details(tmp_path, paired))
    assert page.find("span", id="speedup-interval").text == "(95% interval 1.99×–2.01×)"
    assert "median of the pairs' ratios" in page.find("dd", id="reference-paired").text
    clocked = paired.model_copy(update={"flags": ["timing_disagrees"]})
    assert speedup_interval(clocked) is None


def test_no_page_shows_a_python_name_for_a_verdict_phase_or_kind(tmp_path):
    """Every failing candidate's page said "stopped in Phase.load"; the CSV export too."""
    results = synthetic_results(120)
    failed = [r.model_copy(update={"phase": Phase.load}) for r in results if r.status is not Status.ok]
    render_site(None, failed + [r for r in results if r.status is Status.ok], lambda r: None, tmp_path)
    raw = re.compile(r"(Phase|Status|CandidateKind)\.[a-z_]+")
    shown = {"index.html": (tmp_path / "index.html").read_text()}
    for page in (tmp_path / "p").glob("*.html"):
        shown |= {f"{page.name}#{anchor}": html for anchor, html in unpacked(page.read_text()).items()}
    assert len(shown) == 1 + len(results) + len({r.problem for r in results})  # each candidate's, each problem's list
    for name, html in shown.items():
        assert not raw.search(parse(html).text), (name, raw.search(parse(html).text))
    assert parse(details(tmp_path, failed[0])).find("dd", id="stopped-in").text == "load"
    assert not raw.search(to_csv(failed))


@pytest.mark.parametrize("low, high", [(0.9, 1.3), (1.001, 1.004), (0.0213, 0.0225), (3.0, 300.0), (140.0, 160.0)])
def test_a_timing_chart_has_three_tick_labels_at_least_however_close_its_rows(low, high):
    """A candidate and its reference a few percent apart had one label on the log axis."""
    def stats(samples):
        return TimingStats(median_ms=samples[0], iqr_ms=0.0, mean_ms=samples[0], min_ms=min(samples), max_ms=max(samples),
                           n=len(samples), samples_ms=samples, clock="cuda_device")
    chart = parse(str(timing_strip_svg([("candidate", stats([low, low * 1.001]), "#000"),
                                        ("reference", stats([high, high * 0.999]), "#555")])))
    labels = [float(t.text) for t in chart.find_all("text", cls="tick")]
    assert len(labels) >= 3 and labels == sorted(labels) and len(set(labels)) == len(labels), labels

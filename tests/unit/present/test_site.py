"""Report pieces: ranking, charts, run comparison, exports."""

import csv
import io
import json

from harness.present.export import kernelbench_json, to_csv
from harness.records import Result, Status, TimingStats
from harness.present.compare import compare_runs, render_compare
from harness.present.site import group_by_problem, page_name, render_site, speedup_histogram_svg


def timing(median):
    return TimingStats(median_ms=median, iqr_ms=0.1, mean_ms=median, min_ms=median, max_ms=median, n=3,
                       samples_ms=[median] * 3, clock="perf_counter")


def make(candidate, status, speedup=None, problem="p"):
    return Result(run_id="r", problem=problem, candidate=candidate, status=status, speedup=speedup,
                  candidate_hash="h" + candidate, timing=timing(1.0) if speedup else None,
                  reference_timing=timing(speedup) if speedup else None)


def test_leaderboard_ranks_correct_fastest_first_then_failures_by_verdict():
    rows = group_by_problem([make("slow", Status.ok, 0.5), make("bad", Status.crash), make("fast", Status.ok, 3.0),
                             make("wrong", Status.mismatch)])
    assert [r.candidate for r in rows[0][1]] == ["fast", "slow", "wrong", "bad"]


def test_page_names_are_unique_and_file_safe():
    a, b = make("x/y z.py", Status.ok), make("x/y_z.py", Status.ok)
    assert page_name(a) != page_name(b) and "/" not in page_name(a) and " " not in page_name(a)


def test_speedup_histogram_counts_correct_candidates_only():
    svg = str(speedup_histogram_svg([make("a", Status.ok, 0.3), make("b", Status.ok, 1.2), make("c", Status.ok, 1.4),
                                     make("d", Status.mismatch)]))
    assert "<title>0.25–0.5×: 1</title>" in svg and "<title>1–1.5×: 2</title>" in svg
    assert "<title>≥4×: 0</title>" in svg


def test_compare_names_what_changed(tmp_path):
    before = [make("a", Status.ok, 1.0), make("b", Status.mismatch), make("c", Status.ok, 2.0),
              make("d", Status.ok, 1.0), make("gone", Status.ok, 1.0)]
    after = [make("a", Status.ok, 1.5), make("b", Status.ok, 1.0), make("c", Status.crash),
             make("d", Status.ok, 1.02), make("new", Status.ok, 1.0)]
    kinds = {c.candidate: c.change for c in compare_runs(before, after)}
    assert kinds == {"a": "faster", "b": "fixed", "c": "broken", "d": "same", "gone": "gone", "new": "new"}
    page = render_compare("r1", "r2", compare_runs(before, after), tmp_path / "cmp.html").read_text()
    assert "fixed" in page and "r1" in page and "<script>" in page


def test_csv_export_has_one_row_per_result():
    rows = list(csv.DictReader(io.StringIO(to_csv([make("a", Status.ok, 2.0), make("b", Status.compile_error)]))))
    assert [(r["candidate"], r["status"], r["speedup"]) for r in rows] == [("a", "ok", "2.0"), ("b", "compile_error", "")]


def test_kernelbench_export_keys_by_problem_number_and_reports_fast_p():
    results = [make("s0", Status.ok, 2.0, problem="63_conv_standard_2D"), make("s1", Status.compile_error,
               problem="63_conv_standard_2D"), make("s2", Status.mismatch, problem="relu"), make("s3", Status.skipped)]
    eval_results, fast_p = map(json.loads, kernelbench_json(results, "H200"))
    assert set(eval_results) == {"63", "relu"}
    first, second = eval_results["63"]
    assert (first["sample_id"], first["compiled"], first["correctness"], first["runtime"]) == (0, True, True, 1.0)
    assert (second["compiled"], second["correctness"], second["runtime"]) == (False, False, -1.0)
    assert fast_p["total"] == 3 and fast_p["fast_p"]["1"] == 1 / 3


def test_candidate_page_says_how_it_was_built(tmp_path):
    compiled = make("compiled", Status.ok, 2.0).model_copy(update={"build_s": 35.25, "gpu": 1})
    cached = make("cached", Status.ok, 2.0).model_copy(update={"build_s": 0.0, "build_cached": True})
    unbuilt = make("python", Status.ok, 2.0)
    render_site(None, [compiled, cached, unbuilt], lambda r: None, tmp_path)
    text = {r.candidate: (tmp_path / "c" / page_name(r)).read_text() for r in (compiled, cached, unbuilt)}
    assert '<dd id="build">35.2 s, ahead of evaluation</dd>' in text["compiled"] and "on GPU 1" in text["compiled"]
    assert '<dd id="build">from the build cache</dd>' in text["cached"]
    assert '<dd id="build">–</dd>' in text["python"]

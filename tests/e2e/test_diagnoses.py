"""Diagnoses: each cause in the taxonomy is recognised, with a hint; end to end on CPU for the
causes that exist without a GPU, from the recorded evidence for the others."""

import json

import pytest

from harness.cli import main
from harness.present.site import details_link

from tests.support import DATA
from tests.unit.present.html_tree import unpacked


EXPECTED = {
    "tiny_relu/missing_declaration.py": ("compile_error", "missing_declaration"),
    "tiny_relu/cxx14.py": ("compile_error", "cxx_standard"),
    "tiny_relu/nonexistent_api.py": ("compile_error", "nonexistent_api"),
    "tiny_relu/module_called.py": ("runtime_error", "module_called"),
    "tiny_relu/syntax_error.py": ("load_error", "syntax_error"),
    "tiny_relu/truncated.md": ("load_error", "truncated_answer"),
    "tiny_relu/missing_import.py": ("load_error", "missing_import"),
    "tiny_linear/ignored_args.py": ("mismatch", "ignored_ctor_args"),
}


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diag")
    code = main(["eval", str(DATA / "diagnoses"), "--problems", str(DATA / "problems"), "--out", str(tmp / "out"),
                 "--device", "cpu", "--trials", "2", "--db", str(tmp / "h.db"), "--build-dir", str(tmp / "build"),
                 "--feedback", str(tmp / "feedback.jsonl")])
    assert code == 0
    results = {r["candidate"]: r for r in map(json.loads, (tmp / "out" / "results.jsonl").read_text().splitlines())}
    return tmp, results


def test_real_candidates_get_the_right_cause(diagnosed):
    _, results = diagnosed
    assert {name: (r["status"], r["diagnosis"]["category"]) for name, r in results.items()} == EXPECTED


def test_compile_errors_point_at_the_candidate_line(diagnosed):
    _, results = diagnosed
    first = results["tiny_relu/missing_declaration.py"]["compiler_diagnostics"][0]
    assert first["file"] == "main.cpp" and first["candidate_line"] is None  # in the generated binding code
    api = results["tiny_relu/nonexistent_api.py"]
    assert api["compiler_diagnostics"][0]["candidate_line"] == 7  # the line calling getCurrentCUDAStream


def test_feedback_file_has_one_compact_line_per_candidate(diagnosed):
    tmp, results = diagnosed
    lines = (tmp / "feedback.jsonl").read_text().splitlines()
    assert len(lines) == len(results)
    record = next(json.loads(line) for line in lines if "cxx14" in line)
    assert set(record) == {"problem", "candidate", "verdict", "reason", "cause", "summary", "hint", "key_lines",
                           "max_abs_err", "speedup"}
    assert record["cause"] == "cxx_standard" and "-std=c++14" in record["hint"]


def test_explain_prints_the_stored_diagnosis(diagnosed, capsys):
    tmp, _ = diagnosed
    assert main(["explain", str(DATA / "diagnoses" / "tiny_relu" / "cxx14.py"), "--db", str(tmp / "h.db"),
                 "--problems", str(DATA / "problems")]) == 0
    out = capsys.readouterr().out
    assert "compile_error" in out and "cause:  cxx_standard" in out and "hint:" in out


def test_explain_evaluates_a_candidate_never_judged(tmp_path, capsys):
    assert main(["explain", str(DATA / "diagnoses" / "tiny_relu" / "module_called.py"), "--db", str(tmp_path / "h.db"),
                 "--problems", str(DATA / "problems"), "--device", "cpu"]) == 0
    assert "cause:  module_called" in capsys.readouterr().out


def test_report_shows_hints_and_the_cause_histogram(diagnosed):
    tmp, results = diagnosed
    index = (tmp / "out" / "index.html").read_text()
    assert "Why candidates failed" in index and "cxx_standard" in index
    cxx14 = results["tiny_relu/cxx14.py"]
    page, anchor = details_link(cxx14["problem"], cxx14["candidate"]).split("#")
    assert 'id="hint"' in unpacked((tmp / "out" / page).read_text())[anchor]

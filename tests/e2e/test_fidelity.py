"""Judge what actually ran: a size cap fails at a larger size, a candidate that composes PyTorch
operators says so, degenerate problems are marked on every result, and a constant answer that a
loose tolerance lets through is rejected where the reference's output changes."""

import json

import pytest

from harness.cli import main

from tests.support import DATA

FIDELITY = DATA / "fidelity"


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fidelity")
    out = tmp / "out"
    assert main(["eval", str(FIDELITY / "candidates"), "--problems", str(FIDELITY / "problems"), "--out", str(out),
                 "--device", "cpu", "--trials", "5", "--db", str(tmp / "h.db"), "--build-dir", str(tmp / "build")]) == 0
    return {r["candidate"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def test_a_hard_coded_size_cap_fails_at_a_larger_size(judged):
    capped = judged["tiny_relu/size_cap_cpp.py"]
    assert capped["status"] == "ok" and "shape_specialized" in capped["flags"]
    assert any("batch_size=97" in line for line in capped["evidence"]), capped["evidence"]


def test_a_cpp_kernel_of_its_own_is_not_flagged_as_composing_pytorch(judged):
    assert "no_custom_kernel" not in judged["tiny_relu/size_cap_cpp.py"]["flags"]


def test_code_built_only_from_pytorch_operators_is_flagged(judged):
    zeros = judged["tiny_zero/zeros.py"]
    assert "no_custom_kernel" in zeros["flags"]
    assert any("compiles no kernel" in line for line in zeros["evidence"])


def test_results_of_a_degenerate_problem_carry_the_flag(judged):
    zeros = judged["tiny_zero/zeros.py"]
    assert zeros["status"] == "ok" and "degenerate_problem" in zeros["flags"]
    assert any("all-zeros output is within tolerance" in line for line in zeros["evidence"])


def test_a_constant_answer_is_rejected_where_the_reference_changes_with_its_input(judged):
    faint = judged["tiny_faint/zeros.py"]
    assert faint["status"] == "rejected" and "input_insensitive" in faint["flags"]
    assert "same for 5 different inputs" in faint["error"]
    assert faint["diagnosis"]["category"] == "input_insensitive"


def test_precision_policy_is_stated_in_run_json(tmp_path):
    out = tmp_path / "out"
    assert main(["eval", str(FIDELITY / "candidates"), "--problems", str(FIDELITY / "problems"), "--problem", "tiny_zero",
                 "--out", str(out), "--device", "cpu", "--trials", "3", "--db", str(tmp_path / "h.db")]) == 0
    assert "strict-fp32" in json.loads((out / "run.json").read_text())["precision_policy"]

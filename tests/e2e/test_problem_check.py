"""`harness check` flags problems where a trivial output passes, and leaves healthy ones alone."""

import json


from harness.cli import main

from tests.support import DATA


def test_check_command_on_problem_files(tmp_path, capsys):
    assert main(["check", str(DATA / "degenerate"), "--device", "cpu", "--json", str(tmp_path / "f.jsonl")]) == 0
    findings = {f["problem"]: f["flags"] for f in map(json.loads, (tmp_path / "f.jsonl").read_text().splitlines())}
    assert findings == {"healthy_relu": [], "wide_softmax": ["zeros_pass", "near_constant", "input_insensitive"],
                        "ignores_input": ["input_insensitive"]}
    assert "zeros_pass" in capsys.readouterr().out


def test_shipped_problems_are_not_degenerate_at_small_sizes(tmp_path):
    assert main(["check", "problems", "--device", "cpu", "--small", "--json", str(tmp_path / "f.jsonl")]) == 0
    findings = {f["problem"]: f["flags"] for f in map(json.loads, (tmp_path / "f.jsonl").read_text().splitlines())}
    assert len(findings) >= 15 and all(flags == [] for flags in findings.values()), findings

"""`harness check` flags problems where a trivial output passes, and leaves healthy ones alone."""

import json

import torch

from harness.cli import main
from harness.judge.degenerate import degenerate_flags

from tests.support import DATA


def test_flags_from_outputs():
    zeros = [[torch.full((100,), 1e-6)] for _ in range(3)]
    assert degenerate_flags(zeros, 1e-4, 1e-4)[0] == ["zeros_pass", "near_constant", "input_insensitive"]
    healthy = [[torch.randn(100, generator=torch.Generator().manual_seed(s))] for s in range(3)]
    assert degenerate_flags(healthy, 1e-4, 1e-4)[0] == []


def test_outputs_of_every_dtype_are_compared_in_their_own():
    """Half-precision and integer outputs that ignore their inputs are found too (their first
    seed's are not compared as a float32 copy, which no other seed's dtype matches)."""
    for dtype in (torch.float16, torch.bfloat16, torch.int64):
        same = [[(torch.arange(100) % 7).to(dtype)] for _ in range(3)]
        assert degenerate_flags(same, 1e-2, 1e-2)[0] == ["input_insensitive"], dtype


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

"""--memcheck's worker, for real on the CPU: confined as any worker, it becomes the sanitizer,
which starts the worker again as its child; the candidate loads and runs forward once there, the
sanitizer's log and exit code come back. A stand-in plays compute-sanitizer (the real one is
tried in tests/gpu/test_memcheck.py): it finds an error where forward left a mark."""

import json
import sys
from pathlib import Path

import pytest

from harness import run
from harness.cli import main
from harness.inputs.discovery import discover
from harness.judge.memcheck import sanitize
from harness.records import EvalConfig, SandboxMode, SanitizerStatus
from harness.worker.parent import Placement
from harness.worker.sandbox import decide_policy
from tests.support import DATA
from tests.unit.worker.test_sandbox import LIMITS

STAND_IN = f"""#!{sys.executable}
import os, subprocess, sys
args = sys.argv[1:]
log, errors_exit = args[args.index("--log-file") + 1], int(args[args.index("--error-exitcode") + 1])
first = next(i for i in range(0, len(args), 2) if not args[i].startswith("--"))  # options come in pairs
worker = subprocess.run(args[first:], close_fds=False).returncode
found = os.path.exists("forward_ran")
with open(log, "w") as out:
    out.write("========= COMPUTE-SANITIZER\\n")
    if found:
        out.write("========= Invalid __global__ write of size 4 bytes\\n"
                  "=========     at relu_kernel(const float *, float *, int)+0x90 in cuda.cu:12\\n")
    if worker == 0:
        out.write(f"========= ERROR SUMMARY: {{int(found)}} error{{'' if found else 's'}}\\n")
sys.exit(errors_exit if found else worker)
"""
CANDIDATES = {  # forward's body
    "clean.py": ["return torch.clamp(x, min=0.0)"],
    "marks.py": ["open('forward_ran', 'w').close()", "return torch.clamp(x, min=0.0)"],
    # Only its third call errs: the pass makes as many calls as the correctness trials did.
    "third_call_marks.py": ["ModelNew.calls = getattr(ModelNew, 'calls', 0) + 1",
                            "if ModelNew.calls == 3:", "    open('forward_ran', 'w').close()",
                            "return torch.clamp(x, min=0.0)"],
    "raises.py": ["raise ValueError('not under a sanitizer')"],
}


def stand_in(root: Path) -> Path:
    sanitizer = root / "cuda" / "compute-sanitizer" / "compute-sanitizer"
    sanitizer.parent.mkdir(parents=True)
    sanitizer.write_text(STAND_IN)
    sanitizer.chmod(0o755)
    return sanitizer


def write_candidates(root: Path, names) -> None:
    for name in names:
        path = root / "tiny_relu" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(f"        {line}\n" for line in CANDIDATES[name])
        path.write_text(f"import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{lines}")


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("memcheck")
    sanitizer = stand_in(root)
    write_candidates(root / "c", CANDIDATES)
    problems, candidates = discover(DATA / "problems", root / "c")
    relu = next(p for p in problems if p.id == "tiny_relu")
    placement = Placement(sandbox=decide_policy(SandboxMode.auto, LIMITS))
    return {Path(c.path).name: sanitize(relu, c, EvalConfig(device="cpu"), root / "key" / c.code_hash, placement,
                                        str(sanitizer), "memcheck")
            for c in candidates}


@pytest.mark.parametrize("name", ["marks.py", "third_call_marks.py"])
def test_what_forward_did_under_the_sanitizer_is_its_finding(judged, name):
    marked = judged[name]
    assert (marked.status, marked.report, marked.kernel, marked.errors) == (
        SanitizerStatus.errors, "Invalid __global__ write of size 4 bytes", "relu_kernel", 1)


def test_a_clean_forward_is_clean(judged):
    clean = judged["clean.py"]
    assert (clean.status, clean.report, clean.errors) == (SanitizerStatus.clean, None, 0)
    assert 0 < clean.seconds < 120


def test_a_forward_that_fails_under_the_sanitizer_is_not_judged_clean(judged):
    raised = judged["raises.py"]
    assert raised.status is SanitizerStatus.inconclusive
    assert "ValueError: not under a sanitizer" in raised.report


def test_a_run_with_the_pass_records_each_verdict_once_and_says_how_long_it_took(tmp_path, monkeypatch, capsys):
    """The pass inside a whole run (a CPU one here, the stand-in as its sanitizer): the candidate
    it finds errors in becomes runtime_error, each candidate has one line in results.jsonl, as in
    the database, and run.json and the summary give the pass's time."""
    sanitizer = stand_in(tmp_path)
    monkeypatch.setattr(run, "sanitizer_for", lambda config, setup: str(sanitizer))
    write_candidates(tmp_path / "c", ["clean.py", "third_call_marks.py"])
    assert main(["eval", str(tmp_path / "c"), "--problems", str(DATA / "problems"), "--problem", "tiny_relu",
                 "--device", "cpu", "--out", str(tmp_path / "out"), "--db", str(tmp_path / "h.db"),
                 "--build-dir", str(tmp_path / "build")]) == 0
    lines = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert sorted(r["candidate"] for r in lines) == ["tiny_relu/clean.py", "tiny_relu/third_call_marks.py"]
    found = {r["candidate"].split("/")[1]: r for r in lines}
    marked, clean = found["third_call_marks.py"], found["clean.py"]
    assert marked["status"] == "runtime_error" and marked["phase"] == "memcheck" and "memory_error" in marked["flags"]
    assert marked["error"] == "compute-sanitizer memcheck in relu_kernel: Invalid __global__ write of size 4 bytes"
    assert marked["diagnosis"]["category"] == "memory_error"
    assert clean["status"] == "ok" and [p["status"] for p in clean["sanitized"]] == ["clean"]
    memcheck_s = json.loads((tmp_path / "out" / "run.json").read_text())["memcheck_s"]
    assert memcheck_s >= sum(p["seconds"] for r in lines for p in r["sanitized"]) > 0
    assert "memcheck: 2 under compute-sanitizer" in capsys.readouterr().out

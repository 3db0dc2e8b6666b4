"""--memcheck's worker, for real on the CPU: confined as any worker, it becomes the sanitizer,
which starts the worker again as its child; the candidate loads and runs forward once there, the
sanitizer's log and exit code come back. A stand-in plays compute-sanitizer (the real one is
tried in tests/gpu/test_memcheck.py): it finds an error where forward left a mark."""

import sys
from pathlib import Path

import pytest

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
worker = subprocess.run(args[args.index("--launch-timeout") + 2:], close_fds=False).returncode
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


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("memcheck")
    sanitizer = root / "cuda" / "compute-sanitizer" / "compute-sanitizer"
    sanitizer.parent.mkdir(parents=True)
    sanitizer.write_text(STAND_IN)
    sanitizer.chmod(0o755)
    for name, body in CANDIDATES.items():
        path = root / "c" / "tiny_relu" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = "".join(f"        {line}\n" for line in body)
        path.write_text(f"import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{lines}")
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
    assert raised.status is SanitizerStatus.not_run
    assert "ValueError: not under a sanitizer" in raised.report

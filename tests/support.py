"""What several test modules share: where the repository and the test data are, and how an
end-to-end CPU run is started and read back."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from harness.cli import main

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

# One candidate per verdict (tests/data/candidates), and what each must get.
EXPECTED = {
    "tiny_relu/ok_cpp.py": "ok",
    "tiny_relu/transcript.md": "ok",
    "tiny_relu/mismatch.py": "mismatch",
    "tiny_relu/forged_stdout.py": "mismatch",
    "tiny_relu/tuple_output.py": "mismatch",
    "tiny_relu/compile_error_cpp.py": "compile_error",
    "tiny_relu/no_model_new.py": "load_error",
    "tiny_relu/binary.txt": "load_error",
    "tiny_relu/load_error_cpp.py": "load_error",
    "tiny_relu/runtime_error.py": "runtime_error",
    "tiny_relu/timeout.py": "timeout",
    "tiny_relu/crash.py": "crash",
    "tiny_relu/rejected.py": "rejected",
    "tiny_relu/skipped_cuda.py": "skipped",
    "tiny_linear/ok_same_init.py": "ok",
    "tiny_linear/wrong_init.py": "mismatch",
}


def eval_args(tmp_path, candidates, *extra, db="h.db", out="out"):
    return ["eval", str(candidates), "--problems", str(DATA / "problems"), "--out", str(tmp_path / out),
            "--device", "cpu", "--trials", "3", "--timeout", "20", "--build-dir", str(tmp_path / "build"),
            "--db", str(tmp_path / db), *extra]


def read_results(out: Path) -> dict[str, dict]:
    return {r["candidate"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def run_eval(tmp_path, candidates, *extra):
    out = tmp_path / "out"
    code = main(eval_args(tmp_path, candidates, *extra))
    return code, out, read_results(out)


def require_ray():
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI"):
            pytest.fail("Ray tests need Ray (pip install -e '.[ray]'); CI installs it")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")

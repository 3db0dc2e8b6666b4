"""On a CUDA machine: what actually ran is what is judged. A launch that failed is a runtime error
(not cheating), an illegal memory access is flagged memory_error, each kernel's origin is known,
and persisting L2 lines set by a candidate do not make it faster."""

import json

import pytest

from harness.cli import main

from tests.support import DATA

pytestmark = pytest.mark.gpu

FIDELITY = DATA / "gpu_fidelity"


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu-fidelity")
    assert main(["eval", str(FIDELITY / "candidates"), "--problems", str(FIDELITY / "problems"), "--out", str(tmp / "out"),
                 "--device", "cuda", "--build-dir", str(tmp / "build"), "--db", str(tmp / "h.db")]) == 0
    return {r["candidate"]: r for r in map(json.loads, (tmp / "out" / "results.jsonl").read_text().splitlines())}


def test_a_launch_that_failed_is_a_runtime_error_with_its_cuda_error(judged):
    failed = judged["relu/shared_memory.py"]
    assert failed["status"] == "runtime_error", (failed["status"], failed["error"])
    assert "invalid argument" in failed["error"] and "input_mutation" not in failed["flags"]
    assert failed["diagnosis"]["category"] == "launch_config"


def test_an_illegal_memory_access_is_flagged(judged):
    stray = judged["relu/out_of_bounds.py"]
    assert stray["status"] == "runtime_error" and "memory_error" in stray["flags"], (stray["status"], stray["error"])
    assert "compute-sanitizer" in stray["diagnosis"]["hint"]


def test_an_honest_kernel_is_all_its_own_device_time(judged):
    own = judged["relu/own_kernel.py"]
    assert own["status"] == "ok" and own["flags"] == [], (own["flags"], own["evidence"])
    assert own["custom_kernel_share"] > 0.9
    assert own["kernels"][0]["origin"] == "candidate" and "relu_plain" in own["kernels"][0]["name"]
    assert 0 < own["floor_fraction"] <= 2


def test_both_baselines_are_recorded(judged):
    own = judged["relu/own_kernel.py"]
    assert own["reference_default_math_timing"]["median_ms"] > 0 and own["speedup_default_math"] > 0


def test_persisting_l2_lines_gain_nothing(judged):
    window, plain = judged["small_relu/l2_window.py"], judged["small_relu/own_kernel.py"]
    assert window["status"] == "ok" and plain["status"] == "ok", (window["error"], plain["error"])
    assert window["timing"]["median_ms"] >= 0.85 * plain["timing"]["median_ms"], \
        (window["timing"]["median_ms"], plain["timing"]["median_ms"])

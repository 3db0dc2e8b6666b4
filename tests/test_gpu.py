"""On a CUDA machine: the shipped candidates get the verdicts documented in the README."""

import json

import pytest

from harness.cli import main

from .conftest import DATA, REPO

pytestmark = pytest.mark.gpu

SEED_VERDICTS = {
    "conv2d_square/000_e04650da845c912a.txt": ("load_error", "undefined symbol"),
    "conv2d_square/001_fe76667a27343746.txt": ("compile_error", "getCurrentCUDAStream"),
    "conv2d_square/002_af9bec9bd9895a43.txt": ("compile_error", "not declared"),
    "conv2d_asym_input/003_6104c7e189fce0ef.txt": ("runtime_error", "not callable"),
    "conv2d_asym_kernel/004_6be3e13551aa2980.txt": ("compile_error", "error"),
}


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu")
    code = main(["eval", str(REPO / "candidates"), "--problems", str(REPO / "problems"), "--out", str(tmp / "out"),
                 "--device", "cuda", "--trials", "20", "--build-dir", str(tmp / "build")])
    assert code == 0
    return {r["candidate"]: r for r in map(json.loads, (tmp / "out" / "results.jsonl").read_text().splitlines())}


def test_seeds_get_the_known_verdicts(shipped):
    for name, (status, reason) in SEED_VERDICTS.items():
        assert shipped[name]["status"] == status, (name, shipped[name]["error"])
        assert reason in shipped[name]["error"], (name, shipped[name]["error"])


def test_corrected_conv_kernels_and_triton_are_correct(shipped):
    for name in ("conv2d_square/cuda_direct_conv.py", "conv2d_asym_input/cuda_direct_conv.py",
                 "conv2d_asym_kernel/cuda_direct_conv.py", "softmax/triton_softmax.py",
                 "bias_gelu_residual/cuda_fused.py"):
        assert shipped[name]["status"] == "ok", (name, shipped[name]["error"])
        assert shipped[name]["timing"]["clock"] == "cuda_event"


def test_fused_kernel_beats_pytorch(shipped):
    assert shipped["bias_gelu_residual/cuda_fused.py"]["speedup"] > 1.0


def test_wrong_and_crashing_candidates_on_gpu(tmp_path):
    code = main(["eval", str(DATA / "candidates"), "--problems", str(DATA / "problems"), "--out", str(tmp_path),
                 "--device", "cuda", "--trials", "3", "--timeout", "30", "--build-dir", str(tmp_path / "b")])
    assert code == 0
    results = {r["candidate"]: r["status"] for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert results["tiny_relu/mismatch.py"] == "mismatch"
    assert results["tiny_relu/forged_stdout.py"] == "mismatch"
    assert results["tiny_relu/transcript.md"] == "ok"
    assert results["tiny_relu/crash.py"] == "crash"
    assert results["tiny_relu/ok_cpp.py"] == "skipped"  # a CPU C++ kernel on a GPU run
    assert results["tiny_linear/wrong_init.py"] == "mismatch"

"""On a CUDA machine: the shipped candidates get the verdicts documented in the README."""

import json
import shutil
import subprocess
import sys

import pytest
import torch

from harness.cli import main
from harness.judge.candidate import CandidateRun

from tests.support import DATA, REPO

pytestmark = pytest.mark.gpu

SEED_VERDICTS = {
    "conv2d_square/000_e04650da845c912a.txt": ("load_error", "undefined symbol"),
    "conv2d_square/001_fe76667a27343746.txt": ("compile_error", "getCurrentCUDAStream"),
    "conv2d_square/002_af9bec9bd9895a43.txt": ("compile_error", "not declared"),
    "conv2d_asym_input/003_6104c7e189fce0ef.txt": ("runtime_error", "not callable"),
    "conv2d_asym_kernel/004_6be3e13551aa2980.txt": ("compile_error", "error"),
}


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """The results, and after each candidate's evaluation the device memory this process held
    beyond its reference's kept outputs."""
    tmp, held = tmp_path_factory.mktemp("gpu"), {}
    evaluate = CandidateRun.run

    def recording(run: CandidateRun):
        result = evaluate(run)
        kept = run.reference.memory_budget - run.reference.budget_left
        held[result.candidate] = torch.cuda.memory_reserved(run.placement.gpu) - kept
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CandidateRun, "run", recording)
        code = main(["eval", str(REPO / "candidates"), "--problems", str(REPO / "problems"), "--out", str(tmp / "out"),
                     "--device", "cuda", "--trials", "10", "--build-dir", str(tmp / "build"), "--db", str(tmp / "h.db")])
    assert code == 0
    return {r["candidate"]: r for r in map(json.loads, (tmp / "out" / "results.jsonl").read_text().splitlines())}, held


@pytest.fixture(scope="module")
def shipped(evaluated):
    return evaluated[0]


def test_between_candidates_the_harness_holds_only_its_kept_reference_outputs(evaluated):
    """What it freed (an earlier problem's kept outputs, 16 GB for conv2d_asym_input; a candidate's
    copied timed outputs) goes back to the GPU, where the next workers need it. What stays is the
    allocator's rounding around the kept outputs: 0.3 to 0.9 GB measured on an H100."""
    held = evaluated[1]
    assert len(held) >= 5 and max(held.values()) <= 2 * 2**30, held


def test_seeds_get_the_known_verdicts(shipped):
    for name, (status, reason) in SEED_VERDICTS.items():
        assert shipped[name]["status"] == status, (name, shipped[name]["error"])
        assert reason in shipped[name]["error"], (name, shipped[name]["error"])


def test_corrected_conv_kernels_and_triton_are_correct(shipped):
    for name in ("conv2d_square/cuda_direct_conv.py", "conv2d_asym_input/cuda_direct_conv.py",
                 "conv2d_asym_kernel/cuda_direct_conv.py", "softmax/triton_softmax.py",
                 "bias_gelu_residual/cuda_fused.py"):
        assert shipped[name]["status"] == "ok", (name, shipped[name]["error"])
        assert shipped[name]["timing"]["clock"] == "cuda_device"


def test_each_timed_command_is_paired_with_the_references_and_the_speedup_carries_its_interval(shipped):
    """The reference's command right after each of the candidate's: the speedup is their ratios'
    median, inside its own 95% interval."""
    for name in ("conv2d_square/cuda_direct_conv.py", "softmax/triton_softmax.py", "bias_gelu_residual/cuda_fused.py"):
        result = shipped[name]
        paired = result["reference_paired_timing"]
        assert paired["n"] == result["timing"]["n"] == 10 and paired["clock"] == "cuda_device", name
        low, high = result["speedup_interval"]
        assert low <= result["speedup"] <= high, (name, result["speedup"], low, high)


def test_cuda_builds_happen_ahead_and_compile_errors_need_no_gpu_worker(shipped):
    for name, result in shipped.items():
        if result["kind"] == "cuda":
            # Identical code (the three corrected convs) is built once and then found in the cache.
            assert result["build_s"] > 1 or result["build_cached"], name
    for name in ("conv2d_square/001_fe76667a27343746.txt", "conv2d_square/002_af9bec9bd9895a43.txt"):
        assert shipped[name]["elapsed_s"] < 5, name  # judged from the build's outcome


HONEST_GPU = ("conv2d_square/cuda_direct_conv.py", "conv2d_asym_input/cuda_direct_conv.py",
              "conv2d_asym_kernel/cuda_direct_conv.py", "softmax/triton_softmax.py", "bias_gelu_residual/cuda_fused.py")


def test_honest_shipped_kernels_get_no_flags_and_their_own_device_time(shipped):
    for name in HONEST_GPU:
        result = shipped[name]
        assert result["flags"] == [], (name, result["flags"], result["evidence"])
        assert result["custom_kernel_share"] > 0.5, (name, result["kernels"][:3])
        assert "candidate" in {k["origin"] for k in result["kernels"]}, name


def test_conv_speedups_are_given_against_both_baselines(shipped):
    """PyTorch's default math (TF32 in cuDNN) makes the conv reference faster: the second speedup is lower."""
    for name in HONEST_GPU[:3]:
        result = shipped[name]
        assert result["speedup_default_math"] is not None, name
        assert result["reference_default_math_timing"]["median_ms"] <= 1.05 * result["reference_timing"]["median_ms"]


def test_fused_kernel_beats_pytorch(shipped):
    assert shipped["bias_gelu_residual/cuda_fused.py"]["speedup"] > 1.0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_all_gpus_give_the_verdicts_of_one(tmp_path):
    verdicts = []
    for gpus in ("0", ",".join(map(str, range(torch.cuda.device_count())))):
        out = tmp_path / f"gpus{len(gpus)}"
        code = main(["eval", str(DATA / "candidates"), "--problems", str(DATA / "problems"), "--out", str(out),
                     "--device", "cuda", "--trials", "3", "--timeout", "30", "--build-dir", str(tmp_path / "b"),
                     "--db", str(tmp_path / "h.db"), "--gpus", gpus])
        assert code == 0
        results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        verdicts.append({r["candidate"]: r["status"] for r in results})
        used = {r["gpu"] for r in results if r["gpu"] is not None}
    assert verdicts[0] == verdicts[1]
    assert len(used) > 1  # the work really was spread


def test_workers_keep_to_their_cores_and_their_own_gpu(tmp_path):
    """Each candidate of gpu_sandbox/ stays in its build or load until the deadline where it gets
    out: gpu_from_build.py where its build worker (which imports it while the lanes time others)
    can open one of the NVIDIA driver's nodes, move_cores.py where any worker can leave the cores
    it was pinned to, other_gpus.py where its evaluating worker can open another GPU's node (on a
    machine with more than one). A timeout then, ok when they cannot."""
    assert main(["eval", str(DATA / "gpu_sandbox"), "--problems", str(REPO / "problems"), "--out", str(tmp_path / "out"),
                 "--device", "cuda", "--trials", "5", "--build-timeout", "30", "--timeout", "60",
                 "--db", str(tmp_path / "h.db"), "--build-dir", str(tmp_path / "b")]) == 0
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert {r["candidate"]: r["status"] for r in results} == {
        "relu/gpu_from_build.py": "ok", "relu/move_cores.py": "ok", "relu/other_gpus.py": "ok"}, \
        [(r["candidate"], r["status"], r["error"]) for r in results]
    assert all("own_gpu_node_only" in r["protections"] for r in results), [r["protections"] for r in results]


def test_wrong_and_crashing_candidates_on_gpu(tmp_path):
    code = main(["eval", str(DATA / "candidates"), "--problems", str(DATA / "problems"), "--out", str(tmp_path),
                 "--device", "cuda", "--trials", "3", "--timeout", "30", "--build-dir", str(tmp_path / "b"),
                 "--db", str(tmp_path / "h.db")])
    assert code == 0
    results = {r["candidate"]: r["status"] for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert results["tiny_relu/mismatch.py"] == "mismatch"
    assert results["tiny_relu/forged_stdout.py"] == "mismatch"
    assert results["tiny_relu/transcript.md"] == "ok"
    assert results["tiny_relu/crash.py"] == "crash"
    assert results["tiny_relu/ok_cpp.py"] == "skipped"  # a CPU C++ kernel on a GPU run
    assert results["tiny_linear/wrong_init.py"] == "mismatch"


# For each seed: the diagnosed cause, and the edit its hint asks for (old text -> new text).
SEED_FIXES = {
    "conv2d_square/000_e04650da845c912a.txt": ("extern_c_linkage", [('extern "C" __host__', "__host__")]),
    "conv2d_square/001_fe76667a27343746.txt": ("nonexistent_api", [
        ("torch::cuda::getCurrentCUDAStream()", "at::cuda::getCurrentCUDAStream()"),
        ("#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#include <ATen/cuda/CUDAContext.h>"),
        ('cpp_sources=[""]', 'cpp_sources=["torch::Tensor conv2d_cuda(torch::Tensor input, torch::Tensor weight, '
                             'torch::Tensor bias, int padding, int stride);"]')]),
    "conv2d_square/002_af9bec9bd9895a43.txt": ("missing_declaration", [
        ('cpp_sources=""', 'cpp_sources="torch::Tensor custom_conv2d_cuda(torch::Tensor input, torch::Tensor weight, '
                           'torch::Tensor bias, int stride, int padding, int dilation, int groups);"')]),
    "conv2d_asym_input/003_6104c7e189fce0ef.txt": ("module_called", [
        ("return self.conv2d_cuda(x,", "return self.conv2d_cuda.conv2d_cuda(x,")]),
    "conv2d_asym_kernel/004_6be3e13551aa2980.txt": ("cxx_standard", [
        ('extra_cflags=["-std=c++14"]', "extra_cflags=[]"), ('extra_cuda_cflags=["-std=c++14"]', "extra_cuda_cflags=[]")]),
}


def test_seeds_get_the_right_cause(shipped):
    for name, (category, _) in SEED_FIXES.items():
        diagnosis = shipped[name]["diagnosis"]
        assert diagnosis["category"] == category, (name, diagnosis)
    assert "missing_declaration" in shipped["conv2d_square/001_fe76667a27343746.txt"]["diagnosis"]["other_causes"]


def test_applying_each_hint_removes_its_cause(tmp_path):
    from harness.inputs.candidates import read_candidate

    for name, (_, edits) in SEED_FIXES.items():
        code = read_candidate(REPO / "candidates" / name, name, None).code
        for old, new in edits:
            assert old in code, (name, old)
            code = code.replace(old, new, 1)
        fixed = tmp_path / "fixed" / name.replace(".txt", "_fixed.py")
        fixed.parent.mkdir(parents=True, exist_ok=True)
        fixed.write_text(code)
    assert main(["eval", str(tmp_path / "fixed"), "--problems", str(REPO / "problems"), "--out", str(tmp_path / "out"),
                 "--device", "cuda", "--trials", "10", "--db", str(tmp_path / "h.db"),
                 "--build-dir", str(tmp_path / "build")]) == 0
    after = {r["candidate"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    for name, (category, _) in SEED_FIXES.items():
        before, now = SEED_VERDICTS[name][0], after[name.replace(".txt", "_fixed.py")]
        print(f"{name}: {before} ({category}) -> {now['status']} ({(now['diagnosis'] or {}).get('category')}) "
              f"{now['error'] or ''} speedup={now['speedup']}")
        assert now["status"] != before or now["diagnosis"]["category"] != category, (name, now["error"])


# A forger's time by the parent's clock against its honest twin's, in one run: within this, no gain.
# With one call to a timed command, 4 of 27 forgeries gained over 1.5x (up to 7.2x) in ten runs on
# an H100; nine calls to a command, the forgers' vouched times came to 0.68 to 1.15 of the twin's
# in eight runs whose times were kept (2026-11-27, bench/gpu_forgers.py).
NOISE = 1.2


@pytest.fixture(scope="module")
def gpu_tricks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tricks")
    assert main(["eval", str(DATA / "gpu_integrity"), "--problems", str(REPO / "problems"), "--out", str(tmp / "out"),
                 "--device", "cuda", "--trials", "20", "--db", str(tmp / "h.db"), "--build-dir", str(tmp / "b")]) == 0
    return {r["candidate"]: r for r in map(json.loads, (tmp / "out" / "results.jsonl").read_text().splitlines())}


def test_one_output_buffer_returned_every_call_is_a_mismatch_that_says_so(gpu_tricks):
    """A kept buffer, overwritten by each call of a batch: each call's outputs are described by
    their allocation, and two calls in one allocation are told apart from a wrong answer."""
    static = gpu_tricks["relu/static_out.py"]
    assert static["status"] == "mismatch" and "in the same memory on different calls" in static["error"], \
        (static["status"], static["error"])


@pytest.mark.parametrize("name", ["side_stream.py", "side_stream_early.py"])
def test_work_on_side_streams_is_timed(gpu_tricks, name):
    """Work left on a side stream past the timed stream's end shows in the device-wide join
    (side_stream.py); work that would start on one while the hold keeps the timed stream waiting
    finds no room on any SM until the hold ends (side_stream_early.py, never waiting on it)."""
    side, same = gpu_tricks[f"relu/{name}"], gpu_tricks["relu/same_stream.py"]
    assert side["status"] == same["status"] == "ok", (side["error"], same["error"])
    ratio = side["timing"]["median_ms"] / same["timing"]["median_ms"]
    print(f"{name} {side['timing']['median_ms']:.3f} ms, same stream {same['timing']['median_ms']:.3f} ms")
    assert 0.8 < ratio < 1.25


def test_forged_timing_gains_nothing(gpu_tricks):
    """A worker that claims 1 ns per call is timed by the parent's clock instead: rejected (its
    profiled calls give it away on some runs), or no faster than the same kernel reporting honestly."""
    forged, honest = gpu_tricks["relu/forged_fast.py"], gpu_tricks["relu/honest_twin.py"]
    print(forged["status"], forged["evidence"], honest["wall_ms_per_call"], honest["timing"]["median_ms"])
    assert forged["status"] in ("ok", "rejected"), (forged["status"], forged["error"])
    assert honest["status"] == "ok", honest["error"]
    if forged["status"] == "ok":
        # What it claimed for each command, kept as evidence (per call: over the command's calls).
        assert forged["timing"]["median_ms"] * forged["timing"]["calls_per_sample"] == pytest.approx(1e-6)
        # Contradicted by the parent's clock, it is timed by that clock: its wall time less the
        # reference's overhead, a relu of 0.7 ms timed nine calls to a command, each with about
        # 0.7 ms of the harness's work around it (docs/threat-model.md, the bound on a GPU).
        # Times, not speedups: each speedup is against the reference as timed near that candidate,
        # and a sub-ms reference was 0.150 ms near one and 0.216 ms near the other on an H100.
        vouched, honest_ms = vouched_ms(forged), vouched_ms(honest)
        assert vouched > honest_ms / NOISE, (vouched, honest_ms, forged["evidence"])


def test_code_that_runs_only_when_watched_is_caught_when_slower_than_the_profiler_explains(gpu_tricks):
    """watched_slow.py sleeps 50 ms in every profiled call: slower than the profiler's cost on the
    reference, both when it was timed and as measured again with the candidate stopped.
    watched_padded.py spins 20 ms in them, its profiles padded with 62 trivial operators."""
    watched = gpu_tricks["relu/watched_slow.py"]
    # Its unprofiled calls are honest, yet now and then a worker's per-call overhead sits above the
    # reference's by more than the bound's slack and they are flagged `timing_disagrees` too (2 of
    # about 15 runs, 2026-11-26): an open problem of the timing bound (docs/threat-model.md), not
    # what this test is about.
    assert watched["status"] == "rejected" and "inconsistent_when_profiled" in watched["flags"], \
        (watched["status"], watched["error"])
    assert set(watched["flags"]) <= {"inconsistent_when_profiled", "timing_disagrees"}, watched["flags"]
    # Padded with 62 trivial operators, each buying the profiler's cost on the reference as room
    # (what launch-bound honest candidates need): caught or not, unwatched it runs the reference's
    # own operator, which cannot beat it.
    padded = gpu_tricks["relu/watched_padded.py"]
    assert padded["status"] == "rejected" or padded["speedup"] < 1.5, (padded["status"], padded["speedup"])


def test_spinners_left_for_the_recalibration_gain_nothing(gpu_tricks):
    """forged_fast.py's lie with processes spinning on the worker's core while the reference
    measures the overhead its bound subtracts: stopped then, so they widen nothing."""
    forged, honest = gpu_tricks["relu/forged_spinning.py"], gpu_tricks["relu/honest_twin.py"]
    print(forged["status"], forged["evidence"], forged["timing_bound"])
    assert forged["status"] in ("ok", "rejected"), (forged["status"], forged["error"])
    if forged["status"] == "ok":
        assert vouched_ms(forged) > vouched_ms(honest) / NOISE, (vouched_ms(forged), vouched_ms(honest))


def test_gpu_work_left_for_the_recalibration_gains_nothing(gpu_tricks):
    """Kernels a candidate leaves running when its processes are stopped are time-sliced with the
    reference's recalibration calls: the reference waits for them to end (forged_background.py:
    forged_fast.py's lie with a spinning kernel kept queued), and a candidate whose kernel does not
    end within the wait is rejected untimed (busy_while_stopped.py)."""
    forged, honest = gpu_tricks["relu/forged_background.py"], gpu_tricks["relu/honest_twin.py"]
    print(forged["status"], forged["evidence"], forged["timing_bound"])
    assert forged["status"] in ("ok", "rejected"), (forged["status"], forged["error"])
    if forged["status"] == "ok":
        assert vouched_ms(forged) > vouched_ms(honest) / NOISE, (vouched_ms(forged), vouched_ms(honest))
    else:
        assert "busy_while_stopped" not in forged["flags"], forged["error"]  # its kernels end within the wait
    busy = gpu_tricks["relu/busy_while_stopped.py"]
    assert busy["status"] == "rejected" and busy["flags"] == ["busy_while_stopped"], (busy["status"], busy["error"])


def test_gpu_work_queued_after_the_reply_is_timed(gpu_tricks):
    """deferred_work.py computes its outputs only after its last call's end event: the parent
    charges a verified command the time the GPU stays busy after its reply (an unverified one's
    work is waited for in the next command). Rejected, a mismatch where the parent read its
    outputs first, or timed at no less than its honest twin's time."""
    deferred, honest = gpu_tricks["relu/deferred_work.py"], gpu_tricks["relu/honest_twin.py"]
    print(deferred["status"], deferred["flags"], deferred["error"], deferred["timing_bound"])
    assert deferred["status"] in ("ok", "rejected", "mismatch"), (deferred["status"], deferred["error"])
    if deferred["status"] == "ok":
        assert vouched_ms(deferred) > vouched_ms(honest) / NOISE, (vouched_ms(deferred), vouched_ms(honest))


SPINNER = """
import torch
torch.cuda._sleep(1000)
torch.cuda.synchronize()
print("spinning", flush=True)
while True:
    torch.cuda._sleep(200_000_000)
    torch.cuda.synchronize()
"""


def test_gpu_work_from_outside_the_run_is_not_blamed_on_the_candidate(tmp_path):
    """A process outside the run keeps a kernel spinning on the GPU throughout: the busy GPU
    outlasts the candidate's processes, so the honest candidate is skipped, not rejected."""
    (tmp_path / "c" / "relu").mkdir(parents=True)
    shutil.copy(DATA / "gpu_integrity" / "relu" / "honest_twin.py", tmp_path / "c" / "relu")
    spinner = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE, text=True)
    try:
        assert spinner.stdout.readline().strip() == "spinning"
        assert main(["eval", str(tmp_path / "c"), "--problems", str(REPO / "problems"), "--out", str(tmp_path / "out"),
                     "--device", "cuda", "--trials", "20", "--db", str(tmp_path / "h.db"),
                     "--build-dir", str(tmp_path / "b")]) == 0
    finally:
        spinner.kill()
        spinner.wait()
    result = json.loads((tmp_path / "out" / "results.jsonl").read_text())
    assert result["status"] == "skipped" and "outside this run" in result["error"], (result["status"], result["error"])


def test_an_output_described_past_its_allocation_is_a_broken_message(gpu_tricks):
    """Refused before anything is read: the parent's CUDA context survives it, so the candidates
    after it in the same run (side_stream.py, same_stream.py) are judged as usual."""
    for name in ("relu/past_allocation.py", "relu/overrun_allocation.py"):  # starting past it, or running past it
        past = gpu_tricks[name]
        assert past["status"] == "crash" and "past its" in past["error"], (name, past["status"], past["error"])
    assert gpu_tricks["relu/side_stream.py"]["status"] == "ok"


def vouched_ms(result: dict) -> float:
    """The time a result's speedup is taken from (the harness's clock's, not the worker's)."""
    reference = result["reference_recalibrated_timing"] or result["reference_timing"]
    return reference["median_ms"] / result["speedup"]


def test_cudnn_fallback_is_rejected_with_kernel_evidence(gpu_tricks):
    fallback = gpu_tricks["conv2d_asym_kernel/cudnn_fallback.py"]
    assert fallback["status"] == "rejected" and "reference_fallback" in fallback["flags"]
    assert any("kernel" in line for line in fallback["evidence"])
    assert "cudnn" in {k["origin"] for k in fallback["kernels"]}, fallback["kernels"][:3]
    assert "no_custom_kernel" in fallback["flags"]


def test_check_runs_on_the_gpu(tmp_path):
    """The parent opens CUDA IPC handles before anything else initialised CUDA in it."""
    assert main(["check", str(DATA / "degenerate"), "--device", "cuda", "--json", str(tmp_path / "f.jsonl")]) == 0
    findings = {f["problem"]: f["flags"] for f in map(json.loads, (tmp_path / "f.jsonl").read_text().splitlines())}
    # Inputs are made on the GPU there, so which of the two flags fits depends on their values.
    assert findings["healthy_relu"] == [] and {"zeros_pass", "near_zero"} & set(findings["wide_softmax"])

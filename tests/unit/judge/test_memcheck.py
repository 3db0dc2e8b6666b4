"""--memcheck: what compute-sanitizer's log and exit code make of a candidate, which tools its
code gets, where the sanitizer is found, and the verdict its findings give."""

import os
import stat

import pytest

from harness.errors import UsageError
from harness.judge import memcheck, verdicts
from harness.judge.memcheck import ERRORS_EXIT, find_sanitizer, read_report, tools_for
from harness.records import (
    EvalConfig,
    HostEnv,
    Limits,
    Phase,
    Result,
    SandboxMode,
    Sanitized,
    SanitizerStatus,
    Status,
)
from harness.run import RunSetup, sanitizer_for
from harness.schedule.plan import RunScale
from harness.worker.sandbox import SandboxPolicy

# As CUDA 12 and 13 print them (the host backtrace shortened).
MEMCHECK_LOG = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at relu_kernel(const float *, float *, int)+0x90 in /tmp/harness-worker-0/ext/cuda.cu:12
=========     by thread (0,0,0) in block (4096,0,0)
=========     Address 0x7f3a1e000000 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a1dc00000 of size 4194304 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2ef045] in libcuda.so.1
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaDeviceSynchronize.
=========
========= ERROR SUMMARY: 2 errors
"""
OLD_FORMAT_LOG = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at 0x70 in /tmp/ext/cuda.cu:9:void add_kernel<float>(float const *, float *, int)
=========     by thread (31,0,0) in block (10,0,0)
========= ERROR SUMMARY: 1 error
"""
RACECHECK_LOG = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at block_sum(const float *, float *)+0x1c0 in cuda.cu:15
=========     and Read access at block_sum(const float *, float *)+0x200 in cuda.cu:17 [1024 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
CLEAN_LOG = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
TRITON_LOG = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at triton_poi_fused_relu_0+0x120 in /tmp/harness-worker-0/triton/abc/relu.py:21
========= ERROR SUMMARY: 1 error
"""
WARNINGS_ONLY_LOG = """========= COMPUTE-SANITIZER
========= Warning: Race reported between Read access at k(float *)+0x10 in cuda.cu:3
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
"""


def test_the_first_error_and_the_kernel_it_is_in_are_the_reason():
    assert read_report(MEMCHECK_LOG, ERRORS_EXIT) == (
        SanitizerStatus.errors, "Invalid __global__ write of size 4 bytes", "relu_kernel", 2)
    assert read_report(OLD_FORMAT_LOG, ERRORS_EXIT) == (
        SanitizerStatus.errors, "Invalid __global__ read of size 4 bytes", "add_kernel<float>", 1)
    assert read_report(TRITON_LOG, ERRORS_EXIT)[2] == "triton_poi_fused_relu_0"
    status, line, kernel, errors = read_report(RACECHECK_LOG, ERRORS_EXIT)
    assert (status, kernel, errors) == (SanitizerStatus.errors, "block_sum", 1)
    assert line.startswith("Error: Race reported between Write access")


def test_no_errors_is_clean_and_warnings_are_not_errors():
    assert read_report(CLEAN_LOG, 0) == (SanitizerStatus.clean, None, None, 0)
    assert read_report(WARNINGS_ONLY_LOG, 0) == (SanitizerStatus.clean, None, None, 0)
    # Its summary's count over its exit code: the worker's own exit or a failed API call is no
    # kernel's memory error.
    assert read_report(CLEAN_LOG, ERRORS_EXIT)[0] is SanitizerStatus.clean


def test_its_exit_code_finds_errors_that_its_log_does_not_quote():
    status, line, _, _ = read_report("", ERRORS_EXIT)
    assert status is SanitizerStatus.errors and "quotes none" in line


@pytest.mark.parametrize("log, exit_code, said", [
    ("========= COMPUTE-SANITIZER\n", 1, "exit code 1"),
    ("========= COMPUTE-SANITIZER\n========= Error: Target application terminated before first instrumented API call\n",
     None, "was stopped (Error: Target application terminated"),
    ("", 0, "no summary in its log"),
], ids=["worker_failed", "stopped", "no_log"])
def test_a_pass_without_a_summary_did_not_judge(log, exit_code, said):
    status, reason, kernel, errors = read_report(log, exit_code)
    assert status is SanitizerStatus.inconclusive and said in reason and kernel is None and errors is None


def test_racecheck_only_where_the_code_declares_shared_memory():
    assert tools_for("__global__ void k(float* x) { x[0] = 1; }") == ["memcheck"]
    assert tools_for("__global__ void k() { __shared__ float tile[32]; }") == ["memcheck", "racecheck"]
    assert tools_for("extern __shared__ float dynamic[];") == ["memcheck", "racecheck"]


def executable(path, text="#!/bin/sh\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_sanitizer_is_found_on_the_path_or_in_cuda_home_as_its_own_binary(tmp_path, monkeypatch):
    monkeypatch.setattr(memcheck, "DEFAULT_TOOLKIT", str(tmp_path / "no-toolkit"))
    toolkit = tmp_path / "cuda"
    launcher = executable(toolkit / "bin" / "compute-sanitizer")
    binary = executable(toolkit / "compute-sanitizer" / "compute-sanitizer")
    assert find_sanitizer({"PATH": str(toolkit / "bin")}) == str(binary.resolve())
    assert find_sanitizer({"PATH": "/nowhere", "CUDA_HOME": str(toolkit)}) == str(binary.resolve())
    binary.unlink()
    assert find_sanitizer({"PATH": str(toolkit / "bin")}) == str(launcher.resolve())
    assert find_sanitizer({"PATH": str(tmp_path / "empty")}) is None
    os.chmod(launcher, 0o644)
    assert find_sanitizer({"PATH": "", "CUDA_HOME": str(toolkit)}) is None


def setup(tmp_path, passed=None, backend="local"):
    return RunSetup(scale=RunScale(backend=backend), host=HostEnv(passed=passed or {}, cache_home=str(tmp_path)),
                    build_root=tmp_path, sandbox=SandboxPolicy(mode=SandboxMode.off, limits=Limits(host_memory=1 << 30)))


def test_memcheck_is_refused_where_it_cannot_run(tmp_path, monkeypatch):
    monkeypatch.setattr(memcheck, "DEFAULT_TOOLKIT", str(tmp_path / "no-toolkit"))
    assert sanitizer_for(EvalConfig(device="cuda"), setup(tmp_path)) is None  # not asked for
    with pytest.raises(UsageError, match="needs a CUDA run"):
        sanitizer_for(EvalConfig(device="cpu", memcheck=True), setup(tmp_path))
    with pytest.raises(UsageError, match="none on the PATH, in CUDA_HOME/bin"):
        sanitizer_for(EvalConfig(device="cuda", memcheck=True), setup(tmp_path, {"PATH": str(tmp_path)}))
    with pytest.raises(UsageError, match="backend ray"):
        sanitizer_for(EvalConfig(device="cuda", memcheck=True), setup(tmp_path, backend="ray"))
    binary = executable(tmp_path / "cuda" / "bin" / "compute-sanitizer")
    assert sanitizer_for(EvalConfig(device="cuda", memcheck=True),
                         setup(tmp_path, {"PATH": str(binary.parent)})) == str(binary.resolve())


def passed_result():
    return Result(run_id="r", problem="relu", candidate="relu/oob.py", candidate_hash="h", status=Status.ok,
                  speedup=1.7, speedup_interval=[1.6, 1.8], flags=["no_custom_kernel"])


def test_errors_found_make_a_passed_candidate_a_memory_error_naming_the_kernel():
    passes = [Sanitized(tool="memcheck", status=SanitizerStatus.errors, seconds=4.2,
                        report="Invalid __global__ write of size 4 bytes", kernel="relu_kernel", errors=2)]
    judged = verdicts.sanitized(passed_result(), passes)
    assert judged.status is Status.runtime_error and judged.phase is Phase.memcheck
    assert judged.flags == ["no_custom_kernel", verdicts.MEMORY_ERROR_FLAG]
    assert judged.error == ("compute-sanitizer memcheck in relu_kernel: Invalid __global__ write of size 4 bytes "
                            "(2 errors in all)")
    assert judged.speedup is None and judged.speedup_interval is None and judged.sanitized == passes


@pytest.mark.parametrize("status", [SanitizerStatus.clean, SanitizerStatus.inconclusive])
def test_a_clean_pass_or_one_that_could_not_run_keeps_the_verdict(status):
    passes = [Sanitized(tool="memcheck", status=status, seconds=1.0,
                        report=None if status is SanitizerStatus.clean else "the worker under memcheck stopped")]
    judged = verdicts.sanitized(passed_result(), passes)
    assert judged.status is Status.ok and judged.speedup == 1.7 and judged.error is None
    assert judged.sanitized == passes

"""Diagnoses: each cause in the taxonomy is recognised from the recorded evidence, with a hint."""

import pytest

from harness.judge.diagnose import diagnose, unused_init_arguments
from harness.records import CompilerDiagnostic, Result, Status


def result(status, error=None, evidence=(), flags=(), phase="correctness", diagnostics=(), max_abs_err=None, gpu=None,
           kind=None):
    return Result(run_id="r", problem="p", candidate="c.py", status=status, error=error, evidence=list(evidence),
                  flags=list(flags), phase=phase, candidate_hash="h", compiler_diagnostics=list(diagnostics),
                  max_abs_err=max_abs_err, gpu=gpu, kind=kind)


def located(message, file="main.cpp", line=4):
    return CompilerDiagnostic(severity="error", message=message, file=file, line=line, in_candidate=True)


SEED_000 = 'extern "C" __host__ torch::Tensor conv2d_cuda_forward(torch::Tensor input) {}\nload_inline(functions=["conv2d_cuda_forward"])'


SEED_001 = 'load_inline(name="conv2d_cuda", cpp_sources=[""], functions=["conv2d_cuda"])'


SEED_004 = 'load_inline(functions=["conv2d_cuda"], extra_cflags=["-std=c++14"], extra_cuda_cflags=["-std=c++14"])'


CUDA_NO_CHECK = 'kernel<<<blocks, threads>>>(x, y, n);\nreturn y;\nload_inline(functions=["f"])'


CASES = {
    "extern_c_linkage": (result(Status.load_error, "the built extension does not load: undefined symbol "
                                "conv2d_cuda_forward(at::Tensor)", phase="load"), SEED_000),
    "nonexistent_api": (result(Status.compile_error, "x", diagnostics=[
        located('namespace "torch::cuda" has no member "getCurrentCUDAStream"', "cuda.cu", 119),
        located("‘conv2d_cuda’ was not declared in this scope")]), SEED_001),
    "missing_declaration": (result(Status.compile_error, "x", diagnostics=[
        located("‘conv2d_cuda’ was not declared in this scope")]), SEED_001),
    "cxx_standard": (result(Status.compile_error, "x", diagnostics=[
        located("cannot convert ‘const torch::enumtype::kFanIn’ to ‘int’", "conv.h", 104)]), SEED_004),
    "module_called": (result(Status.runtime_error, "forward raised TypeError: 'module' object is not callable"),
                      SEED_001),
    "none_for_tensor": (result(Status.runtime_error, "forward raised TypeError: conv(): incompatible function "
                               "arguments.", evidence=["Invoked with: tensor([...]), None"]), ""),
    "launch_config": (result(Status.runtime_error, "forward raised RuntimeError: CUDA error: invalid configuration "
                             "argument"), ""),
    "unchecked_launch": (result(Status.mismatch, "wrong output on trial 1/5: 100 of 100 elements", max_abs_err=3e38),
                         CUDA_NO_CHECK),
    "near_miss": (result(Status.mismatch, "wrong output on trial 1/5", flags=["near_miss"], max_abs_err=0.011),
                  CUDA_NO_CHECK),
    "launch_config_unchecked": (result(Status.runtime_error, "forward raised LaunchFailed: a kernel launch failed "
                                       "(invalid argument); the kernel never ran (during correctness)"), CUDA_NO_CHECK),
    "memory_error": (result(Status.runtime_error, "a kernel made an illegal memory access: AcceleratorError: CUDA "
                            "error: an illegal memory access was encountered", flags=["memory_error"]), ""),
    "missing_header": (result(Status.compile_error, "x", diagnostics=[
        located('identifier "C10_CUDA_KERNEL_LAUNCH_CHECK" is undefined', "cuda.cu", 30)]), CUDA_NO_CHECK),
    "binding_arguments": (result(Status.runtime_error, "forward raised TypeError: fused(): incompatible function "
                                 "arguments. The following argument types are supported: (arg0: at::Tensor, arg1: "
                                 "float)", evidence=["Invoked with: tensor([...]), tensor([...])"]), ""),
    "model_attribute": (result(Status.runtime_error, "forward raised AttributeError: 'ModelNew' object has no "
                               "attribute 'scale' (during correctness)"), ""),
    "triton_compile": (result(Status.runtime_error, "forward raised CompilationError: at 12:8: arange's range must "
                              "be a power of 2"), ""),
    "input_mutation": (result(Status.rejected, "forward changed its input(s) [0]", flags=["input_mutation"]), ""),
    "faster_than_hardware": (result(Status.rejected, "median 0.001 ms is below what this GPU can do",
                                    flags=["faster_than_hardware"]), ""),
    "busy_while_stopped": (result(Status.rejected, "its GPU work ran on for over 0.1 s while its processes were stopped",
                                  flags=["busy_while_stopped"], phase="timing"), ""),
    "reference_fallback": (result(Status.rejected, "forward computes with PyTorch's own kernels",
                                  flags=["reference_fallback"]), ""),
    "input_insensitive": (result(Status.rejected, "its output was the same for 5 different inputs",
                                 flags=["input_insensitive"]), ""),
    "init_differs": (result(Status.mismatch, "wrong output", flags=["init_differs"]), ""),
    # crashes: each its own hint, not the GPU's compute-sanitizer for all
    "harness_error": (result(Status.crash, "the harness failed while judging it (a harness bug: please report it): "
                             "PermissionError: [Errno 1] Operation not permitted"), ""),
    "resource_limit": (result(Status.crash, "worker held 4.48 GiB of host memory, over the 2.00 GiB limit "
                              "(--max-host-memory); killed (during timing)"), ""),
    "exited": (result(Status.crash, "worker exited with code 0 (during correctness)"), ""),
    "native_crash": (result(Status.crash, "worker killed by SIGSEGV (during correctness)", kind="cpp"), ""),
    "ignored_ctor_args": (result(Status.mismatch, "wrong output"),
                          "class ModelNew:\n    def __init__(self, a, stride=1):\n        self.a = a\n"),
    "syntax_error": (result(Status.load_error, "import failed: SyntaxError: invalid syntax (candidate.py, line 3)",
                            phase="load"), ""),
    "truncated_answer": (result(Status.load_error, "import failed: SyntaxError: '(' was never closed", phase="load"), ""),
    "no_model_new": (result(Status.load_error, "import failed: LookupError: the code defines no ModelNew class",
                            phase="load"), ""),
    "missing_import": (result(Status.load_error, "import failed: NameError: name 'nn' is not defined", phase="load"), ""),
    "no_code": (result(Status.load_error, "not a text file (contains NUL bytes)", phase="extract"), ""),
}


@pytest.mark.parametrize("category", sorted(CASES))
def test_each_cause_is_recognised_with_a_hint(category):
    diagnosis = diagnose(*CASES[category])
    assert diagnosis.category == category.removesuffix("_unchecked")
    assert diagnosis.summary and diagnosis.hint


def test_unchecked_launch_is_only_for_garbage_sized_errors():
    """Close to right (a layernorm off by 0.01) is not a launch that never ran."""
    close = result(Status.mismatch, "wrong output on trial 1/5", max_abs_err=0.01)
    assert diagnose(close, CUDA_NO_CHECK).category == "wrong_output"
    nan = result(Status.mismatch, "wrong output on trial 1/5: NaN", max_abs_err=float("nan"))
    assert diagnose(nan, CUDA_NO_CHECK).category == "unchecked_launch"
    assert "c10/cuda/CUDAException.h" in diagnose(nan, CUDA_NO_CHECK).hint
    # As recorded: NaN where the reference is finite leaves no error size, the error line says so.
    recorded = result(Status.mismatch, "wrong output on trial 1/5: 4096 NaN/Inf values where the reference is finite")
    assert diagnose(recorded, CUDA_NO_CHECK).category == "unchecked_launch"


def test_only_faulting_compiled_code_gets_the_native_crash_hint():
    """Not a SIGKILL (the OOM killer), not a candidate with nothing compiled."""
    assert diagnose(result(Status.crash, "worker killed by SIGKILL (during timing)", kind="cpp"), "").category == "crash"
    assert diagnose(result(Status.crash, "worker killed by SIGSEGV", kind="python"), "").category == "crash"


def test_each_rejection_flag_gets_its_own_hint():
    hints = {diagnose(*CASES[flag]).hint for flag in ("input_mutation", "faster_than_hardware", "reference_fallback",
                                                     "input_insensitive", "busy_while_stopped")}
    assert len(hints) == 5 and not any("plain torch.Tensor" in hint for hint in hints)


def test_near_miss_names_the_tolerance_it_would_pass_at():
    assert "--atol 0.02" in diagnose(*CASES["near_miss"]).hint


def test_memory_errors_give_the_sanitizer_command_for_that_candidate():
    hint = diagnose(*CASES["memory_error"]).hint
    assert "compute-sanitizer --tool memcheck" in hint and "c.py" in hint


def test_missing_launch_check_header_names_the_header():
    assert "#include <c10/cuda/CUDAException.h>" in diagnose(*CASES["missing_header"]).hint


def test_hints_name_the_fix():
    assert "at::cuda::getCurrentCUDAStream" in diagnose(*CASES["nonexistent_api"]).hint
    assert "cpp_sources" in diagnose(*CASES["missing_declaration"]).hint
    assert "-std=c++14" in diagnose(*CASES["cxx_standard"]).hint
    assert 'extern "C"' in diagnose(*CASES["extern_c_linkage"]).hint
    assert "import torch.nn as nn" in diagnose(*CASES["missing_import"]).hint
    assert "ext.conv2d_cuda(" in diagnose(*CASES["module_called"]).hint


def test_several_causes_are_all_named():
    diagnosis = diagnose(*CASES["nonexistent_api"])
    assert diagnosis.other_causes == ["missing_declaration"]


def test_fallbacks_and_no_diagnosis_for_ok():
    assert diagnose(result(Status.ok), "") is None and diagnose(result(Status.skipped), "") is None
    assert diagnose(result(Status.crash, "worker killed by SIGSEGV", gpu=0), "").category == "crash"  # compute-sanitizer
    assert diagnose(result(Status.compile_error, "main.cpp:3: error: x"), "").category == "compile_error_other"


def test_unused_constructor_arguments():
    code = "class ModelNew:\n    def __init__(self, a, b, *, c=1):\n        self.x = a + c\n"
    assert unused_init_arguments(code) == ["b"]
    assert unused_init_arguments("not python (") == []

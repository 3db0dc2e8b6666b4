"""Diagnoses: each cause in the taxonomy is recognised from the recorded evidence, with a hint."""

import pytest

from harness.judge.diagnose import diagnose, unused_init_arguments
from harness.records import CompilerDiagnostic, Result, Status


def result(status, error=None, evidence=(), flags=(), phase="correctness", diagnostics=()):
    return Result(run_id="r", problem="p", candidate="c.py", status=status, error=error, evidence=list(evidence),
                  flags=list(flags), phase=phase, candidate_hash="h", compiler_diagnostics=list(diagnostics))


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
    "unchecked_launch": (result(Status.mismatch, "wrong output on trial 1/5: 100 of 100 elements"), CUDA_NO_CHECK),
    "init_differs": (result(Status.mismatch, "wrong output", flags=["init_differs"]), ""),
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
    assert diagnosis.category == category
    assert diagnosis.summary and diagnosis.hint


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
    assert diagnose(result(Status.crash, "worker killed by SIGSEGV"), "").category == "crash"
    assert diagnose(result(Status.compile_error, "main.cpp:3: error: x"), "").category == "compile_error_other"


def test_unused_constructor_arguments():
    code = "class ModelNew:\n    def __init__(self, a, b, *, c=1):\n        self.x = a + c\n"
    assert unused_init_arguments(code) == ["b"]
    assert unused_init_arguments("not python (") == []

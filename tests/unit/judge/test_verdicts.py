"""Worker failures become verdicts with a one-line, actionable reason."""

from harness.judge.verdicts import of_failure, speedup
from harness.records import Status
from harness.worker.protocol import Failure

NINJA_LOG = """\
[1/3] c++ -MMD -MF main.o.d -std=c++17 -c /tmp/ext/conv/main.cpp -o main.o
FAILED: main.o
/tmp/ext/conv/main.cpp: In function 'void init(pybind11::module_&)':
/usr/lib/torch/include/torch/nn/modules/conv.h:104:27: error: cannot convert 'kFanIn' to 'int'
/tmp/ext/conv/main.cpp:4:57: error: 'custom_conv2d_cuda' was not declared in this scope
/tmp/ext/conv/cuda.cu(119): error: namespace "torch::cuda" has no member "getCurrentCUDAStream"
ninja: build stopped: subcommand failed.
"""


def fail(phase, exc_type, message):
    return Failure(phase=phase, exc_type=exc_type, message=message, traceback=["Traceback ...", f"{exc_type}: x"])


def test_build_failure_gives_the_first_error_in_the_candidates_own_source():
    verdict = of_failure(fail("load", "RuntimeError", "Error building extension 'conv'"), NINJA_LOG, "cuda")
    assert verdict.status is Status.compile_error
    # The kernel source's error first, whichever of the two sources the log shows first.
    assert verdict.error == 'cuda.cu:119: error: namespace "torch::cuda" has no member "getCurrentCUDAStream"'
    assert verdict.evidence[1] == "main.cpp:4: error: 'custom_conv2d_cuda' was not declared in this scope"
    assert verdict.evidence[-1].startswith("conv.h:104")  # header errors rank after the candidate's own
    binding = verdict.compiler_diagnostics[1]
    assert (binding.file, binding.line, binding.column, binding.severity, binding.in_candidate) == ("main.cpp", 4, 57, "error", True)


def test_build_failure_inside_init_is_still_a_compile_error():
    verdict = of_failure(fail("init", "RuntimeError", "Error building extension 'x': " + NINJA_LOG), "", "cuda")
    assert verdict.status is Status.compile_error


def test_undefined_symbol_is_a_load_error_with_the_demangled_name():
    message = "/tmp/conv2d_cuda.so: undefined symbol: _Z19conv2d_cuda_forwardN2at6TensorES0_i"
    verdict = of_failure(fail("load", "ImportError", message), "", "cuda")
    assert verdict.status is Status.load_error
    assert "undefined symbol conv2d_cuda_forward(at::Tensor, at::Tensor, int)" in verdict.error


def test_import_problems_are_load_errors_and_later_ones_runtime_errors():
    assert of_failure(fail("load", "SyntaxError", "invalid syntax (candidate.py, line 3)"), "", "cpu").status \
        is Status.load_error
    init = of_failure(fail("init", "TypeError", "__init__() takes 1 positional argument"), "", "cpu")
    assert init.status is Status.runtime_error and init.error.startswith("ModelNew(*get_init_inputs()) raised")
    forward = of_failure(fail("correctness", "TypeError", "'module' object is not callable"), "", "cuda")
    assert forward.status is Status.runtime_error and "'module' object is not callable" in forward.error


def test_gpu_only_failure_on_cpu_is_skipped_not_failed():
    verdict = of_failure(fail("load", "OSError", "CUDA_HOME environment variable is not set."), "", "cpu")
    assert verdict.status is Status.skipped


def test_error_is_one_line_and_bounded():
    verdict = of_failure(fail("correctness", "ValueError", "first line\nsecond line " + "x" * 1000), "", "cpu")
    assert "\n" not in verdict.error and "second" not in verdict.error
    long = of_failure(fail("correctness", "ValueError", "y" * 5000), "", "cpu")
    assert len(long.error) < 400


def test_compiler_lines_map_back_to_the_candidate_file(tmp_path):
    generated = tmp_path / "build" / "ext" / "main.cpp"
    generated.parent.mkdir(parents=True)
    generated.write_text("#include <torch/extension.h>\nint x = 1;\nreturn broken_call(x);\n")
    transcript = 'Reasoning...\n```python\nsrc = """\nint x = 1;\nreturn broken_call(x);\n"""\n```\n'
    log = f"{generated}:3:8: error: 'broken_call' was not declared in this scope\n"
    verdict = of_failure(fail("load", "RuntimeError", "Error building extension 'ext'"), log, "cpu", transcript)
    assert verdict.compiler_diagnostics[0].candidate_line == 5
    assert verdict.error.endswith("(candidate line 5)")


def test_speedup_is_reference_median_over_candidate_median():
    assert speedup(3.0, 1.5) == 2.0



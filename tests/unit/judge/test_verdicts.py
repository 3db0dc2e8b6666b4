"""Worker failures become verdicts with a one-line, actionable reason."""

from harness.judge.checking import TimedInputs, TimedOutputs
from harness.judge.checks import inconsistent_when_timed, input_mutation
from harness.judge.timing.stats import timing_stats
from harness.judge.verdicts import of_checked_timed_calls, of_failure, of_findings, of_trial, paired, result, speedup
from harness.records import CheckResult, Observations, Status, Subject, Verdict
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


def test_compiler_lines_map_back_to_the_candidate_file():
    generated = "#include <torch/extension.h>\nint x = 1;\nreturn broken_call(x);\n"
    transcript = 'Reasoning...\n```python\nsrc = """\nint x = 1;\nreturn broken_call(x);\n"""\n```\n'
    log = "/tmp/x/ext/main.cpp:3:8: error: 'broken_call' was not declared in this scope\n"
    failed = fail("load", "RuntimeError", "Error building extension 'ext'").model_copy(update={"sources": {"main.cpp": generated}})
    verdict = of_failure(failed, log, "cpu", transcript)
    assert verdict.compiler_diagnostics[0].candidate_line == 5
    assert verdict.error.endswith("(candidate line 5)")


def test_the_parent_reads_no_file_a_build_log_names(tmp_path):
    """The log is the candidate's to write: a path in it is never opened (a decoy here, standing
    for a host file or an endless one); only the sources the worker sent are used."""
    decoy = tmp_path / "ext" / "main.cpp"
    decoy.parent.mkdir()
    decoy.write_text("int x = 1;\nreturn broken_call(x);\n")
    transcript = 'src = """\nint x = 1;\nreturn broken_call(x);\n"""\n'
    log = f"{decoy}:2:8: error: 'broken_call' was not declared in this scope\n"
    verdict = of_failure(fail("load", "RuntimeError", "Error building extension 'ext'"), log, "cpu", transcript)
    assert verdict.status is Status.compile_error and verdict.compiler_diagnostics[0].candidate_line is None


def test_speedup_is_reference_median_over_candidate_median():
    assert speedup(3.0, 1.5) == 2.0




def test_an_illegal_memory_access_is_a_runtime_error_flagged_memory_error():
    verdict = of_failure(fail("correctness", "AcceleratorError", "CUDA error: an illegal memory access was encountered\n"
                              "CUDA kernel errors might be asynchronously reported"), "", "cuda")
    assert verdict.status is Status.runtime_error and verdict.flags == ["memory_error"]
    assert "illegal memory access" in verdict.error and "\n" not in verdict.error


def test_a_failed_launch_is_a_runtime_error_not_cheating():
    verdict = of_failure(fail("correctness", "LaunchFailed", "a kernel launch failed (invalid argument); the kernel "
                              "never ran"), "", "cuda")
    assert verdict.status is Status.runtime_error and "invalid argument" in verdict.error


def test_a_mismatch_within_100x_of_the_tolerance_is_a_near_miss():
    close = CheckResult(passed=False, reason="3 of 100 elements", max_abs_err=0.011, max_rel_err=0.02)
    far = CheckResult(passed=False, reason="100 of 100 elements", max_abs_err=1.1e3, max_rel_err=5.0)
    assert of_trial(close, 1, 5, False, atol=1e-4).flags == []  # 110x: not near
    assert of_trial(close, 1, 5, False, atol=1e-3).flags == ["near_miss"]
    assert of_trial(far, 1, 5, False, atol=1e-3).flags == []
    assert of_trial(far, 2, 5, True, atol=1e-3).error.startswith("wrong output on trial 2/5: 100 of 100 elements; its "
                                                                 "parameters differ from the reference's")


def test_a_wrong_timed_output_in_memory_shared_between_calls_is_a_mismatch_that_says_why():
    """One buffer returned from every call: each call overwrote the last one's answer. Only a
    wrong output is relabelled: anything else a checked call came to stands."""
    wrong = of_findings([inconsistent_when_timed.look(TimedOutputs(2, CheckResult(passed=False, reason="12 of 16")))])
    shared = of_checked_timed_calls(wrong, shared_memory=True)
    assert shared.status is Status.mismatch and "same memory on different calls" in shared.error and not shared.flags
    assert of_checked_timed_calls(wrong, shared_memory=False) == wrong
    mutated = of_findings([input_mutation.on_timed_call(TimedInputs(1, [0]))])
    assert of_checked_timed_calls(mutated, shared_memory=True) == mutated


def test_a_paired_timings_speedup_is_its_ratios_median_with_its_interval_held_to_the_clock():
    """Each reference sample pairs with the candidate's made just before it: a GPU twice as slow
    for the second half of the timing moves neither ratio. The parent's clock vouching for a
    larger median than reported lowers the speedup and its interval alike; never raises them."""
    mine = timing_stats([1.0] * 10 + [2.0] * 10, "cuda_device")
    theirs = timing_stats([4.0] * 10 + [8.0] * 10, "cuda_device")
    subject = Subject(run_id="r", problem="p", candidate="c.py", candidate_hash="h")
    observed = Observations(timing=mine, reference_timing=timing_stats([3.0] * 5, "cuda_device"),
                            reference_paired_timing=theirs, vouched_median_ms=mine.median_ms)
    assert paired(observed) == (4.0, 4.0, 4.0)
    held = result(subject, Verdict(status=Status.ok), observed)
    assert held.speedup == 4.0 and held.speedup_interval == [4.0, 4.0] and held.speedup_reference_timing == theirs
    observed.vouched_median_ms = 2 * mine.median_ms
    assert result(subject, Verdict(status=Status.ok), observed).speedup == 2.0
    observed.vouched_median_ms = mine.median_ms / 2
    assert result(subject, Verdict(status=Status.ok), observed).speedup == 4.0
    unpaired = observed.model_copy(update={"reference_paired_timing": None, "vouched_median_ms": mine.median_ms})
    assert result(subject, Verdict(status=Status.ok), unpaired).speedup == 3.0 / 1.5
    assert result(subject, Verdict(status=Status.ok), unpaired).speedup_interval is None
    assert result(subject, Verdict(status=Status.mismatch), observed).speedup is None

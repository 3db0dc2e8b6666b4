"""Diagnoses: each cause in the taxonomy is recognised, with a hint; end to end on CPU for the
causes that exist without a GPU, from the recorded evidence for the others."""

import json

import pytest

from harness.cli import main
from harness.diagnose import diagnose, unused_init_arguments
from harness.records import CompilerDiagnostic, Result, Status

from .conftest import DATA


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


EXPECTED = {
    "tiny_relu/missing_declaration.py": ("compile_error", "missing_declaration"),
    "tiny_relu/cxx14.py": ("compile_error", "cxx_standard"),
    "tiny_relu/nonexistent_api.py": ("compile_error", "nonexistent_api"),
    "tiny_relu/module_called.py": ("runtime_error", "module_called"),
    "tiny_relu/syntax_error.py": ("load_error", "syntax_error"),
    "tiny_relu/truncated.md": ("load_error", "truncated_answer"),
    "tiny_relu/missing_import.py": ("load_error", "missing_import"),
    "tiny_linear/ignored_args.py": ("mismatch", "ignored_ctor_args"),
}


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diag")
    code = main(["eval", str(DATA / "diagnoses"), "--problems", str(DATA / "problems"), "--out", str(tmp / "out"),
                 "--device", "cpu", "--trials", "2", "--db", str(tmp / "h.db"), "--build-dir", str(tmp / "build"),
                 "--feedback", str(tmp / "feedback.jsonl")])
    assert code == 0
    results = {r["candidate"]: r for r in map(json.loads, (tmp / "out" / "results.jsonl").read_text().splitlines())}
    return tmp, results


def test_real_candidates_get_the_right_cause(diagnosed):
    _, results = diagnosed
    assert {name: (r["status"], r["diagnosis"]["category"]) for name, r in results.items()} == EXPECTED


def test_compile_errors_point_at_the_candidate_line(diagnosed):
    _, results = diagnosed
    first = results["tiny_relu/missing_declaration.py"]["compiler_diagnostics"][0]
    assert first["file"] == "main.cpp" and first["candidate_line"] is None  # in the generated binding code
    api = results["tiny_relu/nonexistent_api.py"]
    assert api["compiler_diagnostics"][0]["candidate_line"] == 7  # the line calling getCurrentCUDAStream


def test_feedback_file_has_one_compact_line_per_candidate(diagnosed):
    tmp, results = diagnosed
    lines = (tmp / "feedback.jsonl").read_text().splitlines()
    assert len(lines) == len(results)
    record = next(json.loads(line) for line in lines if "cxx14" in line)
    assert set(record) == {"problem", "candidate", "verdict", "reason", "cause", "summary", "hint", "key_lines",
                           "max_abs_err", "speedup"}
    assert record["cause"] == "cxx_standard" and "-std=c++14" in record["hint"]


def test_explain_prints_the_stored_diagnosis(diagnosed, capsys):
    tmp, _ = diagnosed
    assert main(["explain", str(DATA / "diagnoses" / "tiny_relu" / "cxx14.py"), "--db", str(tmp / "h.db"),
                 "--problems", str(DATA / "problems")]) == 0
    out = capsys.readouterr().out
    assert "compile_error" in out and "cause:  cxx_standard" in out and "hint:" in out


def test_explain_evaluates_a_candidate_never_judged(tmp_path, capsys):
    assert main(["explain", str(DATA / "diagnoses" / "tiny_relu" / "module_called.py"), "--db", str(tmp_path / "h.db"),
                 "--problems", str(DATA / "problems"), "--device", "cpu"]) == 0
    assert "cause:  module_called" in capsys.readouterr().out


def test_report_shows_hints_and_the_cause_histogram(diagnosed):
    tmp, results = diagnosed
    index = (tmp / "out" / "index.html").read_text()
    assert "Why candidates failed" in index and "cxx_standard" in index
    pages = list((tmp / "out" / "c").glob("*cxx14*.html"))
    assert len(pages) == 1 and 'id="hint"' in pages[0].read_text()

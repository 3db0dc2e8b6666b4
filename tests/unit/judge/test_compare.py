"""Output comparison: tolerance, NaN/Inf, shapes, dtypes, several outputs."""

import os

import torch

from harness.judge.compare import compare_forms, compare_outputs, compare_tensor
from harness.records import EvalConfig, Problem, Tolerance

TOL = Tolerance(atol=1e-4, rtol=1e-4)


def test_equal_within_tolerance_passes_and_reports_error_sizes():
    expected = torch.linspace(-1, 1, 1000)
    result = compare_tensor(expected, expected + 5e-5, TOL)
    assert result.passed and 4e-5 < result.max_abs_err < 6e-5
    assert result.mismatched_elements == 0 and result.total_elements == 1000


def test_outside_tolerance_fails_with_counts():
    expected = torch.zeros(100)
    actual = expected.clone()
    actual[:3] = 1.0
    result = compare_tensor(expected, actual, TOL)
    assert not result.passed and result.mismatched_elements == 3 and result.max_abs_err == 1.0
    assert "3 of 100" in result.reason


def test_nan_or_inf_is_a_mismatch_even_with_huge_tolerance():
    actual = torch.zeros(10)
    actual[4] = float("nan")
    result = compare_tensor(torch.zeros(10), actual, Tolerance(atol=1e9, rtol=1e9))
    assert not result.passed and "NaN/Inf" in result.reason


def test_a_nan_or_inf_output_has_an_infinite_error_never_a_near_miss():
    """Not the largest finite error, which is 0 for an output of NaNs: never "close to right"."""
    from harness.judge.verdicts import of_trial

    for value in (float("nan"), float("inf")):
        result = compare_tensor(torch.ones(10), torch.full((10,), value), TOL)
        assert result.max_abs_err == result.max_rel_err == float("inf")
        assert of_trial(result, 1, 5, False, atol=TOL.atol).flags == []


def test_shape_and_dtype_mismatches():
    assert "shape" in compare_tensor(torch.zeros(2, 3), torch.zeros(3, 2), TOL).reason
    assert "dtype" in compare_tensor(torch.zeros(2), torch.zeros(2, dtype=torch.float64), TOL).reason


def test_tuple_outputs_compare_each_and_count():
    a, b = torch.ones(3), torch.zeros(3)
    assert compare_outputs([a, b], [a, b], TOL).passed
    result = compare_outputs([a, b], [a, a], TOL)
    assert not result.passed and result.reason.startswith("output 1:")
    assert "2 output tensor(s), expected 1" in compare_outputs([a], [a, b], TOL).reason


def test_chunked_comparison_sees_errors_in_every_chunk(monkeypatch):
    import harness.judge.compare as check
    monkeypatch.setattr(check, "CHUNK_ELEMENTS", {"cpu": 7, "cuda": 7})
    expected = torch.zeros(50)
    actual = expected.clone()
    actual[49] = 2.0
    result = compare_tensor(expected, actual, TOL)
    assert not result.passed and result.max_abs_err == 2.0


def test_finite_and_non_finite_chunks_count_as_isclose_does(monkeypatch):
    """The all-finite shortcut and the masked path agree with torch.isclose, boundary included."""
    import harness.judge.compare as check
    monkeypatch.setattr(check, "CHUNK_ELEMENTS", {"cpu": 100, "cuda": 100})
    generator = torch.Generator().manual_seed(0)
    expected = torch.randn(300, generator=generator)
    actual = expected + torch.randn(300, generator=generator) * 2e-4  # some inside the tolerance, some out
    actual[250] = float("nan")  # only the last chunk takes the masked path
    want = (~torch.isclose(actual.double(), expected.double(), rtol=TOL.rtol, atol=TOL.atol)).sum().item()
    result = compare_tensor(expected, actual, TOL)
    assert result.mismatched_elements == want and 0 < want < 300
    assert result.max_abs_err == float("inf")  # the NaN's error


def test_narrow_floats_count_as_isclose_in_float64_does():
    """Floats of 32 bits or fewer are compared in float32: the same elements fail as in float64."""
    generator = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        expected = torch.randn(100_000, generator=generator).to(dtype)
        actual = (expected.float() + torch.randn(100_000, generator=generator) * 2e-4).to(dtype)
        want = (~torch.isclose(actual.double(), expected.double(), rtol=TOL.rtol, atol=TOL.atol)).sum().item()
        assert compare_tensor(expected, actual, TOL).mismatched_elements == want > 0


def test_integers_and_overflowing_differences_are_compared_exactly():
    """Integers beyond float32's 24-bit mantissa still differ, and finite values whose difference
    overflows float32 still fail."""
    exact = Tolerance(atol=0, rtol=0)
    assert not compare_tensor(torch.tensor([2**24 + 1]), torch.tensor([2**24]), exact).passed
    result = compare_tensor(torch.tensor([-3e38, 1.0]), torch.tensor([3e38, 1.0]), TOL)
    assert not result.passed and result.mismatched_elements == 1 and "NaN" not in result.reason


def test_tolerance_precedence_global_then_problem_then_precision():
    problem = Problem(id="p", path="p.py", source_hash="h", atol=1e-3)
    assert EvalConfig(device="cpu").tolerance_for(problem) == Tolerance(atol=1e-3, rtol=1e-4)
    assert EvalConfig(device="cpu", atol=0.5).tolerance_for(problem).atol == 0.5
    assert EvalConfig(device="cpu", precision="bf16").tolerance_for(Problem(id="q", path="q", source_hash="h")) \
        == Tolerance(atol=1e-2, rtol=1e-2)


def test_a_sequence_where_the_reference_returns_one_tensor_is_no_match_and_says_so():
    """The same values in a tuple are not a replacement for the reference's forward."""
    assert compare_forms("tensor", "tensor", 1) is None and compare_forms("sequence", "sequence", 2) is None
    wrapped = compare_forms("tensor", "sequence", 1)
    assert not wrapped.passed and wrapped.reason == "forward returned a tuple or list of 1 tensor(s) where the reference returns one tensor"
    assert "returned one tensor where the reference returns a tuple or list" in compare_forms("sequence", "tensor", 1).reason
    assert compare_forms(None, "sequence", 1) is None  # the reference's form not known: nothing to hold it to


def test_the_parents_triton_kernels_compile_into_the_build_cache_unless_the_caller_chose_a_cache(tmp_path, monkeypatch):
    from harness.judge.compare import compile_parent_kernels_into

    monkeypatch.setenv("TRITON_CACHE_DIR", "restored after the test")
    monkeypatch.delenv("TRITON_CACHE_DIR")
    compile_parent_kernels_into(tmp_path / "parent-triton")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "parent-triton")  # not ~/.triton
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "theirs"))
    compile_parent_kernels_into(tmp_path / "parent-triton")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "theirs")


def test_the_fused_comparison_leaves_cpu_tensors_to_the_chunks():
    from harness.judge.compare import FusedComparison

    expected = torch.zeros(100)
    assert FusedComparison(0).errors(expected, expected, TOL) is None
    actual = expected.clone()
    actual[7] = 1.0
    assert compare_tensor(expected, actual, TOL, FusedComparison(0)).mismatched_elements == 1

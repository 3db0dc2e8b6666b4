"""On a CUDA machine: the fused comparison (one Triton kernel) counts and measures exactly as the
chunked one and as torch.isclose, and leaves NaN, Inf and overflow to the chunks. (Where it
compiles: tests/gpu/test_sandbox.py, nothing in HOME changes.)"""

import pytest
import torch

from harness.judge.compare import FusedComparison, chunked_errors, compare_tensor
from harness.records import Tolerance

pytestmark = pytest.mark.gpu

TOL = Tolerance(atol=1e-4, rtol=1e-4)


@pytest.fixture(scope="module")
def fused():
    return FusedComparison(torch.cuda.current_device())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_fused_comparison_counts_as_isclose_in_float64_and_measures_as_the_chunks(fused, dtype):
    generator = torch.Generator(device="cuda").manual_seed(3)
    size = 5_000_003  # not a whole number of blocks
    expected = torch.randn(size, generator=generator, device="cuda").to(dtype)
    actual = (expected.float() + torch.randn(size, generator=generator, device="cuda") * 2e-4).to(dtype)
    found = fused.errors(expected, actual, TOL)
    assert found is not None
    want = (~torch.isclose(actual.double(), expected.double(), rtol=TOL.rtol, atol=TOL.atol)).sum().item()
    chunked = chunked_errors(expected, actual, TOL)
    assert found[2] == chunked[2] == want > 0 and found[3] == 0
    assert found[0] == pytest.approx(chunked[0], rel=1e-6) and found[1] == pytest.approx(chunked[1], rel=1e-6)


def test_nan_inf_and_overflow_are_left_to_the_chunks_which_say_so(fused):
    expected = torch.zeros(10_000, device="cuda")
    for bad in (float("nan"), float("inf")):
        actual = expected.clone()
        actual[9_999] = bad
        assert fused.errors(expected, actual, TOL) is None
        result = compare_tensor(expected, actual, TOL, fused)
        assert not result.passed and "NaN/Inf" in result.reason and result.max_abs_err == float("inf")
    overflow = compare_tensor(torch.tensor([-3e38, 1.0], device="cuda"), torch.tensor([3e38, 1.0], device="cuda"), TOL,
                              fused)
    assert not overflow.passed and overflow.mismatched_elements == 1 and "NaN" not in overflow.reason


def test_an_output_past_two_billion_elements_is_read_to_its_last_element(fused):
    """Offsets past 2**31 (conv2d_square's 8.5 GB output has 2.1 billion floats)."""
    size = (1 << 31) + 5
    expected = torch.zeros(size, dtype=torch.float16, device="cuda")
    actual = expected.clone()
    actual[-1] = 1.0
    assert fused.errors(expected, actual, TOL) == pytest.approx((1.0, 1.0 / TOL.atol, 1, 0))

"""On a CUDA machine: the fused comparison (one Triton kernel) counts and measures exactly as the
chunked one and as torch.isclose, and leaves NaN, Inf and overflow to the chunks."""

import pytest
import torch

from harness.judge.compare import chunked_errors, compare_tensor, fused_errors
from harness.records import Tolerance

pytestmark = pytest.mark.gpu

TOL = Tolerance(atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_fused_comparison_counts_as_isclose_in_float64_and_measures_as_the_chunks(dtype):
    generator = torch.Generator(device="cuda").manual_seed(3)
    size = 5_000_003  # not a whole number of blocks
    expected = torch.randn(size, generator=generator, device="cuda").to(dtype)
    actual = (expected.float() + torch.randn(size, generator=generator, device="cuda") * 2e-4).to(dtype)
    fused = fused_errors(expected, actual, TOL)
    assert fused is not None
    want = (~torch.isclose(actual.double(), expected.double(), rtol=TOL.rtol, atol=TOL.atol)).sum().item()
    chunked = chunked_errors(expected, actual, TOL)
    assert fused[2] == chunked[2] == want > 0 and fused[3] == 0
    assert fused[0] == pytest.approx(chunked[0], rel=1e-6) and fused[1] == pytest.approx(chunked[1], rel=1e-6)


def test_nan_inf_and_overflow_are_left_to_the_chunks_which_say_so():
    expected = torch.zeros(10_000, device="cuda")
    for bad in (float("nan"), float("inf")):
        actual = expected.clone()
        actual[9_999] = bad
        assert fused_errors(expected, actual, TOL) is None
        result = compare_tensor(expected, actual, TOL)
        assert not result.passed and "NaN/Inf" in result.reason and result.max_abs_err == float("inf")
    overflow = compare_tensor(torch.tensor([-3e38, 1.0], device="cuda"), torch.tensor([3e38, 1.0], device="cuda"), TOL)
    assert not overflow.passed and overflow.mismatched_elements == 1 and "NaN" not in overflow.reason


def test_an_output_past_two_billion_elements_is_read_to_its_last_element():
    """Offsets past 2**31 (conv2d_square's 8.5 GB output has 2.1 billion floats)."""
    size = (1 << 31) + 5
    expected = torch.zeros(size, dtype=torch.float16, device="cuda")
    actual = expected.clone()
    actual[-1] = 1.0
    assert fused_errors(expected, actual, TOL) == pytest.approx((1.0, 1.0 / TOL.atol, 1, 0))

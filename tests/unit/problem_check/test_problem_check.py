"""`harness check` flags problems where a trivial output passes, and leaves healthy ones alone."""


import torch

from harness.judge.degenerate import degenerate_flags



def test_flags_from_outputs():
    zeros = [[torch.full((100,), 1e-6)] for _ in range(3)]
    assert degenerate_flags(zeros, 1e-4, 1e-4)[0] == ["zeros_pass", "near_constant", "input_insensitive"]
    healthy = [[torch.randn(100, generator=torch.Generator().manual_seed(s))] for s in range(3)]
    assert degenerate_flags(healthy, 1e-4, 1e-4)[0] == []


def test_outputs_of_every_dtype_are_compared_in_their_own():
    """Half-precision and integer outputs that ignore their inputs are found too (their first
    seed's are not compared as a float32 copy, which no other seed's dtype matches)."""
    for dtype in (torch.float16, torch.bfloat16, torch.int64):
        same = [[(torch.arange(100) % 7).to(dtype)] for _ in range(3)]
        assert degenerate_flags(same, 1e-2, 1e-2)[0] == ["input_insensitive"], dtype

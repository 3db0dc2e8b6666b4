"""The comparison of one output on a GPU as a single Triton kernel (`compare.FusedComparison`): both
tensors read once. Imported only where Triton is installed, by the parent, for GPU tensors."""

import triton
import triton.language as tl


@triton.jit
def errors_kernel(want, got, partial, n, atol, rtol, floor, BLOCK: tl.constexpr):
    """Each block of BLOCK elements writes a row of `partial`: its largest finite absolute and
    relative errors, its count outside the tolerance (isclose's rule) and its count of
    non-finite differences."""
    block = tl.program_id(0)
    offsets = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    expected = tl.load(want + offsets, mask=inside, other=0.0).to(tl.float32)
    diff = tl.abs(tl.load(got + offsets, mask=inside, other=0.0).to(tl.float32) - expected)
    scale = tl.abs(expected)
    finite = (diff == diff) & (diff < float("inf"))
    shown = tl.where(finite, diff, 0.0)
    tl.store(partial + block * 4, tl.max(shown, axis=0))
    tl.store(partial + block * 4 + 1, tl.max(shown / tl.maximum(scale, floor), axis=0))
    tl.store(partial + block * 4 + 2, tl.sum(((diff - rtol * scale) > atol).to(tl.float32), axis=0))
    tl.store(partial + block * 4 + 3, tl.sum((inside & ~finite).to(tl.float32), axis=0))

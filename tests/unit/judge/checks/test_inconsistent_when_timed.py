"""Checked timed calls: outputs returned in the same memory by different calls."""

from harness.judge.checks.inconsistent_when_timed import outputs_shared
from harness.worker.protocol import TensorRef


def output(elements: int, storage_offset: int = 0, address: int | None = None, handle: str | None = None,
           offset: int = 0) -> TensorRef:
    return TensorRef(dtype="float32", shape=[elements], stride=[1], storage_offset=storage_offset,
                     device="cpu" if handle is None else "cuda", address=address, ipc_handle=handle, offset=offset)


def test_calls_of_one_command_that_return_the_same_memory_are_told_apart_from_calls_with_their_own():
    """A buffer the candidate keeps and returns every call: the later call overwrote the earlier
    one's answer. Slices of one buffer, a slice a call, are their own memory; so are one call's
    outputs that overlap each other."""
    assert outputs_shared([[output(16, address=4096)], [output(16, address=4096)]])
    assert outputs_shared([[output(16, address=4096)], [output(8, address=4096 + 32)]])  # inside the first
    assert not outputs_shared([[output(16, address=4096)], [output(16, address=4096 + 64)]])
    assert not outputs_shared([[output(16, address=4096), output(16, address=4096)]])  # one call's two views
    handle, other = "a" * 128, "b" * 128
    assert outputs_shared([[output(16, handle=handle)], [output(16, handle=handle)]])
    assert not outputs_shared([[output(16, handle=handle)], [output(16, handle=other)]])
    # A slice per call of one allocation: where each view's first element is, not its storage's start.
    assert not outputs_shared([[output(16, storage_offset=0, handle=handle)], [output(16, storage_offset=16, handle=handle)]])
    assert not outputs_shared([[output(16, handle=handle, offset=0)], [output(16, handle=handle, offset=64)]])
    assert not outputs_shared([[output(16)], [output(16)]])  # stacked in the commit buffer: nothing to tell
    assert not outputs_shared([[output(0, address=4096)], [output(0, address=4096)]])  # no elements

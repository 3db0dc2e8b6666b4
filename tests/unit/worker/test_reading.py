"""The parent's side of the commit buffer: a worker's CPU tensors read back exactly, into read
buffers that the next read reuses, and never more than the worker actually wrote."""

import os

import pytest
import torch

from harness.worker.parent import ReadBuffers, Worker
from harness.worker.protocol import CommitBuffer, describe


@pytest.fixture
def parent():
    """A Worker's reading side over a commit buffer this test writes as the worker would."""
    worker = Worker.__new__(Worker)  # no process: only the buffer and the read buffers are used
    worker.buffer, worker.gpu, worker._read_buffers = os.memfd_create("test-commit"), None, ReadBuffers()
    yield worker
    os.close(worker.buffer)


def test_tensors_of_any_dtype_and_layout_read_back_exactly(parent):
    sent = [torch.randn(3, 5), torch.arange(7, dtype=torch.int64), torch.tensor([True, False, True]),
            torch.randn(4, 6).t(), torch.randn(1, dtype=torch.float64)]
    refs = describe(sent, CommitBuffer(parent.buffer))
    with parent.reading(refs, "test") as read:
        assert len(read) == len(sent)
        for want, got in zip(sent, read):
            assert got.dtype == want.dtype and torch.equal(got, want)


def test_the_next_read_reuses_the_buffer(parent):
    commit = CommitBuffer(parent.buffer)
    with parent.reading(describe([torch.ones(1000)], commit), "test") as first:
        address = first[0].data_ptr()
    with parent.reading(describe([torch.full((1000,), 2.0)], commit), "test") as second:
        assert second[0].data_ptr() == address and bool((second[0] == 2).all())


def test_reads_open_at_once_get_their_own_buffers(parent):
    commit = CommitBuffer(parent.buffer)
    outputs = describe([torch.ones(64)], commit)
    with parent.reading(outputs, "test") as a, parent.reading(outputs, "test") as b:
        assert a[0].data_ptr() != b[0].data_ptr()
        a[0].zero_()
        assert bool((b[0] == 1).all())


def test_a_reply_cannot_claim_more_than_was_written(parent):
    (ref,) = describe([torch.ones(10)], CommitBuffer(parent.buffer))
    huge = ref.model_copy(update={"shape": [1 << 40], "stride": [1]})
    with pytest.raises(ValueError, match="runs past"):
        parent._host_bytes([huge])
    assert parent._host_bytes([ref]) == 64  # 40 bytes, aligned so that the next tensor can view any dtype


def test_only_the_largest_free_buffers_are_kept():
    buffers = ReadBuffers()
    for size in (10, 30, 20):
        buffers.give_back(bytearray(size))
    assert len(buffers.take(25)) == 30 and len(buffers.take(5)) == 20
    assert len(buffers.take(5)) == 5  # none left: a new one

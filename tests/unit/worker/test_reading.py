"""The parent's side of the commit buffer: a worker's CPU tensors read back exactly, into read
buffers that the next read reuses, never more than the worker actually wrote, and out of a file
the worker cannot shrink under the parent's mapping."""

import os

import pytest
import torch

from harness.worker.parent import CommitFile, ReadBuffers, Worker
from harness.worker.protocol import CommitBuffer, describe


@pytest.fixture
def parent():
    """A Worker's reading side over a commit buffer this test writes as the worker would."""
    worker = Worker.__new__(Worker)  # no process: only the buffer and the read buffers are used
    worker.buffer, worker.gpu, worker._read_buffers = CommitFile(), None, ReadBuffers()
    yield worker
    worker.buffer.close()


def test_tensors_of_any_dtype_and_layout_read_back_exactly(parent):
    sent = [torch.randn(3, 5), torch.arange(7, dtype=torch.int64), torch.tensor([True, False, True]),
            torch.randn(4, 6).t(), torch.randn(1, dtype=torch.float64)]
    refs = describe(sent, CommitBuffer(parent.buffer.fd))
    with parent.reading(refs, "test") as read:
        assert len(read) == len(sent)
        for want, got in zip(sent, read):
            assert got.dtype == want.dtype and torch.equal(got, want)


def test_the_next_read_reuses_the_buffer(parent):
    commit = CommitBuffer(parent.buffer.fd)
    with parent.reading(describe([torch.ones(1000)], commit), "test") as first:
        address = first[0].data_ptr()
    with parent.reading(describe([torch.full((1000,), 2.0)], commit), "test") as second:
        assert second[0].data_ptr() == address and bool((second[0] == 2).all())


def test_reads_open_at_once_get_their_own_buffers(parent):
    commit = CommitBuffer(parent.buffer.fd)
    outputs = describe([torch.ones(64)], commit)
    with parent.reading(outputs, "test") as a, parent.reading(outputs, "test") as b:
        assert a[0].data_ptr() != b[0].data_ptr()
        a[0].zero_()
        assert bool((b[0] == 1).all())


def test_a_reply_cannot_claim_more_than_was_written(parent):
    (ref,) = describe([torch.ones(10)], CommitBuffer(parent.buffer.fd))
    huge = ref.model_copy(update={"shape": [1 << 40], "stride": [1]})
    with pytest.raises(ValueError, match="runs past"):
        parent._host_bytes([huge])
    assert parent._host_bytes([ref]) == 64  # 40 bytes, aligned so that the next tensor can view any dtype


def test_what_was_read_is_a_copy_the_worker_cannot_change_afterwards(parent):
    commit = CommitBuffer(parent.buffer.fd)
    with parent.reading(describe([torch.ones(1000)], commit), "test") as read:
        describe([torch.zeros(1000)], commit)  # the worker writes again while the parent looks
        assert bool((read[0] == 1).all())


def test_a_buffer_grown_between_reads_is_read_whole(parent):
    commit = CommitBuffer(parent.buffer.fd)
    with parent.reading(describe([torch.ones(10)], commit), "test") as small:
        assert small[0].sum() == 10
    big = torch.arange(1 << 20, dtype=torch.float32)
    with parent.reading(describe([big], commit), "test") as read:
        assert torch.equal(read[0], big)


def test_the_worker_cannot_shrink_its_buffer_under_the_parents_mapping(parent):
    commit = CommitBuffer(parent.buffer.fd)
    with parent.reading(describe([torch.ones(1 << 16)], commit), "test"):
        pass
    with pytest.raises(PermissionError):  # a mapping past the end would kill the parent (SIGBUS)
        os.ftruncate(parent.buffer.fd, 0)
    with parent.reading(describe([torch.ones(4)], commit), "test") as read:
        assert read[0].sum() == 4


def test_only_the_largest_free_buffers_are_kept():
    buffers = ReadBuffers()
    for size in (10, 30, 20):
        buffers.give_back(bytearray(size))
    assert len(buffers.take(25)) == 30 and len(buffers.take(5)) == 20
    assert len(buffers.take(5)) == 5  # none left: a new one

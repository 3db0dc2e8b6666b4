"""What the parent accepts from a worker: a reply of the kind its command asks for, and a failed
one only when it says what failed."""

import json
import os

import pytest
import torch

from harness.records import Phase
from harness.worker.protocol import (MAX_TENSORS, REPLY, Command, CommitBuffer, Failure, Reply, TensorRef, call_outputs,
                                     committed_refs, fits,
                                     says_why)


def test_a_failed_reply_must_say_what_failed():
    assert says_why(Reply(ok=True))
    raised = Failure(exc_type="RuntimeError", message="boom", phase=Phase.timing, traceback=[])
    assert says_why(Reply(ok=False, failure=raised))
    assert says_why(Reply(ok=False, rejected="outputs are a tensor subclass"))
    assert not says_why(Reply(ok=False))
    assert not says_why(Reply(ok=False, rejected=""))


def test_a_successful_reply_carries_what_its_command_asks_for():
    assert fits(Command(op="timed"), Reply(ok=True, elapsed_ms=1.0))
    assert not fits(Command(op="timed"), Reply(ok=True, outputs=[]))
    assert fits(Command(op="commit"), Reply(ok=True, outputs=[]))
    assert not fits(Command(op="commit"), Reply(ok=True, elapsed_ms=1.0))
    assert fits(Command(op="settle"), Reply(ok=True))


def test_a_batchs_outputs_must_come_stacked_a_row_per_call():
    stacked = TensorRef(dtype="float32", shape=[3, 2], stride=[2, 1], storage_offset=0, device="cpu")
    flat = TensorRef(dtype="float32", shape=[2], stride=[1], storage_offset=0, device="cpu")
    assert fits(Command(op="commit", calls=3), Reply(ok=True, outputs=[stacked, stacked]))
    assert not fits(Command(op="commit", calls=3), Reply(ok=True, outputs=[stacked, flat]))
    assert not fits(Command(op="commit", calls=2), Reply(ok=True, outputs=[stacked]))
    assert fits(Command(op="commit"), Reply(ok=True, outputs=[flat]))


def gpu_ref(handle: int) -> TensorRef:
    return TensorRef(dtype="float32", shape=[2], stride=[1], storage_offset=0, device="cuda",
                     ipc_handle=f"{handle:0128x}", offset=0)


def test_a_gpu_batchs_outputs_come_call_by_call_each_call_its_own():
    """On a GPU nothing is stacked (a copy of every output): each call's outputs are described in
    turn, the same count for every call."""
    three_calls_of_two = [gpu_ref(n) for n in range(6)]
    assert fits(Command(op="commit", calls=3), Reply(ok=True, outputs=three_calls_of_two))
    assert not fits(Command(op="commit", calls=4), Reply(ok=True, outputs=three_calls_of_two))
    assert [r.ipc_handle for r in call_outputs(three_calls_of_two, 1, 3)] == [gpu_ref(2).ipc_handle, gpu_ref(3).ipc_handle]
    stacked = TensorRef(dtype="float32", shape=[3, 2], stride=[2, 1], storage_offset=0, device="cpu")
    assert call_outputs([stacked], 2, 3)[0].shape == [2]  # a CPU batch's: a row of the stack
    assert call_outputs(three_calls_of_two[:2], 0, 1) == three_calls_of_two[:2]


def test_a_cpu_batch_is_committed_stacked():
    buffer = CommitBuffer(os.memfd_create("commit"))
    try:
        refs = committed_refs([[torch.full((2,), float(call))] for call in range(3)], buffer)
        assert [r.shape for r in refs] == [[3, 2]]
        assert [r.shape for r in committed_refs([[torch.ones(2), torch.zeros(1)]], buffer)] == [[2], [1]]  # one call: as it is
    finally:
        buffer.close()


def test_a_row_of_a_stacked_tensor_reads_that_row_only():
    """Its storage starts where the row does: the parent copies out of a commit buffer only the
    rows it checks, not the batch up to them."""
    buffer = CommitBuffer(os.memfd_create("rows"))
    rows = [[torch.full((2, 3), float(index)), torch.arange(index, index + 4)] for index in range(5)]
    floats, ints = buffer.write_stacked(rows)
    assert floats.shape == [5, 2, 3] and ints.shape == [5, 4] and ints.offset % 64 == 0
    third = floats.row(3)
    assert third.storage_offset == 0 and third.span_bytes == 2 * 3 * 4 and third.offset == floats.offset + 3 * 24
    read_floats, read_ints = buffer.tensors([third, ints.row(4)])
    assert torch.equal(read_floats, rows[3][0]) and torch.equal(read_ints, rows[4][1])


@pytest.mark.parametrize("elapsed", ["0", "-5.0", "NaN", "Infinity", "1e400", "5e-324", "1e308"])
def test_a_timed_reply_must_report_a_time_above_zero_and_finite(elapsed):
    """What a worker reports goes into medians, speedups and log-scale charts."""
    with pytest.raises(ValueError):
        REPLY.validate_json(f'{{"ok": true, "elapsed_ms": {elapsed}, "outputs": []}}')
    assert REPLY.validate_json('{"ok": true, "elapsed_ms": 0.0004, "outputs": []}').elapsed_ms == 0.0004


def test_a_profile_reports_no_negative_or_endless_times():
    for bad in ('"elapsed_ms": -1', '"top_op_ms": {"aten::mm": -0.5}', '"kernels": [{"name": "k", "device_ms": "NaN"}]'):
        with pytest.raises(ValueError):
            REPLY.validate_json(f'{{"ok": true, "profile": {{"ops": [], {bad}}}}}')


def test_a_tensor_is_described_within_what_torch_can_index():
    def ref(**change):
        fields = dict(dtype="float32", shape=[4], stride=[1], storage_offset=0, device="cpu") | change
        return '{"ok": true, "outputs": [' + json.dumps(fields) + "]}"

    assert REPLY.validate_json(ref(shape=[2, 3], stride=[0, 1])).outputs[0].shape == [2, 3]  # an expanded view
    for odd in ({"shape": [2**64], "stride": [0]}, {"shape": [4], "stride": [-1]}, {"shape": [2, 2], "stride": [1]},
                {"storage_offset": -1}, {"offset": -8}):
        with pytest.raises(ValueError):
            REPLY.validate_json(ref(**odd))


def test_a_refusal_is_bounded_like_any_failure_message():
    with pytest.raises(ValueError):
        REPLY.validate_json(json.dumps({"ok": False, "rejected": "x" * 70_000}))


def test_a_reply_describes_at_most_so_many_tensors():
    """Each described tensor is mapped or copied before anything is compared."""
    one = {"dtype": "float32", "shape": [4], "stride": [1], "storage_offset": 0, "device": "cpu"}
    assert len(REPLY.validate_json(json.dumps({"ok": True, "outputs": [one] * MAX_TENSORS})).outputs) == MAX_TENSORS
    for field in ("outputs", "inputs"):
        with pytest.raises(ValueError):
            REPLY.validate_json(json.dumps({"ok": True, field: [one] * (MAX_TENSORS + 1)}))


def test_a_located_reply_places_every_call_and_only_a_located_one_carries_places():
    place = TensorRef(dtype="float32", shape=[2], stride=[1], storage_offset=0, device="cpu", address=4096)
    located = Command(op="timed", calls=2, locate=True)
    assert fits(located, Reply(ok=True, elapsed_ms=1.0, outputs=[place], addresses=[[4096], [8192]]))
    assert not fits(located, Reply(ok=True, elapsed_ms=1.0, outputs=[place], addresses=[[4096]]))  # a call unplaced
    assert not fits(located, Reply(ok=True, elapsed_ms=1.0, outputs=[place], addresses=[[4096, 1], [8192, 2]]))
    assert not fits(located, Reply(ok=True, elapsed_ms=1.0, outputs=[place.model_copy(update={"address": None})],
                                   addresses=[[4096], [8192]]))
    assert not fits(Command(op="timed", calls=2), Reply(ok=True, elapsed_ms=1.0, addresses=[[], []]))  # a GPU's
    assert not fits(Command(op="commit"), Reply(ok=True, outputs=[place]))

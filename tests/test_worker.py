"""Worker-side helpers: input casting per precision, plain-tensor outputs, parameter digests."""

import pytest
import torch

from harness.worker import NotPlainTensor, cast_inputs, param_digests, plain_outputs


def test_precision_casts_floating_inputs_but_never_class_indices():
    logits, targets = torch.randn(4, 3), torch.tensor([0, 2, 1, 1])
    cast = cast_inputs([logits, targets, 7], "cpu", torch.bfloat16)
    assert cast[0].dtype is torch.bfloat16 and cast[1].dtype is torch.int64 and cast[2] == 7


def test_outputs_must_be_plain_tensors():
    t = torch.ones(2)
    assert plain_outputs(t) == [t] and plain_outputs((t, t)) == [t, t]

    class Sub(torch.Tensor):
        pass

    for bad in (t.as_subclass(Sub), 3.0, (t, 1), [], None):
        with pytest.raises(NotPlainTensor):
            plain_outputs(bad)


def test_parameter_digests_are_equal_for_equal_seeds_only():
    def build(seed):
        torch.manual_seed(seed)
        return param_digests(torch.nn.Linear(4, 3))
    assert build(1) == build(1)
    assert build(1) != build(2)
    assert [d.shape for d in build(1)] == [[3, 4], [3]]

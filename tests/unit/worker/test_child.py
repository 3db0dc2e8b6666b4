"""Worker-side helpers: input casting per precision, plain-tensor outputs, parameter digests,
when timing inputs are made, and pinning to the cores a worker was given."""

import os
import types

import pytest
import torch

from harness.worker.child import NotPlainTensor, Session, cast_inputs, param_digests, pin_to_cpus, plain_outputs
from harness.worker.protocol import WorkerJob


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


def counting_problem():
    problem = types.SimpleNamespace(calls=0)

    def get_inputs():
        problem.calls += 1
        return [torch.randn(4, 8)]

    problem.get_inputs = get_inputs
    return problem


def test_timing_inputs_are_made_in_the_warm_up_not_while_the_parent_times():
    problem = counting_problem()
    job = WorkerJob(role="candidate", problem_path="p.py", device="cpu", precision="fp32", init_seed=0, warmup=2,
                    trials=5)
    session = Session(job, problem, torch.nn.ReLU())
    session.warm_up(seed=1)
    assert problem.calls == 1
    stats, sampled = session.time(seed=1)
    assert problem.calls == 1 and stats.n == 5 and len(sampled) == 3


def test_worker_pins_itself_to_the_cores_it_was_given(monkeypatch):
    pinned = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.append(set(cpus)))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: pinned.append(n))
    pin_to_cpus([2, 3])
    assert pinned == [{2, 3}, 2]
    pinned.clear()
    pin_to_cpus(None)
    assert pinned == []

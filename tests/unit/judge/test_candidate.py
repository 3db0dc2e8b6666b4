"""A candidate's timing phase, in the order it talks to its workers."""

import contextlib
import random

import pytest

import torch

from harness.judge.candidate import CandidateRun, _copied
from harness.records import EvalConfig
from harness.worker.protocol import Reply


class Stop(Exception):
    """Ends the phase at its first timed call: what came before is the point."""


class Recording:
    """Stands in for a worker or the reference runner, noting in `events` what it was asked."""

    def __init__(self, name: str, events: list):
        self.name, self.events, self.pid = name, events, 1
        self.budget_left = 0  # the reference's memory budget for checked outputs

    def request(self, command, phase):
        self.events.append((self.name, command.op))
        if command.op == "timed":
            raise Stop
        return Reply(ok=True)

    def recalibrate(self):
        self.events.append((self.name, "recalibrate"))

    def output_like(self):
        return []

    def feeding(self, target):
        def feed(seed):
            self.events.append((self.name, "inputs"))
            return []
        return feed


def test_the_candidate_warms_up_right_before_its_first_timed_call():
    """After a pause (the reference's recalibration) the CPU gives a worker the memory it freed
    back slowly: its warm-up comes after that pause, not before it. Each call's inputs are made
    by the reference just before it (on the CPU they are fed)."""
    events: list = []
    run = CandidateRun.__new__(CandidateRun)  # only the timing phase runs
    run.config, run.rng = EvalConfig(device="cpu"), random.Random(0)
    run.quiet = lambda pids: contextlib.nullcontext()
    run.reference = Recording("reference", events)
    run.reference.worker = run.reference
    with pytest.raises(Stop):
        run._time(Recording("candidate", events), None)
    assert events == [("reference", "recalibrate"), ("reference", "inputs"), ("candidate", "warmup"),
                      ("reference", "inputs"), ("candidate", "timed")]


def test_checked_outputs_are_copied_into_the_room_made_before_timing_while_it_lasts():
    spares = [[torch.zeros(4, 3)], [torch.zeros(4, 3)]]
    rooms = [spares[0][0].data_ptr(), spares[1][0].data_ptr()]
    outputs = [torch.arange(12.0).reshape(3, 4).t()]  # any layout: copied by value
    copies = [_copied(outputs, spares) for _ in range(3)]
    assert [c[0].data_ptr() for c in copies[:2]] == rooms[::-1] and not spares
    assert copies[2][0].data_ptr() not in rooms  # no room left: a fresh copy
    assert all(torch.equal(c[0], outputs[0]) for c in copies)
    outputs[0].zero_()
    assert all(c[0].sum() == 66 for c in copies)  # copies, not views


def test_outputs_that_do_not_fit_the_room_get_fresh_copies():
    spares = [[torch.zeros(4)]]
    for outputs in ([torch.ones(5)], [torch.ones(4, dtype=torch.float64)], [torch.ones(4), torch.ones(4)]):
        assert torch.equal(_copied(outputs, spares)[0], outputs[0]) and len(spares) == 1

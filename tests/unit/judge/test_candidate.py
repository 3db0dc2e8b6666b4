"""A candidate's timing phase, in the order it talks to its workers."""

import contextlib
import random

import pytest

from harness.judge.candidate import CandidateRun
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


def test_the_candidate_warms_up_right_before_its_first_timed_call():
    """After a pause (the reference's recalibration) the CPU gives a worker the memory it freed
    back slowly: its warm-up comes after that pause, not before it."""
    events: list = []
    run = CandidateRun.__new__(CandidateRun)  # only the timing phase runs
    run.config, run.rng = EvalConfig(device="cpu"), random.Random(0)
    run.quiet = lambda pids: contextlib.nullcontext()
    run.reference = Recording("reference", events)
    run.reference.worker = run.reference
    with pytest.raises(Stop):
        run._time(Recording("candidate", events), None)
    assert events == [("reference", "recalibrate"), ("candidate", "warmup"), ("candidate", "timed")]

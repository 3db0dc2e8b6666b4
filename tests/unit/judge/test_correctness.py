"""A correctness trial, in the order it talks to the workers: the reference's outputs, the
candidate's reply, what the reply says of the candidate's threads (noted before its outputs are
read, however the reading ends), then the comparison."""

import contextlib
import random
from types import SimpleNamespace

import pytest
import torch

from harness.cpu.device import Cpu
from harness.judge.correctness import trial
from harness.judge.evaluation import Evaluation
from harness.records import EvalConfig, Observations
from harness.worker.parent import StopReason, WorkerStop, WorkerStopped
from harness.worker.protocol import Reply


class Candidate:
    """A worker whose trial reply says `threads` are left running, and whose outputs cannot be read."""

    def __init__(self, threads: int):
        self.threads = threads

    def send(self, command, phase):
        pass

    def answer(self, command, phase):
        return Reply(ok=True, outputs=[], inputs=[], threads_alive=self.threads)

    @contextlib.contextmanager
    def reading(self, refs, phase):
        raise WorkerStopped(WorkerStop(reason=StopReason.broke_protocol, error="an unreadable tensor", evidence=[]))
        yield

    def log_head(self):
        return ""


class Reference:
    measured = SimpleNamespace()
    output_form = None

    @contextlib.contextmanager
    def expected(self, seed, sizes=None, keep=False):
        yield [torch.zeros(2)], [torch.zeros(2)]

    def watch_degenerate(self, seed, outputs):
        pass


@pytest.mark.parametrize("threads, flagged", [(3, True), (0, False)])
def test_threads_left_running_are_noted_before_the_outputs_are_read(threads, flagged):
    observed = Observations()
    ev = Evaluation(problem=SimpleNamespace(atol=None, rtol=None), candidate=None, config=EvalConfig(device="cpu"),
                    device=Cpu(), reference=Reference(), worker=Candidate(threads), observed=observed,
                    candidate_text="", rng=random.Random(0))
    with pytest.raises(WorkerStopped):
        trial(ev, seed=1, sizes=None, phase="correctness")
    assert ("threads_left_running" in observed.flags) is flagged

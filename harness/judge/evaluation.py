"""One candidate's evaluation as its phases see it: what it is judged against, where it runs, what
has been observed so far, and how a moment's checks come to a verdict. Made by judge/candidate.py
and handed forward, phase by phase (correctness.py, speed.py, profiled.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..records import Candidate, EvalConfig, Observations, Problem, Status, Tolerance, Verdict
from ..worker.parent import Worker
from ..worker.protocol import Reply
from . import verdicts
from .checking import Moment, look
from .compare import FusedComparison
from .device import Device
from .reference import ReferenceRunner


@dataclass
class Evaluation:
    """`reference`: the problem's reference, started (its measurements in `reference.measured`);
    `keep_expected`: whether the reference keeps the trials' expected outputs for later candidates;
    `fused`: the lane's GPU comparison (None: compare in chunks)."""

    problem: Problem
    candidate: Candidate
    config: EvalConfig
    device: Device
    reference: ReferenceRunner
    worker: Worker
    observed: Observations
    candidate_text: str  # the file as found, so compiler lines map to lines a person can open
    keep_expected: bool = True
    fused: FusedComparison | None = None
    # The seeds, and which calls are checked and profiled: never predictable.
    rng: random.Random = field(default_factory=random.SystemRandom)

    @property
    def tolerance(self) -> Tolerance:
        return self.config.tolerance_for(self.problem)

    def verdict_of(self, reply: Reply) -> Verdict | None:
        """None for a successful reply; else what its failure means."""
        if reply.ok:
            return None
        return verdicts.of_reply(reply, self.worker.log_head(), self.config.device, self.candidate_text)

    def decide(self, moment: Moment, seen: object) -> Verdict | None:
        """The checks of `moment` shown `seen`: their flags noted (with the evidence of those that
        only flag), and the verdict their findings come to, if any."""
        findings = look(self.device.checks, moment, seen)
        for found in findings:
            if found.status is None:
                self.observed.note(found.flag, *found.evidence)
            elif found.status is not Status.rejected and found.flag:
                self.observed.note(found.flag)  # its evidence is the verdict's
        return verdicts.of_findings(findings)

"""Integrity checks as a registry.

A check is one module: its flag, what it reads (one of the moments below), its thresholds, how it
finds what it finds, the hint a diagnosis gives, and its tests beside it (tests/unit/judge/checks/
or tests/unit/cpu/checks/). The module defines `CHECKS`, a list of Check, and is found by its
package: judge/checks/ for every device, a device's own (harness/cpu/checks/) for that device.
Adding a check that reads what the evaluation already gathers touches its module and its test,
nothing else. The evaluation (judge/candidate.py) asks the checks of each moment as it reaches
it; what their findings mean is decided in judge/verdicts.py (`of_findings`), the one place a
verdict is decided."""

from __future__ import annotations

import enum
import functools
import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..records import CheckResult, Phase, Status, TimingStats
from ..worker.protocol import HardwareFloor, ParamDigest, Profile
from .timing.timed import Timed


class Moment(enum.Enum):
    """Where in an evaluation a check looks, in the order an evaluation reaches them."""

    loaded = "loaded"  # the candidate's model built (`Loaded`)
    replied = "replied"  # a trial's reply came, before its outputs are read (`Replied`; at other sizes too)
    trial = "trial"  # one correctness trial compared (`Trial`)
    trials = "trials"  # every correctness trial passed (`Trials`)
    timed_inputs = "timed_inputs"  # a checked timed call's fed inputs read back (`TimedInputs`)
    timed_outputs = "timed_outputs"  # a checked timed call's outputs compared (`TimedOutputs`)
    timing = "timing"  # its timing held to the parent's clock (`Timing`)
    profiled = "profiled"  # its profiled calls' speed (`Profiled`)
    profile = "profile"  # what its profiled calls ran (`ProfileSeen`)
    shapes = "shapes"  # a trial at other sizes (`Shapes`)


@dataclass(frozen=True)
class Finding:
    """What a check found: its flag, the evidence, and, where it decides the verdict, the status
    and the verdict's one line (and the phase it is decided in, where that is not the one the
    evaluation is in). A finding with no status is a flag on whatever verdict comes."""

    flag: str | None
    evidence: list[str] = field(default_factory=list)
    status: Status | None = None
    error: str | None = None
    phase: Phase | None = None


@dataclass(frozen=True)
class Check:
    """`look(seen)` at `moment` returns a Finding or None. `hint`: how a candidate caught by it can
    be fixed (judge/diagnose.py). `order`: among a moment's checks, lower looks first (their
    findings' evidence comes first too)."""

    name: str
    flag: str | None
    moment: Moment
    look: Callable[[Any], Finding | None]
    hint: str = ""
    order: int = 0


# What each moment's checks are shown.

@dataclass(frozen=True)
class Loaded:
    reference_params: list[ParamDigest]
    params: list[ParamDigest]


@dataclass(frozen=True)
class Replied:
    threads_alive: int  # threads of the candidate's still running after the reply


@dataclass(frozen=True)
class Trial:
    number: int  # from 1
    changed_inputs: list[int]  # positions of the inputs forward changed


@dataclass(frozen=True)
class Trials:
    reference_fingerprints: list[tuple]
    fingerprints: list[tuple | None]  # None: outputs of another shape
    degenerate: list[str]  # what makes the problem trivially passable (none: nothing)


@dataclass(frozen=True)
class TimedInputs:
    index: int  # of the checked calls so far, from 1
    changed_inputs: list[int]


@dataclass(frozen=True)
class TimedOutputs:
    index: int
    comparison: CheckResult


@dataclass(frozen=True)
class Timing:
    timing: TimingStats  # the candidate's
    reference_timing: TimingStats  # the reference's its speedup is against
    vouched_ms: float  # its median as the parent's clock vouches for it
    disagreement: str | None  # why that differs from the reported one, where it does
    floor: HardwareFloor | None
    threads_alive: int


@dataclass(frozen=True)
class Profiled:
    timed: Timed  # the candidate's timing, its profiled calls included
    reference_timed: Timed  # the reference's, as measured when the candidate's profiled calls were judged
    reference_ops: int  # operators the reference's profile recorded
    profiler_cost_per_op_ms: float  # the device's (judge/device.py)
    jitter_ms: float


@dataclass(frozen=True)
class ProfileSeen:
    code: str
    own_code: bool  # it compiles code of its own (an extension, Triton)
    profiles: list[Profile]
    median_ms: float
    reference_profile: Profile | None
    reference_median_ms: float
    degenerate: bool  # the problem can be passed trivially
    output_elements: int
    no_custom_kernel: str | None  # why it counts as writing no kernel of its own (judge/provenance.py)
    timed: Timed
    reference_timed: Timed


@dataclass(frozen=True)
class Shapes:
    sizes: str  # the other sizes, described
    problem: str | None  # what went wrong there (None: correct)
    strict: bool  # --strict-shapes


def checks_in(package: str) -> list[Check]:
    """Every check of the modules of `package` (each module's CHECKS)."""
    found = []
    for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
        found += getattr(importlib.import_module(f"{package}.{module.name}"), "CHECKS", [])
    return found


@functools.cache
def common() -> tuple[Check, ...]:
    """The checks of every device (judge/checks/)."""
    return tuple(checks_in(f"{__package__}.checks"))


def look(checks: Sequence[Check], moment: Moment, seen: object) -> list[Finding]:
    """The findings of the checks at `moment`, in their order."""
    return [found for check in sorted((c for c in checks if c.moment is moment), key=lambda c: (c.order, c.name))
            if (found := check.look(seen)) is not None]


def hint_for(flag: str, checks: Sequence[Check]) -> str | None:
    """The hint of the first check that raises `flag` and gives one."""
    return next((check.hint for check in checks if check.flag == flag and check.hint), None)

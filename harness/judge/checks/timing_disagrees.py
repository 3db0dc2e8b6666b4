"""The parent's clock contradicts the worker's reports (`timing_disagrees`): the speedup then uses
the time the clock vouches for (judge/timing/bound.py), and the flag says so."""

from __future__ import annotations

from ..checking import Check, Finding, Moment, Timing

FLAG = "timing_disagrees"


def look(seen: Timing) -> Finding | None:
    return Finding(FLAG, [seen.disagreement]) if seen.disagreement else None


CHECKS = [Check("timing_disagrees", FLAG, Moment.timing, look, order=10)]

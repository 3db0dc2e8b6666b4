"""A problem a trivial answer passes (`degenerate_problem`): the reference's own outputs on the
correctness trials are all zeros, a constant, or the same whatever the input (judge/degenerate.py).
A flag on the verdict: it says little there."""

from __future__ import annotations

from ..checking import Check, Finding, Moment, Trials

FLAG = "degenerate_problem"


def look(seen: Trials) -> Finding | None:
    if not seen.degenerate:
        return None
    return Finding(FLAG, [f"the problem is degenerate: {'; '.join(seen.degenerate)}"])


CHECKS = [Check("degenerate_problem", FLAG, Moment.trials, look, order=10)]

"""Correct at the benchmark's shape only (`shape_specialized`): a trial at other values of the
problem's size constants fails. A flag, or a mismatch under --strict-shapes."""

from __future__ import annotations

from ...records import Status
from ..checking import Check, Finding, Moment, Shapes

FLAG = "shape_specialized"


def look(seen: Shapes) -> Finding | None:
    if seen.problem is None:
        return None
    if seen.strict:
        return Finding(FLAG, [], Status.mismatch, f"correct at the benchmark's shape only; at {seen.sizes}: {seen.problem}")
    return Finding(FLAG, [f"at {seen.sizes}: {seen.problem}"])


CHECKS = [Check("shape_specialized", FLAG, Moment.shapes, look, order=10)]

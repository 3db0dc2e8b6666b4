"""Parameters initialised otherwise (`init_differs`): the same parameter shapes in the same order
as the reference's, different values after the same seed. A flag; a mismatch says it too, since a
candidate that initialises differently fails for that reason alone."""

from __future__ import annotations

from ...worker.protocol import ParamDigest
from ..checking import Check, Finding, Loaded, Moment

FLAG = "init_differs"


def init_differs(reference: list[ParamDigest], candidate: list[ParamDigest]) -> bool:
    """Same parameter shapes in the same order, different values after the same seed."""
    same_layout = [p.shape for p in reference] == [p.shape for p in candidate] and bool(reference)
    return same_layout and any(r.sha256 != c.sha256 for r, c in zip(reference, candidate))


def look(seen: Loaded) -> Finding | None:
    return Finding(FLAG) if init_differs(seen.reference_params, seen.params) else None


CHECKS = [Check("init_differs", FLAG, Moment.loaded, look)]

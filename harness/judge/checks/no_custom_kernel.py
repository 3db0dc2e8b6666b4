"""No kernel of its own (`no_custom_kernel`): it compiles nothing, or none of its device time is in
its own kernels, or on the CPU nearly all of a call is PyTorch's operators (judge/provenance.py).
A flag: a candidate that composes PyTorch operators can be correct and fast; a reader of the
leaderboard should still see that it wrote no kernel."""

from __future__ import annotations

from ..checking import Check, Finding, Moment, ProfileSeen

FLAG = "no_custom_kernel"


def look(seen: ProfileSeen) -> Finding | None:
    return Finding(FLAG, [seen.no_custom_kernel]) if seen.no_custom_kernel else None


CHECKS = [Check("no_custom_kernel", FLAG, Moment.profile, look)]

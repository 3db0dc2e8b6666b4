"""Not sampled where it had to be: a candidate whose threads could not be sampled from outside
(sampling refused, or throttled down past the longest period) where the reference's, sampled
alike, would convict of hidden library work (hidden_library.py) is `skipped`, not judged: the
cheat gains nothing, and an honest candidate on a host that refuses sampling is not called a
cheat. Fallback evidence found otherwise rejects first (its checks look before this one)."""

from __future__ import annotations

from collections.abc import Iterable

from ...judge.checking import Check, Finding, Moment, ProfileSeen
from ...records import Phase, Status
from ..measurement import sampled_of
from ..sampling import CpuSamples
from .hidden_library import library_to_tell_ms


def untold_library(refusal: str | None, pairs: Iterable[tuple[CpuSamples | None, CpuSamples | None]]) -> str | None:
    """`refusal` (why the candidate's threads could not be sampled), where a pair of the candidate's
    samples and the reference's taken alike lacks the first while the second would convict
    (`library_to_tell_ms`): its library time untold where the rule applies. Else None."""
    if refusal is None:
        return None
    return refusal if any(own is None and library_to_tell_ms(theirs) for own, theirs in pairs) else None


def look(seen: ProfileSeen) -> Finding | None:
    own, theirs = sampled_of(seen.timed), sampled_of(seen.reference_timed)
    if seen.degenerate or own is None or theirs is None:
        return None
    untold = untold_library(own.refusal, ((own.close, theirs.close), (own.sparse, theirs.sparse)))
    if untold is None:
        return None
    return Finding(None, [], Status.skipped,
                   "not judged: its threads could not be sampled from outside where the reference's were, so library "
                   f"work hidden from the profiler would have gone unseen: {untold}", Phase.timing)


CHECKS = [Check("unsampled", None, Moment.profile, look, order=30)]

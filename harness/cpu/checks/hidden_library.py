"""Library work hidden from the profiler (`reference_fallback`, from the CPU's sampling): CPU time
the worker's threads spent in PyTorch's or a numeric library's compute code, sampled from outside
(harness/cpu/sampling.py), beyond what its recorded operators explain."""

from __future__ import annotations

from ...judge.checking import Check, Finding, Moment, ProfileSeen
from ...judge.checks.reference_fallback import FLAG, HINT, found
from ...judge.operators import operator_ms
from ...worker.protocol import Profile
from ..measurement import sampled_of
from ..sampling import SAMPLES_TO_TELL, CpuSamples

# CPU time the worker's threads spent in PyTorch's or a numeric library's compute code, sampled from
# outside (cpu/sampling.py), beyond what its recorded operators explain: at this share of the
# reference's own time there, and of the candidate's, the library did the reference's work out of
# the profiler's sight. Of the candidate's too: an honest relu of three recorded operators spends
# three times the reference's library time, all of it explained within noise, and a share of the
# reference's alone took that noise for hidden work (2026-12-05).
# A red team's extension that computed nothing (`int noop()`) beside a softmax redispatched below
# the recorded call passed at 0.59x to 0.85x, against an honest C++ softmax's 0.08x (2026-12-04).
# Only where the reference spends MIN_LIBRARY_MS a call there, in MIN_LIBRARY_SAMPLES samples at
# least: on a problem of microseconds dispatch and allocation are most of any call's library time.
HIDDEN_LIBRARY_SHARE = 0.5
MIN_LIBRARY_MS, MIN_LIBRARY_SAMPLES = 0.1, 64
# The reference is timed until its calls sampled sparsely hold MIN_LIBRARY_SAMPLES of MIN_LIBRARY_MS a
# call, or REFERENCE_SPARSE_SAMPLES in all (a tenth of them in library code is MIN_LIBRARY_SAMPLES;
# cpu/measurement.py): a candidate's sparse samples are held to its sparse ones, taken alike
# (sampled closely, a call's library time came out 1.5 times as long: a sample's interrupt costs
# the thread CPU time where it lands).
REFERENCE_LIBRARY_TO_TELL_MS = MIN_LIBRARY_MS * SAMPLES_TO_TELL / MIN_LIBRARY_SAMPLES
REFERENCE_SPARSE_SAMPLES = 10 * MIN_LIBRARY_SAMPLES


def library_to_tell_ms(reference: CpuSamples | None) -> float:
    """The least hidden library CPU time a call that `hidden_library_evidence` convicts against
    `reference`: what a candidate's sampled calls must be able to tell (0: the rule does not apply,
    the reference spending too little there, or not sampled)."""
    if reference is None or reference.library < MIN_LIBRARY_SAMPLES or reference.library_ms_per_call < MIN_LIBRARY_MS:
        return 0.0
    return HIDDEN_LIBRARY_SHARE * reference.library_ms_per_call


def hidden_library_evidence(candidate: CpuSamples | None, profiles: list[Profile], reference: CpuSamples | None) -> list[str]:
    """Why the candidate's library compute, sampled from outside, is the reference's work hidden
    from the profiler: its CPU time a call in library code, less what its recorded operators can
    explain (their time on every core it may use), is at least HIDDEN_LIBRARY_SHARE of the
    reference's and of its own library time. Empty where either was not sampled (refused, or the
    kernel throttled sampling down to too long a period), where the reference spends too little
    there to tell (`library_to_tell_ms`), or where the candidate's sampled calls are too few to
    tell that much (`CpuSamples.tells`: calls sampled sparsely)."""
    if candidate is None or not candidate.calls or not library_to_tell_ms(reference):
        return []
    reference_ms, library_ms = reference.library_ms_per_call, candidate.library_ms_per_call
    least_ms = HIDDEN_LIBRARY_SHARE * max(reference_ms, library_ms)
    unseen = library_ms - candidate.cores * max(map(operator_ms, profiles), default=0.0)
    if unseen < least_ms or not candidate.tells(least_ms):
        return []
    return [f"{unseen:.3g} ms of CPU time a call ran in PyTorch's (or a numeric library's) compute code that no "
            f"recorded operator explains, {unseen / reference_ms:.0%} of the reference's {reference_ms:.3g} ms "
            "there: a library does its work out of the profiler's sight"]


def look(seen: ProfileSeen) -> Finding | None:
    """Sampled closely, or sparsely on the recorded calls (a candidate that notices the first does
    its own work there), each held to the reference's sampled alike."""
    own, theirs = sampled_of(seen.timed), sampled_of(seen.reference_timed)
    if seen.degenerate or own is None or theirs is None:
        return None
    return found(hidden_library_evidence(own.close, seen.timed.profiles, theirs.close) or
                 hidden_library_evidence(own.sparse, seen.timed.profiles, theirs.sparse))


CHECKS = [Check("hidden_library", FLAG, Moment.profile, look, HINT, order=40)]

"""Library work hidden from the profiler (`reference_fallback`, from the CPU's sampling): CPU time
the worker's threads spent in PyTorch's or a numeric library's compute code, sampled from outside
(harness/cpu/sampling.py), beyond what its recorded operators explain."""

from __future__ import annotations

from ...judge.checking import Check, Finding, Moment, ProfileSeen
from ...judge.checks.reference_fallback import FLAG, HINT, found
from ...judge.operators import operator_ms
from ...records import Phase, Status
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
# And at this share of the candidate's own call: a slow honest kernel's calls show a few stray
# library samples (its allocations' and the thread pool's bookkeeping), which the reference's quick
# calls share among many more calls. Beside two busy loops on the 2-core VM an honest C++ matmul of
# 19 ms a call showed 0.43 ms a call, 2.2% of it, where the rule's share of the reference's was 0.17
# ms, and was spared only by its calls being too few to tell (2026-12-07). Its call: the lesser of
# its median and its CPU time a call sampled, since a busy host stretches the first (a noop beside
# a hidden softmax had a median of 10.6 ms a call, the reference 13.6, beside a busy loop on a host
# loaded by a test suite too, and passed) and threads spinning beside the call the second. Hiding
# library work in a call ten times as long as that work leaves a candidate at a tenth of the
# library's speed or less: it gains next to nothing.
CALL_SHARE = 0.1
# Library samples a candidate's sampled calls must show before time that would convict, in too few
# calls to tell, stops its judging: an honest candidate's few (a tenth of the convicting time,
# say) reach this many with a probability under 1e-5 where the calls would give 1 of them.
UNTOLD_SAMPLES = 8
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


def unseen_library(candidate: CpuSamples | None, profiles: list[Profile],
                   reference: CpuSamples | None, call_ms: float = 0.0) -> tuple[float, float] | None:
    """The candidate's library CPU time a call that its recorded operators do not explain (their
    time on every core it may use), and the least of it that convicts (HIDDEN_LIBRARY_SHARE of the
    reference's and of its own library time); None where either was not sampled or the reference
    spends too little there to tell (`library_to_tell_ms`)."""
    if candidate is None or not candidate.calls or not library_to_tell_ms(reference):
        return None
    return _unseen(candidate, profiles, reference.library_ms_per_call, call_ms)


def _unseen(candidate: CpuSamples, profiles: list[Profile], reference_ms: float, call_ms: float) -> tuple[float, float]:
    library_ms = candidate.library_ms_per_call
    unseen = library_ms - candidate.cores * max(map(operator_ms, profiles), default=0.0)
    own_call_ms = min(call_ms, candidate.cpu_ms_per_call)
    return unseen, max(HIDDEN_LIBRARY_SHARE * max(reference_ms, library_ms), CALL_SHARE * own_call_ms)


def thin_reference(candidate: CpuSamples | None, profiles: list[Profile], reference: CpuSamples | None,
                   call_ms: float = 0.0) -> str | None:
    """Why the candidate's library time would convict it against a reference sampled in too few
    calls to say whether the rule applies: fewer than MIN_LIBRARY_SAMPLES library samples, in calls
    that MIN_LIBRARY_MS a call would not have filled with as many (beside two busy loops a
    reference's timing ran out of time after 28 calls sampled sparsely, with one sample in library
    code against 191 closely, and a candidate that did the reference's work below the profiler
    passed `ok`, 2026-12-07). Else None."""
    if candidate is None or reference is None or not candidate.calls or candidate.library < UNTOLD_SAMPLES:
        return None
    if reference.library >= MIN_LIBRARY_SAMPLES or \
            reference.calls * MIN_LIBRARY_MS >= MIN_LIBRARY_SAMPLES * reference.period_ms:
        return None
    unseen, least_ms = _unseen(candidate, profiles, reference.library_ms_per_call, call_ms)
    if unseen < least_ms:
        return None
    return (f"{unseen:.3g} ms of CPU time a call in library code that no recorded operator explains, against a "
            f"reference sampled in {reference.calls} calls: too few to tell it from none")


def untold_hidden_library(candidate: CpuSamples | None, profiles: list[Profile],
                          reference: CpuSamples | None, call_ms: float = 0.0) -> str | None:
    """Why the candidate's sampled calls showed library time that would convict it, in samples
    too few to tell it (UNTOLD_SAMPLES of them at least, fewer calls than `CpuSamples.tells` needs),
    or against a reference too thinly sampled (`thin_reference`): a timing cut short of them, a
    host too busy for the calls the timing may make. Else None."""
    found = unseen_library(candidate, profiles, reference, call_ms)
    if found is None or candidate.library < UNTOLD_SAMPLES:
        return thin_reference(candidate, profiles, reference, call_ms)
    unseen, least_ms = found
    if unseen < least_ms or candidate.tells(least_ms):
        return None
    return (f"{unseen:.3g} ms of CPU time a call in library code that no recorded operator explains, in "
            f"{candidate.calls} calls sampled every {candidate.period_ms:.3g} ms: too few to tell it from none")


def hidden_library_evidence(candidate: CpuSamples | None, profiles: list[Profile], reference: CpuSamples | None,
                            call_ms: float = 0.0) -> list[str]:
    """Why the candidate's library compute, sampled from outside, is the reference's work hidden
    from the profiler: its CPU time a call in library code, less what its recorded operators can
    explain (their time on every core it may use), is at least HIDDEN_LIBRARY_SHARE of the
    reference's and of its own library time, and CALL_SHARE of its call (`unseen_library`).
    Empty where either was not sampled (refused, or the kernel throttled sampling down to too
    long a period), where the reference spends too little there to tell (`library_to_tell_ms`),
    or where the candidate's sampled calls are too few to tell that much (`CpuSamples.tells`:
    calls sampled sparsely)."""
    found = unseen_library(candidate, profiles, reference, call_ms)
    if found is None or found[0] < found[1] or not candidate.tells(found[1]):
        return []
    unseen, reference_ms = found[0], reference.library_ms_per_call
    return [f"{unseen:.3g} ms of CPU time a call ran in PyTorch's (or a numeric library's) compute code that no "
            f"recorded operator explains, {unseen / reference_ms:.0%} of the reference's {reference_ms:.3g} ms "
            "there: a library does its work out of the profiler's sight"]


def look(seen: ProfileSeen) -> Finding | None:
    """Sampled closely, or sparsely on the recorded calls (a candidate that notices the first does
    its own work there), each held to the reference's sampled alike. Where its samples show such
    time but are too few to tell it (`untold_hidden_library`), it is not judged (`skipped`): a
    busy host had let a candidate that worked with the library only while sampled sparsely pass
    `ok` (beside two busy loops on the 2-core VM, 2026-12-07)."""
    own, theirs = sampled_of(seen.timed), sampled_of(seen.reference_timed)
    if seen.degenerate or own is None or theirs is None:
        return None
    pairs = ((own.close, theirs.close), (own.sparse, theirs.sparse))
    convicted = next((evidence for mine, reference in pairs
                      if (evidence := hidden_library_evidence(mine, seen.timed.profiles, reference, seen.median_ms))), [])
    if convicted:
        return found(convicted)
    untold = next((why for mine, reference in pairs
                   if (why := untold_hidden_library(mine, seen.timed.profiles, reference, seen.median_ms))), None)
    if untold is None:
        return None
    return Finding(None, [untold], Status.skipped, f"not judged: {untold}; it may hide library work from the "
                   "profiler (a busy host?)", Phase.timing)


CHECKS = [Check("hidden_library", FLAG, Moment.profile, look, HINT, order=40)]

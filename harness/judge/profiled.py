"""A candidate's profiled calls (chosen at random among the timed ones): no slower than the others
beyond what the profiler costs (a candidate that tells the profiler apart), then what they ran:
whose kernels (judge/provenance.py) and whether they compute with PyTorch's own (the checks of
the profile moment)."""

from __future__ import annotations

from ..records import CandidateKind, Verdict
from .checking import Moment, Profiled, ProfileSeen
from .checks.degenerate_problem import FLAG as DEGENERATE
from .checks.inconsistent_when_profiled import profiled_too_slow
from .evaluation import Evaluation
from .provenance import custom_share, kernel_shares, no_custom_kernel_reason
from .speed import reference_alone, timer
from .timing.timed import Timed

SECOND_LOOK_CALLS = 6  # profiled calls more, when the first ones were slower than the profiler explains


def check_profiles(ev: Evaluation, timed: Timed) -> Verdict | None:
    """Slow profiled calls get a second look first: a busy moment slows a call or two, a
    candidate that runs other code when watched is slow on every one."""
    if _too_slow(ev, timed, ev.reference.measured.timed):
        failed = timer(ev, timed.batch).profile_more(timed, SECOND_LOOK_CALLS)
        if failed is not None:
            return ev.verdict_of(failed)
    verdict = _profiled_slowdown(ev, timed)
    if verdict is not None:
        return verdict
    measured, code = ev.reference.measured, ev.candidate.code or ""
    profile = timed.profiles[0] if timed.profiles else None
    median_ms = ev.observed.timing.median_ms
    shares = kernel_shares(profile, code) if profile else []
    ev.observed.kernels, ev.observed.custom_kernel_share = shares, custom_share(shares)
    seen = ProfileSeen(code=code, own_code=ev.candidate.kind is not CandidateKind.python, profiles=timed.profiles,
                       median_ms=median_ms, reference_profile=measured.profile,
                       reference_median_ms=measured.timing.median_ms, degenerate=DEGENERATE in ev.observed.flags,
                       output_elements=ev.reference.output_elements,
                       no_custom_kernel=no_custom_kernel_reason(ev.candidate.kind, shares, profile, median_ms),
                       timed=timed, reference_timed=measured.timed)
    return ev.decide(Moment.profile, seen)


def _reference_ops(ev: Evaluation) -> int:
    profile = ev.reference.measured.profile
    return len(profile.ops) if profile else 0


def _too_slow(ev: Evaluation, timed: Timed, reference: Timed) -> str | None:
    return profiled_too_slow(timed, reference, _reference_ops(ev), ev.device.profiler_cost_per_op_ms,
                             ev.device.jitter_ms)


def _profiled_slowdown(ev: Evaluation, timed: Timed) -> Verdict | None:
    """Its profiled calls slower than the profiler explains, both by what the profiler cost the
    reference when it was timed and by what it costs it now: that cost moves with the machine (on
    two busy H100s an honest Triton softmax paid 4.3 ms a profiled call, eight times over, where
    the reference had paid 1.8 ms when it was timed). Now is measured with nothing of the
    candidate's running (`reference_alone`)."""
    if _too_slow(ev, timed, ev.reference.measured.timed) is None:
        return None
    now = reference_alone(ev, "the reference's profiled calls", lambda: ev.reference.profiled_now(SECOND_LOOK_CALLS))
    if isinstance(now, Verdict):
        return now
    return ev.decide(Moment.profiled, Profiled(timed, now, _reference_ops(ev), ev.device.profiler_cost_per_op_ms,
                                               ev.device.jitter_ms))

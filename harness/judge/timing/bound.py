"""The clock bound: what a worker reports is only believed as far as the parent's clock allows.

A call cannot take less than the parent saw it take, less the per-call overhead measured on the
reference worker just before (same inputs, same outputs, same machine load), less a slack from
that overhead's own spread (vouched_median). The least slack and how far another process's
overhead may differ from the reference's are the device's (judge/device.py)."""

from __future__ import annotations

import statistics
from ...records import TimingBound
from .timed import Timed
from .stats import lower_quartile, spread_of

SLACK_SPREADS = 4.0  # slack: this many median absolute deviations of the reference's overhead
DISAGREE_FACTOR = 1.1  # a vouched median this far above the reported one (and by more than the slack) is flagged
# In batches, a reported median below 1/IMPLAUSIBLE_FACTOR of what the clock saw (less the harness's
# overhead), and short of it by more than the clock's resolution (COMMAND_RESOLUTION_MS, shared by
# a command's calls), is flagged whatever the slack: there a few commands' jitter made the slack
# larger than a whole tiny call (a forger reporting 1 ns got 10,266x). Honest workers' clock times
# came to up to 1.40 (a C++ relu) and 1.61 (a Python one) times their reports over ten integrity
# runs (docs/threat-model.md): a forger within it gains up to 1.67x, where the harness's overhead is
# as long as the call (the slack's share of it bounds the rest), and less the longer the call.
IMPLAUSIBLE_FACTOR = 2.0
COMMAND_RESOLUTION_MS = 1.0  # a timed command's least slack on the CPU, on either device


def timing_bound(timed: Timed, reference_overhead_ms: list[float], reference_commit_ms: list[float],
                 least_slack_ms: float, overhead_error: float) -> TimingBound:
    """The bound a model's reported times are held to: the reference's per-call overhead just
    before and the part of it its outputs' commit took, this model's, and the slack (the
    reference's spread, at least the device's `least_slack_ms` a command, and the share
    `overhead_error` of the overhead that another process's can differ by)."""
    # Jitter seen on the reference's quick calls, and on this model's own calls (a busy machine): a
    # worker that adds jitter of its own to widen the slack pays at least as much in its median.
    # The least slack is a timed command's, shared by the calls of a batch.
    overhead = statistics.median(reference_overhead_ms) if reference_overhead_ms else 0.0
    slack = max(least_slack_ms / timed.batch, SLACK_SPREADS * spread_of(reference_overhead_ms),
                spread_of(timed.wall_ms), overhead_error * overhead)
    # Nine decimals: a batch's per-call values are microseconds, which six would cut to a few digits.
    return TimingBound(reference_overhead_ms=[round(x, 9) for x in reference_overhead_ms],
                       overhead_ms=[round(x, 9) for x in timed.overhead_ms], slack_ms=round(slack, 9),
                       reference_commit_ms=[round(x, 9) for x in reference_commit_ms],
                       commit_ms=[round(x, 9) for x in timed.commit_ms])


def harness_overhead_ms(bound: TimingBound) -> list[float]:
    """Per call of the model, the harness's own share of what the parent saw: the reference's
    median overhead, but of its outputs' commit no more than this call's commit took. A worker
    can write its outputs where the commit would put them as it computes them and skip the
    commit: a forged time then gained the commit the reference pays (up to 23x on the tiny relu,
    whose 64 KB commit costs about as much as its call)."""
    overhead = statistics.median(bound.reference_overhead_ms) if bound.reference_overhead_ms else 0.0
    if not bound.reference_commit_ms or not bound.commit_ms:  # no commit: a CPU run (or a record from before one was timed apart)
        return [overhead] * len(bound.overhead_ms)
    commit = statistics.median(bound.reference_commit_ms)
    return [overhead - commit + min(own, commit) for own in bound.commit_ms]


def vouched_median(reported_ms: list[float], bound: TimingBound, calls_per_command: int = 1) -> tuple[float, str | None]:
    """The median as far as the parent's clock vouches for it, and why it differs from the
    reported one when it does materially. Per call: no less than the parent's wall time less the
    harness's overhead (`harness_overhead_ms`) and the slack. Where the clock contradicts the
    reports by more than that on most calls (or, in batches of `calls_per_command`, by
    IMPLAUSIBLE_FACTOR), the slack's benefit of the doubt goes: the calls are timed by the clock,
    the wall time less the overhead (a worker claiming 1 ns per call otherwise kept the slack,
    0.36 ms of a 0.7 ms relu's on an H100)."""
    slack, harness_ms = bound.slack_ms, harness_overhead_ms(bound)
    calls = list(zip(reported_ms, bound.overhead_ms, harness_ms))
    vouched_ms = [r + max(0.0, seen - own - slack) for r, seen, own in calls]
    clock_ms = [r + max(0.0, seen - own) for r, seen, own in calls]
    overhead = statistics.median(harness_ms)
    reported = statistics.median(reported_ms)
    # Whether the clock contradicts the reports is judged on its lower quartile: on a busy machine
    # some commands' wake-ups come milliseconds late (up to 6 ms a command beside two busy loops on
    # the 2-core VM), and in five samples they were now and then the median. A forged report is
    # contradicted on every call it forges; the speed is the median's all the same.
    vouched_low, clock_low = lower_quartile(vouched_ms), lower_quartile(clock_ms)
    within_slack = vouched_low <= reported * DISAGREE_FACTOR or vouched_low - reported <= slack
    implausible = calls_per_command > 1 and clock_low > reported * IMPLAUSIBLE_FACTOR and \
        clock_low - reported > COMMAND_RESOLUTION_MS / calls_per_command
    if within_slack and not implausible:
        return max(statistics.median(vouched_ms), reported), None
    vouched = statistics.median(clock_ms)
    wall = statistics.median(r + seen for r, seen in zip(reported_ms, bound.overhead_ms))
    return vouched, (f"the worker reported {reported:.4g} ms per call; the harness's clock saw "
                     f"{wall:.4g} ms per call, of which {overhead:.3g} ms (±{slack:.2g}) is "
                     f"the harness's own overhead: the speedup uses {vouched:.4g} ms")

"""Different when watched (`inconsistent_when_profiled`): a candidate that runs other code when the
profiler is on (its own kernel when watched, a library call otherwise) is slower on the profiled
calls than the profiler's own cost explains, as the parent's clock sees them. Slow ones get a
second look first (judge/profiled.py): a busy moment slows a call or two, a candidate that runs
other code when watched is slow on every one."""

from __future__ import annotations

import statistics

from ...records import Status
from ..checking import Check, Finding, Moment, Profiled
from ..timing.timed import Timed

FLAG = "inconsistent_when_profiled"
HINT = "run the same code whether or not a profiler is attached"
# A profiled call may take this much longer than the median of the unprofiled ones (the profiler's
# own cost, beyond the reference's measured ratio) before the candidate is taken to behave differently.
PROFILED_FACTOR = 1.5
# The operators that allowance counts, at most: the list is the worker's to write (and distinct
# operators are the candidate's to call, only when profiled), so it cannot buy unbounded room;
# twice the reference's, and never fewer than a composed candidate names (a layernorm written as
# PyTorch operators names about a dozen).
COUNTED_OPERATORS = 64


def profiled_too_slow(candidate: Timed, reference: Timed | None, reference_ops: int, cost_per_op_ms: float,
                      jitter_ms: float) -> str | None:
    """A candidate that runs other code when the profiler is on (its own kernel when watched, a
    library call otherwise) is slower on the profiled calls than on the others, as the parent's
    own clock sees them. `candidate`, `reference`: their timings. `cost_per_op_ms`, `jitter_ms`: the
    device's (judge/device.py). The fastest profiled call
    may exceed the median by PROFILED_FACTOR, plus the profiler's cost per operator it records
    (as measured on the reference, at least a floor) twice over for each operator the candidate
    ran (up to a bound), plus scheduling jitter. Per operator named, not per call: the profiler
    costs each call 34 to 75 us on an H100 beside a fixed 1.6 ms (4 to 18 us and 0.42 ms on the
    2-core VM), so a launch-bound honest candidate (256 calls of 8 operators: 4.6 ms, 16.1 ms
    profiled) needs about the reference's whole cost per name it ran (1,024 calls: 15.5 ms, 53 ms
    profiled, would be convicted even so); the price is room for a watched path padded with
    trivial operators (docs/threat-model.md, row 1)."""
    if not candidate.profiled_wall_ms or not candidate.wall_ms:
        return None
    median = statistics.median(candidate.wall_ms)
    per_op = cost_per_op_ms
    if reference is not None and reference.profiled_wall_ms and reference.wall_ms and reference_ops:
        per_op = max(per_op, (min(reference.profiled_wall_ms) - statistics.median(reference.wall_ms)) / reference_ops)
    operators = min(max((len(p.ops) for p in candidate.profiles), default=0),
                    max(COUNTED_OPERATORS, 2 * reference_ops))
    # Jitter is a profiled command's, shared by its calls.
    allowed = median * PROFILED_FACTOR + 2 * per_op * max(1, operators) + jitter_ms / candidate.profiled_batch
    fastest = min(candidate.profiled_wall_ms)
    if fastest <= allowed:
        return None
    return (f"its profiled calls took at least {fastest:.4g} ms by the harness's clock, against a median of "
            f"{median:.4g} ms when not profiled (at most {allowed:.4g} ms allowed)")


def look(seen: Profiled) -> Finding | None:
    slow = profiled_too_slow(seen.timed, seen.reference_timed, seen.reference_ops, seen.profiler_cost_per_op_ms,
                             seen.jitter_ms)
    return Finding(FLAG, [], Status.rejected, f"behaves differently when profiled: {slow}") if slow else None


CHECKS = [Check("inconsistent_when_profiled", FLAG, Moment.profiled, look, HINT)]

"""A busy machine (`busy_machine`): processes outside the run kept cores busy while the candidate,
or the reference timing its speedup is against, was timed. A flag: its speed and speedup are not
an idle machine's."""

from __future__ import annotations

from ...judge.checking import Check, Finding, Moment, Timing
from ...records import TimingStats

FLAG = "busy_machine"
# Cores, on average, that processes outside a CPU run may keep busy while a model is timed before
# its result says the machine was busy. On the 2-core VM: 0.0 to 0.04 in an idle integrity run;
# beside two busy loops 1.0 to 1.2 while the main job's models were timed (1.0 to 1.4 for the tiny
# ones), and the speedups came out 0.9x to 2.0x their idle figures the same hour (1.1x to 3.2x in an
# earlier pair of runs). With windows of a quarter of a second measured too: 0.0 to 0.03 in idle
# runs of the tiny problems, 0.82 to 1.41 beside one or two busy loops.
BUSY_CORES = 0.25


def busy_machine(candidate: TimingStats, reference: TimingStats) -> str | None:
    """Why a CPU run's speed and speedup are not an idle machine's, where processes outside the
    run kept BUSY_CORES or more busy while the candidate or the reference timing its speedup is
    against was timed. Beside two busy loops on the 2-core VM the main job's speedups came out
    0.9 to 3.2 times the idle machine's (a reference on two threads loses more to them than a
    one-thread kernel), and no kernel was flagged `timing_disagrees` for it. A window shorter
    than OthersCpu.MIN_SECONDS is not measured, and flags nothing."""
    shares = (candidate.others_cores, reference.others_cores)
    if max((share or 0.0 for share in shares), default=0.0) < BUSY_CORES:
        return None
    mine, theirs = ("unmeasured" if share is None else f"{share:.2f}" for share in shares)
    return (f"other processes kept {mine} cores busy while it was timed and {theirs} while the reference was: "
            f"its speed and speedup are not an idle machine's")


def look(seen: Timing) -> Finding | None:
    busy = busy_machine(seen.timing, seen.reference_timing)
    return Finding(FLAG, [busy]) if busy else None


CHECKS = [Check("busy_machine", FLAG, Moment.timing, look, order=20)]

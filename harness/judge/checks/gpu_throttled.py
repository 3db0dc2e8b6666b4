"""A GPU held below its clocks (`gpu_throttled`): a power, thermal, board or reliability limit of
the GPU (judge/nvml.py) held its clocks down for THROTTLED_MS or more while the candidate, or the
reference timing its speedup is against, was timed. A flag: that speedup is not the GPU's at full
clocks, and a run that repeats it may differ."""

from __future__ import annotations

from ...records import TimingStats
from ..checking import Check, Finding, Moment, Timing

FLAG = "gpu_throttled"
# Of a timing: a limit active this long shows in its median (a tenth of a millisecond kernel's
# timing is a second or so; at THROTTLED_MS a thousandth of it ran slowed, at most).
THROTTLED_MS = 1.0


def held_down(stats: TimingStats) -> str | None:
    """The limits that held the clocks down during a timing, in ms (None: none long enough)."""
    limits = {name: ms for name, ms in (stats.throttled_ms or {}).items() if ms > 0}
    if sum(limits.values()) < THROTTLED_MS:
        return None
    return ", ".join(f"{name} {ms:.3g} ms" for name, ms in sorted(limits.items()))


def look(seen: Timing) -> Finding | None:
    evidence = [f"the GPU's clocks were held down while {whose} was timed: {limits}"
                for whose, stats in (("it", seen.timing), ("the reference", seen.reference_timing))
                if (limits := held_down(stats))]
    return Finding(FLAG, evidence + ["its speedup is not the GPU's at full clocks"]) if evidence else None


CHECKS = [Check("gpu_throttled", FLAG, Moment.timing, look, order=21)]

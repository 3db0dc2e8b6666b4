"""Faster than the hardware (`faster_than_hardware`): a median below what the device can do, by
the problem's bytes and FLOPs over the peak rates measured on it (the reference's hardware floor).
The output must come from a cache or skipped work."""

from __future__ import annotations

from ...records import Status
from ..checking import Check, Finding, Moment, Timing

FLAG = "faster_than_hardware"
HINT = ("no kernel can move the problem's bytes or do its FLOPs that fast: the output must come from a cache or "
        "skipped work; compute it on every call")
HARDWARE_MARGIN = 0.5  # honest kernels stay above the floor; half of it leaves room for timer noise


def look(seen: Timing) -> Finding | None:
    floor = seen.floor
    if not floor or seen.vouched_ms >= HARDWARE_MARGIN * floor.floor_ms:
        return None
    return Finding(FLAG, [], Status.rejected,
                   f"median {seen.vouched_ms:.4g} ms is below what this GPU can do: {floor.describe()}")


CHECKS = [Check("faster_than_hardware", FLAG, Moment.timing, look, HINT, order=30)]

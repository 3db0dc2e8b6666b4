"""Threads still running after a reply (`threads_left_running`): work that may go on off the clock.
A flag: the parent's clock and the checked calls judge what such threads do."""

from __future__ import annotations

from ..checking import Check, Finding, Moment, Shapes, Timing, Trial

FLAG = "threads_left_running"


def look(seen: Trial | Timing | Shapes) -> Finding | None:
    return Finding(FLAG) if seen.threads_alive else None


CHECKS = [Check("threads_left_running", FLAG, Moment.trial, look),
          Check("threads_left_running_when_timed", FLAG, Moment.timing, look),
          Check("threads_left_running_at_other_shapes", FLAG, Moment.shapes, look)]

"""Threads still running after a reply (`threads_left_running`): work that may go on off the clock.
A flag: the parent's clock and the checked calls judge what such threads do."""

from __future__ import annotations

from ..checking import Check, Finding, Moment, Replied, Timing

FLAG = "threads_left_running"


def look(seen: Replied | Timing) -> Finding | None:
    return Finding(FLAG) if seen.threads_alive else None


CHECKS = [Check("threads_left_running", FLAG, Moment.replied, look),
          Check("threads_left_running_when_timed", FLAG, Moment.timing, look)]

"""Quiet while timing: on a CPU run the CPU is what is timed, so while a lane times a model every
other worker of the run (builds, the next candidate's worker booting) is frozen (SIGSTOP on its
whole tree) and thawed afterwards. Builds and boots thus overlap everything but timing.

No worker starts while another thread's window is open, and a window waits for a start under
way: between fork and exec a new process does not carry the run's marker yet, so it could not be
found. Freezing repeats until no new process turns up (a compiler a build forked as it was being
stopped).

A frozen worker's deadline should not run meanwhile: `clock()` is the monotonic clock less the
time spent quiet, which workers use for their deadlines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

from ..worker import processes
from ..worker.pace import RunGate
from ..worker.parent import RUN_TOKEN_VAR


class QuietGate(RunGate):
    """A CPU run's gate: freezes the run's other workers around timing windows."""

    def __init__(self, token: str):
        super().__init__()
        self.marker = f"{RUN_TOKEN_VAR}={token}".encode()
        self._quiet_s = 0.0

    def clock(self) -> float:
        with self._state:
            return time.monotonic() - self._quiet_s

    @contextlib.contextmanager
    def window(self, timed: list[int]) -> Iterator[processes.OthersCpu]:
        """Freeze every worker of the run but those whose launchers are `timed`, for the block,
        which gets what processes outside the run used meanwhile."""
        me = threading.get_ident()
        with self._state:
            self._state.wait_for(lambda: not self._starting)
            self._windows.append(me)
        frozen: set[int] = set()
        began = time.monotonic()
        try:
            processes.freeze(lambda: self._others(timed), frozen)
            with processes.OthersCpu(self._ours) as others:
                yield others
        finally:
            processes.signal_all(frozen, signal.SIGCONT)
            with self._state:
                self._windows.remove(me)
                self._quiet_s += time.monotonic() - began
                self._state.notify_all()

    def _ours(self) -> set[int]:
        """This process and every process of the run, once each (a worker, forked by its launcher,
        carries the run's marker too)."""
        return {os.getpid(), *(pid for launcher in processes.find_with_environment(self.marker)
                               for pid in processes.tree(launcher))}

    def _others(self, timed: list[int]) -> set[int]:
        """Every process of the run outside the trees of the `timed` launchers."""
        spared = set(timed).union(*(processes.descendants(pid) for pid in timed))
        return {pid for launcher in processes.find_with_environment(self.marker) if launcher not in spared
                for pid in (launcher, *processes.descendants(launcher))} - spared

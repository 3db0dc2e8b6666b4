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
import signal
import threading
import time
from collections.abc import Iterator

from ..worker import processes
from ..worker.parent import RUN_TOKEN_VAR, Pace


class QuietGate(Pace):
    """Freezes a run's other workers around timing windows (CPU runs); a no-op when not `active`."""

    def __init__(self, token: str, active: bool):
        self.marker = f"{RUN_TOKEN_VAR}={token}".encode()
        self.active = active
        self._state = threading.Condition()
        self._windows: list[int] = []  # the threads with a timing window open
        self._starting = 0  # workers being started
        self._quiet_s = 0.0

    def clock(self) -> float:
        with self._state:
            return time.monotonic() - self._quiet_s

    @contextlib.contextmanager
    def launching(self) -> Iterator[None]:
        """Held while a worker process is started: not while another thread's window is open."""
        if not self.active:
            yield
            return
        me = threading.get_ident()
        with self._state:
            self._state.wait_for(lambda: all(thread == me for thread in self._windows))
            self._starting += 1
        try:
            yield
        finally:
            with self._state:
                self._starting -= 1
                self._state.notify_all()

    @contextlib.contextmanager
    def quiet(self, timed: list[int]) -> Iterator[None]:
        """Freeze every worker of the run but those whose launchers are `timed`, for the block."""
        if not self.active:
            yield
            return
        me = threading.get_ident()
        with self._state:
            self._state.wait_for(lambda: not self._starting)
            self._windows.append(me)
        frozen: set[int] = set()
        began = time.monotonic()
        try:
            processes.freeze(lambda: self._others(timed), frozen)
            yield
        finally:
            processes.signal_all(frozen, signal.SIGCONT)
            with self._state:
                self._windows.remove(me)
                self._quiet_s += time.monotonic() - began
                self._state.notify_all()

    def _others(self, timed: list[int]) -> set[int]:
        """Every process of the run outside the trees of the `timed` launchers."""
        spared = set(timed).union(*(processes.descendants(pid) for pid in timed))
        return {pid for launcher in processes.find_with_environment(self.marker) if launcher not in spared
                for pid in (launcher, *processes.descendants(launcher))} - spared

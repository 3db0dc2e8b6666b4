"""How a run paces its workers: the clock their deadlines run on, a guard held while one starts,
and a window held around a timing. REAL_TIME is the plain one. A run's gate (RunGate) also makes
its stop final, whatever the device: once it is closed no worker starts (a start under way
finishes first), so the kill that follows finds every process the run has. A CPU run's gate
freezes the run's other workers in its windows (harness/cpu/quiet.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import ContextManager

CLOSE_WAIT_S = 10.0


class RunStopped(Exception):
    """A worker was to start after its run began to stop: not started."""


class Pace:
    """Real time, no guard, no window."""

    def clock(self) -> float:
        return time.monotonic()

    def launching(self) -> ContextManager:
        return contextlib.nullcontext()

    def window(self, timed: list[int]) -> ContextManager:
        """Held around the timed calls of the workers whose launchers are `timed`; what it gives
        the block is what it measured of processes outside the run meanwhile (None: nothing)."""
        return contextlib.nullcontext()

    def close(self) -> None:
        """No worker starts from now on."""


REAL_TIME = Pace()


class RunGate(Pace):
    """A run's gate: refuses starts once closed, and (where a subclass opens windows) holds a start
    while another thread's window is open."""

    def __init__(self):
        self._state = threading.Condition()
        self._windows: list[int] = []  # the threads with a timing window open
        self._starting = 0  # workers being started
        self._closed = False

    def close(self) -> None:
        """No worker starts from now on; returns once the starts under way are done (a spawn takes
        milliseconds: CLOSE_WAIT_S at most, should one never say it is done)."""
        with self._state:
            self._closed = True
            self._state.notify_all()  # a start waiting for a window to close gives up instead
            self._state.wait_for(lambda: not self._starting, timeout=CLOSE_WAIT_S)

    @contextlib.contextmanager
    def launching(self) -> Iterator[None]:
        """Held while a worker process is started: not while another thread's window is open, and
        not once the gate is closed (RunStopped)."""
        me = threading.get_ident()
        with self._state:
            self._state.wait_for(lambda: self._closed or all(thread == me for thread in self._windows))
            if self._closed:
                raise RunStopped("the run is stopping: no worker starts")
            self._starting += 1
        try:
            yield
        finally:
            with self._state:
                self._starting -= 1
                self._state.notify_all()

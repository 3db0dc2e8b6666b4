"""Quiet while timing: on a CPU run the CPU is what is timed, so while a lane times a model every
other worker of the run (builds, the next candidate's worker booting) is frozen (SIGSTOP on its
whole tree) and thawed afterwards. Builds and boots thus overlap everything but timing.

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
from ..worker.parent import RUN_TOKEN_VAR


class QuietGate:
    """Freezes a run's other workers around timing windows (CPU runs); a no-op when not `active`."""

    def __init__(self, token: str, active: bool):
        self.marker = f"{RUN_TOKEN_VAR}={token}".encode()
        self.active = active
        self._lock = threading.Lock()
        self._quiet_s = 0.0

    def clock(self) -> float:
        with self._lock:
            return time.monotonic() - self._quiet_s

    @contextlib.contextmanager
    def quiet(self, timed: list[int]) -> Iterator[None]:
        """Freeze every worker of the run but those whose launchers are `timed`, for the block."""
        if not self.active:
            yield
            return
        spared = set(timed).union(*(processes.descendants(pid) for pid in timed))
        frozen = {pid for launcher in processes.find_with_environment(self.marker) if launcher not in spared
                  for pid in (launcher, *processes.descendants(launcher))} - spared
        _signal(frozen, signal.SIGSTOP)
        began = time.monotonic()
        try:
            yield
        finally:
            _signal(frozen, signal.SIGCONT)
            with self._lock:
                self._quiet_s += time.monotonic() - began


def _signal(pids, sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

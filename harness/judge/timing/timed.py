"""What a timing phase produced (timing/protocol.py): per call, the worker's time and the parent's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...worker.protocol import Profile
from .stats import ratios


@dataclass
class Timed:
    """What a timing phase produced: per unprofiled call the worker's time and the parent's."""

    reported_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)  # the command, and its outputs' hand-over where timed apart
    commit_ms: list[float] = field(default_factory=list)  # the hand-over alone (a GPU's commit)
    host_ms: list[float] = field(default_factory=list)  # the host's time into the calls, where the worker said
    # Per recorded command, the reference's time a call in a command of its own made right after it
    # with this worker stopped (a paired timing, `Timer.pair`): where a device pairs them.
    paired_ms: list[float] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)
    profiled_wall_ms: list[float] = field(default_factory=list)  # the parent's clock around the profiled calls
    stopped: str = "max_trials"
    threads_alive: int = 0
    batch: int = 1  # calls per timed command: each time above is per call, the command's over this
    profiled_most: int = 1  # calls per profiled command, at most
    others_cores: float | None = None  # cores processes outside the run kept busy meanwhile, where measured
    throttled_ms: dict[str, float] | None = None  # a GPU's clocks held down meanwhile, per limit, where read
    gathered: Any = None  # what the device's measurement gathered besides (on the CPU, its sampling)

    def extend(self, again: Timed) -> None:
        """Add a second timing's calls (a second look) to this one's: the busier machine of the
        two, and the clock limits of both."""
        self.reported_ms += again.reported_ms
        self.wall_ms += again.wall_ms
        self.host_ms += again.host_ms
        self.stopped = again.stopped
        self.others_cores = max((share for share in (self.others_cores, again.others_cores) if share is not None),
                                default=None)
        if self.throttled_ms is None or again.throttled_ms is None:
            self.throttled_ms = self.throttled_ms or again.throttled_ms
        else:
            limits = self.throttled_ms.keys() | again.throttled_ms.keys()
            self.throttled_ms = {name: self.throttled_ms.get(name, 0.0) + again.throttled_ms.get(name, 0.0)
                                 for name in limits}

    @property
    def profiled_batch(self) -> int:
        """Calls per profiled command."""
        return min(self.batch, self.profiled_most)

    @property
    def paired_ratios(self) -> list[float]:
        """Per paired command, the reference's time over this worker's: its speedup in that pair."""
        return ratios(self.paired_ms, self.reported_ms)

    @property
    def overhead_ms(self) -> list[float]:
        """Per call, what the parent saw beyond what the worker reported."""
        return [w - r for w, r in zip(self.wall_ms, self.reported_ms)]

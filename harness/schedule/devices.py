"""Which device a run evaluates on: the one place a device's side of the seam (judge/device.py) is
chosen. The CPU's is imported only for a CPU run, so a GPU run never loads the CPU's integrity
machinery (harness/cpu/)."""

from __future__ import annotations

from ..judge.device import Device
from ..judge.gpu import Gpu
from ..worker.pace import RunGate


def device_for(name: str, token: str | None = None) -> Device:
    """The device of a run. `token`: the run's, whose other workers a CPU run freezes while it
    times one (None: a run of one lane's own, as on Ray or for `harness check`, freezes none)."""
    if name == "cpu":
        from ..cpu.device import Cpu
        from ..cpu.quiet import QuietGate

        return Cpu(QuietGate(token) if token else RunGate())
    return Gpu(RunGate())

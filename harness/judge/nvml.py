"""How long the GPU's clocks were held down while a model was timed, read from NVML around the
timing: the driver counts, per limit (power, thermal, the board's, reliability), the time it held
the clocks below what the load asked for. A timing during which one of them was active for
THROTTLED_MS or more says so (`judge/checks/gpu_throttled.py`): its speedup is not the GPU's at
full clocks. NVML through NVIDIA's own binding, nvidia-ml-py (`pynvml`; the extra `gpu`), where
it is installed; without it nothing is read and nothing is said."""

from __future__ import annotations

import contextlib
import functools

from ..worker.parent import pci_address

# NVML's perf policies (nvmlPerfPolicyType_t) that slow the clocks under load; not low utilization
# (clocks falling while the GPU idles between calls) nor sync boost.
LIMITS = {"power": 0, "thermal": 1, "board_limit": 3, "reliability": 5}


@functools.cache
def _nvml():
    """pynvml, initialized once; None where it is missing or the driver refuses."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver, or none this process may ask
        return None
    return pynvml


@functools.cache
def _handle(gpu: int):
    nvml = _nvml()
    address = pci_address(gpu, 8) if nvml is not None else None
    if address is None:
        return None
    try:
        return nvml.nvmlDeviceGetHandleByPciBusId(address)
    except nvml.NVMLError:
        return None


def limited_ns(gpu: int) -> dict[str, int] | None:
    """Per limit that this GPU reports, the nanoseconds NVML has counted it holding the clocks down
    since the driver loaded; None where NVML cannot be read."""
    nvml, handle = _nvml(), _handle(gpu)
    if handle is None:
        return None
    counted = {}
    for name, policy in LIMITS.items():
        with contextlib.suppress(nvml.NVMLError):  # a limit this GPU does not report
            counted[name] = int(nvml.nvmlDeviceGetViolationStatus(handle, policy).violationTime)
    return counted or None  # none reported: nothing read, rather than nothing held down


def throttled_between(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, float] | None:
    """Milliseconds each limit held the clocks down between two readings (only those that did)."""
    if before is None or after is None:
        return None
    return {name: (after[name] - before[name]) / 1e6 for name in after
            if name in before and after[name] > before[name]}

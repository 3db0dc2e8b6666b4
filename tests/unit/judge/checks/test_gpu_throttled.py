"""A speed timed while the GPU's clocks were held down is flagged: not the GPU's at full clocks."""

from harness.judge.checking import Timing
from harness.judge.checks.gpu_throttled import THROTTLED_MS, look
from harness.judge.timing.stats import timing_stats


def stats(throttled):
    return timing_stats([0.1, 0.11, 0.09], "cuda_device", throttled_ms=throttled)


def seen(candidate, reference) -> Timing:
    return Timing(stats(candidate), stats(reference), 0.1, None, None, 0)


def test_clocks_held_down_while_either_was_timed_flag_the_speedup():
    found = look(seen({"power": 3.2, "thermal": 0.5}, None))
    assert found.flag == "gpu_throttled" and found.status is None  # a flag, not a verdict
    assert "while it was timed: power 3.2 ms, thermal 0.5 ms" in found.evidence[0]
    found = look(seen({}, {"thermal": 12.0}))
    assert len(found.evidence) == 2 and "while the reference was timed: thermal 12 ms" in found.evidence[0]


def test_full_clocks_or_nothing_read_flag_nothing():
    assert look(seen({}, {})) is None
    assert look(seen(None, None)) is None  # NVML not read: nothing said
    assert look(seen({"power": THROTTLED_MS * 0.9}, {})) is None

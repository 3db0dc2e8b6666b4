"""A speed timed beside other processes is flagged: not an idle machine's."""

from harness.cpu.checks.busy_machine import BUSY_CORES, busy_machine
from harness.judge.timing.stats import timing_stats

def test_a_speed_timed_beside_other_processes_says_the_machine_was_busy():
    def stats(others):
        return timing_stats([1.0, 1.1, 0.9], "perf_counter", others_cores=others)

    assert busy_machine(stats(0.02), stats(None)) is None
    assert busy_machine(stats(BUSY_CORES * 0.9), stats(0.0)) is None
    assert "kept 1.30 cores busy while it was timed and 0.00 while the reference was" in busy_machine(stats(1.3), stats(0.0))
    assert "kept 0.80 cores busy while it was timed and unmeasured while" in busy_machine(stats(0.8), stats(None))
    assert "0.00 cores busy while it was timed and 0.90 while the reference was" in busy_machine(stats(0.0), stats(0.9))

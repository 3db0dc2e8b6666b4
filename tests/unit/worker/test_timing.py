"""Timing statistics and the CPU clock."""

import time

from harness.worker.timing import time_cpu, timing_stats


def test_statistics_of_samples():
    stats = timing_stats([4.0, 1.0, 3.0, 2.0, 100.0], "perf_counter")
    assert stats.median_ms == 3.0 and stats.min_ms == 1.0 and stats.max_ms == 100.0
    assert stats.mean_ms == 22.0 and stats.iqr_ms == 2.0 and stats.n == 5
    assert stats.samples_ms == [4.0, 1.0, 3.0, 2.0, 100.0]  # raw, in call order


def test_cpu_timer_measures_the_call_after_warmup():
    calls = []

    def slow(call):
        calls.append(call)
        time.sleep(0.01)

    prepared, kept = [], []
    stats = time_cpu(slow, warmup=2, trials=5, prepare=prepared.append, after=lambda i, out: kept.append(i))
    assert calls == [-1, -2, 0, 1, 2, 3, 4] and stats.n == 5
    assert prepared == calls and kept == [0, 1, 2, 3, 4]  # hooks around every call, outside the clock
    assert 9.0 <= stats.median_ms < 100.0

"""The median with its distribution-free interval, and when a timing has converged."""

import random

from harness.judge.timing.stats import converged, median_interval, timing_stats

def test_statistics_of_samples_with_the_medians_interval():
    stats = timing_stats([4.0, 1.0, 3.0, 2.0, 100.0], "perf_counter", "fixed")
    assert stats.median_ms == 3.0 and stats.min_ms == 1.0 and stats.max_ms == 100.0
    assert stats.mean_ms == 22.0 and stats.iqr_ms == 2.0 and stats.n == 5 and stats.stopped == "fixed"
    assert stats.samples_ms == [4.0, 1.0, 3.0, 2.0, 100.0]  # raw, in call order
    assert stats.ci_low_ms <= stats.median_ms <= stats.ci_high_ms


def test_the_interval_narrows_with_more_samples_and_decides_convergence():
    rng = random.Random(0)
    few = [1.0 + rng.gauss(0, 0.02) for _ in range(8)]
    many = [1.0 + rng.gauss(0, 0.02) for _ in range(400)]
    width = lambda xs: median_interval(xs)[1] - median_interval(xs)[0]  # noqa: E731
    assert width(many) < width(few)
    assert converged(many) and not converged([1.0, 2.0, 3.0, 4.0, 5.0])

"""Statistics of timed calls: the median with its distribution-free 95% interval, when a timing
has converged, and the robust spreads the clock bound (bound.py) is made of."""

from __future__ import annotations

import math
import statistics

from ...records import TimingStats

TARGET_HALF_WIDTH = 0.01  # adaptive timing: the median's 95% interval within ±1% of it
Z95 = 1.96


def median_interval(samples: list[float]) -> tuple[float, float]:
    """The median's distribution-free 95% interval: order statistics n/2 ± 1.96·√n/2."""
    ordered = sorted(samples)
    n = len(ordered)
    spread = Z95 * math.sqrt(n) / 2
    return ordered[max(0, math.floor(n / 2 - spread))], ordered[min(n - 1, math.ceil(n / 2 + spread))]


def ratios(reference_ms: list[float], candidate_ms: list[float]) -> list[float]:
    """Per pair of commands, the reference's time over the candidate's: its speedup in that pair."""
    return [theirs / mine for theirs, mine in zip(reference_ms, candidate_ms) if mine > 0]


def paired_speedup(ratios: list[float], correction: float = 1.0) -> tuple[float, float, float]:
    """The speedup of a paired timing (the median of its pairs' ratios) with its distribution-free
    95% interval, each times `correction` (the candidate's median reported time over the median its
    clock vouches for: below 1 where the clock held it to more)."""
    low, high = median_interval(ratios)
    return statistics.median(ratios) * correction, low * correction, high * correction


def converged(samples: list[float]) -> bool:
    low, high = median_interval(samples)
    median = statistics.median(samples)
    return median > 0 and (high - low) / 2 <= TARGET_HALF_WIDTH * median


def timing_stats(samples_ms: list[float], clock: str, stopped: str | None = None, calls_per_sample: int = 1,
                 others_cores: float | None = None, throttled_ms: dict[str, float] | None = None) -> TimingStats:
    ordered = sorted(samples_ms)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    low, high = median_interval(ordered)
    return TimingStats(median_ms=statistics.median(ordered), iqr_ms=q3 - q1, mean_ms=statistics.fmean(ordered),
                       min_ms=ordered[0], max_ms=ordered[-1], n=len(ordered), samples_ms=samples_ms, clock=clock,
                       ci_low_ms=low, ci_high_ms=high, stopped=stopped, calls_per_sample=calls_per_sample,
                       others_cores=others_cores, throttled_ms=throttled_ms)


def lower_quartile(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=4, method="inclusive")[0] if len(samples) > 1 else samples[0]


def spread_of(samples: list[float]) -> float:
    """The median absolute deviation from the median (0 for no samples)."""
    if not samples:
        return 0.0
    middle = statistics.median(samples)
    return statistics.median(abs(x - middle) for x in samples)

"""Time a forward call: CUDA events with an L2 flush on the GPU, a monotonic clock on the CPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from .records import TimingStats

MIN_FLUSH_BYTES = 256 * 1024 * 1024


def summarize(samples_ms: list[float], clock: str) -> TimingStats:
    ordered = sorted(samples_ms)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return TimingStats(
        median_ms=statistics.median(ordered), iqr_ms=q3 - q1, mean_ms=statistics.fmean(ordered),
        min_ms=ordered[0], max_ms=ordered[-1], n=len(ordered), samples_ms=samples_ms, clock=clock,
    )


def _l2_flush_buffer() -> torch.Tensor:
    """A buffer several times the L2 size; zeroing it evicts whatever the last call left there."""
    l2_bytes = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
    return torch.empty(max(MIN_FLUSH_BYTES, 4 * l2_bytes), dtype=torch.uint8, device="cuda")


def time_cuda(fn: Callable[[], object], warmup: int, trials: int) -> TimingStats:
    flush = _l2_flush_buffer()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
    for start, end in zip(starts, ends):
        flush.zero_()
        start.record()
        fn()
        end.record()
        # One call at a time: the next flush must not overlap this call's tail.
        torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], "cuda_event")


def time_cpu(fn: Callable[[], object], warmup: int, trials: int) -> TimingStats:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(trials):
        begin = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - begin) / 1e6)
    return summarize(samples, "perf_counter")


def time_forward(fn: Callable[[], object], device: str, warmup: int, trials: int) -> TimingStats:
    if device == "cuda":
        return time_cuda(fn, warmup, trials)
    return time_cpu(fn, warmup, trials)

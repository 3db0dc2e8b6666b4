"""Time a forward call: CUDA events with an L2 flush on the GPU, a monotonic clock on the CPU.

The clocks are bound when this module is imported, which the worker does before it imports any
candidate code: a candidate that later replaces `time.perf_counter_ns`, `torch.cuda.Event` or
`torch.cuda.synchronize` changes nothing here. Each timed call is bracketed by device-wide
synchronizes, so work a candidate hides on side streams is inside the measured interval.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from ..records import TimingStats

MIN_FLUSH_BYTES = 256 * 1024 * 1024
Hook = Callable[[int], None]

# C-level functions, bound now (CPU builds of torch lack the CUDA ones; they are never called there).
_perf_counter_ns = time.perf_counter_ns
_EventBase = torch._C._CudaEventBase
_record_event = getattr(_EventBase, "record", None)
_event_elapsed_ms = getattr(_EventBase, "elapsed_time", None)
_device_synchronize = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream


def timing_stats(samples_ms: list[float], clock: str) -> TimingStats:
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


def time_cuda(fn: Callable[[int], object], warmup: int, trials: int, prepare: Hook = lambda i: None,
              after: Callable[[int, object], None] = lambda i, out: None) -> TimingStats:
    """`prepare(i)` runs before call i and `after(i, output)` after it, both outside the timed
    interval (fresh inputs, keeping a sample of outputs)."""
    flush = _l2_flush_buffer()
    stream = _current_stream()
    for i in range(warmup):
        prepare(-1 - i)
        fn(-1 - i)
    _device_synchronize()
    starts = [_EventBase(enable_timing=True) for _ in range(trials)]
    ends = [_EventBase(enable_timing=True) for _ in range(trials)]
    for i, (start, end) in enumerate(zip(starts, ends)):
        prepare(i)
        flush.zero_()
        _device_synchronize()  # the device is idle: nothing earlier can leak into this call
        _record_event(start, stream)
        output = fn(i)
        _device_synchronize()  # every stream, so work hidden on side streams counts
        _record_event(end, stream)
        after(i, output)
    _device_synchronize()
    return timing_stats([_event_elapsed_ms(s, e) for s, e in zip(starts, ends)], "cuda_event")


def time_cpu(fn: Callable[[int], object], warmup: int, trials: int, prepare: Hook = lambda i: None,
             after: Callable[[int, object], None] = lambda i, out: None) -> TimingStats:
    for i in range(warmup):
        prepare(-1 - i)
        fn(-1 - i)
    samples = []
    for i in range(trials):
        prepare(i)
        begin = _perf_counter_ns()
        output = fn(i)
        samples.append((_perf_counter_ns() - begin) / 1e6)
        after(i, output)
    return timing_stats(samples, "perf_counter")


def time_forward(fn: Callable[[int], object], device: str, warmup: int, trials: int, prepare: Hook = lambda i: None,
                 after: Callable[[int, object], None] = lambda i, out: None) -> TimingStats:
    """Time `fn(i)` for i in 0..trials-1 after `warmup` untimed calls (negative i)."""
    timer = time_cuda if device == "cuda" else time_cpu
    return timer(fn, warmup, trials, prepare, after)


def measure_peaks() -> tuple[float, float]:
    """(FLOP per ms, bytes per ms) this GPU actually reaches: the best of a bf16 tensor-core
    matmul and of a large device copy. No kernel of any precision can beat both."""
    size, copy_bytes = 8192, 1 << 30
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    src = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def best_ms(fn: Callable[[], object]) -> float:
        fn()
        return time_cuda(lambda i: fn(), 0, 5).min_ms

    flops_per_ms = 2 * size**3 / best_ms(lambda: a @ a)
    bytes_per_ms = 2 * copy_bytes / best_ms(lambda: dst.copy_(src))
    return flops_per_ms, bytes_per_ms

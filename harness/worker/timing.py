"""Time one forward call: CUDA events with an L2 flush on the GPU, a monotonic clock on the CPU.

The clocks are bound when this module is imported, which the worker does before it imports any
candidate code: a candidate that later replaces `time.perf_counter_ns`, `torch.cuda.Event` or
`torch.cuda.synchronize` changes nothing here. Each timed call is bracketed by device-wide
synchronizes, so work a candidate hides on side streams is inside the measured interval. None of
this is trusted: the parent holds every reported time against its own clock (judge/timing/bound.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import ContextManager

import torch

from . import cuda_ipc

MIN_FLUSH_BYTES = 256 * 1024 * 1024

# C-level functions, bound now (CPU builds of torch lack the CUDA ones; they are never called there).
_perf_counter_ns = time.perf_counter_ns
_EventBase = torch._C._CudaEventBase
_record_event = getattr(_EventBase, "record", None)
_event_elapsed_ms = getattr(_EventBase, "elapsed_time", None)
_device_synchronize = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream


def flush_buffer() -> torch.Tensor:
    """A buffer several times the L2 size; zeroing it evicts whatever the last call left there."""
    l2_bytes = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
    return torch.empty(max(MIN_FLUSH_BYTES, 4 * l2_bytes), dtype=torch.uint8, device="cuda")


def time_call(call: Callable[[], object], flush: torch.Tensor | None,
              watch: Callable[[], ContextManager] = contextlib.nullcontext) -> float:
    """Milliseconds of one call. On a GPU (`flush` given): persisting L2 lines demoted and the L2
    flushed first, the device idle at the start event, every stream drained before the end one.
    `watch()` (the profiler) is held around the call only, not around the flush: the flush's
    kernel is the harness's, not the candidate's."""
    if flush is None:
        with watch():
            begin = _perf_counter_ns()
            call()
            return (_perf_counter_ns() - begin) / 1e6
    start, end = _EventBase(enable_timing=True), _EventBase(enable_timing=True)
    stream = _current_stream()
    cuda_ipc.reset_persisting_l2()
    flush.zero_()
    _device_synchronize()  # the device is idle: nothing earlier can leak into this call
    with watch():
        _record_event(start, stream)
        call()
        _device_synchronize()  # every stream, so work hidden on side streams counts
        _record_event(end, stream)
        _device_synchronize()
    return _event_elapsed_ms(start, end)


def slowest_round_trip_ms(calls: int) -> float:
    """The slowest of `calls` tiny kernels' round trips one after another (launch to device-wide
    synchronize), in ms: how long this context waits for the GPU. 0.013 ms on an H100 nothing else
    uses; a time slice (2.4 ms) while another process's context has work queued there, as the GPU
    runs one process's context at a time. One may slip through in a gap between another process's
    kernels, all of them only when it has none."""
    one = torch.zeros(1, device="cuda")
    _device_synchronize()
    slowest = 0.0
    for _ in range(calls):
        begin = _perf_counter_ns()
        one.add_(1)
        _device_synchronize()
        slowest = max(slowest, _perf_counter_ns() - begin)
    return max(slowest / 1e6, 1e-6)


def measure_peaks() -> tuple[float, float]:
    """(FLOP per ms, bytes per ms) this GPU actually reaches: the best of a bf16 tensor-core
    matmul and of a large device copy. No kernel of any precision can beat both."""
    size, copy_bytes = 8192, 1 << 30
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    src = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    no_flush = torch.empty(0, dtype=torch.uint8, device="cuda")  # the GPU's clock; peaks want warm caches

    def best_ms(fn: Callable[[], object]) -> float:
        fn()
        return min(time_call(fn, no_flush) for _ in range(5))

    flops_per_ms = 2 * size**3 / best_ms(lambda: a @ a)
    bytes_per_ms = 2 * copy_bytes / best_ms(lambda: dst.copy_(src))
    return flops_per_ms, bytes_per_ms

"""Time one forward call: the device's own time on a GPU, a monotonic clock on the CPU.

On a GPU each call starts from an idle device with the L2 flushed. A hold kernel that fills every
SM spins for HOLD_US first: the host enqueues the call meanwhile, so the host's path into the call
(13-25 us a call, different from one process to the next) is not the call's time, and no kernel of
another stream can start before the call's start event, as none finds room on an SM. The call's
time ends with its work on the stream it was called on (an event recorded there, no host round
trip); work left on other streams past that end shows as a device-wide join slower than this
worker's own join latency, and the difference is the call's too. The host's time into the call is
measured beside it (`CallTime.host_ms`).

The clocks are bound when this module is imported, which the worker does before it imports any
candidate code: a candidate that later replaces `time.perf_counter_ns`, `torch.cuda.Event` or
`torch.cuda.synchronize` changes nothing here. None of this is trusted: the parent holds every
reported time against its own clock (judge/timing/bound.py).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ContextManager

import torch

from . import cuda_ipc

MIN_FLUSH_BYTES = 256 * 1024 * 1024
# The hold: long enough for the host to enqueue what forward launches (on an H100 a Triton
# softmax's launch took 0.05 to 0.13 ms, a four-operator reference's 0.11 to 0.25 ms, and at 50 us
# their medians moved 6 to 12% between runs with the host's path), short enough to cost little
# beside the flush; a longer host path shows as the GPU waiting for launches, inside the time.
HOLD_US = 200
# A device-wide join this much slower than the worker's own (its median over JOIN_SAMPLES empty
# joins) is work past the timed stream's end, all of it the call's; less is the host's wake-up
# jitter (a candidate gains at most this much a call by leaving work on another stream).
JOIN_SLACK_MS = 0.005
JOIN_SAMPLES = 21
HOLD_SOURCE = r"""
extern "C" __global__ void harness_hold(int us) {
    unsigned long long start, now, until = 1000ULL * (unsigned int) us;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < until);
}
"""

# C-level functions, bound now (CPU builds of torch lack the CUDA ones; they are never called there).
_perf_counter_ns = time.perf_counter_ns
_EventBase = torch._C._CudaEventBase
_record_event = getattr(_EventBase, "record", None)
_event_elapsed_ms = getattr(_EventBase, "elapsed_time", None)
_device_synchronize = getattr(torch._C, "_cuda_synchronize", None)
_current_stream = torch.cuda.current_stream
_compile_kernel = getattr(torch.cuda, "_compile_kernel", None)  # NVRTC, torch 2.8 and later
HOLDS = _compile_kernel is not None  # without it, no hold: the host's path into a call stays in its time


@dataclass(frozen=True)
class CallTime:
    """One call's time (device time on a GPU, the host's clock on the CPU) and the host's time
    from the call's start to its return."""

    elapsed_ms: float
    host_ms: float


def flush_buffer() -> torch.Tensor:
    """A buffer several times the L2 size; zeroing it evicts whatever the last call left there."""
    l2_bytes = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
    return torch.empty(max(MIN_FLUSH_BYTES, 4 * l2_bytes), dtype=torch.uint8, device="cuda")


def hold_shape(sms: int, threads_per_sm: int) -> tuple[int, int]:
    """(blocks, threads a block) that take every thread slot of every SM: as few blocks to an SM
    as the 1024-thread limit of a block allows."""
    per_sm = math.ceil(threads_per_sm / 1024)
    return sms * per_sm, threads_per_sm // per_sm


def joined_ms(on_stream_ms: float, join_ms: float, own_join_ms: float) -> float:
    """A call's device time: its work on the timed stream, and where the device-wide join after it
    took JOIN_SLACK_MS longer than the worker's own join, all of that difference (work left on
    other streams). At least a nanosecond: a reply says no call took nothing."""
    late_ms = join_ms - own_join_ms
    return max(1e-6, on_stream_ms + (late_ms if late_ms > JOIN_SLACK_MS else 0.0))


class GpuClock:
    """Times calls on this process's current GPU (`flush`: the L2 flushed before each)."""

    def __init__(self, flush: bool = True):
        self.flush = flush_buffer() if flush else None
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        # Not every torch says how many threads an SM holds; 2048 is every data-centre GPU's since Volta.
        self.hold_grid, self.hold_block = hold_shape(properties.multi_processor_count,
                                                     getattr(properties, "max_threads_per_multi_processor", 2048))
        self.hold = _compile_kernel(HOLD_SOURCE, "harness_hold") if HOLDS else None
        self.own_join_ms = self._own_join_ms()

    def time(self, call: Callable[[], object], watch: Callable[[], ContextManager]) -> CallTime:
        start, stream_end, joined = (_EventBase(enable_timing=True) for _ in range(3))
        stream = _current_stream()
        cuda_ipc.reset_persisting_l2()
        if self.flush is not None:
            self.flush.zero_()
        _device_synchronize()  # the device is idle: nothing earlier can leak into this call
        if self.hold is not None:
            self.hold(grid=(self.hold_grid, 1, 1), block=(self.hold_block, 1, 1), args=[HOLD_US], stream=stream)
        _record_event(start, stream)
        began = _perf_counter_ns()
        with watch():  # the profiler's stop, after the block, is no call's time
            call()
            returned = _perf_counter_ns()
            _record_event(stream_end, stream)
            _device_synchronize()  # every stream: work hidden on side streams ends before the join
            _record_event(joined, stream)
            _device_synchronize()
        elapsed = joined_ms(_event_elapsed_ms(start, stream_end), _event_elapsed_ms(stream_end, joined),
                            self.own_join_ms)
        return CallTime(elapsed, (returned - began) / 1e6)

    def _own_join_ms(self) -> float:
        """The median time from an event on an idle stream to the next one after a device-wide join."""
        stream, samples = _current_stream(), []
        for _ in range(JOIN_SAMPLES):
            before, after = _EventBase(enable_timing=True), _EventBase(enable_timing=True)
            _record_event(before, stream)
            _device_synchronize()
            _record_event(after, stream)
            _device_synchronize()
            samples.append(_event_elapsed_ms(before, after))
        return statistics.median(samples)


def time_call(call: Callable[[], object], clock: GpuClock | None,
              watch: Callable[[], ContextManager] = contextlib.nullcontext) -> CallTime:
    """One call's time: on a GPU (`clock` given) as the clock times it; on the CPU by the host's
    monotonic clock. `watch()` (the profiler) is held around the call only, not around the flush
    and the hold: their kernels are the harness's, not the candidate's."""
    if clock is not None:
        return clock.time(call, watch)
    with watch():
        begin = _perf_counter_ns()
        call()
        elapsed = (_perf_counter_ns() - begin) / 1e6
    return CallTime(elapsed, elapsed)


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
    warm = GpuClock(flush=False)  # peaks want warm caches

    def best_ms(fn: Callable[[], object]) -> float:
        fn()
        return min(time_call(fn, warm).elapsed_ms for _ in range(5))

    flops_per_ms = 2 * size**3 / best_ms(lambda: a @ a)
    bytes_per_ms = 2 * copy_bytes / best_ms(lambda: dst.copy_(src))
    return flops_per_ms, bytes_per_ms

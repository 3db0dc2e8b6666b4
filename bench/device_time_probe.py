"""Probe (GPU): how each way of timing one call agrees across two fresh processes: events around
the call and the host's path into it (the clock before 2026-12-07), a one-thread hold
(torch.cuda._sleep) with the end on the timed stream or after a device-wide join, and a hold that
fills every SM (what worker/timing.py does). Run: python3 bench/device_time_probe.py (spawns two
children). CUPTI through torch's kineto with CUDA activities alone was tried too: torch 2.11's
_disable_profiler segfaulted there (H100, 2026-12-07)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

CALLS = 200


def child() -> dict:
    import torch

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    x = torch.randn(4096, 4096, device="cuda")
    small = torch.randn(128, 4096, device="cuda")
    side = torch.cuda.Stream()

    def on_side():
        with torch.cuda.stream(side):
            torch.relu(x)

    cases = {
        "relu_64MB": lambda: torch.relu(x),
        "softmax_2MB": lambda: torch.softmax(small, dim=1),
        "ten_small_ops": lambda: [small.mul(1.0001) for _ in range(10)],
        "side_stream_relu": on_side,
    }
    sync = torch.cuda.synchronize

    def events_today(call):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush.zero_(); sync()
        start.record(); call(); sync(); end.record(); sync()
        return start.elapsed_time(end)

    def held(call, cycles=100_000):
        e0, start, stream_end, end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
        flush.zero_(); sync()
        e0.record(); torch.cuda._sleep(cycles); start.record(); call(); covered = not start.query()
        stream_end.record(); sync(); end.record(); sync()
        return start.elapsed_time(stream_end), start.elapsed_time(end), e0.elapsed_time(start), covered

    import triton
    import triton.language as tl

    @triton.jit
    def hold_kernel(out_ptr, ns, seed):
        start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [seed], dtype=tl.int64, is_pure=False, pack=1)
        now = start
        while now - start < ns:
            now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [seed], dtype=tl.int64, is_pure=False, pack=1)
        tl.store(out_ptr + tl.program_id(0), now)

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    hold_out = torch.empty(sms * 2, dtype=torch.int64, device="cuda")

    def full_hold(ns):
        hold_kernel[(sms * 2,)](hold_out, ns, 1, num_warps=32)

    def held_full(call, ns=50_000):
        e0, start, end, side_done = (torch.cuda.Event(enable_timing=True) for _ in range(4))
        flush.zero_(); sync()
        e0.record(); full_hold(ns); start.record(); call(); covered = not start.query()
        side_done.record(side); sync(); end.record(); sync()
        return start.elapsed_time(end), e0.elapsed_time(start), covered, start.elapsed_time(side_done)

    full_hold(1000); sync()
    out = {}
    for name, call in cases.items():
        for _ in range(20):
            call()
        sync()
        today = [events_today(call) for _ in range(CALLS)]
        h = [held(call) for _ in range(CALLS)]
        hf = [held_full(call) for _ in range(CALLS)]
        out[name] = {
            "today_ms": statistics.median(today),
            "held_stream_ms": statistics.median(x[0] for x in h),
            "held_joined_ms": statistics.median(x[1] for x in h),
            "hold_ms": statistics.median(x[2] for x in h),
            "held_covered": sum(x[3] for x in h) / CALLS,
            "full_held_ms": statistics.median(x[0] for x in hf),
            "full_hold_ms": statistics.median(x[1] for x in hf),
            "full_covered": sum(x[2] for x in hf) / CALLS,
            "side_done_after_start_ms": statistics.median(x[3] for x in hf),
        }
    return out


def main() -> None:
    if sys.argv[1:] == ["child"]:
        print(json.dumps(child()))
        return
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, __file__, "child"], capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-3000:])
            sys.exit(1)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for name in runs[0]:
        a, b = runs[0][name], runs[1][name]
        print(name)
        for key in ("today_ms", "held_stream_ms", "held_joined_ms", "hold_ms", "held_covered", "full_held_ms", "full_hold_ms", "full_covered", "side_done_after_start_ms"):
            x, y = a[key], b[key]
            if x is None or y is None:
                continue
            diff = abs(x - y) / max(min(x, y), 1e-9) * 100 if x and y else float("nan")
            print(f"  {key:16s} {x:10.5f} {y:10.5f}  {diff:6.2f}%")


if __name__ == "__main__":
    main()

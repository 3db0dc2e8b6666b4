"""What comparing one large output costs the parent on a GPU: the fused comparison (one Triton
kernel) against the chunked one, on a pair the size of conv2d_square's output (8.5 GB of float32).

    python bench/compare_outputs.py [--elements N] [--repeat 5] [--out FILE]

Prints, and writes as JSON with --out, each way's median seconds over the repeats (the first
call, which compiles the Triton kernel, is timed apart) and that they agree.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from harness.judge.compare import FusedComparison, chunked_errors
from harness.records import Tolerance

CONV2D_SQUARE_OUTPUT = 16 * 128 * 1022 * 1022
TOL = Tolerance(atol=1e-2, rtol=1e-2)


def seconds(compare, *args) -> tuple[float, object]:
    torch.cuda.synchronize()
    began = time.perf_counter()
    found = compare(*args)  # each way ends in a synchronizing read
    return time.perf_counter() - began, found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=CONV2D_SQUARE_OUTPUT)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    fused = FusedComparison(torch.cuda.current_device())
    fused_errors = fused.errors
    expected = torch.randn(args.elements, device="cuda")
    actual = expected + torch.randn(args.elements, device="cuda") * 1e-3
    first_s, first = seconds(fused_errors, expected, actual, TOL)
    if first is None:
        raise SystemExit("no fused comparison here (no Triton, or it failed to compile): nothing to time")
    runs = {way: [seconds(compare, expected, actual, TOL) for _ in range(args.repeat)]
            for way, compare in (("fused", fused_errors), ("chunked", chunked_errors))}
    found = {way: runs[way][-1][1] for way in runs}
    report = {"device": torch.cuda.get_device_name(), "elements": args.elements,
              "gigabytes": round(expected.nbytes / 1e9, 2), "fused_first_call_s": round(first_s, 3),
              **{f"{way}_median_s": round(statistics.median(s for s, _ in runs[way]), 4) for way in runs},
              "agree": found["fused"][2:] == found["chunked"][2:]}
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How the report scales: render a synthetic run of N candidates and time it.

    python bench/report_scale.py [N]

Prints the render time (the whole site, and the index alone), the size of index.html and of all
candidate pages together. An index of thousands of rows stays one page, filtered and sorted in
the browser; most of the site's time goes to highlighting each candidate's code."""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from harness.judge.diagnose import diagnose
from harness.records import Result, Status, TimingStats
from harness.present.site import render_index, render_site

CODE = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n" * 8


def synthetic_results(count: int, problems: int = 100) -> list[Result]:
    rng = random.Random(0)
    results = []
    for i in range(count):
        status = rng.choice(list(Status))
        samples = [rng.uniform(1.0, 1.2) for _ in range(100)]
        timing = TimingStats(median_ms=1.1, iqr_ms=0.05, mean_ms=1.1, min_ms=1.0, max_ms=1.2, n=100, samples_ms=samples,
                             clock="cuda_event")
        ok = status is Status.ok
        result = Result(run_id="bench", problem=f"problem_{i % problems:03d}", candidate=f"problem_{i % problems:03d}/sample_{i}.py",
                        status=status, speedup=rng.uniform(0.2, 3.0) if ok else None, candidate_hash=f"{i:064x}",
                        error=None if ok else "main.cpp:4: error: 'f' was not declared in this scope",
                        timing=timing if ok else None, reference_timing=timing, max_abs_err=1e-6 if ok else None)
        result.diagnosis = diagnose(result, CODE)
        results.append(result)
    return results


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    results = synthetic_results(count)
    with tempfile.TemporaryDirectory() as out:
        began = time.perf_counter()
        index = render_site(None, results, lambda r: CODE, Path(out))
        elapsed = time.perf_counter() - began
        began = time.perf_counter()
        render_index(None, results)
        index_only = time.perf_counter() - began
        pages = sum(p.stat().st_size for p in (Path(out) / "c").iterdir())
        print(f"{count} candidates: rendered in {elapsed:.1f} s (the index alone {index_only:.1f} s); index.html {index.stat().st_size / 1e6:.2f} MB; "
              f"candidate pages {pages / 1e6:.1f} MB in all ({pages / count / 1e3:.1f} kB each)")


if __name__ == "__main__":
    main()

"""Repeatability of GPU speedups (issue 52): the shipped candidates and every shipped problem's own
PyTorch reference as a candidate (speedup 1.00 expected), judged in two runs one after the other;
per candidate the two speedups, how far apart they are, and the reference-as-candidate's distance
from 1. Run from the project root on the GPU machine:

    python3 bench/gpu_repeat.py OUT_DIR [EXTRA EVAL ARGS...]

Writes OUT_DIR/repeat.txt (the table) and each run's results.jsonl."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def reference_candidates(problems: Path, into: Path) -> None:
    """`<problem>/reference.py`: the problem's own source with `ModelNew = Model`."""
    for problem in sorted(problems.glob("*.py")):
        folder = into / problem.stem
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "reference.py").write_text(problem.read_text() + "\n\nModelNew = Model\n")


def judged(candidates: Path, out: Path, extra: list[str]) -> tuple[dict[str, dict], float]:
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "harness", "eval", str(candidates), "--problems", str(ROOT / "problems"),
                    "--device", "cuda", "--out", str(out), "--db", str(out / "results.db"), *extra],
                   check=False, stdout=subprocess.DEVNULL)
    results: dict[str, dict] = {}
    written = out / "results.jsonl"
    for line in (written.read_text().splitlines() if written.exists() else []):  # none: a run that failed to start
        record = json.loads(line)
        results[record["candidate"]] = record
    return results, time.monotonic() - began


def timed_speedup(record: dict) -> float | None:
    """The speedup, or for a timed candidate without one (a reference as candidate is rejected as
    PyTorch's own work) the reference's median over its own."""
    if record.get("speedup"):
        return record["speedup"]
    timing, paired = record.get("timing"), record.get("reference_paired_timing")
    if timing and paired:
        return statistics.median(ref / own for ref, own in zip(paired["samples_ms"], timing["samples_ms"]))
    reference = record.get("reference_recalibrated_timing") or record.get("reference_timing")
    return reference["median_ms"] / timing["median_ms"] if timing and reference else None


def main() -> None:
    out, extra = Path(sys.argv[1]), sys.argv[2:]
    candidates = out / "candidates"
    shutil.rmtree(candidates, ignore_errors=True)
    shutil.copytree(ROOT / "candidates", candidates)
    reference_candidates(ROOT / "problems", candidates)
    runs = [judged(candidates, out / f"run{index}", extra) for index in (1, 2)]
    lines = [f"run 1: {runs[0][1]:.0f} s, run 2: {runs[1][1]:.0f} s",
             f"{'candidate':45} {'status':>10} {'speedup 1':>10} {'speedup 2':>10} {'apart':>7} {'ref ms':>9}"]
    apart_by_size: dict[str, list[float]] = {"<5 us": [], "5-20 us": [], ">=20 us": []}
    for key, first in runs[0][0].items():
        second = runs[1][0].get(key, {})
        a, b = timed_speedup(first), timed_speedup(second)
        reference_ms = (first.get("reference_timing") or {}).get("median_ms")
        apart = abs(a - b) / min(a, b) * 100 if a and b else None
        if apart is not None and reference_ms is not None:
            size = "<5 us" if reference_ms < 0.005 else "5-20 us" if reference_ms < 0.02 else ">=20 us"
            apart_by_size[size].append(apart)
        lines.append(f"{key[:45]:45} {first['status']:>10} {a or 0:10.4f} {b or 0:10.4f} "
                     f"{'' if apart is None else f'{apart:6.2f}%':>7} {reference_ms or 0:9.4f}")
    for size, values in apart_by_size.items():
        if values:
            lines.append(f"{size}: {len(values)} candidates, apart median {statistics.median(values):.2f}%, "
                         f"most {max(values):.2f}%")
    refs = [s for run in runs for key, record in run[0].items()
            if key.endswith("/reference.py") and (s := timed_speedup(record))]
    if refs:
        lines.append(f"references as candidates: {len(refs)} speedups, farthest from 1: "
                     f"{max(abs(s - 1) for s in refs) * 100:.2f}%, median distance "
                     f"{statistics.median(abs(s - 1) for s in refs) * 100:.2f}%")
    (out / "repeat.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

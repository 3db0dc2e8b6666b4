"""What the sandbox costs: the same candidates judged with `--sandbox off` and `--sandbox auto`,
alternating, on one warm build cache; each candidate's verdict and median in both.

    python bench/sandbox_overhead.py [CANDIDATES] [--problems problems] [--rounds 2] [--out FILE]
                                     [-- extra eval arguments]

Prints, per candidate that reached timing, the ratio of its median under the sandbox to its
median without it (each the median over rounds), the run-to-run spread of each, and whether the
verdicts agree; writes them as JSON with --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def judge(candidates: Path, problems: Path, scratch: Path, name: str, mode: str, extra: list[str]) -> tuple[float, dict]:
    out = scratch / name
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "harness", "eval", str(candidates), "--problems", str(problems),
                    "--build-dir", str(scratch / "build"), "--db", str(scratch / f"{name}.db"), "--out", str(out),
                    "--sandbox", mode, *extra], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    wall = time.monotonic() - began
    return wall, {r["candidate"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def summarize(runs: dict[str, list[dict]], walls: dict[str, list[float]]) -> list[dict]:
    rows = []
    for name in sorted(runs["off"][0]):
        verdicts = {mode: {r[name]["status"] for r in runs[mode]} for mode in runs}
        medians = {mode: [r[name]["timing"]["median_ms"] for r in runs[mode] if r[name]["timing"]] for mode in runs}
        row = {"candidate": name, "verdicts_agree": len(verdicts["off"] | verdicts["auto"]) == 1,
               "verdict": sorted(verdicts["auto"]), "verdict_off": sorted(verdicts["off"]),
               "errors": sorted({r[name]["error"] or "" for mode in runs for r in runs[mode]} - {""})}
        if medians["off"] and medians["auto"]:
            off, auto = statistics.median(medians["off"]), statistics.median(medians["auto"])
            row.update(median_off_ms=off, median_auto_ms=auto, ratio=auto / off,
                       spread_off=max(medians["off"]) / min(medians["off"]),
                       spread_auto=max(medians["auto"]) / min(medians["auto"]))
        rows.append(row)
    return rows


def show(rows: list[dict], walls: dict[str, list[float]]) -> None:
    for row in rows:
        ratio = (f"{row['ratio']:.3f} (spread off {row['spread_off']:.3f}, auto {row['spread_auto']:.3f})"
                 if "ratio" in row else "-")
        print(f"{row['candidate']:50s} {','.join(row['verdict']):15s} agree={row['verdicts_agree']!s:5s} "
              f"sandboxed/off median {ratio}")
    print(f"wall per run: off {statistics.median(walls['off']):.1f} s, auto {statistics.median(walls['auto']):.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", type=Path, nargs="?", default=REPO / "candidates")
    parser.add_argument("--problems", type=Path, default=REPO / "problems")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON written after every run, so a cut-off bench keeps what it measured")
    parser.add_argument("extra", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = [a for a in args.extra if a != "--"]
    runs: dict[str, list[dict]] = {"off": [], "auto": []}
    walls: dict[str, list[float]] = {"off": [], "auto": []}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        scratch = Path(tmp)
        for mode in runs:  # fills the build cache: builds made under namespaces are kept apart
            judge(args.candidates, args.problems, scratch, f"warm-up-{mode}", mode, extra)
        for round_ in range(args.rounds):
            for mode in ("off", "auto") if round_ % 2 == 0 else ("auto", "off"):
                wall, results = judge(args.candidates, args.problems, scratch, f"{mode}{round_}", mode, extra)
                runs[mode].append(results)
                walls[mode].append(wall)
                if runs["off"] and runs["auto"]:
                    rows = summarize(runs, walls)
                    if args.out:
                        args.out.write_text(json.dumps({"rows": rows, "walls": walls}, indent=2))
    show(rows, walls)
    return 0


if __name__ == "__main__":
    sys.exit(main())

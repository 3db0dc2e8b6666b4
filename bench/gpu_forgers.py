"""How much a forged time gains on a GPU: the GPU timing tricks (tests/data/gpu_integrity) judged
several times, each forger's time as the parent's clock vouches for it against its honest twin's
(the same kernel, reporting honestly) in the same run.

    python bench/gpu_forgers.py [--rounds 4] [--out FILE] [-- extra eval arguments]

Prints per round and forger: its verdict, flags, calls per timed command, vouched median, and the
twin's vouched median over it (above 1: the forger gained that much); then the worst gain over
all rounds. Writes the rows as JSON with --out. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRICKS = REPO / "tests" / "data" / "gpu_integrity"
TWIN = "relu/honest_twin.py"
FORGERS = ("relu/forged_fast.py", "relu/forged_background.py", "relu/forged_spinning.py", "relu/deferred_work.py")


def judge(scratch: Path, extra: list[str]) -> dict[str, dict]:
    out = scratch / "out"
    subprocess.run([sys.executable, "-m", "harness", "eval", str(TRICKS), "--problems", str(REPO / "problems"),
                    "--device", "cuda", "--trials", "20", "--build-dir", str(scratch / "build"),
                    "--db", str(scratch / "h.db"), "--out", str(out), *extra],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    return {r["candidate"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def vouched_ms(result: dict) -> float | None:
    """The time a result's speedup is taken from: the parent's clock's, not the worker's."""
    reference = result.get("reference_recalibrated_timing") or result.get("reference_timing")
    if not reference or not result.get("speedup"):
        return None
    return round(reference["median_ms"] / result["speedup"], 4)


def row(round_: int, name: str, result: dict, twin: dict) -> dict:
    vouched, twin_vouched = vouched_ms(result), vouched_ms(twin)
    timing = result.get("timing") or {}
    return {"round": round_, "candidate": name, "status": result["status"], "flags": result.get("flags", []),
            "calls_per_command": timing.get("calls_per_sample"), "vouched_ms": vouched, "twin_vouched_ms": twin_vouched,
            "twin_flags": twin.get("flags", []), "timing_s": (result.get("phase_s") or {}).get("timing"),
            "gain": round(twin_vouched / vouched, 3) if vouched and twin_vouched and result["status"] == "ok" else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    rows = []
    for round_ in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory() as scratch:
            results = judge(Path(scratch), args.extra)
        for name in FORGERS:
            rows.append(row(round_, name, results[name], results[TWIN]))
            r = rows[-1]
            print(f"round {round_} {name:28} {r['status']:9} {','.join(r['flags']) or '-':40} "
                  f"x{r['calls_per_command']} {r['vouched_ms']} ms, twin {r['twin_vouched_ms']} ms "
                  f"({','.join(r['twin_flags']) or '-'}): gain {r['gain']}; timed in {r['timing_s']} s", flush=True)
    gains = [r["gain"] for r in rows if r["gain"] is not None]
    print(f"worst gain {max(gains, default=None)} over {len(gains)} timed forgeries; "
          f"rejected {sum(r['status'] == 'rejected' for r in rows)} of {len(rows)}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End-to-end speed of `harness eval`: cold vs warm build cache, 1 vs N GPUs, warm workers vs
not, adaptive vs fixed timing, the harness's own overhead per candidate, and KernelBench's flow
on the same candidates.

    python bench/scale.py [CANDIDATES] --out bench.json [--problems problems] [--kernelbench-flow]
                          [--kernelbench PATH] [--runs cold1,warm1,again1,cold1_nowarm,fixed1,warmN]
                          [--repeat K] [--scratch DIR]

Runs (each a real `python -m harness eval`, in order; the warm ones share one build cache):
  cold1         empty build cache, GPU 0 only (on CPU: the whole machine), adaptive timing
  warm1         the same again: every build from the cache
  again1        warm1 once more: the same kernels' medians, run to run
  cold1_nowarm  empty cache, no workers booted ahead (--warm-workers 0)
  fixed1        warm, 100 fixed timed calls (KernelBench's count): medians against adaptive's
  warmN         warm, all visible GPUs (same verdicts as warm1 is checked)
  coldN         empty cache, all visible GPUs
With --scratch, the build caches live there (not in a temporary folder), so a later invocation's
warm runs reuse an earlier one's builds (its cold runs empty theirs first). With --repeat K, each
candidate is evaluated K times (copies name_r0.py ... in <problem>/ folders, same code, so one
build each): enough work to keep every GPU busy when 1 vs N GPUs is the question, as a training
loop's batches would.
Then, with --kernelbench-flow, bench/kernelbench_flow.py on the same candidates and GPU.

Per run, `lanes` says when the first evaluation began (the start no lane shares: imports, the
first worker's boot, the first reference), how long from then to the last result, and each
lane's evaluation seconds; `lanes_warm1_over_warmN` is the lanes' own scaling, without that start.

The harness's overhead is the wall time beyond an ideal schedule of the unavoidable work: each
build as long as it took (at most --jobs at once, in submission order), and each model's device
time (its timed calls, its correctness trials, the reference's calls for the timed outputs the
harness verified) one after another on a GPU as soon as its build is done. Per candidate, the
overhead is its evaluation's wall time (`elapsed_s`) less that device time: process start,
sandbox, CUDA context, inputs, comparisons, profiling.
"""

from __future__ import annotations

import argparse
import datetime as dt
import heapq
import json
import os
import statistics
import subprocess
import sys
import shutil
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from harness.judge import gpu
from harness.judge.timing.measurement import CHECKED_PER_BATCH
from harness.judge.timing.protocol import EARLY_CALLS, VERIFY_EARLY, VERIFY_LATE

REPO = Path(__file__).resolve().parent.parent
WARMUP, PROFILED, SHAPES, RECALIBRATION = 3, 2, 1, 5  # calls beyond the timed ones (EvalConfig, judge/timing/,
# judge/reference.py: the recalibration's fewest calls, which slow references get)


def harness_run(candidates: Path, problems: Path, build: Path, scratch: Path, name: str, extra: list[str]) -> dict:
    """One `harness eval`; its cache home (where the precompiled torch header is kept, and the
    workers' bytecode where the install has none) goes with its build cache, so a cold run makes
    those too."""
    out = scratch / name
    shutil.rmtree(out, ignore_errors=True)  # a scratch folder kept from an earlier invocation
    for suffix in ("", "-wal", "-shm"):
        (scratch / f"{name}.db{suffix}").unlink(missing_ok=True)
    if name.startswith("cold"):
        for cache in (build, build.with_name(build.name + "_home")):
            shutil.rmtree(cache, ignore_errors=True)
    began, started_at = time.monotonic(), time.time()
    subprocess.run([sys.executable, "-m", "harness", "eval", str(candidates), "--problems", str(problems),
                    "--build-dir", str(build), "--db", str(scratch / f"{name}.db"), "--out", str(out), *extra],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
                   env=os.environ | {"XDG_CACHE_HOME": str(build.with_name(build.name + "_home"))})
    wall = time.monotonic() - began
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {"wall_s": round(wall, 3), "results": results, "started_at": started_at}


def lanes(results: list[dict], started_at: float) -> dict:
    """When the first evaluation in a worker began (seconds after the run started: the part of a
    run no lane shares), the seconds from then to the last result, and per lane (a GPU, or the
    CPU) its evaluations' seconds."""
    evaluated = [r for r in results if r.get("elapsed_s")]  # a compile error needs no worker: 0 s
    if not evaluated:
        return {}
    done = [dt.datetime.fromisoformat(r["recorded_at"]).timestamp() for r in evaluated]
    first = min(end - r["elapsed_s"] for end, r in zip(done, evaluated))
    busy: dict[str, float] = {}
    for r in evaluated:
        lane = "cpu" if r.get("gpu") is None else str(r["gpu"])
        busy[lane] = round(busy.get(lane, 0.0) + r["elapsed_s"], 3)
    return {"first_evaluation_s": round(first - started_at, 3), "span_s": round(max(done) - first, 3),
            "busy_s": busy}


def device_seconds(result: dict, correctness_trials: int) -> float:
    """The candidate's and its reference's device time for what the harness asked of them. Where
    quick calls were timed in batches (`calls_per_sample` a sample), every command is verified
    (`checked_calls` of its calls), one batch more primes the timing, the sizing ramp is about
    one more, and the reference is recalibrated in batches of as many calls."""
    timing, reference = result.get("timing"), result.get("reference_timing")
    total = 0.0
    if timing:
        n, batch = timing["n"], timing.get("calls_per_sample", 1)
        batched = batch if batch > 1 else 0
        total += sum(timing["samples_ms"]) * batch / 1000
        total += timing["median_ms"] * (correctness_trials + WARMUP + PROFILED + SHAPES + 2 * batched) / 1000
        if reference:
            device = "cpu" if result.get("gpu") is None else "cuda"
            checked = gpu.checked_calls(batch) if device == "cuda" else min(batch, CHECKED_PER_BATCH)
            verified = n * checked if batched else \
                VERIFY_EARLY * min(n, EARLY_CALLS) + VERIFY_LATE * max(0, n - EARLY_CALLS)
            total += reference["median_ms"] * (correctness_trials + RECALIBRATION * max(1, batch) + verified + SHAPES) / 1000
    elif reference and result.get("trials_passed"):
        total += reference["median_ms"] * result["trials_passed"] * 2 / 1000
    return total


def quantiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(ordered), "p50": round(statistics.median(ordered), 3), "p90": round(pick(0.9), 3),
            "max": round(ordered[-1], 3)}


def in_worker(results: list[dict]) -> dict[str, list[dict]]:
    """The evaluations run in a worker (they record phases), split by whether they reached timing.
    A verdict decided without a worker (a compile error: 0 s) is in neither: counted with the
    failures, it pulled their quantiles down (the median to 0 s where most failures were compile errors)."""
    ran = [r for r in results if r.get("phase_s")]
    return {"reached_timing": [r for r in ran if r.get("timing")],
            "failed_in_worker": [r for r in ran if not r.get("timing")]}


def overhead_per_candidate(results: list[dict], correctness_trials: int) -> dict:
    """The distribution of each evaluation's wall time beyond its device time, for candidates that
    reached timing and for those that failed in a worker before it."""
    return {group: quantiles([r["elapsed_s"] - device_seconds(r, correctness_trials) for r in rows])
            for group, rows in in_worker(results).items()}


def phase_medians(results: list[dict]) -> dict:
    """Where the evaluations' time went: per phase, the median wall seconds of the candidates
    that reached timing and of those that failed in a worker (over those that entered the phase)."""
    return {group: {phase: round(statistics.median(r["phase_s"][phase] for r in rows if phase in r["phase_s"]), 3)
                    for phase in dict.fromkeys(p for r in rows for p in r["phase_s"])}
            for group, rows in in_worker(results).items()}


def median_agreement(a: dict, b: dict) -> dict:
    """Per candidate timed in both summarized runs: the ratio of medians, and whether their 95%
    intervals overlap. Also `python bench/scale.py --compare A.json:run B.json:run`."""
    rows = {}
    for name, (x, x_low, x_high, x_n) in a["medians_ms"].items():
        if name in b["medians_ms"]:
            y, y_low, y_high, y_n = b["medians_ms"][name]
            rows[name] = {"ratio": round(y / x, 4), "n": [x_n, y_n], "intervals_overlap": x_low <= y_high and y_low <= x_high}
    changes = [abs(row["ratio"] - 1) for row in rows.values()]
    return {"candidates": rows, "median_abs_change_pct": round(100 * statistics.median(changes), 2) if changes else None,
            "within_1pct": sum(d <= 0.01 for d in changes), "overlapping": sum(row["intervals_overlap"] for row in rows.values())}


def ideal_wall_s(results: list[dict], jobs: int, gpus: int, correctness_trials: int) -> float:
    """Builds on `jobs` slots in order, then device work on `gpus` lanes as builds finish."""
    slots = [0.0] * jobs
    built_at: dict[str, float] = {}  # code hash -> when its build ended (identical code builds once)
    for result in results:
        if result.get("build_s") and not result.get("build_cached"):
            start = heapq.heappop(slots)
            heapq.heappush(slots, start + result["build_s"])
            built_at[result["code_hash"]] = start + result["build_s"]
    ready = [(built_at.get(r["code_hash"], 0.0) if r.get("build_s") is not None else 0.0,
              device_seconds(r, correctness_trials)) for r in results]
    lanes = [0.0] * gpus
    finish = 0.0
    for at, busy in sorted(ready):
        free = heapq.heappop(lanes)
        done = max(free, at) + busy
        heapq.heappush(lanes, done)
        finish = max(finish, done)
    return max(finish, max(slots))


def summarize(run: dict, jobs: int, gpus: int, correctness_trials: int) -> dict:
    results = [r for r in run["results"] if r["status"] != "skipped"]
    ideal = ideal_wall_s(results, jobs, gpus, correctness_trials)
    overhead = run["wall_s"] - ideal
    return {
        "wall_s": run["wall_s"], "candidates": len(results),
        "compile_s": round(sum(r.get("build_s") or 0 for r in results), 3),
        "longest_build_s": round(max((r.get("build_s") or 0 for r in results), default=0), 3),
        "device_s": round(sum(device_seconds(r, correctness_trials) for r in results), 3),
        "ideal_wall_s": round(ideal, 3), "overhead_s": round(overhead, 3),
        "overhead_pct": round(100 * overhead / run["wall_s"], 1) if run["wall_s"] else None,
        "overhead_per_candidate_s": round(overhead / len(results), 3) if results else None,
        "candidate_overhead_s": overhead_per_candidate(results, correctness_trials),
        "phase_s": phase_medians(results),
        "timed_calls": quantiles([r["timing"]["n"] for r in results if r.get("timing")]),
        "stopped": {why: sum(1 for r in results if (r.get("timing") or {}).get("stopped") == why)
                    for why in ("converged", "time_budget", "max_trials", "fixed")},
        "verdicts": {r["candidate"]: r["status"] for r in run["results"]},
        "medians_ms": {r["candidate"]: [r["timing"]["median_ms"], r["timing"]["ci_low_ms"], r["timing"]["ci_high_ms"],
                                        r["timing"]["n"]] for r in results if r.get("timing")},
        "per_candidate": {r["candidate"]: {"build_s": r.get("build_s"), "build_cached": r.get("build_cached"),
                                           "elapsed_s": r.get("elapsed_s"), "device_s": round(device_seconds(r, correctness_trials), 3),
                                           "phase_s": r.get("phase_s"), "timed_calls": (r.get("timing") or {}).get("n"),
                                           "gpu": r.get("gpu")} for r in results},
        "by_gpu": {str(g): sum(1 for r in results if r.get("gpu") == g) for g in {r.get("gpu") for r in results}},
        "lanes": lanes(results, run["started_at"]),
        # The parent's clock per timed call against the worker's median: what the timing bound allows.
        "timed_call_overhead_ms": {r["candidate"]: round(r["wall_ms_per_call"] - r["timing"]["median_ms"], 4)
                                   for r in results if r.get("wall_ms_per_call") and r.get("timing")},
    }


def load_run(spec: str) -> dict:
    """FILE:RUN: one summarized run from an earlier --out file."""
    path, run = spec.rsplit(":", 1)
    return json.loads(Path(path).read_text())["runs"][run]


def coarse(status: str) -> str:
    """Our verdicts in KernelBench's terms: compiled, and then correct or not."""
    if status in ("compile_error", "load_error"):
        return "not compiled"
    return "correct" if status == "ok" else "incorrect"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", type=Path, nargs="?", default=REPO / "candidates")
    parser.add_argument("--problems", type=Path, default=REPO / "problems")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", default="cold1,warm1,again1,cold1_nowarm,fixed1,warmN")
    parser.add_argument("--kernelbench-flow", action="store_true")
    parser.add_argument("--kernelbench", default=None, help="a KernelBench checkout for --kernelbench-flow")
    parser.add_argument("--repeat", type=int, default=1, help="evaluate each candidate this many times")
    parser.add_argument("--scratch", type=Path, default=None, help="keep build caches and results here")
    parser.add_argument("--compare", nargs=2, metavar="FILE:RUN", help="compare two runs' medians from earlier --out files")
    args = parser.parse_args()
    if args.repeat > 1 and args.kernelbench_flow:
        parser.error("--repeat and --kernelbench-flow: the flow would judge one copy against the harness's K")
    if args.compare:
        args.out.write_text(json.dumps(median_agreement(*map(load_run, args.compare)), indent=2))
        print(args.out.read_text())
        return 0

    import torch

    gpus = torch.cuda.device_count()
    from harness.schedule.plan import plan_resources

    jobs = plan_resources("cuda" if gpus else "cpu", [0] if gpus else None, None).jobs
    report: dict = {"gpus": gpus, "device": torch.cuda.get_device_name(0) if gpus else "cpu", "runs": {}}
    with nullcontext(str(args.scratch)) if args.scratch else tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        scratch = Path(tmp)
        scratch.mkdir(parents=True, exist_ok=True)
        candidates = repeated(args.candidates, args.repeat, scratch / f"candidates_x{args.repeat}") \
            if args.repeat > 1 else args.candidates
        report["repeat"] = args.repeat
        builds = {name: scratch / ("cache" if name.startswith(("warm", "again", "fixed")) or name == "cold1"
                                   else f"cache_{name}") for name in args.runs.split(",")}
        for name in args.runs.split(","):
            extra = ["--gpus", "0"] if "1" in name and gpus else []
            extra += ["--warm-workers", "0"] if name.endswith("nowarm") else []
            extra += ["--trials", "100"] if name.startswith("fixed") else []
            label = name if args.repeat == 1 else f"{name}_x{args.repeat}"
            run = harness_run(candidates, args.problems, builds[name], scratch, label, extra)
            report["runs"][name] = summarize(run, jobs, 1 if "1" in name else max(1, gpus), 5)
            print(f"{name}: {report['runs'][name]['wall_s']:.1f} s", file=sys.stderr)
            args.out.write_text(json.dumps(report, indent=2))  # a run cut short keeps what it measured
        if args.kernelbench_flow:
            flow_out = scratch / "flow.json"
            began = time.monotonic()
            subprocess.run([sys.executable, str(REPO / "bench" / "kernelbench_flow.py"), str(args.candidates),
                            "--problems", str(args.problems), "--out", str(flow_out),
                            *(["--kernelbench", args.kernelbench] if args.kernelbench else [])],
                           check=True, cwd=REPO, env=os.environ | {"CUDA_VISIBLE_DEVICES": visible_first()})
            flow = json.loads(flow_out.read_text())
            flow["bench_wall_s"] = round(time.monotonic() - began, 3)
            report["kernelbench_flow"] = flow
    runs = report["runs"]
    if "cold1" in runs and "warm1" in runs:
        report["warm_over_cold"] = round(runs["warm1"]["wall_s"] / runs["cold1"]["wall_s"], 3)
    if "warm1" in runs and "warmN" in runs:
        report["same_verdicts_1_vs_N"] = runs["warm1"]["verdicts"] == runs["warmN"]["verdicts"]
        report["warm1_over_warmN"] = round(runs["warm1"]["wall_s"] / runs["warmN"]["wall_s"], 3)
        if runs["warm1"]["lanes"] and runs["warmN"]["lanes"]:  # the lanes' own scaling, without the start
            report["lanes_warm1_over_warmN"] = round(runs["warm1"]["lanes"]["span_s"] / runs["warmN"]["lanes"]["span_s"], 3)
    for label, (a, b) in {"run_to_run": ("warm1", "again1"), "fixed_vs_adaptive": ("warm1", "fixed1"),
                          "warm_workers_vs_not": ("cold1", "cold1_nowarm")}.items():
        if a in runs and b in runs:
            report[label] = median_agreement(runs[a], runs[b])
    if "cold1" in runs and "cold1_nowarm" in runs:
        report["nowarm_over_warm_cold1"] = round(runs["cold1_nowarm"]["wall_s"] / runs["cold1"]["wall_s"], 3)
    if "kernelbench_flow" in report and "cold1" in runs:
        flow = report["kernelbench_flow"]
        report["kernelbench_over_harness_cold1"] = round(flow["wall_s"] / runs["cold1"]["wall_s"], 2)
        ours = {name: coarse(status) for name, status in runs["cold1"]["verdicts"].items() if name in flow["candidates"]}
        theirs = {name: "not compiled" if not row["compiled"] else "correct" if row["correct"] else "incorrect"
                  for name, row in flow["candidates"].items()}
        report["verdicts_differ_from_kernelbench_flow"] = {n: [ours.get(n), theirs[n]] for n in theirs
                                                           if ours.get(n) != theirs[n]}
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"} |
                     {"runs": {n: {k: v for k, v in r.items() if k != "verdicts"} for n, r in runs.items()}}, indent=2))
    return 0


def repeated(candidates: Path, times: int, into: Path) -> Path:
    """A copy of the candidates folder with each file `times` times (name_r0.py, ...). Only
    <problem>/<name> files: a KernelBench-named file's problem is in its name, which a suffix breaks."""
    if into.resolve() in (candidates.resolve(), *candidates.resolve().parents):
        sys.exit(f"bench: --repeat would replace {into}, which holds the candidates")
    if any(path.is_file() for path in candidates.iterdir()):
        sys.exit(f"bench: --repeat needs <problem>/<name> files; {candidates} has files at its top level")
    shutil.rmtree(into, ignore_errors=True)
    for source in candidates.rglob("*"):
        if source.is_file():
            target = into / source.relative_to(candidates)
            target.parent.mkdir(parents=True, exist_ok=True)
            for copy in range(times):
                shutil.copyfile(source, target.with_name(f"{source.stem}_r{copy}{source.suffix}"))
    return into


def visible_first() -> str:
    visible = [e for e in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
    return visible[0] if visible else "0"


if __name__ == "__main__":
    sys.exit(main())

"""Exports of a run's results: JSONL, CSV, and KernelBench's `eval_results.json` with fast_p."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from ..inputs.problems import KERNELBENCH_FILE
from ..records import Result, Status
from .summary import summarize_run

CSV_COLUMNS = ["problem", "candidate", "status", "speedup", "error", "flags", "phase", "kind", "max_abs_err",
               "max_rel_err", "median_ms", "iqr_ms", "reference_median_ms", "candidate_hash", "problem_hash"]
# Verdicts that got past building and importing, in KernelBench's sense of "compiled".
NOT_COMPILED = {Status.compile_error, Status.load_error}


def feedback(result: Result) -> dict:
    """What a generator needs back about one candidate, compactly: verdict, cause, hint, the key
    error lines, the error size and the speedup."""
    diagnosis = result.diagnosis
    return {
        "problem": result.problem, "candidate": result.candidate, "verdict": result.status.value,
        "reason": result.error, "cause": diagnosis.category if diagnosis else None,
        "summary": diagnosis.summary if diagnosis else None, "hint": diagnosis.hint if diagnosis else None,
        "key_lines": diagnosis.evidence[:3] if diagnosis else [], "max_abs_err": result.max_abs_err,
        "speedup": result.speedup,
    }


def to_feedback_jsonl(results: list[Result]) -> str:
    return "".join(json.dumps(feedback(r), separators=(",", ":")) + "\n" for r in results)


def to_jsonl(results: list[Result]) -> str:
    return "".join(r.model_dump_json() + "\n" for r in results)


def to_csv(results: list[Result]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for r in results:
        writer.writerow({
            "problem": r.problem, "candidate": r.candidate, "status": r.status.value, "speedup": r.speedup,
            "error": r.error, "flags": ";".join(r.flags), "phase": r.phase, "kind": r.kind.value if r.kind else None,
            "max_abs_err": r.max_abs_err, "max_rel_err": r.max_rel_err,
            "median_ms": r.timing.median_ms if r.timing else None, "iqr_ms": r.timing.iqr_ms if r.timing else None,
            "reference_median_ms": r.reference_timing.median_ms if r.reference_timing else None,
            "candidate_hash": r.candidate_hash, "problem_hash": r.problem_hash,
        })
    return buffer.getvalue()


def kernelbench_key(problem_id: str) -> str:
    match = KERNELBENCH_FILE.match(problem_id)
    return match.group(1) if match else problem_id


def to_kernelbench(results: list[Result], device_name: str) -> tuple[dict, dict]:
    """(eval_results, fast_p summary) in the shape of KernelBench's eval_from_generations output:
    problem id -> list of samples with compiled, correctness, metadata, runtime (ms), runtime_stats.
    Problems from a KernelBench level folder are keyed by their number; ours by their id."""
    eval_results: dict[str, list[dict]] = {}
    for r in sorted(results, key=lambda r: (r.problem or "", r.candidate)):
        if r.problem is None or r.status is Status.skipped:
            continue
        samples = eval_results.setdefault(kernelbench_key(r.problem), [])
        timing = r.timing
        samples.append({
            "sample_id": len(samples),
            "compiled": r.status not in NOT_COMPILED,
            "correctness": r.status is Status.ok,
            "metadata": {"candidate": r.candidate, "status": r.status.value, "error": r.error, "flags": r.flags,
                         "max_abs_err": r.max_abs_err, "hardware": device_name},
            "runtime": timing.mean_ms if timing else -1.0,
            "runtime_stats": {"mean": timing.mean_ms, "median": timing.median_ms, "min": timing.min_ms,
                              "max": timing.max_ms, "num_trials": timing.n, "hardware": device_name} if timing else {},
            "ref_runtime": r.reference_timing.mean_ms if r.reference_timing else -1.0,
        })
    summary = summarize_run([r for r in results if r.problem is not None])
    speeds = [r.speedup for r in results if r.status is Status.ok and r.speedup and math.isfinite(r.speedup)]
    fast_p = {"total": summary.total - summary.by_status["skipped"], "compiled_rate": summary.compiled_rate,
              "correct_rate": summary.correct_rate, "fast_p": summary.fast_p,
              "geomean_speedup": summary.geomean_speedup, "num_correct_with_speedup": len(speeds)}
    return eval_results, fast_p


def kernelbench_json(results: list[Result], device_name: str) -> tuple[str, str]:
    eval_results, fast_p = to_kernelbench(results, device_name)
    return json.dumps(eval_results, indent=2), json.dumps(fast_p, indent=2)


def write_export(fmt: str, results: list[Result], device_name: str, out: Path) -> Path:
    """Write `results` as jsonl or csv to the file `out`, or as KernelBench's two files into the directory `out`."""
    if fmt == "kernelbench":
        out.mkdir(parents=True, exist_ok=True)
        eval_results, fast_p = kernelbench_json(results, device_name)
        (out / "eval_results.json").write_text(eval_results)
        (out / "fast_p.json").write_text(fast_p)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(to_jsonl(results) if fmt == "jsonl" else to_csv(results))
    return out

"""Exports of a run's results: JSONL, CSV, and KernelBench's `eval_results.json` with fast_p; each
result with the model and sample its path names (`model_and_sample`), the figures also per model."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from pathlib import Path

from ..inputs.candidates import KERNELBENCH_NAME
from ..inputs.problems import KERNELBENCH_FILE
from ..records import Result, Status
from .summary import (
    UNNAMED,
    model_and_sample,
    model_figures,
    natural_key,
    summarize_run,
)

CSV_COLUMNS = ["problem", "candidate", "model", "sample", "status", "speedup", "error", "cause", "flags", "phase", "kind",
               "max_abs_err", "max_rel_err", "median_ms", "iqr_ms", "reference_median_ms", "candidate_hash", "problem_hash"]
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


def inferred(result: Result, pattern: re.Pattern | None = None) -> dict:
    """{"model", "sample"}: the model as the model table names it, the sample index its path names (None: none)."""
    model, sample = model_and_sample(result.candidate, result.problem, pattern)
    return {"model": model or UNNAMED, "sample": sample}


def to_jsonl(results: list[Result], pattern: re.Pattern | None = None) -> str:
    """results.jsonl's lines, each with its "model" and "sample" (fields a Result read back ignores)."""
    return "".join(json.dumps(json.loads(r.model_dump_json()) | inferred(r, pattern), separators=(",", ":")) + "\n"
                   for r in results)


def to_csv(results: list[Result], pattern: re.Pattern | None = None) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for r in results:
        writer.writerow({
            "problem": r.problem, "candidate": r.candidate, **inferred(r, pattern), "status": r.status.value, "speedup": r.speedup,
            "error": r.error, "cause": r.diagnosis.category if r.diagnosis else None,
            "flags": ";".join(r.flags), "phase": r.phase.value if r.phase else None, "kind": r.kind.value if r.kind else None,
            "max_abs_err": r.max_abs_err, "max_rel_err": r.max_rel_err,
            "median_ms": r.timing.median_ms if r.timing else None, "iqr_ms": r.timing.iqr_ms if r.timing else None,
            "reference_median_ms": r.speedup_reference_timing.median_ms if r.speedup_reference_timing else None,
            "candidate_hash": r.candidate_hash, "problem_hash": r.problem_hash,
        })
    return buffer.getvalue()


class ExportError(Exception):
    """Results that cannot be written in the asked format without losing some: the message names them."""


def kernelbench_place(result: Result, levels: dict[str, int | None]) -> tuple[str, str]:
    """(directory, key) of a result in KernelBench's layout: one eval_results.json per level, keyed by
    the problem's number within that level (level_1/ "3"); problems from no level folder are
    keyed by their id in the top directory."""
    level = levels.get(result.problem or "")
    match = KERNELBENCH_FILE.match(result.problem or "")
    if level is None or match is None:
        return ".", result.problem or ""
    return f"level_{level}", str(int(match.group(1)))


def sample_ids(results: list[Result]) -> dict[str, int]:
    """Each candidate's sample id within its problem: KernelBench's own (…_sample_S_kernel.py) where
    the file is named so, the next free ids in natural order for the others."""
    named = {r.candidate: int(m.group(3)) for r in results if (m := KERNELBENCH_NAME.match(r.candidate.rsplit("/", 1)[-1]))}
    ids, taken = dict(named), set(named.values())
    free = (i for i in range(len(results) + len(taken) + 1) if i not in taken)
    for r in sorted(results, key=lambda r: natural_key(r.candidate)):
        if r.candidate not in ids:
            ids[r.candidate] = next(free)
    return ids


def kernelbench_sample(r: Result, sample_id: int, device_name: str, pattern: re.Pattern | None = None) -> dict:
    """One sample as KernelBench writes it; its metadata (free-form there) also names the model and
    the sample index the path gives, beside KernelBench's own sample_id."""
    timing = r.timing
    return {
        "sample_id": sample_id,
        "compiled": r.status not in NOT_COMPILED,
        "correctness": r.status is Status.ok,
        "metadata": {"problem": r.problem, "candidate": r.candidate, **inferred(r, pattern), "status": r.status.value, "error": r.error,
                     "cause": r.diagnosis.category if r.diagnosis else None, "flags": list(r.flags),
                     "max_abs_err": r.max_abs_err, "hardware": device_name},
        "runtime": timing.mean_ms if timing else -1.0,
        "runtime_stats": {"mean": timing.mean_ms, "median": timing.median_ms, "min": timing.min_ms, "max": timing.max_ms,
                          "num_trials": timing.calls, "hardware": device_name} if timing else {},
        "ref_runtime": r.speedup_reference_timing.mean_ms if r.speedup_reference_timing else -1.0,
    }


def to_kernelbench(results: list[Result], device_name: str, levels: dict[str, int | None],
                   pattern: re.Pattern | None = None) -> tuple[dict[str, tuple[dict, dict]], int]:
    """KernelBench's eval_from_generations output, per directory: ({dir: (eval_results, fast_p)},
    skipped count). eval_results maps the problem's key to its samples, each with sample_id, compiled,
    correctness, metadata, runtime (ms) and runtime_stats; fast_p its figures, also per model. Two
    problems that land on one key are refused (ExportError), never merged, and so are two files
    that name one sample of a problem (KernelBench's readers keep one sample per id: a run of two
    models goes a model at a time); skipped candidates have no KernelBench equivalent."""
    judged = [r for r in results if r.problem is not None and r.status is not Status.skipped]
    by_place: dict[tuple[str, str], dict[str, list[Result]]] = {}
    for r in judged:
        by_place.setdefault(kernelbench_place(r, levels), {}).setdefault(r.problem, []).append(r)
    collisions = [f"{directory}/{key}: {', '.join(sorted(problems))}"
                  for (directory, key), problems in by_place.items() if len(problems) > 1]
    if collisions:
        raise ExportError("problems that share a KernelBench level and number: " + "; ".join(collisions)
                          + "; export these problems in separate runs")
    ids = {place: sample_ids(rows) for place, problems in by_place.items() for rows in problems.values()}
    shared = [f"{directory}/{key} sample {sample_id}: {', '.join(sorted(c for c, i in of_place.items() if i == sample_id))}"
              for (directory, key), of_place in ids.items()
              for sample_id, count in sorted(Counter(of_place.values()).items()) if count > 1]
    if shared:  # KernelBench's readers take one sample per id: "Multiple entries for sample_id = 0"
        raise ExportError("files that name one KernelBench sample of one problem (sample_S in two folders, a model "
                          "each?): " + "; ".join(shared) + "; export one model at a time (--model)")
    files: dict[str, tuple[dict, dict]] = {}
    for directory in sorted({d for d, _ in by_place}):
        places = sorted((key for d, key in by_place if d == directory), key=natural_key)
        eval_results, mine = {}, []
        for key in places:
            (rows,) = by_place[(directory, key)].values()
            ids_here = ids[(directory, key)]
            eval_results[key] = sorted((kernelbench_sample(r, ids_here[r.candidate], device_name, pattern) for r in rows),
                                       key=lambda sample: sample["sample_id"])
            mine += rows
        files[directory] = (eval_results, fast_p_summary(mine, pattern))
    return files, sum(r.status is Status.skipped for r in results)


def fast_p_summary(results: list[Result], pattern: re.Pattern | None = None) -> dict:
    """fast_p.json: the figures of the results, and per model as summary.json has them (none where no path names a model)."""
    summary = summarize_run(results)
    speeds = [r.speedup for r in results if r.status is Status.ok and r.speedup is not None and 0 < r.speedup < math.inf]
    return {"total": summary.total, "compiled_rate": summary.compiled_rate, "correct_rate": summary.correct_rate,
            "fast_p": summary.fast_p, "geomean_speedup": summary.geomean_speedup, "num_correct_with_speedup": len(speeds),
            "models": model_figures(results, pattern)}


def write_export(fmt: str, results: list[Result], device_name: str, out: Path,
                 levels: dict[str, int | None] | None = None, pattern: re.Pattern | None = None) -> str:
    """Write `results` as jsonl or csv to the file `out`, or as KernelBench's eval_results.json and
    fast_p.json per level into the directory `out`; returns what was written, in a line or two."""
    if fmt != "kernelbench":
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(to_jsonl(results, pattern) if fmt == "jsonl" else to_csv(results, pattern))
        return str(out)
    files, skipped = to_kernelbench(results, device_name, levels or {}, pattern)
    written = []
    for directory, (eval_results, fast_p) in files.items():
        (out / directory).mkdir(parents=True, exist_ok=True)
        (out / directory / "eval_results.json").write_text(json.dumps(eval_results, indent=2))
        (out / directory / "fast_p.json").write_text(json.dumps(fast_p, indent=2))
        written.append(str(out / directory / "eval_results.json"))
    note = f"\n{skipped} skipped candidate(s) left out: KernelBench has no such verdict (see results.jsonl)" if skipped else ""
    return "\n".join(written) + note

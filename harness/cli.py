"""Command line: `python -m harness eval|list|report`."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import secrets
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from .build import default_build_root
from .candidates import discover_candidates
from .evaluate import early_verdict, evaluate_problem
from .machine import describe_machine
from .problems import ProblemError, discover_problems
from .records import Candidate, EvalConfig, Problem, Result, RunInfo
from .report import render_index
from .score import summarize
from .store import ResultStore

MAX_SUMMARY_ROWS = 60
EXIT_USAGE = 2


class UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Evaluate LLM-written kernels against PyTorch references.")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="evaluate candidates and write results.jsonl and index.html")
    ev.add_argument("candidates", type=Path, help="candidates dir: <problem_id>/<name>.{py,txt,md} or KernelBench flat files")
    ev.add_argument("--problems", type=Path, default=Path("problems"), help="problems dir, ours or a KernelBench level folder")
    ev.add_argument("--out", type=Path, default=None, help="output dir (default reports/<run-id>/)")
    ev.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    ev.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32")
    ev.add_argument("--baseline", choices=["eager", "compile"], default="eager", help="time the reference eagerly or with torch.compile")
    ev.add_argument("--correctness-trials", type=int, default=5)
    ev.add_argument("--warmup", type=int, default=3)
    ev.add_argument("--trials", type=int, default=100, help="timed calls per model")
    ev.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per run phase (each trial, the timing)")
    ev.add_argument("--build-timeout", type=float, default=900.0, help="seconds allowed to import and build a candidate")
    ev.add_argument("--atol", type=float, default=None, help="override every problem's absolute tolerance")
    ev.add_argument("--rtol", type=float, default=None, help="override every problem's relative tolerance")
    ev.add_argument("--seed", type=int, default=42)
    ev.add_argument("--problem", action="append", default=None, help="only this problem id (repeatable)")
    ev.add_argument("--build-dir", type=Path, default=None, help=f"extension build cache (default {default_build_root()})")

    ls = sub.add_parser("list", help="list problems and the candidates found for each")
    ls.add_argument("candidates", type=Path, nargs="?", default=None)
    ls.add_argument("--problems", type=Path, default=Path("problems"))

    rep = sub.add_parser("report", help="re-render index.html from a run's results.jsonl")
    rep.add_argument("run_dir", type=Path)
    return parser


def _config(args: argparse.Namespace) -> EvalConfig:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but torch sees no CUDA device here")
    try:
        return EvalConfig(device=device, precision=args.precision, baseline=args.baseline,
                          correctness_trials=args.correctness_trials, warmup=args.warmup, trials=args.trials,
                          timeout_s=args.timeout, build_timeout_s=args.build_timeout, seed=args.seed, atol=args.atol, rtol=args.rtol)
    except ValueError as exc:
        raise UsageError(str(exc).splitlines()[-1]) from None


def _discover(problems_dir: Path, candidates_dir: Path | None) -> tuple[list[Problem], list[Candidate]]:
    try:
        problems = discover_problems(problems_dir)
    except ProblemError as exc:
        raise UsageError(str(exc)) from None
    if candidates_dir is None:
        return problems, []
    if not candidates_dir.is_dir():
        raise UsageError(f"candidates directory {candidates_dir} does not exist")
    return problems, discover_candidates(candidates_dir, problems)


def _format_speedup(result: Result) -> str:
    if result.speedup is None:
        return "-"
    return f"{result.speedup:.2f}x" if math.isfinite(result.speedup) else "inf"


def summary_table(results: list[Result]) -> str:
    rows = [("problem", "candidate", "status", "speedup", "reason")]
    for r in sorted(results, key=lambda r: (r.problem or "", r.candidate))[:MAX_SUMMARY_ROWS]:
        rows.append((r.problem or "-", r.candidate, r.status.value, _format_speedup(r), (r.error or "")[:90]))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4] for row in rows]
    if len(results) > MAX_SUMMARY_ROWS:
        lines.append(f"... {len(results) - MAX_SUMMARY_ROWS} more in results.jsonl")
    summary = summarize(results)
    counts = ", ".join(f"{k} {v}" for k, v in summary.by_status.items() if v)
    lines.append(f"\n{summary.total} candidates: {counts}")
    return "\n".join(lines)


def cmd_eval(args: argparse.Namespace) -> int:
    config = _config(args)
    problems, candidates = _discover(args.problems, args.candidates)
    if args.problem:
        unknown = set(args.problem) - {p.id for p in problems}
        if unknown:
            raise UsageError(f"unknown problem id(s): {', '.join(sorted(unknown))}")
        problems = [p for p in problems if p.id in args.problem]
        candidates = [c for c in candidates if c.problem_id in args.problem]
    run_id = dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
    out_dir = args.out or Path("reports") / run_id
    store = ResultStore(out_dir)
    run = RunInfo(run_id=run_id, started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  machine=describe_machine(config.device), config=config,
                  problems_dir=str(args.problems.resolve()), candidates_dir=str(args.candidates.resolve()))
    store.write_run(run)
    results: list[Result] = []
    build_root = args.build_dir or default_build_root()
    by_problem = {p.id: [c for c in candidates if c.problem_id == p.id] for p in problems}
    orphans = [c for c in candidates if c.problem_id is None]

    with tqdm(total=len(candidates), unit="cand", desc="eval", file=sys.stderr) as bar:
        def record(result: Result) -> None:
            store.append(result)
            results.append(result)
            bar.set_postfix_str(f"{result.candidate}: {result.status.value}", refresh=False)
            bar.update(1)

        for problem in problems:
            if by_problem[problem.id]:
                evaluate_problem(problem, by_problem[problem.id], config, build_root, run_id, record)
        for orphan in orphans:  # a problem-less candidate still gets its verdict (skipped, with why)
            record(early_verdict(orphan, config, run_id))

    run.finished_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    store.write_run(run)
    index = render_index(run, results, out_dir)
    print(summary_table(results))
    print(f"results: {store.results_path}\nreport:  {index}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    problems, candidates = _discover(args.problems, args.candidates)
    for problem in problems:
        mine = [c for c in candidates if c.problem_id == problem.id]
        print(f"{problem.id:40s} {len(mine):3d} candidate(s)  {problem.path}")
        for c in mine:
            print(f"    {c.rel_path}  [{c.kind.value}]" + (f"  (no code: {c.extraction_error})" if c.code is None else ""))
    for c in candidates:
        if c.problem_id is None:
            print(f"(no problem) {c.rel_path}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    store = ResultStore(args.run_dir)
    results = store.read_results()
    if not results:
        raise UsageError(f"no results in {store.results_path}")
    print(render_index(store.read_run(), results, args.run_dir))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"eval": cmd_eval, "list": cmd_list, "report": cmd_report}
    try:
        return commands[args.command](args)
    except UsageError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

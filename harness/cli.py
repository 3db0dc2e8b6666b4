"""Command line: `python -m harness eval|list|report`."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import math
import secrets
import signal
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from .build import default_build_root
from .candidates import KERNELBENCH_NAME, discover_candidates, read_candidate
from .degenerate import check_problem
from .export import kernelbench_json, to_csv, to_feedback_jsonl, to_jsonl
from .machine import describe_machine
from .pipeline import RunScale, open_pipeline
from .problems import ProblemError, discover_problems
from .records import Candidate, EvalConfig, Problem, Result, RunInfo, Status
from .report import compare_runs, render_compare, render_site
from .score import summarize
from .store import DEFAULT_DB, Database, ResultsFile, StoreError, config_key, files_state, now

MAX_SUMMARY_ROWS = 60
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


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
    ev.add_argument("--strict-shapes", action="store_true",
                    help="a candidate correct only at the problem's own sizes is a mismatch, not just flagged")
    ev.add_argument("--problem", action="append", default=None, help="only this problem id (repeatable)")
    ev.add_argument("--build-dir", type=Path, default=None,
                    help=f"build cache, safe to share between runs (default {default_build_root()})")
    ev.add_argument("--jobs", "-j", type=int, default=None,
                    help="builds at once (default: every core, less a few kept for each GPU's evaluation)")
    ev.add_argument("--gpus", default=None, help="GPUs to evaluate on, one worker each, e.g. 0,2 (default: all visible)")
    ev.add_argument("--backend", choices=["local", "ray"], default="local",
                    help="ray: builds and evaluations as tasks on a Ray cluster (pip install 'harness[ray]')")
    ev.add_argument("--ray-address", default=None, help="the Ray cluster to join (default: start a local instance)")
    ev.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite results database (default %(default)s)")
    ev.add_argument("--feedback", type=Path, default=None, metavar="FILE",
                    help="also write one compact JSON line per candidate (verdict, cause, hint, key lines) for a generator")
    ev.add_argument("--resume", nargs="?", const="latest", default=None, metavar="RUN_ID",
                    help="continue a run (default: the latest with this configuration and device), skipping what it judged")

    ls = sub.add_parser("list", help="list problems and the candidates found for each")
    ls.add_argument("candidates", type=Path, nargs="?", default=None)
    ls.add_argument("--problems", type=Path, default=Path("problems"))

    rep = sub.add_parser("report", help="render a run from the database as a static site")
    rep.add_argument("--db", type=Path, default=DEFAULT_DB)
    rep.add_argument("--run", default=None, help="run id (default: the latest)")
    rep.add_argument("--out", type=Path, default=None, help="site dir (default: the run's output dir)")

    chk = sub.add_parser("check", help="flag reference problems a trivial output could pass (zeros, constants)")
    chk.add_argument("problems", type=Path, nargs="?", default=Path("problems"))
    chk.add_argument("--device", choices=["cpu", "cuda"], default=None)
    chk.add_argument("--small", action="store_true", help="run at reduced input sizes (quick, e.g. on a CPU)")
    chk.add_argument("--json", type=Path, default=None, help="also write the findings as JSON lines")

    exp_ = sub.add_parser("explain", help="why a candidate failed and how to fix it (evaluates it if never judged)")
    exp_.add_argument("path", type=Path, help="a candidate file, under <candidates>/<problem_id>/ or KernelBench-named")
    exp_.add_argument("--problems", type=Path, default=Path("problems"))
    exp_.add_argument("--db", type=Path, default=DEFAULT_DB)
    exp_.add_argument("--device", choices=["cpu", "cuda"], default=None)

    cmp = sub.add_parser("compare", help="what got faster, slower, fixed or broken between two runs")
    cmp.add_argument("run_a")
    cmp.add_argument("run_b")
    cmp.add_argument("--db", type=Path, default=DEFAULT_DB)
    cmp.add_argument("--out", type=Path, default=None, help="also write the comparison page here")

    exp = sub.add_parser("export", help="write a run's results as jsonl, csv or KernelBench eval_results.json")
    exp.add_argument("--db", type=Path, default=DEFAULT_DB)
    exp.add_argument("--run", default=None, help="run id (default: the latest)")
    exp.add_argument("--format", choices=["jsonl", "csv", "kernelbench"], required=True)
    exp.add_argument("--out", type=Path, required=True, help="file (a directory for kernelbench)")
    return parser


def _config(args: argparse.Namespace) -> EvalConfig:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but torch sees no CUDA device here")
    try:
        return EvalConfig(device=device, precision=args.precision, baseline=args.baseline,
                          correctness_trials=args.correctness_trials, warmup=args.warmup, trials=args.trials,
                          timeout_s=args.timeout, build_timeout_s=args.build_timeout, seed=args.seed,
                          strict_shapes=args.strict_shapes, atol=args.atol, rtol=args.rtol)
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


def _format_speedup_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" if math.isfinite(value) else "inf"


def _format_speedup(result: Result) -> str:
    return _format_speedup_value(result.speedup)


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
    built = [r for r in results if r.build_s is not None]
    if built:
        cached = sum(r.build_cached for r in built)
        lines.append(f"builds ahead of evaluation: {len(built) - cached} compiled ({sum(r.build_s for r in built):.0f} s "
                     f"of compiling), {cached} from the build cache")
    return "\n".join(lines)


def _open_db(path: Path) -> Database:
    try:
        return Database(path)
    except (StoreError, OSError) as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # sqlite3.DatabaseError: not a database at all
        raise UsageError(f"{path}: {exc}") from None


def _select(args: argparse.Namespace, problems: list[Problem], candidates: list[Candidate]):
    if not args.problem:
        return problems, candidates
    unknown = set(args.problem) - {p.id for p in problems}
    if unknown:
        raise UsageError(f"unknown problem id(s): {', '.join(sorted(unknown))}")
    return [p for p in problems if p.id in args.problem], [c for c in candidates if c.problem_id in args.problem]


def _start_run(args: argparse.Namespace, db: Database, config: EvalConfig) -> tuple[RunInfo, Path, set]:
    """A new run, or the one --resume names, with what it already judged."""
    machine = describe_machine(config.device)
    key = config_key(config, machine.device_name)
    if args.resume is None:
        run_id = dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        run = RunInfo(run_id=run_id, started_at=now(), machine=machine, config=config,
                      problems_dir=str(args.problems.resolve()), candidates_dir=str(args.candidates.resolve()))
        return run, args.out or Path("reports") / run_id, set()
    run_id = db.latest_run_id(key) if args.resume == "latest" else args.resume
    if run_id is None:
        raise UsageError("nothing to resume: no run with this configuration on this device in " + str(db.path))
    try:
        run, out_dir = db.run(run_id)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    if config_key(run.config, run.machine.device_name) != key:
        raise UsageError(f"run {run_id} used another configuration or device; resume it with the same options")
    return run, args.out or out_dir, db.done(run_id)


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # unwinds through the workers' context managers, which kill them


def cmd_eval(args: argparse.Namespace) -> int:
    config = _config(args)
    scale = _scale(args, config)
    problems, candidates = _select(args, *_discover(args.problems, args.candidates))
    with _open_db(args.db) as db:
        run, out_dir, done = _start_run(args, db, config)
        problems_by_id = {p.id: p for p in problems}
        todo = [c for c in candidates
                if ((problems_by_id[c.problem_id].source_hash if c.problem_id else None), c.source_hash) not in done]
        if args.resume:
            print(f"resuming run {run.run_id}: {len(candidates) - len(todo)} judged already, {len(todo)} to go",
                  file=sys.stderr)
        db.save_run(run, out_dir)
        results_file = ResultsFile(out_dir)
        by_path = {c.rel_path: c for c in todo}
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            _evaluate(todo, problems, config, args.build_dir or default_build_root(), run.run_id,
                      lambda result: (db.record(result, problems_by_id.get(result.problem or ""),
                                                by_path[result.candidate]), results_file.append(result)),
                      watched=[args.db, args.db.with_name(args.db.name + "-wal"), results_file.path], scale=scale)
        except KeyboardInterrupt:
            print(f"\ninterrupted; what was judged is kept. Continue with: --resume {run.run_id}", file=sys.stderr)
            return EXIT_INTERRUPTED
        finally:
            signal.signal(signal.SIGTERM, previous)
        run.finished_at = now()
        db.save_run(run, out_dir)
        results = db.results(run.run_id)
        results_file.rewrite(results)
        (out_dir / "run.json").write_text(run.model_dump_json(indent=2))
        if args.feedback:
            args.feedback.write_text(to_feedback_jsonl(results))
        index = render_site(run, results, lambda r: db.code(r.candidate_hash), out_dir)
    print(summary_table(results))
    print(f"results: {results_file.path}\nreport:  {index}\ndatabase: {args.db} (run {run.run_id})")
    return 0


def _scale(args: argparse.Namespace, config: EvalConfig) -> RunScale:
    gpus = None
    if args.gpus is not None:
        if args.backend == "ray":
            raise UsageError("--gpus is for local runs; on Ray each evaluation task gets the GPU Ray assigns it")
        if config.device != "cuda":
            raise UsageError("--gpus needs a CUDA run")
        try:
            gpus = [int(part) for part in args.gpus.split(",") if part.strip()]
        except ValueError:
            raise UsageError(f"--gpus takes GPU indices like 0,2, not {args.gpus!r}") from None
        count = torch.cuda.device_count()
        if not gpus or len(set(gpus)) != len(gpus) or any(not 0 <= g < count for g in gpus):
            raise UsageError(f"--gpus {args.gpus}: this machine has GPUs 0..{count - 1}, each named once")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.backend == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError("--backend ray needs Ray: pip install 'harness[ray]'")
    return RunScale(jobs=args.jobs, gpus=gpus, backend=args.backend, ray_address=args.ray_address)


def _evaluate(candidates: list[Candidate], problems: list[Problem], config: EvalConfig, build_root: Path,
              run_id: str, save, watched: list[Path] = (), scale: RunScale = RunScale()) -> None:
    """Evaluate and `save` each result as it comes. Only the harness writes the results between
    two saves: a change means a candidate whose code ran meanwhile (in a build or an evaluation,
    on any GPU) wrote to them. Those candidates are rejected, and this session's results are
    written back (see docs/threat-model.md)."""
    last_state = files_state(list(watched))
    recorded: list[Result] = []
    suspects: set[str] = set()
    with open_pipeline(problems, candidates, config, build_root, run_id, scale) as pipeline, \
            tqdm(total=len(candidates), unit="cand", desc="eval", file=sys.stderr) as bar:
        for result in pipeline.results():
            ran = pipeline.active.drain() | {result.candidate}
            if files_state(list(watched)) != last_state:
                suspects |= ran
                print(f"warning: the results changed while {', '.join(sorted(ran))} ran; rewriting this run's results",
                      file=sys.stderr)
                for earlier in recorded:
                    save(earlier)
            if result.candidate in suspects:
                result.status, result.speedup = Status.rejected, None
                result.error = "the results database or results.jsonl changed while this candidate ran"
                result.flags.append("tampered_results")
            result.recorded_at = now()
            save(result)
            recorded.append(result)
            last_state = files_state(list(watched))
            bar.set_postfix_str(f"built {pipeline.builds_done}/{pipeline.builds_total}; "
                                f"{result.candidate}: {result.status.value}", refresh=False)
            bar.update(1)


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


def _run_results(db: Database, run_id: str | None) -> tuple[RunInfo, Path, list[Result]]:
    run_id = run_id or db.latest_run_id()
    if run_id is None:
        raise UsageError(f"no runs in {db.path}")
    try:
        run, out_dir = db.run(run_id)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    return run, out_dir, db.results(run_id)


def cmd_report(args: argparse.Namespace) -> int:
    with _open_db(args.db) as db:
        run, out_dir, results = _run_results(db, args.run)
        print(render_site(run, results, lambda r: db.code(r.candidate_hash), args.out or out_dir))
    return 0


def explanation(result: Result) -> str:
    lines = [f"{result.candidate} ({result.problem}): {result.status.value}"
             + (f", {_format_speedup_value(result.speedup)}" if result.speedup is not None else "")]
    if result.error:
        lines.append(f"  reason: {result.error}")
    if result.diagnosis:
        d = result.diagnosis
        lines += [f"  cause:  {d.category}: {d.summary}", f"  hint:   {d.hint}"]
        lines += [f"  | {line}" for line in d.evidence]
        if d.other_causes:
            lines.append(f"  also:   {', '.join(d.other_causes)}")
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace) -> int:
    problems = _discover(args.problems, None)[0]
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but torch sees no CUDA device here")
    config = EvalConfig(device=device)
    findings = []
    for problem in tqdm(problems, unit="problem", desc="check", file=sys.stderr):
        findings.append(check_problem(problem, config, default_build_root(), args.small))
    for finding in findings:
        verdict = ", ".join(finding.flags) or "ok"
        detail = finding.error or "; ".join(finding.notes)
        print(f"{finding.problem:32s} {verdict:40s} {detail}")
    if args.json:
        args.json.write_text("".join(f.model_dump_json() + "\n" for f in findings))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    path = args.path.resolve()
    if not path.is_file():
        raise UsageError(f"{args.path} is not a file")
    source_hash = read_candidate(path, path.name, None).source_hash
    with _open_db(args.db) as db:
        result = db.latest_result(source_hash)
    if result is None:  # never judged: evaluate just this file, in its own run
        root = path.parent if KERNELBENCH_NAME.match(path.name) else path.parent.parent
        problems, candidates = _discover(args.problems, root)
        mine = [c for c in candidates if Path(c.path) == path]
        if not mine or mine[0].problem_id is None:
            raise UsageError(f"{args.path} names no problem in {args.problems}")
        problems = [p for p in problems if p.id == mine[0].problem_id]
        eval_args = build_parser().parse_args(["eval", str(root), "--problems", str(args.problems), "--db", str(args.db),
                                               "--problem", mine[0].problem_id]
                                              + (["--device", args.device] if args.device else []))
        config = _config(eval_args)
        with _open_db(args.db) as db:
            run, out_dir, _ = _start_run(eval_args, db, config)
            db.save_run(run, out_dir)
            _evaluate(mine, problems, config, default_build_root(), run.run_id,
                      lambda r: db.record(r, problems[0], mine[0]))
            run.finished_at = now()
            db.save_run(run, out_dir)
            result = db.latest_result(source_hash)
    print(explanation(result))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    with _open_db(args.db) as db:
        before = _run_results(db, args.run_a)[2]
        after = _run_results(db, args.run_b)[2]
    changes = compare_runs(before, after)
    for change in changes:
        if change.change != "same":
            print(f"{change.change:7s} {change.problem or '-'}  {change.candidate}  "
                  f"{change.before or '-'} -> {change.after or '-'}  "
                  f"{_format_speedup_value(change.before_speedup)} -> {_format_speedup_value(change.after_speedup)}")
    counts = {kind: sum(1 for c in changes if c.change == kind) for kind in dict.fromkeys(c.change for c in changes)}
    print(", ".join(f"{kind} {n}" for kind, n in counts.items()) or "no results")
    if args.out:
        print(render_compare(args.run_a, args.run_b, changes, args.out / f"compare-{args.run_a}-{args.run_b}.html"))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _open_db(args.db) as db:
        run, _, results = _run_results(db, args.run)
    if args.format == "kernelbench":
        args.out.mkdir(parents=True, exist_ok=True)
        eval_results, fast_p = kernelbench_json(results, run.machine.device_name)
        (args.out / "eval_results.json").write_text(eval_results)
        (args.out / "fast_p.json").write_text(fast_p)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(to_jsonl(results) if args.format == "jsonl" else to_csv(results))
    print(args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"eval": cmd_eval, "list": cmd_list, "report": cmd_report, "compare": cmd_compare,
                "export": cmd_export, "explain": cmd_explain, "check": cmd_check}
    try:
        return commands[args.command](args)
    except UsageError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

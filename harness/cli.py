"""Command line: argument parsing and dispatch. The work is done in run.py, problem_check.py and present/."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import torch

from .builds.cache import default_build_root
from .present.compare import compare_runs, describe_changes, render_compare
from .present.export import write_export
from .present.site import render_site
from .present.summary import explanation, listing, summary_table
from .problem_check import check_problems, describe_findings
from .records import EvalConfig, HostEnv, Limits, SandboxMode
from .run import (EvalOptions, Interrupted, RunSetup, StoreFailed, UsageError, discover, eval_run, explain_result,
                  open_db, prepare_sandbox, resolve_device, run_results)
from .schedule.plan import RunScale
from .store import DEFAULT_DB
from .worker.parent import ConfinementFailed
from .worker.sandbox import default_limits

EXIT_FAILED = 1  # the run could not go on (its results so far are kept)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size(text: str) -> int:
    """A byte count: 512M, 8G, 1T or plain bytes."""
    number, unit = text.strip().rstrip("bB"), ""
    if number and number[-1].lower() in SIZE_UNITS:
        number, unit = number[:-1], number[-1].lower()
    try:
        return int(float(number) * SIZE_UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 8G, not {text!r}") from None


def build_parser(host: HostEnv) -> argparse.ArgumentParser:
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
    ev.add_argument("--build-dir", type=Path, default=default_build_root(host), help="build cache, safe to share between runs")
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
    add_sandbox_arguments(ev)

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
    add_sandbox_arguments(chk)

    exp_ = sub.add_parser("explain", help="why a candidate failed and how to fix it (evaluates it if never judged)")
    exp_.add_argument("path", type=Path, help="a candidate file, under <candidates>/<problem_id>/ or KernelBench-named")
    exp_.add_argument("--problems", type=Path, default=Path("problems"))
    exp_.add_argument("--db", type=Path, default=DEFAULT_DB)
    exp_.add_argument("--device", choices=["cpu", "cuda"], default=None)
    add_sandbox_arguments(exp_)

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


def add_sandbox_arguments(command: argparse.ArgumentParser) -> None:
    limits = default_limits()
    command.add_argument("--sandbox", choices=[m.value for m in SandboxMode], default="auto",
                         help="confine workers with what the kernel offers (auto), refuse to run without all of it "
                              "(strict), or not at all (off); default %(default)s")
    command.add_argument("--max-host-memory", type=size, default=limits.host_memory,
                         help=f"host memory per worker (default {limits.host_memory >> 20} MiB, half of this machine's)")
    command.add_argument("--max-processes", type=int, default=limits.processes, help="processes per worker (default %(default)s)")
    command.add_argument("--max-scratch", type=size, default=limits.scratch, help="disk per worker's scratch (default 8G)")
    command.add_argument("--max-file-size", type=size, default=limits.file_size,
                         help="any one file a worker writes, its log included (default 2G)")


def run_setup(args: argparse.Namespace, host: HostEnv, scale: RunScale = RunScale()) -> RunSetup:
    try:
        limits = Limits(host_memory=args.max_host_memory, processes=args.max_processes, scratch=args.max_scratch,
                        file_size=args.max_file_size)
    except ValueError as exc:
        raise UsageError(str(exc).splitlines()[-1]) from None
    return RunSetup(scale=scale, host=host, build_root=getattr(args, "build_dir", default_build_root(host)),
                    sandbox=prepare_sandbox(SandboxMode(args.sandbox), limits))


def eval_config(args: argparse.Namespace) -> EvalConfig:
    try:
        return EvalConfig(device=resolve_device(args.device), precision=args.precision, baseline=args.baseline,
                          correctness_trials=args.correctness_trials, warmup=args.warmup, trials=args.trials,
                          timeout_s=args.timeout, build_timeout_s=args.build_timeout, seed=args.seed,
                          strict_shapes=args.strict_shapes, atol=args.atol, rtol=args.rtol)
    except ValueError as exc:
        raise UsageError(str(exc).splitlines()[-1]) from None


def run_scale(args: argparse.Namespace, config: EvalConfig) -> RunScale:
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


def cmd_eval(args: argparse.Namespace, host: HostEnv) -> int:
    config = eval_config(args)
    options = EvalOptions(candidates_dir=args.candidates, problems_dir=args.problems, db=args.db, out=args.out,
                          problem_ids=args.problem, resume=args.resume, feedback=args.feedback)
    try:
        finished = eval_run(options, config, run_setup(args, host, run_scale(args, config)))
    except Interrupted as stopped:
        print(f"\ninterrupted; what was judged is kept. Continue with: --resume {stopped.run_id}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(summary_table(finished.results))
    print(f"results: {finished.results_path}\nreport:  {finished.index}\ndatabase: {args.db} (run {finished.run.run_id})")
    return 0


def cmd_list(args: argparse.Namespace, host: HostEnv) -> int:
    print(listing(*discover(args.problems, args.candidates)))
    return 0


def cmd_report(args: argparse.Namespace, host: HostEnv) -> int:
    with open_db(args.db) as db:
        run, out_dir, results = run_results(db, args.run)
        print(render_site(run, results, lambda r: db.code(r.candidate_hash), args.out or out_dir))
    return 0


def cmd_check(args: argparse.Namespace, host: HostEnv) -> int:
    problems = discover(args.problems, None)[0]
    config = EvalConfig(device=resolve_device(args.device))
    findings = check_problems(problems, config, host, run_setup(args, host).sandbox, args.small)
    print(describe_findings(findings))
    if args.json:
        args.json.write_text("".join(f.model_dump_json() + "\n" for f in findings))
    return 0


def cmd_explain(args: argparse.Namespace, host: HostEnv) -> int:
    print(explanation(explain_result(args.path, args.problems, args.db, args.device, run_setup(args, host))))
    return 0


def cmd_compare(args: argparse.Namespace, host: HostEnv) -> int:
    with open_db(args.db) as db:
        changes = compare_runs(run_results(db, args.run_a)[2], run_results(db, args.run_b)[2])
    print(describe_changes(changes))
    if args.out:
        print(render_compare(args.run_a, args.run_b, changes, args.out / f"compare-{args.run_a}-{args.run_b}.html"))
    return 0


def cmd_export(args: argparse.Namespace, host: HostEnv) -> int:
    with open_db(args.db) as db:
        run, _, results = run_results(db, args.run)
    print(write_export(args.format, results, run.machine.device_name, args.out))
    return 0


COMMANDS = {"eval": cmd_eval, "list": cmd_list, "report": cmd_report, "compare": cmd_compare,
            "export": cmd_export, "explain": cmd_explain, "check": cmd_check}


def main(argv: list[str] | None = None) -> int:
    host = HostEnv.from_environ(os.environ, str(Path.home()))  # the one place the environment is read
    args = build_parser(host).parse_args(argv)
    try:
        return COMMANDS[args.command](args, host)
    except UsageError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StoreFailed, ConfinementFailed) as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_FAILED

"""Command line: dispatch. What each command accepts is arguments.py, its values are checked in
options.py; the work is done in run.py, problem_check.py and present/."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from . import options
from .arguments import build_parser
from .errors import StoreFailed, UsageError
from .inputs.discovery import checked_paths, discover
from .records import HostEnv, Result
from .store import Database, StoreError
from .worker.bytecode import read_bytecode_here

# Commands import what they need when they run: `--help`, `report`, `compare` and `export` never
# import torch (seconds of start-up).

EXIT_FAILED = 1  # the run could not go on (its results so far are kept)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def cmd_eval(args: argparse.Namespace, host: HostEnv) -> int:
    checked_paths(args.problems, args.candidates)  # refused before torch is imported, which takes seconds
    from .present.summary import summary_table
    from .run import EvalOptions, Interrupted, eval_run, resumed_config

    if args.feedback and not args.feedback.parent.is_dir():  # written at the end: found out now, not then
        raise UsageError(f"--feedback {args.feedback}: there is no directory {args.feedback.parent}")
    for flag, given, directory in (("--out", args.out, args.out), ("--db", args.db, args.db.parent)):  # before anything is created
        _no_file_in_the_way(flag, given, directory)
    given = options.given_config(args, build_parser(host).parse_args(["eval", str(args.candidates)]))
    eval_options = EvalOptions(candidates_dir=args.candidates, problems_dir=args.problems, db=args.db, out=args.out,
                               problem_ids=args.problem, resume=args.resume, feedback=args.feedback, given=given)
    config = options.eval_config(args) if args.resume is None else resumed_config(eval_options)
    try:
        finished = eval_run(eval_options, config, options.run_setup(args, host, options.run_scale(args, config)))
    except Interrupted as stopped:
        report = f" (report so far: {stopped.index})" if stopped.index else ""
        print(f"\ninterrupted; what was judged is kept{report}. Continue with:\n  {resume_command(args.argv, stopped.run_id)}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    print(summary_table(finished.results, finished.index))
    print(f"results: {finished.results_path}\nreport:  {finished.index}\ndatabase: {args.db} (run {finished.run.run_id})")
    return 0


def resume_command(argv: list[str], run_id: str) -> str:
    """The eval command as given, to paste: with `--resume run_id` in place of any --resume it had."""
    kept, skip = [], False
    for arg in argv:
        if skip and not arg.startswith("-"):
            skip = False
            if arg == run_id:
                continue
        skip = arg == "--resume"
        if not (skip or arg.startswith("--resume=")):
            kept.append(arg)
    return shlex.join(["python", "-m", "harness", *kept, "--resume", run_id])


def _no_file_in_the_way(flag: str, given: Path | None, directory: Path | None) -> None:
    """Refused before anything is created: a file where `directory` (of `flag`'s `given` path) must be made."""
    blocking = _file_in_the_way(directory)
    if blocking is not None:
        raise UsageError(f"{flag} {given}: {blocking} is a file, not a directory")


def _file_in_the_way(directory: Path | None) -> Path | None:
    """The file, if any, at `directory` or at the nearest of its parents that exists."""
    while directory is not None and not directory.exists():
        directory = directory.parent if directory.parent != directory else None
    return directory if directory is not None and not directory.is_dir() else None


def cmd_list(args: argparse.Namespace, host: HostEnv) -> int:
    from .present.summary import listing

    print(listing(*discover(args.problems, args.candidates)))
    return 0


def cmd_report(args: argparse.Namespace, host: HostEnv) -> int:
    from .present.site import render_site

    from .present.summary import selected

    _no_file_in_the_way("--out", args.out, args.out)
    with Database.existing(args.db) as db:
        run, out_dir, results = db.run_results(args.run)
        results = selected(results, args.status, args.model, args.group_by)
        print(render_site(run, results, lambda r: db.code(r.candidate_hash), args.out or out_dir, args.group_by))
    return 0


def cmd_runs(args: argparse.Namespace, host: HostEnv) -> int:
    from .present.summary import run_table

    with Database.existing(args.db) as db:
        print(run_table(db.run_listing()))
    return 0


def cmd_history(args: argparse.Namespace, host: HostEnv) -> int:
    from .present.summary import history_table

    if (args.problem is None) == (args.model is None):
        raise UsageError("history takes --problem ID or --model NAME (one of them)")
    with Database.existing(args.db) as db:
        print(history_table(db.history(), args.problem, args.model))
    return 0


def cmd_check(args: argparse.Namespace, host: HostEnv) -> int:
    problems = discover(args.problems, None)[0]
    from .problem_check import check_problems, describe_findings
    from .records import EvalConfig
    from .run import resolve_device

    config = EvalConfig(device=resolve_device(args.device))
    findings = check_problems(problems, config, host, options.run_setup(args, host).sandbox, args.small)
    print(describe_findings(findings))
    if args.json:
        args.json.write_text("".join(f.model_dump_json() + "\n" for f in findings))
    return 0


def cmd_explain(args: argparse.Namespace, host: HostEnv) -> int:
    """The latest judgement of the file in the database, read without importing torch; a file never
    judged is judged first, in a run of its own."""
    from .present.summary import explanation

    judged = _judged_before(args.path, args.db)
    if judged is None:
        _no_file_in_the_way("--db", args.db, args.db.parent)  # the run that judges it makes the database
        from .run import judge_file

        judged = judge_file(args.path.resolve(), args.problems, args.db, args.device, options.run_setup(args, host))
    print(explanation(judged))
    return 0


def _judged_before(path: Path, db: Path) -> Result | None:
    """The most recent judgement of a file with this one's content (None: none, or no database
    this harness can read as it is)."""
    from .inputs.candidates import read_candidate

    if not path.is_file():
        raise UsageError(f"{path} is not a file")
    try:
        with Database.existing(db) as readable:
            return readable.latest_result(read_candidate(path.resolve(), path.name, None).source_hash)
    except StoreError:  # none yet, or of an earlier schema: the run that judges the file migrates it
        return None


def cmd_compare(args: argparse.Namespace, host: HostEnv) -> int:
    from .present.compare import compare_runs, describe_changes, render_compare

    from .present.summary import selected

    _no_file_in_the_way("--out", args.out, args.out)
    with Database.existing(args.db) as db:
        (_, site_a, before), (_, site_b, after) = db.run_results(args.run_a), db.run_results(args.run_b)
    comparison = compare_runs(selected(before, None, args.model, args.group_by),
                              selected(after, None, args.model, args.group_by), pattern=args.group_by)
    print(describe_changes(comparison))
    if args.out:
        print(render_compare(args.run_a, args.run_b, comparison, args.out / f"compare-{args.run_a}-{args.run_b}.html",
                             site_a, site_b))
    return 0


def cmd_export(args: argparse.Namespace, host: HostEnv) -> int:
    from .inputs.problems import directory_level
    from .present.export import ExportError, write_export

    from .present.summary import selected

    _no_file_in_the_way("--out", args.out, args.out if args.format == "kernelbench" else args.out.parent)
    with Database.existing(args.db) as db:
        run, _, results = db.run_results(args.run)
        results = selected(results, args.status, args.model, args.group_by)
        paths = db.problem_paths()
    levels = {r.problem: directory_level(Path(paths[(r.problem, r.problem_hash)]).parent)
              for r in results if r.problem and (r.problem, r.problem_hash) in paths}
    try:
        print(write_export(args.format, results, run.machine.device_name, args.out, levels, args.group_by))
    except ExportError as exc:
        raise UsageError(f"{exc}: nothing written") from None
    return 0


TORCH_COMMANDS = {"eval", "check", "explain"}  # those that import torch in this process
COMMANDS = {"eval": cmd_eval, "list": cmd_list, "runs": cmd_runs, "history": cmd_history, "report": cmd_report, "compare": cmd_compare,
            "export": cmd_export, "explain": cmd_explain, "check": cmd_check}


def main(argv: list[str] | None = None) -> int:
    host = HostEnv.from_environ(os.environ, str(Path.home()))  # the one place the environment is read
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser(host).parse_args(argv)
        args.argv = argv
    except SystemExit as done:  # argparse has printed its one line (or the help): a code, not an exit
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    if args.command in TORCH_COMMANDS:
        read_bytecode_here(host.cache_home)
    try:
        return COMMANDS[args.command](args, host)
    except (UsageError, StoreError) as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # an output that cannot be written, an input that cannot be read
        print(f"harness: error: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}",
              file=sys.stderr)
        return EXIT_USAGE
    except StoreFailed as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ModuleNotFoundError as exc:  # the harness's own dependencies (torch, pydantic...): not candidates'
        print(f"harness: error: {exc.name or exc} is not installed for {sys.executable}; set up as the README says",
              file=sys.stderr)
        return EXIT_USAGE
    except confinement_failed() as exc:  # evaluated only when something was raised: it imports torch
        print(f"harness: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def confinement_failed() -> type[Exception]:
    from .worker.parent import ConfinementFailed

    return ConfinementFailed

"""What the command line accepts: each command's arguments, their defaults and help, and an
example per command. The values are checked in options.py; cli.py dispatches."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import options
from .options import Bytes, number, size
from .records import HostEnv, SandboxMode
from .store import DEFAULT_DB
from .worker.sandbox import default_limits

EXAMPLES = {
    "eval": "examples:\n  python -m harness eval candidates/\n  python -m harness eval runs/ --problems KernelBench/level1 "
            "--gpus 0,1\n  python -m harness eval candidates/ --device cpu --trials 20 --resume",
    "report": "examples:\n  python -m harness report --run 20261122-101500-ab12cd --out site/\n"
              "  python -m harness report --group-by '^[^/]+/(gpt|claude|llama)'",
    "compare": "examples:\n  python -m harness compare RUN_A RUN_B --out reports/\n"
               "  python -m harness compare RUN_A RUN_B --model gpt-5",
    "explain": "example:\n  python -m harness explain candidates/conv2d_square/001_fe76667a27343746.txt",
    "check": "example:\n  python -m harness check problems/ --small",
    "export": "example:\n  python -m harness export --format kernelbench --out kb/",
    "list": "example:\n  python -m harness list candidates/",
    "runs": "example:\n  python -m harness runs --db reports/harness.db",
    "history": "examples:\n  python -m harness history --problem softmax\n  python -m harness history --model gpt-5",
}
OVERVIEW = ("examples:\n  python -m harness eval candidates/ --problems problems/\n"
            "  python -m harness report --out site/\n  python -m harness explain candidates/conv2d_square/001_fe76667a27343746.txt\n"
            "each command's options and their defaults: python -m harness COMMAND --help")



class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Examples as written; an option's default after its help, unless it has none (None, a flag
    that is off) or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False) or "default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)


def build_parser(host: HostEnv) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Evaluate LLM-written kernels against PyTorch references.",
                                     epilog=OVERVIEW, formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, epilog=EXAMPLES[name],
                              formatter_class=HelpFormatter)

    ev = command("eval", "evaluate candidates and write results.jsonl and index.html")
    ev.add_argument("candidates", type=Path, help="candidates dir: <problem_id>/<name>.{py,txt,md} or KernelBench flat files")
    ev.add_argument("--problems", type=Path, default=Path("problems"), help="problems dir, ours or a KernelBench level folder")
    ev.add_argument("--out", type=Path, default=None, help="output dir (default: reports/<run-id>/)")
    ev.add_argument("--device", choices=["cpu", "cuda"], default=None, help="(default: cuda when available)")
    ev.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32", help="dtype of inputs and weights")
    ev.add_argument("--baseline", choices=["eager", "compile"], default="eager", help="time the reference eagerly or with torch.compile")
    ev.add_argument("--correctness-trials", type=number(int, 1), default=5, help="random inputs each candidate must match on")
    ev.add_argument("--warmup", type=number(int, 0), default=3, help="untimed calls before timing")
    ev.add_argument("--trials", type=options.trials, default=None, metavar="auto|N",
                    help="timed calls per model: auto (until the median's 95%% interval is within ±1%%, or the time "
                         "budget is spent) or a fixed count (default auto)")
    ev.add_argument("--min-trials", type=number(int, 1), default=5,
                    help="adaptive timing: at least this many samples (a call, or a CPU batch of quick calls)")
    ev.add_argument("--max-trials", type=number(int, 1), default=200,
                    help="adaptive timing: at most this many calls, unless fewer than --min-trials samples (on the "
                         "CPU more, for 2 s at most, where too few to tell hidden library work: stopped 'sampling')")
    ev.add_argument("--time-budget", type=number(float, 0, above=True), default=2.0, help="adaptive timing: seconds per model")
    ev.add_argument("--timeout", type=number(float, 0, above=True), default=300.0, help="seconds allowed per phase, import included where it compiles nothing")
    ev.add_argument("--build-timeout", type=number(float, 0, above=True), default=900.0, help="seconds to build a candidate (and to import one that compiles)")
    ev.add_argument("--atol", type=number(float, 0), default=None, help="override every problem's absolute tolerance")
    ev.add_argument("--rtol", type=number(float, 0), default=None, help="override every problem's relative tolerance")
    ev.add_argument("--seed", type=int, default=42, help="random seed")
    ev.add_argument("--strict-shapes", action="store_true", help="judge a candidate that is wrong at other input sizes (right only at the problem's own) a mismatch; "
                    "without it, such a candidate passes, flagged shape_specialized")
    ev.add_argument("--memcheck", action="store_true",
                    help="after timing, run each candidate that passed under compute-sanitizer (memcheck; racecheck "
                         "where it declares __shared__ memory): errors make it runtime_error, flagged memory_error")
    ev.add_argument("--problem", action="append", default=None, help="only this problem id (repeatable)")
    ev.add_argument("--build-dir", type=Path, default=None,
                    help=f"build cache, safe to share between runs (default: one under {host.cache_home})")
    ev.add_argument("--jobs", "-j", type=number(int, 1), default=None, help="builds at once (default: the cores the GPUs leave)")
    ev.add_argument("--warm-workers", type=number(int, 0), default=None,
                    help="workers booted ahead per lane, sandboxed and idle (default: 1 on CPU, up to 6 per GPU)")
    ev.add_argument("--gpus", default=None, help="GPUs to evaluate on, one lane each, e.g. 0,2 (default: all visible)")
    ev.add_argument("--backend", choices=["local", "ray"], default="local", help="ray: tasks on a Ray cluster")
    ev.add_argument("--ray-address", default=None, help="the Ray cluster to join (default: start a local instance)")
    ev.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite results database")
    ev.add_argument("--feedback", type=Path, default=None, metavar="FILE", help="also write one JSON line per candidate for a generator")
    ev.add_argument("--resume", nargs="?", const="latest", default=None, metavar="RUN_ID",
                    help="continue a run (default: the latest of these candidates) with its own options, skipping what it judged")
    sandbox_arguments(ev)

    ls = command("list", "list problems and the candidates found for each")
    ls.add_argument("candidates", type=Path, nargs="?", default=None, help="candidates dir (default: none, problems only)")
    ls.add_argument("--problems", type=Path, default=Path("problems"), help="problems dir")

    runs = command("runs", "list the runs in the database, newest first: id, start, candidates, verdicts, device")
    runs.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite results database")

    hist = command("history", "one problem's or one model's correct candidates and best speedup in each run, oldest first")
    hist.add_argument("--problem", default=None, help="a problem id")
    hist.add_argument("--model", default=None, help="a model, as the model table names it")
    hist.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite results database")

    rep = command("report", "render a run from the database as a static site")
    rep.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite results database")
    rep.add_argument("--run", default=None, help="run id (default: the latest)")
    rep.add_argument("--out", type=Path, default=None, help="site dir (default: the run's output dir)")

    chk = command("check", "flag reference problems a trivial output could pass (zeros, constants)")
    chk.add_argument("problems", type=Path, nargs="?", default=Path("problems"), help="problems dir")
    chk.add_argument("--device", choices=["cpu", "cuda"], default=None, help="(default: cuda when available)")
    chk.add_argument("--small", action="store_true", help="run at reduced input sizes (quick, e.g. on a CPU)")
    chk.add_argument("--json", type=Path, default=None, help="also write the findings as JSON lines")
    sandbox_arguments(chk)

    exp_ = command("explain", "why a candidate failed and how to fix it (evaluates it if never judged)")
    exp_.add_argument("path", type=Path, help="a candidate file, under <candidates>/<problem_id>/ or KernelBench-named")
    exp_.add_argument("--problems", type=Path, default=Path("problems"), help="problems dir")
    exp_.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite results database")
    exp_.add_argument("--device", choices=["cpu", "cuda"], default=None, help="(default: cuda when available)")
    sandbox_arguments(exp_)

    cmp = command("compare", "what got faster, slower, fixed or broken between two runs")
    cmp.add_argument("run_a", help="the run before")
    cmp.add_argument("run_b", help="the run after")
    cmp.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite results database")
    cmp.add_argument("--out", type=Path, default=None, help="also write the comparison page here")

    exp = command("export", "write a run's results as jsonl, csv or KernelBench's eval_results.json (one per level)")
    exp.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite results database")
    exp.add_argument("--run", default=None, help="run id (default: the latest)")
    exp.add_argument("--format", choices=["jsonl", "csv", "kernelbench"], required=True, help="output format")
    for reading in (rep, cmp, exp):
        reading.add_argument("--model", default=None, help="only the candidates of this model (as the model table names it)")
        reading.add_argument("--group-by", type=options.pattern, default=None, metavar="REGEX",
                             help="the first group of REGEX in each candidate's path names its model, e.g. "
                                  "'^[^/]+/([^_]+)_' (default: the model named by the common layouts: "
                                  "<model>_sample_<k>, <model>/<problem>/..., a folder per model)")
    for reading in (rep, exp):  # compare matches candidates across runs whatever their verdicts
        reading.add_argument("--status", type=options.statuses, default=None, metavar="STATUS[,STATUS]",
                             help="only candidates with these verdicts (ok, mismatch, ...)")
    exp.add_argument("--out", type=Path, required=True,
                     help="file (for kernelbench a directory: level_N/eval_results.json and fast_p.json per level)")
    return parser


def sandbox_arguments(command: argparse.ArgumentParser) -> None:
    limits = default_limits()  # its sizes shown as sizes (`Bytes`)
    command.add_argument("--sandbox", choices=[m.value for m in SandboxMode], default="auto",
                         help="confine workers with what the kernel offers, refuse to run without all of it, or not at all")
    command.add_argument("--max-host-memory", type=size, default=Bytes(limits.host_memory), help="bytes per worker (512M, 8G)")
    command.add_argument("--max-processes", type=number(int, 1), default=limits.processes, help="processes per worker")
    command.add_argument("--max-scratch", type=size, default=Bytes(limits.scratch), help="bytes of scratch space per worker")
    command.add_argument("--max-file-size", type=size, default=Bytes(limits.file_size), help="bytes of any one file a worker writes")

"""The Python API against the command line on the same stream of in-memory candidates.

    python bench/api_vs_cli.py [--count 60] [--shell-outs 10] [--trials 5] [--out api_vs_cli.json]

A trainer has answers as strings. Four ways to judge them, each on the same candidates (Python
ReLU, linear and MSE answers, a third of them wrong), each timed from the first answer to the
last verdict, with a fresh build cache:
  api_stream   one Evaluator, every answer submitted at once (`ev.map`)
  api_loop     one Evaluator, one answer at a time (`ev.submit(...).result()`, a reward per step)
  cli_batch    write every answer to files, one `python -m harness eval` over them, read results.jsonl
  cli_per_call one `harness eval` per answer, as glue around a CLI does (--shell-outs of them)
Prints seconds per candidate for each and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness

PROBLEMS = Path(__file__).resolve().parent.parent / "tests" / "data" / "problems"
ANSWERS = {
    "tiny_relu": ("torch.clamp(x, min=0)", "x.abs()"),
    "tiny_linear": (None, None),  # ModelNew below: the reference's own layer, or a shifted one
    "tiny_mse": ("((predictions - targets) ** 2).sum() * (1.0 / targets.numel())", "(predictions - targets).abs().sum() * (1.0 / targets.numel())"),
}
LINEAR = ("import torch, torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def __init__(self, i, o):\n"
          "        super().__init__()\n        self.linear = nn.Linear(i, o)\n\n    def forward(self, x):\n"
          "        return (x[:, :, None] * self.linear.weight.t()).sum(1) + self.linear.bias{shift}  # answer {n}\n")
FORWARD = ("import torch, torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, {args}):\n"
           "        return {body}  # answer {n}\n")
ARGS = {"tiny_relu": "x", "tiny_mse": "predictions, targets"}


def answers(count: int) -> list[tuple[str, str]]:
    """`count` distinct answers over the three problems; every third one is wrong."""
    made = []
    for n in range(count):
        problem = list(ANSWERS)[n % 3]
        wrong = (n // 3) % 3 == 2
        if problem == "tiny_linear":
            made.append((LINEAR.format(shift=" + 1" if wrong else "", n=n), problem))
        else:
            made.append((FORWARD.format(args=ARGS[problem], body=ANSWERS[problem][wrong], n=n), problem))
    return made


def api_stream(pairs, options) -> list[str]:
    with harness.Evaluator(PROBLEMS, **options) as ev:
        return [r.status.value for r in ev.map(pairs)]


def api_loop(pairs, options) -> list[str]:
    with harness.Evaluator(PROBLEMS, **options) as ev:
        return [ev.submit(code, problem).result().status.value for code, problem in pairs]


def cli_eval(pairs, work: Path, trials: int, build_dir: Path) -> list[str]:
    candidates = work / "candidates"
    for n, (code, problem) in enumerate(pairs):
        (candidates / problem).mkdir(parents=True, exist_ok=True)
        (candidates / problem / f"{n:04d}.py").write_text(code)
    subprocess.run([sys.executable, "-m", "harness", "eval", str(candidates), "--problems", str(PROBLEMS),
                    "--device", "cpu", "--trials", str(trials), "--out", str(work / "out"), "--db", str(work / "h.db"),
                    "--build-dir", str(build_dir)], check=True, capture_output=True)
    return [json.loads(line)["status"] for line in (work / "out" / "results.jsonl").read_text().splitlines()]


def timed(label: str, count: int, run) -> dict:
    start = time.perf_counter()
    statuses = run()
    seconds = time.perf_counter() - start
    row = {"mode": label, "candidates": count, "seconds": round(seconds, 2), "s_per_candidate": round(seconds / count, 3),
           "ok": statuses.count("ok"), "not_ok": len(statuses) - statuses.count("ok")}
    print(f"{label:13s} {count:4d} candidates  {seconds:7.1f} s  {seconds / count:6.2f} s/candidate  "
          f"ok {row['ok']}, not ok {row['not_ok']}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--shell-outs", type=int, default=10, help="answers judged by one CLI call each")
    parser.add_argument("--trials", type=int, default=5, help="timed calls per model (fixed, the same for all)")
    parser.add_argument("--modes", default="api_stream,api_loop,cli_batch,cli_per_call",
                        help="which, in this order (the machine's load drifts: run them in both orders)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    pairs = answers(args.count)
    with tempfile.TemporaryDirectory(prefix="api-vs-cli-") as tmp:
        tmp = Path(tmp)

        def options(name: str) -> dict:
            return {"device": "cpu", "trials": args.trials, "build_dir": tmp / name / "build"}

        modes = {
            "api_stream": lambda: timed("api_stream", args.count, lambda: api_stream(pairs, options("stream"))),
            "api_loop": lambda: timed("api_loop", args.count, lambda: api_loop(pairs, options("loop"))),
            "cli_batch": lambda: timed("cli_batch", args.count,
                                       lambda: cli_eval(pairs, tmp / "cli", args.trials, tmp / "cli" / "build")),
            "cli_per_call": lambda: timed("cli_per_call", args.shell_outs, lambda: [
                cli_eval([pair], tmp / f"call{n}", args.trials, tmp / "calls-build")[0]
                for n, pair in enumerate(pairs[:args.shell_outs])]),
        }
        rows = [modes[name]() for name in args.modes.split(",")]
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

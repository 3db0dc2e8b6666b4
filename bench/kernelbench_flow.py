"""KernelBench's evaluation flow, for comparison: compile, then evaluate, one candidate at a time.

Each candidate gets a fresh process and a fresh build dir (no cache). Its code is imported
(load_inline compiles there), then 5 correctness trials on fresh random inputs with
allclose(atol=rtol=1e-4), then 3 warm-up calls and 100 timed calls with CUDA events, mean
reported: KernelBench's protocol as its docs describe it (see ../shared notes in the project
history). The reference is timed the same way once per problem, as KernelBench's baseline
script does. With --kernelbench PATH, a KernelBench checkout's own eval_kernel_against_ref
runs instead of this re-implementation.

    python bench/kernelbench_flow.py CANDIDATES_DIR --problems problems --out flow.json [--kernelbench PATH]

The JSON has one row per candidate (compiled, correct, mean_ms, seconds) and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, importlib.util, torch
problem_path, code_path, out_path, mode, kernelbench = sys.argv[1:6]
result = {"compiled": False, "correct": False, "mean_ms": None, "error": None}

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

def time_mean_ms(model, inputs):
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        torch.cuda.synchronize()
        samples = []
        for _ in range(100):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
    return sum(samples) / len(samples)

try:
    problem = load(problem_path, "problem")
    if mode == "reference":
        torch.manual_seed(42)
        model = problem.Model(*problem.get_init_inputs()).cuda()
        result.update(compiled=True, correct=True, mean_ms=time_mean_ms(model, [x.cuda() for x in problem.get_inputs()]))
    elif kernelbench != "-":
        sys.path.insert(0, kernelbench)
        try:
            from kernelbench.eval import eval_kernel_against_ref
        except ImportError:
            from src.eval import eval_kernel_against_ref
        got = eval_kernel_against_ref(open(problem_path).read(), open(code_path).read(), num_correct_trials=5,
                                      num_perf_trials=100, measure_performance=True, verbose=False)
        result.update(compiled=bool(got.compiled), correct=bool(got.correctness),
                      mean_ms=got.runtime if got.runtime and got.runtime > 0 else None)
    else:
        candidate = load(code_path, "candidate")
        result["compiled"] = True
        torch.manual_seed(42)
        reference = problem.Model(*problem.get_init_inputs()).cuda()
        torch.manual_seed(42)
        model = candidate.ModelNew(*problem.get_init_inputs()).cuda()
        correct = True
        with torch.no_grad():
            for trial in range(5):
                torch.manual_seed(1000 + trial)
                inputs = [x.cuda() for x in problem.get_inputs()]
                expected, actual = reference(*inputs), model(*inputs)
                if expected.shape != actual.shape or not torch.allclose(expected, actual, atol=1e-4, rtol=1e-4):
                    correct = False
                    break
        result["correct"] = correct
        if correct:
            torch.manual_seed(42)
            result["mean_ms"] = time_mean_ms(model, [x.cuda() for x in problem.get_inputs()])
except Exception as exc:
    result["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
json.dump(result, open(out_path, "w"))
"""


def run_one(problem_path: str, code: str | None, mode: str, kernelbench: str | None, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="kb-flow-") as scratch:
        code_path = Path(scratch) / "candidate.py"
        code_path.write_text(code or "")
        out_path = Path(scratch) / "result.json"
        env = {k: v for k, v in os.environ.items() if k.startswith(("CUDA", "PYTHON", "LD_", "NVIDIA")) or k == "PATH"}
        env.update(TORCH_EXTENSIONS_DIR=str(Path(scratch) / "build"), HOME=scratch)
        began = time.monotonic()
        try:
            subprocess.run([sys.executable, "-c", CHILD, problem_path, str(code_path), str(out_path), mode,
                            kernelbench or "-"], env=env, cwd=scratch, timeout=timeout_s,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            row = json.loads(out_path.read_text()) if out_path.exists() else {"compiled": False, "correct": False,
                                                                             "mean_ms": None, "error": "crashed"}
        except subprocess.TimeoutExpired:
            row = {"compiled": False, "correct": False, "mean_ms": None, "error": "timeout"}
        row["seconds"] = round(time.monotonic() - began, 3)
        return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", type=Path)
    parser.add_argument("--problems", type=Path, default=Path("problems"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kernelbench", default=None, help="a KernelBench checkout: use its eval_kernel_against_ref")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()

    from harness.inputs.candidates import discover_candidates
    from harness.inputs.problems import discover_problems

    problems = {p.id: p for p in discover_problems(args.problems)}
    candidates = [c for c in discover_candidates(args.candidates, list(problems.values()))
                  if c.problem_id and c.kind.runs_on("cuda")]
    began = time.monotonic()
    report = {"engine": "kernelbench" if args.kernelbench else "re-implementation", "finished": False,
              "references": {}, "candidates": {}}

    def save() -> None:  # after every model: a run cut short still tells how far it got
        report["wall_s"] = round(time.monotonic() - began, 3)
        args.out.write_text(json.dumps(report, indent=2))

    for pid in dict.fromkeys(c.problem_id for c in candidates):
        report["references"][pid] = run_one(problems[pid].path, None, "reference", None, args.timeout)
        save()
    for candidate in candidates:
        row = run_one(problems[candidate.problem_id].path, candidate.code, "candidate", args.kernelbench, args.timeout)
        ref = report["references"][candidate.problem_id]["mean_ms"]
        row["speedup"] = ref / row["mean_ms"] if row.get("mean_ms") and ref else None
        report["candidates"][candidate.rel_path] = row
        save()
        print(f"{candidate.rel_path:55s} compiled={row['compiled']!s:5} correct={row['correct']!s:5} "
              f"{row['seconds']:7.1f} s", file=sys.stderr)
    report["finished"] = True
    save()
    print(f"kernelbench flow: {len(candidates)} candidates in {report['wall_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

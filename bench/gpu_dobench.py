"""The harness's GPU times against an independent measurement (issue 52): triton.testing.do_bench
(L2 flushed before each call, CUDA events around it, the median) of each shipped problem's
reference and of the shipped Triton candidates, beside the medians a harness run recorded for
them (device time). Run from the project root on the GPU machine, after a run on this card:

    python3 bench/gpu_dobench.py RESULTS_JSONL [--cuda-candidates]

RESULTS_JSONL: the run's results (bench/gpu_repeat.py's run1 judges the shipped candidates and
every reference as a candidate). --cuda-candidates also compiles the CUDA candidates here (30-60 s
each). Prints one row per kernel and the median and largest distance."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
SEED = 42  # the harness's default --seed: the same weights; inputs are random either way


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def do_bench_ms(problem_path: Path, model_cls=None) -> float:
    """do_bench's median for the problem's reference (or `model_cls` built as the reference is),
    under the harness's strict fp32 (TF32 off)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    problem = load(problem_path, f"problem_{problem_path.stem}")
    torch.manual_seed(SEED)
    with torch.device("cuda"):
        model = (model_cls or problem.Model)(*problem.get_init_inputs()).cuda().eval()
        inputs = list(problem.get_inputs())
    with torch.no_grad():
        return triton.testing.do_bench(lambda: model(*inputs), warmup=100, rep=500, return_mode="median")


def main() -> None:
    results = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
    with_cuda = "--cuda-candidates" in sys.argv[2:]
    rows = []
    for problem_path in sorted((ROOT / "problems").glob("*.py")):
        recorded = next((r for r in results if r["problem"] == problem_path.stem and r.get("reference_timing")), None)
        if recorded is not None:
            rows.append((f"{problem_path.stem} (reference)", recorded["reference_timing"]["median_ms"],
                         do_bench_ms(problem_path)))
    for result in results:
        path = ROOT / "candidates" / result["candidate"]
        if result["status"] != "ok" or path.suffix != ".py" or not path.exists() or not result.get("timing"):
            continue
        source = path.read_text()
        if "load_inline" in source and ("cuda_sources" in source) and not with_cuda:
            continue
        if "triton" not in source and "cuda_sources" not in source:
            continue  # a C++ CPU candidate: not on a GPU run
        model_cls = load(path, f"candidate_{path.stem}").ModelNew
        rows.append((result["candidate"], result["timing"]["median_ms"],
                     do_bench_ms(ROOT / "problems" / f"{result['problem']}.py", model_cls)))
    print(f"{'kernel':48} {'harness ms':>11} {'do_bench ms':>12} {'apart':>7}")
    apart = []
    for name, harness_ms, bench_ms in rows:
        apart.append(abs(harness_ms - bench_ms) / bench_ms * 100)
        print(f"{name[:48]:48} {harness_ms:11.4f} {bench_ms:12.4f} {apart[-1]:6.2f}%")
    if apart:
        print(f"{len(apart)} kernels: harness vs do_bench apart median {statistics.median(apart):.2f}%, "
              f"most {max(apart):.2f}%, within 3%: {sum(a <= 3 for a in apart)}")


if __name__ == "__main__":
    main()

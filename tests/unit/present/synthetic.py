"""Synthetic runs shaped like a real one: KernelBench problem ids of two levels (1_, 2_, 12_ ...),
long candidate paths from a few generators, every verdict, near-misses among the mismatches,
and timings with confidence intervals. Shared by the report's unit and browser tests."""

import random
import re
from pathlib import Path

from harness.judge.diagnose import diagnose
from harness.records import Result, Status, TimingStats

PROBLEM_NAMES = ["Square_matrix_multiplication_", "Standard_matrix_multiplication_", "Matmul_for_large_K",
                 "Conv2d_Subtract_Subtract_Mish", "Gemm_Multiply_LeakyReLU", "ReLU", "Softmax", "LayerNorm",
                 "conv_standard_2D_square_input_square_kernel", "Max_Pooling_2D", "Sum_reduction_over_a_dimension"]
GENERATORS = ["claude-sonnet-4-5_temperature_0.7", "gpt-5-codex_reasoning_high", "llama-3.3-70b-instruct"]
VERDICTS = [Status.ok, Status.ok, Status.ok, Status.mismatch, Status.mismatch, Status.compile_error, Status.load_error,
            Status.runtime_error, Status.timeout, Status.crash, Status.rejected, Status.skipped]
LONG_REASON = ("main.cpp:42:17: error: no matching function for call to 'at::Tensor::data_ptr<float>(int)' "
               "note: candidate template ignored: could not match 'const float *' against 'int'; ") * 3
SHIPPED_CANDIDATES = sorted((Path(__file__).resolve().parents[3] / "candidates").rglob("*.py"))
TOKEN = re.compile(r"[A-Za-z_]\w*|\d+")


def problem_ids(count: int) -> list[str]:
    """KernelBench-style ids: level 1 numbers 1.., then level 2 numbers reusing 1.. (as KernelBench does)."""
    half = (count + 1) // 2
    return ([f"{n}_{PROBLEM_NAMES[n % len(PROBLEM_NAMES)]}" for n in range(1, half + 1)]
            + [f"{n}_{PROBLEM_NAMES[(n + 5) % len(PROBLEM_NAMES)]}_L2" for n in range(1, count - half + 1)])


def timing(rng: random.Random, median: float, n: int = 40) -> TimingStats:
    samples = sorted(median * rng.uniform(0.97, 1.08) for _ in range(n))
    return TimingStats(median_ms=median, iqr_ms=median * 0.03, mean_ms=median * 1.01, min_ms=samples[0],
                       max_ms=samples[-1], n=n, samples_ms=samples, clock="cuda_device",
                       ci_low_ms=median * 0.99, ci_high_ms=median * 1.01, stopped="converged")


def synthetic_results(count: int, problems: int = 21, seed: int = 0) -> list[Result]:
    rng = random.Random(seed)
    ids = problem_ids(problems)
    results = []
    for i in range(count):
        problem = ids[i % problems]
        generator = GENERATORS[(i // problems) % len(GENERATORS)]
        status = VERDICTS[(i * 7 + i // problems) % len(VERDICTS)]
        reference_ms = rng.uniform(0.05, 40.0)
        speedup = rng.choice([0.03, 0.4, 0.9, 1.05, 1.6, 3.2, 26.75]) if status is Status.ok else None
        near = status is Status.mismatch and i % 2 == 0
        result = Result(
            run_id="synthetic", problem=problem, status=status, candidate_hash=f"{i:064x}",
            candidate=f"{problem}/runs/2026-11-20/{generator}/sample_{i // problems}.py",
            speedup=speedup, flags=["near_miss"] if near else [],
            error=None if status is Status.ok else (LONG_REASON if status is Status.compile_error else
                                                    f"wrong output on trial 1/5: max abs error {0.011 if near else 1.1e3}"),
            max_abs_err=(0.011 if near else 1.1e3) if status is Status.mismatch else (1e-6 if speedup else None),
            timing=timing(rng, reference_ms / speedup, n=rng.randint(40, 100)) if speedup else None,
            reference_timing=timing(rng, reference_ms, n=rng.randint(40, 100)) if status is not Status.skipped else None,
        )
        result.diagnosis = diagnose(result, None)
        results.append(result)
    return results


def varied_code(i: int) -> str:
    """The code of sample i: a shipped candidate, one token in six renamed or renumbered per sample,
    so that no two samples are the same file (as two models' samples of a problem never are) and a
    report's compression cannot merely find one sample repeated in the next."""
    rng = random.Random(i)
    code = SHIPPED_CANDIDATES[i % len(SHIPPED_CANDIDATES)].read_text()

    def vary(token: re.Match) -> str:
        if rng.random() >= 1 / 6:
            return token[0]
        return str(rng.randint(1, 4096)) if token[0].isdigit() else f"{token[0]}_{rng.randint(0, 999)}"
    return TOKEN.sub(vary, code)


WORKER_ERRORS = [("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                  "asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
                  "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"),
                 ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                  "of 79.10 GiB of which 1.06 GiB is free."),
                 ("ImportError: /tmp/torch_extensions/py312_cu124/{name}/{name}.so: undefined symbol: "
                  "_ZN2at4_ops5empty4callEN3c108ArrayRefIlEE"),
                 "ValueError: too many values to unpack (expected 2)"]
IN_A_WORKER = {Status.load_error, Status.runtime_error, Status.crash, Status.timeout, Status.mismatch}  # a log to keep


def worker_log(i: int, code: str) -> str:
    """What a failed sample's worker printed last, as the harness keeps it (4,000 characters at
    most): the build's commands and warnings quoting the sample's code, then a traceback through it."""
    rng = random.Random(-i)
    lines = [line.strip() for line in code.splitlines() if line.strip()]
    build = [f"[{k}/3] c++ -MMD -MF {k}.o.d -DTORCH_EXTENSION_NAME=ext_{i} -I/usr/include/python3.12 -fPIC "
             f"-std=c++17 -O3 -c main_{i}.cpp -o main_{k}.o" for k in (1, 2, 3)]
    warnings = [f"main_{i}.cpp({rng.randint(1, 200)}): warning #177-D: declared but never referenced\n"
                f"    {rng.choice(lines)}\n    ^" for _ in range(rng.randint(2, 16))]
    frames = [f'  File "/tmp/harness-{i:08x}/candidate.py", line {rng.randint(1, 200)}, in {name}\n'
              f"    {rng.choice(lines)}" for name in ("forward", "_wrapped_call_impl", "_call_impl", "run")]
    error = rng.choice(WORKER_ERRORS).format(name=f"ext_{i}")
    return "\n".join(build + warnings + ["Traceback (most recent call last):", *frames, error])[-4000:]

"""What sampling a worker from outside costs its calls, and whether a candidate could notice it.

    python bench/sampling_cost.py [--rounds 8] [--calls 64] [--out sampling_cost.json]

A child process makes calls of several kinds (0.2 ms of Python, a softmax on its threads and on
one, a matmul), each timed by its own clock, in rounds: unsampled, sampled closely (the period
the harness picks for the commands it samples closely, worker/sampling.py) and sampled sparsely
(SPARSE_PERIOD_NS, every recorded command). Prints each kind's median call time under each
sampling against unsampled, and how often a call took over 1.2 times the unsampled median (what a
candidate probing its own speed would see), and writes them as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import textwrap

from harness.worker import sampling

CHILD = textwrap.dedent("""
    import statistics, sys, time, torch
    x, a = torch.randn(256, 2048), torch.randn(256, 256)

    def one_thread_softmax():
        torch.set_num_threads(1)
        torch.softmax(x, 1)
        torch.set_num_threads(threads)

    threads = torch.get_num_threads()
    kinds = {"python 0.2 ms": lambda: sum(range(20_000)), "softmax, all threads": lambda: torch.softmax(x, 1),
             "softmax, one thread": one_thread_softmax, "matmul 256": lambda: a @ a}
    print(*kinds, sep="\\t", flush=True)
    for line in sys.stdin:
        times = {}
        for name, call in kinds.items():
            times[name] = []
            for _ in range(int(line)):
                began = time.perf_counter()
                call()
                times[name].append((time.perf_counter() - began) * 1e3)
        print(repr(times), flush=True)
""")


def measure(rounds: int, calls: int) -> dict[str, dict[str, list[float]]]:
    """Call times (ms) of each kind, under each sampling."""
    with subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as child:
        kinds = child.stdout.readline().strip().split("\t")
        found = {how: {kind: [] for kind in kinds} for how in ("unsampled", "closely", "sparsely")}
        with sampling.Sampler(lambda: [child.pid]) as close, \
                sampling.Sampler(lambda: [child.pid], least_ns=sampling.SPARSE_PERIOD_NS) as sparse:
            if not close.active:
                sys.exit(f"this host does not let the harness sample a child: {close.refusal}")
            for round_ in range(rounds * 3):
                how = ("unsampled", "closely", "sparsely")[round_ % 3]
                with {"closely": close, "sparsely": sparse}[how].watching(calls) if how != "unsampled" \
                        else contextlib.nullcontext():
                    child.stdin.write(f"{calls}\n")
                    child.stdin.flush()
                    times = eval(child.stdout.readline())  # noqa: S307 - our own child's repr of floats
                for kind, values in times.items():
                    found[how][kind] += values
        child.kill()
        print(f"periods: closely {close.period_ns / 1e3:g} us, sparsely {sparse.period_ns / 1e6:g} ms")
    return found


def summary(found: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, dict[str, float]]]:
    rows = {}
    for kind, plain in found["unsampled"].items():
        usual = statistics.median(plain)
        rows[kind] = {how: {"median_ms": round(statistics.median(times[kind]), 4),
                            "ratio": round(statistics.median(times[kind]) / usual, 3),
                            "over_1_2x": round(sum(t > 1.2 * usual for t in times[kind]) / len(times[kind]), 3)}
                      for how, times in found.items()}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=64)
    parser.add_argument("--out", default="sampling_cost.json")
    args = parser.parse_args()
    rows = summary(measure(args.rounds, args.calls))
    print(f"{'call':22} {'unsampled ms':>18} {'closely':>16} {'sparsely':>16}   (median: ratio; share of calls over 1.2x)")
    for kind, row in rows.items():
        cells = [f"{row[how]['ratio']:.3f}x {row[how]['over_1_2x']:6.1%}" for how in ("closely", "sparsely")]
        print(f"{kind:22} {row['unsampled']['median_ms']:9.4f} {row['unsampled']['over_1_2x']:6.1%}  {cells[0]:>16} {cells[1]:>16}")
    with open(args.out, "w") as out:
        json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()

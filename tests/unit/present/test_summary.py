"""A run at a glance: rates, fast_p and the geometric mean."""

from harness.present.summary import summarize_run, summary_table
from harness.records import Result, Status


def test_summary_rates_exclude_skipped():
    def result(status, value=None):
        return Result(run_id="r", problem="p", candidate=f"c{status}{value}", status=status, speedup=value,
                      candidate_hash="h")
    summary = summarize_run([result(Status.ok, 2.0), result(Status.ok, 0.5), result(Status.compile_error),
                         result(Status.mismatch), result(Status.skipped)])
    assert summary.total == 5 and summary.correct_rate == 0.5 and summary.compiled_rate == 0.75
    assert summary.fast_p["1"] == 0.25 and summary.fast_p["0"] == 0.5
    assert abs(summary.geomean_speedup - 1.0) < 1e-9


def test_the_geometric_mean_leaves_out_speedups_no_logarithm_takes():
    """Records written elsewhere (an older run, a caller of the API) may hold 0 or a negative."""
    def result(value):
        return Result(run_id="r", problem="p", candidate=f"c{value}", status=Status.ok, speedup=value, candidate_hash="h")
    summary = summarize_run([result(4.0), result(1.0), result(0.0), result(-2.0), result(float("inf"))])
    assert abs(summary.geomean_speedup - 2.0) < 1e-9


def test_end_of_run_table_fits_100_columns_sorts_naturally_and_says_where_the_full_table_is():
    long = "level2/" + "x" * 120
    results = [Result(run_id="r", problem=f"{n}_Conv2d_Subtract_Subtract_Mish_with_a_long_name", status=status,
                      candidate=f"{long}/{n}_{i}.py", speedup=1.0 + i if status is Status.ok else None,
                      candidate_hash="h")
               for n in (1, 2, 12) for i, status in enumerate([Status.ok, Status.mismatch, Status.ok, Status.skipped])]
    table = summary_table(results, "reports/r/index.html")
    lines = table.splitlines()
    assert max(len(line) for line in lines[:-1]) <= 100
    assert [line.split("_")[0] for line in lines[1:4]] == ["1", "2", "12"]
    assert "2/3" in lines[1] and "3.00x" in lines[1] and lines[1].endswith("1_2.py")
    assert lines[-1] == "every candidate with its verdict and reason: reports/r/index.html"


def test_the_end_of_run_table_counts_candidates_timed_on_a_busy_machine():
    def result(name, flags):
        return Result(run_id="r", problem="p", candidate=name, status=Status.ok, speedup=1.0, candidate_hash="h", flags=flags)

    quiet = summary_table([result("a.py", [])], "index.html")
    assert "busy" not in quiet
    busy = summary_table([result("a.py", ["busy_machine"]), result("b.py", ["busy_machine", "no_custom_kernel"]),
                          result("c.py", [])], "index.html")
    assert "timed while other processes kept the CPU busy: 2 (flag busy_machine)" in busy.splitlines()
    throttled = summary_table([result("a.py", ["gpu_throttled"]), result("b.py", [])], "index.html")
    assert "timed while the GPU's clocks were held down: 1 (flag gpu_throttled)" in throttled.splitlines()
    assert "held down" not in busy

"""A run at a glance: rates, fast_p and the geometric mean."""

from harness.present.summary import summarize_run
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

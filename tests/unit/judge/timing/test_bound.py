"""How far a worker's reported times are believed: the parent's clock, less the harness's overhead
measured on the reference just before, less a slack."""

import statistics

import pytest

from harness.cpu.device import Cpu
from harness.judge.gpu import Gpu
from harness.judge.timing.bound import timing_bound as bound_on
from harness.judge.timing.bound import vouched_median
from harness.judge.timing.timed import Timed
from harness.records import TimingBound


def timing_bound(timed, reference_overhead_ms, reference_commit_ms, device):
    """The bound on `device` ("cpu" or "cuda"), with its least slack and overhead error."""
    kind = {"cpu": Cpu, "cuda": Gpu}[device]
    return bound_on(timed, reference_overhead_ms, reference_commit_ms, kind.least_slack_ms, kind.overhead_error)

def vouched(timed: Timed, reference_overhead_ms: list[float]) -> tuple[float, str | None]:
    return vouched_median(timed.reported_ms, timing_bound(timed, reference_overhead_ms, [], "cpu"))


def test_reported_times_are_believed_as_far_as_the_parents_clock_allows():
    honest = Timed(reported_ms=[5.0] * 9, wall_ms=[5.6] * 9)
    assert vouched(honest, [0.6, 0.62, 0.58]) == (5.0, None)
    forged = Timed(reported_ms=[0.001] * 9, wall_ms=[5.6] * 9)
    median, why = vouched(forged, [0.6, 0.62, 0.58])
    # Contradicted by the clock beyond the slack (1 ms here): timed by the clock, keeping none of it.
    assert median == pytest.approx(5.0) and "the speedup uses" in why and "saw 5.6 ms per call" in why
    noisy = Timed(reported_ms=[0.05] * 9, wall_ms=[0.65 + 0.3 * (i % 2) for i in range(9)])
    assert vouched(noisy, [0.6] * 5)[1] is None  # within the clock's slack: no flag
    assert statistics.median(noisy.overhead_ms) > 0


def test_the_bound_is_kept_as_evidence_that_gives_the_same_median_again():
    """Each call's overhead in call order, the reference's, and the slack: enough to check a flag
    (or its absence) from the stored result alone."""
    forged = Timed(reported_ms=[0.001, 0.002, 0.001], wall_ms=[5.6, 5.7, 5.5])
    bound = timing_bound(forged, [0.6, 0.62, 0.58], [], "cpu")
    assert bound.overhead_ms == [5.599, 5.698, 5.499] and bound.reference_overhead_ms == [0.6, 0.62, 0.58]
    assert bound.slack_ms == 1.0  # the CPU's least slack, above four deviations of the reference's
    stored = TimingBound.model_validate_json(bound.model_dump_json())
    assert vouched_median(forged.reported_ms, stored) == vouched(forged, [0.6, 0.62, 0.58])


def test_a_commit_skipped_gains_a_forger_nothing():
    """A worker that writes its outputs where the commit would put them, as it computes them,
    skips the commit the reference pays (about as long as a tiny relu's call): the bound
    subtracts no more commit than the call's own."""
    reference_overhead, reference_commit = [0.02] * 9, [0.01] * 9
    honest = Timed(reported_ms=[0.03] * 9, wall_ms=[0.05] * 9, commit_ms=[0.01] * 9, batch=1000)
    skipper = Timed(reported_ms=[1e-6] * 9, wall_ms=[0.04] * 9, commit_ms=[0.0] * 9, batch=1000)
    for timed, least in ((honest, 0.03), (skipper, 0.0289)):  # its 0.03 ms of work, less the slack
        bound = timing_bound(timed, reference_overhead, reference_commit, "cpu")
        assert vouched_median(timed.reported_ms, bound)[0] >= least
    stored = TimingBound.model_validate_json(timing_bound(skipper, reference_overhead, reference_commit,
                                                          "cpu").model_dump_json())
    assert stored.commit_ms == [0.0] * 9 and stored.reference_commit_ms == reference_commit


def test_a_forged_time_in_a_batch_is_timed_by_the_commands_wall_time():
    """Twenty calls of 1 ms each to a command, reported as 1 ns: the command's wall time, less
    the reference's overhead, times them all (the slack, a twentieth of a millisecond per call,
    spares only calls whose reports the clock does not contradict)."""
    forged = Timed(reported_ms=[1e-7] * 9, wall_ms=[1.05] * 9, batch=20)
    median, why = vouched(forged, [0.05] * 5)
    assert median == pytest.approx(1.0) and why
    assert timing_bound(forged, [0.05] * 5, [], "cpu").slack_ms == 0.05
    within = Timed(reported_ms=[0.96] * 9, wall_ms=[1.05] * 9, batch=20)  # 0.04 ms short: within the slack
    assert vouched(within, [0.05] * 5) == (pytest.approx(0.96), None)


def test_on_the_cpu_an_honest_process_may_pay_more_overhead_than_the_references():
    """Another process's per-call overhead came to up to 1.39 times the reference's on the 2-core
    VM: a C++ relu (13.5 us calls, 18.4 us of overhead against the reference's 13.6) was flagged
    and cut to 0.7 of its speed. Up to 40% more is the slack's; a 1 ns report still is not
    believed, and on a GPU the slack is as it was."""
    reference = [0.0136, 0.0138, 0.0133, 0.0136, 0.0137, 0.0134, 0.0136, 0.0135, 0.0137]
    slower_process = Timed(reported_ms=[0.0135] * 5, wall_ms=[0.0135 + 0.0184] * 5, batch=555)
    bound = timing_bound(slower_process, reference, [], "cpu")
    assert bound.slack_ms == pytest.approx(0.4 * 0.0136)
    assert vouched_median(slower_process.reported_ms, bound, 555) == (pytest.approx(0.0135), None)
    forged = Timed(reported_ms=[1e-6] * 5, wall_ms=[0.0135 + 0.0136] * 5, batch=555)
    median, why = vouched_median(forged.reported_ms, timing_bound(forged, reference, [], "cpu"), 555)
    assert median == pytest.approx(0.0135) and "the speedup uses" in why
    assert timing_bound(slower_process, reference, [], "cuda").slack_ms == pytest.approx(4 * 0.0001)  # its spread


def test_late_wake_ups_on_a_busy_machine_flag_no_honest_batch_but_forged_calls_stay_flagged():
    """Beside two busy loops on the 2-core VM some commands' wake-ups came up to 6 ms late; in
    three of five samples an honest 2 ms sleeper was flagged and cut to the clock's time. The
    contradiction is judged on the clock's lower quartile; the speed stays the median's."""
    reference = [0.08, 0.075, 0.085, 0.08, 0.08]  # per call, over 9-call commands
    late = [0.0, 4.5, 0.2, 4.0, 5.0]  # ms a command, beyond the reference's overhead
    honest = Timed(reported_ms=[2.13] * 5, wall_ms=[2.13 + 0.08 + extra / 9 for extra in late], batch=9)
    bound = timing_bound(honest, reference, [], "cpu")
    median, why = vouched_median(honest.reported_ms, bound, 9)
    assert why is None and median == pytest.approx(2.13 + (4.0 / 9 - bound.slack_ms))  # the median's late wake-up
    # A forger honest on one command in five, reporting half its time on the others: flagged.
    forged = Timed(reported_ms=[2.13, 1.07, 1.07, 1.07, 1.07], wall_ms=[2.13 + 0.08] * 5, batch=9)
    median, why = vouched_median(forged.reported_ms, timing_bound(forged, reference, [], "cpu"), 9)
    assert median == pytest.approx(2.13) and "the speedup uses" in why


def test_in_batches_a_report_far_below_the_clock_is_flagged_even_within_the_slack():
    """A few commands' jitter can make a batch's slack larger than a whole tiny call: there a
    worker that reported 1 ns, its overhead trimmed below the reference's, stood unflagged at
    10,266x (red team). In batches the report must also be within IMPLAUSIBLE_FACTOR of the
    clock; honest workers came out at up to 1.61 times their reports."""
    reference = [0.012, 0.0137, 0.0154, 0.0137, 0.012, 0.0154]  # per call, over 800-call commands
    forged = Timed(reported_ms=[1e-6] * 5, wall_ms=[0.0189] * 5, batch=800)
    bound = timing_bound(forged, reference, [], "cpu")
    assert bound.slack_ms > 0.0189 - 0.0137  # the slack hides it all
    assert vouched_median(forged.reported_ms, bound)[1] is None  # as one call to a command
    median, why = vouched_median(forged.reported_ms, bound, 800)
    assert median == pytest.approx(0.0189 - 0.0137) and "the speedup uses" in why
    honest = Timed(reported_ms=[0.0048] * 5, wall_ms=[0.0189] * 5, batch=800)
    assert vouched_median(honest.reported_ms, timing_bound(honest, reference, [], "cpu"), 800) == (0.0048, None)
    # A Python relu in a slow process: the clock saw 1.61 times its report, no forgery.
    slow_process = Timed(reported_ms=[0.012] * 5, wall_ms=[0.012 * 1.61 + 0.0137] * 5, batch=800)
    bound = timing_bound(slow_process, reference, [], "cpu")
    median, why = vouched_median(slow_process.reported_ms, bound, 800)
    assert why is None and median == pytest.approx(0.012, rel=0.05)
    half = Timed(reported_ms=[0.0051] * 5, wall_ms=[0.0189 + 0.0051] * 5, batch=800)  # half the clock's 0.0103 ms
    median, why = vouched_median(half.reported_ms, timing_bound(half, reference, [], "cpu"), 800)
    assert median == pytest.approx(0.0103) and "the speedup uses" in why
    # Far below the clock only within its resolution (a command's 1 ms floor over 800 calls): no flag.
    tiny = Timed(reported_ms=[0.0005] * 5, wall_ms=[0.0149] * 5, batch=800)
    assert vouched_median(tiny.reported_ms, timing_bound(tiny, reference, [], "cpu"), 800)[1] is None
    # One call to a command (a GPU's tiny kernel beside a millisecond of noisy overhead): the slack alone decides.
    tiny = Timed(reported_ms=[0.02] * 5, wall_ms=[1.12] * 5, batch=1)
    assert vouched_median(tiny.reported_ms, timing_bound(tiny, [0.8, 1.0, 1.2, 1.0, 0.8, 1.2], [], "cuda"))[1] is None

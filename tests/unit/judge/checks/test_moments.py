"""The checks that read one thing each at their moment: a constant answer over the trials, the
problem's own degeneracy, parameters initialised otherwise, threads left running, a median below
the hardware's floor, the clock's disagreement, no kernel of its own, and other sizes."""

from harness.judge.checking import Loaded, ProfileSeen, Replied, Shapes, TimedInputs, Timing, Trial, Trials
from harness.judge.checks import (degenerate_problem, faster_than_hardware, init_differs, input_insensitive,
                                  input_mutation, no_custom_kernel, shape_specialized, threads_left_running,
                                  timing_disagrees)
from harness.judge.timing.timed import Timed
from harness.judge.timing.stats import timing_stats
from harness.records import Status
from harness.worker.protocol import HardwareFloor, ParamDigest

STATS = timing_stats([1.0, 1.1, 0.9], "cuda_device")


def timing(vouched_ms=1.0, disagreement=None, floor=None, threads=0) -> Timing:
    return Timing(STATS, STATS, vouched_ms, disagreement, floor, threads)


def test_an_output_that_ignores_its_input_is_rejected_only_where_the_reference_does_not():
    changing, constant = [(1,), (2,), (3,)], [(0,), (0,), (0,)]
    found = input_insensitive.look(Trials(changing, constant, []))
    assert found.status is Status.rejected and found.flag == "input_insensitive" and "3 different inputs" in found.error
    assert input_insensitive.look(Trials(constant, constant, [])) is None  # degenerate: the reference is constant too
    assert input_insensitive.look(Trials(changing, changing, [])) is None
    assert input_insensitive.look(Trials(changing[:1], constant[:1], [])) is None  # one trial shows nothing


def test_a_changed_input_rejects_on_a_trial_and_on_a_checked_timed_call():
    on_trial = input_mutation.on_trial(Trial(2, [1]))
    assert on_trial.status is Status.rejected and "[1]" in on_trial.error
    timed = input_mutation.on_timed_call(TimedInputs(3, [0]))
    assert "checked timed call 3" in timed.error
    assert input_mutation.on_trial(Trial(2, [])) is None


def test_a_degenerate_problem_is_a_flag_with_what_makes_it_so():
    found = degenerate_problem.look(Trials([], [], ["all outputs are zero"]))
    assert found.status is None and found.evidence == ["the problem is degenerate: all outputs are zero"]
    assert degenerate_problem.look(Trials([], [], [])) is None


def test_parameters_that_differ_after_the_same_seed_are_flagged_only_in_the_same_layout():
    ref = [ParamDigest(name="w", shape=[2, 2], dtype="float32", sha256="a")]
    assert init_differs.look(Loaded(ref, [ParamDigest(name="w", shape=[2, 2], dtype="float32", sha256="b")])).flag == "init_differs"
    assert init_differs.look(Loaded(ref, [ParamDigest(name="w", shape=[4], dtype="float32", sha256="b")])) is None
    assert init_differs.look(Loaded(ref, ref)) is None


def test_threads_left_running_are_flagged_wherever_a_reply_says_so():
    assert threads_left_running.look(Replied(2)).flag == "threads_left_running"
    assert threads_left_running.look(timing(threads=1)).flag == "threads_left_running"
    assert threads_left_running.look(Replied(0)) is None


def test_a_median_below_half_the_hardware_floor_is_rejected():
    floor = HardwareFloor(floor_ms=1.0, bytes_moved=1, flops=0, peak_bytes_per_ms=1.0, peak_flops_per_ms=1.0)
    found = faster_than_hardware.look(timing(vouched_ms=0.4, floor=floor))
    assert found.status is Status.rejected and "below what this GPU can do" in found.error
    assert faster_than_hardware.look(timing(vouched_ms=0.6, floor=floor)) is None
    assert faster_than_hardware.look(timing(vouched_ms=1e-6)) is None  # no floor (a CPU run)


def test_the_clocks_disagreement_is_a_flag_with_its_figures():
    found = timing_disagrees.look(timing(disagreement="the worker reported 0.1 ms"))
    assert found.status is None and found.evidence == ["the worker reported 0.1 ms"]
    assert timing_disagrees.look(timing()) is None


def test_no_kernel_of_its_own_is_a_flag_with_its_reason():
    seen = ProfileSeen(code="", own_code=False, profiles=[], median_ms=1.0, reference_profile=None,
                       reference_median_ms=1.0, degenerate=False, output_elements=1,
                       no_custom_kernel="it compiles no kernel", timed=Timed(), reference_timed=Timed())
    assert no_custom_kernel.look(seen).evidence == ["it compiles no kernel"]


def test_wrong_at_other_sizes_is_a_flag_or_under_strict_shapes_a_mismatch():
    flagged = shape_specialized.look(Shapes("n=3", "wrong output", strict=False))
    assert flagged.status is None and flagged.evidence == ["at n=3: wrong output"]
    strict = shape_specialized.look(Shapes("n=3", "wrong output", strict=True))
    assert strict.status is Status.mismatch and strict.error == "correct at the benchmark's shape only; at n=3: wrong output"
    assert shape_specialized.look(Shapes("n=3", None, strict=True)) is None

"""The reference's recalibration: the per-call overhead a candidate's wall times are held to, and
the reference time its speedup is against; a first timing dragged up by slow calls looked at twice.
Its expected outputs: read in place, or kept for later candidates; a degenerate problem judged
from them a seed at a time."""

from pathlib import Path

import pytest
import torch

from harness.inputs.problems import discover_problems
from harness.judge import reference
from harness.judge.reference import ReferenceRunner, needs_second_look, surely_faster
from harness.judge.timer import Timed, timing_stats
from harness.records import EvalConfig, TimingStats
from harness.worker import processes
from tests.support import DATA


def recalibrating(median_ms: float, overheads: list[float], device: str = "cuda"):
    """A reference runner timed at `median_ms` whose next timed calls show `overheads`; and the
    plans it was asked to time."""
    runner = ReferenceRunner.__new__(ReferenceRunner)  # no worker: only the recalibration runs
    runner.config, runner.batch = EvalConfig(device=device), 1
    runner.timing = TimingStats(median_ms=median_ms, iqr_ms=0, mean_ms=median_ms, min_ms=median_ms, max_ms=median_ms,
                                n=1, samples_ms=[median_ms], clock="perf_counter")
    plans = []

    def time(plan, profiled, batch=None):
        plans.append(plan)
        calls = overheads[:plan.fixed]
        return Timed(reported_ms=[median_ms] * len(calls), wall_ms=[median_ms + o for o in calls])

    runner._time = time
    return runner, plans


def test_on_a_gpu_the_first_recalibration_call_is_not_counted():
    runner, plans = recalibrating(100.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0])
    assert runner.recalibrate(1).overhead_ms == pytest.approx([1.0, 1.1, 0.9, 1.0])
    assert plans[0].fixed == 1 + reference.RECALIBRATION_CALLS[0]
    runner, plans = recalibrating(100.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0], device="cpu")
    assert runner.recalibrate(1).overhead_ms == pytest.approx([3.0, 1.0, 1.1, 0.9])


def test_a_quick_reference_gets_more_recalibration_calls():
    fewest, most = reference.RECALIBRATION_CALLS
    runner, plans = recalibrating(0.2, [1.0] * 50)
    assert len(runner.recalibrate(1).overhead_ms) == most
    runner, plans = recalibrating(reference.RECALIBRATION_BUDGET_MS / (fewest + 2), [1.0] * 50)
    assert len(runner.recalibrate(1).overhead_ms) == fewest + 2


def test_on_a_gpu_a_quick_reference_warms_the_device_up_before_its_counted_calls():
    """The GPU's clocks fall while it idles: a 0.2 ms reference warms up for as many calls as
    the bound allows, a 100 ms one for one call; on the CPU nothing is uncounted."""
    fewest, most = reference.WARM_COMMANDS
    warm = [9.0] * most
    runner, plans = recalibrating(0.2, warm + [1.0] * 30)
    assert runner.recalibrate(1).overhead_ms == [1.0] * reference.RECALIBRATION_CALLS[1]
    assert plans[0].fixed == most + reference.RECALIBRATION_CALLS[1]
    runner, plans = recalibrating(4.0, [9.0] * 5 + [1.0] * 10)
    assert runner.recalibrate(1).overhead_ms == [1.0] * 5  # 20 ms of warm-up: five calls
    runner, plans = recalibrating(0.2, [1.0] * 50, device="cpu")
    runner.recalibrate(1)
    assert plans[0].fixed == reference.RECALIBRATION_CALLS[1]


def test_a_batched_gpu_recalibration_warms_up_for_its_commands_device_time():
    """20 ms of a 0.2 ms reference at 50 calls a command: two uncounted commands, not sixteen."""
    runner, plans = recalibrating(0.2, [9.0] * 2 + [1.0] * 30)
    assert runner.recalibrate(50).overhead_ms == [1.0] * reference.RECALIBRATION_CALLS[0]
    assert plans[0].fixed == 2 + reference.RECALIBRATION_CALLS[0]


def test_the_recalibration_times_the_reference_on_its_counted_calls():
    runner, _ = recalibrating(20.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0])
    recalibration = runner.recalibrate(1)
    assert recalibration.timing.median_ms == 20.0 and recalibration.timing.n == len(recalibration.overhead_ms)
    runner, _ = recalibrating(2.0, [3.0, 1.0, 1.1, 0.9, 1.0, 5.0], device="cpu")
    recalibration = runner.recalibrate(1)  # the first call's overhead counts, its time does not
    assert recalibration.timing.n == len(recalibration.overhead_ms) - 1


def test_a_batched_recalibration_counts_commands_and_makes_at_least_those_drift_correction_needs():
    """Its commands, not its calls, are what the budget counts: a 0.2 ms reference timed 100 calls
    to a command (20 ms each) makes the fewest a batched reference gets. A 20 ms reference,
    itself timed one call to a command, recalibrated at a quick candidate's batch of 100 (2 s a
    command) makes the fewest of all."""
    runner, plans = recalibrating(0.2, [1.0] * 50, device="cpu")
    runner.batch = 100
    runner.recalibrate(100)
    assert plans[0].fixed == reference.UNTIMED_CALLS + reference.SURELY_FASTER_CALLS
    runner, plans = recalibrating(20.0, [1.0] * 50, device="cpu")
    runner.recalibrate(100)
    assert plans[0].fixed == reference.RECALIBRATION_CALLS[0]


def test_a_batched_recalibration_can_correct_for_drift():
    """The quick problems batches are for are those whose first timing drifts most: a batched
    recalibration makes enough commands for `surely_faster` to trust."""
    runner, _ = recalibrating(0.2, [1.0] * 50, device="cpu")
    runner.timing, runner.batch = times(*[0.3] * 20), 100
    recalibration = runner.recalibrate(100)
    assert surely_faster(runner.timing, recalibration.timing) is recalibration.timing


def times(*samples_ms: float):
    return timing_stats(list(samples_ms), "perf_counter")


def test_a_speedup_is_against_the_reference_recalibrated_when_it_is_surely_faster_now():
    first = times(*[0.029] * 40 + [0.030] * 40)
    faster = times(*[0.024, 0.025, 0.026] * 4)
    assert surely_faster(first, faster) is faster


def test_a_reference_slower_now_or_within_noise_changes_no_speedup():
    """Slower now (a machine that got busier, or a GPU a candidate's leftover work keeps busy)
    would raise the speedup: never. Faster calls whose interval meets the first one's are noise,
    as are a few calls that all fall below the first interval (four: one time in sixteen
    below the median without drift)."""
    first = times(*[0.028, 0.029, 0.030, 0.031, 0.032] * 16)
    assert surely_faster(first, times(*[0.040] * 12)) is None
    overlapping = times(0.020, 0.021, 0.022, 0.023, 0.024, 0.025, 0.029, 0.029, 0.031, 0.032, 0.033, 0.034)
    assert overlapping.median_ms < first.median_ms and surely_faster(first, overlapping) is None
    four_below = times(0.020, 0.021, 0.022, 0.023)
    assert four_below.ci_high_ms < first.ci_low_ms and surely_faster(first, four_below) is None


def started(*timings: list[float]):
    """A CPU reference runner started with a worker whose successive timings report `timings`;
    and how many timings it asked for."""
    runner = ReferenceRunner.__new__(ReferenceRunner)  # no worker: load and timing are stand-ins
    runner.config = EvalConfig(device="cpu")
    runner.load = lambda: None
    asked = []

    def time(plan, profiled, warm_up=False, size=False, sample=False, tell_library_ms=0.0, sparse_enough=None):
        samples = timings[len(asked)]
        asked.append(profiled)
        return Timed(reported_ms=list(samples), wall_ms=[s + 1.0 for s in samples], stopped="time_budget")

    runner._time = time
    runner._batch_cap = lambda: 1
    runner.start()
    return runner, asked


def test_a_reference_median_dragged_up_by_slow_calls_is_timed_again_on_all_its_calls():
    # The 2-core VM's relu reference: three of five calls faulted in their 256 MB outputs.
    runner, asked = started([366.0, 349.0, 79.0, 58.0, 361.0], [64.0, 66.0, 80.0, 75.0, 65.0])
    assert asked == [1, 0]  # the second look is not profiled
    assert runner.timing.n == 10 and runner.timing.median_ms == pytest.approx(77.0)
    assert len(runner.timed.wall_ms) == 10


def test_a_reference_timed_within_its_usual_spread_is_timed_once():
    runner, asked = started([154.0, 166.0, 159.0, 182.0, 170.0], [10.0] * 5)
    assert asked == [1] and runner.timing.median_ms == 166.0
    assert needs_second_look([369.0, 80.0, 98.0, 80.0, 80.0]) is False  # one slow call moves no median
    assert needs_second_look([]) is False


def process_states(root: int) -> set[str]:
    return {Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] for pid in processes.tree(root)}


@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory):
    problem = next(p for p in discover_problems(DATA / "problems") if p.id == "tiny_relu")
    runner = ReferenceRunner(problem, EvalConfig(device="cpu"), tmp_path_factory.mktemp("key"))
    runner.load()
    yield runner
    runner.close()


def test_expected_outputs_are_read_in_place_with_the_reference_stopped_unless_kept_for_later_candidates(tiny_reference):
    """Read in place, nothing is copied: the reference's worker, idle meanwhile, is stopped for
    the block so that they stay as they are. Kept, they outlive the block for the next candidate."""
    with tiny_reference.expected(7) as (outputs, inputs):
        assert process_states(tiny_reference.worker.pid) == {"T"}
        assert torch.equal(outputs[0], inputs[0].relu())
        seen = outputs[0].clone()
    assert "T" not in process_states(tiny_reference.worker.pid)
    assert tiny_reference.budget_left == tiny_reference.memory_budget  # nothing kept
    with tiny_reference.expected(7, keep=True) as (kept, _):
        assert torch.equal(kept[0], seen)
    assert tiny_reference.budget_left < tiny_reference.memory_budget
    with tiny_reference.expected(7) as (again, _):
        assert again[0] is kept[0]


def test_a_degenerate_problem_is_judged_once_every_correctness_seed_was_seen_once(tiny_reference):
    """Fed one seed's outputs at a time, from whichever candidate got that far: the first seed's
    are copied (what was fed is read in place and reused; the copy counts against the memory the
    parent keeps until the problem is judged), later ones compared as they come, and a seed seen
    twice counts once."""
    first, ones = torch.ones(64, 256), [torch.ones(64, 256)]
    budget = tiny_reference.budget_left
    tiny_reference.watch_degenerate(1, [first])
    assert tiny_reference.budget_left == budget - first.nbytes  # its copy counts until judged
    first.fill_(5.0)  # the buffer it was read from, reused
    for seed in (2, 2):
        tiny_reference.watch_degenerate(seed, ones)
    assert tiny_reference.degenerate([1, 2, 3]) == []  # seed 3 not seen yet: its candidate failed before
    tiny_reference.watch_degenerate(3, ones)
    assert tiny_reference.degenerate([1, 2, 3]) == ["a constant output is within tolerance",
                                                    "outputs for 3 different inputs agree within tolerance"]
    assert tiny_reference.budget_left == budget
    tiny_reference.watch_degenerate(4, [torch.randn(64, 256)])  # judged already
    assert len(tiny_reference.degenerate([1, 2, 3])) == 2


def test_a_cpu_batch_is_capped_by_the_bytes_a_command_may_carry(tiny_reference):
    """tiny_relu: 64 KB of input and 64 KB of output a call."""
    per_call = 2 * 64 * 256 * 4
    assert tiny_reference._batch_cap() == min(reference.MAX_BATCH_CALLS, reference.BATCH_BYTES // per_call)
    assert tiny_reference.output_bytes == per_call // 2


def test_the_cap_keeps_only_the_trials_a_candidate_makes_and_stops_at_one_call(tiny_reference, monkeypatch):
    asked, expected = [], tiny_reference.expected

    def noting(seed, keep=False):
        asked.append(keep)
        return expected(seed, keep=keep)

    monkeypatch.setattr(tiny_reference, "expected", noting)
    monkeypatch.setattr(tiny_reference, "config", tiny_reference.config.model_copy(update={"correctness_trials": 1}))
    assert tiny_reference._batch_cap() > 1 and asked == [True, False]  # no candidate makes a second trial
    asked.clear()
    monkeypatch.setattr(reference, "BATCH_BYTES", 1)
    assert tiny_reference._batch_cap() == 1 and len(asked) == 1  # one call whatever the second trial says


def test_outputs_whose_shape_changes_from_seed_to_seed_are_never_batched(tmp_path):
    """They cannot be stacked a row per call: such a problem's calls are timed one to a command."""
    (tmp_path / "nonzero.py").write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.nonzero(x > 0)\n\n"
        "def get_inputs():\n    return [torch.randn(64)]\n\n"
        "def get_init_inputs():\n    return []\n")
    problem = next(iter(discover_problems(tmp_path)))
    runner = ReferenceRunner(problem, EvalConfig(device="cpu"), tmp_path / "key")
    try:
        runner.load()
        assert runner._batch_cap() == 1
    finally:
        runner.close()


def test_inputs_fed_for_a_batch_are_read_back_per_call_and_only_changed_ones_copied(tiny_reference):
    """The candidate's forward wrote into the second call's inputs only: that call's come back,
    as its forward left them; the others' are None."""
    import os

    from harness.worker.parent import Placement, Worker

    target = Worker(Placement(), role="candidate", device="cpu", timeout_s=60, key_dir=tiny_reference.worker.key_dir)
    try:
        seeds = [11, 12, 13]
        [fed] = tiny_reference.feeding(target)(seeds)  # stacked: a row per call
        assert fed.shape == [3, 64, 256]
        with target.fed_back([fed.row(1)], "test") as views:  # stands in for a forward writing into call 2's
            views[0].fill_(7.0)
        left = tiny_reference.fed_inputs_left(target, [(seed, [fed.row(index)]) for index, seed in enumerate(seeds)])
        assert left[0] is None and left[2] is None and torch.equal(left[1][0], torch.full((64, 256), 7.0))
    finally:
        target.close()


def test_how_long_the_gpu_stays_busy_with_another_process_s_work_counts_from_the_first_look(monkeypatch):
    """Idle at the first look: nothing. Busy (a tiny kernel's round trip of milliseconds, the GPU
    running another context's work): until it is idle, or the whole wait."""
    from harness.worker.protocol import Reply

    monkeypatch.setattr(reference, "IDLE_POLL_S", 0.002)
    runner = ReferenceRunner.__new__(ReferenceRunner)

    def answering(*round_trips_ms):
        answers = iter(round_trips_ms)
        runner._request = lambda command, what: Reply(ok=True, elapsed_ms=next(answers))

    answering(0.013)
    assert runner.busy_ms(0.1) == 0.0 and (answering(0.013) or runner.device_idle_within(0.1))
    answering(2.4, 2.4, 0.013)
    assert 4.0 <= runner.busy_ms(0.1) < 100.0  # two polls apart, at least
    answering(*[2.4] * 1000)
    assert runner.busy_ms(0.01) == 10.0
    answering(*[2.4] * 1000)
    assert not runner.device_idle_within(0.01)

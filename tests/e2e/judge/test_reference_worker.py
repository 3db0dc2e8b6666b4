"""A reference worker's expected outputs: read in place, or kept for later candidates; a degenerate
problem judged from them a seed at a time; the batch a timed command may make."""

from pathlib import Path

import pytest
import torch

from harness.cpu import device as cpu_device
from harness.cpu.device import Cpu
from harness.cpu.feeding import Feeder
from harness.inputs.problems import discover_problems
from harness.judge import reference
from harness.judge.reference import ReferenceRunner
from harness.records import EvalConfig
from harness.worker import processes
from tests.support import DATA


def process_states(root: int) -> set[str]:
    return {Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] for pid in processes.tree(root)}


@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory):
    problem = next(p for p in discover_problems(DATA / "problems") if p.id == "tiny_relu")
    runner = ReferenceRunner(problem, EvalConfig(device="cpu"), Cpu(), tmp_path_factory.mktemp("key"))
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
    assert tiny_reference._batch_cap() == min(reference.MAX_BATCH_CALLS, cpu_device.BATCH_BYTES // per_call)
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
    monkeypatch.setattr(cpu_device, "BATCH_BYTES", 1)
    assert tiny_reference._batch_cap() == 1 and len(asked) == 1  # one call whatever the second trial says


def test_outputs_whose_shape_changes_from_seed_to_seed_are_never_batched(tmp_path):
    """They cannot be stacked a row per call: such a problem's calls are timed one to a command."""
    (tmp_path / "nonzero.py").write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.nonzero(x > 0)\n\n"
        "def get_inputs():\n    return [torch.randn(64)]\n\n"
        "def get_init_inputs():\n    return []\n")
    problem = next(iter(discover_problems(tmp_path)))
    runner = ReferenceRunner(problem, EvalConfig(device="cpu"), Cpu(), tmp_path / "key")
    try:
        runner.load()
        assert runner._batch_cap() == 1
    finally:
        runner.close()


def test_inputs_fed_for_a_batch_are_read_back_per_call_and_only_changed_ones_copied(tiny_reference):
    """The candidate's forward wrote into the second call's inputs only: that call's come back,
    as its forward left them; the others' are None."""
    from harness.worker.parent import Placement, Worker

    target = Worker(Placement(), role="candidate", device="cpu", timeout_s=60, key_dir=tiny_reference.worker.key_dir)
    try:
        seeds = [11, 12, 13]
        feeder = Feeder(tiny_reference)
        [fed] = feeder.feed(target, seeds)  # stacked: a row per call
        assert fed.shape == [3, 64, 256]
        with target.fed_back([fed.row(1)], "test") as views:  # stands in for a forward writing into call 2's
            views[0].fill_(7.0)
        left = feeder.inputs_left(target, [(seed, [fed.row(index)]) for index, seed in enumerate(seeds)])
        assert left[0] is None and left[2] is None and torch.equal(left[1][0], torch.full((64, 256), 7.0))
    finally:
        target.close()

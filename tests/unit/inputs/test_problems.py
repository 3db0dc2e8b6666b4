"""Every shipped problem loads, runs on CPU at reduced sizes, and gives finite, deterministic
outputs; discovery accepts our layout and KernelBench level folders."""

import shutil

import pytest
import torch

from harness.inputs.problems import ProblemError, discover_problems, input_size_names, load_module, shrink_input_sizes

from tests.support import REPO

SHIPPED = discover_problems(REPO / "problems")


def test_ships_the_seed_problems_and_at_least_twelve_more():
    ids = {p.id for p in SHIPPED}
    assert {"conv2d_square", "conv2d_asym_input", "conv2d_asym_kernel"} <= ids
    assert len(ids) >= 15


def run_small(problem, seed):
    module = load_module(problem.path, f"p_{problem.id}")
    shrink_input_sizes(module)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    torch.manual_seed(seed)
    with torch.no_grad():
        return model(*module.get_inputs())


@pytest.mark.parametrize("problem", SHIPPED, ids=lambda p: p.id)
def test_problem_runs_small_finite_and_deterministic(problem):
    first, second = run_small(problem, 1), run_small(problem, 1)
    assert isinstance(first, torch.Tensor)
    assert torch.isfinite(first).all()
    assert torch.equal(first, second)
    assert not torch.equal(first, run_small(problem, 2)) or first.numel() == 1


def test_seed_problem_sizes_match_kernelbench():
    square = load_module(REPO / "problems" / "conv2d_square.py", "sq")
    assert (square.batch_size, square.in_channels, square.out_channels, square.kernel_size) == (16, 16, 128, 3)
    assert (square.height, square.width) == (1024, 1024)
    kernel = load_module(REPO / "problems" / "conv2d_asym_kernel.py", "ak")
    assert kernel.kernel_size == (5, 9) and (kernel.batch_size, kernel.in_channels, kernel.out_channels) == (8, 32, 64)


def test_input_sizes_exclude_constructor_arguments():
    module = load_module(REPO / "problems" / "conv2d_square.py", "sq2")
    assert input_size_names(module) == ["batch_size", "height", "width"]


def test_kernelbench_level_folder_is_accepted(tmp_path):
    level = tmp_path / "level1"
    level.mkdir()
    shutil.copy(REPO / "problems" / "conv2d_square.py", level / "63_conv_standard_2D__square_input__square_kernel.py")
    for root in (tmp_path, level):
        (problem,) = discover_problems(root)
        assert problem.kernelbench_level == 1 and problem.kernelbench_number == 63


def test_bad_problem_files_are_usage_errors(tmp_path):
    with pytest.raises(ProblemError, match="does not exist"):
        discover_problems(tmp_path / "missing")
    (tmp_path / "broken.py").write_text("def get_inputs(:\n")
    with pytest.raises(ProblemError, match="not valid Python"):
        discover_problems(tmp_path)
    (tmp_path / "broken.py").write_text("def get_inputs(): return []\n")
    with pytest.raises(ProblemError, match="missing Model"):
        discover_problems(tmp_path)


def test_per_problem_tolerance_comes_from_module_constants(tmp_path):
    text = (REPO / "problems" / "relu.py").read_text() + "\nATOL = 1e-3\nRTOL = 2e-3\n"
    (tmp_path / "relu.py").write_text(text)
    (problem,) = discover_problems(tmp_path)
    assert (problem.atol, problem.rtol) == (1e-3, 2e-3)

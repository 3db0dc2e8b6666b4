"""What a command judges, found without torch: paths checked first, and a run that would judge
nothing refused."""

import pytest

from harness.errors import UsageError
from harness.inputs.discovery import checked_paths, discover, some_named

from tests.support import DATA, REPO


def test_flat_kernelbench_candidates_against_another_levels_problems_are_refused(tmp_path):
    """They had recorded a run of `skipped` and exited 0."""
    level = tmp_path / "level2"
    level.mkdir()
    (level / "1_Conv2D_ReLU_BiasAdd.py").write_text((REPO / "problems" / "relu.py").read_text())
    flat = tmp_path / "runs"
    flat.mkdir()
    (flat / "level_1_problem_19_sample_0_kernel.py").write_text("class ModelNew: pass\n")
    problems, candidates = discover(level, flat)
    with pytest.raises(UsageError, match=r"none of the 1 candidates names a problem in .*level2.*level_1_problem_19"):
        some_named(candidates, level)
    named = discover(DATA / "problems", DATA / "candidates")[1]
    some_named(named, DATA / "problems")  # some name theirs: judged, the others skipped
    some_named([], level)


def test_paths_that_are_not_directories_are_named(tmp_path):
    (tmp_path / "file.py").write_text("")
    with pytest.raises(UsageError, match="problems directory .* does not exist"):
        checked_paths(tmp_path / "nowhere", None)
    with pytest.raises(UsageError, match="is a file: eval takes a directory"):
        checked_paths(tmp_path, tmp_path / "file.py")

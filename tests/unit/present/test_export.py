"""KernelBench's eval_results.json: keyed the way KernelBench keys results (one file per level,
the problem's number within it, a list of samples each with its sample_id), read back the way
KernelBench's own scripts read it."""

import json

import pytest

from harness.present.export import ExportError, write_export
from harness.records import Result, Status, TimingStats

LEVELS = {"1_Square_matrix_multiplication_": 1, "12_Matmul_with_diagonal_matrices_": 1,
          "1_Conv2D_ReLU_BiasAdd": 2, "relu": None}


def result(problem, candidate, status, speedup=None):
    timing = TimingStats(median_ms=1.0, iqr_ms=0.1, mean_ms=1.1, min_ms=0.9, max_ms=1.3, n=20, samples_ms=[1.0] * 20,
                         clock="cuda_device") if speedup else None
    return Result(run_id="r", problem=problem, candidate=candidate, status=status, speedup=speedup, timing=timing,
                  reference_timing=timing, candidate_hash=candidate)


RESULTS = [
    result("1_Square_matrix_multiplication_", "level_1_problem_1_sample_0_kernel.py", Status.ok, 2.0),
    result("1_Square_matrix_multiplication_", "level_1_problem_1_sample_3_kernel.py", Status.mismatch),
    result("12_Matmul_with_diagonal_matrices_", "level_1_problem_12_sample_0_kernel.py", Status.ok, 1.5),
    result("1_Conv2D_ReLU_BiasAdd", "level_2_problem_1_sample_0_kernel.py", Status.compile_error),
    result("1_Conv2D_ReLU_BiasAdd", "1_Conv2D_ReLU_BiasAdd/hand_written.py", Status.ok, 0.5),
    result("relu", "relu/a.py", Status.runtime_error),
    result("relu", "relu/b.py", Status.skipped),
]


def kernelbench_reads(eval_results: dict) -> dict:
    """What KernelBench's scripts do with the file: keys sorted as numbers (eval_from_generations),
    then sample 0 of each problem, at most one per sample id (benchmark_eval_analysis)."""
    ordered = dict(sorted(eval_results.items(), key=lambda item: int(item[0])))
    greedy = {}
    for key, samples in ordered.items():
        entry = [s for s in samples if s["sample_id"] == 0]
        assert len(entry) <= 1, "Multiple entries for sample_id = 0"
        if entry:
            greedy[key] = entry[0]
    return greedy


@pytest.fixture
def exported(tmp_path):
    message = write_export("kernelbench", RESULTS, "H200", tmp_path / "kb", LEVELS)
    read = {d: json.loads((tmp_path / "kb" / d / "eval_results.json").read_text()) for d in ("level_1", "level_2", ".")}
    return message, read, tmp_path / "kb"


def test_level_1_and_level_2_problems_with_the_same_number_stay_apart(exported):
    _, read, _ = exported
    assert list(read["level_1"]) == ["1", "12"] and list(read["level_2"]) == ["1"]
    level1, level2 = kernelbench_reads(read["level_1"]), kernelbench_reads(read["level_2"])
    assert level1["1"]["metadata"]["problem"] == "1_Square_matrix_multiplication_"
    assert (level1["1"]["compiled"], level1["1"]["correctness"], level1["1"]["runtime"]) == (True, True, 1.1)
    assert level2["1"]["metadata"]["problem"] == "1_Conv2D_ReLU_BiasAdd"
    assert (level2["1"]["compiled"], level2["1"]["correctness"], level2["1"]["runtime"]) == (False, False, -1.0)


def test_every_judged_result_round_trips_with_its_sample_id(exported):
    message, read, _ = exported
    samples = {s["metadata"]["candidate"]: s for file in read.values() for key in file for s in file[key]}
    judged = [r for r in RESULTS if r.status is not Status.skipped]
    assert set(samples) == {r.candidate for r in judged}
    for r in judged:
        assert samples[r.candidate]["metadata"]["status"] == r.status.value
        assert samples[r.candidate]["correctness"] == (r.status is Status.ok)
    assert samples["level_1_problem_1_sample_3_kernel.py"]["sample_id"] == 3  # kept, not renumbered
    assert samples["1_Conv2D_ReLU_BiasAdd/hand_written.py"]["sample_id"] == 1  # the next free id
    assert "1 skipped candidate(s) left out" in message


def test_problems_from_no_level_folder_are_keyed_by_id_and_fast_p_is_per_file(exported):
    _, read, out = exported
    assert list(read["."]) == ["relu"]
    fast_p = json.loads((out / "level_1" / "fast_p.json").read_text())
    assert fast_p["total"] == 3 and fast_p["fast_p"]["1"] == 2 / 3


def test_two_problems_on_one_level_and_number_are_refused_not_merged(tmp_path):
    clash = [result("3_Batched_matmul", "3_Batched_matmul/a.py", Status.ok, 1.0),
             result("3_Batched_matrix_multiplication", "3_Batched_matrix_multiplication/a.py", Status.ok, 1.0)]
    with pytest.raises(ExportError, match="level_1/3: 3_Batched_matmul, 3_Batched_matrix_multiplication"):
        write_export("kernelbench", clash, "H200", tmp_path / "kb", {r.problem: 1 for r in clash})
    assert not (tmp_path / "kb").exists()

"""Scheduling: who gets which cores and GPUs, how lanes pick work, and that a run gives the same
verdicts however it is spread out (locally with several builds at once, or on Ray)."""

import importlib.util
import json
import os
import threading
import time

import pytest

from harness.build import toolchain
from harness.candidates import discover_candidates
from harness.cli import main
from harness.pipeline import ActiveSet, Pipeline, ReadyQueue, plan_resources, visible_gpu
from harness.problems import discover_problems
from harness.records import EvalConfig, Status

from .conftest import DATA
from .test_cli_e2e import EXPECTED, eval_args


def test_cpu_run_uses_every_core_for_builds_and_pins_nothing(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    resources = plan_resources("cpu", None, None)
    assert resources.gpus == [] and resources.jobs == 16
    assert resources.build_cpus is None and resources.lane_cpus is None


def test_gpu_run_keeps_cores_apart_for_each_lane(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    one = plan_resources("cuda", [0], None)
    assert one.lane_cpus == [[12, 13, 14, 15]] and one.build_cpus == list(range(12)) and one.jobs == 12
    two = plan_resources("cuda", [0, 2], 3)
    assert two.gpus == [0, 2] and two.jobs == 3
    assert two.lane_cpus == [[8, 9, 10, 11], [12, 13, 14, 15]] and two.build_cpus == list(range(8))


def test_too_few_cores_to_keep_apart_means_no_pinning(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    resources = plan_resources("cuda", [0, 1], None)
    assert resources.lane_cpus is None and resources.build_cpus is None and resources.jobs == 2


def test_worker_sees_the_gpu_this_process_numbers_index(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_gpu(1) == "1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3, 5")
    assert visible_gpu(1) == "5"


def test_lane_keeps_to_its_problem_and_idle_lanes_take_another():
    ready = ReadyQueue(["a", "b"], expected=4)
    for item in ("a1", "a2"):
        ready.put("a", item)
    for item in ("b1", "b2"):
        ready.put("b", item)
    assert ready.take(0) == "a1"
    assert ready.take(1) == "b1"  # lane 0 holds a
    assert ready.take(0) == "a2"
    assert ready.take(0) == "b2"
    assert ready.take(0) is None and ready.take(1) is None


def test_lane_waits_for_a_build_then_stops_when_nothing_is_left():
    ready = ReadyQueue(["a"], expected=2)
    taken = []
    lane = threading.Thread(target=lambda: taken.extend([ready.take(0), ready.take(0)]))
    lane.start()
    time.sleep(0.2)
    assert taken == []
    ready.put("a", "built")
    ready.expect_fewer()  # the other build failed: its verdict needs no lane
    lane.join(timeout=5)
    assert taken == ["built", None]


def test_active_set_reports_everyone_that_ran_since_the_last_look():
    active = ActiveSet()
    active.enter("x")
    active.enter("y")
    active.leave("y")
    assert active.drain() == {"x", "y"}
    assert active.drain() == {"x"}  # still running
    active.leave("x")
    assert active.drain() == {"x"}
    assert active.drain() == set()


def test_cpu_run_times_nothing_while_a_build_runs(tmp_path):
    """On the CPU the CPU is what is timed: the first evaluation waits for the last build."""
    problems = [p for p in discover_problems(DATA / "problems") if p.id == "tiny_relu"]
    candidates = [c for c in discover_candidates(DATA / "candidates", problems)
                  if c.rel_path in ("tiny_relu/ok_cpp.py", "tiny_relu/mismatch.py")]
    config = EvalConfig(device="cpu", trials=3, correctness_trials=1, timeout_s=20)
    resources = plan_resources("cpu", None, None)
    builds_done_when_judged = {}
    with Pipeline(problems, candidates, config, tmp_path, "run", resources, toolchain("cpu", [])) as pipeline:
        for result in pipeline.results():
            builds_done_when_judged[result.candidate] = (pipeline.builds_done, result.status)
    assert builds_done_when_judged == {"tiny_relu/ok_cpp.py": (1, Status.ok),
                                       "tiny_relu/mismatch.py": (1, Status.mismatch)}


def test_usage_errors_for_bad_scale_options(tmp_path, capsys):
    assert main(eval_args(tmp_path, DATA / "candidates", "--gpus", "0")) == 2
    assert "--gpus needs a CUDA run" in capsys.readouterr().err
    assert main(eval_args(tmp_path, DATA / "candidates", "--jobs", "0")) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err
    assert main(eval_args(tmp_path, DATA / "candidates", "--gpus", "0", "--backend", "ray")) == 2
    assert "--gpus is for local runs" in capsys.readouterr().err


def require_ray():
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI"):
            pytest.fail("Ray tests need Ray (pip install -e '.[ray]'); CI installs it")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")


def test_ray_backend_gives_the_verdicts_of_a_local_run(tmp_path):
    """Builds as Ray CPU tasks, evaluations as Ray tasks, on a local Ray instance: the same
    verdict for every candidate, one per verdict kind, as the local run (test_cli_e2e)."""
    require_ray()
    code = main(eval_args(tmp_path, DATA / "candidates", "--backend", "ray", "--jobs", "2"))
    assert code == 0
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert {r["candidate"]: r["status"] for r in results} == EXPECTED
    assert any(r["build_s"] for r in results)

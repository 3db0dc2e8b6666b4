"""Scheduling end to end: a CPU run times nothing while a build runs, bad scale options are usage
errors, and a run gives the same verdicts however it is spread out (locally or on Ray)."""

import importlib.util
import json
import os

import pytest

from harness.builds.cache import BuildCache, toolchain
from harness.cli import main
from harness.inputs.candidates import discover_candidates
from harness.inputs.problems import discover_problems
from harness.records import EvalConfig, HostEnv, SandboxMode, Status
from harness.schedule.local import Pipeline
from harness.schedule.plan import RunPlan, plan_resources
from harness.worker.sandbox import decide_policy, default_limits
from tests.support import DATA, EXPECTED, eval_args


def test_cpu_run_times_nothing_while_a_build_runs(tmp_path):
    """On the CPU the CPU is what is timed: the first evaluation waits for the last build."""
    problems = [p for p in discover_problems(DATA / "problems") if p.id == "tiny_relu"]
    candidates = [c for c in discover_candidates(DATA / "candidates", problems)
                  if c.rel_path in ("tiny_relu/ok_cpp.py", "tiny_relu/mismatch.py")]
    config = EvalConfig(device="cpu", trials=3, correctness_trials=1, timeout_s=20)
    resources = plan_resources("cpu", None, None)
    builds_done_when_judged = {}
    host = HostEnv.from_environ(os.environ, str(tmp_path))
    sandbox = decide_policy(SandboxMode.auto, default_limits())
    plan = RunPlan(problems, config, "run", BuildCache(tmp_path, toolchain("cpu", [], host)), resources, host, sandbox)
    with Pipeline(plan, candidates) as pipeline:
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

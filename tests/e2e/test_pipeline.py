"""Scheduling end to end: a CPU run freezes its other workers while it times, bad scale options are usage
errors, and a run gives the same verdicts however it is spread out (locally or on Ray)."""

import contextlib
import json
import os
import shutil
import time


from harness.builds.cache import BuildCache, toolchain
from harness.cli import main
from harness.inputs.candidates import discover_candidates
from harness.inputs.problems import discover_problems
from harness.records import EvalConfig, HostEnv, SandboxMode, Status
from harness.schedule.local import Pipeline
from harness.schedule.plan import RunPlan, plan_resources
from harness.cpu.quiet import QuietGate
from harness.worker import processes
from harness.worker.sandbox import decide_policy, default_limits
from tests.support import DATA, EXPECTED, eval_args, require_ray


def stopped_soon(pid: int) -> bool:
    """SIGSTOP lands asynchronously: give it a moment."""
    deadline = time.monotonic() + 1.0
    while not processes.stopped(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return processes.stopped(pid)


def test_cpu_run_freezes_every_other_worker_while_it_times(tmp_path, monkeypatch):
    """On the CPU the CPU is what is timed: a build (and the next worker booting) runs beside an
    evaluation, but every other process of the run is stopped while a model is timed, and resumed."""
    (tmp_path / "c" / "tiny_relu").mkdir(parents=True)
    shutil.copy(DATA / "candidates" / "tiny_relu" / "ok_cpp.py", tmp_path / "c" / "tiny_relu")
    shutil.copy(DATA / "integrity" / "tiny_relu" / "honest_twin.py", tmp_path / "c" / "tiny_relu")
    problems = [p for p in discover_problems(DATA / "problems") if p.id == "tiny_relu"]
    candidates = discover_candidates(tmp_path / "c", problems)
    windows, real_window = [], QuietGate.window

    @contextlib.contextmanager
    def watched(gate, timed):
        with real_window(gate, timed):
            spared = set(timed).union(*(processes.descendants(pid) for pid in timed))
            others = [pid for launcher in processes.find_with_environment(gate.marker)
                      for pid in (launcher, *processes.descendants(launcher)) if pid not in spared]
            windows.append({pid: stopped_soon(pid) for pid in others})
            yield

    monkeypatch.setattr(QuietGate, "window", watched)
    config = EvalConfig(device="cpu", trials=3, correctness_trials=1, timeout_s=20)
    host = HostEnv.from_environ(os.environ, str(tmp_path))
    sandbox = decide_policy(SandboxMode.auto, default_limits())
    plan = RunPlan(problems, config, "run", BuildCache(tmp_path / "b", toolchain("cpu", [], host, sandbox.namespaces)),
                   plan_resources("cpu", None, None), host, sandbox)
    with Pipeline(plan, candidates) as pipeline:
        statuses = {result.candidate: result.status for result in pipeline.results()}
        builds_done = pipeline.builds_done
    assert statuses == {"tiny_relu/ok_cpp.py": Status.ok, "tiny_relu/honest_twin.py": Status.ok}
    assert builds_done == 1
    assert any(windows), "no other worker ran beside a timing window"
    assert all(all(window.values()) for window in windows), windows


def test_usage_errors_for_bad_scale_options(tmp_path, capsys):
    assert main(eval_args(tmp_path, DATA / "candidates", "--gpus", "0")) == 2
    assert "--gpus needs a CUDA run" in capsys.readouterr().err
    assert main(eval_args(tmp_path, DATA / "candidates", "--jobs", "0")) == 2
    assert "--jobs/-j: must be at least 1, not 0" in capsys.readouterr().err
    assert main(eval_args(tmp_path, DATA / "candidates", "--gpus", "0", "--backend", "ray")) == 2
    assert "--gpus is for local runs" in capsys.readouterr().err


def test_ray_backend_gives_the_verdicts_of_a_local_run(tmp_path):
    """Builds as Ray CPU tasks, evaluations as Ray tasks, on a local Ray instance: the same
    verdict for every candidate, one per verdict kind, as the local run (test_cli_e2e)."""
    require_ray()
    code = main(eval_args(tmp_path, DATA / "candidates", "--backend", "ray", "--jobs", "2"))
    assert code == 0
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert {r["candidate"]: r["status"] for r in results} == EXPECTED
    assert any(r["build_s"] for r in results)

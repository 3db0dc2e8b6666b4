"""Where the installed packages carry no bytecode, the harness keeps its own (worker/bytecode.py):
a run starts its warmer, every worker reads the harness's bytecode, and no worker can write it."""

import importlib.util
import os
import sys

import pytest

from harness.builds.cache import BuildCache, toolchain
from harness.inputs.candidates import discover_candidates
from harness.inputs.problems import discover_problems
from harness.records import EvalConfig, HostEnv, SandboxMode, Status
from harness.schedule.local import Pipeline
from harness.schedule.plan import RunPlan, plan_resources
from harness.worker import bytecode, confine
from harness.worker.sandbox import decide_policy, default_limits
from tests.support import DATA

# It tells, in its load error, where its interpreter reads bytecode, whether it may write any, what
# it read there, and what became of its try to plant a module's bytecode for the workers after it.
PLANTER = '''
import os, sys

with open(os.path.join(sys.pycache_prefix, "seen")) as seen:
    read = seen.read()
try:
    with open(os.path.join(sys.pycache_prefix, "planted.cpython-311.pyc"), "wb") as planted:
        planted.write(b"bytecode every later worker would run")
    outcome = "planted"
except OSError:
    outcome = "refused"
raise RuntimeError(f"prefix={sys.pycache_prefix} dont_write={sys.dont_write_bytecode} read={read} {outcome}")
'''


@pytest.mark.skipif(not confine.landlock_abi(), reason="needs a kernel with Landlock")
def test_workers_read_the_harness_bytecode_and_none_can_write_it(tmp_path):
    (tmp_path / "c" / "tiny_relu").mkdir(parents=True)
    (tmp_path / "c" / "tiny_relu" / "planter.py").write_text(PLANTER)
    problems = [p for p in discover_problems(DATA / "problems") if p.id == "tiny_relu"]
    config = EvalConfig(device="cpu", trials=3, correctness_trials=1, timeout_s=60)
    host = HostEnv.from_environ(os.environ, str(tmp_path))
    sandbox = decide_policy(SandboxMode.auto, default_limits())
    plan = RunPlan(problems, config, "run", BuildCache(tmp_path / "b", toolchain("cpu", [], host, sandbox.namespaces)),
                   plan_resources("cpu", None, None), host, sandbox)
    kept = tmp_path / "bytecode"
    kept.mkdir()
    (kept / "seen").write_text("what-the-harness-wrote")
    plan.bytecode = kept  # as on an install without bytecode of its own
    with Pipeline(plan, discover_candidates(tmp_path / "c", problems)) as pipeline:
        [result] = list(pipeline.results())
    assert result.status is Status.load_error, (result.status, result.error)
    assert f"prefix={kept} dont_write=True read=what-the-harness-wrote refused" in result.error
    assert not (kept / "planted.cpython-311.pyc").exists()
    assert any(kept.rglob("*.pyc"))  # what the run's warmer wrote beside it (killed at the end, unfinished or not)


def test_the_warmer_compiles_what_a_worker_imports_once_per_install(tmp_path, monkeypatch):
    kept = tmp_path / "bytecode"
    kept.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin")}
    warmer = bytecode.start_warming(kept, env, None)
    assert warmer is not None and warmer.wait(timeout=600) == 0, (kept / "warmer.log").read_text()
    assert bytecode.stamp_path(kept).exists()
    monkeypatch.setattr(sys, "pycache_prefix", str(kept))  # where a worker given this dir looks
    # What every worker imports, and what a reference's meta kernels and FLOP counter do.
    for module in ("torch", "harness.worker.protocol", "torch.utils.flop_counter", "sympy"):
        compiled = importlib.util.cache_from_source(importlib.util.find_spec(module).origin)
        assert os.path.isfile(compiled), compiled
    assert bytecode.start_warming(kept, env, None) is None  # warmed: not again for this install

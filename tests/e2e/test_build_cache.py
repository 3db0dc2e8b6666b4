"""The build cache: keyed by code and toolchain, answered without compiling on a re-run (failed
builds too, and imports that failed in the build worker), safe to share between runs, and never
stuck on a lock a killed build left."""

import json
import subprocess
import sys
import time

import pytest

from harness.builds.cache import BuildCache, Toolchain
from harness.cli import main

from tests.support import DATA


def eval_cpp(tmp_path, build, out, *extra):
    """The tiny_relu C++ candidates only: one that builds, one that does not, one whose import fails."""
    code = main(["eval", str(DATA / "candidates"), "--problems", str(DATA / "problems"), "--problem", "tiny_relu",
                 "--device", "cpu", "--trials", "3", "--correctness-trials", "1", "--timeout", "20",
                 "--build-dir", str(build), "--db", str(tmp_path / "h.db"), "--out", str(tmp_path / out), *extra])
    assert code == 0
    lines = (tmp_path / out / "results.jsonl").read_text().splitlines()
    return {r["candidate"]: r for r in map(json.loads, lines) if r["candidate"].endswith("_cpp.py")}


@pytest.fixture(scope="module")
def cold_and_warm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cache")
    cold = eval_cpp(tmp, tmp / "build", "cold")
    libraries = {path: path.stat().st_mtime_ns for path in (tmp / "build").rglob("*.so")}
    warm = eval_cpp(tmp, tmp / "build", "warm")
    return tmp, cold, warm, libraries


def test_cold_run_compiles_ahead_of_evaluation(cold_and_warm):
    _, cold, _, libraries = cold_and_warm
    assert cold["tiny_relu/ok_cpp.py"]["status"] == "ok"
    assert cold["tiny_relu/ok_cpp.py"]["build_s"] > 0 and not cold["tiny_relu/ok_cpp.py"]["build_cached"]
    assert cold["tiny_relu/compile_error_cpp.py"]["status"] == "compile_error"
    assert len(libraries) == 1  # the good one's extension
    failed_import = cold["tiny_relu/load_error_cpp.py"]
    assert failed_import["status"] == "load_error" and "relu_source" in failed_import["error"]
    assert failed_import["build_s"] > 0 and not failed_import["build_cached"]


def test_warm_run_compiles_nothing_and_gives_the_same_verdicts(cold_and_warm):
    tmp, cold, warm, libraries = cold_and_warm
    for name, result in warm.items():
        assert (result["status"], result["error"]) == (cold[name]["status"], cold[name]["error"]), name
        assert result["build_cached"] and result["build_s"] == 0, name
    assert {path: path.stat().st_mtime_ns for path in (tmp / "build").rglob("*.so")} == libraries


def test_failed_build_is_remembered_with_its_diagnostics(cold_and_warm):
    _, cold, warm, _ = cold_and_warm
    failed = warm["tiny_relu/compile_error_cpp.py"]
    assert failed["error"] == cold["tiny_relu/compile_error_cpp.py"]["error"]
    assert failed["compiler_diagnostics"][0]["candidate_line"] == 7


def test_outcomes_are_stored_per_key(cold_and_warm):
    tmp, *_ = cold_and_warm
    cache = BuildCache(tmp / "build", Toolchain(torch="any", cuda=None, arch_list=None, python="any", flags={}, build_layout="in_place"))
    outcomes = [cache.read_outcome(d) for d in (tmp / "build").iterdir() if d.is_dir()]
    assert sorted(o.status.value for o in outcomes if o) == ["built", "deferred", "failed"]


def test_two_runs_sharing_a_cold_cache_both_succeed(tmp_path):
    """Started together on one cache: one compiles while the other waits on the key's lock,
    then finds the build done."""
    args = ["--problems", str(DATA / "problems"), "--problem", "tiny_relu", "--device", "cpu", "--trials", "3",
            "--correctness-trials", "1", "--timeout", "60", "--build-dir", str(tmp_path / "build")]
    only = tmp_path / "only" / "tiny_relu"
    only.mkdir(parents=True)
    (only / "ok_cpp.py").write_text((DATA / "candidates" / "tiny_relu" / "ok_cpp.py").read_text())
    runs = [subprocess.Popen([sys.executable, "-m", "harness", "eval", str(tmp_path / "only"), *args,
                              "--db", str(tmp_path / f"{i}.db"), "--out", str(tmp_path / f"out{i}")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(2)]
    assert [run.wait(timeout=600) for run in runs] == [0, 0]
    results = [json.loads((tmp_path / f"out{i}" / "results.jsonl").read_text()) for i in range(2)]
    assert [r["status"] for r in results] == ["ok", "ok"]
    assert sorted(r["build_cached"] for r in results) == [False, True]


def test_a_stale_torch_baton_does_not_stall_the_next_run(tmp_path, cold_and_warm):
    """A build killed mid-way leaves torch's lock file; left alone, load_inline would wait on
    it until the build timeout."""
    tmp, *_ = cold_and_warm
    build = tmp_path / "build"
    subprocess.run(["cp", "-a", str(tmp / "build"), str(build)], check=True)
    for outcome in build.glob("*.outcome.json"):
        outcome.unlink()  # as if the build had never finished
    for extension in build.glob("*/*/"):
        (extension / "lock").write_text("")
    began = time.monotonic()
    results = eval_cpp(tmp_path, build, "after_kill", "--build-timeout", "120")
    assert results["tiny_relu/ok_cpp.py"]["status"] == "ok"
    assert time.monotonic() - began < 120

"""End to end on CPU: one run over small problems with one candidate for each verdict."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.cli import main

from tests.support import DATA, EXPECTED, REPO, eval_args, run_eval

@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    return run_eval(tmp, DATA / "candidates")


def test_run_completes_with_exit_zero_and_every_candidate_judged(verdicts):
    code, out, results = verdicts
    assert code == 0
    assert {name: r["status"] for name, r in results.items()} == EXPECTED
    assert (out / "index.html").exists() and (out / "run.json").exists()


def test_every_result_has_the_documented_keys(verdicts):
    for result in verdicts[2].values():
        assert {"problem", "candidate", "status", "speedup", "flags", "error"} <= result.keys()
        assert isinstance(result["flags"], list)
        assert (result["error"] is None) == (result["status"] == "ok")


def test_ok_has_speedup_timings_and_error_sizes(verdicts):
    ok = verdicts[2]["tiny_relu/ok_cpp.py"]
    assert ok["speedup"] > 0 and ok["trials_passed"] == 5
    assert ok["timing"]["n"] == 3 and len(ok["timing"]["samples_ms"]) == 3
    assert ok["reference_timing"]["median_ms"] > 0 and ok["max_abs_err"] == 0.0


def test_reasons_are_one_actionable_line(verdicts):
    results = verdicts[2]
    assert "undeclared_value" in results["tiny_relu/compile_error_cpp.py"]["error"]
    assert "ModelNew" in results["tiny_relu/no_model_new.py"]["error"]
    assert "not a text file" in results["tiny_relu/binary.txt"]["error"]
    assert "invalid configuration" in results["tiny_relu/runtime_error.py"]["error"]
    assert "no answer within 20 s" in results["tiny_relu/timeout.py"]["error"]
    assert "SIGSEGV" in results["tiny_relu/crash.py"]["error"]
    assert "not a plain torch.Tensor" in results["tiny_relu/rejected.py"]["error"]
    assert "needs a CUDA GPU" in results["tiny_relu/skipped_cuda.py"]["error"]
    mismatch = results["tiny_relu/mismatch.py"]
    assert "wrong output on trial 1/5" in mismatch["error"] and mismatch["max_abs_err"] > 0.1
    for result in results.values():
        assert "\n" not in (result["error"] or "")


def test_different_initialisation_is_named_as_the_cause(verdicts):
    wrong = verdicts[2]["tiny_linear/wrong_init.py"]
    assert "init_differs" in wrong["flags"] and "parameters differ" in wrong["error"]
    assert "init_differs" not in verdicts[2]["tiny_linear/ok_same_init.py"]["flags"]


def test_transcripts_keep_the_extracted_code_hash(verdicts):
    result = verdicts[2]["tiny_relu/transcript.md"]
    assert result["code_hash"] and result["code_hash"] != result["candidate_hash"]


def test_usage_errors_exit_non_zero(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nope"), "--problems", str(DATA / "problems")]) == 2
    assert main(["eval", str(DATA / "candidates"), "--problems", str(tmp_path)]) == 2
    assert "harness: error" in capsys.readouterr().err


def write_candidate(root, name, body):
    path = root / "tiny_relu" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))


def test_timeout_kills_the_whole_process_tree(tmp_path):
    marker = f"{300 + os.getpid() % 1000}.{time.time_ns() % 10**6}"  # a sleep length no other process has
    write_candidate(tmp_path / "c", "spawns.py", f"""
        import subprocess, time
        import torch.nn as nn
        child = subprocess.Popen(["sleep", "{marker}"])
        class ModelNew(nn.Module):
            def forward(self, x):
                time.sleep(300)
        """)
    _, _, results = run_eval(tmp_path, tmp_path / "c", "--timeout", "5")
    assert results["tiny_relu/spawns.py"]["status"] == "timeout"
    time.sleep(0.5)
    assert running_with_argument(marker) == []


def running_with_argument(argument: str) -> list[int]:
    """Live processes (not zombies) with this exact command-line argument."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if argument.encode() in (proc / "cmdline").read_bytes().split(b"\0") and \
                    (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_candidates_see_no_caller_secrets_and_work_in_a_scratch_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_API_TOKEN", "hunter2")
    write_candidate(tmp_path / "c", "snoop.py", """
        import os
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                raise RuntimeError(f"token={os.environ.get('HARNESS_TEST_API_TOKEN')} cwd={os.getcwd()}")
        """)
    _, _, results = run_eval(tmp_path, tmp_path / "c")
    error = results["tiny_relu/snoop.py"]["error"]
    assert "token=None" in error and ("cwd=/tmp/harness-worker" in error or "harness-candidate-" in error)


def test_exit_during_import_is_a_crash_not_a_pass(tmp_path):
    write_candidate(tmp_path / "c", "exits.py", """
        import os
        os._exit(0)
        """)
    _, _, results = run_eval(tmp_path, tmp_path / "c")
    assert results["tiny_relu/exits.py"]["status"] == "crash"
    assert "exited with code 0" in results["tiny_relu/exits.py"]["error"]


def test_module_entry_point_runs(tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness", "list", "--problems", str(REPO / "problems")],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "conv2d_square" in out.stdout


def test_reduced_precision_run(tmp_path):
    write_candidate(tmp_path / "c", "bf16.py", """
        import torch
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                assert x.dtype is torch.bfloat16, x.dtype
                return (x + x.abs()) * 0.5
        """)
    _, out, results = run_eval(tmp_path, tmp_path / "c", "--precision", "bf16")
    assert results["tiny_relu/bf16.py"]["status"] == "ok"
    assert json.loads((out / "run.json").read_text())["config"]["precision"] == "bf16"


QUICK = ["mismatch.py", "runtime_error.py", "transcript.md", "no_model_new.py", "rejected.py", "forged_stdout.py"]


def recorded(db_path):
    with sqlite3.connect(db_path) as db:
        return dict(db.execute("SELECT candidate, recorded_at FROM results"))


def test_a_killed_run_resumes_without_judging_anything_twice(tmp_path):
    (tmp_path / "c" / "tiny_relu").mkdir(parents=True)
    for name in QUICK:
        shutil.copy(DATA / "candidates" / "tiny_relu" / name, tmp_path / "c" / "tiny_relu" / name)
    args = eval_args(tmp_path, tmp_path / "c")
    harness = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while (not (tmp_path / "h.db").exists() or len(recorded(tmp_path / "h.db")) < 2) and time.monotonic() < deadline:
        time.sleep(0.2)
    harness.kill()  # no chance to clean up: the worst case
    harness.wait()
    before = recorded(tmp_path / "h.db")
    assert 2 <= len(before) < len(QUICK)

    assert main(args + ["--resume"]) == 0
    after = recorded(tmp_path / "h.db")
    assert len(after) == len(QUICK)
    assert {name: after[name] for name in before} == before  # judged once, never again

    resumed = {r["candidate"]: r["status"] for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert main(eval_args(tmp_path, tmp_path / "c", db="fresh.db", out="fresh")) == 0
    fresh = {r["candidate"]: r["status"] for r in map(json.loads, (tmp_path / "fresh" / "results.jsonl").read_text().splitlines())}
    assert resumed == fresh and len(fresh) == len(QUICK)


def workers_under(directory):
    """Live worker processes whose working directory (their scratch dir) is under `directory`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(directory) in os.readlink(proc / "cwd") and b"harness.worker" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_sigterm_stops_the_run_kills_its_workers_and_says_how_to_resume(tmp_path):
    """A worker stuck in forward (its phase deadline far away) is killed with the run."""
    (tmp_path / "c" / "tiny_relu").mkdir(parents=True)
    shutil.copy(DATA / "candidates" / "tiny_relu" / "timeout.py", tmp_path / "c" / "tiny_relu" / "timeout.py")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args = eval_args(tmp_path, tmp_path / "c") + ["--timeout", "600"]
    harness = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=os.environ | {"TMPDIR": str(scratch)})
    deadline = time.monotonic() + 120
    # the reference, the candidate, and the next worker booting ahead
    while len(workers_under(scratch)) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # the candidate into its forward
    assert len(workers_under(scratch)) == 3
    harness.send_signal(signal.SIGTERM)
    _, stderr = harness.communicate(timeout=60)
    assert harness.returncode == 130
    assert "--resume" in stderr
    assert workers_under(scratch) == []


def test_resume_with_nothing_to_resume_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "c").mkdir()
    assert main(eval_args(tmp_path, tmp_path / "c", "--resume")) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(eval_args(tmp_path, tmp_path / "c")) == 0  # an empty run is still a run
    with sqlite3.connect(tmp_path / "h.db") as db:
        (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()
    assert main(eval_args(tmp_path, tmp_path / "c", "--resume", run_id, "--trials", "5")) == 2
    assert "another configuration" in capsys.readouterr().err


def test_report_compare_and_export_read_the_database(verdicts, tmp_path, capsys):
    _, out, results = verdicts
    db = str(out.parent / "h.db")
    assert main(["report", "--db", db, "--out", str(tmp_path / "site")]) == 0
    assert (tmp_path / "site" / "index.html").exists() and len(list((tmp_path / "site" / "c").glob("*.html"))) == len(results)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert main(["compare", run_id, run_id, "--db", db, "--out", str(tmp_path)]) == 0
    assert f"same {len(results)}" in capsys.readouterr().out
    assert (tmp_path / f"compare-{run_id}-{run_id}.html").exists()
    assert main(["export", "--db", db, "--format", "csv", "--out", str(tmp_path / "r.csv")]) == 0
    assert len((tmp_path / "r.csv").read_text().splitlines()) == len(results) + 1
    assert main(["export", "--db", db, "--format", "kernelbench", "--out", str(tmp_path / "kb")]) == 0
    assert json.loads((tmp_path / "kb" / "eval_results.json").read_text())["tiny_relu"]
    assert main(["report", "--db", str(tmp_path / "empty.db")]) == 2

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

from harness.cli import main, resume_command
from harness.cpu.device import Cpu
from harness.present.site import details_link
from harness.worker.confine import CONFINE_FAILED

from tests.support import DATA, EXPECTED, REPO, eval_args, read_results, run_eval
from tests.unit.present.html_tree import unpacked

@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    return run_eval(tmp, DATA / "candidates")


def test_run_completes_with_exit_zero_and_every_candidate_judged(verdicts):
    code, out, results = verdicts
    assert code == 0
    assert {name: r["status"] for name, r in results.items()} == EXPECTED
    assert (out / "index.html").exists() and (out / "run.json").exists()
    figures = json.loads((out / "summary.json").read_text())["run"]
    assert figures["total"] == len(results) and figures["correct"] == list(EXPECTED.values()).count("ok")
    run = json.loads((out / "run.json").read_text())
    assert run["timing_clock"] == Cpu.clock_means and run["speedup_means"] == Cpu.speedup_means  # a CPU run pairs nothing


def test_every_result_has_the_documented_keys(verdicts):
    for result in verdicts[2].values():
        assert {"problem", "candidate", "status", "speedup", "flags", "error"} <= result.keys()
        assert isinstance(result["flags"], list)
        assert (result["error"] is None) == (result["status"] == "ok")


def test_a_tuple_where_the_reference_returns_a_tensor_is_a_mismatch_that_says_so(verdicts):
    error = verdicts[2]["tiny_relu/tuple_output.py"]["error"]
    assert "forward returned a tuple or list of 1 tensor(s) where the reference returns one tensor" in error


def test_ok_has_speedup_timings_and_error_sizes(verdicts):
    ok = verdicts[2]["tiny_relu/ok_cpp.py"]
    assert ok["speedup"] > 0 and ok["trials_passed"] == 5
    assert ok["timing"]["n"] == 3 and len(ok["timing"]["samples_ms"]) == 3
    assert ok["reference_timing"]["median_ms"] > 0 and ok["max_abs_err"] == 0.0
    bound = ok["timing_bound"]  # the evidence the speedup's time is held to, one entry per timed call
    assert len(bound["overhead_ms"]) == 3 and bound["reference_overhead_ms"]
    assert bound["slack_ms"] * ok["timing"]["calls_per_sample"] >= 1.0 - 1e-6  # the least slack, a command's, per call


def test_an_evaluation_says_where_its_time_went(verdicts):
    """Wall time per phase reached, and the worker's exit: together, the evaluation's time."""
    results = verdicts[2]
    ok, mismatch = results["tiny_relu/ok_cpp.py"], results["tiny_relu/mismatch.py"]
    assert ok["phase_s"].keys() == {"load", "correctness", "timing", "profile", "shapes", "exit"}
    assert mismatch["phase_s"].keys() == {"load", "correctness", "exit"}
    for result in (ok, mismatch):
        assert all(seconds >= 0 for seconds in result["phase_s"].values())
        assert 0.9 * result["elapsed_s"] <= sum(result["phase_s"].values()) <= result["elapsed_s"] + 0.01
    assert results["tiny_relu/compile_error_cpp.py"]["phase_s"] == {}  # judged by its build, never evaluated


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


def test_a_candidate_that_hangs_at_import_gets_a_phase_deadline_not_the_build_one(tmp_path):
    """Nothing to compile: its import is a phase like any other (--timeout), not --build-timeout
    (900 s by default), which a sleep at import once held its lane for."""
    write_candidate(tmp_path / "c", "sleeps_at_import.py", """
        import time
        import torch.nn as nn
        time.sleep(600)
        class ModelNew(nn.Module):
            def forward(self, x):
                return x.relu()
        """)
    began = time.monotonic()
    _, _, results = run_eval(tmp_path, tmp_path / "c", "--timeout", "5")
    result = results["tiny_relu/sleeps_at_import.py"]
    assert result["status"] == "timeout" and "no answer within 5 s during load" in result["error"], result["error"]
    assert time.monotonic() - began < 120


def test_exit_and_keyboard_interrupt_raised_by_a_candidate_are_its_exceptions(tmp_path):
    """SystemExit and KeyboardInterrupt are the candidate's (a worker is in a session of its own:
    no terminal's Ctrl-C reaches it), reported as what raised them, not as a worker's exit."""
    write_candidate(tmp_path / "c", "exits_in_forward.py", """
        import sys
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                sys.exit(3)
        """)
    write_candidate(tmp_path / "c", "interrupts_at_import.py", """
        raise KeyboardInterrupt
        """)
    # The exit code of a worker that could not be confined, which once stopped the whole run.
    write_candidate(tmp_path / "c", "exits_as_if_unconfined.py", f"""
        import os
        os._exit({CONFINE_FAILED})
        """)
    code, _, results = run_eval(tmp_path, tmp_path / "c", "--timeout", "30")
    exits, interrupts = results["tiny_relu/exits_in_forward.py"], results["tiny_relu/interrupts_at_import.py"]
    assert exits["status"] == "runtime_error" and "forward raised SystemExit: 3" in exits["error"], exits["error"]
    assert interrupts["status"] == "load_error" and "KeyboardInterrupt" in interrupts["error"], interrupts["error"]
    forged = results["tiny_relu/exits_as_if_unconfined.py"]
    assert code == 0 and forged["status"] == "crash" and f"exited with code {CONFINE_FAILED}" in forged["error"]


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
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'results'").fetchone():
            return {}  # the file is made a moment before its schema
        return dict(db.execute("SELECT candidate, recorded_at FROM results"))


def test_a_killed_run_resumes_without_judging_anything_twice(tmp_path):
    (tmp_path / "c" / "tiny_relu").mkdir(parents=True)
    for name in QUICK:
        shutil.copy(DATA / "candidates" / "tiny_relu" / name, tmp_path / "c" / "tiny_relu" / name)
    args = eval_args(tmp_path, tmp_path / "c")
    scratch = tmp_path / "scratch"  # a SIGKILL can leave a scratch dir the parent was removing (threat model)
    scratch.mkdir()
    harness = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=os.environ | {"TMPDIR": str(scratch)})
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
    """Live worker processes (launchers and their sandboxed children) started with a spec file under
    `directory`: their command line names it, and it stays readable when a worker is not dumpable
    and, inside its namespaces, sees another working directory."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"harness.worker" in command and str(directory).encode() in command:
            found.append(int(proc.name))
    return found


def cpu_seconds(pid):
    """User plus system CPU time of a process, from /proc/PID/stat (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spinning_run(tmp_path, *extra):
    """A run whose one candidate spins in its forward (its phase deadline far away), once it does;
    its workers' scratch dirs are made under the scratch dir returned with it."""
    (tmp_path / "c" / "tiny_relu").mkdir(parents=True)
    shutil.copy(DATA / "candidates" / "tiny_relu" / "timeout.py", tmp_path / "c" / "tiny_relu" / "timeout.py")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args = eval_args(tmp_path, tmp_path / "c") + ["--timeout", "600", *extra]
    harness = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=os.environ | {"TMPDIR": str(scratch)})

    def spinning():
        """A worker has kept a core busy well past its boot."""
        return any(cpu_seconds(pid) > 5 for pid in workers_under(scratch))

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not spinning():
        time.sleep(0.2)
    assert spinning() and harness.poll() is None
    return harness, scratch


def torn_down(scratch, within_s=10):
    """Whether every worker under `scratch` is gone within `within_s`: killed, they may take a
    moment (a namespace's processes go after its first)."""
    gone_by = time.monotonic() + within_s
    while workers_under(scratch) and time.monotonic() < gone_by:
        time.sleep(0.1)
    return workers_under(scratch) == []


def test_sigterm_stops_the_run_kills_its_workers_and_says_how_to_resume(tmp_path):
    harness, scratch = spinning_run(tmp_path)
    harness.send_signal(signal.SIGTERM)
    _, stderr = harness.communicate(timeout=60)
    assert harness.returncode == 130
    hint = stderr.strip().splitlines()[-1].strip()
    assert hint.startswith("python -m harness eval ") and " --timeout 600 " in hint and " --resume 20" in hint, stderr
    index = tmp_path / "out" / "index.html"  # what was judged so far, reported
    assert f"report so far: {index}" in stderr and "(unfinished)" in index.read_text()
    assert torn_down(scratch)
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("sandbox", ["auto", "off"])  # the worker is PID 1 of a namespace, or not
def test_a_killed_run_leaves_no_worker_running_and_no_scratch_dir(tmp_path, sandbox):
    """SIGKILL gives the harness no chance to clean up: its workers see it gone and go with it,
    even frozen ones (as a run freezes its other workers while it times one)."""
    harness, scratch = spinning_run(tmp_path, "--sandbox", sandbox)
    try:
        for pid in workers_under(scratch):
            os.kill(pid, signal.SIGSTOP)
        harness.kill()
        harness.communicate(timeout=60)
        assert torn_down(scratch)
        assert list(scratch.iterdir()) == []
    finally:  # what the harness failed to clean up, if anything
        for pid in workers_under(scratch):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_resume_with_nothing_to_resume_is_a_usage_error(tmp_path, capsys):
    # A CUDA candidate is skipped on the CPU without starting a worker: a quick run.
    (tmp_path / "c" / "tiny_relu").mkdir(parents=True)
    shutil.copy(DATA / "candidates" / "tiny_relu" / "skipped_cuda.py", tmp_path / "c" / "tiny_relu")
    assert main(eval_args(tmp_path, tmp_path / "c", "--resume")) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(eval_args(tmp_path, tmp_path / "c", "--warm-workers", "0")) == 0
    with sqlite3.connect(tmp_path / "h.db") as db:
        (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()
    assert main(eval_args(tmp_path, tmp_path / "c", "--resume", run_id, "--trials", "5")) == 2
    err = capsys.readouterr().err
    assert f"run {run_id} was made with --trials 3: --resume goes on with the run's own options; drop --trials" in err


def test_resume_goes_on_with_the_runs_own_options_without_repeating_them(tmp_path, capsys):
    """A resume without the first command's --timeout had said there was nothing to resume."""
    (tmp_path / "c" / "tiny_relu").mkdir(parents=True)
    shutil.copy(DATA / "candidates" / "tiny_relu" / "skipped_cuda.py", tmp_path / "c" / "tiny_relu")
    assert main(eval_args(tmp_path, tmp_path / "c", "--warm-workers", "0", "--timeout", "45", "--seed", "7")) == 0
    first = json.loads((tmp_path / "out" / "run.json").read_text())
    bare = ["eval", str(tmp_path / "c"), "--problems", str(DATA / "problems"), "--db", str(tmp_path / "h.db"),
            "--build-dir", str(tmp_path / "build"), "--warm-workers", "0", "--resume"]
    assert main(bare) == 0
    assert f"resuming run {first['run_id']}: " in capsys.readouterr().err
    again = json.loads((tmp_path / "out" / "run.json").read_text())
    assert again["run_id"] == first["run_id"] and again["config"] == first["config"]
    assert again["config"]["timeout_s"] == 45 and again["config"]["seed"] == 7 and again["config"]["device"] == "cpu"


def test_the_interrupted_runs_hint_is_the_command_to_paste():
    assert resume_command(["eval", "c/", "--timeout", "60"], "r1") == "python -m harness eval c/ --timeout 60 --resume r1"
    assert resume_command(["eval", "--resume", "r1", "c dir/"], "r1") == "python -m harness eval 'c dir/' --resume r1"
    assert resume_command(["eval", "c/", "--resume"], "r2") == "python -m harness eval c/ --resume r2"
    assert resume_command(["eval", "--resume=r1", "c/"], "r1") == "python -m harness eval c/ --resume r1"


def test_report_compare_and_export_read_the_database(verdicts, tmp_path, capsys):
    _, out, results = verdicts
    db = str(out.parent / "h.db")
    assert main(["report", "--db", db, "--out", str(tmp_path / "site")]) == 0
    assert (tmp_path / "site" / "index.html").exists()
    for result in results.values():  # each candidate's details on its problem's page
        page, anchor = details_link(result["problem"], result["candidate"]).split("#")
        assert anchor in unpacked((tmp_path / "site" / page).read_text())
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert main(["compare", run_id, run_id, "--db", db, "--out", str(tmp_path)]) == 0
    assert f"same {len(results)}" in capsys.readouterr().out
    assert (tmp_path / f"compare-{run_id}-{run_id}.html").exists()
    assert main(["export", "--db", db, "--format", "csv", "--out", str(tmp_path / "r.csv")]) == 0
    assert len((tmp_path / "r.csv").read_text().splitlines()) == len(results) + 1
    assert main(["export", "--db", db, "--format", "kernelbench", "--out", str(tmp_path / "kb")]) == 0
    assert json.loads((tmp_path / "kb" / "eval_results.json").read_text())["tiny_relu"]
    assert main(["report", "--db", str(tmp_path / "empty.db")]) == 2
    assert not (tmp_path / "empty.db").exists()


# --- bad input: one line on stderr, exit 2, nothing recorded -----------------------------------

def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith(("harness: error:", "harness eval: error:")), err
    assert "Traceback" not in "\n".join(err)
    return err[-1]


@pytest.mark.parametrize("flag, value, bound", [
    ("--trials", "0", "at least 1"), ("--timeout", "-1", "more than 0"), ("--correctness-trials", "0", "at least 1"),
    ("--warmup", "-1", "at least 0"), ("--build-timeout", "0", "more than 0"), ("--atol", "-1", "at least 0"),
    ("--rtol", "-1", "at least 0"), ("--time-budget", "0", "more than 0"), ("--max-trials", "0", "at least 1"),
])
def test_an_out_of_range_option_names_the_flag_and_its_bound_and_records_nothing(tmp_path, capsys, flag, value, bound):
    assert main(eval_args(tmp_path, DATA / "candidates", flag, value)) == 2
    assert f"argument {flag}: must be {bound}, not {value}" in one_line_error(capsys)
    assert not (tmp_path / "h.db").exists()


@pytest.mark.parametrize("flag, under_file", [("--out", "out"), ("--out", ""), ("--db", "h.db")])
def test_an_output_dir_or_db_under_a_file_is_one_line_naming_it_and_creates_nothing(tmp_path, capsys, flag, under_file):
    (tmp_path / "a_file").write_text("")  # a directory under a file cannot be made, even by root
    args = eval_args(tmp_path, DATA / "candidates")
    args[args.index(flag) + 1] = str(tmp_path / "a_file" / under_file)
    assert main(args) == 2
    assert f"{flag} " in (error := one_line_error(capsys)) and "a_file is a file, not a directory" in error
    assert not (tmp_path / "h.db").exists()


def test_a_feedback_file_in_no_directory_is_refused_before_the_run(tmp_path, capsys):
    assert main(eval_args(tmp_path, DATA / "candidates", "--feedback", str(tmp_path / "nowhere" / "f.jsonl"))) == 2
    assert "--feedback" in one_line_error(capsys) and not (tmp_path / "h.db").exists()


def test_report_into_a_dir_that_cannot_be_written_is_one_line(tmp_path, capsys):
    db = stored_run(tmp_path)
    (tmp_path / "a_file").write_text("")
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "a_file" / "site")]) == 2
    assert "a_file is a file, not a directory" in one_line_error(capsys)
    assert main(["export", "--db", str(db), "--format", "csv", "--out", str(tmp_path / "a_file" / "r.csv")]) == 2
    assert "a_file is a file, not a directory" in one_line_error(capsys)


def test_an_empty_candidates_dir_records_nothing_and_says_so(tmp_path, capsys):
    (tmp_path / "c").mkdir()
    assert main(eval_args(tmp_path, tmp_path / "c")) == 2
    assert "no candidates in" in one_line_error(capsys)
    assert not (tmp_path / "h.db").exists()  # so it cannot become the default run of `report`


def test_a_problem_file_with_a_syntax_error_skips_its_candidates_and_the_run_goes_on(tmp_path, capsys):
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(DATA / "problems" / "tiny_relu.py", problems)
    (problems / "broken.py").write_text("import torch\nclass Model(:\n    pass\n")
    for problem, name in (("tiny_relu", "skipped_cuda.py"), ("broken", "mismatch.py")):
        (tmp_path / "c" / problem).mkdir(parents=True)
        shutil.copy(DATA / "candidates" / "tiny_relu" / name, tmp_path / "c" / problem)
    args = eval_args(tmp_path, tmp_path / "c", "--warm-workers", "0")
    args[args.index("--problems") + 1] = str(problems)
    assert main(args) == 0
    assert "broken.py: not valid Python (invalid syntax, line 2)" in capsys.readouterr().err
    results = read_results(tmp_path / "out")
    assert results["tiny_relu/skipped_cuda.py"]["status"] == "skipped"
    broken = results["broken/mismatch.py"]
    assert broken["status"] == "skipped" and broken["problem"] == "broken"
    assert "its problem is unusable" in broken["error"] and "broken.py: not valid Python" in broken["error"]


@pytest.mark.parametrize("command", [["report"], ["export", "--format", "csv", "--out", "x.csv"], ["compare", "a", "b"]])
def test_reading_a_database_that_is_not_there_creates_nothing(tmp_path, capsys, command):
    assert main([*command, "--db", str(tmp_path / "typo.db")]) == 2
    line = one_line_error(capsys)
    assert "no database at" in line and "typo.db" in line
    assert list(tmp_path.iterdir()) == []


def test_eval_of_one_file_says_to_use_explain(tmp_path, capsys):
    path = DATA / "candidates" / "tiny_relu" / "mismatch.py"
    assert main(eval_args(tmp_path, path)) == 2
    assert f"{path} is a file" in (line := one_line_error(capsys)) and f"harness explain {path}" in line


@pytest.mark.parametrize("command", ["eval", "report", "compare", "explain", "check", "export", "list"])
def test_every_help_shows_defaults_and_an_example(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "example" in out and f"python -m harness {command}" in out
    if command in ("eval", "report", "export", "compare"):
        assert "(default: reports/harness.db)" in out
    if command == "eval":
        assert "(default: 5)" in out and "(default: 300.0)" in out and "(default: None)" not in out


def test_help_and_reading_commands_start_without_torch_or_warnings():
    probe = ("import sys; from harness.cli import main\n"
             "try: main(['report', '--help'])\nexcept SystemExit: pass\n"
             "assert 'torch' not in sys.modules, 'torch imported'")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    quiet = subprocess.run([sys.executable, "-m", "harness", "list", "--problems", str(DATA / "problems")],
                           capture_output=True, text=True, cwd=REPO)  # imports torch
    assert quiet.returncode == 0 and "NumPy" not in quiet.stderr


def stored_run(tmp_path, finished_at="2026-01-01T00:01:00") -> Path:
    """A database holding one run of one result, written directly (no evaluation)."""
    from harness.records import Candidate, EvalConfig, MachineInfo, Result, RunInfo, Status
    from harness.store import Database

    machine = MachineInfo(hostname="h", device="cpu", device_name="x86_64", driver=None, cuda=None, torch="2",
                          python="3", harness="0")
    run = RunInfo(run_id="r1", started_at="2026-01-01T00:00:00", finished_at=finished_at, machine=machine,
                  config=EvalConfig(device="cpu"), problems_dir="p", candidates_dir="c")
    candidate = Candidate(path="/c/p/a.py", rel_path="p/a.py", problem_id="p", source_hash="h", code="x = 1",
                          code_hash="c")
    with Database(tmp_path / "h.db") as db:
        db.save_run(run, tmp_path / "out")
        db.record(Result(run_id="r1", problem="p", candidate="p/a.py", status=Status.ok, speedup=1.5,
                         candidate_hash="h"), None, candidate)
    return tmp_path / "h.db"


def test_a_rerendered_report_says_when_the_run_finished(tmp_path, capsys):
    db = stored_run(tmp_path, finished_at=None)
    with sqlite3.connect(db) as conn:  # the finish time is in its column, not in the JSON copy of the run
        conn.execute("UPDATE runs SET finished_at = '2026-01-01T00:05:00'")
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "site")]) == 0
    header = (tmp_path / "site" / "index.html").read_text()
    assert "finished 2026-01-01T00:05:00" in header and "(unfinished)" not in header


@pytest.mark.parametrize("alike", [False, True])  # two problem files alike byte for byte, in two levels
def test_export_reads_each_problems_level_from_where_it_was_found(tmp_path, capsys, alike):
    from harness.records import Candidate, EvalConfig, MachineInfo, Problem, Result, RunInfo, Status
    from harness.store import Database

    machine = MachineInfo(hostname="h", device="cuda", device_name="H200", driver=None, cuda=None, torch="2",
                          python="3", harness="0")
    run = RunInfo(run_id="r1", started_at="t0", finished_at="t1", machine=machine, config=EvalConfig(device="cuda"),
                  problems_dir="KernelBench", candidates_dir="c")
    with Database(tmp_path / "h.db") as db:
        db.save_run(run, tmp_path / "out")
        for level, problem_id in ((1, "1_Square_matrix_multiplication_"), (2, "1_Conv2D_ReLU_BiasAdd")):
            problem_hash = "p" if alike else f"p{level}"
            problem = Problem(id=problem_id, path=f"/kb/level{level}/{problem_id}.py", source_hash=problem_hash)
            name = f"level_{level}_problem_1_sample_0_kernel.py"
            candidate = Candidate(path=f"/c/{name}", rel_path=name, problem_id=problem_id, source_hash=f"c{level}",
                                  code="x", code_hash="x")
            db.record(Result(run_id="r1", problem=problem_id, candidate=name, status=Status.compile_error,
                             candidate_hash=f"c{level}", problem_hash=problem_hash), problem, candidate)
    assert main(["export", "--db", str(tmp_path / "h.db"), "--format", "kernelbench", "--out", str(tmp_path / "kb")]) == 0
    for level, problem_id in ((1, "1_Square_matrix_multiplication_"), (2, "1_Conv2D_ReLU_BiasAdd")):
        (sample,) = json.loads((tmp_path / "kb" / f"level_{level}" / "eval_results.json").read_text())["1"]
        assert sample["metadata"]["problem"] == problem_id and sample["sample_id"] == 0
    assert "level_2/eval_results.json" in capsys.readouterr().out

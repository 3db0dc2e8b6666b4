"""The command line's edge: what a user sees when the environment is not set up."""

import re
import subprocess
import sys

from harness import cli
from harness.inputs.candidates import read_candidate
from harness.options import Bytes, size
from harness.records import EvalConfig, MachineInfo, Result, RunInfo, Status
from harness.store import Database

from tests.support import DATA, REPO


def test_a_missing_dependency_is_one_line_not_a_traceback(monkeypatch, capsys):
    def needs_torch(args, host):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setitem(cli.COMMANDS, "list", needs_torch)
    assert cli.main(["list"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness: error: torch is not installed for ")


def test_help_reads_as_a_user_would_write_the_options(capsys):
    """Sizes as sizes (12638097408 was shown for the memory limit), and --strict-shapes says what
    it does."""
    assert cli.main(["eval", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert re.search(r"--max-host-memory MAX_HOST_MEMORY bytes per worker \(512M, 8G\) \(default: [\d.]+[KMGT]\)", shown)
    assert not re.search(r"default: \d{7,}", shown)
    assert "judge a candidate that is wrong at other input sizes" in shown


def test_a_byte_count_reads_as_a_size_and_counts_as_bytes():
    assert str(Bytes(12638097408)) == "11.8G" and str(Bytes(8 << 30)) == "8G" and str(Bytes(512)) == "512"
    assert Bytes(8 << 30) == size("8G") and Bytes(3) + 1 == 4


NO_TORCH = """
import sys
from harness.cli import main
code = main(sys.argv[1:])
assert "torch" not in sys.modules, "torch was imported"
print(code)
"""


def without_torch(*argv: str) -> subprocess.CompletedProcess:
    """A command run in a fresh interpreter that must not import torch (seconds of start-up)."""
    return subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_a_wrong_path_is_refused_before_torch_is_imported(tmp_path):
    """A mistyped path took 7 to 12 s to be refused on a cold machine: torch was imported first.
    A database that cannot be made is refused as one line too (it was an errno's text)."""
    (tmp_path / "a_file").write_text("")
    for argv, message in ((["eval", str(tmp_path / "nowhere")], "candidates directory"),
                          (["eval", str(tmp_path), "--problems", str(tmp_path / "nowhere")], "problems directory"),
                          (["check", str(tmp_path / "nowhere")], "problems directory"),
                          (["explain", str(tmp_path / "nowhere.py")], "is not a file"),
                          (["explain", str(DATA / "candidates" / "tiny_relu" / "mismatch.py"), "--db",
                            str(tmp_path / "a_file" / "h.db")], "a_file is a file, not a directory"),
                          (["report", "--out", str(tmp_path / "a_file" / "site")], "a_file is a file, not a directory"),
                          (["compare", "a", "b", "--out", str(tmp_path / "a_file")], "a_file is a file, not a directory"),
                          (["export", "--format", "csv", "--out", str(tmp_path / "a_file" / "x.csv")],
                           "a_file is a file, not a directory")):
        refused = without_torch(*argv)
        assert refused.stdout.split() == ["2"] and message in refused.stderr, (argv, refused.stderr)


def test_listing_and_explaining_a_judged_file_import_no_torch(tmp_path):
    listed = without_torch("list", str(DATA / "candidates"), "--problems", str(DATA / "problems"))
    assert listed.stdout.split()[-1] == "0" and "tiny_relu" in listed.stdout, listed.stderr
    path = DATA / "candidates" / "tiny_relu" / "mismatch.py"
    judged = read_candidate(path, "tiny_relu/mismatch.py", "tiny_relu")
    with Database(tmp_path / "h.db") as db:
        db.save_run(RunInfo(run_id="r1", started_at="2026-01-01T00:00:00", machine=MachineInfo(
            hostname="h", device="cpu", device_name="x86_64", driver=None, cuda=None, torch="2", python="3", harness="0"),
            config=EvalConfig(device="cpu"), problems_dir="p", candidates_dir="c"), tmp_path)
        db.record(Result(run_id="r1", problem="tiny_relu", candidate=judged.rel_path, status=Status.mismatch,
                         error="output 0 differs", candidate_hash=judged.source_hash), None, judged)
    explained = without_torch("explain", str(path), "--db", str(tmp_path / "h.db"))
    assert explained.stdout.split()[-1] == "0" and "mismatch" in explained.stdout, explained.stderr
    history = without_torch("history", "--problem", "tiny_relu", "--db", str(tmp_path / "h.db"))
    assert history.stdout.split()[-1] == "0" and "0/1" in history.stdout, history.stderr
    listed_runs = without_torch("runs", "--db", str(tmp_path / "h.db"))
    assert listed_runs.stdout.splitlines()[1].split()[:4] == ["r1", "2026-01-01", "00:00", "1"], listed_runs.stderr
    assert "mismatch 1  on x86_64 (unfinished)" not in listed_runs.stdout and "mismatch 1 (unfinished)  on x86_64" in \
        listed_runs.stdout, listed_runs.stdout

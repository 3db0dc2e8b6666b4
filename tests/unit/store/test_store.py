"""The SQLite store: results committed as they come, schema versions migrate, runs resume."""

import json
import sqlite3
import subprocess
import sys

import pytest

from harness.records import EvalConfig, MachineInfo, Result, RunInfo, Status
from harness.store import DATABASE_SCHEMA_VERSION, MIGRATIONS, Database, ResultsFile, StoreError, config_key

from tests.support import DATA, REPO

MACHINE = MachineInfo(hostname="h", device="cpu", device_name="x86_64", driver=None, cuda=None, torch="2",
                      python="3", harness="0")


def make(name, status=Status.ok, run_id="r1"):
    return Result(run_id=run_id, problem="p", candidate=name, status=status, candidate_hash=f"h-{name}",
                  problem_hash="ph")


def run_info(run_id="r1", **config):
    return RunInfo(run_id=run_id, started_at="2026-01-01T00:00:00", machine=MACHINE,
                   config=EvalConfig(device="cpu", **config), problems_dir="p", candidates_dir="c")


def candidate(name):
    from harness.inputs.candidates import read_candidate
    return read_candidate(DATA / "candidates" / "tiny_relu" / "mismatch.py", name, "p").model_copy(
        update={"source_hash": f"h-{name}"})


def test_results_are_committed_one_by_one_and_read_back(tmp_path):
    with Database(tmp_path / "h.db") as db:
        db.save_run(run_info(), tmp_path)
        db.record(make("a"), None, candidate("a"))
        # Another connection sees it at once: nothing waits for the end of the run.
        other = sqlite3.connect(tmp_path / "h.db")
        assert other.execute("SELECT candidate, status FROM results").fetchall() == [("a", "ok")]
        db.record(make("b", Status.crash), None, candidate("b"))
        assert [(r.candidate, r.status) for r in db.results("r1")] == [("a", Status.ok), ("b", Status.crash)]
        assert db.done("r1") == {("ph", "h-a"), ("ph", "h-b")}
        assert "x.abs()" in db.code("h-a")


def test_a_resume_judges_again_what_a_harness_error_decided(tmp_path):
    with Database(tmp_path / "h.db") as db:
        db.save_run(run_info(), tmp_path)
        db.record(make("a", Status.crash).model_copy(update={"error": "the harness failed while judging it: X"}),
                  None, candidate("a"))
        db.record(make("b", Status.crash).model_copy(update={"error": "worker killed by SIGSEGV"}), None, candidate("b"))
        assert db.done("r1", again="the harness failed while judging it") == {("ph", "h-b")}
        assert db.done("r1") == {("ph", "h-a"), ("ph", "h-b")}


def test_resume_finds_the_latest_run_with_the_same_configuration(tmp_path):
    with Database(tmp_path / "h.db") as db:
        db.save_run(run_info("old"), tmp_path)
        db.save_run(run_info("other", trials=7), tmp_path)
        key = config_key(EvalConfig(device="cpu"), "x86_64")
        assert db.latest_run_id(key) == "old"
        assert db.latest_run_id() == "other"


def test_an_earlier_schema_opens_and_migrates(tmp_path):
    path = tmp_path / "v1.db"
    old = sqlite3.connect(path)
    old.executescript(MIGRATIONS[0])
    old.execute("PRAGMA user_version = 1")
    old.execute("INSERT INTO runs (run_id, started_at, device, device_name, torch, harness, config_json) "
                "VALUES ('r1', '2025', 'cpu', 'x86_64', '2', '0', ?)", (run_info().model_dump_json(),))
    old.execute("INSERT INTO results VALUES ('r1', 'p', 'a', 'ph', 'h-a', 'ok', 1.5, NULL, ?)",
                (make("a").model_dump_json(),))
    old.commit()
    old.close()
    with Database(path) as db:
        assert db.version == DATABASE_SCHEMA_VERSION == 3
        assert [r.candidate for r in db.results("r1")] == ["a"]
        columns = {row[1] for row in db.conn.execute("PRAGMA table_info(results)")}
        assert "recorded_at" in columns


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "future.db"
    sqlite3.connect(path).execute(f"PRAGMA user_version = {DATABASE_SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="schema version"):
        Database(path)


READ_ON_A_READ_ONLY_MOUNT = """
import errno, sys
from pathlib import Path
from harness.store import Database
path = Path(sys.argv[1])
try:
    open(path.parent / "written", "w")
    sys.exit("the mount can be written")
except OSError as exc:
    assert exc.errno == errno.EROFS, exc
with Database.existing(path) as db:
    run, _, results = db.run_results(None)
    print(run.run_id, [r.candidate for r in results])
"""


def test_a_database_on_a_read_only_mount_is_read_as_it_is(tmp_path):
    """Written with its WAL journal and kept on a read-only mount (an archive, a shared volume):
    `report`, `compare` and `export` read it; none may write it."""
    folder = tmp_path / "kept"
    with Database(folder / "h.db") as db:
        db.save_run(run_info(), tmp_path)
        db.record(make("a"), None, candidate("a"))
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$1" -c "$2" "$3"'
    try:
        read = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, str(folder),
                               sys.executable, READ_ON_A_READ_ONLY_MOUNT, str(folder / "h.db")],
                              capture_output=True, text=True, timeout=60, cwd=REPO)
    except FileNotFoundError:
        pytest.skip("no unshare(1) here")
    if "mount" in read.stderr and read.returncode != 0 and "Traceback" not in read.stderr:
        pytest.skip(f"no read-only mount in a user namespace here: {read.stderr.strip()}")
    assert read.returncode == 0 and read.stdout.split() == ["r1", "['a']"], read.stderr


def test_a_database_of_an_earlier_schema_is_migrated_for_reading_where_it_can_be_written(tmp_path):
    path = tmp_path / "v1.db"
    old = sqlite3.connect(path)
    old.executescript(MIGRATIONS[0])
    old.execute("PRAGMA user_version = 1")
    old.close()
    with Database.existing(path) as db:
        assert db.version == DATABASE_SCHEMA_VERSION
    older = tmp_path / "v1-again.db"
    old = sqlite3.connect(older)
    old.executescript(MIGRATIONS[0])
    old.execute("PRAGMA user_version = 1")
    old.close()
    with pytest.MonkeyPatch.context() as patch:  # a database nobody may write (root may write any file here)
        patch.setattr(Database, "migrate", lambda self: (_ for _ in ()).throw(sqlite3.OperationalError("readonly")))
        with pytest.raises(StoreError, match="open it once where it can be written"):
            Database.existing(older)


def test_results_file_appends_then_rewrites_whole(tmp_path):
    results = ResultsFile(tmp_path)
    results.append(make("a"))
    with open(results.path, "a") as out:
        out.write('{"run_id": "r", "cand')  # a line cut short by a kill
    results.rewrite([make("a"), make("b")])  # the end of a run rewrites it from the database
    lines = results.path.read_text().splitlines()
    assert [Result.model_validate_json(line).candidate for line in lines] == ["a", "b"]


def test_a_results_line_opens_with_its_candidate_and_verdict(tmp_path):
    """Whoever reads results.jsonl by eye meets which candidate, its verdict and why first."""
    results = ResultsFile(tmp_path)
    results.append(make("a", status=Status.mismatch).model_copy(update={"error": "output 0 differs", "max_abs_err": 1.0}))
    keys = list(json.loads(results.path.read_text()))
    assert keys[:10] == ["schema_version", "run_id", "problem", "candidate", "status", "speedup",
                         "speedup_default_math", "flags", "error", "phase"]


def test_runs_are_listed_newest_first_with_their_verdict_counts(tmp_path):
    with Database(tmp_path / "h.db") as db:
        db.save_run(run_info("old"), tmp_path)
        db.save_run(run_info("new").model_copy(update={"started_at": "2026-02-01T00:00:00", "finished_at": "x"}), tmp_path)
        for name, status in (("a", Status.ok), ("b", Status.crash), ("c", Status.ok)):
            db.record(make(name, status, run_id="new"), None, candidate(name))
        listed = db.run_listing()
    assert [(r.run_id, r.candidates, r.verdicts) for r in listed] == [("new", 3, {"ok": 2, "crash": 1}), ("old", 0, {})]

"""Results that last: one SQLite file accumulating runs, plus each run's `results.jsonl`.

Every result is committed the moment it is known, so killing the harness loses nothing that
was measured, and `--resume` picks a run up where it stopped. The schema carries a version
(SQLite's user_version) and is brought up to date by ordered migrations on open.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sqlite3
import urllib.parse
from pathlib import Path

from pydantic import BaseModel

from .records import Candidate, EvalConfig, Problem, Result, RunInfo

RESULTS_FILE = "results.jsonl"
DEFAULT_DB = Path("reports") / "harness.db"

# Each step takes the schema from version i to i + 1. Never edit a released step: add one.
MIGRATIONS: list[str] = [
    # 1: runs, problems, candidates, results (the full record as JSON beside the columns people query)
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, finished_at TEXT,
        device TEXT NOT NULL, device_name TEXT NOT NULL, driver TEXT, cuda TEXT, torch TEXT NOT NULL,
        harness TEXT NOT NULL, config_json TEXT NOT NULL, problems_dir TEXT, candidates_dir TEXT, out_dir TEXT
    );
    CREATE TABLE problems (problem_hash TEXT PRIMARY KEY, id TEXT NOT NULL, path TEXT NOT NULL);
    CREATE TABLE candidates (
        candidate_hash TEXT PRIMARY KEY, code_hash TEXT, kind TEXT, code TEXT, extraction_error TEXT
    );
    CREATE TABLE results (
        run_id TEXT NOT NULL REFERENCES runs(run_id), problem TEXT, candidate TEXT NOT NULL,
        problem_hash TEXT, candidate_hash TEXT NOT NULL, status TEXT NOT NULL, speedup REAL, error TEXT,
        record_json TEXT NOT NULL,
        PRIMARY KEY (run_id, problem, candidate)
    );
    """,
    # 2: resume needs to find runs by configuration and see when each result was recorded
    """
    ALTER TABLE runs ADD COLUMN config_key TEXT;
    ALTER TABLE results ADD COLUMN recorded_at TEXT;
    CREATE INDEX runs_by_config ON runs(config_key, started_at);
    """,
    # 3: a problem's path per id and content: two problem files alike byte for byte (in two
    # KernelBench levels) had been filed under the first one's path, and exported at its level
    """
    CREATE TABLE problems_by_id (problem_hash TEXT NOT NULL, id TEXT NOT NULL, path TEXT NOT NULL,
                                 PRIMARY KEY (problem_hash, id));
    INSERT INTO problems_by_id SELECT problem_hash, id, path FROM problems;
    DROP TABLE problems;
    ALTER TABLE problems_by_id RENAME TO problems;
    """,
]
DATABASE_SCHEMA_VERSION = len(MIGRATIONS)


class RunListed(BaseModel):
    """A run as `harness runs` lists it."""

    run_id: str
    started_at: str
    finished_at: str | None
    device: str
    device_name: str
    candidates_dir: str | None
    verdicts: dict[str, int]  # status -> count

    @property
    def candidates(self) -> int:
        return sum(self.verdicts.values())


def _read_only(path: Path) -> sqlite3.Connection:
    """`path` opened to read. Where a WAL database cannot be opened so (no room for its shared-memory
    file: a read-only directory or mount), it is read as immutable: as it is on disk, no lock taken
    (what a run still writing adds meanwhile is not seen)."""
    uri = "file:" + urllib.parse.quote(str(path.resolve()))
    conn = sqlite3.connect(uri + "?mode=ro", uri=True, timeout=30)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        conn.close()
        return sqlite3.connect(uri + "?immutable=1", uri=True)


class StoreError(Exception):
    """The database cannot be used (newer schema, not a harness database)."""


def config_key(config: EvalConfig, device_name: str) -> str:
    """What must match for a result to count as done on resume: the configuration and the device."""
    payload = json.dumps({"config": config.model_dump(mode="json"), "device_name": device_name}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


class Database:
    def __init__(self, path: Path, read_only: bool = False):
        self.path = path
        if read_only:
            self.conn = _read_only(path)
            if self.version != DATABASE_SCHEMA_VERSION:
                found = self.version
                self.conn.close()
                raise StoreError(f"{path} has schema version {found}, and this harness reads "
                                 f"{DATABASE_SCHEMA_VERSION}: open it once where it can be written (eval --db) to migrate it")
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")  # readers (report) never block the running eval
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.migrate()

    @classmethod
    def existing(cls, path: Path) -> Database:
        """A database to read from, read-only: never creates one, so a mistyped --db is an error, not
        a new empty file; and one on a read-only disk or archive is read as it is."""
        if not path.is_file():
            raise StoreError(f"no database at {path} (pass the one `eval` wrote with --db)")
        try:
            return cls(path, read_only=True)
        except StoreError as older:  # of an earlier schema: migrated where it can be written
            try:
                return cls(path)
            except (sqlite3.Error, OSError):
                raise older from None
        except sqlite3.DatabaseError as exc:  # not a database at all
            raise StoreError(f"{path}: {exc}") from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def version(self) -> int:
        return self.conn.execute("PRAGMA user_version").fetchone()[0]

    def migrate(self) -> None:
        version = self.version
        if version > DATABASE_SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}; this harness knows up to {DATABASE_SCHEMA_VERSION}")
        for step in range(version, DATABASE_SCHEMA_VERSION):
            with self.conn:
                self.conn.executescript(MIGRATIONS[step])
                self.conn.execute(f"PRAGMA user_version = {step + 1}")

    # --- runs ---------------------------------------------------------------------------

    def save_run(self, run: RunInfo, out_dir: Path) -> None:
        m = run.machine
        with self.conn:
            self.conn.execute(
                """INSERT INTO runs (run_id, started_at, finished_at, device, device_name, driver, cuda, torch,
                       harness, config_json, problems_dir, candidates_dir, out_dir, config_key)
                   VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)
                   ON CONFLICT(run_id) DO UPDATE SET finished_at = excluded.finished_at, config_json = excluded.config_json""",
                (run.run_id, run.started_at, run.finished_at, m.device, m.device_name, m.driver, m.cuda, m.torch,
                 m.harness, run.model_dump_json(), run.problems_dir, run.candidates_dir, str(out_dir),
                 config_key(run.config, m.device_name)),
            )

    def run(self, run_id: str) -> tuple[RunInfo, Path]:
        row = self.conn.execute("SELECT config_json, out_dir, finished_at FROM runs WHERE run_id = ?",
                                (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id} in {self.path}")
        # The column is the record of when the run finished; the JSON beside it is a copy.
        return RunInfo.model_validate_json(row[0]).model_copy(update={"finished_at": row[2]}), Path(row[1])

    def run_results(self, run_id: str | None) -> tuple[RunInfo, Path, list[Result]]:
        """A run (the latest when None), its output dir and its results."""
        run_id = run_id or self.latest_run_id()
        if run_id is None:
            raise StoreError(f"no runs in {self.path}")
        run, out_dir = self.run(run_id)
        return run, out_dir, self.results(run_id)

    def latest_run_id(self, key: str | None = None) -> str | None:
        query = "SELECT run_id FROM runs" + (" WHERE config_key = ?" if key else "") + " ORDER BY started_at DESC, rowid DESC LIMIT 1"
        row = self.conn.execute(query, (key,) if key else ()).fetchone()
        return row[0] if row else None

    def run_listing(self) -> list[RunListed]:
        """Every run, newest first, with its verdict counts (read from the columns alone)."""
        runs = self.conn.execute("SELECT run_id, started_at, finished_at, device, device_name, candidates_dir FROM runs "
                                 "ORDER BY started_at DESC, rowid DESC").fetchall()
        counts: dict[str, dict[str, int]] = {}
        for run_id, status, count in self.conn.execute("SELECT run_id, status, count(*) FROM results GROUP BY run_id, status"):
            counts.setdefault(run_id, {})[status] = count
        return [RunListed(run_id=run_id, started_at=started, finished_at=finished, device=device, device_name=name,
                          candidates_dir=candidates, verdicts=counts.get(run_id, {}))
                for run_id, started, finished, device, name, candidates in runs]

    def history(self) -> list[tuple[RunListed, list[Result]]]:
        """Every run, oldest first, with its results."""
        return [(run, self.results(run.run_id)) for run in reversed(self.run_listing())]

    def latest_run_of(self, candidates_dir: Path, problems_dir: Path) -> str | None:
        """The latest run of these candidates against these problems (paths resolved as a run keeps them)."""
        row = self.conn.execute("SELECT run_id FROM runs WHERE candidates_dir = ? AND problems_dir = ? "
                                "ORDER BY started_at DESC, rowid DESC LIMIT 1",
                                (str(candidates_dir.resolve()), str(problems_dir.resolve()))).fetchone()
        return row[0] if row else None

    # --- results ------------------------------------------------------------------------

    def record(self, result: Result, problem: Problem | None, candidate: Candidate) -> None:
        """Commit one result with the problem and candidate it is about."""
        with self.conn:
            if problem is not None:
                self.conn.execute("INSERT OR IGNORE INTO problems VALUES (?,?,?)",
                                  (problem.source_hash, problem.id, problem.path))
            self.conn.execute("INSERT OR IGNORE INTO candidates VALUES (?,?,?,?,?)",
                              (candidate.source_hash, candidate.code_hash, candidate.kind.value, candidate.code,
                               candidate.extraction_error))
            self.conn.execute(
                """INSERT OR REPLACE INTO results (run_id, problem, candidate, problem_hash, candidate_hash, status,
                       speedup, error, record_json, recorded_at) VALUES (?,?,?,?,?,?,?,?,?,?)""",
                (result.run_id, result.problem, result.candidate, result.problem_hash, result.candidate_hash,
                 result.status.value, result.speedup, result.error, result.model_dump_json(), result.recorded_at),
            )

    def results(self, run_id: str) -> list[Result]:
        rows = self.conn.execute("SELECT record_json FROM results WHERE run_id = ? ORDER BY problem, candidate",
                                 (run_id,))
        return [Result.model_validate_json(r[0]) for r in rows]

    def done(self, run_id: str, again: str = "") -> set[tuple[str | None, str]]:
        """(problem hash, candidate hash) pairs this run already judged, less those whose error
        begins with `again` (judged again on a resume)."""
        rows = self.conn.execute("SELECT problem_hash, candidate_hash FROM results WHERE run_id = ? AND "
                                 "(? = '' OR error IS NULL OR substr(error, 1, length(?)) != ?)",
                                 (run_id, again, again, again))
        return {(r[0], r[1]) for r in rows}

    def latest_result(self, candidate_hash: str) -> Result | None:
        """The most recent judgement of a file with this content, in any run."""
        row = self.conn.execute("SELECT record_json FROM results WHERE candidate_hash = ? "
                                "ORDER BY recorded_at DESC LIMIT 1", (candidate_hash,)).fetchone()
        return Result.model_validate_json(row[0]) if row else None

    def problem_paths(self) -> dict[tuple[str, str], str]:
        """Where each problem (by id and source hash) was read from."""
        return {(problem_id, problem_hash): path
                for problem_hash, problem_id, path in self.conn.execute("SELECT problem_hash, id, path FROM problems")}

    def code(self, candidate_hash: str) -> str | None:
        row = self.conn.execute("SELECT code FROM candidates WHERE candidate_hash = ?", (candidate_hash,)).fetchone()
        return row[0] if row else None


def files_state(paths: list[Path]) -> tuple:
    """Size and modification time of each path (None where absent): cheap to compare."""
    state = []
    for path in paths:
        try:
            info = path.stat()
            state.append((info.st_size, info.st_mtime_ns))
        except OSError:
            state.append(None)
    return tuple(state)


class ResultsFile:
    """A run's `results.jsonl`: appended line by line during the run (flushed and synced), and
    rewritten whole from the database at the end, so a resumed run's file is complete too."""

    def __init__(self, out_dir: Path):
        out_dir.mkdir(parents=True, exist_ok=True)
        self.path = out_dir / RESULTS_FILE

    def append(self, result: Result) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(result.model_dump_json() + "\n")
            out.flush()
            os.fsync(out.fileno())

    def rewrite(self, results: list[Result]) -> None:
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(r.model_dump_json() + "\n" for r in results), encoding="utf-8")
        os.replace(tmp, self.path)

"""The Python API: judge candidates from a program (a trainer turning verdicts into rewards)
through the same pipeline as `harness eval`: builds ahead, sandboxed warm workers, the same
verdicts, the same store. An Evaluator keeps its lanes, their workers, the build cache and the
references' outputs warm from one submission to the next; this is the edge where the caller's
environment is read, once, as for the command line."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace

from pydantic import ValidationError

from . import options
from .errors import StoreFailed, UsageError
from .inputs.candidates import KERNELBENCH_NAME, discover_candidates, read_candidate, write_candidate
from .inputs.discovery import discover
from .records import Candidate, EvalConfig, HostEnv, Problem, Result
from .run import EvalOptions, Keeper, RunSetup, open_db, open_pipeline, protections, resolve_device, start_run
from .schedule.plan import ActiveSet
from .store import Database, now
from .worker.sandbox import default_limits

CLOSED = "this Evaluator is closed"


class BatchStream:
    """A stream over a backend that takes a fixed list of candidates (Ray): what was fed while
    the previous batch ran goes out as the next batch."""

    def __init__(self, problems: list[Problem], config: EvalConfig, run_id: str, setup: RunSetup):
        self._args = problems, config, run_id, setup
        self._fed: queue.SimpleQueue = queue.SimpleQueue()
        self._current = None
        self.active = ActiveSet()

    def feed(self, candidates: list[Candidate]) -> None:
        self._fed.put(candidates)

    def stream(self) -> Iterator[Result]:
        while (batch := self._fed.get()) is not None:
            while not self._fed.empty():
                more = self._fed.get()
                if more is None:
                    self._fed.put(None)
                    break
                batch = batch + more
            with open_pipeline(self._args[0], batch, *self._args[1:]) as self._current:
                self.active = self._current.active
                yield from self._current.results()

    def stop(self) -> None:
        self._fed.put(None)
        if self._current is not None:
            self._current.stop()

    def join(self) -> None:
        """Ray's tasks end with the batch; nothing of this process is left to wait for."""


class Evaluator:
    """Judges submitted candidates against the problems in one directory; thread-safe.

        with Evaluator("problems", device="cpu") as ev:
            result = ev.submit(code, "relu").result()

    Options: `device` ("cpu" or "cuda"; default cuda when available), `gpus` (indices, one
    lane each), `db` (a SQLite file: results are stored as a run there; default none), `build_dir`,
    `jobs`, `warm_workers`, `sandbox` ("auto", "strict", "off"), `backend` ("local" or "ray"),
    `ray_address`, and any EvalConfig field (precision, trials, timeout_s, atol, ...). Leaving it
    (or `close()`) kills every worker it started."""

    def __init__(self, problems: str | os.PathLike[str], *, device: str | None = None, gpus: list[int] | None = None,
                 db: str | os.PathLike[str] | None = None, build_dir: str | os.PathLike[str] | None = None,
                 jobs: int | None = None, warm_workers: int | None = None, sandbox: str = "auto",
                 backend: str = "local", ray_address: str | None = None, **config):
        host = HostEnv.from_environ(os.environ, str(Path.home()))
        self.problems_dir = Path(problems)
        self.problems = discover(self.problems_dir, None)[0]
        self._problems_by_id = {p.id: p for p in self.problems}
        self.config = _config(device, config)
        if self.config.memcheck:  # a pass once a whole run is judged; an Evaluator's run never ends that way
            raise UsageError("memcheck runs as a pass at the end of a whole run: python -m harness eval CANDIDATES "
                             "--memcheck")
        limits = default_limits()
        args = SimpleNamespace(gpus=",".join(map(str, gpus)) if gpus is not None else None, backend=backend,
                               ray_address=ray_address, jobs=jobs, warm_workers=warm_workers, sandbox=sandbox,
                               build_dir=build_dir, max_host_memory=limits.host_memory, max_processes=limits.processes,
                               max_scratch=limits.scratch, max_file_size=limits.file_size)
        if sandbox not in ("auto", "strict", "off") or backend not in ("local", "ray"):
            raise UsageError(f"sandbox must be auto, strict or off (not {sandbox!r}); backend local or ray (not {backend!r})")
        self.setup = options.run_setup(args, host, options.run_scale(args, self.config))
        self._db_path = Path(db) if db is not None else None
        self._scratch = Path(tempfile.mkdtemp(prefix="harness-api-"))  # in-memory answers, as candidate files
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[Candidate, list[concurrent.futures.Future]]] = {}
        self._closed = False
        self._failure: BaseException | None = None
        self.run_id: str | None = None
        started: concurrent.futures.Future = concurrent.futures.Future()
        self._consumer = threading.Thread(target=self._consume, args=(started,), daemon=True)
        self._consumer.start()
        try:
            self._stream = started.result()
        except BaseException:
            shutil.rmtree(self._scratch, ignore_errors=True)
            raise

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def submit(self, code: str, problem_id: str) -> concurrent.futures.Future[Result]:
        """Judge `code` (a candidate's Python, or a model's transcript ending in it) against
        `problem_id`; the future's result is its Result. The same code twice is judged once when
        the first is still pending."""
        return self.submit_candidate(self.candidate(code, problem_id))

    def map(self, pairs: Iterable[tuple[str, str]]) -> Iterator[Result]:
        """Submit every (code, problem id) pair, then yield each Result as it is decided."""
        futures = [self.submit(code, problem_id) for code, problem_id in pairs]
        for future in concurrent.futures.as_completed(futures):
            yield future.result()

    def candidate(self, code: str, problem_id: str) -> Candidate:
        if self._closed:  # its scratch dir is gone: writing the code there would make it again, for good
            raise UsageError(CLOSED)
        if problem_id not in self._problems_by_id:
            raise UsageError(f"unknown problem id {problem_id!r}; {self.problems_dir} has "
                             + ", ".join(sorted(self._problems_by_id)))
        return write_candidate(code, problem_id, self._scratch)

    def candidates_at(self, path: str | os.PathLike[str]) -> list[Candidate]:
        """The candidates a path names: a candidates directory (as `harness eval` takes), one
        problem's folder in it, or one candidate file (in such a folder, or KernelBench-named)."""
        path = Path(path).resolve()
        if not path.exists():
            raise UsageError(f"{path} is neither a candidate file nor a directory of them")
        if path.is_dir() and path.name not in self._problems_by_id:
            return discover_candidates(path, self.problems)
        root = path.parent if path.is_dir() or KERNELBENCH_NAME.match(path.name) else path.parent.parent
        found = [c for c in discover_candidates(root, self.problems) if Path(c.path).is_relative_to(path)]
        return found if found or path.is_dir() else [read_candidate(path, path.name, None)]

    def submit_candidate(self, candidate: Candidate) -> concurrent.futures.Future[Result]:
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise UsageError(CLOSED)
            if self._failure is not None:
                raise UsageError(f"this Evaluator stopped: {self._failure}")
            waiting = self._pending.get(candidate.rel_path)
            if waiting is not None and waiting[0].source_hash != candidate.source_hash:
                raise UsageError(f"two different candidates named {candidate.rel_path} at once")
            if waiting is not None:
                waiting[1].append(future)
                return future
            self._pending[candidate.rel_path] = (candidate, [future])
            self._stream.feed([candidate])
        return future

    def close(self) -> None:
        """Stop: kill every worker this Evaluator started, finish its run in the database, and
        cancel what was not judged yet."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stream.stop()
        self._consumer.join()
        self._stream.join()
        with self._lock:
            for _, futures in self._pending.values():
                for future in futures:
                    future.cancel()
            self._pending.clear()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _open_stream(self, run_id: str):
        if self.setup.scale.backend == "ray":
            return BatchStream(self.problems, self.config, run_id, self.setup)
        pipeline = open_pipeline(self.problems, [], self.config, run_id, self.setup)
        pipeline.open_stream()
        return pipeline

    def _consume(self, started: concurrent.futures.Future) -> None:
        """The thread that owns the database: stores each result, then hands it to its futures."""
        with contextlib.ExitStack() as stack:
            try:
                db = stack.enter_context(open_db(self._db_path)) if self._db_path else None
                run, out_dir, save, watched = self._start_run(db)
                stream = self._open_stream(run.run_id)
            except BaseException as exc:
                started.set_exception(exc)
                return
            self.run_id = run.run_id
            started.set_result(stream)
            keeper = Keeper(self.setup.sandbox, save, watched)
            try:
                for result in stream.stream():
                    self._resolve(keeper.keep(result, stream.active.drain()))
            except BaseException as exc:  # a store that failed, a harness bug: every waiter hears it
                if not self._closed:  # once closing, a stream cut short by the stop: close cancels the waiters
                    self._fail(exc)
                stream.stop()
            if db is not None:
                run.finished_at = now()
                run.interference += keeper.interference
                db.save_run(run, out_dir)

    def _start_run(self, db: Database | None):
        """This Evaluator's run: recorded in the database when there is one (its results then
        render with `harness report --run ID`), else just the id in every Result."""
        run, out_dir, _ = start_run(db, self.config, EvalOptions(candidates_dir=self._scratch,
                                                                 problems_dir=self.problems_dir, db=Path(".")))
        run.sandbox = protections(self.setup.sandbox, self.config.device)
        if db is None:
            return run, out_dir, lambda result: None, []
        db.save_run(run, out_dir)

        def save(result: Result) -> None:
            try:
                db.record(result, self._problems_by_id.get(result.problem or ""), self._pending[result.candidate][0])
            except (sqlite3.Error, OSError) as exc:
                raise StoreFailed(f"cannot record results in {db.path}: {exc}") from None

        return run, out_dir, save, [db.path, db.path.with_name(db.path.name + "-wal")]

    def _resolve(self, result: Result) -> None:
        with self._lock:
            _, futures = self._pending.pop(result.candidate, (None, []))
        for future in futures:
            future.set_result(result)

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            self._failure = exc
            pending, self._pending = self._pending, {}
        for _, futures in pending.values():
            for future in futures:
                future.set_exception(exc)


def _config(device: str | None, fields: dict) -> EvalConfig:
    try:
        return EvalConfig(device=resolve_device(device), **fields)
    except ValidationError as exc:
        raise UsageError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())) from None


def evaluate(candidates: Iterable, problems: str | os.PathLike[str], **options) -> list[Result]:
    """Judge every candidate (each a (code, problem id) pair, a candidate file, or a directory of
    them) against the problems in `problems`; the Results in the order given. Options as for
    Evaluator."""
    with Evaluator(problems, **options) as evaluator:
        chosen: list[Candidate] = []
        for source in candidates:
            if isinstance(source, tuple):
                chosen.append(evaluator.candidate(*source))
            else:
                chosen += evaluator.candidates_at(source)
        futures = [evaluator.submit_candidate(candidate) for candidate in chosen]
        return [future.result() for future in futures]

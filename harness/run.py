"""A run from start to finish: discover what to judge, start or resume the run, pick the backend,
watch the results for tampering while storing each one, and finish with run.json and the report.
Environment variables are read at the edge (the command line, the API) and come in as a HostEnv."""

from __future__ import annotations

import datetime as dt
import platform
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic import BaseModel
from tqdm import tqdm

from .builds.cache import BuildCache, toolchain
from .builds.header import PrecompiledHeader, header_root
from .errors import StoreFailed, UsageError
from .inputs.discovery import discover, select, some_named
from .judge import verdicts
from .judge.compare import compile_parent_kernels_into
from .judge.memcheck import find_sanitizer
from .present.export import to_feedback_jsonl
from .present.site import render_site
from .present.summary import summary_json
from .records import (
    Candidate,
    EvalConfig,
    HostEnv,
    Limits,
    MachineInfo,
    Problem,
    Result,
    RunInfo,
    SandboxMode,
    SandboxReport,
)
from .schedule.devices import device_for
from .schedule.local import Pipeline
from .schedule.plan import RunPlan, RunScale, plan_resources
from .schedule.sanitize import sanitize_passed, unsanitized
from .store import Database, ResultsFile, StoreError, files_state, now
from .version import __version__
from .worker import confine, processes
from .worker.sandbox import SandboxPolicy, SandboxUnavailable, decide_policy


class RunSetup(BaseModel):
    """How a run evaluates, besides the EvalConfig that decides verdicts: where builds go, how it
    spreads out, how its workers are confined, and the caller's environment."""

    scale: RunScale = RunScale()
    host: HostEnv
    build_root: Path
    sandbox: SandboxPolicy


def prepare_sandbox(mode: SandboxMode, limits: Limits) -> SandboxPolicy:
    """Decide the run's confinement once; say loudly what this kernel cannot give. With any
    confinement on, this process becomes non-dumpable: no worker can read its memory or its
    environment (the caller's secrets) through /proc."""
    try:
        policy = decide_policy(mode, limits)
    except SandboxUnavailable as exc:
        raise UsageError(str(exc)) from None
    missing = policy.report().missing
    if missing and mode is SandboxMode.auto:
        print("warning: the sandbox lacks " + "; ".join(missing), file=sys.stderr)
    if mode is not SandboxMode.off:
        confine.not_dumpable()
    return policy


def protections(policy: SandboxPolicy, device: str) -> SandboxReport:
    """Which protections a run's workers have on `device`: the sandbox's, and what the device adds
    (judge/device.py); what this host cannot give the device is said loudly too."""
    report = device_for(device).report(policy)
    missing = [line for line in report.missing if line not in policy.report().missing]
    if missing and policy.mode is SandboxMode.auto:
        print("warning: this host lacks " + "; ".join(missing), file=sys.stderr)
    return report


class EvalOptions(BaseModel):
    """What `harness eval` was asked to do, beyond the EvalConfig that decides verdicts."""

    candidates_dir: Path
    problems_dir: Path
    db: Path
    out: Path | None = None
    build_dir: Path | None = None
    problem_ids: list[str] | None = None
    resume: str | None = None  # a run id, or "latest"
    # The EvalConfig fields the caller set (on the command line, to other than their defaults): a
    # resumed run keeps its own options, and refuses to go on where one of these differs.
    given: dict[str, object] = {}
    feedback: Path | None = None


class Finished(BaseModel):
    run: RunInfo
    results: list[Result]
    results_path: Path
    index: Path


def resolve_device(requested: str | None) -> str:
    """The device the run evaluates on, once this host is known to allow what timing there needs:
    on the CPU the parent reads timed outputs from its workers' memory (worker/parent.py)."""
    device = requested or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but torch sees no CUDA device here")
    if device == "cpu" and (why := processes.reading_refused()):
        raise UsageError(f"this host forbids the harness to read its workers' memory ({why}), which timing on the "
                         "CPU needs: run it where kernel.yama.ptrace_scope is 0 or 1 (at 2, with CAP_SYS_PTRACE)")
    return device


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def describe_machine(device: str) -> MachineInfo:
    """What the run executed on, recorded with every run."""
    on_gpu = device == "cuda"
    return MachineInfo(
        hostname=socket.gethostname(), device=device,
        device_name=torch.cuda.get_device_name() if on_gpu else (platform.processor() or platform.machine()),
        driver=_nvidia_driver() if on_gpu else None, cuda=torch.version.cuda, torch=torch.__version__,
        python=platform.python_version(), harness=__version__,
    )


def open_db(path: Path) -> Database:
    try:
        return Database(path)
    except (StoreError, OSError) as exc:
        raise UsageError(str(exc)) from None
    except sqlite3.DatabaseError as exc:  # not a database at all
        raise UsageError(f"{path}: {exc}") from None


def start_run(db: Database, config: EvalConfig, options: EvalOptions) -> tuple[RunInfo, Path, set]:
    """A new run, or the one --resume names, with what it already judged."""
    machine = describe_machine(config.device)
    if options.resume is None:
        device = device_for(config.device)
        run_id = dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)
        run = RunInfo(run_id=run_id, started_at=now(), machine=machine, config=config,
                      problems_dir=str(options.problems_dir.resolve()),
                      candidates_dir=str(options.candidates_dir.resolve()),
                      timing_clock=device.clock_means, speedup_means=device.speedup_means)
        return run, options.out or Path("reports") / run_id, set()
    run, out_dir = run_to_resume(db, options)
    if run.machine.device_name != machine.device_name:
        raise UsageError(f"run {run.run_id} ran on {run.machine.device_name} and this machine's {config.device} is "
                         f"{machine.device_name}: its timings would not compare; start a new run (no --resume)")
    return run, options.out or out_dir, db.done(run.run_id, again=verdicts.HARNESS_FAILED)  # a bug may be fixed since


def option_of(field: str) -> str:
    """The eval option that sets an EvalConfig field (timeout_s: --timeout)."""
    return "--" + field.removesuffix("_s").replace("_", "-")


def run_to_resume(db: Database, options: EvalOptions) -> tuple[RunInfo, Path]:
    """The run --resume names (with no id, the latest of these candidates and problems) and its
    output dir; a UsageError where there is none, or where an option the caller set differs from
    the run's own (which the resumed run keeps, every option it was not given included)."""
    run_id = options.resume if options.resume != "latest" else db.latest_run_of(options.candidates_dir, options.problems_dir)
    if run_id is None:
        raise UsageError(f"nothing to resume: no run of {options.candidates_dir} against {options.problems_dir} in {db.path}")
    try:
        run, out_dir = db.run(run_id)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    differs = {field: getattr(run.config, field) for field, value in options.given.items()
               if getattr(run.config, field) != value}
    if differs:
        raise UsageError(f"run {run_id} was made with " + ", ".join(f"{option_of(f)} {'auto' if v is None else v}"
                                                                 for f, v in differs.items())
                         + ": --resume goes on with the run's own options; drop " + ", ".join(map(option_of, differs))
                         + ", or start a new run (no --resume)")
    return run, out_dir


def resumed_config(options: EvalOptions) -> EvalConfig:
    """The options of the run --resume names, which it goes on with (`run_to_resume`)."""
    with open_db(options.db) as db:
        return run_to_resume(db, options)[0].config


def run_plan(problems: list[Problem], config: EvalConfig, run_id: str, setup: RunSetup) -> RunPlan:
    """The run's fixed facts on this machine: its resources, build cache and confinement."""
    scale = setup.scale
    resources = plan_resources(config.device, scale.gpus, scale.jobs, scale.warm_workers)
    cache = BuildCache(setup.build_root, toolchain(config.device, resources.gpus, setup.host, setup.sandbox.namespaces),
                       PrecompiledHeader(header_root(setup.host.cache_home)))
    return RunPlan(problems, config, run_id, cache, resources, setup.host, setup.sandbox)


def open_pipeline(problems: list[Problem], candidates: list[Candidate], config: EvalConfig, run_id: str,
                  setup: RunSetup):
    """The backend that runs this evaluation: this machine, or a Ray cluster."""
    plan = run_plan(problems, config, run_id, setup)
    if config.device == "cuda":
        compile_parent_kernels_into(plan.cache.parent_triton)
    if setup.scale.backend == "ray":
        from .schedule.ray_cluster import RayPipeline  # Ray is an optional extra

        return RayPipeline(plan, candidates, setup.scale.ray_address)
    return Pipeline(plan, candidates)


class Keeper:
    """Stores each result as it comes, watching the results on disk between two saves.

    Only the harness writes the results between two saves. Under a sandbox that confines every
    worker's writes, a change there is no candidate's doing: it is recorded as interference with
    the run and this session's results are written back. Without one, the candidates whose code
    ran meanwhile (in a build or an evaluation, on any GPU) are rejected (docs/threat-model.md)."""

    def __init__(self, sandbox: SandboxPolicy, save: Callable[[Result], None], watched: list[Path] = ()):
        self.confined = sandbox.report().confines_files
        self.save, self.watched = save, list(watched)
        self.last_state = files_state(self.watched)
        self.recorded: list[Result] = []
        self.suspects: set[str] = set()
        self.interference: list[str] = []

    def keep(self, result: Result, ran: set[str]) -> Result:
        """Store `result`; `ran`: the candidates whose code ran since the last one was kept."""
        if files_state(self.watched) != self.last_state:
            if self.confined:
                self.interference.append(f"{now()}: the results changed on disk during the run, though no worker "
                                         "could write there; this run's results were written back")
            else:
                self.suspects |= ran
            print(f"warning: the results changed on disk{'' if self.confined else ' while ' + ', '.join(sorted(ran)) + ' ran'};"
                  " rewriting this run's results", file=sys.stderr)
            for earlier in self.recorded:
                self.save(earlier)
        if result.candidate in self.suspects:
            result = verdicts.tampered(result)
        result.recorded_at = now()
        self.save(result)
        if self.watched:  # kept to be written back (none when nothing is watched: a long API session)
            self.recorded.append(result)
        self.last_state = files_state(self.watched)
        return result


def evaluate(candidates: list[Candidate], problems: list[Problem], config: EvalConfig, run_id: str,
             setup: RunSetup, save: Callable[[Result], None], watched: list[Path] = ()) -> list[str]:
    """Evaluate and `save` each result as it comes (see Keeper); returns the interference seen."""
    keeper = Keeper(setup.sandbox, save, watched)
    with open_pipeline(problems, candidates, config, run_id, setup) as pipeline, \
            tqdm(total=len(candidates), unit="cand", desc="eval", file=sys.stderr) as bar:
        for result in pipeline.results():
            result = keeper.keep(result, pipeline.active.drain())
            bar.set_postfix_str(f"built {pipeline.builds_done}/{pipeline.builds_total}; "
                                f"{result.candidate}: {result.status.value}", refresh=False)
            bar.update(1)
    return keeper.interference


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # unwinds through the workers' context managers, which kill them


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: what was judged is kept, and reported (`index`, None if a second
    interrupt stopped that too); the run can be resumed."""

    def __init__(self, run_id: str, index: Path | None = None):
        super().__init__(run_id)
        self.run_id, self.index = run_id, index


def _report_so_far(db: Database, run: RunInfo, out_dir: Path) -> Path | None:
    """The report of what an interrupted run judged, the run shown unfinished; None when
    interrupted again meanwhile."""
    try:
        return render_site(run, db.results(run.run_id), lambda r: db.code(r.candidate_hash), out_dir)
    except (KeyboardInterrupt, Exception):  # the resume command matters more than this report
        return None


def eval_run(options: EvalOptions, config: EvalConfig, setup: RunSetup) -> Finished:
    """`harness eval`: judge every candidate not judged yet, store, and render the run."""
    problems, candidates = select(*discover(options.problems_dir, options.candidates_dir), options.problem_ids)
    if not candidates:
        raise UsageError(f"no candidates in {options.candidates_dir}"
                         + (f" for {', '.join(options.problem_ids)}" if options.problem_ids else "")
                         + " (expected <problem_id>/<name>.{py,txt,md} or KernelBench-named files): nothing recorded")
    some_named(candidates, options.problems_dir)
    with open_db(options.db) as db:
        run, out_dir, done = start_run(db, config, options)
        config = run.config  # a resumed run's own
        sanitizer = sanitizer_for(config, setup)
        run.sandbox = protections(setup.sandbox, config.device)
        problems_by_id = {p.id: p for p in problems}
        todo = [c for c in candidates
                if ((problems_by_id[c.problem_id].source_hash if c.problem_id in problems_by_id else None),
                    c.source_hash) not in done]
        if options.resume:
            print(f"resuming run {run.run_id}: {len(candidates) - len(todo)} judged already, {len(todo)} to go",
                  file=sys.stderr)
        results_file = ResultsFile(out_dir)  # an output dir that cannot be written stops the run before it is recorded
        db.save_run(run, out_dir)
        by_path = {c.rel_path: c for c in candidates}

        def save(result: Result, again: bool = False) -> None:
            """Record `result`; `again`: one judged before (--memcheck's), whose line it replaces."""
            try:
                db.record(result, problems_by_id.get(result.problem or ""), by_path[result.candidate])
                if again:
                    results_file.rewrite(db.results(run.run_id))
                else:
                    results_file.append(result)
            except (sqlite3.Error, OSError) as exc:
                raise StoreFailed(f"cannot record results in {options.db} or {results_file.path}: {exc}; "
                                  f"what was recorded before is kept (--resume {run.run_id})") from None

        watched = [options.db, options.db.with_name(options.db.name + "-wal"), results_file.path]
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            run.interference += evaluate(todo, problems, config, run.run_id, setup, save, watched)
            if sanitizer is not None and (passed := unsanitized(db.results(run.run_id), by_path, problems_by_id)):
                keeper = Keeper(setup.sandbox, lambda r: save(r, again=True), watched)  # their code runs again
                run.memcheck_s = (run.memcheck_s or 0.0) + sanitize_passed(
                    passed, by_path, run_plan(problems, config, run.run_id, setup), sanitizer,
                    lambda r: keeper.keep(r, {r.candidate}))
        except KeyboardInterrupt:
            raise Interrupted(run.run_id, _report_so_far(db, run, out_dir)) from None
        finally:
            signal.signal(signal.SIGTERM, previous)
        run.finished_at = now()
        db.save_run(run, out_dir)
        results = db.results(run.run_id)
        results_file.rewrite(results)
        (out_dir / "run.json").write_text(run.model_dump_json(indent=2))
        (out_dir / "summary.json").write_text(summary_json(results))
        if options.feedback:
            options.feedback.write_text(to_feedback_jsonl(results))
        index = render_site(run, results, lambda r: db.code(r.candidate_hash), out_dir)
    return Finished(run=run, results=results, results_path=results_file.path, index=index)


def sanitizer_for(config: EvalConfig, setup: RunSetup) -> str | None:
    """compute-sanitizer's binary where the run asks for --memcheck (None where it does not); a
    UsageError where it cannot have it."""
    if not config.memcheck:
        return None
    if config.device != "cuda":
        raise UsageError("--memcheck runs compute-sanitizer over GPU kernels: it needs a CUDA run (--device cuda)")
    if setup.scale.backend == "ray":
        raise UsageError("--memcheck runs on this machine's GPUs, not with --backend ray: drop one of them")
    sanitizer = find_sanitizer(setup.host.passed)
    if sanitizer is None:
        raise UsageError("--memcheck needs compute-sanitizer (CUDA's toolkit): none on the PATH, in CUDA_HOME/bin, "
                         "CUDA_PATH/bin or /usr/local/cuda/bin")
    return sanitizer


def judge_file(path: Path, problems_dir: Path, db_path: Path, device: str | None, setup: RunSetup) -> Result:
    """One candidate file judged in a run of its own (`explain` of a file the database has no
    judgement of), recorded in the database; its result."""
    from .inputs.candidates import KERNELBENCH_NAME

    root = path.parent if KERNELBENCH_NAME.match(path.name) else path.parent.parent
    problems, candidates = discover(problems_dir, root)
    mine = [c for c in candidates if Path(c.path) == path]
    if not mine or mine[0].problem_id is None:
        raise UsageError(f"{path} names no problem in {problems_dir}")
    problems = [p for p in problems if p.id == mine[0].problem_id]
    config = EvalConfig(device=resolve_device(device))
    options = EvalOptions(candidates_dir=root, problems_dir=problems_dir, db=db_path, problem_ids=[problems[0].id])
    with open_db(db_path) as db:
        run, out_dir, _ = start_run(db, config, options)
        db.save_run(run, out_dir)
        run.sandbox = protections(setup.sandbox, config.device)
        evaluate(mine, problems, config, run.run_id, setup, lambda r: db.record(r, problems[0], mine[0]))
        run.finished_at = now()
        db.save_run(run, out_dir)
        return db.latest_result(mine[0].source_hash)

"""Typed records that flow between the stages. Every stage takes and returns these.

    inputs    -> Problem, Candidate
    build     -> BuildOutcome (build/cache.py)
    worker    -> Reply, TimingStats (worker/protocol.py)
    judge     -> Verdict + Observations -> Result
    run/store -> RunInfo, Result rows
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# The version of one record in results.jsonl (and of the JSON kept per result in the database).
# The database schema has its own number (store.DATABASE_SCHEMA_VERSION). 2: reference_recalibrated_timing,
# and a speedup against it when it is set. 3: timing_bound. 4: calls_per_sample in timings.
# 5: the outputs' commit timed apart in timing_bound. 6: others_cores in timings, and busy_machine.
# 7: library_cpu_ms_per_call and the reference's. 8: sparse_library_cpu_ms_per_call and the reference's.
# 9: host_ms_per_call and the reference's; a GPU's timings in device time (clock "cuda_device").
# 10: reference_paired_timing, and a speedup from the pairs with its speedup_interval where it is set.
# 11: sanitized (--memcheck: compute-sanitizer's passes over a candidate that passed).
RESULT_SCHEMA_VERSION = 11

Precision = Literal["fp32", "fp16", "bf16"]
Baseline = Literal["eager", "compile"]
Device = Literal["cpu", "cuda"]

# KernelBench's tolerances per precision (fp32 tightened to 1e-4 in late 2025).
DEFAULT_TOLERANCE: dict[str, float] = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}


PRECISION_POLICY = (
    "correctness against a strict-fp32 reference (TF32 off in matmuls and cuDNN); headline speedup against that "
    "reference's time; speedup_default_math against the reference under PyTorch's default math flags (TF32 in cuDNN)")


class Status(str, enum.Enum):
    """The verdict. Only judge/verdicts.py gives a Result one."""

    ok = "ok"
    mismatch = "mismatch"
    compile_error = "compile_error"
    load_error = "load_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    crash = "crash"
    rejected = "rejected"
    skipped = "skipped"


class Phase(str, enum.Enum):
    """Where an evaluation stopped (None on a Result that got through every phase)."""

    extract = "extract"
    load = "load"
    init = "init"
    correctness = "correctness"
    timing = "timing"
    profile = "profile"
    shapes = "shapes"
    memcheck = "memcheck"  # compute-sanitizer's pass, after every candidate of the run was timed (--memcheck)


class CandidateKind(str, enum.Enum):
    """What a candidate compiles; decides whether it can run without a GPU."""

    cuda = "cuda"  # load_inline with cuda_sources, or raw __global__ kernels
    triton = "triton"
    cpp = "cpp"  # load_inline with cpp_sources only
    python = "python"  # no compiled code at all

    def runs_on(self, device: str) -> bool:
        """C++ extensions built from cpp_sources alone are CPU kernels; CUDA and Triton need a GPU."""
        if self in (CandidateKind.cuda, CandidateKind.triton):
            return device == "cuda"
        if self is CandidateKind.cpp:
            return device == "cpu"
        return True

    @property
    def built_ahead(self) -> bool:
        """load_inline extensions are compiled by a build worker first; Triton compiles at its first call."""
        return self in (CandidateKind.cuda, CandidateKind.cpp)


class Problem(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    path: str
    source_hash: str
    # The source as read at discovery: workers get a private copy of it, so a candidate that
    # rewrites problem files on disk changes nothing for this run.
    source: str = Field("", repr=False, exclude=True)
    kernelbench_level: int | None = None
    kernelbench_number: int | None = None
    atol: float | None = None  # per-problem override from module constant ATOL
    rtol: float | None = None


class Candidate(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str  # absolute
    rel_path: str  # relative to the candidates dir; the `candidate` key of a result
    problem_id: str | None  # None when it names no known problem
    source_hash: str  # of the file as found
    code: str | None  # extracted Python, None when extraction failed
    code_hash: str | None
    extraction_error: str | None = None
    kind: CandidateKind = CandidateKind.python
    problem_unusable: str | None = None  # why its problem file cannot be loaded: not run, not its fault


class Tolerance(BaseModel):
    atol: float
    rtol: float


class EvalConfig(BaseModel):
    device: Device
    precision: Precision = "fp32"
    baseline: Baseline = "eager"
    correctness_trials: int = Field(5, ge=1)
    warmup: int = Field(3, ge=0)
    trials: int | None = Field(None, ge=1)  # timed calls per model; None: adaptive (--trials auto)
    min_trials: int = Field(5, ge=1)
    max_trials: int = Field(200, ge=1)
    time_budget_s: float = Field(2.0, gt=0)  # adaptive timing stops once a model's timing took this long
    timeout_s: float = Field(300.0, gt=0)  # each run phase: a trial, the timing
    build_timeout_s: float = Field(900.0, gt=0)  # import, which includes compiling
    seed: int = 42
    strict_shapes: bool = False  # a candidate correct only at the official shape is a mismatch
    # compute-sanitizer over each candidate that passed, in a pass of its own after the run's timings
    # (judge/memcheck.py): memcheck, and racecheck where the code declares shared memory.
    memcheck: bool = False
    atol: float | None = None  # global override; else per problem; else per precision
    rtol: float | None = None

    def tolerance_for(self, problem: Problem) -> Tolerance:
        default = DEFAULT_TOLERANCE[self.precision]
        return Tolerance(
            atol=self.atol if self.atol is not None else problem.atol if problem.atol is not None else default,
            rtol=self.rtol if self.rtol is not None else problem.rtol if problem.rtol is not None else default,
        )


# Variables a build or a CUDA program legitimately needs; everything else (tokens, keys,
# credentials of the caller) stays out of candidate processes.
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_HOME", "CUDA_PATH",
              "CUDA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "MAX_JOBS")
PASSED_PREFIXES = ("NVIDIA_", "CUDNN_")
# What besides the code decides a build's output (part of the build cache key).
BUILD_FLAG_VARIABLES = ("CC", "CXX", "CUDA_HOME", "CUDA_PATH", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")


class HostEnv(BaseModel):
    """The caller's environment, read once at the edge (the command line or the API) and handed
    down: nothing below reads os.environ."""

    model_config = ConfigDict(frozen=True)

    passed: dict[str, str] = {}  # what workers may see (PASSED_ENV, PASSED_PREFIXES)
    build_flags: dict[str, str] = {}  # BUILD_FLAG_VARIABLES that are set
    cuda_visible_devices: str | None = None
    torch_cuda_arch_list: str | None = None
    max_jobs: str | None = None
    cache_home: str  # XDG_CACHE_HOME, or ~/.cache

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], home: str) -> HostEnv:
        return cls(
            passed={k: v for k, v in environ.items() if k in PASSED_ENV or k.startswith(PASSED_PREFIXES)},
            build_flags={k: environ[k] for k in BUILD_FLAG_VARIABLES if k in environ},
            cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
            torch_cuda_arch_list=environ.get("TORCH_CUDA_ARCH_LIST") or None,
            max_jobs=environ.get("MAX_JOBS"),
            cache_home=environ.get("XDG_CACHE_HOME") or f"{home}/.cache",
        )


class SandboxMode(str, enum.Enum):
    auto = "auto"  # use what the kernel offers, say loudly what is missing
    strict = "strict"  # refuse to run without all of it
    off = "off"  # no confinement (workers still get a scrubbed environment and a scratch dir)


class Limits(BaseModel):
    """What one worker may use (worker/sandbox.py applies them). Bytes unless named otherwise."""

    host_memory: int = Field(ge=1 << 26)  # resident memory of the worker and all it started (the parent's watchdog)
    processes: int = Field(512, ge=1)  # at once (watchdog; RLIMIT_NPROC inside a user namespace)
    scratch: int = Field(8 << 30, ge=1 << 20)  # its scratch dir (and a build worker's key dir): the watchdog
    file_size: int = Field(2 << 30, ge=1 << 20)  # any one file it writes, its log included (RLIMIT_FSIZE)
    open_files: int = Field(4096, ge=64)  # RLIMIT_NOFILE


class SandboxReport(BaseModel):
    """Which protections a run's workers had, and what this kernel could not give."""

    mode: SandboxMode
    active: list[str]
    missing: list[str]  # "protection: why"

    @property
    def confines_files(self) -> bool:
        """Whether no worker can write outside its scratch (and a build worker's key dir)."""
        return "landlock_filesystem" in self.active


class TimingStats(BaseModel):
    median_ms: float
    iqr_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    n: int
    samples_ms: list[float]
    # cuda_device: the GPU's own time per call, the host's path into it left out (worker/timing.py);
    # cuda_event: events around the call and the host's path into it (before schema 9; since, with a
    # torch before 2.8, which has no hold: the host's path in, the join's own latency left out).
    clock: Literal["cuda_device", "cuda_event", "perf_counter"]
    ci_low_ms: float | None = None  # the median's 95% confidence interval (order statistics)
    ci_high_ms: float | None = None
    # Why timing stopped: converged, time_budget, max_trials, fixed; or sampling: past those, until
    # a CPU timing's calls sampled sparsely could tell hidden library work (cpu/measurement.py).
    stopped: str | None = None
    # Calls per sample: each sample is the mean of so many calls timed back to back on inputs of
    # their own (a batch, judge/timing/protocol.py), n samples of them.
    calls_per_sample: int = 1
    # A GPU run: milliseconds each clock limit (power, thermal, the board's, reliability) held the
    # GPU's clocks down while these calls were timed, only those that did (judge/nvml.py); None
    # where NVML could not be read.
    throttled_ms: dict[str, float] | None = None
    # A CPU run: how many cores, on average, processes outside the run kept busy while these calls
    # were timed (None: not measured). Above BUSY_CORES the speed is not an idle machine's.
    others_cores: float | None = None

    @property
    def calls(self) -> int:
        """Calls timed in all."""
        return self.n * self.calls_per_sample

    def describe_n(self) -> str:
        """How many samples, and of how many calls each where a sample is a batch's."""
        return f"n = {self.n}" + (f" batches of {self.calls_per_sample} calls" if self.calls_per_sample > 1 else "")


KernelOrigin = Literal["candidate", "pytorch", "cudnn", "cublas", "torch_compile", "other_library"]


class KernelShare(BaseModel):
    """One device kernel a profiled forward ran: where its code came from and its share of the
    call's device time."""

    name: str
    origin: KernelOrigin
    device_ms: float
    share: float


class CheckResult(BaseModel):
    """Outcome of comparing one trial's outputs with the reference's."""

    passed: bool
    reason: str | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatched_elements: int | None = None
    total_elements: int | None = None


class CompilerDiagnostic(BaseModel):
    """One compiler message, located in the generated source and, where found, in the candidate file."""

    severity: str  # error, fatal error, warning
    message: str
    file: str | None = None  # base name as the compiler printed it (main.cpp, cuda.cu, a header)
    line: int | None = None
    column: int | None = None
    in_candidate: bool = False  # in the candidate's own sources rather than a header
    candidate_line: int | None = None  # the line of the candidate file this source line came from

    def one_line(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else ""
        origin = f" (candidate line {self.candidate_line})" if self.candidate_line else ""
        return f"{where}{self.severity}: {self.message}{origin}"


class Diagnosis(BaseModel):
    """Why a candidate failed, in one line, with a hint that fixes it."""

    category: str
    summary: str
    hint: str
    evidence: list[str] = Field(default_factory=list)
    other_causes: list[str] = Field(default_factory=list)  # further categories that also apply


class Verdict(BaseModel):
    """A decision of judge/verdicts.py: the status, its one-line reason and what shows it."""

    status: Status
    error: str | None = None
    flags: list[str] = Field(default_factory=list)  # flags that come with this verdict (how it cheated)
    evidence: list[str] = Field(default_factory=list)
    phase: Phase | None = None  # where it was decided, when that is not where the evaluation stood
    compiler_diagnostics: list[CompilerDiagnostic] = Field(default_factory=list)


class TimingBound(BaseModel):
    """What the harness's clock held a model's reported times to (judge/timing/bound.py, vouched_median):
    per timed call, what the parent saw beyond the reported time, for the reference's calls just
    before and for this model's (in the order of `timing.samples_ms`), and the slack allowed. The
    vouched median can be computed again from these alone."""

    reference_overhead_ms: list[float]
    overhead_ms: list[float]
    slack_ms: float
    # Of those overheads, what the commit of the outputs took (empty in records of schema 4 and before).
    reference_commit_ms: list[float] = []
    commit_ms: list[float] = []


class Measured(BaseModel):
    """What evaluating a candidate measured, whatever the verdict turns out to be: the fields an
    evaluation's Observations and its Result share (docs: README, "What a result means")."""

    max_abs_err: float | None = None
    max_rel_err: float | None = None
    trials_passed: int = 0
    timing: TimingStats | None = None
    reference_timing: TimingStats | None = None  # the problem's reference, timed once before its candidates
    # The reference timed again just before this candidate's timing, when that was surely faster
    # (the machine had drifted): the speedup is against it (judge/reference.py, surely_faster).
    reference_recalibrated_timing: TimingStats | None = None
    # A GPU run: the reference's commands timed in alternation with the candidate's, one after each
    # of its recorded ones (judge/timing/protocol.py): its samples pair with `timing`'s in order, and
    # the speedup is their ratios' median (drift of the GPU between the two cancels in each ratio).
    reference_paired_timing: TimingStats | None = None
    # The harness's own clock around the timed calls, per call, overhead included: a bound on the
    # timings reported from inside the workers.
    wall_ms_per_call: float | None = None
    reference_wall_ms_per_call: float | None = None
    # The host's time into each timed call, from its start to forward's return, per call (median):
    # on a GPU the part of it inside the hold is not in the timing (worker/timing.py).
    host_ms_per_call: float | None = None
    reference_host_ms_per_call: float | None = None
    # A CPU run: CPU time a call in PyTorch's or a numeric library's compute code, sampled from
    # outside the worker (cpu/sampling.py; None where the host refuses perf events, or the kernel
    # throttled the sampling to too long a period): on calls sampled closely, and sparsely on its
    # recorded calls (cpu/measurement.py).
    library_cpu_ms_per_call: float | None = None
    sparse_library_cpu_ms_per_call: float | None = None
    reference_library_cpu_ms_per_call: float | None = None
    reference_sparse_library_cpu_ms_per_call: float | None = None
    timing_bound: TimingBound | None = None  # the per-call evidence that bound (judge/timing/bound.py)
    # The reference timed again under PyTorch's default math flags (TF32 in cuDNN convolutions, as
    # PyTorch ships): the speedup a user sees against PyTorch as usually run. The headline
    # `speedup` is against strict fp32, the math the candidate's outputs are held to.
    reference_default_math_timing: TimingStats | None = None
    # From a profiled forward: its device kernels by origin, the share of device time in the
    # candidate's own kernels (None on a CPU run), and the hardware floor over its median.
    kernels: list[KernelShare] = Field(default_factory=list)
    custom_kernel_share: float | None = None
    floor_fraction: float | None = None
    log_tail: str | None = None
    elapsed_s: float = 0.0  # evaluating it (its worker's life), builds ahead of evaluation excluded
    # Of elapsed_s: wall seconds per phase reached (load includes booting a worker when none was
    # ready), and "exit": killing the worker (and keeping what Triton compiled in it). Where a
    # candidate's time went beyond its device time.
    phase_s: dict[str, float] = Field(default_factory=dict)
    build_s: float | None = None  # compiling it ahead of evaluation; 0 when the build cache had it
    build_cached: bool = False
    gpu: int | None = None  # which GPU evaluated it
    protections: list[str] = Field(default_factory=list)  # what confined its evaluation (worker/sandbox.py)


class Observations(Measured):
    """An evaluation under way: what it measured, the phase it is in, the flags it noticed (with
    their evidence), and its median as the harness's clock vouches for it."""

    phase: Phase | None = None
    flags: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    vouched_median_ms: float | None = None

    def note(self, flag: str, *evidence: str) -> None:
        if flag not in self.flags:
            self.flags.append(flag)
        self.evidence += [line for line in evidence if line]


class Subject(BaseModel):
    """Which (problem, candidate) a result is about."""

    run_id: str
    problem: str | None
    candidate: str
    kind: CandidateKind | None = None
    candidate_hash: str
    code_hash: str | None = None
    problem_hash: str | None = None

    @classmethod
    def of(cls, run_id: str, candidate: Candidate, problem: Problem | None) -> Subject:
        return cls(run_id=run_id, problem=candidate.problem_id, candidate=candidate.rel_path, kind=candidate.kind,
                   candidate_hash=candidate.source_hash, code_hash=candidate.code_hash,
                   problem_hash=problem.source_hash if problem else None)


class SanitizerStatus(str, enum.Enum):
    clean = "clean"
    errors = "errors"  # the candidate's verdict becomes runtime_error, flagged memory_error
    inconclusive = "inconclusive"  # the sanitizer could not judge it (`report` says why); its verdict stands


class Sanitized(BaseModel):
    """One compute-sanitizer pass over a candidate (--memcheck)."""

    tool: Literal["memcheck", "racecheck"]
    status: SanitizerStatus
    seconds: float
    report: str | None = None  # the first error's line, or why the pass did not run
    kernel: str | None = None  # the kernel the first error is in, where the sanitizer names one
    errors: int | None = None  # as its summary counts them


class Heading(BaseModel):
    """The start of a result's line: which candidate, and its verdict with the reason and the flags."""

    schema_version: int = RESULT_SCHEMA_VERSION
    run_id: str
    problem: str | None
    candidate: str
    status: Status
    speedup: float | None = None
    speedup_default_math: float | None = None  # against reference_default_math_timing
    # What the harness noticed: how it cheated, with a `rejected` verdict; or an annotation on any
    # verdict (README, "Flags").
    flags: list[str] = Field(default_factory=list)
    error: str | None = None
    phase: Phase | None = None  # where it stopped: extract, load, init, correctness, timing, profile, shapes
    kind: CandidateKind | None = None
    candidate_hash: str
    code_hash: str | None = None
    problem_hash: str | None = None


# Heading listed last so that its fields come first in each line (pydantic orders a model's
# fields from its last base to its first): a reader of results.jsonl sees the verdict first.
class Result(Measured, Heading):
    """One line of results.jsonl (docs: README, "What a result means"): its heading, what
    evaluating the candidate measured, and the evidence for the verdict."""

    evidence: list[str] = Field(default_factory=list)  # compiler lines, traceback tail, signal
    # The speedup's distribution-free 95% interval, [low, high], where it comes from paired timings.
    speedup_interval: list[float] | None = None
    compiler_diagnostics: list[CompilerDiagnostic] = Field(default_factory=list)
    sanitized: list[Sanitized] = Field(default_factory=list)  # --memcheck's passes, where it ran
    diagnosis: Diagnosis | None = None
    recorded_at: str | None = None

    @property
    def speedup_reference_timing(self) -> TimingStats | None:
        """The reference timing the speedup is against."""
        return self.reference_paired_timing or self.reference_recalibrated_timing or self.reference_timing


class MachineInfo(BaseModel):
    hostname: str
    device: str
    device_name: str
    driver: str | None
    cuda: str | None
    torch: str
    python: str
    harness: str


class RunInfo(BaseModel):
    schema_version: int = RESULT_SCHEMA_VERSION
    run_id: str
    started_at: str
    finished_at: str | None = None
    machine: MachineInfo
    config: EvalConfig
    problems_dir: str
    candidates_dir: str
    sandbox: SandboxReport | None = None
    precision_policy: str = PRECISION_POLICY
    timing_clock: str | None = None  # what the timings, and so the speedups, measure (the device's `clock_means`)
    speedup_means: str | None = None  # how a speedup is made of them (the device's `speedup_means`)
    memcheck_s: float | None = None  # --memcheck's passes that ran to their end (a resumed run adds its own)
    interference: list[str] = Field(default_factory=list)  # changes to the results that no worker could have made

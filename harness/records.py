"""Typed records that flow between the stages. Every stage takes and returns these."""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Precision = Literal["fp32", "fp16", "bf16"]
Baseline = Literal["eager", "compile"]

# KernelBench's tolerances per precision (fp32 tightened to 1e-4 in late 2025).
DEFAULT_TOLERANCE: dict[str, float] = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 1e-2}


class Status(str, enum.Enum):
    ok = "ok"
    mismatch = "mismatch"
    compile_error = "compile_error"
    load_error = "load_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    crash = "crash"
    rejected = "rejected"
    skipped = "skipped"


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


class Tolerance(BaseModel):
    atol: float
    rtol: float


class EvalConfig(BaseModel):
    device: Literal["cpu", "cuda"]
    precision: Precision = "fp32"
    baseline: Baseline = "eager"
    correctness_trials: int = Field(5, ge=1)
    warmup: int = Field(3, ge=0)
    trials: int = Field(100, ge=1)
    timeout_s: float = Field(300.0, gt=0)  # each run phase: a trial, the timing
    build_timeout_s: float = Field(900.0, gt=0)  # import, which includes compiling
    seed: int = 42
    strict_shapes: bool = False  # a candidate correct only at the official shape is a mismatch
    atol: float | None = None  # global override; else per problem; else per precision
    rtol: float | None = None

    def tolerance_for(self, problem: Problem) -> Tolerance:
        default = DEFAULT_TOLERANCE[self.precision]
        return Tolerance(
            atol=self.atol if self.atol is not None else problem.atol if problem.atol is not None else default,
            rtol=self.rtol if self.rtol is not None else problem.rtol if problem.rtol is not None else default,
        )


class TimingStats(BaseModel):
    median_ms: float
    iqr_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    n: int
    samples_ms: list[float]
    clock: Literal["cuda_event", "perf_counter"]


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


class Result(BaseModel):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    problem: str | None
    candidate: str
    status: Status
    speedup: float | None = None
    flags: list[str] = Field(default_factory=list)
    error: str | None = None
    phase: str | None = None  # where it stopped: extract, load, init, correctness, timing
    kind: CandidateKind | None = None
    candidate_hash: str
    code_hash: str | None = None
    problem_hash: str | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    trials_passed: int = 0
    timing: TimingStats | None = None
    reference_timing: TimingStats | None = None
    # The harness's own clock around the timed calls, per call, overhead included: a bound on the
    # timings reported from inside the workers.
    wall_ms_per_call: float | None = None
    reference_wall_ms_per_call: float | None = None
    evidence: list[str] = Field(default_factory=list)  # compiler lines, traceback tail, signal
    compiler_diagnostics: list[CompilerDiagnostic] = Field(default_factory=list)
    diagnosis: Diagnosis | None = None
    log_tail: str | None = None
    elapsed_s: float = 0.0  # evaluating it (its worker's life), builds ahead of evaluation excluded
    build_s: float | None = None  # compiling it ahead of evaluation; 0 when the build cache had it
    build_cached: bool = False
    gpu: int | None = None  # which GPU evaluated it
    recorded_at: str | None = None


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
    schema_version: int = SCHEMA_VERSION
    run_id: str
    started_at: str
    finished_at: str | None = None
    machine: MachineInfo
    config: EvalConfig
    problems_dir: str
    candidates_dir: str

"""Builds: the build cache, where each candidate's extensions are compiled, and how a failed
build is told apart and summarised. The compile itself runs inside a worker (load_inline
compiles at import), either a build worker ahead of evaluation (see pipeline.py) or the
evaluating worker itself.

Cache layout: <root>/<key digest>/ holds torch's build dirs for one candidate code under one
toolchain, plus `outcome.json` once the build is decided. A key covers everything that changes
the compiler's command lines or the binary: the code, torch, CUDA, the target architectures,
the compilers and Python. Two runs sharing a root take `.harness-lock` (flock, released by the
kernel when its holder dies) around any build or load in a key dir.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from pydantic import BaseModel

from .protocol import Failure, WorkerJob
from .records import CompilerDiagnostic, EvalConfig, Problem, Status
from .sandbox import Placement, Worker, WorkerStopped

GCC_STYLE = re.compile(r"^(?P<path>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*"
                       r"(?P<sev>fatal error|error|warning):\s*(?P<msg>.+)$")
NVCC_STYLE = re.compile(r"^(?P<path>\S+?)\((?P<line>\d+)\):\s*(?P<sev>error|warning)(?:\s*#[\w-]+(?:-D)?)?:\s*(?P<msg>.+)$")
UNLOCATED = re.compile(r"^(?:ptxas\s+)?(?P<sev>fatal error|error|fatal)\s*:\s*(?P<msg>.+)$", re.IGNORECASE)
UNDEFINED_REFERENCE = re.compile(r"undefined reference to .+")
NOISE = re.compile(r"ninja: build stopped|collect2: error|Error building extension|error: command|"
                   r"subprocess\.CalledProcessError|RuntimeError: Error", re.IGNORECASE)
BUILD_FAILURE = re.compile(r"Error (building|compiling objects for) extension")
OWN_SOURCES = re.compile(r"^(main\.cpp|cuda\.cu|.*\.(cu|cpp|cc|cuh))$")
MAX_MESSAGE = 300


def default_build_root() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "harness" / "extensions"


OUTCOME_FILE = "outcome.json"
LOCK_FILE = ".harness-lock"
TORCH_BATON = "lock"  # torch.utils.cpp_extension's FileBaton in each extension's build dir
FLAG_VARIABLES = ("CC", "CXX", "CUDA_HOME", "CUDA_PATH", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")


class Toolchain(BaseModel):
    """What besides the code decides a build's output, fixed for a whole run."""

    torch: str
    cuda: str | None
    arch_list: str | None  # TORCH_CUDA_ARCH_LIST, set explicitly for build and evaluation alike
    python: str
    flags: dict[str, str]

    def key(self, code_hash: str) -> str:
        """The cache key digest: one directory per code and toolchain. Candidates reusing an
        extension name (seeds 000, 001 and 004 all call theirs conv2d_cuda) never meet."""
        payload = json.dumps({"code": code_hash, **self.model_dump()}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    def env(self) -> dict[str, str]:
        return {"TORCH_CUDA_ARCH_LIST": self.arch_list} if self.arch_list else {}


def cuda_arch_list(gpus: list[int]) -> str:
    """The target GPUs' compute capabilities ("9.0"), unless the user chose TORCH_CUDA_ARCH_LIST.
    Set explicitly so a build worker that sees no GPU compiles exactly what the evaluating
    worker would, and the latter finds the build up to date."""
    chosen = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if chosen:
        return chosen
    capabilities = sorted({torch.cuda.get_device_capability(gpu) for gpu in gpus})
    return ";".join(f"{major}.{minor}" for major, minor in capabilities)


def toolchain(device: str, gpus: list[int]) -> Toolchain:
    return Toolchain(torch=torch.__version__, cuda=torch.version.cuda,
                     arch_list=cuda_arch_list(gpus) if device == "cuda" and gpus else None,
                     python=f"{sys.implementation.cache_tag}-{sys.platform}",
                     flags={name: os.environ[name] for name in FLAG_VARIABLES if name in os.environ})


def extensions_dir(build_root: Path, key: str) -> Path:
    return build_root / key


class BuildStatus(str, enum.Enum):
    built = "built"  # imported (and so compiled and loaded) without error
    failed = "failed"  # the compiler or linker failed: a compile_error, no GPU needed to say so
    timed_out = "timed_out"  # the build ran past --build-timeout
    deferred = "deferred"  # import failed for another reason (it may need a GPU): the evaluation decides


class BuildOutcome(BaseModel):
    """What building one candidate ahead of evaluation found."""

    key: str
    status: BuildStatus
    seconds: float = 0.0  # compiling (and importing) it, 0 when the cache answered
    cached: bool = False
    failure: Failure | None = None  # failed: the exception load_inline raised
    log_head: str = ""  # failed: the start of the build log, where the compiler's errors are
    error: str | None = None  # timed_out: what the sandbox said

    @property
    def decided(self) -> bool:
        """Worth keeping in the cache: the same code and toolchain give the same outcome."""
        return self.status in (BuildStatus.built, BuildStatus.failed)


def read_outcome(key_dir: Path) -> BuildOutcome | None:
    try:
        return BuildOutcome.model_validate_json((key_dir / OUTCOME_FILE).read_text())
    except (OSError, ValueError):
        return None  # absent, or torn by a crash: build again


def write_outcome(key_dir: Path, outcome: BuildOutcome) -> None:
    """Atomically: a reader sees the old state or the whole new file."""
    partial = key_dir / f".{OUTCOME_FILE}.{os.getpid()}"
    partial.write_text(outcome.model_dump_json())
    os.replace(partial, key_dir / OUTCOME_FILE)


@contextlib.contextmanager
def key_lock(key_dir: Path) -> Iterator[None]:
    """Exclusive use of one key dir across threads and processes. torch's own baton is a plain
    file that a killed build leaves behind (the next load_inline then waits on it forever); every
    harness process builds or loads only under this lock, so a baton found while holding it is
    stale and is removed."""
    key_dir.mkdir(parents=True, exist_ok=True)
    with open(key_dir / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            for baton in key_dir.glob(f"*/{TORCH_BATON}"):
                baton.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_build_failure(exc_type: str, message: str) -> bool:
    return exc_type == "RuntimeError" and BUILD_FAILURE.search(message) is not None


def _diagnostic(line: str) -> CompilerDiagnostic | None:
    for pattern in (GCC_STYLE, NVCC_STYLE):
        match = pattern.match(line)
        if match:
            path = match.group("path")
            name = Path(path).name
            return CompilerDiagnostic(
                severity=match.group("sev"), message=match.group("msg").strip()[:MAX_MESSAGE], file=name,
                line=int(match.group("line")), column=int(match.group("col")) if match.groupdict().get("col") else None,
                in_candidate="/include/" not in path and OWN_SOURCES.match(name) is not None,
            )
    match = UNLOCATED.match(line.strip())
    if match:
        severity = "error" if match.group("sev").lower() == "fatal" else match.group("sev").lower()
        return CompilerDiagnostic(severity=severity, message=match.group("msg").strip()[:MAX_MESSAGE])
    match = UNDEFINED_REFERENCE.search(line)
    if match:
        return CompilerDiagnostic(severity="error", message=match.group(0)[:MAX_MESSAGE])
    return None


def parse_compiler_output(log: str) -> list[CompilerDiagnostic]:
    """Errors from gcc/clang, nvcc, ptxas and the linker, in the order a reader should see them:
    those in the candidate's own sources first (in log order), then header errors (often a
    consequence, e.g. of a too-old -std), then unlocated ones. Warnings are left out."""
    found: list[CompilerDiagnostic] = []
    seen = set()
    for line in log.splitlines():
        if NOISE.search(line):
            continue
        diagnostic = _diagnostic(line.rstrip())
        if diagnostic is None or diagnostic.severity == "warning":
            continue
        key = (diagnostic.file, diagnostic.line, diagnostic.message)
        if key not in seen:
            seen.add(key)
            found.append(diagnostic)
    rank = lambda d: 0 if d.in_candidate else 1 if d.file else 2  # noqa: E731
    return sorted(found, key=rank)  # stable: log order within each rank


def source_lines_by_file(log: str) -> dict[str, list[str]]:
    """The generated sources the compiler complained about (main.cpp, cuda.cu), read from the
    build directory named in the log, so their lines can be traced back to the candidate."""
    sources = {}
    for match in re.finditer(r"(/\S+/(main\.cpp|cuda\.cu))\b", log):
        path = Path(match.group(1))
        if match.group(2) not in sources and path.is_file():
            sources[match.group(2)] = path.read_text(errors="replace").splitlines()
    return sources


def locate_in_candidate(diagnostics: list[CompilerDiagnostic], sources: dict[str, list[str]],
                        candidate_text: str) -> list[CompilerDiagnostic]:
    """Fill candidate_line: the line of the candidate file holding the same text as the
    generated source line (with the next line as a tie-breaker when the text repeats)."""
    lines = [line.strip() for line in candidate_text.splitlines()]
    located = []
    for diagnostic in diagnostics:
        generated = sources.get(diagnostic.file or "")
        if diagnostic.in_candidate and generated and diagnostic.line and diagnostic.line <= len(generated):
            wanted = generated[diagnostic.line - 1].strip()
            following = generated[diagnostic.line].strip() if diagnostic.line < len(generated) else None
            matches = [i for i, text in enumerate(lines) if text == wanted and len(wanted) > 2]
            best = [i for i in matches if following is None or (i + 1 < len(lines) and lines[i + 1] == following)]
            if best or matches:
                diagnostic = diagnostic.model_copy(update={"candidate_line": (best or matches)[0] + 1})
        located.append(diagnostic)
    return located


def build_ahead(code: str, problem: Problem, config: EvalConfig, key_dir: Path, placement: Placement) -> BuildOutcome:
    """Build one candidate in a build worker that sees no GPU, or answer from the cache."""
    with key_lock(key_dir):
        cached = read_outcome(key_dir)
        if cached is not None:
            return cached.model_copy(update={"cached": True, "seconds": 0.0})
        outcome = _run_build_worker(code, problem, config, key_dir, placement)
        if outcome.decided:
            write_outcome(key_dir, outcome)
        return outcome


def _run_build_worker(code: str, problem: Problem, config: EvalConfig, key_dir: Path,
                      placement: Placement) -> BuildOutcome:
    job = WorkerJob(role="build", problem_path=problem.path, device=config.device, precision=config.precision,
                    init_seed=config.seed, warmup=0, trials=1)
    hidden = placement.model_copy(update={"env": placement.env | {"CUDA_VISIBLE_DEVICES": ""}})
    began = time.monotonic()
    with Worker(job, code, key_dir, config.build_timeout_s, problem.source, hidden) as worker:
        try:
            reply = worker.reply("build", config.build_timeout_s)
        except WorkerStopped as stopped:
            status = BuildStatus.timed_out if stopped.stop.status is Status.timeout else BuildStatus.deferred
            return BuildOutcome(key=key_dir.name, status=status, seconds=time.monotonic() - began,
                                error=stopped.stop.error)
        seconds = time.monotonic() - began
        if reply.ok:
            return BuildOutcome(key=key_dir.name, status=BuildStatus.built, seconds=seconds)
        if reply.failure and is_build_failure(reply.failure.exc_type, reply.failure.message):
            return BuildOutcome(key=key_dir.name, status=BuildStatus.failed, seconds=seconds, failure=reply.failure,
                                log_head=worker.log_head())
        return BuildOutcome(key=key_dir.name, status=BuildStatus.deferred, seconds=seconds)

"""Turn what the workers reported into verdicts, one-line reasons and speedups."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections import Counter

from pydantic import BaseModel

from .build import is_build_failure, locate_in_candidate, parse_compiler_output, source_lines_by_file
from .protocol import Failure
from .records import CompilerDiagnostic, Result, Status

NO_CUDA = re.compile(r"Torch not compiled with CUDA|No CUDA GPUs are available|CUDA_HOME environment variable|"
                     r"Found no NVIDIA driver|No module named 'triton'|cannot find CUDA|nvcc: not found", re.IGNORECASE)
UNDEFINED_SYMBOL = re.compile(r"undefined symbol:\s*(\S+)")
MAX_ERROR = 300


class Verdict(BaseModel):
    status: Status
    error: str
    evidence: list[str]
    diagnostics: list[CompilerDiagnostic] = []


def one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= MAX_ERROR else first[: MAX_ERROR - 3] + "..."


def demangle(symbol: str) -> str:
    tool = shutil.which("c++filt")
    if tool is None:
        return symbol
    try:
        return subprocess.run([tool, symbol], capture_output=True, text=True, timeout=5).stdout.strip() or symbol
    except (OSError, subprocess.SubprocessError):
        return symbol


def classify_failure(failure: Failure, log: str, device: str, candidate_text: str = "") -> Verdict:
    """A worker exception as a verdict. Build failures are recognised wherever load_inline ran
    (at import or in __init__), and the log is read too because verbose=True builds print the
    compiler's output instead of attaching it to the exception."""
    message = failure.message
    if is_build_failure(failure.exc_type, message):
        output = message + "\n" + log
        diagnostics = locate_in_candidate(parse_compiler_output(output), source_lines_by_file(output), candidate_text)
        first = diagnostics[0].one_line() if diagnostics else \
            "the extension build failed; no compiler error line was found (see the log)"
        return Verdict(status=Status.compile_error, error=first, evidence=[d.one_line() for d in diagnostics[:8]],
                       diagnostics=diagnostics)
    evidence = failure.traceback
    if device == "cpu" and NO_CUDA.search(message):
        return Verdict(status=Status.skipped, error=f"needs a CUDA GPU; this run is on CPU ({one_line(message)})",
                       evidence=evidence)
    symbol = UNDEFINED_SYMBOL.search(message)
    if symbol:
        name = demangle(symbol.group(1))
        return Verdict(status=Status.load_error, error=f"the built extension does not load: undefined symbol {name}",
                       evidence=evidence)
    what = f"{failure.exc_type}: {one_line(message)}" if message.strip() else failure.exc_type
    if failure.phase == "load":
        return Verdict(status=Status.load_error, error=f"import failed: {what}", evidence=evidence)
    if failure.phase == "init":
        return Verdict(status=Status.runtime_error, error=f"ModelNew(*get_init_inputs()) raised {what}",
                       evidence=evidence)
    return Verdict(status=Status.runtime_error, error=f"forward raised {what} (during {failure.phase})",
                   evidence=evidence)


def speedup(reference_ms: float, candidate_ms: float) -> float:
    """Reference median over candidate median."""
    return reference_ms / candidate_ms if candidate_ms > 0 else math.inf


class RunSummary(BaseModel):
    total: int
    by_status: dict[str, int]
    compiled_rate: float  # got past the build (not compile_error or load_error), among those attempted
    correct_rate: float  # ok among those attempted
    fast_p: dict[str, float]  # fraction of attempted that are ok and faster than p x reference
    geomean_speedup: float | None  # over the correct ones


FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)


def summarize(results: list[Result]) -> RunSummary:
    counts = Counter(r.status.value for r in results)
    attempted = [r for r in results if r.status is not Status.skipped]
    n = len(attempted) or 1
    correct = [r for r in attempted if r.status is Status.ok]
    compiled = [r for r in attempted if r.status not in (Status.compile_error, Status.load_error)]
    speeds = [r.speedup for r in correct if r.speedup and math.isfinite(r.speedup)]
    return RunSummary(
        total=len(results),
        by_status={s.value: counts.get(s.value, 0) for s in Status},
        compiled_rate=len(compiled) / n,
        correct_rate=len(correct) / n,
        fast_p={f"{p:g}": sum(1 for r in correct if (r.speedup or 0) > p) / n for p in FAST_P_THRESHOLDS},
        geomean_speedup=math.exp(sum(map(math.log, speeds)) / len(speeds)) if speeds else None,
    )

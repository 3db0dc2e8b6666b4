"""Verdicts: the one place a Result's status is decided.

Every other stage observes (a worker's reply, a comparison, a profile, a build outcome, the
integrity checks' findings) and asks here what the observation means. Each `of_*` function returns
the Verdict it calls for, or None when the evaluation goes on; `result` assembles the Result from a
verdict and what was observed.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess

from ..builds.cache import BuildOutcome, BuildStatus
from ..builds.compiler_log import is_build_failure, read_compiler_errors
from ..records import (Candidate, CheckResult, Measured, Observations, Phase, Result, Sanitized, SanitizerStatus,
                       Status, Subject, Verdict)
from ..worker.parent import StopReason, WorkerStop
from ..worker.protocol import Failure, Reply
from .checking import Finding
from .checks.inconsistent_when_timed import FLAG as INCONSISTENT_WHEN_TIMED
from .timing.stats import paired_speedup, ratios

NO_CUDA = re.compile(r"Torch not compiled with CUDA|No CUDA GPUs are available|CUDA_HOME environment variable|"
                     r"Found no NVIDIA driver|No module named 'triton'|cannot find CUDA|nvcc: not found", re.IGNORECASE)
UNDEFINED_SYMBOL = re.compile(r"undefined symbol:\s*(\S+)")
FILE_TOO_LARGE = "[Errno 27]"  # EFBIG: Python ignores SIGXFSZ, so a write past RLIMIT_FSIZE raises instead
MAX_ERROR = 300
HARNESS_FAILED = "the harness failed while judging it"  # how such a verdict's error begins
NEAR_MISS_FACTOR = 100  # a mismatch whose largest error is within this many times atol is close, not garbage
# The flags decided here rather than by a check (judge/checks/): how a worker's reply or a stop
# failed, a mismatch's closeness, and what the run saw.
NOT_PLAIN_TENSOR, MEMORY_ERROR_FLAG, NEAR_MISS = "not_plain_tensor", "memory_error", "near_miss"
BUSY_WHILE_STOPPED, TAMPERED_RESULTS = "busy_while_stopped", "tampered_results"
MEMORY_ERROR = re.compile(r"illegal memory access|illegal address|misaligned address|out of bounds|"
                          r"unspecified launch failure", re.IGNORECASE)


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


def speedup(reference_ms: float, candidate_ms: float) -> float:
    """Reference median over candidate median."""
    return reference_ms / candidate_ms if candidate_ms > 0 else math.inf


# -- before any worker -------------------------------------------------------------------------

def before_running(candidate: Candidate, device: str) -> Verdict | None:
    """Verdicts that need no worker: nothing to run, no problem to run against, no GPU."""
    if candidate.problem_unusable is not None:
        return Verdict(status=Status.skipped, phase=Phase.extract,
                       error=f"not run: its problem is unusable: {candidate.problem_unusable}")
    if candidate.problem_id is None:
        return Verdict(status=Status.skipped, phase=Phase.extract,
                       error="matches no problem: put it under candidates/<problem_id>/ or use KernelBench naming")
    if candidate.code is None:
        return Verdict(status=Status.load_error, error=candidate.extraction_error, phase=Phase.extract)
    if not candidate.kind.runs_on(device):
        needs = "a CUDA GPU" if device == "cpu" else "the CPU (C++ from cpp_sources only)"
        return Verdict(status=Status.skipped, phase=Phase.extract,
                       error=f"{candidate.kind.value} candidate needs {needs}; this run is on {device}")
    return None


def of_build(outcome: BuildOutcome, device: str, candidate_text: str) -> Verdict | None:
    """A build that failed or ran out of time ahead of evaluation is the verdict: no GPU is needed
    to say so. Any other outcome leaves it to the evaluation."""
    if outcome.status is BuildStatus.timed_out:
        return Verdict(status=Status.timeout, error=outcome.error or "the build ran past --build-timeout",
                       phase=Phase.load)
    if outcome.status is BuildStatus.over_limit:
        return Verdict(status=Status.crash, error=f"the build {outcome.error}", phase=Phase.load)
    if outcome.status is BuildStatus.failed and outcome.failure is not None:
        return of_failure(outcome.failure, outcome.log_head, device, candidate_text)
    return None


def reference_failed(reason: str) -> Verdict:
    """The problem's reference could not load, run or time: its candidates cannot be judged."""
    return Verdict(status=Status.skipped, error=reason)


def reference_died(reason: str) -> Verdict:
    """The reference worker died while this candidate ran: under a sandbox no candidate can
    reach it, without one this candidate may have killed it. Either way its evaluation did not
    finish; the reference is started afresh for the next candidate."""
    return Verdict(status=Status.crash, error=f"the reference worker died while this candidate ran ({reason})")


def harness_failed(trace: str) -> Verdict:
    """The harness itself raised while judging this candidate: a bug, whatever the candidate did
    to bring it out. The candidate gets this verdict and the run goes on to the next one."""
    lines = [line for line in trace.strip().splitlines() if line.strip()] or ["no traceback"]
    return Verdict(status=Status.crash, evidence=lines[-12:],
                   error=f"{HARNESS_FAILED} (a harness bug: please report it): {one_line(lines[-1])}")


# -- what a worker said ------------------------------------------------------------------------

def of_failure(failure: Failure, log: str, device: str, candidate_text: str = "") -> Verdict:
    """A worker exception as a verdict. Build failures are recognised wherever load_inline ran
    (at import or in __init__), and the log is read too because verbose=True builds print the
    compiler's output instead of attaching it to the exception."""
    message = failure.message
    if is_build_failure(failure.exc_type, message):
        diagnostics = read_compiler_errors(message, log, candidate_text, failure.sources)
        first = diagnostics[0].one_line() if diagnostics else \
            "the extension build failed; no compiler error line was found (see the log)"
        return Verdict(status=Status.compile_error, error=first, evidence=[d.one_line() for d in diagnostics[:8]],
                       compiler_diagnostics=diagnostics, phase=failure.phase)
    evidence = failure.traceback
    if device == "cpu" and NO_CUDA.search(message):
        return Verdict(status=Status.skipped, error=f"needs a CUDA GPU; this run is on CPU ({one_line(message)})",
                       evidence=evidence, phase=failure.phase)
    if MEMORY_ERROR.search(message):
        return Verdict(status=Status.runtime_error, flags=[MEMORY_ERROR_FLAG], evidence=evidence, phase=failure.phase,
                       error=f"a kernel made an illegal memory access: {failure.exc_type}: {one_line(message)} "
                             f"(during {failure.phase.value})")
    symbol = UNDEFINED_SYMBOL.search(message)
    if symbol:
        return Verdict(status=Status.load_error, evidence=evidence, phase=failure.phase,
                       error=f"the built extension does not load: undefined symbol {demangle(symbol.group(1))}")
    what = f"{failure.exc_type}: {one_line(message)}" if message.strip() else failure.exc_type
    if FILE_TOO_LARGE in message:
        what += " (a file it wrote, its log included, passed the file size limit, --max-file-size)"
    if failure.phase is Phase.load:
        return Verdict(status=Status.load_error, error=f"import failed: {what}", evidence=evidence, phase=failure.phase)
    if failure.phase is Phase.init:
        return Verdict(status=Status.runtime_error, error=f"ModelNew(*get_init_inputs()) raised {what}",
                       evidence=evidence, phase=failure.phase)
    return Verdict(status=Status.runtime_error, error=f"forward raised {what} (during {failure.phase.value})",
                   evidence=evidence, phase=failure.phase)


def of_reply(reply: Reply, log: str, device: str, candidate_text: str) -> Verdict | None:
    """None for a successful reply; else what its failure means."""
    if reply.ok:
        return None
    if reply.rejected:
        return Verdict(status=Status.rejected, error=reply.rejected, flags=[NOT_PLAIN_TENSOR])
    return of_failure(reply.failure, log, device, candidate_text)


def of_stop(stop: WorkerStop) -> Verdict:
    """No valid answer: past its deadline it is a timeout, otherwise the worker crashed (a
    resource limit included: the reason says which)."""
    status = Status.timeout if stop.reason is StopReason.deadline else Status.crash
    return Verdict(status=status, error=stop.error, evidence=stop.evidence)


# -- the checks of an evaluation ---------------------------------------------------------------

def of_findings(findings: list[Finding]) -> Verdict | None:
    """What the checks found at one moment (judge/checking.py) comes to: the first finding that
    decides (in the checks' order), with the evidence of every finding of its flag and status (the
    sources of one flag agree on it); a rejection carries its flag. None where none decides."""
    deciding = [found for found in findings if found.status is not None]
    if not deciding:
        return None
    first, evidence = deciding[0], []
    for found in deciding:
        if found.flag == first.flag and found.status is first.status:
            evidence += [line for line in found.evidence if line not in evidence]
    flags = [first.flag] if first.status is Status.rejected and first.flag else []
    return Verdict(status=first.status, error=first.error, flags=flags, evidence=evidence, phase=first.phase)


def _rejected(flag: str, error: str) -> Verdict:
    return Verdict(status=Status.rejected, error=error, flags=[flag])


def busy_while_stopped(wait_s: float) -> Verdict:
    return _rejected(BUSY_WHILE_STOPPED,
                     f"its GPU work ran on for over {wait_s:g} s while its processes were stopped for the "
                     "reference's calls (its recalibration, or its profiled calls): it would slow them and widen the "
                     "allowances its own calls are judged by")


def gpu_shared() -> Verdict:
    return Verdict(status=Status.skipped, phase=Phase.timing,
                   error="not timed: the GPU was busy while the candidate's processes were stopped, and processes "
                         "from outside this run hold it too; timings beside them would mean nothing (the harness "
                         "needs a GPU of its own)")


def of_trial(comparison: CheckResult, trial: int, trials: int, init_differs: bool, atol: float) -> Verdict | None:
    """One correctness trial (`trial` of `trials`, from 1): its outputs must match. A mismatch
    within NEAR_MISS_FACTOR of the tolerance is flagged close."""
    if comparison.passed:
        return None
    error = f"wrong output on trial {trial}/{trials}: {comparison.reason}"
    if init_differs:
        error += "; its parameters differ from the reference's after the same seed (initialise them as the reference does)"
    largest = comparison.max_abs_err
    near = largest is not None and math.isfinite(largest) and largest <= NEAR_MISS_FACTOR * atol
    return Verdict(status=Status.mismatch, error=error, flags=[NEAR_MISS] if near else [])


def of_checked_timed_calls(objection: Verdict, shared_memory: bool) -> Verdict:
    """What the checked timed calls came to. A wrong output where calls of one command returned
    their outputs in the same memory (a buffer the candidate keeps) is that, not a cheat: no
    call's answer outlived the next call. Only a wrong output: one buffer returned with the right
    contents (a constant, a parameter) passes."""
    if shared_memory and INCONSISTENT_WHEN_TIMED in objection.flags:
        return Verdict(status=Status.mismatch,
                       error="forward returned its outputs in the same memory on different calls (a buffer it keeps): "
                             "each call overwrote the last one's answer; return a new tensor from each call")
    return objection


def passed() -> Verdict:
    return Verdict(status=Status.ok)


# -- the record --------------------------------------------------------------------------------

def paired(observed: Observations) -> tuple[float, float, float] | None:
    """A paired timing's speedup and its 95% interval (timing/stats.py, `paired_speedup`), held to
    the parent's clock as the candidate's median is; None where its timing was not paired."""
    reference, mine, vouched = observed.reference_paired_timing, observed.timing, observed.vouched_median_ms
    if reference is None or mine is None or not vouched or not (pairs := ratios(reference.samples_ms, mine.samples_ms)):
        return None
    return paired_speedup(pairs, min(1.0, mine.median_ms / vouched))


def result(subject: Subject, verdict: Verdict, observed: Observations) -> Result:
    """The Result of a verdict: an `ok` carries its speedup and what was noticed on the way; any
    other verdict carries its own reason and evidence."""
    ok = verdict.status is Status.ok

    def against(reference) -> float | None:
        if not ok or reference is None or observed.vouched_median_ms is None:
            return None
        return speedup(reference.median_ms, observed.vouched_median_ms)

    pairs = paired(observed) if ok else None
    return Result(
        **subject.model_dump(), status=verdict.status,
        speedup=pairs[0] if pairs else against(observed.reference_recalibrated_timing or observed.reference_timing),
        speedup_interval=[pairs[1], pairs[2]] if pairs else None,
        speedup_default_math=against(observed.reference_default_math_timing), error=verdict.error,
        flags=observed.flags + [f for f in verdict.flags if f not in observed.flags],
        phase=None if ok else verdict.phase or observed.phase,
        evidence=observed.evidence if ok else verdict.evidence, compiler_diagnostics=verdict.compiler_diagnostics,
        **observed.model_dump(include=set(Measured.model_fields)),
    )


def tampered(result: Result) -> Result:
    """The results changed on disk while this candidate's code ran: it is not believed."""
    return result.model_copy(update={
        "status": Status.rejected, "speedup": None, "flags": result.flags + [TAMPERED_RESULTS],
        "error": "the results database or results.jsonl changed while this candidate ran"})


def sanitized(result: Result, passes: list[Sanitized]) -> Result:
    """A passed candidate's Result after --memcheck's passes (judge/memcheck.py): the first that
    found errors makes it a runtime_error flagged memory_error, with the sanitizer's first line
    and the kernel it names; a pass that could not run leaves the verdict as it was, saying why."""
    found = next((one for one in passes if one.status is SanitizerStatus.errors), None)
    if found is None:
        return result.model_copy(update={"sanitized": passes})
    where = f" in {found.kernel}" if found.kernel else ""
    more = f" ({found.errors} errors in all)" if found.errors and found.errors > 1 else ""
    return result.model_copy(update={
        "sanitized": passes, "status": Status.runtime_error, "phase": Phase.memcheck,
        "speedup": None, "speedup_interval": None, "speedup_default_math": None,
        "flags": result.flags + [f for f in [MEMORY_ERROR_FLAG] if f not in result.flags],
        "error": one_line(f"compute-sanitizer {found.tool}{where}: {found.report}{more}")})

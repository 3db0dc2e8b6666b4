"""`--memcheck`: NVIDIA's compute-sanitizer over a candidate that passed, in a worker of its own
once every candidate of the run was timed, so that it never touches a timing.

memcheck looks for out-of-bounds and misaligned accesses and the like; racecheck, where the code
declares shared memory (`__shared__`: where hand-written races live), for hazards between a
block's threads on it. The worker is confined as any other and becomes the sanitizer once
confined (worker/launch.py), which starts it again as its child: the sanitizer's log is written
in the worker's scratch dir and its exit code says whether it found errors.

What it cannot promise: a candidate that tells it runs under the sanitizer (its environment, its
slowness) can run other code there. It finds the mistakes of honest code."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from ..builds.cache import key_lock
from ..records import Candidate, EvalConfig, Problem, Sanitized, SanitizerStatus
from ..worker.parent import Placement, Worker, WorkerStopped
from ..worker.protocol import Command
from .reference import trial_seeds, worker_job

SANITIZER = "compute-sanitizer"
DEFAULT_TOOLKIT = "/usr/local/cuda"  # where torch.utils.cpp_extension looks last for CUDA, too
ERRORS_EXIT = 86  # --error-exitcode: its exit where it found errors (a worker's own is 0 or 1)
LOG_NAME = "sanitizer.log"
LOG_LIMIT = 1 << 20  # bytes of its log read: --print-limit keeps it far below
PRINT_LIMIT = 20  # errors it prints in full (its summary counts them all)
LOG_TAIL_CHARS = 2000
EXIT_S = 60.0  # for the worker to wind down and the sanitizer to write its summary, after the last command
SHARED_MEMORY = re.compile(r"\b__shared__\b")
LINE_PREFIX = re.compile(r"^=+ ?")
SUMMARY = re.compile(r"^(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:errors?|hazards? displayed \((\d+) errors?)")
# The kernel a report names: "at relu_kernel(const float *, ...)+0x90 in cuda.cu:12" (CUDA 12 on),
# "at triton_poi_fused_relu_0+0x120 in ..." (no signature: Triton, extern "C"), or "at 0x90 in
# cuda.cu:12:relu_kernel(float const *, ...)" (earlier); "void " and templates included.
KERNEL = re.compile(r"\bat (?:0x[0-9a-f]+ in \S+?:\d+:)?(?:void )?([A-Za-z_][\w:<>, *]*?)(?:\(|\+0x)")
NOT_REPORTS = ("COMPUTE-SANITIZER", "Warning")
# Each tensor its own cudaMalloc: the sanitizer knows allocations, not the tensors PyTorch's caching
# allocator carves out of them, and a write just past a tensor lands inside its block (PyTorch's
# own advice for running under compute-sanitizer).
# And the sanitizer speaks to its target over a unix socket: the worker has its own network
# namespace, and seccomp and Landlock keep it from TCP.
SANITIZED_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "NV_COMPUTE_SANITIZER_LOCAL_CONNECTION_OVERRIDE": "uds"}
LAUNCH_TIMEOUT_S = 120  # for the target to reach its first CUDA call: torch's import and the candidate's load


def find_sanitizer(env: dict[str, str]) -> str | None:
    """compute-sanitizer's own binary, found on the PATH or in CUDA_HOME (CUDA_PATH) of the
    workers' environment `env`, else in DEFAULT_TOOLKIT; None where there is none. A toolkit's bin/ entry may be a
    script that runs the binary beside it in compute-sanitizer/: that binary is returned."""
    homes = [env[name] for name in ("CUDA_HOME", "CUDA_PATH") if env.get(name)] + [DEFAULT_TOOLKIT]
    found = shutil.which(SANITIZER, path=env.get("PATH", "")) or next(
        (str(path) for home in homes if os.access(path := Path(home) / "bin" / SANITIZER, os.X_OK)), None)
    if found is None:
        return None
    beside = Path(found).resolve().parent.parent / SANITIZER / SANITIZER
    return str(beside) if os.access(beside, os.X_OK) else str(Path(found).resolve())


def tools_for(code: str) -> list[str]:
    """The sanitizer's tools a candidate's code gets: memcheck, and racecheck where it declares
    shared memory."""
    return ["memcheck"] + (["racecheck"] if SHARED_MEMORY.search(code) else [])


def sanitizer_argv(sanitizer: str, tool: str) -> list[str]:
    """The sanitizer's command line, the worker's own to follow: its log goes to the worker's
    working directory, its scratch dir. What it counts is the kernels' errors: not CUDA API calls
    that fail on purpose (libraries probe with them), nor the worker's exit code."""
    return [sanitizer, "--tool", tool, "--log-file", LOG_NAME, "--error-exitcode", str(ERRORS_EXIT),
            "--print-limit", str(PRINT_LIMIT), "--launch-timeout", str(LAUNCH_TIMEOUT_S),
            "--target-processes", "application-only", "--report-api-errors", "no", "--check-exit-code", "no"]


def read_report(log: str, exit_code: int | None) -> tuple[SanitizerStatus, str | None, str | None, int | None]:
    """What a pass's log and the exit code of its worker (the sanitizer) say: its status, the
    first error's line (or why it could not judge), the kernel that line names, and the errors
    its summary counts."""
    lines = [LINE_PREFIX.sub("", line, count=1) for line in log.splitlines() if LINE_PREFIX.match(line)]
    errors = next((int(m.group(2) or m.group(1)) for line in lines if (m := SUMMARY.match(line))), None)
    headline = next((i for i, line in enumerate(lines) if line.strip() and not line[0].isspace()
                     and not line.startswith(NOT_REPORTS) and not SUMMARY.match(line)), None)
    if errors or (errors is None and exit_code == ERRORS_EXIT):  # its summary's count, where it wrote one
        if headline is None:
            return SanitizerStatus.errors, "compute-sanitizer found errors (its log quotes none)", None, errors
        named = (KERNEL.search(line) for line in lines[headline:headline + 4])
        kernel = next((m.group(1).strip() for m in named if m), None)
        return SanitizerStatus.errors, lines[headline].strip(), kernel, errors
    if errors == 0:
        return SanitizerStatus.clean, None, None, 0
    how = "was stopped" if exit_code is None else f"ended with exit code {exit_code}"
    said = lines[headline].strip() if headline is not None else "no summary in its log"
    return SanitizerStatus.inconclusive, f"the sanitizer's worker {how} ({said})", None, None


def sanitize(problem: Problem, candidate: Candidate, config: EvalConfig, key_dir: Path, placement: Placement,
             sanitizer: str, tool: str) -> Sanitized:
    """One pass of `tool` over the candidate: it loads (its builds from `key_dir`) and runs
    forward on the correctness trials' inputs under the sanitizer, then exits. Where it did not get
    through that, the pass says why, unless the sanitizer found errors on the way."""
    began = time.monotonic()
    placement = placement.model_copy(update={"env": placement.env | SANITIZED_ENV})
    worker = Worker(placement, role="candidate", device=config.device, timeout_s=config.timeout_s, key_dir=key_dir,
                    wrapper=sanitizer_argv(sanitizer, tool))
    with worker:
        try:
            with key_lock(key_dir):
                worker.start(worker_job("candidate", problem, config), candidate.code, problem.source, key_dir)
                reply = worker.reply(f"load under {tool}", config.timeout_s)
            for seed in trial_seeds(config) if reply.ok else []:
                reply = worker.request(Command(op="trial", seed=seed), f"forward under {tool}")
                if not reply.ok:
                    break
            exit_code, stopped = worker.finish(EXIT_S), None
        except WorkerStopped as stop:
            exit_code, reply, stopped = None, None, stop.stop.error
        status, report, kernel, errors = read_report(worker.scratch_text(LOG_NAME, LOG_LIMIT), exit_code)
        if status is not SanitizerStatus.errors and (stopped or not reply.ok):
            why = stopped or (f"{reply.failure.exc_type}: {reply.failure.message.strip().splitlines()[0][:200]}"
                              if reply.failure and reply.failure.message.strip() else "its reply was not ok")
            status, report = SanitizerStatus.inconclusive, f"it did not get through a call under {tool}: {why}"
        if status is SanitizerStatus.inconclusive and (said := worker.log_tail(LOG_TAIL_CHARS).strip()):
            report += f"; its output ends: {said.splitlines()[-1][:300]}"  # the sanitizer's own complaint, often
    return Sanitized(tool=tool, status=status, seconds=round(time.monotonic() - began, 3), report=report,
                     kernel=kernel, errors=errors)

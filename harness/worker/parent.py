"""Parent side of a worker: start it isolated, talk to it under a deadline, kill it cleanly.

Isolation per worker: its own session and process group (so nvcc/ninja children die with it),
a scrubbed environment, a private scratch directory as working directory, its own
torch-extensions build directory keyed by the candidate's code hash, and stdout/stderr to a
log file that is kept as evidence but never parsed for results. Results come only through a
socket the parent created (see protocol.py); the child side is child.py.
"""

from __future__ import annotations

import enum
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import torch
from pydantic import BaseModel, ValidationError

from .protocol import REPLY, Command, Reply, TensorRef, WorkerJob, fits, open_tensor, send_model

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
WORKER_TOKEN_VAR = "HARNESS_WORKER_TOKEN"
RUN_TOKEN_VAR = "HARNESS_RUN_TOKEN"  # set by a run on all its workers (see schedule/resources.py)
LOG_TAIL_BYTES = 16_384
LOG_HEAD_BYTES = 1_048_576
POLL_SLICE_S = 0.1
TERM_GRACE_S = 3.0


class Placement(BaseModel):
    """Where a worker runs. `env` is all it sees of the caller's environment (the scrubbed
    variables, CUDA_VISIBLE_DEVICES naming its one GPU, TORCH_CUDA_ARCH_LIST, MAX_JOBS and the
    like). `gpu` is that GPU's index as this process numbers it, where its tensors are opened;
    `cpus` are the cores it pins itself to."""

    gpu: int | None = None
    cpus: list[int] | None = None
    env: dict[str, str] = {}


class StopReason(str, enum.Enum):
    deadline = "deadline"  # no answer in time: the worker was killed
    died = "died"  # the process ended (a signal, an exit) without answering
    broke_protocol = "broke_protocol"  # a malformed message, or one of the wrong kind


class WorkerStop(BaseModel):
    """The worker gave no valid answer: a deadline passed, it died, or it broke the protocol."""

    reason: StopReason
    error: str
    evidence: list[str]


class WorkerStopped(Exception):
    def __init__(self, stop: WorkerStop):
        super().__init__(stop.error)
        self.stop = stop


def worker_env(scratch: Path, extensions_dir: Path, placement: Placement) -> dict[str, str]:
    env = dict(placement.env)
    env.update(
        HOME=str(scratch), TMPDIR=str(scratch), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
        TORCH_EXTENSIONS_DIR=str(extensions_dir),
        PYTHONPATH=os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p),
    )
    return env


def sweep_escaped(token: str, variable: str = WORKER_TOKEN_VAR) -> int:
    """Kill processes that left the worker's process group (setsid, double fork) but still carry
    its token in their environment, so no candidate's background load outlives its evaluation.
    A process that also scrubbed its environment escapes this (docs/threat-model.md). With
    RUN_TOKEN_VAR, it kills every worker of a run and what they started."""
    marker = f"{variable}={token}".encode()
    killed = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError):
            continue
    return killed


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


class Worker:
    """A running worker process. Use as a context manager so it is always killed."""

    def __init__(self, job: WorkerJob, code: str | None, extensions_dir: Path, timeout_s: float,
                 problem_source: str = "", placement: Placement = Placement()):
        self.timeout_s = timeout_s
        self.gpu = placement.gpu
        self.scratch = Path(tempfile.mkdtemp(prefix=f"harness-{job.role}-"))
        self.log_path = self.scratch / "worker.log"
        self.token = secrets.token_hex(16)  # marks every process this worker starts, see sweep_escaped
        if problem_source:
            problem_path = self.scratch / "problem.py"
            problem_path.write_text(problem_source)
            job = job.model_copy(update={"problem_path": str(problem_path)})
        if placement.cpus:
            job = job.model_copy(update={"cpus": placement.cpus})
        if code is not None:
            candidate_path = self.scratch / "candidate.py"
            candidate_path.write_text(code)
            job = job.model_copy(update={"candidate_path": str(candidate_path)})
        job_path = self.scratch / "job.json"
        job_path.write_text(job.model_dump_json())
        extensions_dir.mkdir(parents=True, exist_ok=True)
        parent_sock, child_sock = socket.socketpair()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "harness.worker.child", str(job_path), str(child_sock.fileno())],
                pass_fds=[child_sock.fileno()], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.scratch, env=worker_env(self.scratch, extensions_dir, placement) | {WORKER_TOKEN_VAR: self.token},
                start_new_session=True,
            )
        child_sock.close()
        self.conn = Connection(parent_sock.detach())

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def log_head(self, limit: int = LOG_HEAD_BYTES) -> str:
        """The start of the log: where a build prints its first errors."""
        try:
            with open(self.log_path, "rb") as log:
                return log.read(limit).decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - limit))
                return log.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _stopped(self, reason: StopReason, error: str) -> WorkerStopped:
        self.kill()
        return WorkerStopped(WorkerStop(reason=reason, error=error, evidence=self.log_tail(2000).splitlines()[-10:]))

    def _wait_readable(self, phase: str, timeout_s: float | None = None) -> None:
        timeout_s = timeout_s or self.timeout_s
        deadline = time.monotonic() + timeout_s
        # Slices rather than one long poll: a dead worker whose children still hold the socket
        # would otherwise look alive until the deadline.
        while not self.conn.poll(POLL_SLICE_S):
            if self.process.poll() is not None and not self.conn.poll(0):
                raise self._stopped(StopReason.died, f"worker {describe_exit(self.process.returncode)} during {phase}")
            if time.monotonic() > deadline:
                raise self._stopped(StopReason.deadline, f"no answer within {timeout_s:g} s during {phase}; killed")

    def _recv(self, phase: str, timeout_s: float | None = None) -> bytes:
        self._wait_readable(phase, timeout_s)
        try:
            return self.conn.recv_bytes()
        except (EOFError, OSError):
            try:
                code = self.process.wait(timeout=TERM_GRACE_S)  # it is exiting; learn how
            except subprocess.TimeoutExpired:
                code = None
            how = describe_exit(code) if code is not None else "closed its channel"
            raise self._stopped(StopReason.died, f"worker {how} during {phase}") from None

    def reply(self, phase: str, timeout_s: float | None = None) -> Reply:
        raw = self._recv(phase, timeout_s)
        try:
            return REPLY.validate_json(raw)
        except ValidationError:
            raise self._stopped(StopReason.broke_protocol, f"worker sent a malformed message during {phase}") from None

    def request(self, command: Command, phase: str) -> Reply:
        try:
            send_model(self.conn, command)
        except OSError:
            raise self._stopped(StopReason.died, f"worker {describe_exit(self.process.wait())} before {phase}") from None
        reply = self.reply(phase)
        if not fits(command, reply):
            raise self._stopped(StopReason.broke_protocol, f"worker answered {command.op} with the wrong kind of message during {phase}")
        return reply

    def open_outputs(self, refs: list[TensorRef], phase: str) -> list[torch.Tensor]:
        tensors = []
        for ref in refs:
            if ref.device == "cpu":
                self._wait_readable(phase)
            elif self.gpu is not None:
                # It sees only its own GPU, as device 0; here that GPU has another number.
                ref = ref.model_copy(update={"cuda_device": self.gpu if ref.cuda_device == 0 else -1})
            try:
                tensors.append(open_tensor(self.conn, ref))
            except (EOFError, OSError, ValueError, RuntimeError) as exc:
                raise self._stopped(StopReason.broke_protocol, f"worker sent an unreadable output during {phase}: {exc}") from None
        return tensors

    def kill(self) -> None:
        """TERM the whole process group, then KILL what is left."""
        if self.process.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        self._signal_group(signal.SIGKILL)  # stragglers in the group (nvcc, ninja) even if the leader left
        self.process.wait()
        sweep_escaped(self.token)

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                send_model(self.conn, Command(op="exit"))
                self.process.wait(timeout=TERM_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.conn.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

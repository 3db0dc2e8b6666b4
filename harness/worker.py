"""The sandboxed worker: the only place candidate code is ever imported.

Run by the parent as `python -m harness.worker JOB_FILE FD` in its own session and process
group, with a scrubbed environment, a private scratch directory as working directory, and
stdout/stderr going to a log file. It loads one model (the reference or a candidate), replies
on the channel FD, then serves commands: compute a trial's outputs (held on the device until
the next command, so the parent can compare them in place), or time the forward call.
"""

from __future__ import annotations

import ctypes
import hashlib
import sys
import traceback
import types
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from .problems import load_module
from .protocol import Command, Failure, ParamDigest, Reply, WorkerJob, describe_tensor, send_model, send_tensors
from .timing import time_forward

PRECISION_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
MAX_MESSAGE_CHARS = 64_000


class NotPlainTensor(Exception):
    """forward returned something other than a plain tensor or a tuple of them."""


def failure(phase: str, exc: BaseException) -> Failure:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return Failure(
        phase=phase, exc_type=type(exc).__name__, message=str(exc)[:MAX_MESSAGE_CHARS],
        traceback=[line.rstrip()[:500] for line in lines[-8:]],
    )


def cast_inputs(inputs: list, device: str, dtype: torch.dtype) -> list:
    """Move tensors to the device; cast floating ones only (class indices stay integers)."""
    cast = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            value = value.to(device)
            if value.is_floating_point():
                value = value.to(dtype)
        cast.append(value)
    return cast


def plain_outputs(output: object) -> list[torch.Tensor]:
    if type(output) is torch.Tensor:
        return [output]
    if type(output) in (tuple, list) and output and all(type(o) is torch.Tensor for o in output):
        return list(output)
    raise NotPlainTensor(f"forward returned {type(output).__module__}.{type(output).__qualname__}, not a plain torch.Tensor")


def param_digests(model: torch.nn.Module) -> list[ParamDigest]:
    digests = []
    for name, param in model.named_parameters():
        data = param.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        raw = ctypes.string_at(data.data_ptr(), data.numel())  # no numpy: torch does not require it
        digests.append(ParamDigest(name=name, shape=list(param.shape), dtype=str(param.dtype).removeprefix("torch."),
                                   sha256=hashlib.sha256(raw).hexdigest()))
    return digests


class Session:
    """One loaded model plus the problem that feeds it inputs."""

    def __init__(self, job: WorkerJob, problem: types.ModuleType, model: torch.nn.Module):
        self.job = job
        self.problem = problem
        self.model = model
        self.dtype = PRECISION_DTYPES[job.precision]
        self.held: list[torch.Tensor] = []

    def inputs(self, seed: int) -> list:
        torch.manual_seed(seed)
        return cast_inputs(list(self.problem.get_inputs()), self.job.device, self.dtype)

    def synchronize(self) -> None:
        if self.job.device == "cuda":
            torch.cuda.synchronize()

    def trial(self, seed: int) -> list[torch.Tensor]:
        self.held = []  # release the last trial's outputs before making new ones
        inputs = self.inputs(seed)
        with torch.no_grad():
            output = self.model(*inputs)
        self.synchronize()
        self.held = plain_outputs(output)
        return self.held

    def time(self, seed: int):
        self.held = []
        inputs = self.inputs(seed)
        timed = torch.compile(self.model) if self.job.compile_baseline else self.model
        with torch.no_grad():
            return time_forward(lambda: timed(*inputs), self.job.device, self.job.warmup, self.job.trials)


def load_model_class(job: WorkerJob) -> tuple[types.ModuleType, type]:
    """Import the problem and, for a candidate, its code (where load_inline builds)."""
    problem = load_module(job.problem_path, "reference_problem")
    if job.role == "reference":
        return problem, problem.Model
    candidate = load_module(job.candidate_path, "candidate")
    model_cls = getattr(candidate, "ModelNew", None)
    if not isinstance(model_cls, type) or not issubclass(model_cls, torch.nn.Module):
        raise LookupError("the code defines no ModelNew class (an nn.Module subclass)")
    return problem, model_cls


def build_model(job: WorkerJob, problem: types.ModuleType, model_cls: type) -> torch.nn.Module:
    """Construct right after the same seed as the other side, so equal inits give equal weights."""
    torch.manual_seed(job.init_seed)
    model = model_cls(*problem.get_init_inputs())
    model = model.to(job.device).to(PRECISION_DTYPES[job.precision]).eval()
    if job.device == "cuda":
        torch.cuda.synchronize()
    return model


def serve(conn: Connection, session: Session) -> None:
    while True:
        command = Command.model_validate_json(conn.recv_bytes())
        if command.op == "exit":
            return
        phase = "correctness" if command.op == "trial" else "timing"
        try:
            if command.op == "trial":
                outputs = session.trial(command.seed)
                send_model(conn, Reply(ok=True, outputs=[describe_tensor(t) for t in outputs]))
                send_tensors(conn, outputs)
            else:
                send_model(conn, Reply(ok=True, timing=session.time(command.seed)))
        except NotPlainTensor as exc:
            send_model(conn, Reply(ok=False, rejected=str(exc)))
            return
        except Exception as exc:  # the candidate's exception is data for the parent
            send_model(conn, Reply(ok=False, failure=failure(phase, exc)))
            return


def main(argv: list[str]) -> int:
    job = WorkerJob.model_validate_json(Path(argv[0]).read_text())
    conn = Connection(int(argv[1]))
    # The reference is computed in full fp32; candidates start from the same defaults.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    phase = "load"
    try:
        problem, model_cls = load_model_class(job)
        phase = "init"
        session = Session(job, problem, build_model(job, problem, model_cls))
        params = param_digests(session.model)
    except Exception as exc:
        send_model(conn, Reply(ok=False, failure=failure(phase, exc)))
        return 0
    send_model(conn, Reply(ok=True, params=params))
    serve(conn, session)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

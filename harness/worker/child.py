"""The sandboxed worker: the only place candidate code is ever imported.

Started by the parent (parent.py) through the launcher (launch.py), which confines it first: its
own session, namespaces and Landlock domain, a scrubbed environment, a private scratch directory
as working directory, and stdout/stderr going to a log only the parent can find. It loads one
model (the reference or a candidate), replies on the channel FD, then serves commands: compute a
trial's outputs (held on the device until the next command, so the parent can compare them in
place), or time the forward call.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import random
import threading
import traceback
import types
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from ..inputs.problems import input_size_names, load_module, shrink_input_sizes
from ..records import Phase
from .protocol import (Command, Failure, HardwareFloor, ParamDigest, Profile, Reply, WorkerJob, describe_tensor,
                       send_model, send_tensors)
from .timing import measure_peaks, time_forward

PRECISION_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
MAX_MESSAGE_CHARS = 64_000
SAMPLED_TIMED_CALLS = 3
MAX_KEPT_BYTES = 16 * 1024**3  # outputs can be 8.5 GB: keep fewer samples rather than run out of memory


class NotPlainTensor(Exception):
    """forward returned something other than a plain tensor or a tuple of them."""


def failure(phase: Phase, exc: BaseException) -> Failure:
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


def rolled(tensor: torch.Tensor, call: int) -> torch.Tensor:
    """The same values in another arrangement for each timed call: fresh inputs that keep the
    problem's value distribution (and valid class indices), cheap to make on the device."""
    if tensor.numel() < 2:
        return tensor
    shift = (call * 7919 + 1) % tensor.numel()
    return tensor.reshape(-1).roll(shift).reshape(tensor.shape)


def alternative_sizes(problem: types.ModuleType) -> dict[str, int] | None:
    """Other values for the input-only size constants (about half, and odd): a kernel that is
    correct only at the benchmark's shape fails there."""
    sizes = {name: getattr(problem, name) // 2 + 1 for name in input_size_names(problem) if getattr(problem, name) > 2}
    return sizes or None


@contextlib.contextmanager
def problem_sizes(problem: types.ModuleType, sizes: dict[str, int] | None):
    saved = {name: getattr(problem, name) for name in sizes or {}}
    for name, value in (sizes or {}).items():
        setattr(problem, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(problem, name, value)


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
        self.held: list[torch.Tensor] = []  # what the parent may be reading: kept until the next command
        self.kept: dict[int, list[torch.Tensor]] = {}  # outputs of sampled timed calls
        self.timed = model  # what timing calls: the model, or torch.compile of it (reference baseline)
        self.timing_inputs: tuple[list, list] | None = None  # made by warm_up: (originals, timed buffers)

    def inputs(self, seed: int, roll: int | None = None, sizes: dict[str, int] | None = None) -> list:
        with problem_sizes(self.problem, sizes):
            torch.manual_seed(seed)
            inputs = cast_inputs(list(self.problem_inputs()), self.job.device, self.dtype)
        if roll is not None:
            inputs = [rolled(t, roll) if isinstance(t, torch.Tensor) else t for t in inputs]
        return inputs

    def problem_inputs(self) -> list:
        """get_inputs() with the run's device as the default: a problem that makes its tensors
        with torch.randn(...) gets them made on the GPU, not on the CPU and copied (seconds per
        call for a gigabyte of input). Both sides make them the same way from the same seed."""
        try:
            with torch.device(self.job.device):
                return list(self.problem.get_inputs())
        except Exception:  # e.g. a problem that goes through numpy: make them as it says
            return list(self.problem.get_inputs())

    def synchronize(self) -> None:
        if self.job.device == "cuda":
            torch.cuda.synchronize()

    def trial(self, command: Command) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Outputs for the command's inputs, and the inputs as forward left them."""
        self.held = []  # release the last trial's tensors before making new ones
        inputs = self.inputs(command.seed, command.roll, command.sizes)
        with torch.no_grad():
            output = self.model(*inputs)
        self.synchronize()
        outputs = plain_outputs(output)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        self.held = outputs + tensors
        return outputs, tensors

    def time(self, seed: int):
        """Time forward with fresh input values in the same buffers for every call, keeping the
        outputs of a few randomly chosen calls so the parent can check them afterwards."""
        self.held, self.kept = [], {}
        if self.timing_inputs is None:
            self.warm_up(seed)
        originals, buffers = self.timing_inputs
        count = min(SAMPLED_TIMED_CALLS, self.job.trials) if self.job.role == "candidate" else 0
        sampled = set(random.SystemRandom().sample(range(self.job.trials), count))
        timed = self.timed

        def prepare(call: int) -> None:
            for buffer, original in zip(buffers, originals):
                if isinstance(buffer, torch.Tensor):
                    buffer.copy_(rolled(original, call))

        def after(call: int, output: object) -> None:
            if call in sampled:
                outputs = plain_outputs(output)
                kept = sum(t.nbytes for ts in self.kept.values() for t in ts)
                if not self.kept or kept + sum(t.nbytes for t in outputs) <= MAX_KEPT_BYTES:
                    self.kept[call] = [t.clone() for t in outputs]

        with torch.no_grad():
            stats = time_forward(lambda call: timed(*buffers), self.job.device, 0, self.job.trials, prepare, after)
        self.timing_inputs = None
        return stats, sorted(self.kept)

    def warm_up(self, seed: int) -> None:
        """The untimed calls before timing (and torch.compile's compilation), and the timing's
        inputs, as their own command: the parent's clock around the timed command then sees the
        timed calls only, not the generation of inputs (seconds for large ones)."""
        self.held = []
        originals = self.inputs(seed)
        buffers = [t.clone() if isinstance(t, torch.Tensor) else t for t in originals]
        self.timing_inputs = (originals, buffers)  # the model only ever sees the buffers
        self.timed = torch.compile(self.model) if self.job.compile_baseline else self.model
        with torch.no_grad():
            for _ in range(self.job.warmup):
                self.timed(*buffers)
        self.synchronize()

    def hardware_floor(self, seed: int) -> HardwareFloor:
        """FLOPs (torch's flop counter) and the bytes of inputs and outputs, over this GPU's peaks."""
        from torch.utils.flop_counter import FlopCounterMode

        inputs = self.inputs(seed)
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            outputs = plain_outputs(self.model(*inputs))
        moved = sum(t.nbytes for t in outputs) + sum(t.nbytes for t in inputs if isinstance(t, torch.Tensor))
        flops_per_ms, bytes_per_ms = measure_peaks()
        flops = float(counter.get_total_flops())
        return HardwareFloor(floor_ms=max(flops / flops_per_ms, moved / bytes_per_ms), flops=flops, bytes_moved=moved,
                             peak_flops_per_ms=flops_per_ms, peak_bytes_per_ms=bytes_per_ms)

    def sample(self, index: int) -> list[torch.Tensor]:
        self.held = self.kept.get(index, [])
        return self.held

    def profile(self, seed: int) -> Profile:
        """The ATen operators and device kernels one forward call runs."""
        self.held, self.kept = [], {}
        inputs = self.inputs(seed)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.job.device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.no_grad(), torch.profiler.profile(activities=activities) as prof:
            self.model(*inputs)
            self.synchronize()
        events = prof.events()
        return Profile(ops=sorted({e.name for e in events if e.name.startswith("aten::")}),
                       kernels=sorted({e.name for e in events if e.device_type == torch.autograd.DeviceType.CUDA}))


def pin_to_cpus(cpus: list[int] | None) -> None:
    """Keep to the cores the parent gave this worker, so builds running beside a GPU evaluation
    never take the cores its timing needs; size torch's thread pool to match."""
    if cpus:
        os.sched_setaffinity(0, set(cpus))
        torch.set_num_threads(len(set(cpus)))


def build(job: WorkerJob) -> Reply:
    """Import the candidate (load_inline compiles there) and construct it on the meta device
    (some candidates compile in __init__; meta allocates nothing). Only a failed build is final;
    any other failure may come from seeing no GPU here, and is left to the evaluating worker."""
    try:
        problem, model_cls = load_model_class(job)
    except Exception as exc:
        return Reply(ok=False, failure=failure(Phase.load, exc))
    try:
        with torch.device("meta"):
            model_cls(*problem.get_init_inputs())
    except Exception as exc:
        return Reply(ok=False, failure=failure(Phase.init, exc))
    return Reply(ok=True)


def load_model_class(job: WorkerJob) -> tuple[types.ModuleType, type]:
    """Import the problem and, for a candidate, its code (where load_inline builds)."""
    problem = load_module(job.problem_path, "reference_problem")
    if job.shrink:
        shrink_input_sizes(problem)
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


def handle(conn: Connection, session: Session, command: Command) -> None:
    if command.op == "trial":
        outputs, inputs = session.trial(command)
        send_model(conn, Reply(ok=True, outputs=[describe_tensor(t) for t in outputs],
                               inputs=[describe_tensor(t) for t in inputs], threads_alive=threading.active_count() - 1))
        send_tensors(conn, outputs + inputs)
    elif command.op == "sample":
        outputs = session.sample(command.index)
        send_model(conn, Reply(ok=True, outputs=[describe_tensor(t) for t in outputs]))
        send_tensors(conn, outputs)
    elif command.op == "warmup":
        session.warm_up(command.seed)
        send_model(conn, Reply(ok=True))
    elif command.op == "time":
        stats, sampled = session.time(command.seed)
        send_model(conn, Reply(ok=True, timing=stats, sampled=sampled, threads_alive=threading.active_count() - 1))
    else:
        floor = session.hardware_floor(command.seed) if session.job.role == "reference" and session.job.device == "cuda" else None
        send_model(conn, Reply(ok=True, profile=session.profile(command.seed), floor=floor))


COMMAND_PHASES = {"trial": Phase.correctness, "warmup": Phase.timing, "sample": Phase.timing, "time": Phase.timing,
                  "profile": Phase.profile}


def serve(conn: Connection, session: Session) -> None:
    while True:
        command = Command.model_validate_json(conn.recv_bytes())
        if command.op == "exit":
            return
        phase = COMMAND_PHASES[command.op]
        try:
            handle(conn, session, command)
        except NotPlainTensor as exc:
            send_model(conn, Reply(ok=False, rejected=str(exc)))
            return
        except Exception as exc:  # the candidate's exception is data for the parent
            send_model(conn, Reply(ok=False, failure=failure(phase, exc)))
            return


def main(job_path: str, fd: int) -> int:
    """Called by launch.py once the worker is confined."""
    job = WorkerJob.model_validate_json(Path(job_path).read_text())
    conn = Connection(fd)
    pin_to_cpus(job.cpus)
    if job.role == "build":
        send_model(conn, build(job))
        return 0
    # The reference is computed in full fp32; candidates start from the same defaults.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    phase = Phase.load
    try:
        problem, model_cls = load_model_class(job)
        phase = Phase.init
        session = Session(job, problem, build_model(job, problem, model_cls))
        params = param_digests(session.model)
    except Exception as exc:
        send_model(conn, Reply(ok=False, failure=failure(phase, exc)))
        return 0
    alt = alternative_sizes(problem) if job.role == "reference" else None
    send_model(conn, Reply(ok=True, params=params, alt_sizes=alt))
    serve(conn, session)
    return 0

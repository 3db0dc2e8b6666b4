"""The sandboxed worker: the only place candidate code is ever imported.

Started by the parent (parent.py) through the launcher (launch.py), which confines it first: its
own session, namespaces and Landlock domain, a scrubbed environment, a private scratch directory
as working directory, and stdout/stderr going to a log only the parent can find. It waits for
its job, loads one model (the reference or a candidate), replies on the channel, then serves
commands: compute a trial's outputs, run untimed calls, time one call on inputs made from a seed
it learns only with that call, or measure the reference's hardware floor. Outputs stay held until
the next command, described to the parent (cuda_ipc.py, or the commit buffer) before the reply
that carries their time: the parent decides afterwards, in secret, which ones it checks.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import math
import os
import random
import re
import stat
import sys
import traceback
import types
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import get_args

import torch

from ..inputs.problems import alternative_sizes, load_module, shrink_input_sizes
from ..records import Phase
from . import cuda_ipc
from .confine import hold_affinity, not_dumpable
from .protocol import (MAX_LINE_CHARS, MAX_MESSAGE_CHARS, MAX_NAME_CHARS, MAX_SOURCE_CHARS, MAX_TENSORS,
                       MAX_TRACEBACK_LINES, Command, CommitBuffer, Failure, FeedFile, GeneratedSource, HardwareFloor, KernelTime, OutputForm, ParamDigest, Peaks,
                       Profile, Reply, TensorRef, WorkerJob, committed_refs, describe, send_model)
from .timing import CallTime, GpuClock, measure_peaks, slowest_round_trip_ms, time_call

PRECISION_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# torch.utils.cpp_extension's message for a failed build, naming the extension; its build dir
# (under TORCH_EXTENSIONS_DIR) is named without the "_v<n>" a rebuild in one process adds.
FAILED_EXTENSION = re.compile(r"Error building extension '([^'/]+)'")
VERSIONED = re.compile(r"_v\d+$")
SETTLE_ROUND_TRIPS = 4


class NotPlainTensor(Exception):
    """forward returned something other than a plain tensor or a tuple of them."""


class LaunchFailed(RuntimeError):
    """A kernel launch failed and nothing checked: the kernel never ran."""


# Frames that are no candidate's: this package's (the worker's loop that called the candidate) and
# nn.Module's call dispatch, between that loop and the candidate's forward.
PLUMBING = (os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep,
            os.path.realpath(torch.nn.modules.module.__file__))


def failure(phase: Phase, exc: BaseException) -> Failure:
    """The exception as data; its traceback without plumbing frames, so the evidence starts
    where the candidate's code does."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not os.path.realpath(frame.filename).startswith(PLUMBING)]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
    message = _text(exc)
    return Failure(
        phase=phase, exc_type=_sendable(type(exc).__name__)[:MAX_NAME_CHARS], message=message[:MAX_MESSAGE_CHARS],
        traceback=[_sendable(line.rstrip())[:MAX_LINE_CHARS] for line in lines[-MAX_TRACEBACK_LINES:]],
        sources=generated_sources(message),
    )


def _text(exc: BaseException) -> str:
    """The exception's message, whatever its __str__ does."""
    try:
        return _sendable(str(exc))
    except Exception:
        return f"<{type(exc).__name__} whose message could not be read>"


def _sendable(text: str) -> str:
    """`text` as valid UTF-8 (a lone surrogate, from bytes decoded with surrogateescape, is not)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def generated_sources(message: str) -> dict[str, str]:
    """The sources load_inline generated for the extension whose build failed, by name; each a
    regular file, read up to MAX_SOURCE_CHARS bytes."""
    named = FAILED_EXTENSION.search(message)
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if named is None or not root:
        return {}
    for folder in dict.fromkeys([VERSIONED.sub("", named.group(1)), named.group(1)]):
        sources = {name: text for name in get_args(GeneratedSource)
                   if (text := read_regular(os.path.join(root, folder, name), MAX_SOURCE_CHARS)) is not None}
        if sources:
            return sources
    return {}


def read_regular(path: str, limit: int) -> str | None:
    """Up to `limit` bytes of a regular file, or None (no such file, or a FIFO or device, which
    would block or never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return file.read(limit).decode(errors="replace")


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


def alike(rows: list[list[torch.Tensor]]) -> bool:
    """Whether lists of tensors agree position by position in shape, dtype and device (and in length)."""
    first = [(t.shape, t.dtype, t.device) for t in rows[0]]
    return all([(t.shape, t.dtype, t.device) for t in row] == first for row in rows[1:])


def located(returned: list) -> tuple[list[TensorRef], list[list[int]]]:
    """Where a timed command's outputs are in this process's memory: the first call's layout
    (with the address of each output's first element) and, per call, those addresses. The parent
    reads the calls it checks there itself, with the first call's layout; that every call's is
    the same is checked once they are read (`laid_out_alike`), on no clock: here, inside the
    parent's clock, it was per-call work a worker that skipped it would gain."""
    first = plain_outputs(returned[0])
    if any(t.is_cuda for t in first):
        raise NotPlainTensor("forward returned a CUDA tensor on a CPU run")
    refs = [TensorRef(dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape), stride=list(t.stride()),
                      storage_offset=0, device="cpu", address=t.data_ptr()) for t in first]
    return refs, [[t.data_ptr() for t in plain_outputs(output)] for output in returned]


def layout(tensor: torch.Tensor) -> tuple:
    """What reading a tensor at its first element's address needs: dtype, shape, and the strides
    of its dimensions longer than 1 (a length-1 dimension's stride is never stepped over)."""
    return tensor.dtype, tuple(tensor.shape), tuple(step for step, size in zip(tensor.stride(), tensor.shape) if size > 1)


def laid_out_alike(returned: list) -> None:
    if not returned:
        return
    per_call = [plain_outputs(output) for output in returned]
    first = [layout(t) for t in per_call[0]]
    if any([layout(t) for t in outputs] != first for outputs in per_call[1:]):
        raise NotPlainTensor("forward returned tensors of other shapes, dtypes or layouts from one call to the next")


def rows_key(stacked: list[torch.Tensor], calls: int) -> tuple:
    """What makes the rows of stacked tensors the same views: where each is, its layout, and how many."""
    return calls, tuple((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) for t in stacked)


def plain_outputs(output: object) -> list[torch.Tensor]:
    if type(output) is torch.Tensor:
        return [output]
    if type(output) in (tuple, list) and output and all(type(o) is torch.Tensor for o in output):
        if len(output) > MAX_TENSORS:
            raise NotPlainTensor(f"forward returned {len(output)} tensors, more than the {MAX_TENSORS} compared")
        return list(output)
    raise NotPlainTensor(f"forward returned {type(output).__module__}.{type(output).__qualname__}, not a plain torch.Tensor")


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


def seed_everything(seed: int, device: str = "cuda") -> None:
    """The generators a problem's get_inputs() may use: torch's, Python's, and numpy's if loaded.
    On a CPU run torch's CPU generator only: torch.manual_seed seeds every device's too, 97 us on
    the 2-core VM, more than a tiny problem's inputs take to make (and a CPU batch makes a
    thousand sets of them)."""
    if device == "cpu":
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


def param_digests(model: torch.nn.Module) -> list[ParamDigest]:
    digests = []
    for name, param in model.named_parameters():
        data = param.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        raw = ctypes.string_at(data.data_ptr(), data.numel())  # no numpy: torch does not require it
        digests.append(ParamDigest(name=name, shape=list(param.shape), dtype=str(param.dtype).removeprefix("torch."),
                                   sha256=hashlib.sha256(raw).hexdigest()))
    return digests


def _outermost_operator(event) -> str | None:
    """The outermost ATen operator above a profiler event (None when no operator launched it)."""
    found, parent = None, event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            found = parent.name
        parent = parent.cpu_parent
    return found


# How the profiler names a tensor argument's type (c10's names for its scalar types). Arguments
# that are no data: a Python number ("Scalar"), numbers ("ScalarList": sizes), an option or a
# string (""; indices' list of tensors is "" too, but `index` reads its data through a tensor).
# A list of tensors ("TensorList", einsum's) or anything else: data of unknown size.
TENSOR_TYPES = {"float", "double", "c10::Half", "c10::BFloat16", "int", "long int", "short int", "signed char",
                "unsigned char", "bool"}
NO_DATA_TYPES = {"Scalar", "ScalarList", ""}


def largest_argument(event) -> int | None:
    """The elements of an operator's largest tensor argument (0 for none: it reads no data), from
    the shapes the profiler recorded; None where an argument's size is unknown (a list of tensors,
    a torch that records no argument types)."""
    kinds, shapes = getattr(event, "input_dtypes", None), event.input_shapes
    if not kinds or len(kinds) != len(shapes or []):
        return None
    largest = 0
    for kind, shape in zip(kinds, shapes):
        if kind in TENSOR_TYPES:
            largest = max(largest, math.prod(shape))
        elif kind not in NO_DATA_TYPES or shape:
            return None
    return largest


def summarize_profile(events, elapsed_ms: float) -> Profile:
    """Operators and kernels of one profiled call: which operator launched each kernel (its
    launch call shares the kernel's correlation id) and how long each kernel ran on the device."""
    device = torch.autograd.DeviceType.CUDA
    launchers = {e.id: e for e in events if e.device_type != device and e.name.startswith("cu")}
    # Clamped: an event the profiler did not close would give a negative time, which the protocol refuses.
    kernels = [KernelTime(name=e.name, device_ms=max(0.0, e.time_range.elapsed_us() / 1000),
                          operator=_outermost_operator(launchers[e.id]) if e.id in launchers else None)
               for e in events if e.device_type == device]
    top, read, unknown = {}, {}, set()
    for e in events:
        if e.name.startswith("aten::") and e.device_type != device and _outermost_operator(e) is None:
            top[e.name] = top.get(e.name, 0.0) + max(0.0, e.cpu_time_total / 1000)
            elements = largest_argument(e)
            if elements is None:
                unknown.add(e.name)
            else:
                read[e.name] = read.get(e.name, 0) + elements
    return Profile(ops=sorted({e.name for e in events if e.name.startswith("aten::")}), top_op_ms=top,
                   elements_read={op: n for op, n in read.items() if op not in unknown}, kernels=kernels,
                   elapsed_ms=elapsed_ms)


def math_flags() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def set_math_flags(flags: tuple[bool, bool]) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


STRICT_FP32 = (False, False)


class Session:
    """One loaded model plus the problem that feeds it inputs."""

    def __init__(self, job: WorkerJob, problem: types.ModuleType, model: torch.nn.Module, buffer: CommitBuffer,
                 default_math: tuple[bool, bool] = STRICT_FP32, feed: FeedFile | None = None,
                 clock: GpuClock | None = None):
        """`default_math`: PyTorch's own math flags, as this process started with them; `feed`:
        where the parent writes fed inputs; `clock`: a GPU's (None on the CPU), set up before any
        of the candidate's code ran (`load`)."""
        self.job, self.default_math = job, default_math
        self.problem = problem
        self.model = model
        self.buffer, self.feed = buffer, feed
        self.dtype = PRECISION_DTYPES[job.precision]
        self.held: list[torch.Tensor] = []  # what the parent may be reading: kept until the next command
        self.uncommitted: list = []  # what the last timed command's calls returned, one item a call, until `commit`
        self.unreleased: list = []  # the same, once located (CPU), until `release`
        self.last_fed: tuple[list[TensorRef], int] | None = None  # the last timed command's fed inputs and calls
        self.next_rows: tuple[tuple, list[list[torch.Tensor]]] | None = None  # rows for a command like it (`prepare_rows`)
        self.timed_model = torch.compile(model) if job.compile_baseline else model
        self.clock = clock
        self.unsummarized: tuple[float, torch.autograd.profiler.profile] | None = None  # the last profiled timed call

    def release(self) -> None:
        """Drop the held outputs and hand cached device memory back (outputs can be gigabytes)."""
        self.held = []
        if self.job.device == "cuda":
            torch.cuda.empty_cache()

    def inputs(self, seed: int, sizes: dict[str, int] | None = None) -> list:
        with problem_sizes(self.problem, sizes):
            seed_everything(seed, self.job.device)
            return cast_inputs(self.problem_inputs(), self.job.device, self.dtype)

    def feedable(self, seeds: list[int]) -> list[torch.Tensor] | None:
        """The inputs of `seeds` stacked (a row per seed), when they can be fed to another worker
        as they are: all of them contiguous CPU tensors, alike from seed to seed (else None, and
        timed calls make their own from the seeds)."""
        sets = [self.inputs(seed) for seed in seeds]
        plain = all(isinstance(t, torch.Tensor) and not t.is_cuda and t.is_contiguous() for inputs in sets for t in inputs)
        if not plain or not alike(sets):
            return None
        return [torch.stack([inputs[position] for inputs in sets]) for position in range(len(sets[0]))]

    def fed_rows(self, fed: list[TensorRef], calls: int) -> list[list[torch.Tensor]]:
        """The fed inputs of `calls` calls, a list per call: rows of the stacked tensors in the
        feed file (those `prepare_rows` made, when they are these)."""
        stacked = self.feed.tensors(fed)
        key = rows_key(stacked, calls)
        if self.next_rows is not None and self.next_rows[0] == key:
            rows, self.next_rows = self.next_rows[1], None
            return rows
        return [[tensor[index] for tensor in stacked] for index in range(calls)]

    def prepare_rows(self) -> None:
        """Make the rows a timed command like the last one is fed, after its commit was answered:
        on no clock. Made inside the command, they were the reference's overhead, which the
        parent's bound subtracts from a candidate's wall time, and a candidate that fed its calls
        without them gained them (with the output checks, 3.1 to 4.2 us of the reference's 11 to
        15 us of overhead a call on a tiny relu: 2 to 5 times its honest twin's speed).
        Fresh for each command, used once: a call that changes its input's shape in place
        changes no later command's."""
        if self.last_fed is not None:
            fed, calls = self.last_fed
            stacked = self.feed.tensors(fed)
            self.next_rows = (rows_key(stacked, calls), [[tensor[index] for tensor in stacked] for index in range(calls)])

    def given_or_made(self, seed: int, fed: list[TensorRef] | None) -> list:
        """A call's inputs: the fed ones when the parent wrote them into the feed file, else made from the seed."""
        if fed is None or self.feed is None:
            return self.inputs(seed)
        return self.fed_rows(fed, 1)[0]

    def problem_inputs(self) -> list:
        """get_inputs() with the run's device as the default: a problem that makes its tensors
        with torch.randn(...) gets them made on the GPU, not on the CPU and copied (seconds per
        call for a gigabyte of input). Both sides make them the same way from the same seed. On a
        CPU run the default already: there the context, a function mode every torch call goes
        through, cost 45 us a set of the tiny relu's inputs (of 114), and a batch makes a thousand."""
        if self.job.device == "cpu":
            return list(self.problem.get_inputs())
        try:
            with torch.device(self.job.device):
                return list(self.problem.get_inputs())
        except Exception:  # e.g. a problem that goes through numpy: make them as it says
            return list(self.problem.get_inputs())

    def synchronize(self) -> None:
        if self.job.device == "cuda":
            torch.cuda.synchronize()
            error = cuda_ipc.pending_launch_error()
            if error is not None:
                raise LaunchFailed(f"a kernel launch failed ({error}); the kernel never ran")

    def forward(self, model, inputs: list) -> tuple[list[torch.Tensor], OutputForm]:
        """The outputs of one call, and whether forward returned them as one tensor or a sequence."""
        with torch.no_grad():
            output = model(*inputs)
        self.synchronize()
        return plain_outputs(output), "tensor" if type(output) is torch.Tensor else "sequence"

    def trial(self, command: Command) -> tuple[list[torch.Tensor], list[torch.Tensor], OutputForm]:
        """Outputs for the command's inputs, the inputs as forward left them, and the outputs' form."""
        self.held = []  # release the last command's tensors before making new ones
        inputs = self.inputs(command.seed, command.sizes)
        outputs, form = self.forward(self.model, inputs)
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        self.held = outputs + tensors
        return outputs, tensors, form

    def warm_up(self, seeds: list[int], fed: list[TensorRef] | None = None) -> float | None:
        """Untimed calls (and torch.compile's compilation), each on its own inputs; the last one
        under the profiler, so that a profiled timed call pays no first-time profiler costs, and on
        fed inputs if any (mapping the feed file is then no timed call's cost). Answers the
        fastest call's time (None without calls), which sizes the timed commands on a CPU."""
        self.held = []
        fastest = None
        for index, seed in enumerate(seeds):
            last = index == len(seeds) - 1
            inputs = self.given_or_made(seed, fed if last else None)
            call = lambda: self.forward(self.timed_model, inputs)  # noqa: E731
            if last:
                elapsed = self.profiled(call).elapsed_ms
                self.profile()  # reading the events has first-time costs too
            else:  # the host's clock around it (forward synchronizes): no flush, which sizing on a CPU does not need
                elapsed = time_call(call, None).elapsed_ms
            fastest = elapsed if fastest is None else min(fastest, elapsed)
        return fastest

    def profiled(self, call) -> CallTime:
        """Time the call under the profiler; its events are read later (`profile`), after the
        reply: reading them costs milliseconds more the more events there are (8 ms for 60 CPU
        operators), which the parent's clock around a profiled call must not count."""
        profiler = new_profiler(self.job.device)
        elapsed = time_call(call, self.clock, lambda: profiler)
        self.unsummarized = (elapsed.elapsed_ms, profiler)
        return elapsed

    def profile(self) -> Profile:
        """What the last profiled call ran."""
        if self.unsummarized is None:
            raise RuntimeError("no profiled call to summarize")
        (elapsed, profiler), self.unsummarized = self.unsummarized, None
        return summarize_profile(profiler.function_events, elapsed)

    def timed(self, command: Command) -> CallTime:
        """`command.calls` calls timed one after another, each on inputs learned only now: fed, or made
        from seeds learned now; a profiled command's profile is asked for next (`profile`). What
        the calls returned waits for the commit, which checks it: work the parent times apart
        and allows a candidate no more of than the reference's commit took (in this command, a
        candidate that skipped the checks gained them, see `prepare_rows`)."""
        self.held = []
        sets = self.timed_inputs(command)
        self.synchronize()
        returned: list = []

        def call(inputs: list) -> None:
            with torch.no_grad():
                returned.append(self.timed_model(*inputs))

        def calls() -> None:
            for inputs in sets:
                call(inputs)

        if command.profile:
            elapsed = self.profiled(calls)
        elif self.clock is None:  # CPU: the calls back to back, on one clock
            elapsed = time_call(calls, None)
        else:
            # GPU: each call flushed and timed alone, as in a command of one call. Back to back, a
            # launch-bound kernel's launches would overlap the last call's kernels, and a call would
            # find the last one's data in the L2.
            times = [time_call(functools.partial(call, inputs), self.clock) for inputs in sets]
            elapsed = CallTime(sum(t.elapsed_ms for t in times), sum(t.host_ms for t in times))
        self.synchronize()
        self.uncommitted = returned
        return elapsed

    def locate(self) -> tuple[list[TensorRef], list[list[int]]]:
        """Where the last timed command's outputs are (`located`), held until `released`."""
        self.unreleased, self.uncommitted = self.uncommitted, []
        return located(self.unreleased)

    def released(self) -> None:
        """The located outputs read: checked to be laid out alike, freed, and the next command's
        rows made, on no clock (`prepare_rows`)."""
        unreleased, self.unreleased = self.unreleased, []
        laid_out_alike(unreleased)
        del unreleased
        self.prepare_rows()

    def committed(self) -> list[list[torch.Tensor]]:
        """The last timed command's outputs, a list per call, alike from call to call, handed over once (`commit`)."""
        if not self.uncommitted:
            raise RuntimeError("no timed outputs to commit")
        returned, self.uncommitted = self.uncommitted, []
        per_call = [plain_outputs(output) for output in returned]
        if not alike(per_call):
            raise NotPlainTensor("forward returned tensors of other shapes or dtypes from one call to the next")
        self.held = [tensor for outputs in per_call for tensor in outputs]
        return per_call

    def timed_inputs(self, command: Command) -> list[list]:
        """A timed command's inputs, a list per call: rows of the fed ones, or made from its seeds."""
        if command.fed is None or self.feed is None:
            return [self.inputs(seed) for seed in command.seeds]
        if not command.profile:  # a profiled command's few calls are not what the next one is like
            self.last_fed = (command.fed, command.calls)
        return self.fed_rows(command.fed, command.calls)

    def settle(self) -> float | None:
        """Make this process's GPU context the running one again (tiny kernels), after the
        parent's copy of a checked output ran in its own: the switch back costs the next call
        about 0.2 ms otherwise (H100), outside the reported time but inside the parent's clock.
        Answers the slowest of their round trips: how long this context waits for the GPU."""
        if self.job.device != "cuda":
            return None
        slowest = slowest_round_trip_ms(SETTLE_ROUND_TRIPS)
        self.synchronize()  # a failed launch surfaces here
        return slowest

    def hardware_floor(self, seed: int) -> HardwareFloor:
        """FLOPs (torch's flop counter) and the bytes of inputs and outputs, over this GPU's peaks."""
        from torch.utils.flop_counter import FlopCounterMode

        inputs = self.inputs(seed)
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            outputs = plain_outputs(self.model(*inputs))
        moved = sum(t.nbytes for t in outputs) + sum(t.nbytes for t in inputs if isinstance(t, torch.Tensor))
        peaks = self.job.peaks or Peaks(**dict(zip(("flops_per_ms", "bytes_per_ms"), measure_peaks())))
        flops = float(counter.get_total_flops())
        return HardwareFloor(floor_ms=max(flops / peaks.flops_per_ms, moved / peaks.bytes_per_ms), flops=flops,
                             bytes_moved=moved, peak_flops_per_ms=peaks.flops_per_ms,
                             peak_bytes_per_ms=peaks.bytes_per_ms)


def pin_to_cpus(cpus: list[int] | None) -> None:
    """Keep to the cores the parent gave this worker (every thread it has, and those it starts),
    so builds running beside a GPU evaluation never take the cores its timing needs, and hold it
    there: from here on nothing in it may move (confine.hold_affinity). Size torch's thread pool
    to match."""
    if cpus:
        for thread in os.listdir("/proc/self/task"):
            with contextlib.suppress(ProcessLookupError):  # a thread that has ended meanwhile
                os.sched_setaffinity(int(thread), set(cpus))
        hold_affinity()
        torch.set_num_threads(len(set(cpus)))


# What candidate code may raise, reported as its failure: SystemExit and KeyboardInterrupt too (a
# worker is in a session of its own, so no terminal's Ctrl-C reaches it: only the candidate raises
# them), which would otherwise end the worker as "exited with code N".
CANDIDATE_RAISES = (Exception, SystemExit, KeyboardInterrupt)


def build(job: WorkerJob) -> Reply:
    """Import the candidate (load_inline compiles there) and construct it on the meta device
    (some candidates compile in __init__; meta allocates nothing). Only a failed build is final;
    any other failure may come from seeing no GPU here, and is left to the evaluating worker."""
    try:
        problem, model_cls = load_model_class(job)
    except CANDIDATE_RAISES as exc:
        return Reply(ok=False, failure=failure(Phase.load, exc))
    try:
        with torch.device("meta"):
            model_cls(*problem.get_init_inputs())
    except CANDIDATE_RAISES as exc:
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
    seed_everything(job.init_seed)
    model = model_cls(*problem.get_init_inputs())
    model = model.to(job.device).to(PRECISION_DTYPES[job.precision]).eval()
    if job.device == "cuda":
        torch.cuda.synchronize()
    return model


_current_frames = sys._current_frames  # bound before candidate code could replace it


def threads_alive() -> int:
    """Python threads beside the worker's own: every thread running Python code, those started
    with `_thread.start_new_thread` too (threading.active_count misses them). A native thread is
    not seen here; its CPU time still counts on a CPU run. The worker's own report: an annotation."""
    return len(_current_frames()) - 1


def handle(conn: Connection, session: Session, command: Command) -> None:
    if command.op == "trial":
        outputs, inputs, form = session.trial(command)
        refs = describe(outputs + inputs, session.buffer)  # one write: CPU tensors share the commit buffer
        send_model(conn, Reply(ok=True, outputs=refs[:len(outputs)], inputs=refs[len(outputs):], form=form,
                               threads_alive=threads_alive()))
    elif command.op == "inputs":
        session.held = []
        inputs = session.feedable(command.seeds)
        send_model(conn, Reply(ok=True, inputs=None if inputs is None else describe(inputs, session.buffer)))
    elif command.op == "warmup":
        send_model(conn, Reply(ok=True, elapsed_ms=session.warm_up(command.seeds, command.fed)))
    elif command.op == "settle":
        send_model(conn, Reply(ok=True, elapsed_ms=session.settle()))
    elif command.op == "profile":
        send_model(conn, Reply(ok=True, profile=session.profile()))
    elif command.op == "math":
        set_math_flags(session.default_math if command.default_math else STRICT_FP32)
        session.release()  # another algorithm's workspace is not kept beside this one's
        send_model(conn, Reply(ok=True))
    elif command.op == "timed":
        elapsed = session.timed(command)
        outputs, addresses = session.locate() if command.locate else (None, None)
        send_model(conn, Reply(ok=True, elapsed_ms=elapsed.elapsed_ms, host_ms=elapsed.host_ms, outputs=outputs,
                               addresses=addresses, threads_alive=threads_alive()))
    elif command.op == "release":
        session.released()
        send_model(conn, Reply(ok=True))
    elif command.op == "commit":
        per_call = session.committed()
        outputs = committed_refs(per_call, session.buffer)
        send_model(conn, Reply(ok=True, outputs=outputs))
        if session.job.device != "cuda":
            # In the commit buffer now: freed after the reply rather than inside the next timed
            # call, as the reference's are (its next command makes inputs), so the per-call
            # overhead the bound subtracts is the same for both (a 256 MB free took 13 to 50 ms).
            session.held = per_call = []
            session.prepare_rows()
    else:
        send_model(conn, Reply(ok=True, floor=session.hardware_floor(command.seed)))


COMMAND_PHASES = {"trial": Phase.correctness, "inputs": Phase.timing, "warmup": Phase.timing, "timed": Phase.timing,
                  "commit": Phase.timing, "release": Phase.timing,
                  "profile": Phase.timing, "settle": Phase.timing, "floor": Phase.profile, "math": Phase.timing}


def serve(conn: Connection, session: Session) -> None:
    while True:
        try:
            received = conn.recv_bytes()
        except EOFError:  # no more commands (Worker.finish): it exits as a process does
            return
        command = Command.model_validate_json(received)
        try:
            handle(conn, session, command)
        except NotPlainTensor as exc:
            send_model(conn, Reply(ok=False, rejected=str(exc)))
            return
        except CANDIDATE_RAISES as exc:  # the candidate's exception is data for the parent
            send_model(conn, Reply(ok=False, failure=failure(COMMAND_PHASES[command.op], exc)))
            return


def load(conn: Connection, job: WorkerJob, buffer: CommitBuffer, feed: FeedFile,
         default_math: tuple[bool, bool]) -> Session | None:
    """Import, construct, and say so (with parameter digests, and for the reference the other
    sizes candidates are checked at); None when that failed (the reply says how)."""
    phase = Phase.load
    try:
        clock = gpu_clock(job.device)
        problem, model_cls = load_model_class(job)
        phase = Phase.init
        session = Session(job, problem, build_model(job, problem, model_cls), buffer, default_math, feed, clock)
        params = param_digests(session.model)
    except CANDIDATE_RAISES as exc:
        send_model(conn, Reply(ok=False, failure=failure(phase, exc)))
        return None
    alt = alternative_sizes(problem, job.device) if job.role == "reference" else None
    send_model(conn, Reply(ok=True, params=params, alt_sizes=alt))
    return session


def gpu_clock(device: str) -> GpuClock | None:
    """The GPU's clock (worker/timing.py), before the candidate's code is imported: its hold
    compiled and its join latency measured with nothing of the candidate's running (a thread it
    started could have slowed the joins the latency is measured on, and the latency is what work
    left on other streams is charged beyond)."""
    if device != "cuda":
        return None
    try:
        return GpuClock()
    except Exception as exc:  # NVRTC or the driver, not the candidate: the message says so
        raise RuntimeError(f"the harness's GPU clock could not be set up: {exc}") from exc


def new_profiler(device: str) -> torch.autograd.profiler.profile:
    """The CPU's operators and, on a GPU, its kernels: torch.autograd's profiler, built as the
    torch.profiler wrapper builds it, without the wrapper, whose start asks whether torch has
    `_inductor` and so imports it (1.1 s of every worker's boot on the CPU machine, 7 s on the
    GPU machine). Not taken over from it: a CUPTI workaround for inductor's CUDA graphs before
    CUDA 12.6."""
    # Argument shapes tell how much data each operator read (`largest_argument`),
    # which the fallback rule reads on the CPU only (a GPU's is judged by its kernels' device time).
    settings = {**all_threads(), "use_kineto": True, "record_shapes": device == "cpu"}
    profiler = torch.autograd.profiler.profile(use_device="cuda" if device == "cuda" else None, **settings)
    if device == "cuda" and torch.profiler.ProfilerActivity.CUDA not in getattr(profiler, "kineto_activities", ()):
        profiler = torch.autograd.profiler.profile(use_cuda=True, **settings)  # torch before use_device="cuda"
    return profiler


def all_threads() -> dict:
    """The profiler's setting that records operators on every thread of the process: it records
    the calling thread's only otherwise, and a forward that ran the reference's operator on a
    thread of its own (a ThreadPoolExecutor) showed none (2026-11-27). Empty on a torch without
    it (before 2.8), where that stays open."""
    try:
        return {"experimental_config": torch._C._profiler._ExperimentalConfig(profile_all_threads=True)}
    except (AttributeError, TypeError):
        return {}


def warm_profiler(device: str) -> None:
    """The profiler's one-time set-up, done before any timing: on a booting worker, while another
    candidate is judged."""
    with new_profiler(device):
        torch.zeros(1, device=device).add_(1)


def warm_meta() -> None:
    """torch's Python meta kernels, whose first use imports some 800 modules (sympy, and dynamo
    for a relu): 0.9 s on the CPU machine; on an H200 host 5.4 s of each reference's start, where
    the other sizes candidates are checked at are sized on the meta device (3.1 s) and its FLOPs
    counted through the same kernels (2.3 s)."""
    try:
        with torch.device("meta"):
            torch.relu(torch.randn(2))
        from torch.utils import flop_counter  # noqa: F401  (what counting its FLOPs imports)
    except Exception:  # only a head start: whatever failed here is met, and reported, where it is needed
        pass


def warm_triton() -> None:
    """What a Triton kernel's first launch in a process computes, whether or not its compiled
    kernel is cached: the hash of Triton's own code that keys every kernel (0.43 s on an H100
    host) and the modules its argument specialization imports (0.13 s), 0.6 s of a Triton
    softmax's first trial there. It reads Triton's files only: no CUDA, nothing written. Either
    part missing (no Triton, another version's layout) leaves that part to the first launch."""
    try:
        try:
            from triton.runtime.cache import triton_key
        except ImportError:
            from triton.compiler.compiler import triton_key  # Triton 3.3 and earlier
        triton_key()  # cached for the process
    except Exception:
        pass
    try:
        import triton.experimental.gluon.nvidia.hopper  # noqa: F401  (Triton 3.4 on)
    except Exception:
        pass


def warm_ahead(job_waiting: Callable[[], bool]) -> None:
    """What a GPU lane's spare does as it boots (the `boot` command): ready to load a reference
    at once and, unless its job has come meanwhile, a Triton kernel's first launch. A run's first
    workers get their jobs while booting, the first reference's among them, which every
    candidate of the lane waits for: Triton's part would only delay it."""
    warm_meta()
    if not job_waiting():
        warm_triton()


def boot_imports() -> None:
    """What every worker does as it boots, before its job: the CPU profiler's set-up, and what
    load_inline needs (half a second, setuptools, of every extension candidate's load otherwise,
    and of its build)."""
    warm_profiler("cpu")
    import torch.utils.cpp_extension  # noqa: F401


def next_job(conn: Connection) -> Command:
    """The job command, after the boot commands sent ahead of it."""
    command = Command.model_validate_json(conn.recv_bytes())
    while command.op == "boot":
        warm_ahead(lambda: conn.poll(0))
        command = Command.model_validate_json(conn.recv_bytes())
    return command


def main(fd: int, buffer_fd: int, feed_fd: int) -> int:
    """Called by launch.py once the worker is confined (torch is imported here, not before)."""
    conn = Connection(fd)
    boot_imports()
    command = next_job(conn)
    if command.op != "job" or command.job is None:
        return 0
    job = command.job
    pin_to_cpus(job.cpus)
    if job.role == "build":
        send_model(conn, build(job))
        return 0
    if job.role == "reference":
        not_dumpable()  # other processes of this user (candidates) cannot read the expected outputs
    # The reference is computed in full fp32; candidates start from the same defaults.
    default_math = math_flags()
    set_math_flags(STRICT_FP32)
    if job.device == "cuda":
        warm_profiler("cuda")
    session = load(conn, job, CommitBuffer(buffer_fd), FeedFile(feed_fd), default_math)
    if session is not None:
        serve(conn, session)
    return 0

"""The wire between the parent and a worker: JSON messages and tensors, never pickle.

The parent validates every message with pydantic and never unpickles anything a worker sends,
so a candidate that writes to the channel can at worst send a malformed message (read as a
crash), not run code in the parent. Tensors never travel through the channel: CUDA tensors are
described by the IPC handle of their allocation (cuda_ipc.py), CPU tensors are written into a
memory file the parent created and handed to the worker (its commit buffer), which the parent
maps read-only after sealing it against shrinking (a worker cannot fault the parent). On a CPU
run a timed call's inputs travel the other way: the reference makes them from a seed, and the
parent writes them into a second memory file of the worker's (its feed file) while the worker is
stopped, so that the inputs' making is no part of the call the parent's clock times.

A worker's life: `job` (load the model; a warm worker waits for it already confined, torch
imported), then any number of `trial`, `inputs`, `warmup`, `timed` and `floor` commands; the
parent kills it when it is done with it. On a CPU run a timed command may time several calls back to back, each on inputs of its
own (judge/timing/protocol.py says why): their inputs and outputs travel stacked, a row per call, so that
a batch costs the same few messages' worth of descriptions whatever its size.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from multiprocessing.connection import Connection
from typing import Annotated, Literal

import torch
from pydantic import BaseModel, Field, TypeAdapter, model_validator

from ..records import Device, Phase, Precision
from . import cuda_ipc

ALLOWED_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64)
}


ALIGNMENT = 64  # bytes: where each CPU tensor starts in a memory file or a read buffer, so any dtype can view it


class Peaks(BaseModel):
    """What this GPU really reaches: measured once per device, handed to later reference workers."""

    flops_per_ms: float
    bytes_per_ms: float


class WorkerJob(BaseModel):
    role: Literal["reference", "candidate", "build"]  # build: import and construct a candidate, then exit
    problem_path: str
    candidate_path: str | None = None  # the extracted code, written by the parent
    device: Device
    precision: Precision
    init_seed: int
    compile_baseline: bool = False  # reference only: time torch.compile(model)
    shrink: bool = False  # run at reduced input sizes (quick checks of the problems themselves)
    cpus: list[int] | None = None  # the cores to pin to (builds and lanes keep apart on a GPU run)
    peaks: Peaks | None = None  # reference on a GPU: this device's peak rates, when already measured


# Times a worker reports, within what a clock can measure: a call's from 1 ns to 1e7 ms (longer than
# any deadline), a profile's from 0. Anything else is a malformed message: a 0, negative, 5e-324 or
# 1e308 ms median, or a NaN, made the statistics, the speedup or the report's log-scale charts fail
# instead of the candidate.
MAX_MILLIS = 1e7
Millis = Annotated[float, Field(ge=0, le=MAX_MILLIS, allow_inf_nan=False)]
CallMillis = Annotated[float, Field(ge=1e-6, le=MAX_MILLIS, allow_inf_nan=False)]
# A tensor's sizes and strides as a worker describes them: what torch can index (an int64 product of
# sizes past 2**63 made the parent's as_strided raise TypeError, outside the protocol's errors).
Extent = Annotated[int, Field(ge=0, le=2**40)]
Address = Annotated[int, Field(ge=0, lt=2**64)]  # in a worker's own memory


class TensorRef(BaseModel):
    """Where a worker's tensor can be read: its layout, and either the IPC handle of its CUDA
    allocation or its place in the worker's commit buffer."""

    dtype: str
    shape: list[Extent] = Field(max_length=64)
    stride: list[Extent] = Field(max_length=64)
    storage_offset: Extent
    device: Literal["cpu", "cuda"]
    ipc_handle: str | None = None  # cuda: the allocation's IPC handle, hex
    offset: Extent = 0  # bytes: from the allocation's start (cuda) or the buffer's (cpu) to the storage's
    # cpu: where the tensor's first element is in the worker's own memory (a timed call's output,
    # which the parent reads there itself; storage_offset 0); None: in the commit buffer, at `offset`
    address: Address | None = None

    @model_validator(mode="after")
    def _one_stride_per_size(self) -> TensorRef:
        if len(self.shape) != len(self.stride):
            raise ValueError("a tensor needs one stride per size")
        return self

    def row(self, index: int) -> TensorRef:
        """The `index`th row of a stacked tensor (a batch's, one row per call), as a tensor whose
        storage starts where the row does: reading it reads that row only."""
        element = ALLOWED_DTYPES[self.dtype].itemsize if self.dtype in ALLOWED_DTYPES else 1
        return self.model_copy(update={"shape": self.shape[1:], "stride": self.stride[1:], "storage_offset": 0,
                                       "offset": self.offset + (self.storage_offset + index * self.stride[0]) * element})

    @property
    def span_bytes(self) -> int:
        """Bytes from the storage's start to the tensor's last element, inclusive."""
        element = ALLOWED_DTYPES[self.dtype].itemsize if self.dtype in ALLOWED_DTYPES else 1
        if not self.shape or 0 in self.shape:
            return (self.storage_offset + 1) * element if not self.shape else 0
        last = self.storage_offset + sum((size - 1) * step for size, step in zip(self.shape, self.stride))
        return (last + 1) * element


class Command(BaseModel):
    op: Literal["boot", "job", "trial", "inputs", "warmup", "timed", "commit", "release", "profile", "settle", "floor",
                "math"]
    job: WorkerJob | None = None  # job: what to load
    # boot (before the job, no reply): ready what loading a reference (and a Triton launch) needs while booting
    seed: int = 0  # trial, floor: the inputs are the problem's get_inputs() after this seed
    # timed, warmup's last call (CPU): the inputs, in the worker's feed file, each stacked: a row per call
    fed: list[TensorRef] | None = None
    seeds: list[int] = []  # warmup: one untimed call per seed; inputs: one set of inputs per seed; timed: see `calls`
    # timed: forward calls timed back to back, each on its own inputs (from `seeds` when none are
    # fed); fed inputs are stacked (one row per call). commit: the last timed command's `calls`
    # calls' outputs, described only now (stacked for more than one call), so that the parent's
    # clock sees writing them apart from the calls (judge/timing/bound.py, vouched_median)
    calls: int = Field(1, ge=1)
    # timed (CPU): the reply says where the calls' outputs are in the worker's memory (`outputs`,
    # the first call's, and `addresses`); the parent reads the ones it checks there, the worker
    # stopped, and `release` lets them go. Nothing of the worker's runs between the calls and
    # that read but the reply: no commit a candidate could do its work in.
    locate: bool = False
    sizes: dict[str, int] | None = None  # trial: other values for the problem's input-size constants
    profile: bool = False  # timed: run this call under the profiler (its profile is asked for next: `profile`)
    default_math: bool = False  # math (reference only): PyTorch's default math flags instead of strict fp32
    # settle: no fields; on a GPU, tiny kernels run to completion (see judge/gpu.py), the slowest
    # round trip answered as elapsed_ms (judge/reference.py: whether another context holds the GPU)


# What a worker may say about an exception (it truncates to these; more breaks the protocol).
MAX_TENSORS = 1024  # in one reply's outputs or inputs: each is mapped or copied before anything is compared
# Calls in a batch, at most: each costs the reference a seed's inputs made (before the parent's
# clock starts), and the worker a view of its inputs and its outputs' place (outside the timed
# calls, inside the parent's clock).
MAX_BATCH_CALLS = 1024
MAX_NAME_CHARS, MAX_MESSAGE_CHARS, MAX_TRACEBACK_LINES, MAX_LINE_CHARS = 200, 64_000, 8, 500
MAX_SOURCE_CHARS = 256_000
GeneratedSource = Literal["main.cpp", "cuda.cu"]  # load_inline's, which a compiler error's line refers to


class Failure(BaseModel):
    """An exception inside the worker, as data."""

    phase: Phase
    exc_type: str = Field(max_length=MAX_NAME_CHARS)
    message: str = Field(max_length=MAX_MESSAGE_CHARS)
    traceback: list[Annotated[str, Field(max_length=MAX_LINE_CHARS)]] = Field(max_length=MAX_TRACEBACK_LINES)
    # A failed extension build's generated sources, as the worker read them: what a compiler
    # error's line is traced back to the candidate's file through. The parent reads no file a
    # build log names.
    sources: dict[GeneratedSource, Annotated[str, Field(max_length=MAX_SOURCE_CHARS)]] = {}


class ParamDigest(BaseModel):
    name: str
    shape: list[int]
    dtype: str
    sha256: str


class KernelTime(BaseModel):
    """One device kernel of a profiled call, and the ATen operator that launched it (None: none
    did, the candidate's own extension or Triton launched it)."""

    name: str
    device_ms: Millis
    operator: str | None = None


class Profile(BaseModel):
    """What one forward call ran: the ATen operators (outermost ones with their CPU time), the
    device kernels with their device time, and the call's own duration."""

    ops: list[str]  # every ATen operator called, by name
    top_op_ms: dict[str, Millis] = {}  # operators not called by another operator: their CPU time, children included
    # Those operators' largest tensor argument's elements, summed over their calls (CPU; absent where unknown).
    elements_read: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] = {}
    kernels: list[KernelTime] = []
    elapsed_ms: Millis = 0.0

    def per_call(self, calls: int) -> Profile:
        """The profile of `calls` calls timed back to back, as one call's: its times shared out."""
        if calls == 1:
            return self
        return self.model_copy(update={
            "top_op_ms": {op: ms / calls for op, ms in self.top_op_ms.items()},
            "elements_read": {op: n / calls for op, n in self.elements_read.items()},
            "kernels": [k.model_copy(update={"device_ms": k.device_ms / calls}) for k in self.kernels],
            "elapsed_ms": self.elapsed_ms / calls})


class HardwareFloor(BaseModel):
    """The least time any kernel needs for the reference's work on this GPU (reference only)."""

    floor_ms: float
    flops: float
    bytes_moved: int
    peak_flops_per_ms: float
    peak_bytes_per_ms: float

    def describe(self) -> str:
        return (f"{self.flops / 1e9:.3g} GFLOP at {self.peak_flops_per_ms / 1e9:.3g} TFLOP/s and "
                f"{self.bytes_moved / 1e9:.3g} GB at {self.peak_bytes_per_ms / 1e6:.3g} GB/s need {self.floor_ms:.4g} ms")


OutputForm = Literal["tensor", "sequence"]  # what forward returned: one tensor, or a tuple or list of them


class Reply(BaseModel):
    ok: bool
    failure: Failure | None = None
    rejected: str | None = Field(default=None, max_length=MAX_MESSAGE_CHARS)  # outputs that are not plain tensors
    params: list[ParamDigest] | None = None
    alt_sizes: list[dict[str, int]] | None = None  # reference: other input sizes to check candidates at
    outputs: list[TensorRef] | None = Field(default=None, max_length=MAX_TENSORS)
    # trial: the inputs after forward, to catch mutation; inputs: the inputs of its seed (None: not
    # only contiguous CPU tensors, so they cannot be fed)
    inputs: list[TensorRef] | None = Field(default=None, max_length=MAX_TENSORS)
    form: OutputForm | None = None  # trial: what forward returned
    # timed: the worker's own clock around its forward calls (all of them); warmup: its fastest
    # call; settle: see Command
    elapsed_ms: CallMillis | None = None
    # timed: the host's time into the calls, from each one's start to its return: on a GPU, the
    # host's path its device time leaves out up to the hold's length (worker/timing.py)
    host_ms: CallMillis | None = None
    # timed with `locate`: per call, where each of its outputs' first element is (the layout is the
    # first call's, `outputs`)
    addresses: list[list[Address]] | None = Field(default=None, max_length=MAX_BATCH_CALLS)
    profile: Profile | None = None  # profile: what the last profiled timed command ran
    floor: HardwareFloor | None = None
    threads_alive: int = 0  # Python threads besides the main one after the command


REPLY = TypeAdapter(Reply)
# What a successful reply to each command must carry; anything else is a broken (or forged) message.
REQUIRED_FIELDS = {"job": (), "trial": ("outputs", "inputs", "form"), "inputs": (), "warmup": (),
                   "timed": ("elapsed_ms",), "commit": ("outputs",), "release": (), "profile": ("profile",), "settle": (),
                   "floor": ("floor",), "math": ()}


def fits(command: Command, reply: Reply) -> bool:
    """Whether a reply carries what its command asks for: the committed outputs of a timed
    command of several calls stacked, a row per call (CPU tensors), or described call by call, as
    many for each call (`described_call_by_call`); a located one's places, one per call."""
    if not reply.ok:
        return True
    if not all(getattr(reply, field) is not None for field in REQUIRED_FIELDS[command.op]):
        return False
    if command.op == "timed" and command.locate:
        return reply.outputs is not None and reply.addresses is not None and len(reply.addresses) == command.calls and \
            all(len(places) == len(reply.outputs) for places in reply.addresses) and \
            all(ref.device == "cpu" and ref.address is not None for ref in reply.outputs)
    if reply.addresses is not None or any(ref.address is not None for ref in (reply.outputs or []) + (reply.inputs or [])):
        return False  # a place in the worker's memory only where the parent asked for one
    if command.op != "commit" or command.calls == 1:
        return True
    if described_call_by_call(reply.outputs):
        return len(reply.outputs) % command.calls == 0
    return all(ref.shape[:1] == [command.calls] for ref in reply.outputs)


def described_call_by_call(outputs: list[TensorRef]) -> bool:
    """Whether a commit of several calls describes each call's outputs in turn, as a GPU one
    does (IPC handles of the worker's own allocations, no copy), rather than stacked a row per
    call in the commit buffer (CPU tensors)."""
    return any(ref.device == "cuda" for ref in outputs)


def call_outputs(outputs: list[TensorRef], index: int, calls: int) -> list[TensorRef]:
    """The `index`th call's outputs of a commit of `calls` calls (`fits` checked their count)."""
    if calls == 1:
        return outputs
    if described_call_by_call(outputs):
        each = len(outputs) // calls
        return outputs[index * each:(index + 1) * each]
    return [ref.row(index) for ref in outputs]


def says_why(reply: Reply) -> bool:
    """A failed reply must say what failed (an exception, or why its outputs were refused); a
    bare `{"ok": false}`, which a candidate can write into the channel, is a broken message."""
    return reply.ok or reply.failure is not None or bool(reply.rejected)


def send_model(conn: Connection, message: BaseModel) -> None:
    conn.send_bytes(message.model_dump_json().encode())


class MappedFile:
    """A memory file mapped shared, its pages populated, and the mapping kept from one use to the
    next (a larger one replaces it when the file must grow; the old one goes when nothing views
    it any more). Copying a tensor into it is one memcpy on the calling thread: 28 ms per 256 MB
    on the 2-core VM, against 45 ms (42 to 109) by pwrite. Not torch's copy_, which hands large
    copies to its thread pool: waking a pool thread that had gone to sleep (after a candidate's
    2 ms call, say) added 0.2 to 9 ms to a 64 KB commit there."""

    _viewed: tuple[mmap.mmap, torch.Tensor] | None = None  # the current mapping, and it as bytes

    def __init__(self, fd: int):
        self.fd = fd
        self._map: mmap.mmap | None = None

    def mapping(self, end: int) -> mmap.mmap:
        """A mapping of at least its first `end` bytes (`end` > 0)."""
        if self._map is None or len(self._map) < end:
            if os.fstat(self.fd).st_size < end:
                os.ftruncate(self.fd, end)
            self._map = mmap.mmap(self.fd, end, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        return self._map

    def tensors(self, refs: list[TensorRef]) -> list[torch.Tensor]:
        """Views of the file's tensors at `refs`."""
        end = max((ref.offset + ref.span_bytes for ref in refs), default=0)
        if not end:
            return [tensor_at(torch.empty(0, dtype=torch.uint8), ref) for ref in refs]
        mapped = self.mapping(end)
        if self._viewed is None or self._viewed[0] is not mapped:
            self._viewed = (mapped, torch.frombuffer(mapped, dtype=torch.uint8))
        whole = self._viewed[1]
        return [tensor_at(whole[ref.offset:ref.offset + ref.span_bytes], ref) for ref in refs]

    def close(self) -> None:
        self._map = self._viewed = None  # the mapping goes with the last view of it
        os.close(self.fd)


class CommitBuffer(MappedFile):
    """A memory file the parent made, where CPU tensors are written before the reply that
    describes them (a worker's commit buffer), or before the command that uses them (its feed)."""

    def write(self, tensors: list[torch.Tensor]) -> list[TensorRef]:
        """Each tensor at an aligned offset (so that a mapping of the file can view any dtype)."""
        refs, offset = [], 0
        contiguous = [t.detach().contiguous() for t in tensors]
        total = sum(aligned(t.nbytes) for t in contiguous)
        mapped = self.mapping(total) if total else None
        for tensor in contiguous:
            if tensor.nbytes:
                mapped[offset:offset + tensor.nbytes] = _as_bytes(tensor)
            refs.append(TensorRef(dtype=str(tensor.dtype).removeprefix("torch."), shape=list(tensor.shape),
                                  stride=list(tensor.stride()), storage_offset=0, device="cpu", offset=offset))
            offset += aligned(tensor.nbytes)
        return refs

    def write_stacked(self, rows: list[list[torch.Tensor]]) -> list[TensorRef]:
        """Rows alike (the same shapes and dtypes, position by position), each position's tensors
        one after another: a [rows, *shape] tensor per position, whatever the number of rows."""
        first = rows[0]
        sizes = [aligned(t.nbytes * len(rows)) for t in first]
        mapped = self.mapping(sum(sizes)) if sum(sizes) else None
        refs, offset = [], 0
        for position, (tensor, size) in enumerate(zip(first, sizes)):
            each = tensor.nbytes
            for index, row in enumerate(rows):
                if each:
                    mapped[offset + index * each:offset + (index + 1) * each] = _as_bytes(row[position].detach().contiguous())
            refs.append(TensorRef(dtype=str(tensor.dtype).removeprefix("torch."), shape=[len(rows), *tensor.shape],
                                  stride=contiguous_strides([len(rows), *tensor.shape]), storage_offset=0, device="cpu",
                                  offset=offset))
            offset += size
        return refs


class FeedFile(MappedFile):
    """Worker side (CPU runs): the memory file the parent writes a timed call's inputs into, viewed
    in place (`tensors`). The parent rewrites the same pages for each call, so no timed call
    faults its inputs in."""


def contiguous_strides(shape: list[int]) -> list[int]:
    """Row-major strides, in elements, as torch gives a contiguous tensor of `shape`."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def aligned(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


def tensor_at(raw: torch.Tensor, ref: TensorRef) -> torch.Tensor:
    """`ref`'s tensor over `raw`: the bytes (uint8) from its storage's start, span_bytes of them."""
    dtype = ALLOWED_DTYPES[ref.dtype]
    span = ref.span_bytes
    storage = raw[: span - span % dtype.itemsize].view(dtype) if span else torch.empty(0, dtype=dtype, device=raw.device)
    # as_strided counts from the start of the whole storage, where `raw` may be a slice of it
    return storage.as_strided(ref.shape, ref.stride, storage.storage_offset() + ref.storage_offset)


def _as_bytes(tensor: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's bytes, without a copy and without numpy (torch does not need it)."""
    return memoryview((ctypes.c_ubyte * tensor.nbytes).from_address(tensor.data_ptr()))


def committed_refs(per_call: list[list[torch.Tensor]], buffer: CommitBuffer) -> list[TensorRef]:
    """Worker side: a timed command's outputs, a list per call alike from call to call, as its
    commit describes them (`call_outputs`): one call's as they are; several calls' call by call
    where any is on the GPU, else stacked in the commit buffer."""
    if len(per_call) == 1 or any(t.is_cuda for outputs in per_call for t in outputs):
        return describe([t for outputs in per_call for t in outputs], buffer)
    return buffer.write_stacked(per_call)


def describe(tensors: list[torch.Tensor], buffer: CommitBuffer) -> list[TensorRef]:
    """Worker side: refs the parent can read. CPU tensors are written to the commit buffer now."""
    cpu = [t for t in tensors if not t.is_cuda]
    written = iter(buffer.write(cpu)) if cpu else iter(())
    refs = []
    for tensor in tensors:
        if tensor.is_cuda:
            handle, offset = cuda_ipc.export(tensor)
            refs.append(TensorRef(dtype=str(tensor.dtype).removeprefix("torch."), shape=list(tensor.shape),
                                  stride=list(tensor.stride()), storage_offset=tensor.storage_offset(), device="cuda",
                                  ipc_handle=handle, offset=offset))
        else:
            refs.append(next(written))
    return refs

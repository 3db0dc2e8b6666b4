"""The wire between the parent and a worker: JSON messages and tensors, never pickle.

The parent validates every message with pydantic and never unpickles anything a worker sends,
so a candidate that writes to the channel can at worst send a malformed message (read as a
crash), not run code in the parent. Tensors cross without copies where possible: CUDA tensors
as IPC handles (the worker keeps them alive until told to release), CPU tensors as
`torch.save` bytes read back with `weights_only=True`.
"""

from __future__ import annotations

import base64
import io
from multiprocessing.connection import Connection
from typing import Literal

import torch
from pydantic import BaseModel, TypeAdapter

from ..records import Device, Phase, Precision, TimingStats

ALLOWED_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64)
}


class WorkerJob(BaseModel):
    role: Literal["reference", "candidate", "build"]  # build: import and construct a candidate, then exit
    problem_path: str
    candidate_path: str | None = None  # the extracted code, written by the parent
    device: Device
    precision: Precision
    init_seed: int
    compile_baseline: bool = False  # reference only: time torch.compile(model)
    warmup: int
    trials: int
    shrink: bool = False  # run at reduced input sizes (quick checks of the problems themselves)
    cpus: list[int] | None = None  # the cores to pin to (builds and lanes keep apart on a GPU run)


class Command(BaseModel):
    op: Literal["trial", "warmup", "time", "sample", "profile", "exit"]
    seed: int = 0
    roll: int | None = None  # trial: the inputs as timed call `roll` saw them (see child.rolled)
    sizes: dict[str, int] | None = None  # trial: other values for the problem's input-size constants
    index: int = 0  # sample: which kept timed-call output


class Failure(BaseModel):
    """An exception inside the worker, as data."""

    phase: Phase
    exc_type: str
    message: str
    traceback: list[str]


class ParamDigest(BaseModel):
    name: str
    shape: list[int]
    dtype: str
    sha256: str


class TensorRef(BaseModel):
    dtype: str
    shape: list[int]
    stride: list[int]
    storage_offset: int
    device: Literal["cpu", "cuda"]
    # CUDA only: what UntypedStorage._new_shared_cuda needs, bytes as base64.
    cuda_device: int | None = None
    ipc: list[str | int | bool | None] | None = None


class Profile(BaseModel):
    """What one forward call ran: ATen operators and device kernels, by name."""

    ops: list[str]
    kernels: list[str]


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


class Reply(BaseModel):
    ok: bool
    failure: Failure | None = None
    rejected: str | None = None  # outputs that are not plain tensors
    params: list[ParamDigest] | None = None
    alt_sizes: dict[str, int] | None = None  # reference: other input sizes to check candidates at
    outputs: list[TensorRef] | None = None
    inputs: list[TensorRef] | None = None  # trial: the inputs after forward, to catch mutation
    timing: TimingStats | None = None
    sampled: list[int] | None = None  # time: the timed calls whose outputs are kept for checking
    profile: Profile | None = None
    floor: HardwareFloor | None = None  # reference profile on a GPU
    threads_alive: int = 0  # Python threads besides the main one after the command


REPLY = TypeAdapter(Reply)
# What a successful reply to each command must carry; anything else is a broken (or forged) message.
REQUIRED_FIELDS = {"trial": ("outputs", "inputs"), "warmup": (), "time": ("timing", "sampled"), "sample": ("outputs",),
                   "profile": ("profile",)}


def fits(command: Command, reply: Reply) -> bool:
    return not reply.ok or all(getattr(reply, field) is not None for field in REQUIRED_FIELDS[command.op])


def send_model(conn: Connection, message: BaseModel) -> None:
    conn.send_bytes(message.model_dump_json().encode())


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def _unb64(value: str | int | bool | None) -> bytes | None:
    return None if value is None else base64.b64decode(str(value))


def describe_tensor(tensor: torch.Tensor) -> TensorRef:
    """Worker side: a reference to a tensor the parent can open. CPU data follows separately."""
    ref = TensorRef(
        dtype=str(tensor.dtype).removeprefix("torch."), shape=list(tensor.shape), stride=list(tensor.stride()),
        storage_offset=tensor.storage_offset(), device="cuda" if tensor.is_cuda else "cpu",
    )
    if tensor.is_cuda:
        device, handle, size, offset, ref_handle, ref_offset, event, event_sync = tensor.untyped_storage()._share_cuda_()
        ref.cuda_device = device
        ref.ipc = [_b64(handle), size, offset, _b64(ref_handle), ref_offset, _b64(event), event_sync]
    return ref


def send_tensors(conn: Connection, tensors: list[torch.Tensor]) -> None:
    for tensor in tensors:
        if not tensor.is_cuda:
            buffer = io.BytesIO()
            torch.save(tensor.detach().contiguous(), buffer)
            conn.send_bytes(buffer.getvalue())


def open_tensor(conn: Connection, ref: TensorRef) -> torch.Tensor:
    """Parent side: materialise a tensor a worker described (CPU data is read from `conn`)."""
    dtype = ALLOWED_DTYPES.get(ref.dtype)
    if dtype is None:
        raise ValueError(f"unsupported output dtype {ref.dtype}")
    if ref.device == "cpu":
        tensor = torch.load(io.BytesIO(conn.recv_bytes()), weights_only=True)
        if type(tensor) is not torch.Tensor or tensor.dtype != dtype or list(tensor.shape) != ref.shape:
            raise ValueError("CPU tensor payload does not match its description")
        return tensor
    if ref.ipc is None or ref.cuda_device is None:
        raise ValueError("CUDA tensor without an IPC handle")
    torch.cuda.init()  # opening an IPC handle in a process without a CUDA context crashes it
    if not 0 <= ref.cuda_device < torch.cuda.device_count():
        raise ValueError("CUDA tensor on a GPU the worker was not given")
    handle, size, offset, ref_handle, ref_offset, event, event_sync = ref.ipc
    storage = torch.UntypedStorage._new_shared_cuda(
        ref.cuda_device, _unb64(handle), int(size), int(offset), _unb64(ref_handle), int(ref_offset),
        _unb64(event), bool(event_sync),
    )
    return torch.empty((0,), dtype=dtype, device=f"cuda:{ref.cuda_device}").set_(
        storage, ref.storage_offset, ref.shape, ref.stride
    )

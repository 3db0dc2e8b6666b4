"""CUDA memory between a worker and the parent, through the CUDA runtime's IPC handles called with
ctypes: the worker exports the allocation a tensor lives in (a 64-byte handle and an offset), the
parent maps it, reads it in place and unmaps it. Unlike torch's sharing, nothing is reference
counted through files in /dev/shm, so a worker can describe every output it produces (most are
never opened) without pinning them, and workers keep a private /dev/shm.

IPC handles do not cross PID namespaces: workers that see a GPU share the parent's.
"""

from __future__ import annotations

import ctypes
import functools

import torch

HANDLE_BYTES = 64
IPC_LAZY_ENABLE_PEER_ACCESS = 1


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * HANDLE_BYTES)]


class CudaIpcError(RuntimeError):
    pass


@functools.cache
def _runtime() -> ctypes.CDLL:
    """The CUDA runtime torch itself loaded (the same library instance, so the same context)."""
    torch.cuda.init()
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
    if not paths:
        raise CudaIpcError("torch's CUDA runtime (libcudart) is not loaded in this process")
    return ctypes.CDLL(sorted(paths)[0])


@functools.cache
def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _check(code: int, what: str) -> None:
    if code != 0:
        runtime = _runtime()
        runtime.cudaGetErrorString.restype = ctypes.c_char_p
        raise CudaIpcError(f"{what}: {runtime.cudaGetErrorString(code).decode()}")


def export(tensor: torch.Tensor) -> tuple[str, int]:
    """Worker side: the IPC handle (hex) of the allocation holding the tensor's storage, and the
    storage's byte offset in it."""
    pointer = tensor.untyped_storage().data_ptr()
    with torch.cuda.device(tensor.device):
        base = _allocation_base(pointer)
        handle = _Handle()
        _check(_runtime().cudaIpcGetMemHandle(ctypes.byref(handle), ctypes.c_void_p(base)), "cudaIpcGetMemHandle")
    return bytes(handle.reserved).hex(), pointer - base


def _address_range(pointer: int) -> tuple[int, int]:
    """(base, size) of the allocation holding `pointer`, in the current device's context."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    if _driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)) != 0:
        raise CudaIpcError("cuMemGetAddressRange failed")
    return base.value, size.value


def _allocation_base(pointer: int) -> int:
    return _address_range(pointer)[0]


def _mapped_bytes(pointer: int) -> int:
    """How many bytes of the allocation holding `pointer` lie from it on."""
    base, size = _address_range(pointer)
    return base + size - pointer


class _Bytes:
    """A device byte range as `__cuda_array_interface__`, for torch.as_tensor (no copy)."""

    def __init__(self, pointer: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False), "version": 3}


class Mapping:
    """Parent side: another process's allocation, mapped into this one until close()."""

    def __init__(self, handle_hex: str, device: int):
        raw = bytes.fromhex(handle_hex)
        if len(raw) != HANDLE_BYTES:
            raise CudaIpcError("an IPC handle must be 64 bytes")
        self.device = device
        self.pointer = ctypes.c_void_p()
        with torch.cuda.device(device):
            _check(_runtime().cudaIpcOpenMemHandle(ctypes.byref(self.pointer), _Handle.from_buffer_copy(raw),
                                                   IPC_LAZY_ENABLE_PEER_ACCESS), "cudaIpcOpenMemHandle")
            try:
                self.nbytes = _mapped_bytes(self.pointer.value)
            except CudaIpcError:
                self.close()  # the caller never gets this mapping to close
                raise

    def bytes(self, offset: int, nbytes: int) -> torch.Tensor:
        """The mapped bytes [offset, offset + nbytes), refused past the allocation: a worker naming
        a span beyond it would have the parent read an illegal address, which ends its CUDA context."""
        if offset < 0 or nbytes < 0 or offset + max(nbytes, 1) > self.nbytes:
            raise CudaIpcError(f"a CUDA tensor's {nbytes} bytes at offset {offset} run past its "
                               f"{self.nbytes}-byte allocation")
        return torch.as_tensor(_Bytes(self.pointer.value + offset, max(nbytes, 1)), device=f"cuda:{self.device}")

    def close(self) -> None:
        if self.pointer.value:
            with torch.cuda.device(self.device):
                _runtime().cudaIpcCloseMemHandle(self.pointer)
            self.pointer = ctypes.c_void_p()


def pending_launch_error() -> str | None:
    """The error of a kernel launch nobody checked (too much shared memory, a bad grid), cleared
    as it is read; None when every launch since the last look succeeded. Per thread: call it on
    the thread that ran forward."""
    runtime = _runtime()
    runtime.cudaGetLastError.restype = ctypes.c_int
    code = runtime.cudaGetLastError()
    if code == 0:
        return None
    runtime.cudaGetErrorString.restype = ctypes.c_char_p
    return runtime.cudaGetErrorString(code).decode()


def reset_persisting_l2() -> None:
    """Demote every persisting L2 line to normal: a window a candidate set cannot keep its data
    in L2 across the flush before a timed call."""
    _runtime().cudaCtxResetPersistingL2Cache()

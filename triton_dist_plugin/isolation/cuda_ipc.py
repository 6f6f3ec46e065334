"""CUDA IPC through the driver's own API (``libcuda``, by ctypes): the isolation worker exports a
buffer of its memory, and this process writes a tuning's arguments into it device to device.

The driver API, not torch's tensor sharing: torch's needs a ``multiprocessing`` parent and keeps a
reference-count file per tensor, and either side may be a plain process here. Each call pushes the
device's primary context (torch's) for its own thread, so it works from any thread. The mapping is
of the worker's memory (the allocation that holds the buffer it offered), checked against the size
the driver says it has before anything is written, written only within the buffer, and unmapped
before the worker runs a candidate: this process keeps nothing of the worker's mapped.
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterator

HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE
_LAZY_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
_lib: Any = None


class IpcError(Exception):
    """The driver refused a step; the message says which (the data then takes the socket)."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


def _cuda() -> Any:
    """libcuda, its functions typed (loaded once; ``IpcError`` where there is none: ROCm, no GPU)."""
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise IpcError(f"no CUDA driver library ({exc})") from None
        u64, ptr = ctypes.c_uint64, ctypes.POINTER
        for name, argtypes in {
            "cuDeviceGet": [ptr(ctypes.c_int), ctypes.c_int],
            "cuDevicePrimaryCtxRetain": [ptr(ctypes.c_void_p), ctypes.c_int],
            "cuDevicePrimaryCtxRelease_v2": [ctypes.c_int],
            "cuCtxPushCurrent_v2": [ctypes.c_void_p],
            "cuCtxPopCurrent_v2": [ptr(ctypes.c_void_p)],
            "cuMemGetAddressRange_v2": [ptr(u64), ptr(ctypes.c_size_t), u64],
            "cuIpcGetMemHandle": [ptr(_Handle), u64],
            "cuIpcOpenMemHandle_v2": [ptr(u64), _Handle, ctypes.c_uint],
            "cuIpcCloseMemHandle": [u64],
            "cuMemcpyDtoDAsync_v2": [u64, u64, ctypes.c_size_t, ctypes.c_void_p],
            "cuStreamSynchronize": [ctypes.c_void_p],
        }.items():
            function = getattr(lib, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int
        _lib = lib
    return _lib


def _check(result: int, what: str) -> None:
    if result != 0:
        raise IpcError(f"{what} failed (CUresult {result})")


@contextlib.contextmanager
def _current(ordinal: int) -> Iterator[Any]:
    """The device's primary context current on this thread, as it was after."""
    lib, device, context = _cuda(), ctypes.c_int(), ctypes.c_void_p()
    _check(lib.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet")
    _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    try:
        _check(lib.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")
        try:
            yield lib
        finally:
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(device)


def _range(lib: Any, pointer: int) -> tuple[int, int]:
    """``(base, size)`` of the allocation that holds ``pointer``."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), pointer), "cuMemGetAddressRange")
    return base.value, size.value


def export(ordinal: int, pointer: int) -> tuple[bytes, int]:
    """``(handle, offset)``: what another process opens to reach ``pointer`` (device memory of
    this process), and where it lies in the allocation the handle maps."""
    with _current(ordinal) as lib:
        base, _ = _range(lib, pointer)
        handle = _Handle()
        _check(lib.cuIpcGetMemHandle(ctypes.byref(handle), base), "cuIpcGetMemHandle")
    return ctypes.string_at(ctypes.addressof(handle), HANDLE_BYTES), pointer - base  # (``.reserved`` stops at a 0)


def write(ordinal: int, handle: bytes, offset: int, size: int, pieces: list[tuple[int, int, int]],
          stream: int) -> None:
    """Copy each ``(source pointer, destination offset, bytes)`` of ``pieces`` (this process's
    device memory) into the ``size`` bytes at ``offset`` of another process's allocation
    (``handle``), on ``stream`` (a ``CUstream``: in that stream's order), wait for it, and unmap
    the allocation. Refuses a mapping smaller than said."""
    if not (isinstance(handle, bytes) and len(handle) == HANDLE_BYTES and type(offset) is int and offset >= 0):
        raise IpcError("the worker's offer is malformed")
    if any(at < 0 or n < 0 or at + n > size for _, at, n in pieces):
        raise IpcError("a piece lies outside the buffer")
    with _current(ordinal) as lib:
        mapped = ctypes.c_uint64()
        _check(lib.cuIpcOpenMemHandle_v2(ctypes.byref(mapped), _Handle.from_buffer_copy(handle), _LAZY_PEER_ACCESS),
               "cuIpcOpenMemHandle")
        try:
            base, length = _range(lib, mapped.value)
            if mapped.value + offset + size > base + length:  # else the copy would fault in this process's context
                raise IpcError(f"the worker's buffer is {length - offset} bytes, not {size}")
            for source, at, n in pieces:
                _check(lib.cuMemcpyDtoDAsync_v2(mapped.value + offset + at, source, n, stream), "cuMemcpyDtoDAsync")
            _check(lib.cuStreamSynchronize(stream), "cuStreamSynchronize")  # before the unmap, and the worker's use
        finally:
            lib.cuIpcCloseMemHandle(mapped.value)

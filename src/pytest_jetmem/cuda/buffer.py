"""Buffers: typed, shaped memory in one memory mode, with the host views and copies each mode allows."""

from __future__ import annotations

import ctypes
import math
from typing import Any, Protocol

import numpy as np

from pytest_jetmem.cuda.modes import Allocation, MemoryMode
from pytest_jetmem.errors import HostAccessError


class BufferOwner(Protocol):
    """What a buffer needs from whoever allocated it (a test's workspace)."""

    @property
    def drv(self) -> Any: ...

    @property
    def stream(self) -> Any: ...

    @property
    def stream_handle(self) -> int: ...

    def synchronize(self) -> None:
        """Wait for the work queued on the owner's stream."""

    def check_host_access(self, buf: Buffer) -> None:
        """Called before each host access through the buffer's API (may raise)."""

    def memset(self, buf: Buffer, value: int) -> None:
        """Queue a byte fill of the whole buffer on the owner's stream."""

    def free(self, buf: Buffer) -> None:
        """Free the buffer now (a no-op when freed already)."""


def host_view(host_ptr: int, nbytes: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A numpy array over ``nbytes`` of host-visible memory at ``host_ptr`` (no copy)."""
    if nbytes == 0:
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * nbytes).from_address(host_ptr)
    return np.frombuffer(memoryview(raw), dtype=dtype, count=int(np.prod(shape))).reshape(shape)


class Buffer:
    """Memory a test allocated through ``jetmem``; freed at the test's teardown."""

    def __init__(
        self, owner: BufferOwner, mode: MemoryMode, alloc: Allocation, shape: tuple[int, ...], dtype: np.dtype
    ) -> None:
        self._owner = owner
        self._mode = mode
        self._alloc: Allocation | None = alloc
        self.shape = shape
        self.dtype = dtype
        self.label = ""  # a name for messages; set by the test or left empty

    # -- description -------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self._mode.name

    @property
    def owner(self) -> BufferOwner:
        """The workspace that allocated the buffer (and frees it at teardown)."""
        return self._owner

    @property
    def memory_mode(self) -> MemoryMode:
        return self._mode

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def freed(self) -> bool:
        return self._alloc is None

    @property
    def allocation(self) -> Allocation:
        if self._alloc is None:
            raise HostAccessError(f"{self!r} was freed")
        return self._alloc

    @property
    def ptr(self) -> int:
        """The device address (what a kernel receives); a freed buffer raises HostAccessError."""
        alloc = self._alloc  # not through .allocation: every launch reads this
        if alloc is None:
            raise HostAccessError(f"{self!r} was freed")
        return alloc.ptr

    def __repr__(self) -> str:
        state = "freed" if self.freed else f"ptr=0x{self._alloc.ptr:x}"  # type: ignore[union-attr]
        name = f" {self.label!r}" if self.label else ""
        return f"<Buffer{name} {self.mode} {self.dtype} {self.shape} {state}>"

    # -- host access -------------------------------------------------------------------------------
    @property
    def host(self) -> np.ndarray:
        """A numpy view of the same memory (managed, zero_copy). Synchronise before reading GPU results."""
        alloc = self.allocation
        if alloc.host_ptr is None:
            raise HostAccessError(
                f"{self!r}: memory mode {self.mode!r} has no host view; use .to_numpy() and .copy_from()"
            )
        self._owner.check_host_access(self)
        return host_view(alloc.host_ptr, self.nbytes, self.shape, self.dtype)

    def to_numpy(self) -> np.ndarray:
        """A host copy of the contents, after the work queued on jetmem's stream has finished."""
        alloc = self.allocation
        out = np.empty(self.shape, self.dtype)
        self._owner.synchronize()
        if alloc.host_ptr is not None:
            out[...] = self.host
        elif self.nbytes:
            self._owner.drv.memcpy_dtoh(out.ctypes.data, alloc.ptr, self.nbytes)
        return out

    def copy_from(self, array: Any) -> Buffer:
        """Fill the buffer from host data of the same shape (cast to the buffer's dtype if safe)."""
        src = np.asarray(array)
        if src.shape != self.shape and src.size != self.size:
            raise ValueError(f"{self!r}.copy_from: expected shape {self.shape}, got {src.shape}")
        if src.dtype != self.dtype:
            if not np.can_cast(src.dtype, self.dtype, casting="same_kind"):
                raise TypeError(f"{self!r}.copy_from: cannot cast {src.dtype} to {self.dtype}")
            src = src.astype(self.dtype)
        src = np.ascontiguousarray(src).reshape(self.shape)
        alloc = self.allocation
        self._owner.synchronize()  # never write host-visible memory while the GPU may use it
        if alloc.host_ptr is not None:
            self.host[...] = src
        elif self.nbytes:
            self._owner.drv.memcpy_htod(alloc.ptr, src.ctypes.data, self.nbytes)
        return self

    def fill_bytes(self, value: int) -> Buffer:
        """Set every byte to ``value`` on jetmem's stream (e.g. 0xFF to poison an output)."""
        self._owner.memset(self, value & 0xFF)
        return self

    # -- interop -----------------------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3: CuPy, Numba and PyTorch use the memory in place."""
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": self._owner.stream_handle or None,
        }

    # -- lifetime ----------------------------------------------------------------------------------
    def free(self) -> None:
        """Free now (teardown does it otherwise). Freeing twice is a no-op."""
        self._owner.free(self)

    def release(self) -> Allocation | None:
        """For the owner: forget the allocation and hand it back (None if gone already); the owner frees it."""
        alloc, self._alloc = self._alloc, None
        return alloc

"""Buffers: typed, shaped memory in one memory mode, with the host views and copies each mode allows."""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from pytest_jetmem.cuda.driver import DriverBackend
from pytest_jetmem.cuda.modes import Allocation, MemoryMode
from pytest_jetmem.errors import HostAccessError


class BufferOwner(Protocol):
    """What a buffer needs from whoever allocated it (a test's workspace)."""

    @property
    def drv(self) -> DriverBackend: ...

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
        """A numpy view of the same memory, where the mode has one (``memory_mode.has_host_view``: managed,
        zero_copy). Synchronise before reading GPU results."""
        alloc = self.allocation
        if not self._mode.has_host_view:
            raise HostAccessError(
                f"{self!r}: memory mode {self.mode!r} has no host view; use .to_numpy() and .copy_from()"
            )
        self._owner.check_host_access(self)
        return self._mode.host_view(alloc, self.shape, self.dtype)

    def read_host(self, out: np.ndarray) -> None:
        """Copy the contents into ``out`` (C-contiguous, the buffer's shape and dtype) the way the mode reads
        host data, with no synchronisation: the caller has waited for the GPU (timing loops do)."""
        alloc = self.allocation
        if self._mode.has_host_view:
            self._owner.check_host_access(self)
        self._mode.read_host(self._owner.drv, alloc, out)

    def write_host(self, src: np.ndarray) -> None:
        """Copy ``src`` (C-contiguous, the buffer's shape and dtype) into the buffer the way the mode writes host
        data, with no synchronisation: the caller has waited for the GPU (timing loops do)."""
        alloc = self.allocation
        if self._mode.has_host_view:
            self._owner.check_host_access(self)
        self._mode.write_host(self._owner.drv, alloc, src)

    def to_numpy(self) -> np.ndarray:
        """A host copy of the contents, after the work queued on jetmem's stream has finished."""
        _ = self.allocation  # a freed buffer raises before anything waits
        out = np.empty(self.shape, self.dtype)
        self._owner.synchronize()
        self.read_host(out)
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
        _ = self.allocation  # a freed buffer raises before anything waits
        self._owner.synchronize()  # never write host-visible memory while the GPU may use it
        self.write_host(src)
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

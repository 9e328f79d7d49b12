"""Buffers: typed, shaped memory in one memory mode, with the host views and copies each mode allows."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import JetmemError
from .modes import Allocation, MemoryMode

if TYPE_CHECKING:
    from .handle import Jetmem


class HostAccessError(JetmemError):
    """The buffer's memory mode has no host view, or the buffer was freed."""


def host_view(host_ptr: int, nbytes: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A numpy array over ``nbytes`` of host-visible memory at ``host_ptr`` (no copy)."""
    if nbytes == 0:
        return np.empty(shape, dtype)
    raw = (ctypes.c_char * nbytes).from_address(host_ptr)
    return np.frombuffer(memoryview(raw), dtype=dtype, count=int(np.prod(shape))).reshape(shape)


class Buffer:
    """Memory a test allocated through ``jetmem``; freed at the test's teardown."""

    def __init__(
        self, owner: Jetmem, mode: MemoryMode, alloc: Allocation, shape: tuple[int, ...], dtype: np.dtype
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
    def memory_mode(self) -> MemoryMode:
        return self._mode

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

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
        """The device address (what a kernel receives)."""
        return self.allocation.ptr

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
        self._owner._check_host_access(self)
        return host_view(alloc.host_ptr, self.nbytes, self.shape, self.dtype)

    def to_numpy(self) -> np.ndarray:
        """A host copy of the contents, after the work queued on jetmem's stream has finished."""
        alloc = self.allocation
        out = np.empty(self.shape, self.dtype)
        self._owner.synchronize()
        if alloc.host_ptr is not None:
            out[...] = self.host
        elif self.nbytes:
            self._owner._drv.memcpy_dtoh(out.ctypes.data, alloc.ptr, self.nbytes)
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
            self._owner._drv.memcpy_htod(alloc.ptr, src.ctypes.data, self.nbytes)
        return self

    def fill_bytes(self, value: int) -> Buffer:
        """Set every byte to ``value`` on jetmem's stream (e.g. 0xFF to poison an output)."""
        if self.nbytes:
            self._owner._drv.memset_d8(self.ptr, value & 0xFF, self.nbytes, self._owner.stream)
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
        self._owner._free(self)

    def _release(self) -> Allocation | None:
        alloc, self._alloc = self._alloc, None
        return alloc

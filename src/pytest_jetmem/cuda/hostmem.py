"""Pageable host memory of the process (an anonymous ``mmap``, not CUDA's): what the ``registered`` and ``system``
modes allocate, as a camera, NIC or decoder buffer is. Nothing here imports ``cuda``."""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
from typing import Any


def page_span(nbytes: int) -> int:
    """``nbytes`` rounded up to whole pages (at least one page)."""
    page = mmap.PAGESIZE
    return max(page, (nbytes + page - 1) // page * page)


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def process_mmap(nbytes: int) -> int:
    """An anonymous private ``mmap`` of :func:`page_span` bytes (page-aligned, zero-filled, not CUDA's); its address.

    MemoryError naming the size and the OS error where ``mmap`` fails.
    """
    if nbytes <= 0:
        raise ValueError(f"pageable host memory: expected a size > 0 bytes, got {nbytes}")
    span = page_span(nbytes)
    addr = _libc().mmap(None, span, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        err = ctypes.get_errno()
        raise MemoryError(f"mmap of {span} bytes of pageable host memory failed: {os.strerror(err)} (errno {err})")
    return int(addr)


def process_munmap(host_ptr: int, nbytes: int) -> None:
    """``munmap`` what :func:`process_mmap` returned for ``nbytes``; OSError naming the address where it fails."""
    if _libc().munmap(host_ptr, page_span(nbytes)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"munmap of 0x{host_ptr:x} (+{page_span(nbytes)} bytes) failed: {os.strerror(err)}")

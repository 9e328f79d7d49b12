"""pytest-jetmem: memory-mode regression testing of CUDA code (device, managed, zero-copy memory).

Inside pytest, use the ``jetmem`` fixture with ``@pytest.mark.memmode``. Outside pytest (scripts,
notebooks, child processes), :func:`open_handle` gives the same handle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

__version__ = "0.1.0"


@contextlib.contextmanager
def open_handle(mode: str = "device", cache_dir: str | Path | None = None) -> Iterator[object]:
    """Open the CUDA device and yield a ``Jetmem`` handle for ``mode``; everything is freed on exit.

    Raises :class:`pytest_jetmem.errors.CudaUnavailable` where there is no driver, device or NVRTC.
    """
    from .compiler import KernelCache
    from .device import open_device
    from .errors import CudaUnavailable
    from .handle import Jetmem, Runtime
    from .modes import get_mode

    avail = open_device()
    if not avail.ok or avail.device is None:
        raise CudaUnavailable(avail.reason)
    runtime = Runtime(avail.device, KernelCache(cache_dir))
    try:
        reason = get_mode(mode).unsupported_reason(avail.device.info)
        if reason:
            raise CudaUnavailable(reason)
        handle = Jetmem(runtime, mode, nodeid=f"open_handle({mode!r})")
        try:
            yield handle
        finally:
            handle.close()
    finally:
        runtime.close()

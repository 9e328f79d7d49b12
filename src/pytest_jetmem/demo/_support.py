"""Helpers the demo tests share: loading a kernel before timing, and checking outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

POISON = 0xFF  # every float byte 0xFF is a NaN: an output element the kernel skipped cannot pass


def preload(jetmem: Any, launch: Callable[..., None], *specs: Any) -> None:
    """Compile and load a kernel by one launch on small ``device`` buffers, then free them.

    ``specs`` are shapes (float32 buffers) or ``(shape, dtype)`` pairs. NVRTC compilation and the module
    load then happen before any timing, and the test's own buffers stay untouched by the GPU until their
    first timed call: the "first call" the tables report is the GPU's first touch of the data.
    """
    bufs = []
    for spec in specs:
        shape, dtype = (spec[0], spec[1]) if len(spec) == 2 and not isinstance(spec[1], int) else (spec, np.float32)
        bufs.append(jetmem.zeros(shape, dtype, mode="device"))
    launch(jetmem, *bufs)
    jetmem.synchronize()
    for buf in bufs:
        buf.free()


def check_close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str) -> None:
    """``np.testing.assert_allclose`` with a message naming what was checked."""
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)

"""Helpers the demo tests share: loading a kernel before timing, and a sample count that fits a budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

POISON = 0xFF  # every float byte 0xFF is a NaN: an output element the kernel skipped cannot pass
BUDGET_MS = 300.0  # GPU time per mode and scenario: enough samples for a median, a few seconds in all
MIN_REPEATS, MAX_REPEATS = 5, 30
WARMUP = 2


def repeats_for(first_ms: float, budget_ms: float = BUDGET_MS) -> int:
    """How many timed runs fit ``budget_ms`` when one takes about ``first_ms`` (5 to 30)."""
    if not np.isfinite(first_ms) or first_ms <= 0:
        return MAX_REPEATS
    return int(min(MAX_REPEATS, max(MIN_REPEATS, budget_ms // first_ms)))


def preload(jetmem: Any, launch: Callable[..., None], *shapes: tuple[int, ...]) -> None:
    """Compile and load a bundled kernel by one launch on small ``device`` buffers of ``shapes``.

    NVRTC compilation and the module load then happen before any timing, and the test's own
    buffers stay untouched by the GPU until their first timed call (what "first call" reports).
    """
    bufs = [jetmem.zeros(shape, np.float32, mode="device") for shape in shapes]
    launch(jetmem, *bufs)
    jetmem.synchronize()
    for buf in bufs:
        buf.free()

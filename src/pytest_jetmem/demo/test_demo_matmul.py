"""Seed 000: a shared-memory tiled matrix product (32x32 tiles, n = 2048), in every memory mode.

The forum thread behind it: on a Jetson, both zero-copy and managed memory ran an optimised matrix product
much slower than cudaMalloc'd memory, against the intuition that CPU and GPU share the same DRAM. Each tile
is read from global memory n/32 times, so uncached zero-copy memory pays for every re-read. Each mode is
checked against the numpy reference, then the kernel is timed with ``jetmem.measure``.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from pytest_jetmem import kernels
from pytest_jetmem.demo._support import POISON, check_close, preload
from pytest_jetmem.demo.tables import Scenarios
from pytest_jetmem.handle import Jetmem
from pytest_jetmem.kernels import reference as ref

N = 2048
TITLE = f"Tiled matrix product {N}x{N} @ {N}x{N} float32, 32x32 shared-memory tiles (seed 000)"


@cache
def case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B and the reference A @ B (computed once, in float64)."""
    rng = np.random.default_rng(2000)
    a = rng.standard_normal((N, N)).astype(np.float32)
    b = rng.standard_normal((N, N)).astype(np.float32)
    return a, b, ref.matmul(a, b)


@pytest.mark.memmode
def test_matmul(jetmem: Jetmem, memmode: str, demo_scenarios: Scenarios) -> None:
    demo_scenarios.describe("matmul", TITLE)
    a_host, b_host, want = case()
    preload(jetmem, kernels.matmul, (32, 32), (32, 32), (32, 32))

    a, b = jetmem.array(a_host), jetmem.array(b_host)
    c = jetmem.empty((N, N)).fill_bytes(POISON)
    assert (a.mode, b.mode, c.mode) == (memmode, memmode, memmode)

    jetmem.measure(lambda: kernels.matmul(jetmem, a, b, c), label=f"matmul/{N}", scope="kernel")
    check_close(c.to_numpy(), want, rtol=1e-4, atol=1e-3 * np.sqrt(N), what=f"{memmode} matmul {N}")

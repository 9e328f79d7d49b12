"""Seed 000: a shared-memory tiled matrix product (32x32 tiles, n = 1024), in every memory mode.

The forum thread behind it: on a Jetson, both zero-copy and managed memory ran an optimised matrix
product much slower than cudaMalloc'd memory, against the intuition that CPU and GPU share the
same DRAM. Each mode is checked against the numpy reference, then timed.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from pytest_jetmem import kernels
from pytest_jetmem.kernels import reference as ref

from ._support import POISON, WARMUP, preload, repeats_for

N = 1024


@cache
def case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B and the reference A @ B (computed once, in float64)."""
    rng = np.random.default_rng(2000)
    a = rng.standard_normal((N, N)).astype(np.float32)
    b = rng.standard_normal((N, N)).astype(np.float32)
    return a, b, ref.matmul(a, b)


@pytest.mark.memmode
def test_matmul_1024(jetmem, memmode, demo_timings):
    a_host, b_host, want = case()
    preload(jetmem, kernels.matmul, (32, 32), (32, 32), (32, 32))

    a, b = jetmem.array(a_host), jetmem.array(b_host)
    c = jetmem.empty((N, N)).fill_bytes(POISON)
    assert (a.mode, b.mode, c.mode) == (memmode, memmode, memmode)

    def run() -> None:
        kernels.matmul(jetmem, a, b, c)

    first = float(jetmem.time_gpu(run, repeats=1, warmup=0)[0])
    np.testing.assert_allclose(c.to_numpy(), want, rtol=1e-4, atol=1e-3 * np.sqrt(N))

    samples = jetmem.time_gpu(run, repeats=repeats_for(first), warmup=WARMUP)
    assert np.all(np.isfinite(samples)) and np.all(samples > 0)
    demo_timings.record(
        f"matmul {N}x{N} @ {N}x{N} float32, 32x32 shared-memory tiles (seed 000)",
        memmode,
        samples,
        first_ms=first,
        flops=2.0 * N**3,
        device=jetmem.device.name,
    )

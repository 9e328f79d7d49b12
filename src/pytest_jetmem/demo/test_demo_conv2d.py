"""Seed 001: a 640x480 float32 2D convolution with a replicate border, in every memory mode.

The forum thread behind it: on a Jetson TX1, a 45x45 convolution on zero-copy (mapped pinned) memory
took 3969 ms where the same convolution on device memory took about 22 ms. The kernel re-reads every
input pixel kh*kw times, and zero-copy memory is not cached by the integrated GPU, so every re-read
goes to DRAM. Each mode is checked against the numpy reference, then timed; the tables at the end
show what each mode costs on this machine.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from pytest_jetmem import kernels
from pytest_jetmem.kernels import reference as ref

from ._support import POISON, WARMUP, preload, repeats_for

HEIGHT, WIDTH = 480, 640
KERNEL_SIZES = (3, 15, 45)


@cache
def case(ksize: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The image, the kernel and the reference result (the same in every mode, computed once)."""
    rng = np.random.default_rng(1000 + ksize)
    image = rng.random((HEIGHT, WIDTH), dtype=np.float32)
    kernel = (rng.standard_normal((ksize, ksize)) / ksize).astype(np.float32)
    return image, kernel, ref.conv2d_replicate(image, kernel)


@pytest.mark.memmode
@pytest.mark.parametrize("ksize", KERNEL_SIZES, ids=lambda k: f"{k}x{k}")
def test_conv2d_640x480(jetmem, memmode, ksize, demo_timings):
    img, k, want = case(ksize)
    preload(jetmem, kernels.conv2d, (16, 16), (3, 3), (16, 16))

    image, kern = jetmem.array(img), jetmem.array(k)
    out = jetmem.empty_like(image).fill_bytes(POISON)
    assert (image.mode, kern.mode, out.mode) == (memmode, memmode, memmode)

    def run() -> None:
        kernels.conv2d(jetmem, image, kern, out)

    first = float(jetmem.time_gpu(run, repeats=1, warmup=0)[0])  # the GPU's first touch of the data
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-4 * float(np.abs(k).sum()))

    samples = jetmem.time_gpu(run, repeats=repeats_for(first), warmup=WARMUP)
    assert np.all(np.isfinite(samples)) and np.all(samples > 0)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-4 * float(np.abs(k).sum()))
    demo_timings.record(
        f"conv2d {WIDTH}x{HEIGHT} float32, {ksize}x{ksize} kernel, replicate border (seed 001)",
        memmode,
        samples,
        first_ms=first,
        device=jetmem.device.name,
    )

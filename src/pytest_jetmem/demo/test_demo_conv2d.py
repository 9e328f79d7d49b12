"""Seed 001: a 640x480 float32 2D convolution with a replicate border, kernel sizes 3x3 to 45x45, every mode.

The forum thread behind it: on a Jetson TX1, a 45x45 convolution on zero-copy (mapped pinned) memory took
3969 ms where the same convolution on device memory took about 22 ms, "neglecting the transfer times". The
kernel re-reads every input pixel kh*kw times, and the integrated GPU does not cache zero-copy memory, so
every re-read goes to DRAM. Each mode is checked against the numpy reference and timed twice, as a user of
the plugin would: the kernel alone (``scope="kernel"``, CUDA events) and end to end (``scope="end_to_end"``:
the host writes the image, the kernel runs, the host reads the result; the copies ``device`` needs count).
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

HEIGHT, WIDTH = 480, 640
KERNEL_SIZES = (3, 5, 7, 9, 15, 25, 35, 45)  # the seed's square sizes
TITLE = f"2D convolution {WIDTH}x{HEIGHT} float32, replicate border, by kernel size (seed 001)"


@cache
def case(ksize: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The image, the kernel and the reference result (the same in every mode, computed once)."""
    rng = np.random.default_rng(1000 + ksize)
    image = rng.random((HEIGHT, WIDTH), dtype=np.float32)
    kernel = (rng.standard_normal((ksize, ksize)) / ksize).astype(np.float32)
    return image, kernel, ref.conv2d_replicate(image, kernel)


@pytest.mark.memmode
@pytest.mark.parametrize("ksize", KERNEL_SIZES, ids=lambda k: f"{k}x{k}")
def test_conv2d_640x480(jetmem: Jetmem, memmode: str, ksize: int, demo_scenarios: Scenarios) -> None:
    demo_scenarios.describe("conv2d", TITLE)
    img, k, want = case(ksize)
    tol = {"rtol": 1e-4, "atol": 1e-4 * float(np.abs(k).sum())}
    preload(jetmem, kernels.conv2d, (16, 16), (3, 3), (16, 16))

    image, kern = jetmem.array(img), jetmem.array(k)
    out = jetmem.empty_like(image).fill_bytes(POISON)
    assert (image.mode, kern.mode, out.mode) == (memmode, memmode, memmode)

    def run() -> None:
        kernels.conv2d(jetmem, image, kern, out)

    label = f"conv2d/{ksize}x{ksize}"
    jetmem.measure(run, label=label, scope="kernel")  # its first call is the GPU's first touch of the data
    check_close(out.to_numpy(), want, what=f"{memmode} {label}, kernel scope", **tol)

    out.fill_bytes(POISON)
    jetmem.measure(run, label=label, scope="end_to_end", inputs=[(image, img)], outputs=[out])
    check_close(out.to_numpy(), want, what=f"{memmode} {label}, end to end", **tol)

"""Seed 003: where zero-copy wins or ties. A camera frame produced by the CPU and read ONCE by the GPU.

Fastvideo's note on Jetson zero-copy: mapped pinned memory pays off when "the data is loaded to GPU exactly
once", as in a camera pipeline, and does not when it is read many times (the convolution, the matrix
product). Here the CPU writes a 1920x1080 RGBA8 frame, a kernel reads each pixel once to make its 8-bit
luma, and the CPU reads the result: ``scope="end_to_end"`` counts the copies ``device`` memory needs and
zero-copy memory does not. The kernel alone is timed too, to show where zero-copy still loses.
The kernel is the user's own, compiled with ``jetmem.compile`` (NVRTC).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.demo._support import POISON, check_close, preload
from pytest_jetmem.demo.tables import Scenarios
from pytest_jetmem.handle import Jetmem

HEIGHT, WIDTH = 1080, 1920
BLOCK = 256
TITLE = f"Camera frame {WIDTH}x{HEIGHT} RGBA8 written by the CPU, read once by a grayscale kernel (seed 003)"

SRC = r"""
// One RGBA8 pixel in, one 8-bit luma value out (BT.601 weights in 8-bit fixed point): every byte read once.
extern "C" __global__ void rgba_to_gray(const uchar4* __restrict__ rgba, unsigned char* __restrict__ gray, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const uchar4 p = rgba[i];
        gray[i] = (unsigned char)((77u * p.x + 150u * p.y + 29u * p.z + 128u) >> 8);
    }
}
"""


def gray_reference(rgba: np.ndarray) -> np.ndarray:
    """What ``rgba_to_gray`` computes, in numpy (integer arithmetic: exact)."""
    p = rgba.astype(np.uint32)
    return ((77 * p[..., 0] + 150 * p[..., 1] + 29 * p[..., 2] + 128) >> 8).astype(np.uint8)


@cache
def case() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4000)
    rgba = rng.integers(0, 256, (HEIGHT, WIDTH, 4), dtype=np.uint8)
    return rgba, gray_reference(rgba)


@pytest.mark.memmode
def test_camera_frame_to_gray(jetmem: Jetmem, memmode: str, demo_scenarios: Scenarios) -> None:
    demo_scenarios.describe("camera", TITLE)
    rgba_host, want = case()
    kernel = jetmem.compile(SRC, "rgba_to_gray")

    def launch(jm: Jetmem, rgba: Buffer, gray: Buffer) -> None:
        n = gray.size
        kernel.launch(grid=((n + BLOCK - 1) // BLOCK,), block=(BLOCK,), args=(rgba, gray, n))

    preload(jetmem, launch, ((16, 16, 4), np.uint8), ((16, 16), np.uint8))

    frame = jetmem.empty((HEIGHT, WIDTH, 4), np.uint8)  # the CPU writes it: measure's inputs
    gray = jetmem.empty((HEIGHT, WIDTH), np.uint8).fill_bytes(POISON)  # 255: rare in a random frame's luma
    assert (frame.mode, gray.mode) == (memmode, memmode)

    def run() -> None:
        launch(jetmem, frame, gray)

    label = f"camera/{WIDTH}x{HEIGHT}"
    jetmem.measure(run, label=label, scope="end_to_end", inputs=[(frame, rgba_host)], outputs=[gray])
    check_close(gray.to_numpy(), want, rtol=0, atol=0, what=f"{memmode} grayscale, end to end")
    jetmem.measure(run, label=label, scope="kernel")
    check_close(gray.to_numpy(), want, rtol=0, atol=0, what=f"{memmode} grayscale, kernel scope")

"""The plugin's own benchmark subject: the seed 001 convolution (640x480, 45x45, replicate border) per mode.

``JETMEM_EXTRA_PCT`` adds that much work to the kernel (extra taps with a zero weight that the compiler
cannot drop), to check that the regression gate catches a real slowdown of a known size.
"""

import os

import numpy as np
import pytest

SRC = r"""
extern "C" __global__ void conv2d_work(const float* __restrict__ in, float* __restrict__ out,
                                       const float* __restrict__ k, int width, int height, int kw, int kh,
                                       int extra, float zero)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const int rx = kw / 2, ry = kh / 2;
    float acc = 0.0f;
    for (int t = 0; t < kh * kw + extra; ++t) {
        const int j = (t / kw) % kh, i = t % kw;
        const int yy = min(max(y + ry - j, 0), height - 1);
        const int xx = min(max(x + rx - i, 0), width - 1);
        const float w = t < kh * kw ? k[j * kw + i] : zero;
        acc = fmaf(w, in[(size_t)yy * width + xx], acc);
    }
    out[(size_t)y * width + x] = acc;
}
"""
KSIZE = 45


@pytest.mark.memmode
@pytest.mark.memmode_runtime(baseline=True)
def test_conv45(jetmem):
    extra = round(float(os.environ.get("JETMEM_EXTRA_PCT", "0")) / 100 * KSIZE * KSIZE)
    rng = np.random.default_rng(0)
    img = jetmem.array(rng.random((480, 640), dtype=np.float32))
    k = jetmem.array(rng.random((KSIZE, KSIZE), dtype=np.float32))
    out = jetmem.empty_like(img)
    kern = jetmem.compile(SRC, "conv2d_work")
    grid = ((640 + 15) // 16, (480 + 15) // 16)
    jetmem.measure(
        lambda: kern.launch(grid, (16, 16), (img, out, k, 640, 480, KSIZE, KSIZE, extra, 0.0)), label="conv45"
    )

"""numpy references for the bundled kernels (the ground truth GPU results are checked against)."""

from __future__ import annotations

import numpy as np

#: Kernels of more taps than this are convolved by FFT (float64, error far below float32's), fewer by direct sums.
DIRECT_TAPS = 121


def conv2d_replicate(image: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """2D convolution with a replicate border: ``scipy.ndimage.convolve(image, kernel, mode="nearest")``.

    The sums are taken in float64 and rounded to float32: directly for kernels of up to :data:`DIRECT_TAPS` taps
    (11x11), by FFT for larger ones (a 45x45 kernel over 640x480 in milliseconds rather than a third of a second;
    FFT's float64 error, about 1e-13 of the result, is lost in the rounding to float32).
    """
    image = np.asarray(image, dtype=np.float32)
    kernel = np.asarray(kernel, dtype=np.float32)
    kh, kw = kernel.shape
    if kh % 2 == 0 or kw % 2 == 0:
        raise ValueError(f"kernel: expected odd sizes, got {kernel.shape}")
    padded = np.pad(image.astype(np.float64), ((kh // 2, kh // 2), (kw // 2, kw // 2)), mode="edge")
    sums = _direct(padded, kernel, image.shape) if kh * kw <= DIRECT_TAPS else _by_fft(padded, kernel, image.shape)
    return sums.astype(np.float32)


def _direct(padded: np.ndarray, kernel: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The convolution's float64 sums, tap by tap (``padded``: the image with its replicate border)."""
    flipped = kernel[::-1, ::-1].astype(np.float64)
    h, w = shape
    out = np.zeros((h, w), dtype=np.float64)
    for j in range(kernel.shape[0]):
        for i in range(kernel.shape[1]):
            out += flipped[j, i] * padded[j : j + h, i : i + w]
    return out


def _by_fft(padded: np.ndarray, kernel: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The same sums by FFT: the full linear convolution of ``padded`` and ``kernel``, cut to the image."""
    kh, kw = kernel.shape
    size = (padded.shape[0] + kh - 1, padded.shape[1] + kw - 1)
    full = np.fft.irfft2(np.fft.rfft2(padded, size) * np.fft.rfft2(kernel.astype(np.float64), size), size)
    h, w = shape
    return np.asarray(full[kh - 1 : kh - 1 + h, kw - 1 : kw - 1 + w])


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C = A @ B in float64, returned as float32."""
    product: np.ndarray = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    return product.astype(np.float32)


def stream_read(x: np.ndarray) -> np.float32:
    """The sum the read kernel leaves in ``sink[0]``."""
    total: np.float32 = np.float32(float(np.sum(np.asarray(x, np.float64))))
    return total


def stream_write(n: int, scale: float) -> np.ndarray:
    """``out[i] = float32(i) * float32(scale)``."""
    out: np.ndarray = np.arange(n, dtype=np.float64).astype(np.float32) * np.float32(scale)
    return out


def stream_copy(x: np.ndarray) -> np.ndarray:
    return np.array(x, dtype=np.float32, copy=True)


def stream_fill(n: int, value: float) -> np.ndarray:
    return np.full(n, value, dtype=np.float32)


def coherence_pattern(n: int, seed: int, start: int = 0) -> np.ndarray:
    """The uint32 pattern the coherence kernel writes: a hash of the index and the seed."""
    i = np.arange(start, start + n, dtype=np.uint64)
    lo = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (i >> np.uint64(32)).astype(np.uint32)
    with np.errstate(over="ignore"):
        x: np.ndarray = (lo * np.uint32(2654435761)) ^ (hi * np.uint32(0x85EBCA6B)) ^ np.uint32(seed & 0xFFFFFFFF)
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x


def coherence_check(buf: np.ndarray, expect_seed: int) -> tuple[int, int | None]:
    """(mismatch count, first bad index or None) of ``buf`` against the pattern of ``expect_seed``."""
    bad = np.flatnonzero(np.asarray(buf, np.uint32).ravel() != coherence_pattern(buf.size, expect_seed))
    return int(bad.size), (int(bad[0]) if bad.size else None)

"""Bundled kernels: CUDA sources in this folder, launch helpers, and numpy references (``reference``).

``sources()`` maps each bundled kernel name to its ``.cu`` text; ``jetmem.kernel(name)`` compiles one.
The helpers below pick launch shapes that suit each kernel, so tests and benchmarks launch them alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from pytest_jetmem.cuda.bundled import names, source_file, sources

if TYPE_CHECKING:
    from pytest_jetmem.cuda.buffer import Buffer
    from pytest_jetmem.cuda.device import DeviceInfo
    from pytest_jetmem.cuda.launch import Kernel

__all__ = ["coherence", "conv2d", "matmul", "names", "source_file", "sources", "stream", "stream_grid"]

STREAM_BLOCK = 256
CONV_BLOCK = (16, 16)
MATMUL_TILE = 32
_F32, _U32, _U64 = np.dtype(np.float32), np.dtype(np.uint32), np.dtype(np.uint64)


class KernelHost(Protocol):
    """What the helpers use of the ``jetmem`` handle (or a CUDA workspace): the device and its bundled kernels."""

    @property
    def device(self) -> DeviceInfo: ...

    def kernel(self, name: str) -> Kernel: ...


def stream_grid(n: int, sm_count: int) -> int:
    """Blocks for a grid-stride stream kernel over n floats: enough for every SM, one float4 per thread."""
    n4 = max(1, n // 4)
    return max(1, min((n4 + STREAM_BLOCK - 1) // STREAM_BLOCK, sm_count * 64))


def conv2d(jm: KernelHost, image: Buffer, kernel: Buffer, out: Buffer) -> None:
    """Queue ``out = conv2d_replicate(image, kernel)``; image and out are (height, width) float32."""
    if not _conv2d_fits(image, kernel, out):  # the common case in one test (a launch's host cost counts)
        _conv2d_check(image, kernel, out)
    h, w = image.shape
    kh, kw = kernel.shape
    grid = ((w + CONV_BLOCK[0] - 1) // CONV_BLOCK[0], (h + CONV_BLOCK[1] - 1) // CONV_BLOCK[1])
    jm.kernel("conv2d_replicate").launch(grid, CONV_BLOCK, (image, out, kernel, w, h, kw, kh))


def _conv2d_fits(image: Buffer, kernel: Buffer, out: Buffer) -> bool:
    """Whether :func:`conv2d` takes these buffers: float32, two dimensions, odd kernel sizes, out shaped as image."""
    shape, kshape = image.shape, kernel.shape
    return (
        image.dtype is _F32
        and kernel.dtype is _F32
        and out.dtype is _F32
        and len(shape) == 2
        and len(kshape) == 2
        and out.shape == shape
        and bool(kshape[0] & kshape[1] & 1)
    )


def _conv2d_check(image: Buffer, kernel: Buffer, out: Buffer) -> None:
    """Raise what is wrong with buffers :func:`_conv2d_fits` refused (TypeError for a dtype, else ValueError)."""
    _expect(image, 2, _F32, "image")
    _expect(kernel, 2, _F32, "kernel")
    _expect(out, 2, _F32, "out")
    if kernel.shape[0] % 2 == 0 or kernel.shape[1] % 2 == 0:
        raise ValueError(f"conv2d: kernel sizes must be odd, got {kernel.shape}")
    if out.shape != image.shape:
        raise ValueError(f"conv2d: out shape {out.shape} differs from image shape {image.shape}")


def matmul(jm: KernelHost, a: Buffer, b: Buffer, c: Buffer) -> None:
    """Queue ``c = a @ b`` with the shared-memory tiled kernel."""
    for buf, what in ((a, "a"), (b, "b"), (c, "c")):
        _expect(buf, 2, _F32, what)
    m, k = a.shape
    k2, n = b.shape
    if k != k2 or c.shape != (m, n):
        raise ValueError(f"matmul: shapes {a.shape} @ {b.shape} -> {c.shape} do not fit")
    grid = ((n + MATMUL_TILE - 1) // MATMUL_TILE, (m + MATMUL_TILE - 1) // MATMUL_TILE)
    jm.kernel("matmul_tiled").launch(grid, (MATMUL_TILE, MATMUL_TILE), (a, b, c, m, n, k))


def stream(jm: KernelHost, op: str, *buffers: Buffer, value: float = 1.0) -> None:
    """Queue a stream kernel: ``read(in, sink)``, ``write(out)``, ``copy(in, out)``, ``fill(out)``."""
    sms = jm.device.attr("MULTIPROCESSOR_COUNT") or 1
    n = buffers[0].size
    for b in buffers:
        _expect(b, None, _F32, op)
    grid = stream_grid(n, sms)
    k = jm.kernel(f"stream_{op}")
    if op == "read":
        src, sink = buffers
        k.launch(grid, STREAM_BLOCK, (src, n, sink))
    elif op == "write":
        k.launch(grid, STREAM_BLOCK, (buffers[0], n, value))
    elif op == "copy":
        src, dst = buffers
        if dst.size != n:
            raise ValueError(f"stream copy: sizes differ ({n} -> {dst.size})")
        k.launch(grid, STREAM_BLOCK, (src, dst, n))
    elif op == "fill":
        k.launch(grid, STREAM_BLOCK, (buffers[0], n, value))
    else:
        raise ValueError(f"stream: unknown op {op!r}; expected read, write, copy or fill")


def coherence(jm: KernelHost, buf: Buffer, expect_seed: int, new_seed: int, check: bool, result: Buffer) -> None:
    """Queue the coherence probe over ``buf`` (uint32); ``result`` is 2 uint64 set to (0, ~0)."""
    _expect(buf, None, _U32, "buf")
    _expect(result, None, _U64, "result")
    sms = jm.device.attr("MULTIPROCESSOR_COUNT") or 1
    grid = max(1, min((buf.size + 255) // 256, sms * 32))
    jm.kernel("coherence_check_write").launch(
        grid, 256, (buf, buf.size, expect_seed & 0xFFFFFFFF, new_seed & 0xFFFFFFFF, int(check), result)
    )


def _expect(buf: Buffer, ndim: int | None, dtype: np.dtype, what: str) -> None:
    if buf.dtype is not dtype and buf.dtype != dtype:
        raise TypeError(f"{what}: expected a {dtype} buffer, got {buf.dtype}")
    if ndim is not None and len(buf.shape) != ndim:
        raise ValueError(f"{what}: expected {ndim} dimensions, got shape {buf.shape}")

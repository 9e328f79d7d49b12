"""Kernels as users write them, in every memory mode, against numpy references with the outputs poisoned first:
cooperative groups, ``__half`` from cuda_fp16.h, ``cub::BlockReduce``, and templates launched with plain Python
numbers. The CUDA headers are found without help (the cu12/cu13 extras install them). The same sources compile
on CPU CI (tests/unit/test_cuda_compiler.py, test_plugin_nogpu.py)."""

import numpy as np
import pytest

from user_kernels import (
    BLOCK_SUM,
    HALF_AXPY,
    REDUCE_BLOCK,
    SAXPY,
    SAXPY_PLAIN,
    TILE,
    TRANSPOSE,
    block_sum_ref,
    half_axpy_ref,
    transpose_ref,
)

POISON = 0xFF  # NaN for floats: an output the kernel did not write shows


@pytest.mark.memmode
def test_transpose_with_cooperative_groups(jetmem):
    rows, cols = 300, 517  # not multiples of the tile: the edges are checked too
    a = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    src = jetmem.array(a)
    out = jetmem.empty((cols, rows)).fill_bytes(POISON)
    k = jetmem.compile(TRANSPOSE, "transpose_cg")
    k.launch(((cols + TILE - 1) // TILE, (rows + TILE - 1) // TILE), (TILE, TILE), (src, out, rows, cols))
    np.testing.assert_array_equal(out.to_numpy(), transpose_ref(a))


@pytest.mark.memmode
def test_half_precision_from_cuda_fp16(jetmem):
    n = 10_000
    rng = np.random.default_rng(2)
    x = rng.standard_normal(n).astype(np.float16)
    y0 = rng.standard_normal(n).astype(np.float16)
    xb, yb = jetmem.array(x), jetmem.array(y0)
    k = jetmem.compile(HALF_AXPY, "half_axpy", options="-lineinfo")
    k.launch((n + 255) // 256, 256, (yb, xb, 1.5, n))  # a plain float and a plain int, typed from the source
    np.testing.assert_array_equal(yb.to_numpy(), half_axpy_ref(y0, x, 1.5))


@pytest.mark.memmode
def test_cub_block_reduce_sum(jetmem):
    n = 100_003
    a = np.random.default_rng(3).random(n).astype(np.float32)
    blocks = (n + REDUCE_BLOCK - 1) // REDUCE_BLOCK
    src = jetmem.array(a)
    out = jetmem.empty(blocks).fill_bytes(POISON)
    jetmem.compile(BLOCK_SUM, "block_sum").launch(blocks, REDUCE_BLOCK, (src, out, n))
    np.testing.assert_allclose(out.to_numpy(), block_sum_ref(a), rtol=1e-5)


@pytest.mark.memmode
@pytest.mark.parametrize(
    ("source", "name", "dtype"),
    [(SAXPY, "saxpy<float>", np.float32), (SAXPY_PLAIN, "saxpy_plain<double>", np.float64)],
    ids=["float-cuda-std-size_t", "double-size_t"],
)
def test_template_kernel_with_plain_python_numbers(jetmem, source, name, dtype):
    n, tail = 5000, 64
    rng = np.random.default_rng(4)
    x = rng.standard_normal(n + tail).astype(dtype)
    y0 = rng.standard_normal(n + tail).astype(dtype)
    xb, yb = jetmem.array(x), jetmem.array(y0)
    k = jetmem.compile(source, name)
    k.launch((n + 255) // 256, 256, (yb, xb, 2.5, n))  # T a = 2.5 and size_t n = 5000, as plain Python numbers
    expected = y0.copy()
    expected[:n] = dtype(2.5) * x[:n] + y0[:n]
    got = yb.to_numpy()
    np.testing.assert_allclose(got[:n], expected[:n], rtol=1e-5, atol=1e-6)  # a * x + y: the GPU fuses it (FMA)
    np.testing.assert_array_equal(got[n:], y0[n:])  # past n: untouched


@pytest.mark.memmode("device")
def test_missing_header_error_says_where_it_looked(jetmem):
    from pytest_jetmem.errors import CompileError

    with pytest.raises(CompileError, match=r"(?s)header 'not_a_header\.h' not found.*CUDA header discovery looked at"):
        jetmem.compile('#include "not_a_header.h"\nextern "C" __global__ void f() {}', "f")

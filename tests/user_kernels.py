"""Kernels as users write them (CUDA headers, templates), shared by the CPU compile tests and the GPU tests.

Each has a numpy reference; the GPU tests (tests/gpu/test_user_kernels_gpu.py) run them in every memory mode
with outputs poisoned first, the CPU tests (tests/unit/test_cuda_compiler.py, test_plugin_nogpu.py) compile
them for the Jetson architectures without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

TILE = 32
REDUCE_BLOCK = 256

TRANSPOSE = r"""
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define TILE 32
// out (cols x rows) = transpose of in (rows x cols), through a shared tile.
extern "C" __global__ void transpose_cg(const float* in, float* out, int rows, int cols)
{
    __shared__ float tile[TILE][TILE + 1];
    cg::thread_block block = cg::this_thread_block();
    int x = blockIdx.x * TILE + threadIdx.x;
    int y = blockIdx.y * TILE + threadIdx.y;
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[(size_t)y * cols + x];
    block.sync();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    if (x < rows && y < cols) out[(size_t)y * rows + x] = tile[threadIdx.x][threadIdx.y];
}
"""

HALF_AXPY = r"""
#include <cuda_fp16.h>
// y = a * x + y in half precision (the multiply-add in float, rounded once).
extern "C" __global__ void half_axpy(__half* y, const __half* x, float a, unsigned int n)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half(a * __half2float(x[i]) + __half2float(y[i]));
}
"""

BLOCK_SUM = r"""
#include <cub/block/block_reduce.cuh>
#define BLOCK 256
// out[block] = sum of in[block * BLOCK .. +BLOCK) (zero past n).
extern "C" __global__ void block_sum(const float* in, float* out, int n)
{
    using Reduce = cub::BlockReduce<float, BLOCK>;
    __shared__ typename Reduce::TempStorage storage;
    int i = blockIdx.x * BLOCK + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    float total = Reduce(storage).Sum(v);
    if (threadIdx.x == 0) out[blockIdx.x] = total;
}
"""

SAXPY = r"""
#include <cuda/std/cstddef>
template <typename T>
__global__ void saxpy(T* y, const T* x, T a, cuda::std::size_t n)
{
    cuda::std::size_t i = (cuda::std::size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

# saxpy with a plain size_t (as the user wrote it): its name expression types Python numbers.
SAXPY_PLAIN = r"""
template <typename T>
__global__ void saxpy_plain(T* y, const T* x, T a, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


@dataclass(frozen=True)
class UserKernel:
    id: str
    source: str
    name: str
    options: tuple[str, ...] = ()


USER_KERNELS = (
    UserKernel("transpose-cooperative-groups", TRANSPOSE, "transpose_cg"),
    UserKernel("half-cuda-fp16", HALF_AXPY, "half_axpy"),
    UserKernel("cub-block-reduce", BLOCK_SUM, "block_sum"),
    UserKernel("template-cuda-std", SAXPY, "saxpy<float>", ("-lineinfo",)),
    UserKernel("template-size-t", SAXPY_PLAIN, "saxpy_plain<double>"),
)


def transpose_ref(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.T)


def half_axpy_ref(y: np.ndarray, x: np.ndarray, a: float) -> np.ndarray:
    return (np.float32(a) * x.astype(np.float32) + y.astype(np.float32)).astype(np.float16)


def block_sum_ref(a: np.ndarray) -> np.ndarray:
    blocks = (a.size + REDUCE_BLOCK - 1) // REDUCE_BLOCK
    padded = np.zeros(blocks * REDUCE_BLOCK, np.float64)
    padded[: a.size] = a
    return padded.reshape(blocks, REDUCE_BLOCK).sum(axis=1)


REFERENCES: dict[str, Callable[..., np.ndarray]] = {
    "transpose_cg": transpose_ref,
    "half_axpy": half_axpy_ref,
    "block_sum": block_sum_ref,
}

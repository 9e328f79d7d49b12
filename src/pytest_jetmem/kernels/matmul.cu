// Shared-memory tiled matrix product C = A @ B, float32, row-major: the seed 000 scenario.
// A is m x k, B is k x n, C is m x n. Launch with block (32, 32) and grid (ceil(n/32), ceil(m/32)).
#define TILE 32
extern "C" __global__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int m, int n, int k)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < (k + TILE - 1) / TILE; ++t) {
        const int ac = t * TILE + tx, br = t * TILE + ty;
        As[ty][tx] = (row < m && ac < k) ? A[(size_t)row * k + ac] : 0.0f;
        Bs[ty][tx] = (br < k && col < n) ? B[(size_t)br * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int e = 0; e < TILE; ++e) acc = fmaf(As[ty][e], Bs[e][tx], acc);
        __syncthreads();
    }
    if (row < m && col < n) C[(size_t)row * n + col] = acc;
}

// Coherence probe over n uint32 words: check that buf[i] == pattern(i, expect_seed), count the
// mismatches and record the first bad index, then write pattern(i, new_seed). With check == 0 it
// only writes. result[0] = mismatches, result[1] = first bad index (initialise it to ~0ull).
__device__ __forceinline__ unsigned int jetmem_pattern(unsigned long long i, unsigned int seed)
{
    unsigned int x = (unsigned int)i * 2654435761u ^ (unsigned int)(i >> 32) * 0x85ebca6bu ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

extern "C" __global__ void coherence_check_write(unsigned int* __restrict__ buf, unsigned long long n,
                                                 unsigned int expect_seed, unsigned int new_seed,
                                                 int check, unsigned long long* __restrict__ result)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (check && buf[i] != jetmem_pattern(i, expect_seed)) {
            atomicAdd(&result[0], 1ull);
            atomicMin(&result[1], i);
        }
        buf[i] = jetmem_pattern(i, new_seed);
    }
}

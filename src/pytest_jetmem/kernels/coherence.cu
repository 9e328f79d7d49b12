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

// ---- strided probes (pytest_jetmem.coherence) ----
// Strided coherence probe: for k < count, word i = start + k * step is checked against
// jetmem_pattern(i, expect_seed) (flags & 1) and then set to jetmem_pattern(i, new_seed) (flags & 2).
// result[0] counts mismatches; result[1] is the atomicMin of (i << 32 | seen) for uint32 words and
// (i << 8 | seen) for bytes: the first bad index with the value the kernel read there. Initialise
// result to (0, ~0). delay_ns makes every thread wait before it starts (widens race windows in tests).
__device__ __forceinline__ void jetmem_delay_ns(unsigned long long delay_ns)
{
    if (delay_ns == 0) return;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < delay_ns);
}

// One probe for any word type: the pattern truncated to the word, the bad index shifted past the word's bits.
template <typename Word>
__device__ __forceinline__ void jetmem_probe(Word* buf, unsigned long long start, long long step,
                                             unsigned long long count, unsigned int expect_seed,
                                             unsigned int new_seed, int flags, unsigned long long delay_ns,
                                             unsigned long long* result)
{
    jetmem_delay_ns(delay_ns);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += stride) {
        const unsigned long long i = (unsigned long long)((long long)start + (long long)k * step);
        if (flags & 1) {
            const Word seen = buf[i];
            if (seen != (Word)jetmem_pattern(i, expect_seed)) {
                atomicAdd(&result[0], 1ull);
                atomicMin(&result[1], (i << (8 * sizeof(Word))) | (unsigned long long)seen);
            }
        }
        if (flags & 2) buf[i] = (Word)jetmem_pattern(i, new_seed);
    }
}

extern "C" __global__ void jetmem_probe_u32(unsigned int* buf, unsigned long long start, long long step,
                                            unsigned long long count, unsigned int expect_seed,
                                            unsigned int new_seed, int flags, unsigned long long delay_ns,
                                            unsigned long long* result)
{
    jetmem_probe(buf, start, step, count, expect_seed, new_seed, flags, delay_ns, result);
}

extern "C" __global__ void jetmem_probe_u8(unsigned char* buf, unsigned long long start, long long step,
                                           unsigned long long count, unsigned int expect_seed,
                                           unsigned int new_seed, int flags, unsigned long long delay_ns,
                                           unsigned long long* result)
{
    jetmem_probe(buf, start, step, count, expect_seed, new_seed, flags, delay_ns, result);
}

// ---- state-machine kernels (pytest_jetmem.coherence_machine) ----
// Kernels of pytest_jetmem.coherence_machine. Word i = start + k * step for k < count.

// Only waits: queued before a memset or a copy so that, with a delay, they too land late.
extern "C" __global__ void jetmem_machine_wait(unsigned long long delay_ns)
{
    jetmem_delay_ns(delay_ns);
}

// Read-modify-write on the GPU: buf[i] += value (mod 2**32).
extern "C" __global__ void jetmem_machine_add(unsigned int* buf, unsigned long long start, long long step,
                                              unsigned long long count, unsigned int value,
                                              unsigned long long delay_ns)
{
    jetmem_delay_ns(delay_ns);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += stride) {
        const long long i = (long long)start + (long long)k * step;
        buf[i] += value;
    }
}

// The GPU reads: compare buf[i] with expected[k]; result[0] counts mismatches, result[1] is the
// atomicMin of (k << 32 | seen): the first bad position with the value read there. Set result to (0, ~0).
extern "C" __global__ void jetmem_machine_compare(const unsigned int* buf, const unsigned int* expected,
                                                  unsigned long long start, long long step,
                                                  unsigned long long count, unsigned long long* result)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += stride) {
        const long long i = (long long)start + (long long)k * step;
        const unsigned int seen = buf[i];
        if (seen != expected[k]) {
            atomicAdd(&result[0], 1ull);
            atomicMin(&result[1], (k << 32) | (unsigned long long)seen);
        }
    }
}

// Streaming kernels over n float32 values: read, write, copy, fill. Vectorised with float4 on a
// grid-stride loop (the base addresses must be 16-byte aligned: every jetmem allocation is); the
// n % 4 tail is done by the first threads. Each moves every byte once: bandwidth = bytes / time.

// Read every value; the block sums are added into sink[0] so the loads cannot be optimised away
// and the result can be checked (sink[0] ~= sum(in)).
extern "C" __global__ void stream_read(const float* __restrict__ in, unsigned long long n,
                                       float* __restrict__ sink)
{
    __shared__ float partial[32];
    const float4* in4 = reinterpret_cast<const float4*>(in);
    const unsigned long long n4 = n / 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (unsigned long long i = tid; i < n4; i += stride) {
        const float4 v = in4[i];
        acc += (v.x + v.y) + (v.z + v.w);
    }
    for (unsigned long long i = n4 * 4 + tid; i < n; i += stride) acc += in[i];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = (threadIdx.x < (blockDim.x + 31) / 32) ? partial[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
        if (threadIdx.x == 0) atomicAdd(sink, acc);
    }
}

// out[i] = (float)i * scale
extern "C" __global__ void stream_write(float* __restrict__ out, unsigned long long n, float scale)
{
    float4* out4 = reinterpret_cast<float4*>(out);
    const unsigned long long n4 = n / 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long i = tid; i < n4; i += stride) {
        const unsigned long long b = 4 * i;
        out4[i] = make_float4((float)b * scale, (float)(b + 1) * scale, (float)(b + 2) * scale,
                              (float)(b + 3) * scale);
    }
    for (unsigned long long i = n4 * 4 + tid; i < n; i += stride) out[i] = (float)i * scale;
}

// out[i] = in[i]
extern "C" __global__ void stream_copy(const float* __restrict__ in, float* __restrict__ out,
                                       unsigned long long n)
{
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);
    const unsigned long long n4 = n / 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long i = tid; i < n4; i += stride) out4[i] = in4[i];
    for (unsigned long long i = n4 * 4 + tid; i < n; i += stride) out[i] = in[i];
}

// out[i] = value
extern "C" __global__ void stream_fill(float* __restrict__ out, unsigned long long n, float value)
{
    float4* out4 = reinterpret_cast<float4*>(out);
    const unsigned long long n4 = n / 4;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long tid = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const float4 v = make_float4(value, value, value, value);
    for (unsigned long long i = tid; i < n4; i += stride) out4[i] = v;
    for (unsigned long long i = n4 * 4 + tid; i < n; i += stride) out[i] = value;
}

// 2D convolution, float32, replicate ("nearest") border, any odd kernel size: the seed 001 scenario.
// One thread per output pixel, reading the input kh*kw times: a kernel that re-reads its input,
// which is what makes zero-copy memory (uncached on the GPU) slow.
// out[y, x] = sum_{j,i} k[j, i] * in[clamp(y + ry - j), clamp(x + rx - i)]   (scipy.ndimage.convolve, mode="nearest")
extern "C" __global__ void conv2d_replicate(const float* __restrict__ in, float* __restrict__ out,
                                            const float* __restrict__ k, int width, int height,
                                            int kw, int kh)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    const int rx = kw / 2, ry = kh / 2;
    float acc = 0.0f;
    for (int j = 0; j < kh; ++j) {
        const int yy = min(max(y + ry - j, 0), height - 1);
        const float* row = in + (size_t)yy * width;
        for (int i = 0; i < kw; ++i) {
            const int xx = min(max(x + rx - i, 0), width - 1);
            acc = fmaf(k[j * kw + i], row[xx], acc);
        }
    }
    out[(size_t)y * width + x] = acc;
}

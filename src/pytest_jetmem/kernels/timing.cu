// Blocking kernel for honest event timing (the technique nvbench uses): it spins until the host
// sets *flag (host-mapped memory), so the work queued behind it is already in the stream when the
// start event fires and Python's launch overhead is not timed. Gives up after timeout_ns.
extern "C" __global__ void jetmem_block_stream(const volatile int* flag, unsigned long long timeout_ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        if (*flag) return;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < timeout_ns);
}

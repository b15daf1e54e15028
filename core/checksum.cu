// checksum.cu - the device checksum of core/checksum.h, one atomic add per warp.
// Not compiled by the build: `make ptx` turns it into core/checksum_ptx.h (PTX for
// compute_75, JIT-compiled by the driver for the device at hand).
extern "C" __global__ void ft_checksum(const unsigned long long *p, unsigned long long n,
                                       unsigned long long salt, unsigned long long *out)
{
    unsigned long long acc = 0;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        unsigned long long m = p[i] ^ ((salt + i) * 0x9e3779b97f4a7c15ull);
        m ^= m >> 31;
        m *= 0xbf58476d1ce4e5b9ull;
        m ^= m >> 29;
        acc += m;
    }
    for (int o = 16; o > 0; o >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, acc);
}

// A unit's copy back when its checksum shows it changed, in the stream's order: an
// eviction that hands the unit's physical memory to another unit needs no host wait
// (the H2D copy of the next unit follows it on the same stream). *sum is the unit's
// checksum, made before it on that stream; expected, the host store's. When they
// differ, the n words at src go to dst, the host store's device address (pinned host
// memory, mapped into the device's address space).
extern "C" __global__ void ft_copy_back_if_changed(const unsigned long long *src, unsigned long long n,
                                                   const unsigned long long *sum,
                                                   unsigned long long expected, unsigned long long *dst)
{
    if (*sum == expected)
        return;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = src[i];
}

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

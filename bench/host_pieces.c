/* Whether device memory ranges can be backed by host memory through the driver's
 * virtual memory calls, and at what cost: cuMemCreate with a host location
 * (CU_MEM_LOCATION_TYPE_HOST, then HOST_NUMA), mapped into a reserved device range
 * with device access, then read by the copy engine and by a kernel; one piece
 * remapped from host to device memory under the same addresses; the cost of creating
 * host-located memory in one handle and in 2 MiB handles. GPU only; not part of
 * make check.
 *
 *   cc -O2 -I/usr/local/cuda/include bench/host_pieces.c -o host_pieces -lcuda && ./host_pieces
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                                          \
    do {                                                                                                  \
        CUresult rc_ = (call);                                                                            \
        if (rc_ != CUDA_SUCCESS) {                                                                        \
            const char *s_ = NULL;                                                                        \
            cuGetErrorName(rc_, &s_);                                                                     \
            printf("FAILED %s: %s (%d) at line %d\n", #call, s_ ? s_ : "?", (int)rc_, __LINE__);          \
            return 1;                                                                                     \
        }                                                                                                 \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* dst[i] = src[i] + 0 over n 16-byte words, grid-stride. */
static const char ptx[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry copy16(.param .u64 dst, .param .u64 src, .param .u64 n)\n{\n"
    " .reg .pred p; .reg .b32 r<8>; .reg .b64 d<12>;\n"
    " ld.param.u64 d1, [dst]; ld.param.u64 d2, [src]; ld.param.u64 d3, [n];\n"
    " cvta.to.global.u64 d1, d1; cvta.to.global.u64 d2, d2;\n"
    " mov.u32 r1, %ctaid.x; mov.u32 r2, %ntid.x; mov.u32 r3, %tid.x; mov.u32 r4, %nctaid.x;\n"
    " mul.wide.u32 d4, r1, r2; cvt.u64.u32 d5, r3; add.u64 d4, d4, d5;\n"
    " mul.wide.u32 d6, r4, r2;\n"
    "L: setp.ge.u64 p, d4, d3; @p bra E;\n"
    " shl.b64 d7, d4, 4; add.u64 d8, d2, d7; add.u64 d9, d1, d7;\n"
    " ld.global.v4.u32 {r1, r2, r3, r5}, [d8]; st.global.v4.u32 [d9], {r1, r2, r3, r5};\n"
    " mov.u32 r2, %ntid.x; add.u64 d4, d4, d6; bra L;\n"
    "E: ret;\n}\n";

static CUdevice dev;
static CUfunction copy16;

static int kernel_copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, double *secs)
{
    uint64_t n = bytes / 16;
    void *args[] = { &dst, &src, &n };
    double t = now();
    CK(cuLaunchKernel(copy16, 264, 1, 1, 512, 1, 1, 0, 0, args, NULL));
    CK(cuCtxSynchronize());
    *secs = now() - t;
    return 0;
}

static int check(CUdeviceptr p, size_t bytes, unsigned seed, const char *what)
{
    unsigned *h = malloc(bytes);
    CK(cuMemcpyDtoH(h, p, bytes));
    size_t bad = 0;
    for (size_t i = 0; i < bytes / 4; i++)
        bad += h[i] != (unsigned)(i * 2654435761u + seed);
    printf("  %s: %s\n", what, bad == 0 ? "data as written" : "DATA DIFFERS");
    free(h);
    return bad != 0;
}

static int try_location(CUmemLocationType type, int id, const char *name, size_t size)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = type;
    p.location.id = id;
    size_t g = 0;
    CUresult rc = cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    printf("%s: granularity rc %d, %zu bytes\n", name, (int)rc, g);
    if (rc != CUDA_SUCCESS)
        return 1;
    CUmemGenericAllocationHandle h;
    size_t fr0 = 0, tot0 = 0;
    cuMemGetInfo(&fr0, &tot0);
    printf("  cuMemGetInfo before: free %zu MiB\n", fr0 >> 20);
    double t = now();
    rc = cuMemCreate(&h, size, &p, 0);
    printf("  cuMemCreate %zu MiB: rc %d, %.1f ms\n", size >> 20, (int)rc, (now() - t) * 1e3);
    if (rc != CUDA_SUCCESS)
        return 1;
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CK(cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    rc = cuMemSetAccess(va, size, &a, 1);
    printf("  cuMemSetAccess(device 0, rw): rc %d\n", (int)rc);
    if (rc != CUDA_SUCCESS)
        return 1;
    unsigned mt = 0;
    int ord = -2;
    CUresult r1 = cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va);
    CUresult r2 = cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va);
    CUdeviceptr base = 0;
    size_t range = 0;
    CUresult r3 = cuMemGetAddressRange(&base, &range, va + 4096);
    printf("  pointer attributes: memory type rc %d = %u (device %d, host %d), device ordinal rc %d = %d, "
           "address range rc %d = +%llu, %zu bytes\n", (int)r1, mt, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, (int)r2,
           ord, (int)r3, (unsigned long long)(base - va), range);
    size_t fr = 0, tot = 0;
    cuMemGetInfo(&fr, &tot);
    printf("  cuMemGetInfo with it mapped: free %zu MiB of %zu MiB\n", fr >> 20, tot >> 20);

    unsigned *host = NULL;
    CK(cuMemAllocHost((void **)&host, size));
    for (size_t i = 0; i < size / 4; i++)
        host[i] = (unsigned)(i * 2654435761u + 7);
    t = now();
    CK(cuMemcpyHtoD(va, host, size));
    printf("  copy in from pinned host: %.2f GB/s\n", size / (now() - t) / 1e9);
    CUdeviceptr d;
    CK(cuMemAlloc(&d, size));
    t = now();
    CK(cuMemcpyDtoD(d, va, size));
    CK(cuCtxSynchronize());
    printf("  copy engine reads it into device memory: %.2f GB/s\n", size / (now() - t) / 1e9);
    if (check(d, size, 7, "device copy"))
        return 1;
    CK(cuMemsetD8(d, 0, size));
    double s;
    if (kernel_copy(d, va, size, &s) || kernel_copy(d, va, size, &s))
        return 1;
    printf("  a kernel reads it (second launch): %.2f GB/s\n", size / s / 1e9);
    if (check(d, size, 7, "kernel copy"))
        return 1;
    /* the kernel writes it */
    if (kernel_copy(va, d, size, &s))
        return 1;
    printf("  a kernel writes it: %.2f GB/s\n", size / s / 1e9);
    if (check(va, size, 7, "kernel write"))
        return 1;

    CUresult part = cuMemUnmap(va + (2u << 20), 2u << 20);
    printf("  unmap one 2 MiB piece of a host handle mapped whole: rc %d\n", (int)part);
    CK(cuMemUnmap(va, size));
    CK(cuMemAddressFree(va, size));
    CK(cuMemRelease(h));

    /* Pieces of one handle each (cuMemMap maps a handle whole): four host ones, then
     * the second remapped onto device memory under the same addresses. */
    size_t pg = 2u << 20;
    CUmemGenericAllocationHandle hp[4], hd;
    CUdeviceptr v4;
    CK(cuMemAddressReserve(&v4, 4 * pg, 0, 0, 0));
    for (int i = 0; i < 4; i++) {
        CK(cuMemCreate(&hp[i], pg, &p, 0));
        CK(cuMemMap(v4 + (size_t)i * pg, pg, 0, hp[i], 0));
    }
    CK(cuMemSetAccess(v4, 4 * pg, &a, 1));
    CK(cuMemcpyHtoD(v4, host, 4 * pg));
    CUmemAllocationProp dp;
    memset(&dp, 0, sizeof dp);
    dp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    dp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    dp.location.id = 0;
    CK(cuMemCreate(&hd, pg, &dp, 0));
    CK(cuMemcpyDtoD(d, v4 + pg, pg)); /* the piece's bytes aside */
    CK(cuCtxSynchronize());
    CK(cuMemUnmap(v4 + pg, pg));
    CK(cuMemMap(v4 + pg, pg, 0, hd, 0));
    CK(cuMemSetAccess(v4 + pg, pg, &a, 1));
    CK(cuMemcpyDtoD(v4 + pg, d, pg));
    CK(cuCtxSynchronize());
    CUdeviceptr d2;
    CK(cuMemAlloc(&d2, 4 * pg));
    if (kernel_copy(d2, v4, 4 * pg, &s))
        return 1;
    if (check(d2, 4 * pg, 7, "one device piece among host ones, read by a kernel"))
        return 1;
    for (int i = 0; i < 4; i++) {
        CK(cuMemUnmap(v4 + (size_t)i * pg, pg));
        CK(cuMemRelease(hp[i]));
    }
    CK(cuMemRelease(hd));
    CK(cuMemAddressFree(v4, 4 * pg));
    CK(cuMemFree(d2));
    CK(cuMemFree(d));
    CK(cuMemFreeHost(host));

    /* 2 MiB handles: the cost of each */
    int n = 256;
    CUmemGenericAllocationHandle *hs = calloc((size_t)n, sizeof *hs);
    t = now();
    for (int i = 0; i < n; i++)
        CK(cuMemCreate(&hs[i], pg, &p, 0));
    double c = now() - t;
    t = now();
    for (int i = 0; i < n; i++)
        CK(cuMemRelease(hs[i]));
    printf("  %d handles of 2 MiB: create %.1f us each, release %.1f us each\n", n, c / n * 1e6,
           (now() - t) / n * 1e6);
    free(hs);
    /* one large handle */
    size_t big = (size_t)8 << 30;
    t = now();
    rc = cuMemCreate(&h, big, &p, 0);
    printf("  cuMemCreate 8 GiB: rc %d, %.1f ms\n", (int)rc, (now() - t) * 1e3);
    if (rc == CUDA_SUCCESS)
        cuMemRelease(h);
    return 0;
}

int main(void)
{
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    int drv = 0, vmm = 0, numa_id = -1, host_pools = 0;
    cuDriverGetVersion(&drv);
    cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
    cuDeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev);
    cuDeviceGetAttribute(&host_pools, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, dev);
    printf("driver %d; host NUMA virtual memory management %d, host NUMA id %d, host memory pools %d\n", drv,
           vmm, numa_id, host_pools);
    CUmodule m;
    char log[4096] = "";
    CUjit_option o[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
    void *ov[] = { log, (void *)(uintptr_t)sizeof log };
    CUresult rc = cuModuleLoadDataEx(&m, ptx, 2, o, ov);
    if (rc != CUDA_SUCCESS) {
        printf("PTX did not load (%d): %s\n", (int)rc, log);
        return 1;
    }
    CK(cuModuleGetFunction(&copy16, m, "copy16"));
    size_t size = (size_t)256 << 20;
    int r1 = try_location(CU_MEM_LOCATION_TYPE_HOST, 0, "CU_MEM_LOCATION_TYPE_HOST", size);
    int r2 = try_location(CU_MEM_LOCATION_TYPE_HOST_NUMA, numa_id < 0 ? 0 : numa_id, "CU_MEM_LOCATION_TYPE_HOST_NUMA",
                          size);
    printf("verdict: HOST %s, HOST_NUMA %s\n", r1 ? "no" : "yes", r2 ? "no" : "yes");
    return 0;
}

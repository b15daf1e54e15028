/* check_sim_mem.c - the simulated device's memory: capacity accounting, VMM with real
 * page protection, strict faults, pinned host ranges, pointer queries. */
#include "sim_test.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>

START_TEST(test_malloc_accounting_and_free_restores)
{
    setenv("FTSIM_DEVICE_MEM", "512MiB", 1);
    sim_test_register();
    size_t fr, total, fr2, total2;
    RT_OK(cudaMemGetInfo(&fr, &total));
    ck_assert_uint_eq(total, 512u << 20);
    ck_assert_uint_eq(fr, total);
    void *p;
    RT_OK(cudaMalloc(&p, 10000));
    ck_assert_uint_eq((uintptr_t)p % 256, 0);
    RT_OK(cudaMemGetInfo(&fr2, &total2));
    ck_assert_uint_eq(fr - fr2, 12288);  /* page-rounded physical bytes */
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 12288);
    RT_OK(cudaFree(p));
    RT_OK(cudaMemGetInfo(&fr2, &total2));
    ck_assert_uint_eq(fr2, fr);
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 0);
    struct cudaDeviceProp prop;
    RT_OK(cudaGetDeviceProperties(&prop, 0));
    ck_assert_uint_eq(prop.totalGlobalMem, 512u << 20);
}
END_TEST

START_TEST(test_capacity_oom)
{
    setenv("FTSIM_DEVICE_MEM", "64MiB", 1);
    void *a, *b;
    RT_OK(cudaMalloc(&a, 48u << 20));
    ck_assert_int_eq(cudaMalloc(&b, 32u << 20), cudaErrorMemoryAllocation);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);  /* not sticky */
    /* VMM physical memory counts against the same capacity. */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    ck_assert_int_eq(cuMemCreate(&h, 32u << 20, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemCreate(&h, 8u << 20, &prop, 0));
    /* And so do stream-ordered allocations. */
    void *c;
    ck_assert_int_eq(cudaMallocAsync(&c, 16u << 20, 0), cudaErrorMemoryAllocation);
    RT_OK(cudaFree(a));
    RT_OK(cudaMalloc(&b, 32u << 20));
    RT_OK(cudaMallocAsync(&c, 16u << 20, 0));
    size_t fr, total;
    RT_OK(cudaMemGetInfo(&fr, &total));
    ck_assert_uint_eq(total - fr, (32u + 8u + 16u) << 20);
    CU_OK(cuMemRelease(h));
    RT_OK(cudaFreeAsync(c, 0));
    RT_OK(cudaStreamSynchronize(0));
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 32u << 20);
}
END_TEST

START_TEST(test_copy_roundtrip)
{
    enum { N = 100000 };
    static unsigned char src[N], dst[N];
    for (int i = 0; i < N; i++)
        src[i] = (unsigned char)(i * 7);
    void *d;
    RT_OK(cudaMalloc(&d, N));
    RT_OK(cudaMemcpy(d, src, N, cudaMemcpyHostToDevice));
    RT_OK(cudaMemset((char *)d + 10, 0xab, 5));
    RT_OK(cudaMemcpy(dst, d, N, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(dst[i], (i >= 10 && i < 15) ? 0xab : src[i]);
    /* Wrong direction: a host pointer as the device side. */
    ck_assert_int_eq(cudaMemcpy(dst, src, N, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
}
END_TEST

/* A kernel writing into a reserved but unmapped range: no crash, a sticky
 * cudaErrorIllegalAddress, and one line naming the kernel and address. */
START_TEST(test_unmapped_access_is_sticky_illegal_address)
{
    sim_test_register();
    CUdeviceptr va;
    RT_OK(cudaFree(0));
    CU_OK(cuMemAddressReserve(&va, 2u << 20, 0, 0, 0));
    stderr_capture_begin();
    RT_OK(launch_touch((void *)va, 4096, 0));
    cudaError_t e = cudaDeviceSynchronize();
    const char *err = stderr_capture_end();
    ck_assert_int_eq(e, cudaErrorIllegalAddress);
    char addr[64];
    snprintf(addr, sizeof addr, "%p", (void *)(va + 4096));
    ck_assert_ptr_nonnull(strstr(err, addr));
    ck_assert_ptr_nonnull(strstr(err, "kernel 'touch'"));
    ck_assert_int_eq(count_lines_with(err, "illegal address"), 1);
    /* Sticky: later calls fail too, as on a GPU. */
    void *p;
    ck_assert_int_eq(cudaMalloc(&p, 16), cudaErrorIllegalAddress);
    ck_assert_int_eq(cudaStreamSynchronize(0), cudaErrorIllegalAddress);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorIllegalAddress);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorIllegalAddress);
    CUdeviceptr q;
    ck_assert_int_eq(cuMemAlloc(&q, 16), CUDA_ERROR_ILLEGAL_ADDRESS);
    /* Later work is not run on the faulted context. */
    static volatile int flag;
    ck_assert_int_eq(launch_sleepy(&flag, 1, 0), cudaErrorIllegalAddress);
    /* Reset clears it. */
    RT_OK(cudaDeviceReset());
    RT_OK(cudaMalloc(&p, 16));
}
END_TEST

static CUdeviceptr map_phys(CUmemGenericAllocationHandle *h, size_t size, int set_access)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUdeviceptr va;
    CU_OK(cuMemCreate(h, size, &prop, 0));
    CU_OK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CU_OK(cuMemMap(va, size, 0, *h, 0));
    if (set_access) {
        CUmemAccessDesc ad = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CU_OK(cuMemSetAccess(va, size, &ad, 1));
    }
    return va;
}

/* Another device reaches a virtual-memory mapping only where cuMemSetAccess granted it:
 * a copy on its stream is CUDA_ERROR_INVALID_VALUE before, fine after; an ordinary
 * allocation is copied (staged) without any grant. FTSIM_PEER=0 refuses the grant. */
START_TEST(test_peer_access_to_mappings)
{
    setenv("FTSIM_DEVICE_COUNT", "2", 1);
    RT_OK(cudaFree(0));
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = map_phys(&h, 2u << 20, 1); /* device 0's, granted to device 0 */
    void *plain0;
    RT_OK(cudaMalloc(&plain0, 4096));
    int can = -1;
    RT_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
    ck_assert_int_eq(can, 1);
    RT_OK(cudaSetDevice(1));
    void *buf1;
    RT_OK(cudaMalloc(&buf1, 4096));
    ck_assert_int_eq(cudaMemcpy(buf1, (void *)va, 4096, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
    RT_OK(cudaMemcpy(buf1, plain0, 4096, cudaMemcpyDeviceToDevice));
    CUmemAccessDesc ad = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(cuMemSetAccess(va, 2u << 20, &ad, 1));
    RT_OK(cudaMemcpy(buf1, (void *)va, 4096, cudaMemcpyDeviceToDevice));
    /* A device-to-device cudaMemcpy does not wait for its copy: device 1's copies of
     * plain0 and va must be done before device 0 writes plain0 (TSan saw the two
     * devices' workers race there). */
    RT_OK(cudaDeviceSynchronize());
    RT_OK(cudaSetDevice(0)); /* device 0 kept its own access */
    RT_OK(cudaMemcpy(plain0, (void *)va, 4096, cudaMemcpyDeviceToDevice));
}
END_TEST

START_TEST(test_no_peer_access_refuses_grants)
{
    setenv("FTSIM_DEVICE_COUNT", "2", 1);
    setenv("FTSIM_PEER", "0", 1);
    RT_OK(cudaFree(0));
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = map_phys(&h, 2u << 20, 1);
    int can = -1;
    RT_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
    ck_assert_int_eq(can, 0);
    CUmemAccessDesc ad = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    ck_assert_int_eq(cuMemSetAccess(va, 2u << 20, &ad, 1), CUDA_ERROR_INVALID_DEVICE);
}
END_TEST

START_TEST(test_access_before_set_access_faults)
{
    sim_test_register();
    RT_OK(cudaFree(0));
    CUmemGenericAllocationHandle h;
    size_t g = 2u << 20;
    CUdeviceptr va = map_phys(&h, g, 0);
    stderr_capture_begin();
    static const char src[64] = "weights";
    /* A copy into mapped memory without access faults on the copy engine. */
    RT_OK(cudaMemcpyAsync((void *)va, src, sizeof src, cudaMemcpyHostToDevice, 0));
    ck_assert_int_eq(cudaStreamSynchronize(0), cudaErrorIllegalAddress);
    const char *err = stderr_capture_end();
    ck_assert_ptr_nonnull(strstr(err, "copy of 64 bytes"));
}
END_TEST

START_TEST(test_access_after_set_access_works)
{
    sim_test_register();
    RT_OK(cudaFree(0));
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = map_phys(&h, 2u << 20, 1);
    RT_OK(launch_fill((float *)va, 2.5f, 1000, 0));
    float out[1000];
    RT_OK(cudaMemcpy(out, (void *)va, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert(out[0] == 2.5f && out[999] == 2.5f);
    unsigned long long flags;
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CU_OK(cuMemGetAccess(&flags, &loc, va));
    ck_assert_uint_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    /* Unmapping makes it fault again; the address itself stays reserved. */
    CU_OK(cuMemUnmap(va, 2u << 20));
    RT_OK(launch_touch((void *)va, 0, 0));
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
}
END_TEST

/* Host-located physical memory (CU_MEM_LOCATION_TYPE_HOST, HOST_NUMA node 0): no device
 * memory used; mapped, it is reached by a kernel and by copies only once cuMemSetAccess
 * grants the device (any device, peer access or not); a 2 MiB piece of it remapped
 * onto device memory under the same addresses. HOST with handle types, another NUMA node, or FTSIM_HOST_VMM=0 refuse. */
START_TEST(test_host_located_memory)
{
    setenv("FTSIM_DEVICE_COUNT", "2", 1);
    setenv("FTSIM_PEER", "0", 1); /* host memory needs no peer access */
    sim_test_register();
    RT_OK(cudaFree(0));
    int on = 0;
    CU_OK(cuDeviceGetAttribute(&on, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    ck_assert_int_eq(on, 1);
    size_t g = 2u << 20, size = 4 * g;
    CUmemAllocationProp hp = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {.type = CU_MEM_LOCATION_TYPE_HOST}};
    CUmemGenericAllocationHandle bad;
    hp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    ck_assert_int_eq(cuMemCreate(&bad, g, &hp, 0), CUDA_ERROR_INVALID_VALUE);
    hp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CUmemAllocationProp np = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = 1}};
    ck_assert_int_eq(cuMemCreate(&bad, g, &np, 0), CUDA_ERROR_INVALID_VALUE);
    np.location.id = 0;
    CU_OK(cuMemCreate(&bad, g, &np, 0));
    CU_OK(cuMemRelease(bad));
    /* One handle a piece (cuMemMap maps a handle whole, at offset 0). */
    CUmemGenericAllocationHandle h[4];
    CUdeviceptr va;
    CU_OK(cuMemAddressReserve(&va, size, 0, 0, 0));
    for (int i = 0; i < 4; i++) {
        CU_OK(cuMemCreate(&h[i], g, &hp, 0));
        CU_OK(cuMemMap(va + (size_t)i * g, g, 0, h[i], 0));
    }
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 0);
    unsigned int type = 0;
    CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 4096));
    ck_assert_uint_eq(type, CU_MEMORYTYPE_HOST); /* as the H100's driver answers */
    RT_OK(launch_touch((void *)va, 0, 0));
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress); /* no access yet */
    RT_OK(cudaDeviceReset());
    RT_OK(cudaFree(0));
    CUmemAccessDesc ad = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(cuMemSetAccess(va, size, &ad, 1));
    ad.location.id = 1; /* any device may be granted it */
    CU_OK(cuMemSetAccess(va, size, &ad, 1));
    RT_OK(launch_fill((float *)va, 2.5f, size / sizeof(float), 0));
    /* Piece 1 onto device memory: its bytes copied aside, then remapped. */
    CUmemAllocationProp dp = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle hd;
    CU_OK(cuMemCreate(&hd, g, &dp, 0));
    void *save;
    RT_OK(cudaMalloc(&save, g));
    RT_OK(cudaMemcpy(save, (void *)(va + g), g, cudaMemcpyDeviceToDevice));
    RT_OK(cudaDeviceSynchronize());
    CU_OK(cuMemUnmap(va + g, g));
    CU_OK(cuMemMap(va + g, g, 0, hd, 0));
    ad.location.id = 0;
    CU_OK(cuMemSetAccess(va + g, g, &ad, 1));
    RT_OK(cudaMemcpy((void *)(va + g), save, g, cudaMemcpyDeviceToDevice));
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 2 * g); /* the piece and `save` */
    float out[4];
    for (int i = 0; i < 4; i++)
        RT_OK(cudaMemcpy(&out[i], (void *)(va + (size_t)i * g + 4), sizeof(float), cudaMemcpyDeviceToHost));
    ck_assert(out[0] == 2.5f && out[1] == 2.5f && out[2] == 2.5f && out[3] == 2.5f);
    CU_OK(cuMemUnmap(va, size));
    for (int i = 0; i < 4; i++)
        CU_OK(cuMemRelease(h[i]));
    CU_OK(cuMemRelease(hd));
    CU_OK(cuMemAddressFree(va, size));
}
END_TEST

START_TEST(test_host_located_refused)
{
    setenv("FTSIM_HOST_VMM", "0", 1);
    sim_test_register();
    RT_OK(cudaFree(0));
    int on = 1;
    CU_OK(cuDeviceGetAttribute(&on, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    ck_assert_int_eq(on, 0);
    CUmemAllocationProp hp = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {.type = CU_MEM_LOCATION_TYPE_HOST}};
    CUmemGenericAllocationHandle h;
    ck_assert_int_eq(cuMemCreate(&h, 2u << 20, &hp, 0), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

START_TEST(test_double_mapping_same_bytes)
{
    sim_test_register();
    RT_OK(cudaFree(0));
    size_t g = 2u << 20;
    CUmemGenericAllocationHandle h;
    CUdeviceptr a = map_phys(&h, g, 1);
    CUdeviceptr b;
    CU_OK(cuMemAddressReserve(&b, g, 0, 0, 0));
    CU_OK(cuMemMap(b, g, 0, h, 0));
    CUmemAccessDesc ad = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(cuMemSetAccess(b, g, &ad, 1));
    ck_assert(a != b);
    RT_OK(launch_fill((float *)a, 7.0f, 256, 0));
    float out[256];
    RT_OK(cudaMemcpy(out, (void *)b, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert(out[0] == 7.0f && out[255] == 7.0f);
    /* One physical allocation, counted once. */
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), g);
    /* Release while mapped keeps the memory until the last unmap. */
    CU_OK(cuMemRelease(h));
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), g);
    CU_OK(cuMemUnmap(a, g));
    RT_OK(cudaMemcpy(out, (void *)b, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert(out[10] == 7.0f);
    CU_OK(cuMemUnmap(b, g));
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 0);
    CU_OK(cuMemAddressFree(a, g));
    CU_OK(cuMemAddressFree(b, g));
}
END_TEST

START_TEST(test_vmm_validation_and_granularity)
{
    setenv("FTSIM_VMM_GRANULARITY", "4MiB", 1);
    RT_OK(cudaFree(0));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t g = 0;
    CU_OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    ck_assert_uint_eq(g, 4u << 20);
    CUmemGenericAllocationHandle h;
    ck_assert_int_eq(cuMemCreate(&h, 2u << 20, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemCreate(&h, g, &prop, 0));
    CUdeviceptr va;
    CU_OK(cuMemAddressReserve(&va, 2 * g, 0, 0, 0));
    ck_assert_uint_eq(va % g, 0);
    ck_assert_int_eq(cuMemMap(va + 4096, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  /* misaligned */
    /* A part of an allocation: refused, as by the H100's driver. */
    CUmemGenericAllocationHandle two;
    CU_OK(cuMemCreate(&two, 2 * g, &prop, 0));
    ck_assert_int_eq(cuMemMap(va, g, 0, two, 0), CUDA_ERROR_NOT_SUPPORTED);
    ck_assert_int_eq(cuMemMap(va, g, g, two, 0), CUDA_ERROR_NOT_SUPPORTED);
    CU_OK(cuMemRelease(two));
    CU_OK(cuMemMap(va, g, 0, h, 0));
    ck_assert_int_eq(cuMemMap(va, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  /* already mapped */
    CUdeviceptr base;
    size_t size;
    ck_assert_int_eq(cuMemGetAddressRange(&base, &size, va), CUDA_ERROR_NOT_FOUND);  /* as on the H200 */
    CUmemAccessDesc ad = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    ck_assert_int_eq(cuMemSetAccess(va, 2 * g, &ad, 1), CUDA_ERROR_INVALID_VALUE);  /* half unmapped */
    ck_assert_int_eq(cuMemAddressFree(va, 2 * g), CUDA_ERROR_INVALID_VALUE);        /* still mapped */
    CUmemGenericAllocationHandle h2;
    CU_OK(cuMemRetainAllocationHandle(&h2, (void *)va));
    ck_assert_uint_eq(h2, h);
    CU_OK(cuMemRelease(h2));
    CU_OK(cuMemUnmap(va, g));
    CU_OK(cuMemAddressFree(va, 2 * g));
    CU_OK(cuMemRelease(h));
    ck_assert_int_eq(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
}
END_TEST

/* Thousands of physical allocations, as a shim slicing its budget in 2 MiB chunks
 * makes: no descriptor or mapping limit gets in the way, and all memory comes back. */
START_TEST(test_many_vmm_allocations)
{
    enum { N = 3000 };
    RT_OK(cudaFree(0));
    size_t g = 2u << 20;
    static CUmemGenericAllocationHandle h[N];
    CUdeviceptr va;
    CU_OK(cuMemAddressReserve(&va, (size_t)N * g, 0, 0, 0));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemAccessDesc ad = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                          .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int i = 0; i < N; i++) {
        CU_OK(cuMemCreate(&h[i], g, &prop, 0));
        CU_OK(cuMemMap(va + (size_t)i * g, g, 0, h[i], 0));
        CU_OK(cuMemSetAccess(va + (size_t)i * g, g, &ad, 1));
        CU_OK(cuMemRelease(h[i]));
    }
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), (size_t)N * g);
    /* Each chunk is its own memory. */
    int one = 1, two = 2, out;
    RT_OK(cudaMemcpy((void *)va, &one, sizeof one, cudaMemcpyHostToDevice));
    RT_OK(cudaMemcpy((void *)(va + (size_t)(N - 1) * g), &two, sizeof two, cudaMemcpyHostToDevice));
    RT_OK(cudaMemcpy(&out, (void *)va, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert_int_eq(out, 1);
    CU_OK(cuMemUnmap(va, (size_t)N * g));  /* whole mappings, in one call */
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 0);
    /* Freed physical ranges are reused, zeroed (punched out). */
    CU_OK(cuMemCreate(&h[0], g, &prop, 0));
    CU_OK(cuMemMap(va, g, 0, h[0], 0));
    CU_OK(cuMemSetAccess(va, g, &ad, 1));
    RT_OK(cudaMemcpy(&out, (void *)va, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert_int_eq(out, 0);
}
END_TEST

START_TEST(test_freed_memory_faults)
{
    sim_test_register();
    void *p;
    RT_OK(cudaMalloc(&p, 4096));
    RT_OK(launch_touch(p, 100, 0));
    RT_OK(cudaDeviceSynchronize());
    RT_OK(cudaFree(p));
    RT_OK(launch_touch(p, 100, 0));
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
}
END_TEST

START_TEST(test_overrun_hits_guard_page)
{
    sim_test_register();
    void *p;
    RT_OK(cudaMalloc(&p, 4096));
    RT_OK(launch_touch(p, 4096, 0));
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
}
END_TEST

START_TEST(test_pointer_attributes)
{
    void *d, *pinned;
    static char pageable[4096];
    RT_OK(cudaMalloc(&d, 1000));
    RT_OK(cudaHostAlloc(&pinned, 1000, cudaHostAllocDefault));
    struct cudaPointerAttributes at;
    RT_OK(cudaPointerGetAttributes(&at, (char *)d + 10));
    ck_assert_int_eq(at.type, cudaMemoryTypeDevice);
    ck_assert_int_eq(at.device, 0);
    ck_assert_ptr_eq(at.devicePointer, (char *)d + 10);
    RT_OK(cudaPointerGetAttributes(&at, pinned));
    ck_assert_int_eq(at.type, cudaMemoryTypeHost);
    RT_OK(cudaPointerGetAttributes(&at, pageable));
    ck_assert_int_eq(at.type, cudaMemoryTypeUnregistered);

    CUdeviceptr base;
    size_t size;
    CU_OK(cuMemGetAddressRange((CUdeviceptr *)&base, &size, (CUdeviceptr)d + 500));
    ck_assert_uint_eq(base, (CUdeviceptr)d);
    ck_assert_uint_eq(size, 1000);
    unsigned int mt;
    CU_OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)d));
    ck_assert_uint_eq(mt, CU_MEMORYTYPE_DEVICE);
    void *start;
    CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)d + 3));
    ck_assert_ptr_eq(start, d);
    ck_assert_int_eq(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)pageable),
                     CUDA_ERROR_INVALID_VALUE);
    CUcontext ctx, cur;
    CU_OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)d));
    CU_OK(cuCtxGetCurrent(&cur));
    ck_assert_ptr_eq(ctx, cur);
    RT_OK(cudaFreeHost(pinned));
}
END_TEST

START_TEST(test_host_register)
{
    enum { N = 3 * 4096 };
    char *buf = aligned_alloc(4096, N);
    RT_OK(cudaHostRegister(buf, N, cudaHostRegisterDefault));
    ck_assert_int_eq(cudaHostRegister(buf + 4096, 100, 0), cudaErrorHostMemoryAlreadyRegistered);
    struct cudaPointerAttributes at;
    RT_OK(cudaPointerGetAttributes(&at, buf + 5000));
    ck_assert_int_eq(at.type, cudaMemoryTypeHost);
    void *dp;
    RT_OK(cudaHostGetDevicePointer(&dp, buf, 0));
    ck_assert_ptr_eq(dp, buf);
    RT_OK(cudaHostUnregister(buf));
    ck_assert_int_eq(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
    RT_OK(cudaPointerGetAttributes(&at, buf));
    ck_assert_int_eq(at.type, cudaMemoryTypeUnregistered);
    free(buf);
}
END_TEST

START_TEST(test_devices_have_own_capacity)
{
    setenv("FTSIM_DEVICE_COUNT", "2", 1);
    setenv("FTSIM_DEVICE_MEM", "100MiB", 1);
    int n;
    RT_OK(cudaGetDeviceCount(&n));
    ck_assert_int_eq(n, 2);
    void *a, *b;
    RT_OK(cudaMalloc(&a, 80u << 20));
    RT_OK(cudaSetDevice(1));
    RT_OK(cudaMalloc(&b, 80u << 20));  /* device 1 has its own 100 MiB */
    struct cudaPointerAttributes at;
    RT_OK(cudaPointerGetAttributes(&at, b));
    ck_assert_int_eq(at.device, 1);
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 80u << 20);
    ck_assert_uint_eq(simcudaDeviceMemUsed(1), 80u << 20);
    ck_assert_int_eq(cudaSetDevice(2), cudaErrorInvalidDevice);
    int dev;
    RT_OK(cudaGetDevice(&dev));
    ck_assert_int_eq(dev, 1);
}
END_TEST

START_TEST(test_stream_ordered_free)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    static volatile int flag;
    void *p;
    RT_OK(cudaMallocAsync(&p, 1u << 20, s));
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 1u << 20);
    RT_OK(launch_sleepy(&flag, 50000, s));  /* the free waits behind this */
    RT_OK(launch_fill(p, 1.0f, 100, s));
    RT_OK(cudaFreeAsync(p, s));
    ck_assert_int_eq(cudaFreeAsync(p, s), cudaErrorInvalidValue);  /* double free */
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 1u << 20);          /* not yet executed */
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 0);
    /* Default pool path. */
    cudaMemPool_t pool;
    RT_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
    RT_OK(cudaMallocFromPoolAsync(&p, 4096, pool, s));
    cuuint64_t used = 0;
    RT_OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    ck_assert_uint_eq(used, 4096);
    RT_OK(cudaFreeAsync(p, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(launch_touch(p, 0, s));
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
}
END_TEST

/* Host code touching unmapped device memory is not device work: the simulator's
 * handler passes the fault on and the process dies of SIGSEGV, as it would on a GPU
 * machine (the test expects the signal). */
START_TEST(test_host_fault_is_not_swallowed)
{
    sim_test_register();
    void *p;
    RT_OK(cudaMalloc(&p, 4096));
    RT_OK(launch_touch(p, 0, 0));
    RT_OK(cudaDeviceSynchronize());
    RT_OK(cudaFree(p));
    /* Under a sanitizer its handler reports the fault, which the test expects: kept out
     * of make check's output, where it would read as a failure. */
    int null = open("/dev/null", O_WRONLY);
    ck_assert_int_ge(null, 0);
    ck_assert_int_eq(dup2(null, STDERR_FILENO), STDERR_FILENO);
    *(volatile char *)p = 1;
}
END_TEST

Suite *sim_mem_suite(void)
{
    Suite *s = suite_create("sim_mem");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_malloc_accounting_and_free_restores);
    tcase_add_test(tc, test_capacity_oom);
    tcase_add_test(tc, test_copy_roundtrip);
    tcase_add_test(tc, test_unmapped_access_is_sticky_illegal_address);
    tcase_add_test(tc, test_access_before_set_access_faults);
    tcase_add_test(tc, test_peer_access_to_mappings);
    tcase_add_test(tc, test_no_peer_access_refuses_grants);
    tcase_add_test(tc, test_access_after_set_access_works);
    tcase_add_test(tc, test_double_mapping_same_bytes);
    tcase_add_test(tc, test_host_located_memory);
    tcase_add_test(tc, test_host_located_refused);
    tcase_add_test(tc, test_vmm_validation_and_granularity);
    tcase_add_test(tc, test_many_vmm_allocations);
    tcase_add_test(tc, test_freed_memory_faults);
    tcase_add_test(tc, test_overrun_hits_guard_page);
    tcase_add_test(tc, test_pointer_attributes);
    tcase_add_test(tc, test_host_register);
    tcase_add_test(tc, test_devices_have_own_capacity);
    tcase_add_test(tc, test_stream_ordered_free);
#if defined(__SANITIZE_ADDRESS__)
    /* The handler before the simulator's is the sanitizer's: it reports the fault and
     * exits with its exit code. */
    tcase_add_exit_test(tc, test_host_fault_is_not_swallowed, 1);
#elif defined(__SANITIZE_THREAD__)
    tcase_add_exit_test(tc, test_host_fault_is_not_swallowed, 66);
#else
    tcase_add_test_raise_signal(tc, test_host_fault_is_not_swallowed, SIGSEGV);
#endif
    suite_add_tcase(s, tc);
    return s;
}

/* check_sim_fault.c - fault injection (FTSIM_FAIL_* and simcudaInjectFault) and the
 * handling of bad FTSIM_ values. */
#include "sim_test.h"

START_TEST(test_fail_alloc_once)
{
    setenv("FTSIM_FAIL_ALLOC", "2", 1);
    void *a, *b, *c;
    RT_OK(cudaMalloc(&a, 100));
    ck_assert_int_eq(cudaMalloc(&b, 100), cudaErrorMemoryAllocation);
    RT_OK(cudaMalloc(&c, 100));
    RT_OK(cudaMalloc(&b, 100));
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 3 * 4096);
}
END_TEST

START_TEST(test_fail_alloc_persist)
{
    setenv("FTSIM_FAIL_ALLOC", "2", 1);
    setenv("FTSIM_FAIL_PERSIST", "1", 1);
    void *a, *b;
    RT_OK(cudaMalloc(&a, 100));
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(cudaMalloc(&b, 100), cudaErrorMemoryAllocation);
    /* Every kind of device allocation counts. */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    ck_assert_int_eq(cuMemCreate(&h, 2u << 20, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
    ck_assert_int_eq(cudaMallocAsync(&b, 100, 0), cudaErrorMemoryAllocation);
    /* Host allocations are another kind: unaffected. */
    void *hp;
    RT_OK(cudaMallocHost(&hp, 100));
}
END_TEST

START_TEST(test_fail_alloc_counts_vmm_and_async)
{
    setenv("FTSIM_FAIL_ALLOC", "3", 1);
    RT_OK(cudaFree(0));
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    void *p;
    CU_OK(cuMemCreate(&h, 2u << 20, &prop, 0));     /* 1 */
    RT_OK(cudaMallocAsync(&p, 100, 0));             /* 2 */
    CUdeviceptr d;
    ck_assert_int_eq(cuMemAlloc(&d, 100), CUDA_ERROR_OUT_OF_MEMORY);  /* 3 */
    CU_OK(cuMemAlloc(&d, 100));                     /* 4 */
}
END_TEST

START_TEST(test_fail_host_alloc)
{
    setenv("FTSIM_FAIL_HOST_ALLOC", "1", 1);
    void *p;
    ck_assert_int_eq(cudaHostAlloc(&p, 4096, 0), cudaErrorMemoryAllocation);
    RT_OK(cudaHostAlloc(&p, 4096, 0));
    /* Device allocations are unaffected; registrations count as host allocations. */
    void *d;
    RT_OK(cudaMalloc(&d, 16));
    ck_assert_int_eq(simcudaInjectFault(SIMCUDA_FAULT_HOST_ALLOC, 1, 0), 0);
    static char buf[8192];
    ck_assert_int_eq(cudaHostRegister(buf, sizeof buf, 0), cudaErrorMemoryAllocation);
    RT_OK(cudaHostRegister(buf, sizeof buf, 0));
}
END_TEST

START_TEST(test_fail_copy)
{
    setenv("FTSIM_FAIL_COPY", "2", 1);
    static char h[1000];
    void *d;
    RT_OK(cudaMalloc(&d, sizeof h));
    RT_OK(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice));
    ck_assert_int_eq(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, 0), cudaErrorUnknown);
    /* Not sticky: the next copy and sync succeed. */
    RT_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    RT_OK(cudaDeviceSynchronize());
    /* The driver path counts too. */
    ck_assert_int_eq(simcudaInjectFault(SIMCUDA_FAULT_COPY, 1, 0), 0);
    ck_assert_int_eq(cuMemcpyHtoD((CUdeviceptr)d, h, sizeof h), CUDA_ERROR_UNKNOWN);
    CU_OK(cuMemcpyHtoD((CUdeviceptr)d, h, sizeof h));
}
END_TEST

START_TEST(test_fail_event)
{
    cudaEvent_t e;
    ck_assert_int_eq(simcudaInjectFault(SIMCUDA_FAULT_EVENT, 1, 0), 0);
    ck_assert_int_eq(cudaEventCreate(&e), cudaErrorMemoryAllocation);
    RT_OK(cudaEventCreate(&e)); /* once: the next one is made */
    RT_OK(cudaEventDestroy(e));
    CUevent ce;
    ck_assert_int_eq(simcudaInjectFault(SIMCUDA_FAULT_EVENT, 1, 0), 0);
    ck_assert_int_eq(cuEventCreate(&ce, 0), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuEventCreate(&ce, 0));
    CU_OK(cuEventDestroy(ce));
}
END_TEST

START_TEST(test_inject_fault_api)
{
    void *p;
    RT_OK(cudaMalloc(&p, 16));
    ck_assert_int_eq(simcudaInjectFault(SIMCUDA_FAULT_ALLOC, 2, 1), 0);
    RT_OK(cudaMalloc(&p, 16));  /* count restarts at the call: this is the 1st */
    ck_assert_int_eq(cudaMalloc(&p, 16), cudaErrorMemoryAllocation);
    ck_assert_int_eq(cudaMalloc(&p, 16), cudaErrorMemoryAllocation);
    ck_assert_int_eq(simcudaInjectFault(SIMCUDA_FAULT_ALLOC, 0, 0), 0);  /* disarm */
    RT_OK(cudaMalloc(&p, 16));
    ck_assert_int_eq(simcudaInjectFault((simcuda_fault_t)7, 1, 0), -1);
    ck_assert_int_eq(simcudaInjectFault(SIMCUDA_FAULT_COPY, -1, 0), -1);
}
END_TEST

/* SQLite-style: fail the 1st, 2nd, ... allocation of an operation until it completes;
 * here the operation is "allocate 5 buffers, freeing on failure". */
START_TEST(test_oom_loop)
{
    int completed_at = 0;
    for (int n = 1; n <= 10 && !completed_at; n++) {
        ck_assert_int_eq(simcudaInjectFault(SIMCUDA_FAULT_ALLOC, n, 0), 0);
        void *p[5] = {0};
        int ok = 1;
        for (int i = 0; i < 5 && ok; i++)
            ok = cudaMalloc(&p[i], 1000) == cudaSuccess;
        for (int i = 0; i < 5; i++)
            if (p[i])
                RT_OK(cudaFree(p[i]));
        ck_assert_uint_eq(simcudaDeviceMemUsed(0), 0);
        if (ok)
            completed_at = n;
    }
    ck_assert_int_eq(completed_at, 6);
}
END_TEST

START_TEST(test_bad_env_value_falls_back)
{
    setenv("FTSIM_DEVICE_MEM", "lots", 1);
    setenv("FTSIM_H2D_GBPS", "-3", 1);
    setenv("FTSIM_DEVICE_COUNT", "2", 1);
    stderr_capture_begin();
    size_t fr, total;
    cudaError_t e = cudaMemGetInfo(&fr, &total);
    const char *err = stderr_capture_end();
    RT_OK(e);
    ck_assert_uint_eq(total, 8ull << 30);
    ck_assert_ptr_nonnull(strstr(err, "FTSIM_DEVICE_MEM='lots'"));
    ck_assert_ptr_nonnull(strstr(err, "FTSIM_H2D_GBPS='-3'"));
    ck_assert_int_eq(count_lines_with(err, "\n"), 2);  /* one line each */
    int n;
    RT_OK(cudaGetDeviceCount(&n));
    ck_assert_int_eq(n, 2);  /* the good variable still applies */
}
END_TEST

START_TEST(test_size_suffixes)
{
    setenv("FTSIM_DEVICE_MEM", "1536 KiB", 1);
    size_t fr, total;
    RT_OK(cudaMemGetInfo(&fr, &total));
    ck_assert_uint_eq(total, 1536u * 1024);
}
END_TEST

START_TEST(test_size_bytes)
{
    setenv("FTSIM_DEVICE_MEM", "123456789", 1);
    size_t fr, total;
    RT_OK(cudaMemGetInfo(&fr, &total));
    ck_assert_uint_eq(total, 123456789u);
}
END_TEST

START_TEST(test_size_decimal_gb)
{
    setenv("FTSIM_DEVICE_MEM", "2GB", 1);
    size_t fr, total;
    RT_OK(cudaMemGetInfo(&fr, &total));
    ck_assert_uint_eq(total, 2000000000u);
}
END_TEST

Suite *sim_fault_suite(void)
{
    Suite *s = suite_create("sim_fault");
    TCase *tc = tcase_create("fault");
    tcase_add_test(tc, test_fail_alloc_once);
    tcase_add_test(tc, test_fail_alloc_persist);
    tcase_add_test(tc, test_fail_alloc_counts_vmm_and_async);
    tcase_add_test(tc, test_fail_host_alloc);
    tcase_add_test(tc, test_fail_copy);
    tcase_add_test(tc, test_fail_event);
    tcase_add_test(tc, test_inject_fault_api);
    tcase_add_test(tc, test_oom_loop);
    tcase_add_test(tc, test_bad_env_value_falls_back);
    tcase_add_test(tc, test_size_suffixes);
    tcase_add_test(tc, test_size_bytes);
    tcase_add_test(tc, test_size_decimal_gb);
    suite_add_tcase(s, tc);
    return s;
}

/* check_sim_clock.c - the virtual clock: exact copy durations from the configured
 * bandwidths, FIFO engines, copy/compute overlap, host time advancing only on waits. */
#include "sim_test.h"

/* 1 MB at 10 GB/s plus 1 us latency: 101000 ns. */
#define MB 1000000u
static void set_clock_env(void)
{
    setenv("FTSIM_H2D_GBPS", "10", 1);
    setenv("FTSIM_D2H_GBPS", "20", 1);
    setenv("FTSIM_PAGEABLE_GBPS", "2", 1);
    setenv("FTSIM_D2D_GBPS", "100", 1);
    setenv("FTSIM_COPY_LATENCY_NS", "1000", 1);
}

static float elapsed_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = -1;
    RT_OK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

START_TEST(test_pinned_h2d_exact)
{
    set_clock_env();
    void *h, *d;
    RT_OK(cudaMallocHost(&h, MB));
    RT_OK(cudaMalloc(&d, MB));
    cudaStream_t s;
    cudaEvent_t a, b;
    RT_OK(cudaStreamCreate(&s));
    RT_OK(cudaEventCreate(&a));
    RT_OK(cudaEventCreate(&b));
    RT_OK(cudaEventRecord(a, s));
    RT_OK(cudaMemcpyAsync(d, h, MB, cudaMemcpyHostToDevice, s));
    RT_OK(cudaEventRecord(b, s));
    ck_assert_uint_eq(simcudaHostNow(), 0);        /* the host has not waited yet */
    ck_assert_uint_eq(simcudaVirtualNow(), 101000);
    RT_OK(cudaEventSynchronize(b));
    ck_assert_uint_eq(simcudaHostNow(), 101000);
    ck_assert_float_eq_tol(elapsed_ms(a, b), 0.101f, 1e-6f);
}
END_TEST

START_TEST(test_pageable_vs_pinned)
{
    set_clock_env();
    void *pinned, *d;
    char *pageable = malloc(MB);
    memset(pageable, 1, MB);
    RT_OK(cudaMallocHost(&pinned, MB));
    RT_OK(cudaMalloc(&d, MB));
    RT_OK(cudaMemcpy(d, pageable, MB, cudaMemcpyHostToDevice));  /* 1000 + 500000 */
    ck_assert_uint_eq(simcudaHostNow(), 501000);
    RT_OK(cudaMemcpy(d, pinned, MB, cudaMemcpyHostToDevice));    /* 1000 + 100000 */
    ck_assert_uint_eq(simcudaHostNow(), 602000);
    RT_OK(cudaMemcpy(pinned, d, MB, cudaMemcpyDeviceToHost));    /* 1000 + 50000 at 20 GB/s */
    ck_assert_uint_eq(simcudaHostNow(), 653000);
    RT_OK(cudaMemcpy(pageable, d, MB, cudaMemcpyDeviceToHost));  /* pageable again */
    ck_assert_uint_eq(simcudaHostNow(), 1154000);
    /* A registered range counts as pinned. */
    RT_OK(cudaHostRegister(pageable, MB, 0));
    RT_OK(cudaMemcpy(d, pageable, MB, cudaMemcpyHostToDevice));
    ck_assert_uint_eq(simcudaHostNow(), 1255000);
    free(pageable);
}
END_TEST

START_TEST(test_defaults_h200)
{
    /* Defaults: 55 GB/s pinned, 7.7 GB/s pageable, 2 us latency. */
    void *pinned, *d;
    RT_OK(cudaMallocHost(&pinned, 55 * MB));
    RT_OK(cudaMalloc(&d, 55 * MB));
    RT_OK(cudaMemcpy(d, pinned, 55 * MB, cudaMemcpyHostToDevice));
    ck_assert_uint_eq(simcudaHostNow(), 1000000 + 2000);
    char *pageable = malloc(77 * 100000);
    RT_OK(cudaMemcpy(d, pageable, 77 * 100000, cudaMemcpyHostToDevice));
    ck_assert_uint_eq(simcudaHostNow(), 1002000 + 1000000 + 2000);
    free(pageable);
}
END_TEST

/* A copy and a kernel on two streams overlap; on one stream they add up. */
START_TEST(test_copy_compute_overlap)
{
    set_clock_env();
    sim_test_register();
    void *h, *d;
    RT_OK(cudaMallocHost(&h, MB));
    RT_OK(cudaMalloc(&d, MB));
    cudaStream_t s1, s2;
    RT_OK(cudaStreamCreate(&s1));
    RT_OK(cudaStreamCreate(&s2));
    RT_OK(cudaMemcpyAsync(d, h, MB, cudaMemcpyHostToDevice, s1));
    RT_OK(launch_spin(80000, s2));
    RT_OK(cudaDeviceSynchronize());
    ck_assert_uint_eq(simcudaHostNow(), 101000);  /* max(101000, 80000) */
    RT_OK(cudaMemcpyAsync(d, h, MB, cudaMemcpyHostToDevice, s1));
    RT_OK(launch_spin(80000, s1));
    RT_OK(cudaDeviceSynchronize());
    ck_assert_uint_eq(simcudaHostNow(), 101000 + 181000);
}
END_TEST

/* One engine per kind, FIFO: two H2D copies on two streams serialise; an H2D and a
 * D2H run side by side; two kernels on two streams serialise. */
START_TEST(test_fifo_engines)
{
    set_clock_env();
    sim_test_register();
    void *h, *h2, *d, *d2;
    RT_OK(cudaMallocHost(&h, MB));
    RT_OK(cudaMallocHost(&h2, MB));
    RT_OK(cudaMalloc(&d, MB));
    RT_OK(cudaMalloc(&d2, MB));
    cudaStream_t s1, s2;
    cudaEvent_t e0, e1, e2;
    RT_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    RT_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    RT_OK(cudaEventCreate(&e0));
    RT_OK(cudaEventCreate(&e1));
    RT_OK(cudaEventCreate(&e2));
    RT_OK(cudaEventRecord(e0, s1));
    RT_OK(cudaMemcpyAsync(d, h, MB, cudaMemcpyHostToDevice, s1));
    RT_OK(cudaEventRecord(e1, s1));
    RT_OK(cudaMemcpyAsync(d2, h2, MB, cudaMemcpyHostToDevice, s2));
    RT_OK(cudaEventRecord(e2, s2));
    RT_OK(cudaDeviceSynchronize());
    ck_assert_float_eq_tol(elapsed_ms(e0, e1), 0.101f, 1e-6f);
    ck_assert_float_eq_tol(elapsed_ms(e0, e2), 0.202f, 1e-6f);  /* queued behind the first */

    uint64_t t = simcudaHostNow();
    RT_OK(cudaMemcpyAsync(d, h, MB, cudaMemcpyHostToDevice, s1));   /* 101000 on H2D */
    RT_OK(cudaMemcpyAsync(h2, d2, MB, cudaMemcpyDeviceToHost, s2)); /* 51000 on D2H */
    RT_OK(cudaDeviceSynchronize());
    ck_assert_uint_eq(simcudaHostNow() - t, 101000);

    t = simcudaHostNow();
    RT_OK(launch_spin(30000, s1));
    RT_OK(launch_spin(30000, s2));
    RT_OK(cudaDeviceSynchronize());
    ck_assert_uint_eq(simcudaHostNow() - t, 60000);  /* one compute engine */
}
END_TEST

START_TEST(test_host_time_advances_only_on_waits)
{
    sim_test_register();
    cudaStream_t s;
    cudaEvent_t e;
    RT_OK(cudaStreamCreate(&s));
    RT_OK(cudaEventCreate(&e));
    RT_OK(launch_spin(1000000, s));
    RT_OK(cudaEventRecord(e, s));
    RT_OK(launch_spin(500000, s));
    ck_assert_uint_eq(simcudaHostNow(), 0);
    ck_assert_uint_eq(simcudaVirtualNow(), 1500000);
    RT_OK(cudaEventSynchronize(e));
    ck_assert_uint_eq(simcudaHostNow(), 1000000);
    /* Work enqueued now starts no earlier than the host's time. */
    cudaStream_t s2;
    RT_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    RT_OK(launch_spin(10, s2));  /* compute engine is busy until 1500000 */
    RT_OK(cudaStreamSynchronize(s2));
    ck_assert_uint_eq(simcudaHostNow(), 1500010);
}
END_TEST

START_TEST(test_wait_event_in_virtual_time)
{
    set_clock_env();
    sim_test_register();
    void *h, *d;
    RT_OK(cudaMallocHost(&h, MB));
    RT_OK(cudaMalloc(&d, MB));
    cudaStream_t s1, s2;
    cudaEvent_t ev;
    RT_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    RT_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    RT_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    RT_OK(launch_spin(1000000, s1));
    RT_OK(cudaEventRecord(ev, s1));
    RT_OK(cudaStreamWaitEvent(s2, ev, 0));
    RT_OK(cudaMemcpyAsync(d, h, MB, cudaMemcpyHostToDevice, s2));
    RT_OK(cudaStreamSynchronize(s2));
    ck_assert_uint_eq(simcudaHostNow(), 1101000);
}
END_TEST

START_TEST(test_legacy_stream_in_virtual_time)
{
    set_clock_env();
    sim_test_register();
    void *h, *d;
    RT_OK(cudaMallocHost(&h, MB));
    RT_OK(cudaMalloc(&d, MB));
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    RT_OK(launch_spin(500000, s));
    RT_OK(cudaMemcpy(d, h, MB, cudaMemcpyHostToDevice));  /* legacy: after s's kernel */
    ck_assert_uint_eq(simcudaHostNow(), 601000);
}
END_TEST

START_TEST(test_d2d_and_memset_on_compute_engine)
{
    set_clock_env();
    sim_test_register();
    void *a, *b;
    RT_OK(cudaMalloc(&a, MB));
    RT_OK(cudaMalloc(&b, MB));
    cudaStream_t s1, s2;
    RT_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    RT_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    RT_OK(launch_spin(5000, s1));
    RT_OK(cudaMemcpyAsync(b, a, MB, cudaMemcpyDeviceToDevice, s2));  /* 1000 + 10000, after the kernel */
    RT_OK(cudaMemsetAsync(a, 0, MB, s2));                           /* another 11000 */
    RT_OK(cudaDeviceSynchronize());
    ck_assert_uint_eq(simcudaHostNow(), 27000);
    /* A synchronous D2D copy does not block the host (as on a GPU). */
    RT_OK(launch_spin(1000000, s1));
    RT_OK(cudaMemcpy(b, a, MB, cudaMemcpyDeviceToDevice));
    ck_assert_uint_eq(simcudaHostNow(), 27000);
}
END_TEST

/* Timing is computed at enqueue: real scheduling (slow workers, threads) cannot
 * change it. */
START_TEST(test_deterministic_under_time_scale)
{
    set_clock_env();
    setenv("FTSIM_TIME_SCALE", "0.2", 1);
    sim_test_register();
    /* Each direction its own buffers: the streams are not ordered with one another. */
    void *h[2], *d[2];
    for (int i = 0; i < 2; i++) {
        RT_OK(cudaMallocHost(&h[i], MB));
        RT_OK(cudaMalloc(&d[i], MB));
    }
    cudaStream_t s[3];
    for (int i = 0; i < 3; i++)
        RT_OK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    for (int k = 0; k < 3; k++) {
        RT_OK(cudaMemcpyAsync(d[0], h[0], MB, cudaMemcpyHostToDevice, s[0]));  /* 101000 each */
        RT_OK(launch_spin(70000, s[1]));
        RT_OK(cudaMemcpyAsync(h[1], d[1], MB, cudaMemcpyDeviceToHost, s[2]));  /* 51000 each */
    }
    RT_OK(cudaDeviceSynchronize());
    ck_assert_uint_eq(simcudaHostNow(), 303000);
}
END_TEST

Suite *sim_clock_suite(void)
{
    Suite *s = suite_create("sim_clock");
    TCase *tc = tcase_create("clock");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_pinned_h2d_exact);
    tcase_add_test(tc, test_pageable_vs_pinned);
    tcase_add_test(tc, test_defaults_h200);
    tcase_add_test(tc, test_copy_compute_overlap);
    tcase_add_test(tc, test_fifo_engines);
    tcase_add_test(tc, test_host_time_advances_only_on_waits);
    tcase_add_test(tc, test_wait_event_in_virtual_time);
    tcase_add_test(tc, test_legacy_stream_in_virtual_time);
    tcase_add_test(tc, test_d2d_and_memset_on_compute_engine);
    tcase_add_test(tc, test_deterministic_under_time_scale);
    suite_add_tcase(s, tc);
    return s;
}

/* check_sim_stream.c - streams really run asynchronously, in order, with events,
 * cross-stream waits and the legacy default stream's implicit ordering. */
#include "sim_test.h"

/* A launch returns before its kernel ran; synchronize waits for it. */
START_TEST(test_launch_is_asynchronous)
{
    sim_test_register();
    static volatile int flag;
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    double t0 = real_ms();
    RT_OK(launch_sleepy(&flag, 200000, s));
    ck_assert(real_ms() - t0 < 100);
    ck_assert_int_eq(__atomic_load_n(&flag, __ATOMIC_SEQ_CST), 0);  /* the kernel sets it */
    ck_assert_int_eq(cudaStreamQuery(s), cudaErrorNotReady);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);  /* NotReady is no error */
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(__atomic_load_n(&flag, __ATOMIC_SEQ_CST), 1);
    ck_assert(real_ms() - t0 >= 190);
    RT_OK(cudaStreamQuery(s));
}
END_TEST

/* FTSIM_TIME_SCALE makes every operation take real time in proportion. */
START_TEST(test_time_scale_slows_workers)
{
    setenv("FTSIM_TIME_SCALE", "1", 1);
    sim_test_register();
    double t0 = real_ms();
    RT_OK(launch_spin(150000000ull, 0));  /* 150 ms virtual */
    ck_assert(real_ms() - t0 < 75);
    ck_assert_int_eq(cudaStreamQuery(0), cudaErrorNotReady);
    RT_OK(cudaDeviceSynchronize());
    ck_assert(real_ms() - t0 >= 145);
}
END_TEST

START_TEST(test_fifo_order_in_stream)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    static volatile int flag;
    RT_OK(launch_sleepy(&flag, 30000, s));
    for (int i = 1; i <= 20; i++)
        RT_OK(launch_log(i, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 20);
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(g_log[i], i + 1);
}
END_TEST

START_TEST(test_cross_stream_wait_event)
{
    sim_test_register();
    cudaStream_t a, b;
    cudaEvent_t ev;
    RT_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    RT_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    RT_OK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    static volatile int flag;
    static int seen;
    RT_OK(launch_sleepy(&flag, 100000, a));
    RT_OK(cudaEventRecord(ev, a));
    RT_OK(cudaStreamWaitEvent(b, ev, 0));
    RT_OK(launch_readflag(&flag, &seen, b));
    RT_OK(cudaStreamSynchronize(b));
    ck_assert_int_eq(seen, 2);  /* b's kernel ran after a's: it saw flag == 1 */
}
END_TEST

/* Without the wait the second stream does not wait: the waits are what orders. */
START_TEST(test_streams_are_independent_without_wait)
{
    sim_test_register();
    cudaStream_t a, b;
    RT_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    RT_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    static volatile int flag;
    static int seen;
    RT_OK(launch_sleepy(&flag, 200000, a));
    RT_OK(launch_readflag(&flag, &seen, b));
    RT_OK(cudaStreamSynchronize(b));
    ck_assert_int_eq(seen, 1);
    RT_OK(cudaDeviceSynchronize());
}
END_TEST

/* The legacy default stream waits for blocking streams and they wait for it;
 * non-blocking streams are exempt. */
START_TEST(test_legacy_default_stream)
{
    sim_test_register();
    cudaStream_t blocking, nonblocking;
    RT_OK(cudaStreamCreate(&blocking));
    RT_OK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
    static volatile int f1, f2;
    static int seen_legacy, seen_blocking, seen_nb;
    /* blocking stream work, then the legacy stream must wait for it */
    RT_OK(launch_sleepy(&f1, 100000, blocking));
    RT_OK(launch_readflag(&f1, &seen_legacy, 0));
    /* legacy work, then a blocking stream waits for it, a non-blocking one does not */
    RT_OK(launch_sleepy(&f2, 150000, 0));
    RT_OK(launch_readflag(&f2, &seen_blocking, blocking));
    RT_OK(launch_readflag(&f2, &seen_nb, nonblocking));
    RT_OK(cudaStreamSynchronize(nonblocking));
    ck_assert_int_eq(seen_nb, 1);
    /* The legacy stream is not idle while a blocking stream is busy (H200). */
    RT_OK(cudaDeviceSynchronize());
    RT_OK(launch_sleepy(&f1, 100000, blocking));
    ck_assert_int_eq(cudaStreamQuery(0), cudaErrorNotReady);
    RT_OK(cudaDeviceSynchronize());
    RT_OK(cudaStreamQuery(0));
    ck_assert_int_eq(seen_legacy, 2);
    ck_assert_int_eq(seen_blocking, 2);
}
END_TEST

/* cudaMemcpy is synchronous and ordered after blocking streams' work. */
START_TEST(test_sync_memcpy_waits)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    float *d;
    RT_OK(cudaMalloc((void **)&d, 4096));
    static volatile int flag;
    RT_OK(launch_sleepy(&flag, 100000, s));
    RT_OK(launch_fill(d, 9.0f, 1024, s));
    float h[1024] = {0};
    RT_OK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
    ck_assert(h[0] == 9.0f && h[1023] == 9.0f);
}
END_TEST

/* cudaMemcpyAsync from pageable memory snapshots the source at the call; from
 * pinned memory the copy reads the source when it runs. */
START_TEST(test_async_copy_pageable_snapshot)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    static int pageable[1024];
    int *pinned;
    RT_OK(cudaMallocHost((void **)&pinned, sizeof pageable));
    int *d1, *d2;
    RT_OK(cudaMalloc((void **)&d1, sizeof pageable));
    RT_OK(cudaMalloc((void **)&d2, sizeof pageable));
    for (int i = 0; i < 1024; i++)
        pageable[i] = pinned[i] = 1;
    static volatile int flag;
    RT_OK(launch_sleepy(&flag, 100000, s));  /* the copies wait behind this */
    RT_OK(cudaMemcpyAsync(d1, pageable, sizeof pageable, cudaMemcpyHostToDevice, s));
    RT_OK(cudaMemcpyAsync(d2, pinned, sizeof pageable, cudaMemcpyHostToDevice, s));
    for (int i = 0; i < 1024; i++)
        pageable[i] = pinned[i] = 2;
    RT_OK(cudaStreamSynchronize(s));
    int out[1024];
    RT_OK(cudaMemcpy(out, d1, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert_int_eq(out[0], 1);
    ck_assert_int_eq(out[1023], 1);
    RT_OK(cudaMemcpy(out, d2, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert_int_eq(out[0], 2);
}
END_TEST

/* An async copy to pageable memory completes before the call returns. */
START_TEST(test_async_d2h_to_pageable_blocks)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    float *d;
    RT_OK(cudaMalloc((void **)&d, 4096));
    static volatile int flag;
    RT_OK(launch_sleepy(&flag, 80000, s));
    RT_OK(launch_fill(d, 4.0f, 1024, s));
    static float h[1024];
    RT_OK(cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s));
    ck_assert(h[0] == 4.0f);
}
END_TEST

START_TEST(test_cuda_free_synchronizes)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    static volatile int flag;
    void *d;
    RT_OK(cudaMalloc(&d, 4096));
    RT_OK(launch_sleepy(&flag, 100000, s));
    RT_OK(cudaFree(d));
    ck_assert_int_eq(flag, 1);
}
END_TEST

START_TEST(test_events)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    cudaEvent_t a, b, nt, never;
    RT_OK(cudaEventCreate(&a));
    RT_OK(cudaEventCreate(&b));
    RT_OK(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming));
    RT_OK(cudaEventCreate(&never));
    static volatile int flag;
    RT_OK(cudaEventQuery(never));  /* never recorded: complete */
    RT_OK(cudaEventRecord(a, s));
    RT_OK(launch_sleepy(&flag, 100000, s));
    RT_OK(cudaEventRecord(b, s));
    RT_OK(cudaEventRecord(nt, s));
    ck_assert_int_eq(cudaEventQuery(b), cudaErrorNotReady);
    float ms;
    ck_assert_int_eq(cudaEventElapsedTime(&ms, a, b), cudaErrorNotReady);
    RT_OK(cudaEventSynchronize(b));
    ck_assert_int_eq(flag, 1);
    RT_OK(cudaEventQuery(b));
    RT_OK(cudaEventElapsedTime(&ms, a, b));
    ck_assert_float_eq_tol(ms, 100.0f, 1e-3f);  /* the sleepy kernel costs 100 ms virtual */
    ck_assert_int_eq(cudaEventElapsedTime(&ms, a, nt), cudaErrorInvalidResourceHandle);
    ck_assert_int_eq(cudaEventElapsedTime(&ms, a, never), cudaErrorInvalidResourceHandle);
    RT_OK(cudaEventDestroy(a));
    ck_assert_int_eq(cudaEventRecord(a, s), cudaErrorInvalidResourceHandle);
}
END_TEST

START_TEST(test_destroyed_stream_completes_work)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    static volatile int flag;
    RT_OK(launch_sleepy(&flag, 50000, s));
    RT_OK(cudaStreamDestroy(s));
    ck_assert_int_eq(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
    RT_OK(cudaDeviceSynchronize());
    ck_assert_int_eq(flag, 1);
}
END_TEST

static void host_fn(void *p)
{
    int *v = p;
    pthread_mutex_lock(&g_log_lock);
    g_log[g_nlog++] = *v;
    pthread_mutex_unlock(&g_log_lock);
}

START_TEST(test_host_func_in_order)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    static int hundred = 100;
    RT_OK(launch_log(1, s));
    RT_OK(cudaLaunchHostFunc(s, host_fn, &hundred));
    RT_OK(launch_log(2, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 3);
    ck_assert_int_eq(g_log[1], 100);
    ck_assert_int_eq(g_log[2], 2);
}
END_TEST

START_TEST(test_device_sync_waits_all_streams)
{
    sim_test_register();
    static volatile int f[4];
    cudaStream_t s[4];
    for (int i = 0; i < 4; i++) {
        RT_OK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
        RT_OK(launch_sleepy(&f[i], 30000 + 10000 * (unsigned)i, s[i]));
    }
    RT_OK(cudaDeviceSynchronize());
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(f[i], 1);
}
END_TEST

START_TEST(test_never_capturing)
{
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
    RT_OK(cudaStreamIsCapturing(s, &st));
    ck_assert_int_eq(st, cudaStreamCaptureStatusNone);
    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    RT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    ck_assert_int_eq(m, cudaStreamCaptureModeGlobal);
    RT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    ck_assert_int_eq(m, cudaStreamCaptureModeRelaxed);
}
END_TEST

START_TEST(test_per_thread_default_stream)
{
    sim_test_register();
    static volatile int flag;
    static int seen;
    RT_OK(launch_sleepy(&flag, 50000, cudaStreamPerThread));
    RT_OK(launch_readflag(&flag, &seen, cudaStreamPerThread));
    RT_OK(cudaStreamSynchronize(cudaStreamPerThread));
    ck_assert_int_eq(seen, 2);
    unsigned long long id1, id2;
    RT_OK(cudaStreamGetId(cudaStreamPerThread, &id1));
    RT_OK(cudaStreamGetId(0, &id2));
    ck_assert(id1 != id2);
}
END_TEST

/* Many host threads, each with its own stream: allocation, copies, kernels. */
static void *worker(void *arg)
{
    intptr_t id = (intptr_t)arg;
    int bad = 0;
    cudaStream_t s;
    bad |= cudaStreamCreate(&s) != cudaSuccess;
    for (int it = 0; it < 20 && !bad; it++) {
        float *d;
        float *h;
        size_t n = 1000 + (size_t)id * 10;
        bad |= cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess;
        bad |= cudaMallocHost((void **)&h, n * sizeof(float)) != cudaSuccess;
        if (bad)
            break;
        float v = (float)(id * 100 + it);
        bad |= launch_fill(d, v, n, s) != cudaSuccess;
        bad |= cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s) != cudaSuccess;
        bad |= cudaStreamSynchronize(s) != cudaSuccess;
        bad |= h[0] != v || h[n - 1] != v;
        bad |= cudaFree(d) != cudaSuccess;
        bad |= cudaFreeHost(h) != cudaSuccess;
    }
    bad |= cudaStreamDestroy(s) != cudaSuccess;
    return (void *)(intptr_t)bad;
}

START_TEST(test_multithreaded_streams)
{
    sim_test_register();
    RT_OK(cudaFree(0));
    pthread_t th[6];
    for (intptr_t i = 0; i < 6; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker, (void *)i), 0);
    for (int i = 0; i < 6; i++) {
        void *r;
        pthread_join(th[i], &r);
        ck_assert_int_eq((int)(intptr_t)r, 0);
    }
    ck_assert_uint_eq(simcudaDeviceMemUsed(0), 0);
}
END_TEST

Suite *sim_stream_suite(void)
{
    Suite *s = suite_create("sim_stream");
    TCase *tc = tcase_create("stream");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_launch_is_asynchronous);
    tcase_add_test(tc, test_time_scale_slows_workers);
    tcase_add_test(tc, test_fifo_order_in_stream);
    tcase_add_test(tc, test_cross_stream_wait_event);
    tcase_add_test(tc, test_streams_are_independent_without_wait);
    tcase_add_test(tc, test_legacy_default_stream);
    tcase_add_test(tc, test_sync_memcpy_waits);
    tcase_add_test(tc, test_async_copy_pageable_snapshot);
    tcase_add_test(tc, test_async_d2h_to_pageable_blocks);
    tcase_add_test(tc, test_cuda_free_synchronizes);
    tcase_add_test(tc, test_events);
    tcase_add_test(tc, test_destroyed_stream_completes_work);
    tcase_add_test(tc, test_host_func_in_order);
    tcase_add_test(tc, test_device_sync_waits_all_streams);
    tcase_add_test(tc, test_never_capturing);
    tcase_add_test(tc, test_per_thread_default_stream);
    tcase_add_test(tc, test_multithreaded_streams);
    suite_add_tcase(s, tc);
    return s;
}

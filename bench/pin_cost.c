/* pin_cost.c - what pinning host memory costs, and whether it holds up another
 * thread's CUDA calls: the question behind a saved profile's second start, whose
 * streamed weights (9.3 GB in 162 allocations of about 57 MB) need pinned host stores.
 * For N stores of 57 MiB (argument 1, default 40):
 *   alloc     cudaHostAlloc each;
 *   fault     posix_memalign (4 KiB pages) and a memset of each, no CUDA call;
 *   register  cudaHostRegister of those, already faulted;
 *   fault2m / register2m  the same 2 MiB aligned with madvise(MADV_HUGEPAGE);
 * in seconds and GB/s. Then the host time of a trivial CUDA call (cudaStreamQuery on
 * the legacy stream) on the main thread, alone and while another thread pins (alloc,
 * then register of faulted memory): median, most, and the sum of calls over 1 ms. A
 * diagnostic for bench/RESULTS.md, not a test.
 *
 *   cc -O2 -I/usr/local/cuda/include bench/pin_cost.c -L/usr/local/cuda/lib64 -lcudart -lpthread -o pin_cost
 *   ./pin_cost [N]
 */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define STORE (57ull << 20)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int n_stores = 40;

static void report(const char *what, double s)
{
    printf("%-12s %8.3f s  %6.2f GB/s\n", what, s, (double)n_stores * STORE / s / 1e9);
}

static void **fault(size_t align, int huge)
{
    void **p = calloc((size_t)n_stores, sizeof *p);
    for (int i = 0; i < n_stores; i++) {
        if (posix_memalign(&p[i], align, STORE) != 0)
            exit(1);
        if (huge)
            madvise(p[i], STORE, MADV_HUGEPAGE);
        memset(p[i], 0, STORE);
    }
    return p;
}

static void reg(void **p)
{
    for (int i = 0; i < n_stores; i++)
        if (cudaHostRegister(p[i], STORE, cudaHostRegisterDefault) != cudaSuccess)
            printf("register %d failed\n", i);
}

static void unreg(void **p)
{
    for (int i = 0; i < n_stores; i++) {
        cudaHostUnregister(p[i]);
        free(p[i]);
    }
    free(p);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static volatile int busy;

static void *pinner(void *arg)
{
    int kind = *(int *)arg;
    if (kind == 0) {
        void **h = calloc((size_t)n_stores, sizeof *h);
        for (int i = 0; i < n_stores; i++)
            cudaHostAlloc(&h[i], STORE, cudaHostAllocDefault);
        busy = 0;
        for (int i = 0; i < n_stores; i++)
            cudaFreeHost(h[i]);
        free(h);
    } else {
        void **p = fault(4096, 0);
        busy = 2; /* faulted: the main thread starts timing now */
        reg(p);
        busy = 0;
        unreg(p);
    }
    return NULL;
}

/* The main thread's cudaStreamQuery host time while `busy` (or for 2 s alone). */
static void probe(const char *what, int kind)
{
    static double t[200000];
    int n = 0;
    pthread_t th;
    if (kind >= 0) {
        busy = kind == 1 ? 1 : 2;
        pthread_create(&th, NULL, pinner, &kind);
        while (busy == 1)
            ;
    }
    double end = now() + 2.0;
    while (n < 200000 && (kind >= 0 ? busy != 0 : now() < end)) {
        double a = now();
        cudaStreamQuery(0);
        t[n++] = now() - a;
    }
    if (kind >= 0)
        pthread_join(th, NULL);
    double over = 0;
    for (int i = 0; i < n; i++)
        over += t[i] > 1e-3 ? t[i] : 0;
    qsort(t, (size_t)n, sizeof *t, cmp);
    printf("%-34s calls %6d  median %7.1f us  most %8.1f us  over 1 ms: %.3f s\n", what, n,
           n ? t[n / 2] * 1e6 : 0, n ? t[n - 1] * 1e6 : 0, over);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        n_stores = atoi(argv[1]);
    cudaFree(0);
    printf("%d stores of %llu MiB\n", n_stores, STORE >> 20);
    void **h = calloc((size_t)n_stores, sizeof *h);
    double t0 = now();
    for (int i = 0; i < n_stores; i++)
        cudaHostAlloc(&h[i], STORE, cudaHostAllocDefault);
    report("alloc", now() - t0);
    for (int i = 0; i < n_stores; i++)
        cudaFreeHost(h[i]);
    free(h);
    t0 = now();
    void **p = fault(4096, 0);
    report("fault", now() - t0);
    t0 = now();
    reg(p);
    report("register", now() - t0);
    unreg(p);
    t0 = now();
    p = fault(2u << 20, 1);
    report("fault2m", now() - t0);
    t0 = now();
    reg(p);
    report("register2m", now() - t0);
    unreg(p);
    probe("alone", -1);
    probe("beside cudaHostAlloc", 0);
    probe("beside cudaHostRegister (faulted)", 1);
    return 0;
}

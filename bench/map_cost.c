/* map_cost.c - host cost of what a FlexTensor load does to an address range:
 * cuMemMap of an existing physical allocation, cuMemSetAccess, and cuMemUnmap, for a
 * few sizes; then the same after peer access to every other GPU is enabled (as NCCL
 * does in a multi-GPU job); then with a host-to-device copy of 256 MiB in flight on
 * another stream at each round (as when the engine maps the next unit while the
 * previous one is copied in); then with a kernel spinning for about 5 ms instead (a
 * layer computing). Medians of 50 rounds, in microseconds. Last, whether another
 * thread's launches wait while one thread maps: a thread launching an empty kernel
 * (syncing every 64 launches, not timed), alone and while the main thread loads a
 * 106 MiB unit of five 20 MiB regions over and over (map, set access, unmap), as a
 * prefetching thread beside the application's would: the launch's host time, median,
 * 99th percentile and most. First of all, a unit of 53 pieces of one granule each (an
 * allocation served in pieces), end to end, each its own physical allocation: mapped
 * one by one, access set once over the run, then unmapped one call a piece, or in one
 * call over the run (whether the driver takes a range of several mappings). A
 * diagnostic for bench/RESULTS.md, not a test.
 *
 *   cc -O2 -I/usr/local/cuda/include bench/map_cost.c -L/usr/local/cuda/lib64 -lcuda -lpthread -o map_cost
 *   ./map_cost [device]
 */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x)                                                                            \
    do {                                                                                 \
        CUresult r_ = (x);                                                               \
        if (r_ != CUDA_SUCCESS) {                                                        \
            const char *s_ = NULL;                                                       \
            cuGetErrorString(r_, &s_);                                                   \
            fprintf(stderr, "map_cost: %s failed: %s\n", #x, s_ ? s_ : "?");            \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define ROUNDS 50

/* With copy_src set, each round starts a 256 MiB host-to-device copy on copy_stream
 * first and waits for it after the unmap. */
static void *copy_src;
static CUdeviceptr copy_dst;
static CUstream copy_stream;
#define COPY_BYTES (256u << 20)
/* With spin set instead, each round starts a kernel that spins for spin_cycles. */
static CUfunction spin;
static unsigned long long spin_cycles;

static const char spin_ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry spin(.param .u64 cycles)\n{\n"
    "  .reg .u64 %t0, %t1, %c, %d;\n  .reg .pred %p;\n"
    "  ld.param.u64 %c, [cycles];\n  mov.u64 %t0, %clock64;\n"
    "LOOP:\n  mov.u64 %t1, %clock64;\n  sub.u64 %d, %t1, %t0;\n"
    "  setp.lt.u64 %p, %d, %c;\n  @%p bra LOOP;\n  ret;\n}\n";

/* Physical memory on dev, as FlexTensor creates it; *gran its granularity. */
static CUmemAllocationProp device_prop(CUdevice dev, size_t *gran)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    *gran = 0;
    CK(cuMemGetAllocationGranularity(gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    return prop;
}

static void measure(CUdevice dev, size_t size, const char *label)
{
    size_t gran;
    CUmemAllocationProp prop = device_prop(dev, &gran);
    size = (size + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    CK(cuMemCreate(&h, size, &prop, 0));
    CK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    double map[ROUNDS], set[ROUNDS], unmap[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        if (copy_src != NULL)
            CK(cuMemcpyHtoDAsync(copy_dst, copy_src, COPY_BYTES, copy_stream));
        if (spin != NULL) {
            void *args[] = { &spin_cycles };
            CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, copy_stream, args, NULL));
        }
        double t0 = now_us();
        CK(cuMemMap(va, size, 0, h, 0));
        double t1 = now_us();
        CK(cuMemSetAccess(va, size, &acc, 1));
        double t2 = now_us();
        CK(cuMemsetD8(va, (unsigned char)i, 4096));
        CK(cuCtxSynchronize());
        double t3 = now_us();
        CK(cuMemUnmap(va, size));
        double t4 = now_us();
        if (copy_src != NULL || spin != NULL)
            CK(cuStreamSynchronize(copy_stream));
        map[i] = t1 - t0;
        set[i] = t2 - t1;
        unmap[i] = t4 - t3;
    }
    qsort(map, ROUNDS, sizeof *map, cmp);
    qsort(set, ROUNDS, sizeof *set, cmp);
    qsort(unmap, ROUNDS, sizeof *unmap, cmp);
    printf("%-22s %9.1f MiB  map %8.1f  set_access %8.1f  unmap %8.1f us (medians of %d)\n", label,
           size / 1048576.0, map[ROUNDS / 2], set[ROUNDS / 2], unmap[ROUNDS / 2], ROUNDS);
    CK(cuMemAddressFree(va, size));
    CK(cuMemRelease(h));
}

/* A unit of n pieces, as residency.c loads and unloads one: medians of ROUNDS. */
static void pieces(CUdevice dev, int n)
{
    size_t g;
    CUmemAllocationProp prop = device_prop(dev, &g);
    CUmemGenericAllocationHandle *h = calloc((size_t)n, sizeof *h);
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, (size_t)n * g, 0, 0, 0));
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    double create[ROUNDS], map[ROUNDS], set[ROUNDS], unmap_each[ROUNDS], unmap_run[ROUNDS];
    int run_ok = 1;
    for (int i = 0; i < ROUNDS; i++) {
        double t0 = now_us();
        for (int k = 0; k < n; k++)
            CK(cuMemCreate(&h[k], g, &prop, 0));
        double t1 = now_us();
        for (int k = 0; k < n; k++)
            CK(cuMemMap(va + (size_t)k * g, g, 0, h[k], 0));
        double t2 = now_us();
        CK(cuMemSetAccess(va, (size_t)n * g, &acc, 1));
        double t3 = now_us();
        CK(cuMemsetD8(va, (unsigned char)i, (size_t)n * g));
        CK(cuCtxSynchronize());
        double t4 = now_us(), t5;
        if (i % 2 == 0 || !run_ok) {
            for (int k = 0; k < n; k++)
                CK(cuMemUnmap(va + (size_t)k * g, g));
            t5 = now_us();
            unmap_each[i / 2] = t5 - t4;
        } else {
            CUresult rc = cuMemUnmap(va, (size_t)n * g);
            t5 = now_us();
            if (rc != CUDA_SUCCESS) {
                const char *s_ = NULL;
                cuGetErrorString(rc, &s_);
                printf("pieces: cuMemUnmap over %d mappings refused: %s\n", n, s_ ? s_ : "?");
                run_ok = 0;
                for (int k = 0; k < n; k++)
                    CK(cuMemUnmap(va + (size_t)k * g, g));
            }
            unmap_run[i / 2] = t5 - t4;
        }
        for (int k = 0; k < n; k++)
            CK(cuMemRelease(h[k]));
        create[i] = t1 - t0;
        map[i] = t2 - t1;
        set[i] = t3 - t2;
    }
    qsort(create, ROUNDS, sizeof *create, cmp);
    qsort(map, ROUNDS, sizeof *map, cmp);
    qsort(set, ROUNDS, sizeof *set, cmp);
    qsort(unmap_each, ROUNDS / 2, sizeof *unmap_each, cmp);
    qsort(unmap_run, ROUNDS / 2, sizeof *unmap_run, cmp);
    printf("pieces: %d x %zu KiB: create %.1f  map %.1f  set_access (one call) %.1f  unmap one a "
           "piece %.1f  unmap in one call %.1f%s us (medians)\n", n, g >> 10, create[ROUNDS / 2],
           map[ROUNDS / 2], set[ROUNDS / 2], unmap_each[ROUNDS / 4], unmap_run[ROUNDS / 4],
           run_ok ? "" : " (refused)");
    CK(cuMemAddressFree(va, (size_t)n * g));
    free(h);
}

/* What the driver takes of one physical allocation mapped in parts, as residency.c maps
 * a run of a unit's pieces (phys.c): each call's result, then the cost of one mapping
 * of n granules against n mappings of one. */
static void one_allocation(CUdevice dev, int n)
{
    size_t g;
    CUmemAllocationProp prop = device_prop(dev, &g);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    CK(cuMemCreate(&h, (size_t)n * g, &prop, 0));
    CK(cuMemAddressReserve(&va, (size_t)n * g, 0, 0, 0));
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    struct { const char *what; size_t at, off, len; } t[] = {
        { "whole", 0, 0, (size_t)n * g },
        { "first half, offset 0", 0, 0, (size_t)(n / 2) * g },
        { "second half at its offset", (size_t)(n / 2) * g, (size_t)(n / 2) * g, (size_t)(n - n / 2) * g },
        { "one granule at offset 1", 0, g, g },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        CUresult m = cuMemMap(va + t[i].at, t[i].len, t[i].off, h, 0);
        CUresult a = m == CUDA_SUCCESS ? cuMemSetAccess(va + t[i].at, t[i].len, &acc, 1) : m;
        CUresult w = a == CUDA_SUCCESS ? cuMemsetD8(va + t[i].at, 1, t[i].len) : a;
        if (w == CUDA_SUCCESS)
            w = cuCtxSynchronize();
        CUresult u = m == CUDA_SUCCESS ? cuMemUnmap(va + t[i].at, t[i].len) : m;
        printf("one allocation of %d granules, map %s: map %d, access %d, write %d, unmap %d\n", n, t[i].what,
               (int)m, (int)a, (int)w, (int)u);
    }
    /* Two mappings of it side by side, unmapped in one call. */
    CUresult m1 = cuMemMap(va, (size_t)(n / 2) * g, 0, h, 0);
    CUresult m2 = cuMemMap(va + (size_t)(n / 2) * g, (size_t)(n - n / 2) * g, (size_t)(n / 2) * g, h, 0);
    CUresult a = m1 == CUDA_SUCCESS && m2 == CUDA_SUCCESS ? cuMemSetAccess(va, (size_t)n * g, &acc, 1) : m1;
    CUresult u = cuMemUnmap(va, (size_t)n * g);
    printf("one allocation, two mappings side by side: map %d %d, access over both %d, unmap over both %d\n", (int)m1,
           (int)m2, (int)a, (int)u);
    double map[ROUNDS], set[ROUNDS], unmap[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        double t0 = now_us();
        CK(cuMemMap(va, (size_t)n * g, 0, h, 0));
        double t1 = now_us();
        CK(cuMemSetAccess(va, (size_t)n * g, &acc, 1));
        double t2 = now_us();
        CK(cuMemUnmap(va, (size_t)n * g));
        double t3 = now_us();
        map[i] = t1 - t0;
        set[i] = t2 - t1;
        unmap[i] = t3 - t2;
    }
    qsort(map, ROUNDS, sizeof *map, cmp);
    qsort(set, ROUNDS, sizeof *set, cmp);
    qsort(unmap, ROUNDS, sizeof *unmap, cmp);
    printf("one allocation of %d granules in one mapping: map %.1f  set_access %.1f  unmap %.1f us (medians)\n", n,
           map[ROUNDS / 2], set[ROUNDS / 2], unmap[ROUNDS / 2]);
    CK(cuMemAddressFree(va, (size_t)n * g));
    CK(cuMemRelease(h));
}

/* --- launches beside mapping ------------------------------------------------------- */

#define LAUNCHES 20000
static CUcontext main_ctx;
static volatile int mapping_done;
static double lat[LAUNCHES];
static int n_lat;

static void *launcher(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(main_ctx));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    unsigned long long zero = 0;
    void *args[] = { &zero };
    for (int i = 0; i < LAUNCHES; i++) {
        double t0 = now_us();
        CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
        lat[i] = now_us() - t0;
        __atomic_store_n(&n_lat, i + 1, __ATOMIC_RELAXED);
        if (i % 64 == 63)
            CK(cuStreamSynchronize(s));
    }
    CK(cuStreamSynchronize(s));
    CK(cuStreamDestroy(s));
    return NULL;
}

static void launch_latency(CUdevice dev, int with_mapping)
{
    enum { REGIONS = 5 };
    size_t size = 20u << 20;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemGenericAllocationHandle h[REGIONS];
    CUdeviceptr va[REGIONS];
    for (int k = 0; k < REGIONS; k++) {
        CK(cuMemCreate(&h[k], size, &prop, 0));
        CK(cuMemAddressReserve(&va[k], size, 0, 0, 0));
    }
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    pthread_t t;
    n_lat = 0; /* before the thread starts: the loop below reads it */
    pthread_create(&t, NULL, launcher, NULL);
    int loads = 0;
    double t0 = now_us(), busy = 0;
    /* until the launcher is done: n_lat is read unsynchronised, as a progress hint */
    while (with_mapping && __atomic_load_n(&n_lat, __ATOMIC_RELAXED) < LAUNCHES - 1) {
        double a = now_us();
        for (int k = 0; k < REGIONS; k++)
            CK(cuMemMap(va[k], size, 0, h[k], 0));
        for (int k = 0; k < REGIONS; k++)
            CK(cuMemSetAccess(va[k], size, &acc, 1));
        for (int k = 0; k < REGIONS; k++)
            CK(cuMemUnmap(va[k], size));
        busy += now_us() - a;
        loads++;
    }
    pthread_join(t, NULL);
    double wall = now_us() - t0;
    qsort(lat, n_lat, sizeof *lat, cmp);
    printf("launches %-16s median %6.1f  p99 %8.1f  max %9.1f us (%d launches)", with_mapping ? "beside mapping" : "alone",
           lat[n_lat / 2], lat[n_lat * 99 / 100], lat[n_lat - 1], n_lat);
    if (with_mapping)
        printf("; %d loads of 5 x 20 MiB mapped, set and unmapped meanwhile, %.1f us each, %.0f%% of %.0f ms", loads,
               loads > 0 ? busy / loads : 0.0, 100.0 * busy / wall, wall / 1e3);
    printf("\n");
    for (int k = 0; k < REGIONS; k++) {
        CK(cuMemAddressFree(va[k], size));
        CK(cuMemRelease(h[k]));
    }
}

int main(int argc, char **argv)
{
    int d = argc > 1 ? atoi(argv[1]) : 0, n = 0;
    CK(cuInit(0));
    CK(cuDeviceGetCount(&n));
    CUdevice dev;
    CK(cuDeviceGet(&dev, d));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    main_ctx = ctx;
    pieces(dev, 53);
    one_allocation(dev, 53);
    size_t sizes[] = { 2u << 20, 32u << 20, 196u << 20 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        measure(dev, sizes[i], "alone");
    int peers = 0;
    for (int o = 0; o < n; o++) {
        if (o == d)
            continue;
        CUdevice od;
        int can = 0;
        CK(cuDeviceGet(&od, o));
        CK(cuDeviceCanAccessPeer(&can, dev, od));
        if (!can)
            continue;
        CUcontext octx;
        CK(cuDevicePrimaryCtxRetain(&octx, od));
        CK(cuCtxEnablePeerAccess(octx, 0));
        peers++;
    }
    printf("%d device(s), peer access enabled to %d\n", n, peers);
    if (peers > 0)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            measure(dev, sizes[i], "peer access on");
    CK(cuMemAllocHost(&copy_src, COPY_BYTES));
    CK(cuMemAlloc(&copy_dst, COPY_BYTES));
    CK(cuStreamCreate(&copy_stream, CU_STREAM_NON_BLOCKING));
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        measure(dev, sizes[i], "copy in flight");
    copy_src = NULL;
    CUmodule mod;
    int clock_khz = 0;
    CK(cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    if (cuModuleLoadData(&mod, spin_ptx) != CUDA_SUCCESS || cuModuleGetFunction(&spin, mod, "spin") != CUDA_SUCCESS) {
        printf("kernel in flight: the spin kernel does not load here (skipped)\n");
        return 0;
    }
    spin_cycles = (unsigned long long)clock_khz * 5; /* about 5 ms */
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        measure(dev, sizes[i], "kernel in flight");
    launch_latency(dev, 0);
    launch_latency(dev, 1);
    launch_latency(dev, 0);
    return 0;
}

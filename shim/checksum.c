/* checksum.c - the device checksum (core/checksum.h) and what uses it outside the
 * residency engine: discovery's content hash of candidate regions at iteration
 * boundaries (hash_regions, with a sampled copy back as the fallback), FT_SPILL's sum
 * of an allocation it moves out (spill_sum), and FT_SHM's position-independent content
 * sum of a unit (content_sum_*).
 *
 * Owns: ck, the kernel, its stream and the per-unit sum buffers (set up once, under
 * pthread_once: checksum_kernel_ready, checksum_available); dh, the batch buffers of
 * discovery's hashes, which discovery's snapshots and FT_SPILL's sums share: both run
 * under res.lock once anything is spilled, so never at once. The residency engine
 * issues its unit checksums itself (residency.c) through checksum_launch. It calls
 * cuda.c and device.c only: where FT_SPILL holds a region's bytes comes in
 * hash_regions's ctx (hash_source_t, from engine.c), and spill_out decides when
 * spill_sum runs (in discovery). */
#define _GNU_SOURCE
#include "shim/engine.h"

#include <unistd.h>

/* --- the content hash discovery asks for at iteration boundaries ----------------- */

static unsigned hash_failures;

static int hash_failed(uint64_t base, cudaError_t err)
{
    hash_failures++;
    FT_LOG_CAPPED(FT_LOG_WARN, 3, "discovery: cannot read region %#llx to check its content "
                  "(cudaError %d); it is not treated as a weight",
                  (unsigned long long)base, (int)err);
    return -1;
}

/* The fallback where the device checksum cannot run (no JIT for its PTX, a size not a
 * whole number of words): up to 16 chunks copied back, each behind a sync, or read
 * where FT_SPILL holds them (`spilled`, the caller's). */
static int hash_sampled(uint64_t base, uint64_t size, uint64_t *out, spilled_fn spilled)
{
    static unsigned char buf[4096];
    cudaMemcpy_fn_t copy = REAL(cudaMemcpy);
    cudaDeviceSynchronize_fn_t sync = REAL(cudaDeviceSynchronize);
    if (copy == NULL || sync == NULL)
        return hash_failed(base, cudaErrorSharedObjectSymbolNotFound);
    cudaError_t err = sync();
    if (err != cudaSuccess)
        return hash_failed(base, err);
    /* Up to 16 chunks spread over the region, the first and the last included: a
     * weight is read, never written, so any write shows in most chunks. */
    uint64_t h = 1469598103934665603ull;
    size_t chunk = size < sizeof buf ? (size_t)size : sizeof buf;
    /* Hashed a word at a time (a multiply-xor mix): discovery hashes every candidate
     * at each snapshot, and a byte loop showed as half of discovery's instructions. */
    int n = size <= 16 * sizeof buf ? (int)((size + sizeof buf - 1) / sizeof buf) : 16;
    vmm_t *held = spilled(base);
    for (int i = 0; i < n; i++) {
        uint64_t off = n == 1 ? 0 : (size - chunk) * (uint64_t)i / (uint64_t)(n - 1);
        size_t len = size - off < chunk ? (size_t)(size - off) : chunk;
        if (held != NULL)
            memcpy(buf, (const char *)held->host + off, len);
        else
            err = copy(buf, (void *)(uintptr_t)(base + off), len, cudaMemcpyDeviceToHost);
        if (err != cudaSuccess)
            return hash_failed(base, err);
        size_t k = 0;
        for (; k + 8 <= len; k += 8) {
            uint64_t v;
            memcpy(&v, buf + k, 8);
            h = (h ^ v) * 0x9e3779b97f4a7c15ull;
            h ^= h >> 29;
        }
        for (; k < len; k++)
            h = (h ^ buf[k]) * 1099511628211ull;
    }
    *out = h;
    return 0;
}
ck_state_t ck;

/* Loads the kernel and makes its stream, once: discovery's first snapshot or the plan,
 * whichever comes first. */
static void checksum_kernel_init(void)
{
    typedef CUresult (*load_fn)(CUmodule *, const void *);
    typedef CUresult (*get_fn)(CUfunction *, CUmodule, const char *);
    typedef cudaError_t (*attr_fn)(int *, enum cudaDeviceAttr, int);
    typedef cudaError_t (*get_device_fn)(int *);
    load_fn load = (load_fn)ft_shim_driver_proc("cuModuleLoadData", 2000);
    get_fn get = (get_fn)ft_shim_driver_proc("cuModuleGetFunction", 2000);
    attr_fn attr = (attr_fn)own_rt("cudaDeviceGetAttribute");
    get_device_fn get_device = (get_device_fn)own_rt("cudaGetDevice");
    ck.launch = (launch_fn)ft_shim_driver_proc("cuLaunchKernel", 4000);
    if (load == NULL || get == NULL || ck.launch == NULL)
        return;
    CUmodule mod;
    CUresult rc = load(&mod, ft_checksum_ptx);
    if (rc == CUDA_SUCCESS)
        rc = get(&ck.fn, mod, FT_CHECKSUM_KERNEL);
    /* Without it, an eviction waits for the unit's sum on the host (residency.c). */
    if (rc == CUDA_SUCCESS && get(&ck.back_fn, mod, FT_COPY_BACK_KERNEL) != CUDA_SUCCESS)
        ck.back_fn = NULL;
    if (rc == CUDA_SUCCESS && own_stream(&ck.stream) != cudaSuccess)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
        ck.fn = NULL;
        FT_WARN("the device checksum kernel did not load (CUresult %d): discovery samples "
                "regions' content instead, and every evicted unit will be copied back to the host",
                (int)rc);
        return;
    }
    int dev = 0, sms = 0;
    if (get_device == NULL || get_device(&dev) != cudaSuccess || attr == NULL ||
        attr(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0)
        sms = 32;
    ck.blocks = (unsigned)sms * 4;
}

/* 1 when the checksum kernel can be launched. */
static int checksum_kernel_ready(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, checksum_kernel_init);
    return ck.fn != NULL;
}

/* Enqueues on ck.stream the checksum of the `words` 8-byte words at va, added to *out
 * (the kernel's parameters, core/checksum.h): as many blocks as the words fill, up to
 * ck.blocks. */
CUresult checksum_launch(uint64_t va, uint64_t words, uint64_t *out)
{
    return checksum_launch_salted(va, words, va / 8, out);
}

/* checksum_launch with the index of the first word given: FT_SHM's content sums salt
 * by a word's place in the shared segment, which is the same in every process, where
 * the device address is not. */
CUresult checksum_launch_salted(uint64_t va, uint64_t words, uint64_t salt, uint64_t *out)
{
    unsigned blocks = words / 256 + 1 < ck.blocks ? (unsigned)(words / 256 + 1) : ck.blocks;
    void *args[] = { &va, &words, &salt, &out };
    return own_launch(ck.launch, ck.fn, blocks, (CUstream)ck.stream, args);
}

/* Enqueues on `stream` the copy of the `words` words at src to dst (a host store's
 * device address) if *sum != expected (FT_COPY_BACK_KERNEL). */
CUresult copy_back_launch(cudaStream_t stream, uint64_t src, uint64_t words, const uint64_t *sum,
                          uint64_t expected, uint64_t dst)
{
    unsigned blocks = words / 256 + 1 < ck.blocks ? (unsigned)(words / 256 + 1) : ck.blocks;
    void *args[] = { &src, &words, &sum, &expected, &dst };
    return own_launch(ck.launch, ck.back_fn, blocks, (CUstream)stream, args);
}

/* The residency engine's sums, one per unit. */
static void checksum_init(void)
{
    int prev = managed_device_enter();
    size_t n = ft_disc_unit_count(disc);
    if (!checksum_kernel_ready()) {
        managed_device_leave(prev);
        return;
    }
    if (own_malloc((void **)&ck.dev, n * sizeof *ck.dev) != cudaSuccess ||
        own_host_alloc((void **)&ck.host, n * sizeof *ck.host) != cudaSuccess)
        FT_WARN("residency: no memory for the device checksum: every evicted unit will be copied "
                "back to the host");
    else
        ck.units = 1, ck.n = n;
    managed_device_leave(prev);
}

/* Room for n units' sums (res.lock held, at the switch): a plan made again after the
 * program freed the first plan's weights (reload.c) may have more units than the first.
 * 0; -1 when the memory cannot be had (the units past ck.n then write back at every
 * eviction: checksum_issue refuses them). */
int checksum_room(size_t n)
{
    if (!checksum_available() || n <= ck.n)
        return 0;
    uint64_t *dev = NULL, *host = NULL;
    int prev = managed_device_enter();
    int ok = own_malloc((void **)&dev, n * sizeof *dev) == cudaSuccess &&
             own_host_alloc((void **)&host, n * sizeof *host) == cudaSuccess;
    managed_device_leave(prev);
    if (!ok) {
        if (dev != NULL)
            REAL(cudaFree)(dev);
        FT_WARN("residency: no memory for the device checksum of %zu units: the units past %zu are copied "
                "back at every eviction", n, ck.n);
        return -1;
    }
    /* The old sums are read by no one now: the engine is not running. */
    REAL(cudaFree)(ck.dev);
    typedef cudaError_t (*free_host_fn)(void *);
    free_host_fn free_host = (free_host_fn)own_rt("cudaFreeHost");
    if (free_host != NULL)
        free_host(ck.host);
    ck.dev = dev;
    ck.host = host;
    ck.n = n;
    return 0;
}

/* Sets up the residency engine's checksums on first call; 1 when they can be used. */
int checksum_available(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, checksum_init);
    return ck.units;
}

/* --- discovery's content hash: the device checksum of every candidate region -------
 *
 * A snapshot's regions are summed on the checksum's stream behind one device sync and
 * read back together, one sync for the batch: on the H200, a copy and a sync for each
 * of 16 sampled chunks a region (hash_sampled, still the fallback) cost 5 ms a snapshot
 * for 40 regions. A spilled region (FT_SPILL) is summed on the host, with the same
 * function, so its hash does not depend on where its bytes are. */
typedef struct {
    uint64_t *dev, *host;     /* a batch's sums, FT_DISC_HASH_BATCH of them */
    int tried;
} dh_state_t;
static dh_state_t dh;

/* 1 when the kernel and dh's buffers are there (made on first call). Discovery's
 * snapshots and FT_SPILL's spill-time sums share them: both run under res.lock once
 * anything is spilled (engine_enter), so never at once. */
static int sums_ready(void)
{
    if (!dh.tried && checksum_kernel_ready()) {
        dh.tried = 1;
        if (own_malloc((void **)&dh.dev, FT_DISC_HASH_BATCH * sizeof *dh.dev) != cudaSuccess ||
            own_host_alloc((void **)&dh.host, FT_DISC_HASH_BATCH * sizeof *dh.host) != cudaSuccess)
            dh.dev = NULL;
    }
    return dh.dev != NULL;
}

static void hash_on_device(ft_disc_hash_req_t *q, size_t n, spilled_fn spilled);

/* Discovery's hash callback; ctx is a hash_source_t (engine.c's): where the bytes of
 * an allocation FT_SPILL holds in host memory are is spill.c's to say. */
void hash_regions(void *ctx, ft_disc_hash_req_t *q, size_t n)
{
    const hash_source_t *src = ctx;
    int prev = managed_device_enter();
    hash_on_device(q, n, src->spilled);
    managed_device_leave(prev);
}

/* FT_TEST_HASH_PAUSE_US: microseconds each region's hash waits first (tests only): a
 * snapshot then lasts long enough for other threads' frees to fall inside it. */
static unsigned hash_pause_us(void)
{
    static int us = -1; /* under discovery's lock, as every hash */
    if (us < 0) {
        const char *t = getenv("FT_TEST_HASH_PAUSE_US");
        us = t != NULL ? atoi(t) : 0;
        if (us < 0 || us > 1000000)
            us = 0;
    }
    return (unsigned)us;
}

static void hash_on_device(ft_disc_hash_req_t *q, size_t n, spilled_fn spilled)
{
    unsigned pause = hash_pause_us();
    cudaError_t err = REAL(cudaDeviceSynchronize)();
    int on_device = sums_ready() && n <= FT_DISC_HASH_BATCH;
    char summed[FT_DISC_HASH_BATCH] = { 0 }; /* 1: its sum comes from dh.dev[i] */
    if (on_device && err == cudaSuccess)
        err = REAL(cudaMemsetAsync)(dh.dev, 0, n * sizeof *dh.dev, ck.stream);
    for (size_t i = 0; i < n; i++) {
        /* A call that can enqueue launches holds off FT_SPILL's moves (engine_enter):
         * where the bytes are cannot change before the sums are read back. A region
         * another thread frees meanwhile is still where it was (spilled_at). */
        if (pause > 0)
            usleep(pause);
        vmm_t *v = spilled(q[i].base);
        uint64_t words = q[i].size / 8;
        q[i].failed = 0;
        if (err != cudaSuccess) {
            q[i].failed = hash_failed(q[i].base, err) != 0;
        } else if (!on_device || q[i].size % 8 != 0) {
            q[i].failed = hash_sampled(q[i].base, q[i].size, &q[i].hash, spilled) != 0;
        } else if (v != NULL && v->sum_ok && v->asked == q[i].size) {
            q[i].hash = v->sum;
        } else if (v != NULL) {
            q[i].hash = ft_checksum_host_parallel(v->host, words, q[i].base / 8);
            if (v->asked == q[i].size) { /* kept until its bytes change */
                v->sum = q[i].hash;
                v->sum_ok = 1;
            }
        } else {
            summed[i] = 1;
            if (checksum_launch(q[i].base, words, dh.dev + i) != CUDA_SUCCESS)
                err = cudaErrorLaunchFailure;
        }
    }
    if (on_device && err == cudaSuccess)
        err = own_copy_async(dh.host, dh.dev, n * sizeof *dh.host, cudaMemcpyDeviceToHost, ck.stream);
    if (on_device && err == cudaSuccess)
        err = REAL(cudaStreamSynchronize)(ck.stream);
    for (size_t i = 0; i < n; i++) {
        if (!summed[i])
            continue;
        if (err != cudaSuccess)
            q[i].failed = hash_failed(q[i].base, err) != 0;
        else
            q[i].hash = dh.host[i];
    }
}

/* The checksum of what FT_SPILL is about to copy out of v (res.lock held, the device
 * synchronised), summed on the device: a kernel at the device's read rate, small beside
 * the copy. spill_out asks for it in discovery, whose snapshots then need not read the
 * host copy (on the H200, summing the 9 GB spilled there on the host took 1.09 s a
 * snapshot). */
void spill_sum(vmm_t *v)
{
    v->sum_ok = 0;
    if (v->asked % 8 != 0 || !sums_ready())
        return;
    if (REAL(cudaMemsetAsync)(dh.dev, 0, sizeof *dh.dev, ck.stream) != cudaSuccess ||
        checksum_launch(v->va, v->asked / 8, dh.dev) != CUDA_SUCCESS ||
        own_copy_async(dh.host, dh.dev, sizeof *dh.dev, cudaMemcpyDeviceToHost, ck.stream) != cudaSuccess ||
        REAL(cudaStreamSynchronize)(ck.stream) != cudaSuccess)
        return;
    v->sum = dh.host[0];
    v->sum_ok = 1;
}

/* --- FT_SHM's content sum of a unit ------------------------------------------------
 *
 * A unit's streamed regions as they lie end to end in the shared segment, each word
 * salted by its index there: equal weights give equal sums in every process, whatever
 * their device addresses, and the host computes the same function over the segment's
 * bytes (ft_checksum_host, salt 0) to check them. Begin, add each region on the device,
 * end; a region FT_SPILL holds in host memory is summed there by the caller. In dh's
 * first slot, under res.lock like discovery's snapshots and FT_SPILL's sums. */
int content_sum_begin(void)
{
    if (!sums_ready())
        return -1;
    return REAL(cudaMemsetAsync)(dh.dev, 0, sizeof *dh.dev, ck.stream) == cudaSuccess ? 0 : -1;
}

int content_sum_add(uint64_t va, uint64_t words, uint64_t first_word)
{
    return checksum_launch_salted(va, words, first_word, dh.dev) == CUDA_SUCCESS ? 0 : -1;
}

int content_sum_end(uint64_t *sum)
{
    if (own_copy_async(dh.host, dh.dev, sizeof *dh.dev, cudaMemcpyDeviceToHost, ck.stream) != cudaSuccess ||
        REAL(cudaStreamSynchronize)(ck.stream) != cudaSuccess)
        return -1;
    *sum = dh.host[0];
    return 0;
}

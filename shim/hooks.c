/* hooks.c - what FlexTensor does in the interposed calls while it is active.
 *
 * Owns: the process's engine state (the region table, the discovery engine, the
 * kernel metadata cache, the virtual-memory backing of large allocations), profiling
 * and the plan, and the residency engine (the streamed units' host stores, their
 * loads and evictions, the device checksum that proves a unit unchanged, FT_SPILL's
 * budget before the plan and the allocation guard after it). Each part begins with a
 * section comment; docs/residency.md explains the engine's rules.
 *
 * Every hook runs with ft_intercept_depth raised, so the CUDA calls made here (and the
 * runtime's own calls into the driver) reach the real functions unobserved. The real
 * function of the intercepted call is the hook's first argument.
 *
 *  allocation  cudaMalloc of at least FT_VMM_MIN_BYTES is served from CUDA virtual
 *              memory (reserve, create, map, set access) so that a later phase can
 *              unmap it without moving its address (DESIGN.md invariant 1); smaller
 *              ones and every other allocator pass through. All become regions.
 *  launch      during discovery: the argument bytes (kernelParams with the layout
 *              from cuKernelGetParamInfo / cuFuncGetParamInfo, cached per handle, or
 *              the whole `extra` buffer) are scanned for region addresses, one level
 *              through small pointer arrays, and the launch is fed to discovery.
 *  copy, set   during discovery: the destination region is marked written.
 *  after the plan: every launch, copy and set is guarded (the units it touches are
 *              loaded first); allocations are held to the budget.
 */
#define _GNU_SOURCE
#include "shim/shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/hash.h"

#include "config/config.h"
#include "core/discovery.h"
#include "core/plan.h"
#include "core/profile.h"
#include "core/log.h"
#include "core/regions.h"
#include "core/scan.h"
#include "core/checksum.h"
#include "core/checksum_ptx.h"
#include "core/trace.h"
#include "core/vaspace.h"
#include "shim/flextensor.h"

/* Pointer arrays: regions this small (or a caching allocator's small-pool segment)
 * are read, PTR_PEEK_BYTES at the pointer, for device pointers one level down. */
#define PTR_PEEK_REGION_MAX (4u << 20)
#define PTR_PEEK_BYTES 512
#define MAX_PARAMS 256
#define PEEK_LAUNCHES 2

typedef CUresult (*kernel_param_info_fn)(CUkernel, size_t, size_t *, size_t *);
typedef CUresult (*func_param_info_fn)(CUfunction, size_t, size_t *, size_t *);
typedef CUresult (*kernel_name_fn)(const char **, CUkernel);
typedef CUresult (*func_name_fn)(const char **, CUfunction);
typedef cudaError_t (*get_kernel_fn)(cudaKernel_t *, const void *);

static struct {
    kernel_param_info_fn kernel_param_info;
    func_param_info_fn func_param_info;
    kernel_name_fn kernel_name;
    func_name_fn func_name;
    get_kernel_fn get_kernel;
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    /* The driver's query: the runtime's may leave cudaErrorNotReady for the
     * application's next cudaGetLastError. */
    CUresult (*event_query)(CUevent);
    CUresult (*can_access_peer)(int *, CUdevice, CUdevice);
    CUresult (*device_count)(int *);
    CUresult (*device_total_mem)(size_t *, CUdevice);
} drv;

/* Kernel metadata, per handle (CUkernel, CUfunction, or a runtime stub address). */
typedef struct {
    uint64_t key;
    char name[256];
    /* Pointer arrays are looked for in a kernel's first PEEK_LAUNCHES launches, and
     * further only while they keep finding some (a sync and a copy each time). */
    int peeks_left;
    unsigned launches;        /* counted only when tracing */
    int nparams;              /* -1: unknown, the kernelParams cannot be scanned */
    uint32_t size[MAX_PARAMS];
    /* Argument words that held garbage at some launch in discovery (core/scan.h): a
     * region address found only there does not make the guard load a unit. */
    ft_scan_junk_t junk;
    UT_hash_handle hh;
} kinfo_t;

/* A virtual-memory backed allocation. */
typedef struct {
    uint64_t va;
    size_t size;              /* rounded to the granularity */
    size_t asked;             /* the size the application asked for */
    CUmemGenericAllocationHandle handle;
    /* FT_SPILL, before the plan: the allocation lives in host memory (`host`, no
     * physical memory mapped) while `spilled`; `stamp` orders the last touches. */
    int spilled;
    void *host;
    uint64_t stamp;
    /* Discovery: the device checksum of its `asked` bytes, taken as it was spilled
     * (those of `host` since: only spill_out writes there). */
    int sum_ok;
    uint64_t sum;
    UT_hash_handle hh;
} vmm_t;

static ft_regions_t *regions;
static ft_disc_t *disc;
static int discovering;       /* relaxed: cleared once discovery is done */
/* The residency engine will never start (nothing streamed, or no plan to come): the
 * calls it would guard then skip even its entry count. */
static int engine_off;
static int profiling;         /* relaxed: set when discovery is done, cleared after */
static int managed_dev = -2; /* -2: not decided yet */
static pthread_rwlock_t kinfo_lock = PTHREAD_RWLOCK_INITIALIZER;
static kinfo_t *kinfos;
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static vmm_t *vmms;
/* Both found by the first allocations, which may come from several threads at once:
 * atomic (vmm_ready). */
static size_t vmm_granularity;
static int vmm_disabled;
static char **include_items, **exclude_items;
/* FT_VMM_MIN_SIZE: smaller allocations pass through (the 2 MiB granularity would waste
 * too much on them); 0 = none are served from virtual memory. */
static uint64_t vmm_min_bytes;
/* FT_VMM_RESERVE: address space reserved at a time (va_get). */
static uint64_t va_chunk;
static int profiling_iters;
static int log_diagnostics;
static const struct ft_config *cfgp; /* the process's configuration, alive forever */

static int checksum_available(void);

/* The plan chosen at the end of profiling (planning only: the residency engine that
 * carries it out comes next). */
static struct {
    int made, rc;
    ft_plan_input_t in;
    ft_plan_t out;
    uint64_t min_budget;
    uint64_t weight_bytes;    /* every unit's regions, in whole granules where mapped */
} plan;

/* The most bytes the region table held at once, from discovery's end to the plan:
 * the plan leaves room for the peak of non-weight memory, not only what is allocated
 * when it is made. */
static uint64_t peak_tracked;
/* What virtual-memory backed allocations hold beyond their asked-for sizes (mapped in
 * whole granules): the region table counts the asked-for sizes. */
static uint64_t vmm_pad;

/* Device memory held through the shim, FT_SPILL's allocations in host memory included:
 * the region table's bytes, virtual-memory backed ones in whole granules. */
static uint64_t device_bytes(void)
{
    return ft_regions_bytes(regions) + __atomic_load_n(&vmm_pad, __ATOMIC_RELAXED);
}

/* Device time of FT_SPILL's moves in and out (ns): their bytes at the measured copy
 * bandwidth, for the exit report. Profiling keeps them in the units' times: on the
 * H200 they made the passes of a 13.5 GB model 650 ms and its plan pessimistic
 * (docs/residency.md). */
static uint64_t spill_ns;

/* Profiling: CUDA events recorded before each unit's first launch and at the start of
 * the next pass, on the launching stream; read when a pass ends (a synchronisation,
 * allowed in this phase). The deciding lane's passes only (ft_disc_track). */
typedef cudaError_t (*event_create_fn)(cudaEvent_t *, unsigned int);
typedef cudaError_t (*event_record_fn)(cudaEvent_t, cudaStream_t);
typedef cudaError_t (*event_sync_fn)(cudaEvent_t);
typedef cudaError_t (*event_elapsed_fn)(float *, cudaEvent_t, cudaEvent_t);
typedef cudaError_t (*stream_wait_fn)(cudaStream_t, cudaEvent_t, unsigned int);
static struct {
    pthread_mutex_t lock;     /* launches of the deciding lane only, but the exit
                                 report may read while a launch writes */
    ft_prof_t *prof;
    size_t n;                 /* units */
    uint32_t *first;          /* each unit's first launch position in a pass */
    cudaEvent_t *ev;          /* n + 1: the last one marks the next pass's start */
    int *seen;                /* per unit: its event was recorded in this pass */
    /* CUPTI activity timing (ft_cupti_timing_*): the kernels of a profiled pass carry
     * the tag pass_seq << 20 | (unit + 1); unit times come from their GPU timestamps
     * when every unit has some, else from the events. */
    int cupti_timing;
    uint64_t pass_seq;
    int cur_unit;
    /* Per unit, FT_SPILL's moves during the pass (their device time at the measured
     * bandwidth, ns): synchronous, they stall the pass, and are taken out of the unit's
     * time (the plan would otherwise see them as compute). */
    uint64_t *moves_ns;
    uint64_t moves_out_ns;    /* all taken out, over the passes counted */
    ft_cupti_kernel_t *kern;
    size_t kern_cap;
    unsigned cupti_passes;    /* passes timed from activity records */
    int in_pass;
    uint64_t lane;            /* the thread whose pass is being timed */
    /* Passes other lanes began meanwhile, counted per lane: the timed lane went quiet
     * when one other lane began three. Counted together, three threads' forwards
     * reached three while the timed lane's own pass was under way (two other starts a
     * forward): every pass was abandoned, and profiling never ended. */
    struct {
        uint64_t lane;
        int starts;
    } foreign[8];
    int n_foreign;
    int off_record;           /* consecutive passes dropped for not following the record */
    unsigned epoch;           /* suspension epoch at the pass's start */
    event_create_fn create;
    event_record_fn record;
    event_sync_fn sync;
    event_elapsed_fn elapsed;
    stream_wait_fn wait;
} prof = { .lock = PTHREAD_MUTEX_INITIALIZER };
/* Suspensions asked for before profiling began (warm-up passes during discovery). */
static int early_suspends;

static uint64_t lane_id(void)
{
    return (uint64_t)pthread_self();
}

#define REAL(name) ((name##_fn_t)ft_shim_real(FT_FN_##name))

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

static int spilled_read(void *dst, uint64_t addr, size_t len);
static const void *spilled_host(uint64_t addr);
static vmm_t *spilled_vmm(uint64_t addr);
static int managed_device_enter(void);
static void sync_reaching_devices(void);
static void managed_device_leave(int prev);
static int managed_cu_device(CUdevice *dev);
static void hash_regions(void *ctx, ft_disc_hash_req_t *q, size_t n);

/* The fallback where the device checksum cannot run (no JIT for its PTX, a size not a
 * whole number of words): up to 16 chunks copied back, each behind a sync. */
static int hash_sampled(uint64_t base, uint64_t size, uint64_t *out)
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
    for (int i = 0; i < n; i++) {
        uint64_t off = n == 1 ? 0 : (size - chunk) * (uint64_t)i / (uint64_t)(n - 1);
        size_t len = size - off < chunk ? (size_t)(size - off) : chunk;
        if (!spilled_read(buf, base + off, len))
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

/* --- set-up ----------------------------------------------------------------------- */

static void resolve(void)
{
    /* Each with the CUDA version of the ABI this file calls (see ft_shim_driver_proc). */
    drv.kernel_param_info = (kernel_param_info_fn)ft_shim_driver_proc("cuKernelGetParamInfo", 12040);
    drv.func_param_info = (func_param_info_fn)ft_shim_driver_proc("cuFuncGetParamInfo", 12040);
    drv.kernel_name = (kernel_name_fn)ft_shim_driver_proc("cuKernelGetName", 12030);
    drv.func_name = (func_name_fn)ft_shim_driver_proc("cuFuncGetName", 12030);
    drv.ctx_get_device = ft_shim_driver_proc("cuCtxGetDevice", 2000);
    drv.granularity = ft_shim_driver_proc("cuMemGetAllocationGranularity", 10020);
    drv.reserve = ft_shim_driver_proc("cuMemAddressReserve", 10020);
    drv.address_free = ft_shim_driver_proc("cuMemAddressFree", 10020);
    drv.create = ft_shim_driver_proc("cuMemCreate", 10020);
    drv.release = ft_shim_driver_proc("cuMemRelease", 10020);
    drv.map = ft_shim_driver_proc("cuMemMap", 10020);
    drv.unmap = ft_shim_driver_proc("cuMemUnmap", 10020);
    drv.set_access = ft_shim_driver_proc("cuMemSetAccess", 10020);
    drv.event_query = ft_shim_driver_proc("cuEventQuery", 2000);
    drv.can_access_peer = ft_shim_driver_proc("cuDeviceCanAccessPeer", 4000);
    drv.device_count = ft_shim_driver_proc("cuDeviceGetCount", 2000);
    drv.device_total_mem = ft_shim_driver_proc("cuDeviceTotalMem", 3020);
    drv.get_kernel = (get_kernel_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaGetKernel");
}

/* Driver entry points are looked up once, on first need (libcuda is loaded by then:
 * the runtime loads it before any call we act on). */
static void resolve_driver(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, resolve);
}

static char **copy_list(const ft_config_list_t *l)
{
    char **v = calloc(l->n + 1, sizeof *v);
    for (size_t i = 0; v != NULL && i < l->n; i++)
        v[i] = strdup(l->items[i]);
    return v;
}

int ft_hooks_init(const struct ft_config *cfg)
{
    regions = ft_regions_new();
    if (regions == NULL)
        return -1;
    vmm_min_bytes = cfg->vmm_min_size;
    va_chunk = cfg->vmm_reserve;
    profiling_iters = cfg->profiling_iters;
    cfgp = cfg;
    log_diagnostics = cfg->log_diagnostics;
    include_items = copy_list(&cfg->include_patterns);
    exclude_items = copy_list(&cfg->exclude_patterns);
    ft_disc_params_t p = {
        .iters = cfg->discovery_iters,
        .marker_glob = cfg->iteration_marker[0] ? strdup(cfg->iteration_marker) : NULL,
        .hash = hash_regions,
        .include = include_items,
        .n_include = include_items ? cfg->include_patterns.n : 0,
        .exclude = exclude_items,
        .n_exclude = exclude_items ? cfg->exclude_patterns.n : 0,
    };
    disc = ft_disc_new(regions, &p);
    if (disc == NULL)
        return -1;
    __atomic_store_n(&discovering, !cfg->skip_discovery, __ATOMIC_RELAXED);
    /* Without discovery there is no plan, so no engine. */
    __atomic_store_n(&engine_off, cfg->skip_discovery, __ATOMIC_RELAXED);
    return 0;
}

/* --- kernel metadata ---------------------------------------------------------------- */

/* Metadata for a driver handle: a CUkernel (what nvcc-built code and cuBLAS pass) or a
 * CUfunction (cuModuleGetFunction). The measured H200 driver answers the cuFunc*
 * calls with 400 for a CUkernel, so the cuKernel* calls go first. */
static void fill_kinfo(kinfo_t *k, uint64_t handle)
{
    const char *name = NULL;
    size_t off, size;
    k->nparams = -1;
    if (drv.kernel_param_info != NULL &&
        drv.kernel_param_info((CUkernel)(uintptr_t)handle, 0, &off, &size) != CUDA_ERROR_INVALID_HANDLE) {
        int n = 0;
        while (n < MAX_PARAMS &&
               drv.kernel_param_info((CUkernel)(uintptr_t)handle, (size_t)n, &off, &size) == CUDA_SUCCESS)
            k->size[n++] = (uint32_t)size;
        k->nparams = n;
        if (drv.kernel_name != NULL)
            drv.kernel_name(&name, (CUkernel)(uintptr_t)handle);
    } else if (drv.func_param_info != NULL) {
        int n = 0;
        while (n < MAX_PARAMS &&
               drv.func_param_info((CUfunction)(uintptr_t)handle, (size_t)n, &off, &size) == CUDA_SUCCESS)
            k->size[n++] = (uint32_t)size;
        k->nparams = n;
        if (drv.func_name != NULL)
            drv.func_name(&name, (CUfunction)(uintptr_t)handle);
    }
    snprintf(k->name, sizeof k->name, "%s", name ? name : "?");
}

/* One-time work inside a launch -- a kernel's first sight (its name and parameter
 * layout from the driver) and a pointer-array peek (a stream sync and small copies) --
 * is timed whenever it happens and kept out of the sampled per-launch time
 * (report_launch_self), which is then what every launch pays. */
enum { ONCE_KERNEL, ONCE_PEEK, ONCE_COUNT };
static _Atomic uint64_t once_ns[ONCE_COUNT], once_n[ONCE_COUNT];
static __thread int launch_did_once; /* cleared when a sampled launch starts */
static uint64_t now_ns(void);

static void once_charge(int kind, uint64_t t0)
{
    atomic_fetch_add_explicit(&once_ns[kind], now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&once_n[kind], 1, memory_order_relaxed);
    launch_did_once = 1;
}

/* A kinfo is never freed: each thread keeps the ones it used last in a small
 * direct-mapped cache, which spares a launch the table's lock and lookup. */
#define KINFO_CACHE 16
static __thread struct {
    uint64_t key;
    kinfo_t *k;
} kinfo_cache[KINFO_CACHE];

/* key: the handle, or the runtime stub (then resolved through cudaGetKernel). */
static kinfo_t *kinfo_get(uint64_t key, int is_stub)
{
    unsigned slot = ft_hash_mix64(key) % KINFO_CACHE;
    if (kinfo_cache[slot].key == key && kinfo_cache[slot].k != NULL)
        return kinfo_cache[slot].k;
    kinfo_t *k;
    pthread_rwlock_rdlock(&kinfo_lock);
    HASH_FIND(hh, kinfos, &key, sizeof key, k);
    pthread_rwlock_unlock(&kinfo_lock);
    if (k != NULL) {
        kinfo_cache[slot].key = key;
        kinfo_cache[slot].k = k;
        return k;
    }
    uint64_t t0 = now_ns();
    resolve_driver();
    k = calloc(1, sizeof *k);
    if (k == NULL)
        return NULL;
    k->key = key;
    k->peeks_left = PEEK_LAUNCHES;
    uint64_t handle = key;
    if (is_stub) {
        cudaKernel_t kern = NULL;
        if (drv.get_kernel == NULL || drv.get_kernel(&kern, (const void *)(uintptr_t)key) != cudaSuccess)
            kern = NULL;
        handle = (uint64_t)(uintptr_t)kern;
    }
    if (handle != 0)
        fill_kinfo(k, handle);
    else
        k->nparams = -1, snprintf(k->name, sizeof k->name, "?");
    pthread_rwlock_wrlock(&kinfo_lock);
    kinfo_t *other;
    HASH_FIND(hh, kinfos, &key, sizeof key, other);
    if (other == NULL) {
        HASH_ADD(hh, kinfos, key, sizeof k->key, k);
        if (k->hh.tbl == NULL)
            other = NULL;
    }
    pthread_rwlock_unlock(&kinfo_lock);
    once_charge(ONCE_KERNEL, t0);
    if (other != NULL) {
        free(k);
        return other;
    }
    return k;
}

/* --- discovery of one launch ---------------------------------------------------------- */

/* Reads PTR_PEEK_BYTES at each small region's pointer, after the stream's earlier work,
 * and adds the regions those words point into: grouped GEMM and cat pass arrays of
 * device pointers. Discovery only. */
static void peek_pointer_arrays(kinfo_t *k, ft_scan_set_t *set, cudaStream_t stream)
{
    size_t direct = set->n;
    if (__atomic_load_n(&k->peeks_left, __ATOMIC_RELAXED) <= 0)
        return;
    int synced = 0;
    uint64_t t0 = 0;
    for (size_t i = 0; i < direct; i++) {
        ft_region_t r;
        if (!ft_regions_find(regions, set->ptr[i], &r) || r.size > PTR_PEEK_REGION_MAX)
            continue;
        if (!synced) {
            t0 = now_ns();
            if (REAL(cudaStreamSynchronize)(stream) != cudaSuccess)
                return;
            synced = 1;
        }
        unsigned char buf[PTR_PEEK_BYTES];
        uint64_t end = r.base + r.size;
        size_t len = end - set->ptr[i] < sizeof buf ? (size_t)(end - set->ptr[i]) : sizeof buf;
        /* A table FT_SPILL holds in host memory is read there. */
        if (!spilled_read(buf, set->ptr[i], len) &&
            REAL(cudaMemcpy)(buf, (void *)(uintptr_t)set->ptr[i], len, cudaMemcpyDeviceToHost) != cudaSuccess)
            continue;
        ft_scan_indirect(regions, buf, len, set);
    }
    if (synced && set->n == direct)
        __atomic_fetch_sub(&k->peeks_left, 1, __ATOMIC_RELAXED);
    if (synced)
        once_charge(ONCE_PEEK, t0);
}

static void trace_arg_words(const kinfo_t *k, const char *what, const void *p, size_t len);

static void scan_extra(void **extra, kinfo_t *k, int scan_flags, ft_scan_set_t *set, int trace)
{
    void *buf = NULL;
    size_t size = 0;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != NULL)
            size = *(size_t *)extra[i + 1];
        else if (extra[i] != CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i] != CU_LAUNCH_PARAM_BUFFER_SIZE)
            break; /* an option we do not know: its value's shape is unknown too */
    }
    if (buf != NULL && size > 0)
        ft_scan_bytes_junk(regions, buf, size, &k->junk, scan_flags, set);
    if (trace)
        trace_arg_words(k, buf ? "extra buffer" : "extra without a buffer", buf, buf ? size : 0);
}

/* Copy bandwidth the plan will get, measured on pinned host memory as the residency
 * engine will use: host-to-device and device-to-host alone, then both at once on two
 * streams. GB/s, 0 when not measured. */
static struct {
    double h2d, d2h, h2d_both, d2h_both;
    double latency_us;        /* of a small host-to-device copy, for the plan */
    size_t bytes;
} bw;

/* The measurement's device buffer while it lives, held outside the region table:
 * FT_SPILL counts it (spill_held), or other threads' allocations and faults filled the
 * room it was sized to and the simulator's peak went a granule over the budget. */
static uint64_t bw_device_bytes;

/* --- FlexTensor's own runtime calls and the application's last error ---------------
 *
 * A runtime call that fails leaves its error as the thread's last error, which the
 * application reads with its next cudaGetLastError: PyTorch checks after every launch,
 * and would raise FlexTensor's failed allocation (a device too full to measure the link
 * with 128 MiB, on the simulator) as its own out-of-memory. FlexTensor's own calls that
 * can fail in normal operation go through own_call, which takes such an error back
 * unless the application had one pending already. */
typedef cudaError_t (*last_error_fn)(void);

static cudaError_t own_pending(void)
{
    static last_error_fn peek;
    if (peek == NULL)
        peek = (last_error_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaPeekAtLastError");
    return peek != NULL ? peek() : cudaSuccess;
}

/* rc: what the own call returned; pending: own_pending() before it. */
static cudaError_t own_call(cudaError_t rc, cudaError_t pending)
{
    static last_error_fn take;
    if (rc == cudaSuccess || pending != cudaSuccess)
        return rc;
    if (take == NULL)
        take = (last_error_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaGetLastError");
    if (take != NULL)
        take();
    return rc;
}

static cudaError_t own_malloc(void **p, size_t n)
{
    cudaError_t pending = own_pending();
    return own_call(REAL(cudaMalloc)(p, n), pending);
}

static cudaError_t own_host_alloc(void **p, size_t n)
{
    typedef cudaError_t (*host_alloc_fn)(void **, size_t, unsigned int);
    host_alloc_fn alloc = (host_alloc_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaHostAlloc");
    if (alloc == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(alloc(p, n, cudaHostAllocDefault), pending);
}

static cudaError_t own_stream(cudaStream_t *s)
{
    typedef cudaError_t (*stream_create_fn)(cudaStream_t *, unsigned int);
    stream_create_fn create = (stream_create_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaStreamCreateWithFlags");
    if (create == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(create(s, cudaStreamNonBlocking), pending);
}

static void *host_store_alloc(size_t size);
static void host_store_free(void *p);
static const char *host_store_kind(void);
static uint64_t spill_budget(void);
static uint64_t spill_held(void);

/* Measured on memory from host_store_alloc: the kind the engine's host stores will be
 * (FT_PINNED_MEMORY, FT_PINNED_MEMORY_MODE), so the plan gets their bandwidth. */
static void measure_bandwidth(void)
{
    typedef cudaError_t (*stream_destroy_fn)(cudaStream_t);
    stream_destroy_fn stream_destroy = (stream_destroy_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaStreamDestroy");
    if (!stream_destroy)
        return;
    enum { MIN_BYTES = 256 << 10 };
    size_t bytes = 64u << 20;
    /* The device buffer is twice that. Where the process is within its budget (FT_SPILL
     * holds it from the first allocation), it stays within: copies as large as the room
     * left allows, down to 256 KiB (the per-copy latency is taken out below); past it
     * already, 256 KiB. On the simulator, 2 x 64 MiB on top of a full budget was the
     * run's peak (and on top of one 2 MiB over it: 200 MiB for 70). */
    uint64_t budget = spill_budget(), held = spill_held();
    while (budget > 0 && bytes > MIN_BYTES && (held > budget || 2 * (uint64_t)bytes > budget - held))
        bytes /= 2;
    void *host = NULL, *dev = NULL;
    cudaStream_t s1 = NULL, s2 = NULL;
    cudaEvent_t e[6];
    /* Smaller again where the device has no room for the buffer. */
    int ok = (host = host_store_alloc(2 * bytes)) != NULL;
    while (ok && own_malloc(&dev, 2 * bytes) != cudaSuccess) {
        dev = NULL;
        ok = bytes > MIN_BYTES;
        bytes = bytes / 8 > MIN_BYTES ? bytes / 8 : MIN_BYTES;
    }
    if (dev != NULL)
        __atomic_store_n(&bw_device_bytes, 2 * (uint64_t)bytes, __ATOMIC_RELAXED);
    ok = ok && own_stream(&s1) == cudaSuccess && own_stream(&s2) == cudaSuccess;
    for (int i = 0; ok && i < 6; i++)
        ok = prof.create(&e[i], cudaEventDefault) == cudaSuccess;
    cudaMemcpyAsync_fn_t copy = REAL(cudaMemcpyAsync);
    char *h = host, *d = dev;
    float ms[4] = { 0, 0, 0, 0 };
    if (ok) {
        /* alone: H2D on s1, then D2H on s1; the best of 3 after one untimed round (the
         * first copies from fresh pinned pages were slow: under FT_SPILL, 4 MiB copies
         * measured 42.9 GB/s where 1 GiB ones gave 54.8, two-H200 machine) */
        for (int round = 0; round < 4; round++) {
            float t[2] = { 0, 0 };
            prof.record(e[0], s1);
            copy(d, h, bytes, cudaMemcpyHostToDevice, s1);
            prof.record(e[1], s1);
            copy(h, d, bytes, cudaMemcpyDeviceToHost, s1);
            prof.record(e[2], s1);
            prof.sync(e[2]);
            prof.elapsed(&t[0], e[0], e[1]);
            prof.elapsed(&t[1], e[1], e[2]);
            for (int i = 0; round > 0 && i < 2; i++)
                if (t[i] > 0 && (ms[i] == 0 || t[i] < ms[i]))
                    ms[i] = t[i];
        }
        /* both at once: s2 waits for nothing, s1 copies the other way */
        prof.record(e[3], s1);
        copy(d, h, bytes, cudaMemcpyHostToDevice, s1);
        prof.record(e[4], s1);
        copy(h + bytes, d + bytes, bytes, cudaMemcpyDeviceToHost, s2);
        prof.record(e[5], s2);
        prof.sync(e[4]);
        prof.sync(e[5]);
        prof.elapsed(&ms[2], e[3], e[4]);
        prof.elapsed(&ms[3], e[3], e[5]);
        /* The fixed cost of a copy: 16 small ones back to back. A copy of n bytes
         * takes latency + n / bandwidth: the large and the small copies give both, so
         * that copies made small by a budget with little room left still give the
         * link's bandwidth. */
        enum { SMALL = 4096, N_SMALL = 16 };
        float small_ms = 0;
        prof.record(e[0], s1);
        for (int i = 0; i < N_SMALL; i++)
            copy(d + (size_t)i * SMALL, h + (size_t)i * SMALL, SMALL, cudaMemcpyHostToDevice, s1);
        prof.record(e[1], s1);
        double small_us = 0, lat_us = 0;
        if (prof.sync(e[1]) == cudaSuccess && prof.elapsed(&small_ms, e[0], e[1]) == cudaSuccess)
            small_us = (double)small_ms * 1000.0 / N_SMALL;
        double big_us = (double)ms[0] * 1000.0;
        if (small_us > 0 && big_us > small_us) {
            double bytes_per_us = (double)(bytes - SMALL) / (big_us - small_us);
            lat_us = small_us - SMALL / bytes_per_us;
            lat_us = lat_us > 0 ? lat_us : 0;
        }
        bw.latency_us = lat_us;
        bw.bytes = bytes;
        double *out[4] = { &bw.h2d, &bw.d2h, &bw.h2d_both, &bw.d2h_both };
        for (int i = 0; i < 4; i++) {
            double us = (double)ms[i] * 1000.0 - lat_us;
            *out[i] = us > 0 ? (double)bytes / (us * 1000.0) : 0;
        }
        FT_INFO("copy bandwidth (%s, %.4g MiB): host to device %.1f GB/s, device to host %.1f GB/s; "
                "both at once %.1f and %.1f GB/s; %.1f us per copy", host_store_kind(), (double)bytes / 1048576.0,
                bw.h2d, bw.d2h, bw.h2d_both, bw.d2h_both, bw.latency_us);
    } else {
        FT_WARN("copy bandwidth not measured (could not set up host buffers and streams)");
    }
    if (s1)
        stream_destroy(s1);
    if (s2)
        stream_destroy(s2);
    if (dev)
        REAL(cudaFree)(dev);
    __atomic_store_n(&bw_device_bytes, 0, __ATOMIC_RELAXED);
    if (host)
        host_store_free(host);
}

/* cudaEventCreateWithFlags for FlexTensor's own events (own_call). */
static cudaError_t own_event_create(cudaEvent_t *e, unsigned int flags)
{
    static event_create_fn create;
    if (create == NULL && (create = (event_create_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventCreateWithFlags")) == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(create(e, flags), pending);
}

/* Discovery is done: set up the events for the units it found. */
static void start_profiling(void)
{
    size_t n = ft_disc_unit_count(disc);
    __atomic_store_n(&peak_tracked, device_bytes(), __ATOMIC_RELAXED);
    prof.create = own_event_create;
    prof.record = (event_record_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventRecord");
    prof.sync = (event_sync_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventSynchronize");
    prof.elapsed = (event_elapsed_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventElapsedTime");
    prof.wait = (stream_wait_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaStreamWaitEvent");
    prof.prof = ft_prof_new(n, profiling_iters);
    prof.first = calloc(n ? n : 1, sizeof *prof.first);
    prof.ev = calloc(n + 1, sizeof *prof.ev);
    prof.seen = calloc(n ? n : 1, sizeof *prof.seen);
    prof.moves_ns = calloc(n ? n : 1, sizeof *prof.moves_ns);
    if (n == 0 || !prof.create || !prof.record || !prof.sync || !prof.elapsed || !prof.prof ||
        !prof.first || !prof.ev || !prof.seen || !prof.moves_ns) {
        FT_WARN("profiling skipped: %s", n == 0 ? "no units" : "cannot set up CUDA events");
        return;
    }
    for (size_t i = 0; i <= n; i++) {
        if (prof.create(&prof.ev[i], cudaEventDefault) != cudaSuccess) {
            FT_WARN("profiling skipped: cudaEventCreate failed");
            return;
        }
    }
    for (size_t i = 0; i < n; i++)
        prof.first[i] = ft_disc_unit(disc, i)->first_launch;
    for (int i = __atomic_load_n(&early_suspends, __ATOMIC_RELAXED); i > 0; i--)
        ft_prof_suspend(prof.prof);
    prof.n = n;
    measure_bandwidth();
    __atomic_store_n(&profiling, 1, __ATOMIC_RELAXED);
    FT_INFO("profiling: %zu units over %d pass(es)", n, profiling_iters < 1 ? 1 : profiling_iters);
}

/* A pass ended (the next one starts at this launch): read its events. */
/* The units' times in the pass just ended from CUPTI's kernel records: from a unit's
 * first kernel's start to the next unit's, the last unit to its last kernel's end.
 * 1 when every unit had kernels (us[] replaced), 0 otherwise (us[] untouched). */
static int cupti_unit_times(double *us)
{
    size_t n = ft_cupti_timing_collect(prof.kern, prof.kern_cap);
    uint64_t first[prof.n], last_end = 0;
    for (size_t i = 0; i < prof.n; i++)
        first[i] = UINT64_MAX;
    for (size_t k = 0; k < n; k++) {
        const ft_cupti_kernel_t *r = &prof.kern[k];
        uint64_t unit = (r->tag & 0xfffff) - 1;
        if (r->tag >> 20 != prof.pass_seq || unit >= prof.n)
            continue;
        if (r->start < first[unit])
            first[unit] = r->start;
        if (unit == prof.n - 1 && r->end > last_end)
            last_end = r->end;
    }
    for (size_t i = 0; i < prof.n; i++)
        if (first[i] == UINT64_MAX || (i > 0 && first[i] < first[i - 1]))
            return 0;
    for (size_t i = 0; i < prof.n; i++) {
        uint64_t end = i + 1 < prof.n ? first[i + 1] : last_end;
        if (end < first[i])
            return 0;
        us[i] = (double)(end - first[i]) / 1000.0;
    }
    return 1;
}

/* This thread pushed a CUPTI tag for its launch: popped once the launch is enqueued. */
static __thread int tag_pushed;

/* Profiling gives up waiting for passes that follow the recorded one after this many
 * in a row that do not, and plans from the passes it has (at least one). */
#define PROFILE_MAX_OFF_RECORD 8

static void outside_sample(const char *phase, long pass, int held);

/* This thread's call holds res.lock (engine_enter returned 1). A call that entered
 * before the switch is not guarded even if it sees the engine on: the switch waits for
 * it to be enqueued, then drains the device, before anything is evicted. */
static __thread int engine_held;

/* 1: the pass was timed; 0: dropped (suspended, an error); -1: dropped because it did
 * not run every unit where discovery saw them (the program's passes changed). */
static int end_profiled_pass(void)
{
    double us[prof.n];
    cudaError_t err = prof.sync(prof.ev[prof.n]);
    if (err != cudaSuccess) {
        FT_DEBUG("profiling: pass dropped, waiting for its end failed (cudaError %d)", (int)err);
        return 0;
    }
    for (size_t i = 0; i < prof.n; i++) {
        if (!prof.seen[i]) {
            FT_DEBUG("profiling: pass dropped, %s not seen at launch %u", ft_disc_unit(disc, i)->name,
                     prof.first[i]);
            return -1; /* the pass did not run every unit where discovery saw them */
        }
        float ms = 0;
        err = prof.elapsed(&ms, prof.ev[i], i + 1 < prof.n ? prof.ev[i + 1] : prof.ev[prof.n]);
        if (err != cudaSuccess) {
            FT_DEBUG("profiling: pass dropped, timing %s failed (cudaError %d)", ft_disc_unit(disc, i)->name,
                     (int)err);
            return 0;
        }
        us[i] = (double)ms * 1000.0;
    }
    if (prof.cupti_timing && cupti_unit_times(us))
        prof.cupti_passes++;
    if (prof.epoch != ft_prof_epoch(prof.prof)) {
        FT_DEBUG("profiling: pass dropped, profiling was suspended during it");
        return 0;
    }
    for (size_t i = 0; i < prof.n; i++) {
        double moved = (double)__atomic_load_n(&prof.moves_ns[i], __ATOMIC_RELAXED) / 1e3;
        double kept = us[i] - moved > 1.0 ? us[i] - moved : 1.0;
        prof.moves_out_ns += (uint64_t)((us[i] - kept) * 1e3);
        us[i] = kept;
    }
    ft_prof_add_pass(prof.prof, us);
    outside_sample("profiling", ft_prof_passes(prof.prof), engine_held);
    FT_DEBUG("profiling: pass %d of %d timed", ft_prof_passes(prof.prof), profiling_iters);
    return 1;
}

static char *human_bytes(uint64_t b, char *buf, size_t len)
{
    if (b >= (1ull << 30))
        snprintf(buf, len, "%.2f GiB", (double)b / (1 << 30));
    else
        snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
    return buf;
}

/* The memory budget: FT_GPU_MEM_LIMIT and FT_MAX_GPU_MEM_FRACTION x total (the smaller
 * when both), capped by what the device has free plus what this process already holds
 * through the shim. 0 = latency mode. */
/* The budget the configuration asks for (FT_GPU_MEM_LIMIT, FT_MAX_GPU_MEM_FRACTION of
 * total_b), 0 for none. */
static uint64_t configured_budget(size_t total_b)
{
    uint64_t budget = cfgp->gpu_mem_limit;
    if (cfgp->max_gpu_mem_fraction > 0 && total_b > 0) {
        uint64_t f = (uint64_t)(cfgp->max_gpu_mem_fraction * (double)total_b);
        budget = budget == 0 || f < budget ? f : budget;
    }
    return budget;
}

static uint64_t memory_budget(void)
{
    size_t free_b = 0, total_b = 0;
    if (REAL(cudaMemGetInfo) == NULL || REAL(cudaMemGetInfo)(&free_b, &total_b) != cudaSuccess)
        free_b = total_b = 0;
    uint64_t budget = configured_budget(total_b);
    uint64_t can = (uint64_t)free_b + device_bytes();
    if (budget > 0 && total_b > 0 && budget > can) {
        char a[32], b[32];
        FT_INFO("plan: budget %s capped to %s (free device memory plus what this process holds)",
                human_bytes(budget, a, sizeof a), human_bytes(can, b, sizeof b));
        budget = can;
    }
    return budget;
}

static void start_residency(void);
static vmm_t *vmm_find(uint64_t va);

/* The options that keep units out of streaming, for messages: FT_INCLUDE_PATTERNS
 * (units it does not match), FT_EXCLUDE_PATTERNS (units it matches), or both. */
static const char *kept_by(void)
{
    int inc = cfgp->include_patterns.n > 0, exc = cfgp->exclude_patterns.n > 0;
    return inc && exc ? "FT_INCLUDE_PATTERNS and FT_EXCLUDE_PATTERNS"
         : inc        ? "FT_INCLUDE_PATTERNS" : "FT_EXCLUDE_PATTERNS";
}

/* Profiling is done: choose the plan (FT_STRATEGY) and say what it is. */
static void make_plan(void)
{
    size_t n = prof.n;
    ft_plan_unit_t *units = calloc(n, sizeof *units);
    plan.out.resident = calloc(n, sizeof *plan.out.resident);
    plan.out.slot = calloc(n, sizeof *plan.out.slot);
    plan.out.unit_stall_us = calloc(n, sizeof *plan.out.unit_stall_us);
    if (units == NULL || !plan.out.resident || !plan.out.slot || !plan.out.unit_stall_us) {
        FT_WARN("plan: out of memory");
        free(units);
        plan.rc = -ENOMEM;
        start_residency();
        return;
    }
    uint64_t weights = 0; /* what the units occupy on the device */
    uint64_t kept_bytes = 0;
    size_t kept = 0;
    plan.weight_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const ft_disc_unit_t *u = ft_disc_unit(disc, i);
        /* What the unit occupies on the device: regions backed by virtual memory are
         * mapped in whole granules. */
        uint64_t bytes = 0, copied = 0;
        for (uint32_t k = 0; k < u->n_regions; k++) {
            uint64_t base, size;
            if (ft_disc_region(disc, u->region_ids[k], &base, &size) != 0)
                continue;
            vmm_t *v = vmm_find(base);
            uint64_t held = v != NULL ? v->size : size;
            plan.weight_bytes += held;
            /* A weight other units use too stays resident (activate_locked): the plan
             * counts it with the rest of the resident memory. */
            if (ft_disc_region_shared(disc, u->region_ids[k]) ||
                ft_disc_region_indirect_only(disc, u->region_ids[k]))
                continue;
            bytes += held;
            copied += size;
        }
        /* The unit selection (FT_INCLUDE_PATTERNS, FT_EXCLUDE_PATTERNS): a unit it
         * leaves out stays resident whatever the budget. */
        units[i] = (ft_plan_unit_t){ u->name, bytes, ft_prof_stat(prof.prof, i).median, copied, !u->offload };
        weights += bytes;
        kept += !u->offload;
        kept_bytes += u->offload ? 0 : bytes;
    }
    uint64_t tracked = device_bytes();
    ft_plan_input_t *in = &plan.in;
    in->units = units;
    in->n = n;
    /* GB/s is bytes per ns: x 1000 for bytes per us. */
    in->h2d_bytes_per_us = bw.h2d > 0 ? bw.h2d * 1000.0 : 25000.0;
    in->copy_latency_us = bw.latency_us;
    /* Without the device checksum, the engine writes every unloaded unit back before
     * the next copy in: the model counts that copy too. With it, units are taken to
     * be unchanged (weights are). */
    in->d2h_bytes_per_us = checksum_available() ? 0 : bw.d2h > 0 ? bw.d2h * 1000.0 : 25000.0;
    in->budget_bytes = memory_budget();
    /* Non-weight memory: its peak while profiling (activations freed before the plan
     * come back in the next pass). */
    uint64_t peak = __atomic_load_n(&peak_tracked, __ATOMIC_RELAXED);
    if (peak > tracked)
        tracked = peak;
    /* Both in whole granules where virtual memory backs them. */
    in->other_bytes = tracked > weights ? tracked - weights : 0;
    in->time_budget_factor = cfgp->time_budget_factor;
    in->min_slots = cfgp->min_blocks;
    in->max_slots = cfgp->num_blocks;
    in->strategy = cfgp->strategy == FT_STRATEGY_GREEDY ? FT_PLAN_GREEDY
                 : cfgp->strategy == FT_STRATEGY_GLOBAL ? FT_PLAN_GLOBAL : FT_PLAN_KNAPSACK;
    plan.rc = ft_plan_choose(in, &plan.out, &plan.min_budget);
    __atomic_store_n(&plan.made, 1, __ATOMIC_RELEASE); /* ft_get_gpu_memory_usage reads */
    char a[32], b[32], c[32], d[32], e[160] = "";
    if (kept > 0)
        snprintf(e, sizeof e, "the %zu unit(s) kept resident by %s (%s)", kept, kept_by(),
                 human_bytes(kept_bytes, d, sizeof d));
    if (plan.rc == -ENOSPC) {
        FT_ERROR("plan: the memory budget %s cannot hold this model's non-weight memory (%s)%s%s "
                 "and %d slots; the smallest budget that works is %s (FT_GPU_MEM_LIMIT or "
                 "FT_MAX_GPU_MEM_FRACTION%s%s); nothing will be offloaded",
                 human_bytes(in->budget_bytes, a, sizeof a), human_bytes(in->other_bytes, b, sizeof b),
                 kept ? ", " : "", e, in->min_slots, human_bytes(plan.min_budget, c, sizeof c),
                 kept ? ", or fewer units kept by " : "", kept ? kept_by() : "");
        start_residency(); /* it will not start: FT_SPILL's moves are undone */
        return;
    }
    if (plan.rc != 0) {
        FT_WARN("plan: not made (error %d)", plan.rc);
        start_residency();
        return;
    }
    size_t streamed = 0;
    for (size_t i = 0; i < n; i++)
        streamed += !plan.out.resident[i];
    FT_INFO("plan (%s mode, %s): %zu of %zu units streamed through %d slot(s) of %s; device "
            "memory %s; predicted step %.1f us against %.1f us all resident%s%s",
            in->budget_bytes ? "memory" : "latency", ft_config_word_name(cfgp->strategy), streamed,
            n, plan.out.slots, human_bytes(plan.out.slot_bytes, a, sizeof a),
            human_bytes(plan.out.device_bytes, b, sizeof b), plan.out.step_us,
            plan.out.all_resident_us, kept ? "; " : "", e);
    if (log_diagnostics) {
        size_t need = ft_plan_format(in, &plan.out, NULL, 0) + 1;
        char *table = malloc(need);
        if (table != NULL) {
            ft_plan_format(in, &plan.out, table, need);
            for (char *line = strtok(table, "\n"); line != NULL; line = strtok(NULL, "\n"))
                FT_INFO("%s", line);
            free(table);
        }
    }
    start_residency();
}

static void finish_profiling(void)
{
    __atomic_store_n(&profiling, 0, __ATOMIC_RELAXED);
    if (prof.cupti_timing) {
        prof.cupti_timing = 0;
        ft_cupti_timing_stop();
        ft_cupti_stop();
        FT_INFO("profiling: %u of %d pass(es) timed from CUPTI activity records (GPU timestamps), "
                "the others from CUDA events", prof.cupti_passes, ft_prof_passes(prof.prof));
    }
    const char *names[prof.n];
    for (size_t i = 0; i < prof.n; i++)
        names[i] = ft_disc_unit(disc, i)->name;
    char report[2048];
    int findings = ft_prof_quality(prof.prof, names, 0.25, report, sizeof report);
    FT_INFO("profiling: done, %d pass(es), %d finding(s)", ft_prof_passes(prof.prof), findings);
    if (prof.moves_out_ns > 0)
        FT_INFO("profiling: %.1f ms of FT_SPILL moves taken out of the units' times (the gaps "
                "they left in the profiled stream)", (double)prof.moves_out_ns / 1e6);
    for (char *line = strtok(report, "\n"); line != NULL; line = strtok(NULL, "\n"))
        FT_WARN("profiling: %s", line);
    make_plan();
    if (log_diagnostics) {
        FT_INFO("%-24s %12s %10s %10s %10s %4s", "unit", "bytes", "median us", "min us", "max us", "n");
        for (size_t i = 0; i < prof.n; i++) {
            const ft_disc_unit_t *u = ft_disc_unit(disc, i);
            ft_prof_stat_t st = ft_prof_stat(prof.prof, i);
            FT_INFO("%-24s %12llu %10.1f %10.1f %10.1f %4d", u->name, (unsigned long long)u->bytes,
                    st.median, st.min, st.max, st.n);
        }
    }
}

/* Another lane than the timed one begins a pass (prof.lock held): how many it has
 * begun since the timed pass did. Lanes past the table's size are not counted. */
static int foreign_start(uint64_t lane)
{
    for (int i = 0; i < prof.n_foreign; i++)
        if (prof.foreign[i].lane == lane)
            return ++prof.foreign[i].starts;
    if (prof.n_foreign == (int)(sizeof prof.foreign / sizeof *prof.foreign))
        return 0;
    prof.foreign[prof.n_foreign].lane = lane;
    prof.foreign[prof.n_foreign].starts = 1;
    return prof.foreign[prof.n_foreign++].starts;
}

/* Profiling, for a launch at position pos of its lane's pass. One lane's pass is timed
 * at a time; another lane is adopted at a pass start when none is under way, or when
 * the timed lane went quiet while another began three passes (its thread finished). */
static void profile_launch(uint64_t lane, long pos, cudaStream_t stream)
{
    pthread_mutex_lock(&prof.lock);
    if (prof.in_pass && lane != prof.lane) {
        if (pos != 0 || foreign_start(lane) < 3) {
            pthread_mutex_unlock(&prof.lock);
            return;
        }
        prof.in_pass = 0; /* abandon the quiet lane's pass */
    }
    if (!prof.in_pass && pos != 0) {
        pthread_mutex_unlock(&prof.lock);
        return;
    }
    if (pos == 0) {
        if (prof.in_pass) {
            prof.record(prof.ev[prof.n], stream);
            int kept = end_profiled_pass();
            prof.off_record = kept < 0 ? prof.off_record + 1 : kept > 0 ? 0 : prof.off_record;
            int give_up = prof.off_record >= PROFILE_MAX_OFF_RECORD;
            if (give_up && prof.off_record == PROFILE_MAX_OFF_RECORD)
                FT_WARN("profiling: the last %d passes did not follow the one discovery recorded (the "
                        "program's passes changed after it); %s", PROFILE_MAX_OFF_RECORD,
                        ft_prof_passes(prof.prof) > 0 ? "planning from the passes timed so far"
                        : "nothing is planned until one does");
            if (ft_prof_done(prof.prof) || (give_up && ft_prof_passes(prof.prof) > 0)) {
                finish_profiling();
                pthread_mutex_unlock(&prof.lock);
                return;
            }
        }
        prof.in_pass = 1;
        prof.pass_seq++;
        __atomic_store_n(&prof.cur_unit, -1, __ATOMIC_RELAXED);
        for (size_t i = 0; i < prof.n; i++)
            __atomic_store_n(&prof.moves_ns[i], 0, __ATOMIC_RELAXED);
        prof.lane = lane;
        prof.n_foreign = 0;
        prof.epoch = ft_prof_epoch(prof.prof);
        memset(prof.seen, 0, prof.n * sizeof *prof.seen);
    }
    if (prof.in_pass && pos >= 0) {
        for (size_t i = 0; i < prof.n; i++) {
            if (prof.first[i] == (uint32_t)pos && !prof.seen[i]) {
                __atomic_store_n(&prof.cur_unit, (int)i, __ATOMIC_RELAXED);
                prof.record(prof.ev[i], stream);
                prof.seen[i] = 1;
            }
        }
        if (prof.cupti_timing && prof.cur_unit >= 0 && lane == prof.lane) {
            ft_cupti_tag_push(prof.pass_seq << 20 | (uint64_t)(prof.cur_unit + 1));
            tag_pushed = 1;
        }
    }
    pthread_mutex_unlock(&prof.lock);
}

/* --- the residency engine: prefetch on a side stream -----------------------------------
 *
 * At the end of planning, each streamed unit's regions are copied out to pinned host
 * memory and their physical memory is unmapped and released; the addresses stay
 * reserved (DESIGN.md invariant 1). At each unit's first launch of a pass, the
 * streamed units that follow it (as many as the other slots) are loaded on the side
 * stream: physical memory is created and mapped at the same addresses, the bytes
 * copied in, and an event recorded that every call touching the unit waits on. A call
 * touching a unit that is not loaded (a miss) loads it on the caller's stream. At most
 * `slots` streamed units are loaded at once; loading one more first unloads the least
 * recently loaded: after the events behind its copy in and its last uses (its kernels
 * must be done), it is dropped when the device checksum proves it unchanged, else
 * copied back to the host store (nothing written is lost: invariant 2), and its
 * physical memory goes to the unit loaded next or is released (docs/residency.md). */
#define STEP_RING 8
#define STEP_SAMPLES 1024     /* the latest ones, for the median */

typedef struct {
    uint64_t va, size;        /* the region */
    size_t len;               /* mapped length (granularity) */
    void *host;               /* its bytes while unloaded */
    int unit;
    uint32_t id;              /* in the region table */
    int mapping;              /* mapped by load_unit, its copy not issued yet */
} res_region_t;

#define USE_STREAMS 8
#define MISS_LOG 32
#define KEEP_AFTER_CHANGES 3

typedef struct {
    int first, n;             /* its regions in res.regions */
    int loaded;
    uint64_t stamp;           /* load order, for least-recently-loaded */
    /* Recorded behind every call that touched it, one event per stream that did (an
     * event re-recorded on another stream would forget the first stream's calls);
     * past USE_STREAMS streams, use_overflow makes an eviction wait for the device. */
    cudaEvent_t used[USE_STREAMS];
    cudaStream_t used_on[USE_STREAMS];
    int n_used, use_overflow;
    cudaEvent_t ready;        /* recorded behind its load's copies */
    int ready_recorded;
    cudaStream_t waited;      /* a stream already waiting on `ready` since the load */
    int waited_valid;
    uint32_t first_launch;    /* where its range starts in a pass */
    uint32_t last_launch;     /* and ends */
    uint64_t uses;            /* `used` recordings, to tell a stale checksum */
    /* The checksum issued behind its last launch of a pass (checksum_issue), ready
     * when ck_done has completed and still valid while uses == ck_uses. */
    cudaEvent_t ck_done;
    int ck_pending;
    uint64_t ck_uses;
    int touched_since_load;   /* its first touch after a load prefetches what follows */
    int pinned;               /* changed too often: never evicted once loaded again */
    int unstreamable;         /* resident, and demote_for found it cannot stream */
    int demoted;              /* planned resident, made to stream by demote_for */
    uint64_t bytes;           /* mapped bytes of its regions */
    /* The device checksum of its bytes as the host store holds them (ck below);
     * ref_valid 0: not known, every eviction writes back. */
    uint64_t ref;
    int ref_valid;
    unsigned changes;         /* evictions that found it changed */
} res_unit_t;

/* Per application thread, as positions are (each thread's passes are followed on
 * their own): the tracked position of its last guarded launch (-1: none), and whether its pass
 * under way has left the recorded launch sequence (prefetches then follow first touches
 * only, not positions, and no touch is judged by its position, until its next pass). */
static __thread long lane_last_pos = -1;
static __thread int lane_off_script;

static struct {
    pthread_mutex_t lock;     /* application threads launch concurrently */
    int active;
    int pending;              /* planned: the next guarded call switches the engine on */
    res_region_t *regions;
    int n_regions;
    int *by_id;               /* region id -> index in regions, -1: not streamed */
    uint32_t n_ids;
    res_unit_t *units;
    int n_units, slots, loaded;
    uint64_t clock;
    uint64_t loads, unloads, copied_in_bytes, prefetches, misses;
    uint64_t written_back;    /* unloads that copied the unit back (changed or unproven) */
    uint64_t host_copies;     /* copies and sets served on a host store (host_store_at) */
    /* The first misses, for the trace: what missed, and where the pass was. */
    struct miss {
        char kernel[96];
        int unit, off_script;
        uint64_t pass;
        long pos;
    } miss_log[MISS_LOG];
    int n_miss_log;
    /* Unsure touches of units not loaded, left alone (res_touch); FT_STRICT_GUARD loads
     * them as misses instead. */
    uint64_t unsure_skipped;
    uint64_t unexpected_skipped; /* of those, from a weightless kernel or outside the range */
    uint64_t repeat_skipped;     /* of those, by the repeat rule (repeat_touch) */
    long pass_len, pass_start;   /* the recorded pass's launches, and where passes begin */
    int strict;
    cudaStream_t side;        /* prefetch copies and write-backs */
    uint64_t held_bytes, peak_held_bytes; /* physical bytes of loaded streamed units */
    /* Physical allocations of the unit just unloaded, kept for the unit loaded next
     * (layers share their regions' sizes): cuMemCreate and cuMemRelease are host calls
     * that cost far more than a map. Whatever load_unit does not reuse it releases. */
    struct spare {
        size_t len;
        CUmemGenericAllocationHandle h;
    } *spare;
    int n_spare, cap_spare;
    uint64_t reused, region_loads;
    /* Host time of the loads (ns): waiting for the evicted unit (its copy in, its last
     * use), unloading it (its checksum's wait included), mapping, issuing the copies. */
    uint64_t ns_wait, ns_unmap, ns_map, ns_copy;
    uint64_t ns_create, ns_release; /* parts of ns_map: new physical memory, spares let go */
    uint64_t ns_map_call, ns_access; /* parts of ns_map: cuMemMap, cuMemSetAccess */
    uint64_t access_calls;    /* cuMemSetAccess calls of loads (several regions each at best) */
    /* The measured step: an event at each pass's first launch; the time between two
     * consecutive ones is read once the later has completed (never waited for). */
    cudaEvent_t pass_ev[STEP_RING];
    uint64_t passes, harvested;
    float step_ms[STEP_SAMPLES];
    uint64_t n_steps;
} res = { .lock = PTHREAD_MUTEX_INITIALIZER };

static vmm_t *vmm_find(uint64_t va)
{
    vmm_t *v;
    pthread_mutex_lock(&vmm_lock);
    HASH_FIND(hh, vmms, &va, sizeof va, v);
    pthread_mutex_unlock(&vmm_lock);
    return v;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Pinned memory on device dev: what every physical allocation of the shim is. */
static CUmemAllocationProp device_prop(CUdevice dev)
{
    CUmemAllocationProp prop = { 0 };
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

/* Other devices the process uses that can reach the managed device's memory (a bit per
 * ordinal, see peer_note): a virtual-memory mapping is reachable from another device
 * only where cuMemSetAccess grants it, whatever peer access the application enabled
 * (on the H200 pair, a copy between the devices was "invalid argument" without). */
static uint32_t peer_devs;

/* Makes [va, va + len), mapped, readable and writable from dev and its peers in use. */
static CUresult set_access(CUdevice dev, uint64_t va, size_t len)
{
    CUmemAccessDesc access[32];
    size_t n = 0;
    access[n++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    uint32_t peers = __atomic_load_n(&peer_devs, __ATOMIC_ACQUIRE);
    for (int d = 0; d < 32; d++)
        if ((peers >> d & 1u) && d != dev)
            access[n++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, d }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    return drv.set_access(va, len, access, n);
}

/* Maps physical memory of dev over [va, va + len), readable and writable from dev
 * unless `no_access` (the caller sets access, for several regions at once): *h when
 * `given`, else a new allocation (stored in *h). On failure nothing stays mapped and
 * the handle, given or new, is released. ns (NULL: not timed) adds the host time of
 * creating, mapping and setting access, in that order. */
static CUresult map_physical(CUdevice dev, uint64_t va, size_t len, CUmemGenericAllocationHandle *h,
                             int given, uint64_t ns[3], int no_access)
{
    CUmemAllocationProp prop = device_prop(dev);
    uint64_t t0 = ns != NULL ? now_ns() : 0;
    CUresult rc = given ? CUDA_SUCCESS : drv.create(h, len, &prop, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t t1 = ns != NULL ? now_ns() : 0;
    if ((rc = drv.map(va, len, 0, *h, 0)) != CUDA_SUCCESS) {
        drv.release(*h);
        return rc;
    }
    uint64_t t2 = ns != NULL ? now_ns() : 0;
    if (!no_access && (rc = set_access(dev, va, len)) != CUDA_SUCCESS) {
        drv.unmap(va, len);
        drv.release(*h);
        return rc;
    }
    if (ns != NULL) {
        ns[0] += t1 - t0;
        ns[1] += t2 - t1;
        ns[2] += now_ns() - t2;
    }
    return CUDA_SUCCESS;
}

/* Maps physical memory over region r (an unloaded unit's, when one matches its size,
 * else new), without access yet: load_unit sets it once for each run of adjacent
 * regions, then copies their bytes in. */
static int map_region(res_region_t *r, CUdevice dev)
{
    CUmemGenericAllocationHandle h = 0;
    int given = 0;
    for (int i = 0; i < res.n_spare && !given; i++)
        if (res.spare[i].len == r->len) {
            h = res.spare[i].h;
            res.spare[i] = res.spare[--res.n_spare];
            res.reused++;
            given = 1;
        }
    uint64_t ns[3] = { 0, 0, 0 };
    CUresult rc = map_physical(dev, r->va, r->len, &h, given, ns, 1);
    res.ns_create += ns[0];
    res.ns_map_call += ns[1];
    if (rc != CUDA_SUCCESS) {
        FT_DEBUG("residency: mapping %zu bytes at %#llx failed: %d", r->len, (unsigned long long)r->va, (int)rc);
        return -1;
    }
    vmm_t *v = vmm_find(r->va);
    if (v != NULL)
        v->handle = h;
    return 0;
}

/* Undoes map_region when access cannot be set. */
static void unmap_region(res_region_t *r)
{
    vmm_t *v = vmm_find(r->va);
    drv.unmap(r->va, r->len);
    if (v != NULL) {
        drv.release(v->handle);
        v->handle = 0;
    }
}

/* cuMemSetAccess over several regions at once was refused once: one call per region
 * from then on. The driver's documentation allows a range of several mappings. */
static int access_runs_refused;

/* Sets access on the regions of unit un that map_region mapped (r->mapping), one call
 * per run of adjacent ones: the call costs the same for 2 MiB as for 196 MiB (tens of
 * us on the one-H200 machine, 500-700 us on the two-H200 one while the engine runs),
 * and a unit's regions, allocated one after another, usually lie end to end. A region
 * whose access cannot be set is unmapped again (r->mapping cleared). */
static void set_unit_access(res_unit_t *un, CUdevice dev)
{
    uint64_t t = now_ns();
    for (int k = 0; k < un->n;) {
        res_region_t *r = &res.regions[un->first + k];
        if (!r->mapping) {
            k++;
            continue;
        }
        int end = k + 1;
        uint64_t run_end = r->va + r->len;
        while (!access_runs_refused && end < un->n && res.regions[un->first + end].mapping &&
               res.regions[un->first + end].va == run_end)
            run_end += res.regions[un->first + end++].len;
        CUresult rc = set_access(dev, r->va, run_end - r->va);
        res.access_calls++;
        if (rc != CUDA_SUCCESS && end - k > 1) {
            access_runs_refused = 1;
            FT_INFO("residency: cuMemSetAccess refused a range of %d adjacent regions (%d): one "
                    "call per region from now on", end - k, (int)rc);
            continue; /* again, region by region */
        }
        if (rc != CUDA_SUCCESS) {
            FT_DEBUG("residency: access to %zu bytes at %#llx failed: %d", r->len,
                     (unsigned long long)r->va, (int)rc);
            unmap_region(r);
            r->mapping = 0;
        }
        k = end;
    }
    res.ns_access += now_ns() - t;
}

/* The device checksum (core/checksum.h): at an eviction, it proves the unit's bytes
 * equal to the host store's, so that the unit is dropped without a copy back
 * (invariant 2). Loaded when the plan is made; without it (no driver JIT for the PTX,
 * an error), every eviction writes back and the plan counts that copy. */
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);
static struct {
    CUfunction fn;
    launch_fn launch;
    cudaStream_t stream;      /* its own: the side stream's queued copies are not waited for */
    uint64_t *dev, *host;     /* per unit, the sum on the device and in pinned host memory */
    unsigned blocks;
    int units;                /* dev and host are there: the residency engine may use it */
} ck;

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
    attr_fn attr = (attr_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaDeviceGetAttribute");
    get_device_fn get_device = (get_device_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaGetDevice");
    ck.launch = (launch_fn)ft_shim_driver_proc("cuLaunchKernel", 4000);
    if (load == NULL || get == NULL || ck.launch == NULL)
        return;
    CUmodule mod;
    CUresult rc = load(&mod, ft_checksum_ptx);
    if (rc == CUDA_SUCCESS)
        rc = get(&ck.fn, mod, FT_CHECKSUM_KERNEL);
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
static CUresult checksum_launch(uint64_t va, uint64_t words, uint64_t *out)
{
    uint64_t salt = va / 8;
    unsigned blocks = words / 256 + 1 < ck.blocks ? (unsigned)(words / 256 + 1) : ck.blocks;
    void *args[] = { &va, &words, &salt, &out };
    return ck.launch(ck.fn, blocks, 1, 1, 256, 1, 1, 0, (CUstream)ck.stream, args, NULL);
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
        ck.units = 1;
    managed_device_leave(prev);
}

/* Sets up the residency engine's checksums on first call; 1 when they can be used. */
static int checksum_available(void)
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
static struct {
    uint64_t *dev, *host;     /* a batch's sums, FT_DISC_HASH_BATCH of them */
    int tried;
} dh;

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

static void hash_on_device(ft_disc_hash_req_t *q, size_t n);

static void hash_regions(void *ctx, ft_disc_hash_req_t *q, size_t n)
{
    (void)ctx;
    int prev = managed_device_enter();
    hash_on_device(q, n);
    managed_device_leave(prev);
}

static void hash_on_device(ft_disc_hash_req_t *q, size_t n)
{
    cudaError_t err = REAL(cudaDeviceSynchronize)();
    int on_device = sums_ready() && n <= FT_DISC_HASH_BATCH;
    char summed[FT_DISC_HASH_BATCH] = { 0 }; /* 1: its sum comes from dh.dev[i] */
    if (on_device && err == cudaSuccess)
        err = REAL(cudaMemsetAsync)(dh.dev, 0, n * sizeof *dh.dev, ck.stream);
    for (size_t i = 0; i < n; i++) {
        /* A call that can enqueue launches holds off FT_SPILL's moves (engine_enter):
         * where the bytes are cannot change before the sums are read back. */
        vmm_t *v = spilled_vmm(q[i].base);
        uint64_t words = q[i].size / 8;
        q[i].failed = 0;
        if (err != cudaSuccess) {
            q[i].failed = hash_failed(q[i].base, err) != 0;
        } else if (!on_device || q[i].size % 8 != 0) {
            q[i].failed = hash_sampled(q[i].base, q[i].size, &q[i].hash) != 0;
        } else if (v != NULL && v->sum_ok && v->va == q[i].base && v->asked == q[i].size) {
            q[i].hash = v->sum;
        } else if (v != NULL) {
            q[i].hash = ft_checksum_host((const char *)v->host + (q[i].base - v->va), words, q[i].base / 8);
        } else {
            summed[i] = 1;
            if (checksum_launch(q[i].base, words, dh.dev + i) != CUDA_SUCCESS)
                err = cudaErrorLaunchFailure;
        }
    }
    if (on_device && err == cudaSuccess)
        err = REAL(cudaMemcpyAsync)(dh.host, dh.dev, n * sizeof *dh.host, cudaMemcpyDeviceToHost, ck.stream);
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

static __thread char per_thread_key; /* its address tells threads' per-thread streams apart */

/* What tells `stream` apart from the streams of other calls: cudaStreamPerThread is one
 * handle for a stream per thread. Keyed by the handle, a thread skipped the wait for a
 * unit's copy that another thread's stream had made (model --threads 3
 * --per-thread-stream on the simulator: wrong results in 3 runs of 24 under load). */
static cudaStream_t stream_key(cudaStream_t stream)
{
    return stream == cudaStreamPerThread ? (cudaStream_t)(void *)&per_thread_key : stream;
}

/* A call on `stream` touched the unit: its use event for that stream is recorded. */
static void unit_record_use(res_unit_t *un, cudaStream_t stream)
{
    cudaStream_t key = stream_key(stream);
    int k = 0;
    while (k < un->n_used && un->used_on[k] != key)
        k++;
    if (k == USE_STREAMS) {
        un->use_overflow = 1;
        return;
    }
    if (k == un->n_used) {
        un->used_on[k] = key;
        un->n_used++;
    }
    prof.record(un->used[k], stream);
}

/* The host waits for every call that touched the unit since its load. */
static void unit_sync_used(res_unit_t *un)
{
    if (un->use_overflow)
        REAL(cudaDeviceSynchronize)();
    for (int k = 0; k < un->n_used; k++)
        prof.sync(un->used[k]);
}

/* `stream` waits for every call that touched the unit since its load; -1 when it
 * cannot (more streams than USE_STREAMS touched it, or an error). */
static int unit_wait_used(res_unit_t *un, cudaStream_t stream)
{
    if (un->use_overflow)
        return -1;
    for (int k = 0; k < un->n_used; k++)
        if (prof.wait(stream, un->used[k], 0) != cudaSuccess)
            return -1;
    return 0;
}

/* Enqueues the checksum of unit u's bytes on the device, behind the calls that have
 * touched it so far, into ck.host[u]; ck_done marks its end. -1 when it cannot be had
 * (no kernel, an error, a region whose size is not a whole number of words). */
static int checksum_issue(int u)
{
    res_unit_t *un = &res.units[u];
    un->ck_pending = 0;
    if (!ck.units || un->ck_done == NULL)
        return -1;
    uint64_t *out = ck.dev + u;
    if ((un->ready_recorded && prof.wait(ck.stream, un->ready, 0) != cudaSuccess) ||
        unit_wait_used(un, ck.stream) != 0 ||
        REAL(cudaMemsetAsync)(out, 0, sizeof *out, ck.stream) != cudaSuccess)
        return -1;
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size == 0)
            continue; /* freed by the application */
        if (r->size % 8 != 0)
            return -1;
        if (checksum_launch(r->va, r->size / 8, out) != CUDA_SUCCESS)
            return -1;
    }
    if (REAL(cudaMemcpyAsync)(ck.host + u, out, sizeof *out, cudaMemcpyDeviceToHost, ck.stream) != cudaSuccess ||
        prof.record(un->ck_done, ck.stream) != cudaSuccess)
        return -1;
    un->ck_pending = 1;
    un->ck_uses = un->uses;
    return 0;
}

/* Unit u's checksum now: the one issued behind its last launch if nothing has touched
 * it since, else a new one; waits for it on the host. -1 when it cannot be had. */
static int unit_checksum(int u, uint64_t *sum)
{
    res_unit_t *un = &res.units[u];
    if (!(un->ck_pending && un->ck_uses == un->uses) && checksum_issue(u) != 0)
        return -1;
    un->ck_pending = 0;
    if (prof.sync(un->ck_done) != cudaSuccess)
        return -1;
    *sum = ck.host[u];
    return 0;
}

/* Releases region r's physical memory, first copying its bytes back to the host store
 * when write_back is set. The calls that touched it have run. */
static int unload_region(res_region_t *r, int write_back, int keep)
{
    vmm_t *v = vmm_find(r->va);
    if (v == NULL)
        return -1;
    /* On the side stream, not the legacy one: a copy there would wait for all the
     * application's work, not only the unit's. */
    cudaError_t err = cudaSuccess;
    if (write_back) {
        err = REAL(cudaMemcpyAsync)(r->host, (void *)(uintptr_t)r->va, r->size, cudaMemcpyDeviceToHost, res.side);
        if (err == cudaSuccess)
            err = REAL(cudaStreamSynchronize)(res.side);
    }
    if (err != cudaSuccess)
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: copying a region back failed (cudaError %d)", (int)err);
    CUresult rc = drv.unmap(r->va, r->len);
    if (rc == CUDA_SUCCESS && keep && res.n_spare < res.cap_spare)
        res.spare[res.n_spare++] = (struct spare){ r->len, v->handle };
    else if (rc == CUDA_SUCCESS)
        rc = drv.release(v->handle);
    if (rc != CUDA_SUCCESS)
        FT_DEBUG("residency: unmapping %#llx failed: %d", (unsigned long long)r->va, (int)rc);
    return rc == CUDA_SUCCESS ? 0 : -1;
}

static void unload_unit(int u)
{
    res_unit_t *un = &res.units[u];
    /* Dropped without a copy back only when the device checksum proves it unchanged. */
    uint64_t sum;
    int write_back = 1, changed = 0;
    if (unit_checksum(u, &sum) == 0) {
        /* Without a reference yet (a unit that came from FT_SPILL's host memory), this
         * copy back makes the host store match the sum, which becomes the reference. */
        changed = un->ref_valid && sum != un->ref;
        write_back = !un->ref_valid || changed;
        un->ref = sum;
        un->ref_valid = 1;
    } else {
        un->ref_valid = 0;
    }
    /* Invariant 2: a unit that keeps changing stays on the device from its next load
     * on, outside the slots (over the plan's memory by its size). */
    if (changed && ++un->changes == KEEP_AFTER_CHANGES) {
        un->pinned = 1;
        char a[32];
        FT_WARN("residency: %s changed between loads %d times: it stays on the device from its "
                "next load on (%s over the plan)", ft_disc_unit(disc, (size_t)u)->name,
                KEEP_AFTER_CHANGES, human_bytes(un->bytes, a, sizeof a));
    }
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size == 0)
            continue; /* freed by the application */
        unload_region(r, write_back, 1);
        res.held_bytes -= r->len;
    }
    res.written_back += (uint64_t)write_back;
    un->loaded = 0;
    res.loaded--;
    res.unloads++;
}

/* The physical allocations kept from the unit just unloaded that no region of un can
 * take (more of a size than un has regions of it) are released before un's regions get
 * new ones: held together, the two would go over the budget. */
static void release_unmatched_spares(const res_unit_t *un)
{
    uint64_t t = now_ns();
    for (int i = res.n_spare - 1; i >= 0; i--) {
        int want = 0, have = 0;
        for (int k = 0; k < un->n; k++) {
            const res_region_t *r = &res.regions[un->first + k];
            want += r->size != 0 && r->len == res.spare[i].len;
        }
        for (int j = 0; j < res.n_spare; j++)
            have += res.spare[j].len == res.spare[i].len;
        if (have > want) {
            drv.release(res.spare[i].h);
            res.spare[i] = res.spare[--res.n_spare];
        }
    }
    res.ns_release += now_ns() - t;
}

/* The units this thread's call touched, to record their `used` events behind it; until
 * then (the call is not enqueued yet), nothing may evict them. */
static __thread int touched[8], n_touched;

static int touched_by_this_call(int u)
{
    for (int k = 0; k < n_touched; k++)
        if (touched[k] == u)
            return 1;
    return 0;
}

/* Makes unit u resident for a call on `stream` (the lock held). */
static void load_unit(int u, cudaStream_t stream, int keep)
{
    res_unit_t *un = &res.units[u];
    if (un->loaded)
        return;
    if (res.loaded >= res.slots) {
        /* The least recently loaded unit, other than `keep` (the unit running now) and
         * those the call being guarded touched already (a launch reading two units: the
         * first, loaded, was taken for the second's slot while the launch was not
         * enqueued, and it read unmapped memory). */
        int lru = -1;
        for (int i = 0; i < res.n_units; i++)
            if (res.units[i].loaded && res.units[i].n > 0 && !res.units[i].pinned && i != u &&
                i != keep && !touched_by_this_call(i) &&
                (lru < 0 || res.units[i].stamp < res.units[lru].stamp))
                lru = i;
        if (lru < 0 && keep >= 0)
            return; /* every slot holds a unit in use: no prefetch now */
        if (lru < 0)
            goto load; /* a call needs it now: over the slots rather than a fault */
        /* Mapping is not stream-ordered: its copy in and the calls that touched it
         * must have run. */
        uint64_t t = now_ns();
        if (res.units[lru].ready_recorded)
            prof.sync(res.units[lru].ready);
        unit_sync_used(&res.units[lru]);
        uint64_t t1 = now_ns();
        res.ns_wait += t1 - t;
        unload_unit(lru);
        res.ns_unmap += now_ns() - t1;
    }
load:;
    uint64_t t2 = now_ns(), copy0 = res.ns_copy;
    release_unmatched_spares(un);
    CUdevice dev;
    int have_dev = managed_cu_device(&dev) == 0;
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        r->mapping = r->size != 0 && have_dev && map_region(r, dev) == 0; /* size 0: freed */
    }
    if (have_dev)
        set_unit_access(un, dev);
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size == 0)
            continue;
        if (!r->mapping) {
            FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: cannot load a region of %s back; "
                          "its kernels will fault", ft_disc_unit(disc, (size_t)u)->name);
            continue;
        }
        r->mapping = 0;
        uint64_t t = now_ns();
        REAL(cudaMemcpyAsync)((void *)(uintptr_t)r->va, r->host, r->size, cudaMemcpyHostToDevice, stream);
        res.ns_copy += now_ns() - t;
        res.held_bytes += r->len;
        res.copied_in_bytes += r->size;
        res.region_loads++;
    }
    uint64_t t3 = now_ns();
    while (res.n_spare > 0)
        drv.release(res.spare[--res.n_spare].h);
    res.ns_release += now_ns() - t3;
    res.ns_map += now_ns() - t2 - (res.ns_copy - copy0);
    prof.record(un->ready, stream);
    un->ready_recorded = 1;
    un->touched_since_load = 0;
    un->waited_valid = 0;
    un->n_used = 0;
    un->use_overflow = 0;
    if (res.held_bytes > res.peak_held_bytes)
        res.peak_held_bytes = res.held_bytes;
    un->loaded = 1;
    un->stamp = ++res.clock;
    res.loaded += !un->pinned; /* a pinned unit holds no slot */
    res.loads++;
}

/* By address, for cudaFree (the region has left the table by then); the guard looks
 * regions up by id. */
static res_region_t *res_find(uint64_t addr)
{
    for (int i = 0; i < res.n_regions; i++)
        if (addr >= res.regions[i].va && addr < res.regions[i].va + res.regions[i].size)
            return &res.regions[i];
    return NULL;
}

/* The guard: every address a call touches is resident once this returns. */
static __thread cudaStream_t touched_stream;
/* A unit's first launch: the prefetch to run once the launch is enqueued (-1: none). */
static __thread int prefetch_after = -1;
/* A unit's last launch: the unit whose checksum to issue once it is enqueued. */
static __thread int checksum_after = -1;

/* FT_SPILL (the budget before the plan), below with the allocation code. */
static int spill_engaged;
static uint64_t spill_bytes;
static void spill_touch(const uint64_t *ptrs, size_t n, cudaStream_t stream);
static uint64_t spill_restore_all(const char *why);

static int guarding(void)
{
    return engine_held && __atomic_load_n(&res.active, __ATOMIC_RELAXED);
}

/* The kernel of the launch being guarded, for messages ("?" for copies and sets). */
static __thread const char *res_kernel_name = "?";

/* The repeat rule: a streamed region's last touch by one kernel on one lane, at the
 * lane's launch count `at`, and how many touches in a row came within a quarter of a
 * pass of the one before (`run`). Weights are grouped into units so that each is read
 * in one range of the pass: a kernel that keeps touching the same streamed weight every
 * few launches is carrying a stale address (PyTorch's cat kernels that discovery never
 * saw, in the prefill, held one weight's address in an unused metadata slot in every
 * layer). The third such touch in a row and those after it are stale; two reads half a
 * pass apart (a layer reading a far layer's weight) are not. Kept under res.lock. */
typedef struct {
    struct repeat_key {
        uint64_t kernel;
        uint64_t region;
    } key;
    uint64_t lane, at;
    uint32_t run;
    UT_hash_handle hh;
} repeat_t;
static repeat_t *repeats;
static __thread uint64_t lane_launches; /* this thread's guarded launches */

/* 1 when this touch of region id by kernel is stale by the repeat rule. Records it. */
static int repeat_touch(uint64_t kernel, uint32_t id)
{
    struct repeat_key key;
    memset(&key, 0, sizeof key);
    key.kernel = kernel;
    key.region = id;
    repeat_t *e;
    HASH_FIND(hh, repeats, &key, sizeof key, e);
    if (e == NULL) {
        if ((e = calloc(1, sizeof *e)) == NULL)
            return 0;
        e->key = key;
        e->lane = lane_id();
        e->at = lane_launches;
        e->run = 1;
        HASH_ADD(hh, repeats, key, sizeof key, e);
        return 0;
    }
    if (e->lane == lane_id() && e->at == lane_launches)
        return e->run >= 3; /* the same launch again */
    uint64_t window = res.pass_len / 4 > 4 ? (uint64_t)res.pass_len / 4 : 4; /* a quarter pass */
    int close = e->lane == lane_id() && lane_launches - e->at < window;
    e->run = close ? e->run + 1 : 1;
    e->lane = lane_id();
    e->at = lane_launches;
    return e->run >= 3;
}

/* Whether pass position `at` (ft_disc_track's; -1: unknown) is more than half a pass
 * from unit un's range of positions, counted in the order of a pass (positions wrap at
 * the pass length when passes begin past the record's first launch). */
static int far_from_range(long at, const res_unit_t *un)
{
    long len = res.pass_len, half = len / 2, s = res.pass_start;
    if (at < 0 || len <= 0)
        return 0;
    /* In pass order: positions before the start come after the wrap. A pass longer
     * than the recorded one counts on past the length. */
#define PASS_ORDER(x) ((x) >= s ? (x) - s : (x) + len - s)
    long a = PASS_ORDER(at), f = PASS_ORDER((long)un->first_launch), l = PASS_ORDER((long)un->last_launch);
#undef PASS_ORDER
    if (f > l)
        return 0; /* the range spans the wrap: no order to compare */
    return a + half < f || a > l + half;
}

/* ids: the regions a call touches (region table ids); unsure (NULL: none) flags those
 * found only at argument words that held garbage in discovery. The touch is stale
 * too when pos (the launch's position in a pass that follows the recorded one, else
 * -1) is outside the unit's range of positions: no launch of the recorded pass touched
 * it there (a weight touched outside its unit's range in discovery stays resident);
 * or when the kernel ran in the recorded pass touching no weight (weightless). Both
 * are garbage that looks like a pointer, in a word that held NULL or an activation's
 * address in discovery. So is one the repeat rule finds (kernel: the launch's kernel;
 * 0 for copies and sets, which it spares). An unsure or stale touch of a unit that is
 * not loaded loads nothing (FT_STRICT_GUARD=1: it does); of a loaded unit, it is a
 * touch like any other (a wait costs nothing there). at: launches since the lane's
 * pass began, also off the recorded sequence (-1: unknown); a touch more than half a
 * pass away from its unit's range says nothing of where the pass is, so it loads what
 * it needs but starts no prefetch (generate's reduce kernel on the H200 read a far
 * layer's weight through a stale address at each step's third launch, and the
 * prefetch that followed evicted the next layer: two misses a step). */
static void res_touch(const uint32_t *ids, const uint8_t *unsure, size_t n, cudaStream_t stream, long pos,
                      int weightless, uint64_t kernel, long at)
{
    if (!guarding())
        return;
    /* res.lock is held: engine_enter took it for this call. */
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= res.n_ids || res.by_id[ids[i]] < 0)
            continue;
        res_region_t *r = &res.regions[res.by_id[ids[i]]];
        res_unit_t *un = &res.units[r->unit];
        int unexpected = weightless ||
                           (pos >= 0 && ((uint32_t)pos < un->first_launch || (uint32_t)pos > un->last_launch));
        int again = kernel != 0 && repeat_touch(kernel, ids[i]);
        int stale = (unsure != NULL && unsure[i]) || unexpected || again;
        if (!un->loaded && stale && !res.strict) {
            res.unsure_skipped++;
            res.unexpected_skipped += (uint64_t)(unexpected && !(unsure != NULL && unsure[i]));
            res.repeat_skipped += (uint64_t)(again && !unexpected && !(unsure != NULL && unsure[i]));
            FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s: a stale address of %s (region %u%s) loads nothing",
                          res_kernel_name, ft_disc_unit(disc, (size_t)r->unit)->name, ids[i],
                          weightless ? ", from a kernel that touched no weight in the recorded pass"
                          : unexpected ? ", outside its unit's range of the pass"
                          : again ? ", touched by this kernel every few launches" : "");
            continue;
        }
        if (!un->loaded) {
            res.misses++;
            if (res.n_miss_log < MISS_LOG) {
                struct miss *m = &res.miss_log[res.n_miss_log++];
                snprintf(m->kernel, sizeof m->kernel, "%s", res_kernel_name);
                m->unit = r->unit;
                m->off_script = lane_off_script;
                m->pass = res.passes;
                m->pos = lane_last_pos;
            }
            FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s: miss on %s (region %u)", res_kernel_name,
                          ft_disc_unit(disc, (size_t)r->unit)->name, ids[i]);
            load_unit(r->unit, stream, -1);
        }
        /* A prefetch copied it on the side stream: this call waits for that copy (once
         * per stream and load: later work on the stream is ordered behind the wait). */
        /* The first touch of a unit after its load: what follows it in the learned
         * order is loaded next, whatever the launch's position in the pass. A stale
         * address (unsure) says nothing of where the pass is. */
        if (!un->touched_since_load && !stale && !far_from_range(at, un)) {
            un->touched_since_load = 1;
            if (prefetch_after < 0)
                prefetch_after = r->unit;
        }
        if (un->ready_recorded && !(un->waited_valid && un->waited == stream_key(stream))) {
            prof.wait(stream, un->ready, 0);
            un->waited = stream_key(stream);
            un->waited_valid = 1;
        }
        int seen = 0;
        for (int k = 0; k < n_touched; k++)
            seen |= touched[k] == r->unit;
        if (!seen && n_touched < 8)
            touched[n_touched++] = r->unit;
    }
    touched_stream = stream;
}

/* The unit whose range starts (end 0) or ends (end 1) at pass position pos, or -1: a
 * binary search, the units being in pass order (their ranges do not overlap). */
static int unit_bound_at(uint32_t pos, int end)
{
    int lo = 0, hi = res.n_units;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if ((end ? res.units[mid].last_launch : res.units[mid].first_launch) < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == res.n_units)
        return -1;
    return (end ? res.units[lo].last_launch : res.units[lo].first_launch) == pos ? lo : -1;
}

/* Prefetch: the pass has reached unit u's first launch; load the streamed units that
 * follow it, as many as the other slots hold, on the side stream. */
static void res_prefetch(int u, cudaStream_t stream)
{
    int ahead = res.slots - 1, n = res.n_units;
    for (int step = 1; step < n && ahead > 0; step++) {
        int w = (u + step) % n;
        if (res.units[w].n == 0)
            continue; /* resident */
        ahead--;
        if (!res.units[w].loaded) {
            load_unit(w, res.side, u);
            if (res.units[w].loaded)
                res.prefetches++;
        }
    }
}

/* Reads the step times whose closing event has completed, oldest first. */
static void step_harvest(void)
{
    while (res.harvested + 1 < res.passes) {
        cudaEvent_t a = res.pass_ev[res.harvested % STEP_RING];
        cudaEvent_t b = res.pass_ev[(res.harvested + 1) % STEP_RING];
        float ms;
        if (drv.event_query == NULL || drv.event_query((CUevent)b) != CUDA_SUCCESS)
            return;
        if (prof.elapsed(&ms, a, b) == cudaSuccess)
            res.step_ms[res.n_steps++ % STEP_SAMPLES] = ms;
        res.harvested++;
    }
}

/* A pass begins on `stream` (res.lock held). */
static void step_mark(cudaStream_t stream)
{
    if (res.pass_ev[0] == NULL)
        return;
    step_harvest();
    /* The ring is full of pending events: the oldest interval is given up. */
    if (res.passes - res.harvested >= STEP_RING)
        res.harvested = res.passes - STEP_RING + 1;
    if (prof.record(res.pass_ev[res.passes % STEP_RING], stream) == cudaSuccess)
        res.passes++;
    if (res.passes <= 64 || res.passes % 64 == 0)
        outside_sample("inference", (long)res.passes, 1);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The median measured step in us, of *n samples (0: none), from the intervals read at
 * pass starts. For the exit report: no CUDA call (the runtime's own exit handler has
 * run by then and the events may be gone), and no wait for the lock (a thread stopped
 * inside a guarded call may hold it; none counted then). */
static double step_median_us(uint64_t *n)
{
    *n = 0;
    if (pthread_mutex_trylock(&res.lock) != 0)
        return 0;
    uint64_t k = res.n_steps < STEP_SAMPLES ? res.n_steps : STEP_SAMPLES;
    float s[STEP_SAMPLES];
    memcpy(s, res.step_ms, k * sizeof *s);
    pthread_mutex_unlock(&res.lock);
    if (k == 0)
        return 0;
    qsort(s, k, sizeof *s, cmp_float);
    *n = k;
    return s[k / 2] * 1000.0;
}

/* Launches, copies and sets run between engine_enter and engine_leave. Once the engine
 * is on (or about to be), they hold res.lock from the guard to the moment the real call
 * has been enqueued: an unload (device synchronised, then memory released) can then
 * never fall between another thread's guard and its launch. Before that, they only
 * count themselves in `unlocked`, so that the switch can wait for them to finish. */
static _Atomic int unlocked;

/* After a switch that makes every call guarded (res.lock held): the calls already past
 * an unguarded entry finish enqueueing first. They never take res.lock meanwhile. */
static void wait_unguarded_calls(void)
{
    while (atomic_load(&unlocked) > 0)
        sched_yield();
}
static void activate_locked(void);

static int engine_enter(void)
{
    /* Once it is known that the engine never starts, calls pay one load. */
    if (__atomic_load_n(&engine_off, __ATOMIC_RELAXED))
        return 0;
    atomic_fetch_add(&unlocked, 1);
    if (!__atomic_load_n(&res.active, __ATOMIC_ACQUIRE) && !__atomic_load_n(&res.pending, __ATOMIC_ACQUIRE) &&
        !__atomic_load_n(&spill_engaged, __ATOMIC_ACQUIRE))
        return 0;
    atomic_fetch_sub(&unlocked, 1);
    pthread_mutex_lock(&res.lock);
    if (res.pending && !res.active)
        activate_locked();
    engine_held = 1;
    return 1;
}

static void engine_leave(int held)
{
    if (tag_pushed) {
        tag_pushed = 0;
        ft_cupti_tag_pop();
    }
    if (held) {
        for (int k = 0; k < n_touched; k++) {
            unit_record_use(&res.units[touched[k]], touched_stream);
            res.units[touched[k]].uses++;
        }
        n_touched = 0;
        /* A streamed unit's last launch of the pass is enqueued: its checksum follows
         * it at once, ready by the time the unit is evicted. */
        if (checksum_after >= 0) {
            if (res.units[checksum_after].loaded && res.units[checksum_after].n > 0)
                checksum_issue(checksum_after);
            checksum_after = -1;
        }
        if (prefetch_after >= 0) {
            res_prefetch(prefetch_after, touched_stream);
            prefetch_after = -1;
        }
        engine_held = 0;
        pthread_mutex_unlock(&res.lock);
    }
    else if (!__atomic_load_n(&engine_off, __ATOMIC_RELAXED))
        atomic_fetch_sub(&unlocked, 1);
}

/* The guard for copies and sets: their device source and destination. */
static void guard_copy(const void *dst, const void *src, cudaStream_t stream)
{
    if (!guarding())
        return;
    const void *p[2] = { dst, src };
    uint32_t ids[2];
    size_t n = 0;
    ft_region_t r;
    for (int i = 0; i < 2; i++)
        if (p[i] != NULL && ft_regions_find(regions, (uint64_t)(uintptr_t)p[i], &r))
            ids[n++] = r.id;
    res_touch(ids, NULL, n, stream, -1, 0, 0, -1);
}

static void observe_write(const void *dst);

/* Every copy and set begins here: the engine's entry, the write seen by discovery, and
 * the guard of its device destination and source (NULL where there is none). */
static void copy_guard(int held, const void *dst, const void *src, cudaStream_t stream)
{
    if (held && !res.active && __atomic_load_n(&spill_engaged, __ATOMIC_RELAXED)) {
        uint64_t p[2] = { (uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src };
        spill_touch(p, 2, stream);
    }
    observe_write(dst);
    guard_copy(dst, src, stream);
}

static int copy_enter(const void *dst, const void *src, cudaStream_t stream)
{
    int held = engine_enter();
    copy_guard(held, dst, src, stream);
    return held;
}

/* FT_SPILL's allocations back on the device when FlexTensor will stream nothing (`why`
 * goes in the warning about what the device cannot take back). 1 when some stay in
 * host memory: they are faulted in on use, so the engine stays on for them. */
static int spill_bring_back(const char *why)
{
    if (!__atomic_load_n(&spill_engaged, __ATOMIC_ACQUIRE))
        return 0;
    if (!engine_held)
        pthread_mutex_lock(&res.lock);
    int keep = spill_restore_all(why) > 0;
    if (!keep)
        __atomic_store_n(&spill_engaged, 0, __ATOMIC_RELEASE);
    if (!engine_held)
        pthread_mutex_unlock(&res.lock);
    return keep;
}

/* Planning is done: the next guarded call switches the engine on. */
static void start_residency(void)
{
    if (plan.rc == 0 && plan.out.slots > 0) {
        __atomic_store_n(&res.pending, 1, __ATOMIC_RELEASE);
    } else if (!spill_bring_back("the plan streams nothing")) {
        __atomic_store_n(&engine_off, 1, __ATOMIC_RELEASE);
    }
}

/* The host store of a streamed region: FT_PINNED_MEMORY (pinned or pageable) and
 * FT_PINNED_MEMORY_MODE (cudaHostAlloc, or page-aligned memory registered in place). */
typedef cudaError_t (*host_alloc_fn)(void **, size_t, unsigned int);
typedef cudaError_t (*host_register_fn)(void *, size_t, unsigned int);
typedef cudaError_t (*host_free_fn)(void *);

static const char *host_store_kind(void)
{
    if (!cfgp->pinned_memory)
        return "pageable host memory (FT_PINNED_MEMORY=false)";
    return cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_HOST_REGISTER
         ? "pinned host memory (registered in place)" : "pinned host memory";
}

static void *host_store_alloc(size_t size)
{
    void *p = NULL;
    if (cfgp->pinned_memory && cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC) {
        return own_host_alloc(&p, size) == cudaSuccess ? p : NULL;
    }
    size_t page = 4096;
    if (posix_memalign(&p, page, (size + page - 1) / page * page) != 0)
        return NULL;
    if (!cfgp->pinned_memory)
        return p;
    host_register_fn reg = (host_register_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaHostRegister");
    cudaError_t pending = own_pending();
    if (reg == NULL || own_call(reg(p, size, cudaHostRegisterDefault), pending) != cudaSuccess) {
        free(p);
        return NULL;
    }
    return p;
}

static void host_store_free(void *p)
{
    if (p == NULL)
        return;
    if (cfgp->pinned_memory && cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC) {
        host_free_fn f = (host_free_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaFreeHost");
        if (f != NULL)
            f(p);
        return;
    }
    if (cfgp->pinned_memory) {
        host_free_fn unreg = (host_free_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaHostUnregister");
        if (unreg != NULL)
            unreg(p);
    }
    free(p);
}

/* Makes unit i stream (res.lock held, its calls done): its regions backed by virtual
 * memory, other than shared ones, get a host store (or keep FT_SPILL's) and are copied
 * out and unmapped. 0 on success; -1 when it stays resident (nothing evictable, no host
 * memory). *moved and *shared add up bytes for the report. */
static int evict_unit(size_t i, uint64_t *moved, uint64_t *shared_resident)
{
    const ft_disc_unit_t *u = ft_disc_unit(disc, i);
    int first = res.n_regions, spilled_in_unit = 0, ok = 1;
    res.units[i].first = first;
    res.units[i].bytes = 0;
    for (uint32_t k = 0; k < u->n_regions && ok; k++) {
        uint64_t base, size;
        vmm_t *v;
        /* Regions below FT_VMM_MIN_SIZE are not backed by virtual memory: they
         * stay resident (small by definition), the rest of the unit streams. */
        if (ft_disc_region(disc, u->region_ids[k], &base, &size) != 0 || (v = vmm_find(base)) == NULL)
            continue;
        /* Touched from other units' ranges too: streaming it would load its unit
         * once per user. */
        if (ft_disc_region_shared(disc, u->region_ids[k])) {
            *shared_resident += size;
            continue;
        }
        /* Reached only through pointer arrays: the guard reads no device memory, so
         * it could not load it for the launch that uses it. */
        if (ft_disc_region_indirect_only(disc, u->region_ids[k])) {
            *shared_resident += size;
            continue;
        }
        res_region_t *r = &res.regions[res.n_regions++];
        *r = (res_region_t){ base, size, v->size, NULL, (int)i, u->region_ids[k], 0 };
        res.units[i].bytes += v->size;
        res.by_id[r->id] = res.n_regions - 1;
        /* Spilled before the plan (FT_SPILL): its host copy becomes the unit's. */
        if (v->spilled) {
            r->host = v->host;
            v->host = NULL;
            spilled_in_unit = 1;
        } else if ((r->host = host_store_alloc(size)) == NULL) {
            ok = 0;
        }
    }
    if (!ok || res.n_regions == first) {
        FT_WARN("residency: %s stays resident (%s)", u->name,
                ok ? "none of its regions is backed by virtual memory" : "no host memory for it");
        for (int k = first; k < res.n_regions; k++) {
            vmm_t *v = vmm_find(res.regions[k].va);
            if (v != NULL && v->spilled)
                v->host = res.regions[k].host; /* still spilled: brought back below */
            else
                host_store_free(res.regions[k].host);
            res.by_id[res.regions[k].id] = -1;
        }
        res.n_regions = first;
        return -1;
    }
    res.units[i].n = res.n_regions - first;
    /* A unit with a spilled region has no device copy to sum: its first eviction
     * copies it back and takes the reference then. */
    res.units[i].ref_valid = !spilled_in_unit && unit_checksum((int)i, &res.units[i].ref) == 0;
    for (int k = first; k < res.n_regions; k++) {
        vmm_t *v = vmm_find(res.regions[k].va);
        if (v != NULL && v->spilled) {
            v->spilled = 0; /* the engine's from now on */
            spill_bytes -= v->size;
        } else {
            unload_region(&res.regions[k], 1, 0);
        }
        *moved += res.regions[k].size;
    }
    res.units[i].loaded = 0;
    return 0;
}

/* Device bytes the process holds through the shim (res.lock held): what the region
 * table tracks, less what waits in host memory. */
static void usage_locked(ft_gpu_memory_usage_t *out);

/* Physical memory of unloaded units kept for the next load to reuse (res.lock held). */
static uint64_t spare_bytes_locked(void)
{
    uint64_t sum = 0;
    for (int i = 0; i < res.n_spare; i++)
        sum += res.spare[i].len;
    return sum;
}

/* Without the spares: they are a slot's memory, counted full by committed_locked. */
static uint64_t held_locked(void)
{
    ft_gpu_memory_usage_t u;
    usage_locked(&u);
    return u.total_bytes - spare_bytes_locked();
}

/* Bytes admitted whose allocation is not tracked yet (res.lock): by budget_admit after
 * the plan, by vmm_alloc under FT_SPILL before it. Two threads admitted one after the
 * other would each see room for itself alone; and an allocation FT_SPILL places in host
 * memory has its spilled bytes counted before its region, so held would be short. With
 * four threads allocating at once, the simulator's peak went 2-4 MiB over a 30 MiB
 * budget (spill.sh, --race-alloc). */
static uint64_t admitting;
/* Bytes of frees under way: their regions have left the table, but cudaFree (which
 * synchronises the device first) has not given their memory back yet. */
static uint64_t releasing;

/* The bytes unit i takes in a slot when it streams (res.lock held): its mapped
 * regions once it streams; the discovered size of a resident unit counted as streaming
 * (`extra`, a candidate of demote_for); 0 for a resident or pinned unit. */
static uint64_t slot_len_locked(int i, int extra)
{
    if (i == extra)
        return ft_disc_unit(disc, (size_t)i)->bytes;
    if (res.units[i].pinned)
        return 0;
    uint64_t len = 0;
    for (int k = 0; k < res.units[i].n; k++)
        len += res.regions[res.units[i].first + k].size != 0 ? res.regions[res.units[i].first + k].len : 0;
    return len;
}

/* What the slots hold at most (res.lock held): the sum of the res.slots largest
 * streaming units, with unit `extra` counted as streaming (-1: none). Not slots times
 * the largest: a tensor-parallel shard's 892 MiB embeddings made to stream beside
 * 196 MiB layers counted 3 x 892 MiB and no allocation fitted the budget any more (the
 * H200 pair, sixth session). Taken by distinct lengths, largest first, so that it
 * needs no array. */
static uint64_t slots_full_locked(int extra)
{
    uint64_t sum = 0, below = UINT64_MAX;
    for (int left = res.slots; left > 0;) {
        uint64_t top = 0;
        int count = 0;
        for (int i = 0; i < res.n_units; i++) {
            uint64_t len = slot_len_locked(i, extra);
            if (len >= below || len == 0 || len < top)
                continue;
            count = len > top ? 1 : count + 1;
            top = len;
        }
        if (count == 0)
            break;
        int take = count < left ? count : left;
        sum += (uint64_t)take * top;
        left -= take;
        below = top;
    }
    return sum;
}

/* Device bytes the process holds through the shim with every slot full (res.lock held):
 * the loaded streamed units come and go, so an allocation admitted while a slot is
 * empty, or holds a smaller unit, would take the process past the budget once the
 * slots fill (the H200's FT_SPILL run: 4706 MiB held against 4608). */
static uint64_t committed_locked(void)
{
    uint64_t held = held_locked() + admitting + __atomic_load_n(&releasing, __ATOMIC_RELAXED);
    uint64_t cap = slots_full_locked(-1);
    return res.held_bytes < cap ? held - res.held_bytes + cap : held;
}

/* After the plan, an allocation of `size` would take the process past the budget (the
 * plan made room for the non-weight memory profiling saw; a prefill after decode steps
 * needs more): resident units are made to stream until it fits (res.lock held). Each
 * time, the unit that gives back the most room for the bytes it will copy in every
 * pass: its size less what it adds to the full slots (a unit larger than every
 * streaming one raises them). 0 when it fits, -1 when nothing more can leave the
 * device, or nothing that leaves makes room. */
static int demote_for(uint64_t size)
{
    uint64_t budget = plan.in.budget_bytes;
    int synced = 0;
    uint64_t committed;
    while ((committed = committed_locked()) + size > budget) {
        int best = -1;
        uint64_t best_gain = 0, best_bytes = 1, cap = slots_full_locked(-1);
        for (int i = 0; i < res.n_units; i++) {
            if (!plan.out.resident[i] || res.units[i].n != 0 || res.units[i].unstreamable ||
                !ft_disc_unit(disc, (size_t)i)->offload) /* kept by the unit selection */
                continue;
            uint64_t bytes = ft_disc_unit(disc, (size_t)i)->bytes, grow = slots_full_locked(i) - cap;
            if (bytes <= grow)
                continue;
            uint64_t gain = bytes - grow;
            /* the most room per byte, the larger room on a tie */
            double l = (double)gain / (double)bytes, r = (double)best_gain / (double)best_bytes;
            if (best < 0 || l > r || (l == r && gain > best_gain)) {
                best = i;
                best_gain = gain;
                best_bytes = bytes;
            }
        }
        if (best < 0)
            return -1;
        if (!synced) { /* a resident unit's calls leave no events behind */
            REAL(cudaDeviceSynchronize)();
            synced = 1;
        }
        uint64_t moved = 0, shared = 0;
        plan.out.resident[best] = 0;
        char a[32], b[32], c[32], d[32];
        if (evict_unit((size_t)best, &moved, &shared) != 0) {
            plan.out.resident[best] = 1;
            res.units[best].unstreamable = 1; /* never tried again */
            continue;
        }
        res.units[best].demoted = 1;
        FT_WARN("residency: allocating %s would exceed the budget (%s, %s held with the slots "
                "full): %s (%s) streams "
                "from now on", human_bytes(size, a, sizeof a), human_bytes(budget, b, sizeof b),
                human_bytes(committed, c, sizeof c), ft_disc_unit(disc, (size_t)best)->name,
                human_bytes(moved, d, sizeof d));
        if (log_diagnostics) {
            ft_gpu_memory_usage_t u;
            usage_locked(&u);
            FT_INFO("residency: held before that: %.1f MiB = tracked %.1f + granule padding %.1f - "
                    "streamed not loaded %.1f - FT_SPILL host %.1f + the unit's %.1f; %d unit(s) "
                    "loaded of %d slot(s), %.1f MiB of them", (double)(u.total_bytes + moved) / 1048576.0,
                    (double)ft_regions_bytes(regions) / 1048576.0,
                    (double)__atomic_load_n(&vmm_pad, __ATOMIC_RELAXED) / 1048576.0,
                    (double)(u.unmapped_bytes - spill_bytes) / 1048576.0, (double)spill_bytes / 1048576.0,
                    (double)moved / 1048576.0, res.loaded, res.slots, (double)res.held_bytes / 1048576.0);
        }
    }
    return 0;
}

static uint64_t spill_admit(uint64_t size);

/* The allocation guard: whether `size` bytes fit the budget (after the plan, resident
 * units made to stream if needed; before it, under FT_SPILL, an allocation that will
 * not be served from virtual memory -- `passthrough` -- gets room by spill_admit).
 * -1 when they cannot; 1 when they do and are reserved until admit_done; 0 when there
 * is no budget to keep yet. */
static int budget_admit(uint64_t size, int passthrough)
{
    if (!__atomic_load_n(&res.active, __ATOMIC_ACQUIRE))
        return passthrough && spill_admit(size) > 0 ? 1 : 0;
    if (plan.in.budget_bytes == 0)
        return 0;
    pthread_mutex_lock(&res.lock);
    int rc = demote_for(size);
    if (rc == 0)
        admitting += size;
    pthread_mutex_unlock(&res.lock);
    if (rc != 0) {
        char a[32], b[32];
        FT_ERROR("an allocation of %s does not fit the memory budget (%s: FT_GPU_MEM_LIMIT or "
                 "FT_MAX_GPU_MEM_FRACTION) even with every weight streamed: cudaErrorMemoryAllocation",
                 human_bytes(size, a, sizeof a), human_bytes(plan.in.budget_bytes, b, sizeof b));
        return -1;
    }
    return 1;
}

static void track(void *p, size_t size, uint32_t flags);

/* After the allocation budget_admit let through (adm its answer): p (NULL when it
 * failed) is tracked, then the reservation goes. */
static void admit_done(int adm, uint64_t size, void *p, uint32_t flags)
{
    if (p != NULL)
        track(p, size, flags);
    if (adm == 1) {
        pthread_mutex_lock(&res.lock);
        admitting -= size;
        pthread_mutex_unlock(&res.lock);
    }
}

/* The engine could not be set up at the switch (the exit report's verdict says so). */
static int res_start_failed;

/* The switch, res.lock held: calls already past their guard finish enqueueing first,
 * then the device drains, then the streamed units are evicted. */
static void activate_locked(void)
{
    __atomic_store_n(&res.active, 1, __ATOMIC_RELEASE);
    wait_unguarded_calls();
    int slots = plan.out.slots;
    size_t n = plan.in.n;
    int total = 0, streamed = 0;
    res.strict = cfgp->strict_guard;
    res.pass_len = (long)ft_disc_pass_length(disc);
    res.pass_start = (long)ft_disc_track_start(disc);
    /* Room for every unit's regions: a resident unit may be made to stream later
     * (demote_for), when the application allocates past the budget. */
    for (size_t i = 0; i < n; i++) {
        const ft_disc_unit_t *u = ft_disc_unit(disc, i);
        total += (int)u->n_regions;
        streamed += plan.out.resident[i] ? 0 : (int)u->n_regions;
        for (uint32_t k = 0; k < u->n_regions; k++)
            if (u->region_ids[k] >= res.n_ids)
                res.n_ids = u->region_ids[k] + 1;
    }
    if (streamed == 0 || slots <= 0) {
        __atomic_store_n(&res.active, 0, __ATOMIC_RELEASE);
        return;
    }
    /* Everything that can fail comes before the first eviction: afterwards the engine
     * must run, or evicted units would fault. */
    res.regions = calloc((size_t)total, sizeof *res.regions);
    res.spare = calloc((size_t)total, sizeof *res.spare);
    res.cap_spare = res.spare != NULL ? total : 0;
    res.units = calloc(n, sizeof *res.units);
    res.by_id = malloc(res.n_ids * sizeof *res.by_id);
    int ok = res.regions != NULL && res.units != NULL && res.by_id != NULL;
    for (size_t i = 0; ok && i < n; i++)
        for (int k = 0; ok && k < USE_STREAMS; k++)
            ok = prof.create(&res.units[i].used[k], cudaEventDisableTiming) == cudaSuccess;
    for (size_t i = 0; ok && i < n; i++)
        ok = prof.create(&res.units[i].ready, cudaEventDisableTiming) == cudaSuccess &&
             (!ck.units || prof.create(&res.units[i].ck_done, cudaEventDisableTiming) == cudaSuccess);
    if (!ok) {
        FT_WARN("residency: out of memory or events; nothing offloaded");
        res_start_failed = 1;
        __atomic_store_n(&res.active, 0, __ATOMIC_RELEASE);
        return;
    }
    for (uint32_t k = 0; k < res.n_ids; k++)
        res.by_id[k] = -1;
    for (int i = 0; i < STEP_RING; i++)
        if (prof.create(&res.pass_ev[i], cudaEventDefault) != cudaSuccess) {
            res.pass_ev[0] = NULL; /* no measured step; the engine runs all the same */
            break;
        }
    if (own_stream(&res.side) != cudaSuccess)
        res.side = NULL; /* the legacy stream: correct, slower */
    REAL(cudaDeviceSynchronize)();
    if (!cfgp->pinned_memory)
        FT_WARN("residency: FT_PINNED_MEMORY=false: streamed weights live in pageable host "
                "memory; every copy in is staged and synchronous, several times slower");
    uint64_t moved = 0, shared_resident = 0;
    int evicted_units = 0;
    for (size_t i = 0; i < n; i++) {
        const ft_disc_unit_t *u = ft_disc_unit(disc, i);
        res.units[i].first_launch = u->first_launch;
        res.units[i].last_launch = u->last_launch;
        res.units[i].loaded = 1; /* resident units, and streamed ones we cannot evict */
    }
    for (size_t i = 0; i < n; i++) {
        if (plan.out.resident[i])
            continue;
        if (evict_unit(i, &moved, &shared_resident) == 0)
            evicted_units++;
    }
    res.n_units = (int)n;
    res.slots = slots;
    FT_INFO("residency: %d unit(s), %.1f MiB, moved to %s; copied in ahead of use (on demand "
            "after a miss), at most %d at once", evicted_units, (double)moved / 1048576.0,
            host_store_kind(), slots);
    if (shared_resident > 0)
        FT_INFO("residency: %.1f MiB of weights used by several units, or reached only through "
                "pointer arrays, stay resident",
                (double)shared_resident / 1048576.0);
    /* FT_SPILL: what the plan keeps on the device comes back to it; the budget now
     * has room for it, the streamed units having left. */
    if (__atomic_load_n(&spill_engaged, __ATOMIC_ACQUIRE)) {
        spill_restore_all(NULL);
        __atomic_store_n(&spill_engaged, 0, __ATOMIC_RELEASE);
    }
}

/* FT_LOG_LEVEL=trace: the words of a kernel's first launch that look like device
 * addresses, and whether each falls in a region -- to see how a library passes its
 * pointers (plain, in a TMA descriptor, one level down). */
static void trace_arg_words(const kinfo_t *k, const char *what, const void *p, size_t len)
{
    const unsigned char *b = p;
    int shown = 0;
    FT_TRACE("launch args of %s: %s, %zu bytes", k->name, what, len);
    for (size_t off = 0; off + 8 <= len && shown < 48; off += 8) {
        uint64_t v;
        memcpy(&v, b + off, 8);
        if ((v >> 32) == 0 || (v >> 47) != 0)
            continue;
        ft_region_t r;
        int in = ft_regions_find(regions, v, &r);
        FT_TRACE("  +%-5zu %#018llx %s", off, (unsigned long long)v, in ? "in a region" : "");
        shown++;
    }
}

/* FT_CUPTI_CONFIRM=first-pass: at the end of discovery's first pass, CUPTI is
 * detached (its callbacks, and its attachment, cost every launch: about 1.7 us on an
 * H200) when every driver call so far went through the wrappers; profiling attaches
 * it again to time kernels. A bypass keeps it for the rest of discovery. */
static int cupti_first_pass, cupti_detached_early;

static void cupti_after_first_pass(void)
{
    ft_cupti_stats_t s;
    ft_cupti_get_stats(&s);
    if (s.status != FT_CUPTI_STATUS_ACTIVE)
        return;
    uint64_t unseen = s.unseen_launches + s.unseen_copies + s.unseen_sets;
    if (unseen > 0) {
        FT_INFO("CUPTI: %llu driver call(s) of the first pass bypassed the wrappers (first: %s); it "
                "stays attached for the rest of discovery", (unsigned long long)unseen, s.first_unseen);
        return;
    }
    ft_cupti_stop();
    __atomic_store_n(&cupti_detached_early, 1, __ATOMIC_RELEASE); /* read by the thread ending discovery */
    FT_INFO("CUPTI: the first pass's %llu launches, %llu copies and %llu sets in the driver all went "
            "through the wrappers; detached until profiling (FT_CUPTI_CONFIRM=first-pass)",
            (unsigned long long)s.launches, (unsigned long long)s.copies, (unsigned long long)s.sets);
}

/* An allocation on another device than the managed one before the plan: one process
 * on several GPUs is not supported yet (README; on the H200 pair profiling failed in
 * that case, and on the simulator a device used after the plan made the streamed
 * model's results wrong); or FT_GPU_DEVICE names a device the process does not have.
 * FlexTensor stands down: discovery and profiling stop, no plan is made, CUPTI is
 * released, FT_SPILL's allocations come back to the device (what the device cannot
 * take back stays in host memory, faulted in on use), and calls pass through from
 * then on. `why` (kept for the exit report's verdict) says what happened. */
static int stood_down;
static char stood_down_why[192];

static void stand_down_because(const char *why)
{
    if (__atomic_exchange_n(&stood_down, 1, __ATOMIC_ACQ_REL))
        return;
    snprintf(stood_down_why, sizeof stood_down_why, "%s", why);
    __atomic_store_n(&discovering, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&profiling, 0, __ATOMIC_RELEASE);
    if (prof.cupti_timing) {
        prof.cupti_timing = 0;
        ft_cupti_timing_stop();
    }
    ft_cupti_stop();
    FT_WARN("%s, so FlexTensor stands down (nothing is offloaded; calls pass through)", why);
    if (!spill_bring_back("FlexTensor stands down"))
        __atomic_store_n(&engine_off, 1, __ATOMIC_RELEASE);
}

static void stand_down(int other)
{
    char why[192];
    snprintf(why, sizeof why, "an allocation on device %d while FlexTensor manages device %d: one "
             "process on several GPUs is not supported yet", other,
             __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE));
    stand_down_because(why);
}

static void observe_launch(uint64_t key, int is_stub, void **params, void **extra, cudaStream_t stream)
{
    int disc_on = __atomic_load_n(&discovering, __ATOMIC_RELAXED);
    int res_on = engine_held && __atomic_load_n(&res.active, __ATOMIC_RELAXED);
    /* FT_SPILL's faults go on whatever discovery found (nothing, after its restarts). */
    int spill_on = !res_on && engine_held && __atomic_load_n(&spill_engaged, __ATOMIC_RELAXED);
    if (!disc_on && !res_on && !spill_on && !__atomic_load_n(&profiling, __ATOMIC_RELAXED))
        return;
    kinfo_t *k = kinfo_get(key, is_stub);
    if (k == NULL)
        return;
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    int first = FT_LOG_ENABLED(FT_LOG_TRACE) && __atomic_fetch_add(&k->launches, 1, __ATOMIC_RELAXED) == 0;
    /* Only the residency guard and FT_SPILL's faults act on unsure ids; discovery and
     * pass tracking drop them (below), and a scan that does not learn can then read
     * only the words that held region addresses in discovery. */
    int scan = (disc_on ? FT_SCAN_LEARN : 0) | (!res_on && !spill_on ? FT_SCAN_SURE : 0);
    if (params != NULL && k->nparams > 0) {
        ft_scan_params_junk(regions, params, k->size, (size_t)k->nparams, &k->junk, scan, &set);
        for (int i = 0; first && i < k->nparams; i++)
            if (params[i] != NULL)
                trace_arg_words(k, "kernelParams", params[i], k->size[i]);
    } else if (extra != NULL) {
        scan_extra(extra, k, scan, &set, first);
    } else if (first) {
        FT_TRACE("launch args of %s: none readable (%d params known)", k->name, k->nparams);
    }
    if (spill_on) {
        /* What pointer arrays reach is faulted in with the rest, in one call (a second
         * call could move the first one's allocations out again). */
        if (set.n > 0)
            peek_pointer_arrays(k, &set, stream);
        spill_touch(set.ptr, set.n, stream);
    }
    if (res_on) {
        /* Pass tracking sees the touches the kernel is sure to make; the guard all. */
        int expected, weightless;
        long pos = ft_disc_track(disc, lane_id(), key, &set, &expected, &weightless), tracked = pos;
        if (pos == 0) {
            step_mark(stream);
            lane_off_script = 0;
        }
        if (pos >= 0 && !lane_off_script && !expected)
            lane_off_script = 1;
        if (lane_off_script)
            pos = -1;
        res_kernel_name = k->name;
        lane_launches++;
        res_touch(set.id, set.unsure, set.n, stream, pos, weightless, key, tracked);
        res_kernel_name = "?";
        lane_last_pos = tracked; /* a miss above was after the launch before */
        /* After this launch is enqueued (engine_leave): an eviction waits on the host
         * for the evicted unit's last use and its copy back, and the device should have
         * this unit's first kernel to run meanwhile. */
        if (pos >= 0) {
            int at = unit_bound_at((uint32_t)pos, 0);
            if (at >= 0)
                prefetch_after = at;
            checksum_after = unit_bound_at((uint32_t)pos, 1);
        }
        return;
    }
    /* Discovery and pass tracking see the touches the kernel is sure to make. */
    ft_scan_set_drop_unsure(&set);
    if (!disc_on) {
        if (!__atomic_load_n(&profiling, __ATOMIC_RELAXED))
            return; /* only FT_SPILL's faults were wanted */
        long pos = ft_disc_track(disc, lane_id(), key, &set, NULL, NULL);
        if (pos >= 0)
            profile_launch(lane_id(), pos, stream);
        return;
    }
    if (set.n > 0 && !spill_on) /* under FT_SPILL, peeked above */
        peek_pointer_arrays(k, &set, stream);
    int seen = ft_disc_launch(disc, lane_id(), key, k->name, &set);
    if (seen & FT_DISC_PASS_WORK)
        launch_did_once = 1; /* a pass's cost, reported apart (ft_disc_pass_work) */
    if ((seen & FT_DISC_NEW_PASS) && cfgp->cupti_confirm == FT_CUPTI_CONFIRM_FIRST_PASS &&
        !__atomic_exchange_n(&cupti_first_pass, 1, __ATOMIC_ACQ_REL))
        cupti_after_first_pass();
    /* One thread wins the switch, however many see discovery done at once. */
    if (ft_disc_state(disc) == FT_DISC_DONE && __atomic_exchange_n(&discovering, 0, __ATOMIC_ACQ_REL)) {
        /* Release CUPTI so that a profiler started later can subscribe. */
        start_profiling();
        if (__atomic_load_n(&cupti_detached_early, __ATOMIC_ACQUIRE) && __atomic_load_n(&profiling, __ATOMIC_RELAXED)) {
            char why[256] = "";
            if (ft_cupti_start(why, sizeof why) != FT_CUPTI_STATUS_ACTIVE)
                FT_INFO("CUPTI not attached again for profiling: %s; kernels timed with CUDA events", why);
        }
        /* CUPTI stays for profiling when its activity API can time the kernels, and is
         * released afterwards (a profiler started later can subscribe then). */
        prof.cupti_timing = __atomic_load_n(&profiling, __ATOMIC_RELAXED) && ft_cupti_timing_start() == 0;
        if (!prof.cupti_timing)
            ft_cupti_stop();
        else if ((prof.kern = malloc((prof.kern_cap = 1u << 16) * sizeof *prof.kern)) == NULL)
            prof.cupti_timing = 0;
    }
}

/* A copy or set wrote [dst, dst+n): during discovery, the region is not a weight. */
static void observe_write(const void *dst)
{
    if (!__atomic_load_n(&discovering, __ATOMIC_RELAXED) || dst == NULL)
        return;
    ft_region_t r;
    if (!ft_regions_find(regions, (uint64_t)(uintptr_t)dst, &r))
        return;
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    ft_scan_set_add(&set, r.id, (uint64_t)(uintptr_t)dst);
    ft_disc_write(disc, &set);
}

/* --- allocation --------------------------------------------------------------------- */

static void track(void *p, size_t size, uint32_t flags)
{
    if (p == NULL || size == 0)
        return;
    int64_t id = ft_regions_insert(regions, (uint64_t)(uintptr_t)p, size, flags, 0);
    if (id == 1)
        outside_sample("the first allocation", -1, 0);
    if (id >= 0 && __atomic_load_n(&profiling, __ATOMIC_RELAXED)) {
        uint64_t now = device_bytes(), was = __atomic_load_n(&peak_tracked, __ATOMIC_RELAXED);
        while (now > was && !__atomic_compare_exchange_n(&peak_tracked, &was, now, 1, __ATOMIC_RELAXED,
                                                         __ATOMIC_RELAXED))
            ;
    }
    if (id < 0)
        FT_LOG_CAPPED(FT_LOG_WARN, 5, "region %p (%zu bytes) not tracked: %s", p, size,
                      id == -17 ? "overlaps a live region" : "out of memory");
}

static void untrack(const void *p)
{
    ft_region_t r;
    if (p != NULL && ft_regions_remove(regions, (uint64_t)(uintptr_t)p, &r) == 0)
        ft_disc_region_freed(disc, r.id);
}

static int vmm_ready(CUdevice *dev)
{
    resolve_driver();
    if (__atomic_load_n(&vmm_disabled, __ATOMIC_RELAXED) || !drv.reserve || !drv.create || !drv.map ||
        !drv.set_access || !drv.unmap || !drv.release || !drv.address_free || !drv.granularity ||
        !drv.ctx_get_device)
        return 0;
    /* cudaMalloc makes the primary context current; so must we before the driver. */
    if (REAL(cudaFree)(NULL) != cudaSuccess || drv.ctx_get_device(dev) != CUDA_SUCCESS)
        return 0;
    /* Written once (the first thread to learn it) and read with acquire, so that the
     * plain reads after vmm_ready returns are ordered after that one write. */
    if (__atomic_load_n(&vmm_granularity, __ATOMIC_ACQUIRE) == 0) {
        CUmemAllocationProp prop = device_prop(*dev);
        size_t g = 0, none = 0;
        if (drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) {
            FT_WARN("virtual memory management unavailable; allocations are not evictable");
            __atomic_store_n(&vmm_disabled, 1, __ATOMIC_RELAXED);
            return 0;
        }
        __atomic_compare_exchange_n(&vmm_granularity, &none, g, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE);
    }
    return 1;
}

/* --- the budget before the plan (FT_SPILL) -------------------------------------------
 *
 * With FT_SPILL and a budget, the budget holds from the first allocation. A
 * virtual-memory allocation that the budget cannot hold starts in host memory: its
 * addresses are reserved, nothing is mapped. A launch, copy or set that touches it
 * faults it in first: it is mapped and its bytes copied in on the caller's stream,
 * after the least recently touched mapped allocations are copied out to host memory
 * and unmapped, until the budget holds it. While anything is spilled, launches,
 * copies and sets hold res.lock from this guard until they are enqueued, as the
 * residency engine's do. At the switch to the plan, spilled allocations of streamed
 * units stay in host memory (their host copy becomes the unit's), the others are
 * faulted in. */
static uint64_t spill_clock;
static uint64_t spill_faults, spill_evictions;
static uint64_t spill_limit;  /* the budget, once known; atomic: any allocating thread may learn it */

static int spill_wanted(void)
{
    return cfgp->spill && !res.active && !__atomic_load_n(&res.pending, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&engine_off, __ATOMIC_RELAXED);
}

static uint64_t spill_budget(void)
{
    uint64_t limit = __atomic_load_n(&spill_limit, __ATOMIC_RELAXED);
    if (limit == 0) {
        size_t free_b = 0, total_b = 0;
        if (REAL(cudaMemGetInfo) != NULL && REAL(cudaMemGetInfo)(&free_b, &total_b) == cudaSuccess) {
            limit = configured_budget(total_b);
            __atomic_store_n(&spill_limit, limit, __ATOMIC_RELAXED);
        }
    }
    return limit;
}

/* Device bytes held through the shim now. */
static uint64_t spill_held(void)
{
    uint64_t tracked = device_bytes() + admitting + __atomic_load_n(&bw_device_bytes, __ATOMIC_RELAXED) +
                       __atomic_load_n(&releasing, __ATOMIC_RELAXED);
    return tracked > spill_bytes ? tracked - spill_bytes : 0;
}

static int map_fresh(uint64_t va, size_t len, CUmemGenericAllocationHandle *h)
{
    CUdevice dev;
    if (managed_cu_device(&dev) != 0)
        return -1;
    return map_physical(dev, va, len, h, 0, NULL, 0) == CUDA_SUCCESS ? 0 : -1;
}

/* The device time of a copy of `bytes` at `gbps` (bytes per ns; 25 when unmeasured). */
static uint64_t copy_ns(uint64_t bytes, double gbps)
{
    return (uint64_t)((double)bytes / (gbps > 0 ? gbps : 25.0));
}

/* This thread runs a profiled pass of the profiled lane: FT_SPILL's moves are charged. */
static int profile_charging(void)
{
    return __atomic_load_n(&profiling, __ATOMIC_RELAXED) && prof.moves_ns != NULL &&
           lane_id() == __atomic_load_n(&prof.lane, __ATOMIC_RELAXED);
}

/* An FT_SPILL move of `ns` (device time) during a profiled pass of the profiled lane:
 * charged to the unit under way, whose time it is taken out of. */
static void profile_charge_move(uint64_t ns)
{
    if (!profile_charging())
        return;
    int u = __atomic_load_n(&prof.cur_unit, __ATOMIC_RELAXED);
    if (u >= 0 && (size_t)u < prof.n)
        __atomic_fetch_add(&prof.moves_ns[u], ns, __ATOMIC_RELAXED);
}

/* The moves of one guarded call or allocation, charged together (res.lock held) as
 * the gap they leave in the stream's timeline: an event before them and one after,
 * the time between. The stream waits for them (spill_out synchronises the device, the
 * copies are synchronous), and not only for their copies: pinning a host store,
 * mapping, setting access, releasing take host time too. Charged at the copies' time
 * at the measured bandwidth alone, the 13.5 GB plan saw a 94 ms all-resident step
 * against a real 17.9 (H200, seventh session); the simulator shows it with
 * FTSIM_VMM_ACCESS_NS (spill.sh). Outside profiling, nothing is recorded. */
static struct {
    int armed; /* 1: `before` recorded; -1: charge `copies`; 0: not profiling */
    cudaEvent_t before, after;
    cudaStream_t stream;
    uint64_t copies; /* their time at the measured bandwidth, when the events fail */
} moves;

static void moves_begin(cudaStream_t stream)
{
    moves.armed = 0;
    moves.copies = 0;
    if (!profile_charging())
        return;
    if (moves.before == NULL && (prof.create(&moves.before, cudaEventDefault) != cudaSuccess ||
                                 prof.create(&moves.after, cudaEventDefault) != cudaSuccess)) {
        moves.before = NULL;
        moves.armed = -1; /* the copies' time, then */
        return;
    }
    moves.stream = stream;
    moves.armed = prof.record(moves.before, stream) == cudaSuccess ? 1 : -1;
}

static void moves_end(int moved)
{
    if (moves.armed == 0 || !moved)
        return;
    float ms = 0;
    if (moves.armed == 1 && prof.record(moves.after, moves.stream) == cudaSuccess &&
        prof.sync(moves.after) == cudaSuccess && prof.elapsed(&ms, moves.before, moves.after) == cudaSuccess)
        profile_charge_move((uint64_t)((double)ms * 1e6));
    else
        profile_charge_move(moves.copies);
}

/* In discovery, the checksum of what v is about to copy out (res.lock held, the device
 * synchronised), summed on the device first: a kernel at the device's read rate, small
 * beside the copy. A snapshot then need not read the host copy (on the H200, summing
 * the 9 GB spilled there on the host took 1.09 s a snapshot). */
static void spill_sum(vmm_t *v)
{
    v->sum_ok = 0;
    if (!__atomic_load_n(&discovering, __ATOMIC_RELAXED) || v->asked % 8 != 0 || !sums_ready())
        return;
    if (REAL(cudaMemsetAsync)(dh.dev, 0, sizeof *dh.dev, ck.stream) != cudaSuccess ||
        checksum_launch(v->va, v->asked / 8, dh.dev) != CUDA_SUCCESS ||
        REAL(cudaMemcpyAsync)(dh.host, dh.dev, sizeof *dh.dev, cudaMemcpyDeviceToHost, ck.stream) != cudaSuccess ||
        REAL(cudaStreamSynchronize)(ck.stream) != cudaSuccess)
        return;
    v->sum = dh.host[0];
    v->sum_ok = 1;
}

/* Copies v out to host memory and unmaps it (res.lock held). 0 on success. */
static int spill_out(vmm_t *v)
{
    if (v->host == NULL && (v->host = host_store_alloc(v->size)) == NULL)
        return -1;
    sync_reaching_devices();
    int prev = managed_device_enter();
    spill_sum(v);
    managed_device_leave(prev);
    if (REAL(cudaMemcpy)(v->host, (void *)(uintptr_t)v->va, v->size, cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    if (drv.unmap(v->va, v->size) != CUDA_SUCCESS)
        return -1;
    drv.release(v->handle);
    v->spilled = 1;
    spill_bytes += v->size;
    spill_evictions++;
    __atomic_fetch_add(&spill_ns, copy_ns(v->size, bw.d2h), __ATOMIC_RELAXED);
    moves.copies += copy_ns(v->size, bw.d2h);
    return 0;
}

/* Room under the budget for `size` more bytes (res.lock held): the least recently
 * touched allocations are copied out, never one touched at `stamp`. -1, said once,
 * when nothing more can leave the device. */
static int spill_make_room(uint64_t size, uint64_t stamp)
{
    uint64_t budget = spill_budget();
    while (budget > 0 && spill_held() + size > budget) {
        vmm_t *lru = NULL, *x, *tmp;
        pthread_mutex_lock(&vmm_lock);
        HASH_ITER(hh, vmms, x, tmp)
            if (!x->spilled && x->stamp != stamp && (lru == NULL || x->stamp < lru->stamp))
                lru = x;
        pthread_mutex_unlock(&vmm_lock);
        if (lru == NULL || spill_out(lru) != 0) {
            FT_WARN_CAPPED(1, "FT_SPILL: nothing more can leave the device; the budget is exceeded "
                           "while a call needs more than it holds");
            return -1;
        }
    }
    return 0;
}

/* Maps v back and copies its bytes in, first making room under the budget (never
 * moving out an allocation touched at `stamp`, the call being guarded). Over the
 * budget when nothing else can go. */
static void spill_in(vmm_t *v, cudaStream_t stream, uint64_t stamp)
{
    spill_make_room(v->size, stamp);
    CUmemGenericAllocationHandle h;
    if (map_fresh(v->va, v->size, &h) != 0) {
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "FT_SPILL: cannot map %zu bytes back; the call will fault", v->size);
        return;
    }
    v->handle = h;
    v->spilled = 0;
    spill_bytes -= v->size;
    spill_faults++;
    /* Synchronous: other threads' streams may touch it as soon as it is mapped. */
    REAL(cudaMemcpy)((void *)(uintptr_t)v->va, v->host, v->size, cudaMemcpyHostToDevice);
    __atomic_fetch_add(&spill_ns, copy_ns(v->size, bw.h2d), __ATOMIC_RELAXED);
    moves.copies += copy_ns(v->size, bw.h2d);
}

/* The guard before the plan (res.lock held): the allocations behind `ptrs` are
 * stamped, and the spilled ones faulted in. */
static void spill_touch(const uint64_t *ptrs, size_t n, cudaStream_t stream)
{
    uint64_t stamp = ++spill_clock;
    vmm_t *need[FT_SCAN_MAX_IDS + 2];
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        ft_region_t r;
        vmm_t *v;
        if (ptrs[i] == 0 || !ft_regions_find(regions, ptrs[i], &r) || (v = vmm_find(r.base)) == NULL)
            continue;
        v->stamp = stamp;
        if (v->spilled && m < sizeof need / sizeof *need)
            need[m++] = v;
    }
    if (m == 0)
        return;
    moves_begin(stream);
    for (size_t i = 0; i < m; i++)
        if (need[i]->spilled)
            spill_in(need[i], stream, stamp);
    moves_end(1);
}

/* FT_SPILL holds allocations in host memory from now on (res.lock held): every launch,
 * copy and set is guarded, so that none can touch an allocation while it moves, and
 * those already past an unguarded entry finish first. */
static void spill_engage_locked(void)
{
    if (spill_engaged)
        return;
    __atomic_store_n(&spill_engaged, 1, __ATOMIC_RELEASE);
    wait_unguarded_calls();
}

/* Before the plan, an allocation the shim does not serve from virtual memory (the
 * driver's cuMemAlloc, as cuBLAS makes its workspace; cudaMallocAsync; one below
 * FT_VMM_MIN_SIZE) cannot start in host memory: room is made for it under FT_SPILL's
 * budget by moving others out. The H200 pair went 42 MiB over the budget in its first
 * forward without this. Its bytes are counted in `admitting` until admit_done; returns
 * them (0: nothing to hold). */
static uint64_t spill_admit(uint64_t size)
{
    if (!spill_wanted() || spill_budget() == 0)
        return 0;
    pthread_mutex_lock(&res.lock);
    if (!spill_wanted()) {
        pthread_mutex_unlock(&res.lock);
        return 0;
    }
    if (!spill_engaged && spill_held() + size > spill_budget()) {
        char a[32];
        FT_INFO("FT_SPILL: an allocation the budget (%s) cannot hold besides the rest: the least "
                "recently used move to host memory", human_bytes(spill_budget(), a, sizeof a));
        spill_engage_locked();
    }
    uint64_t out0 = spill_evictions;
    moves_begin(NULL); /* the legacy stream: it waits for the blocking streams' work */
    spill_make_room(size, UINT64_MAX); /* no call's allocations to keep */
    moves_end(spill_evictions != out0);
    admitting += size;
    pthread_mutex_unlock(&res.lock);
    return size;
}

/* Reads len bytes at addr from the host copy when addr lies in a spilled allocation
 * (discovery's content hashes); 0 when it does not. */
/* addr's allocation while it is spilled (FT_SPILL); else NULL. */
static vmm_t *spilled_vmm(uint64_t addr)
{
    if (!__atomic_load_n(&spill_engaged, __ATOMIC_ACQUIRE))
        return NULL;
    ft_region_t r;
    vmm_t *v;
    if (!ft_regions_find(regions, addr, &r) || (v = vmm_find(r.base)) == NULL || !v->spilled)
        return NULL;
    return v;
}

/* Where addr's bytes are while its allocation is spilled; else NULL. */
static const void *spilled_host(uint64_t addr)
{
    vmm_t *v = spilled_vmm(addr);
    return v != NULL ? (const char *)v->host + (addr - v->va) : NULL;
}

static int spilled_read(void *dst, uint64_t addr, size_t len)
{
    const void *h = spilled_host(addr);
    if (h != NULL)
        memcpy(dst, h, len);
    return h != NULL;
}

/* Every spilled allocation back on the device (res.lock held): the plan will not
 * stream, so the budget cannot hold. */
static uint64_t spill_restore_all(const char *why)
{
    if (!spill_engaged)
        return 0;
    vmm_t *x, *tmp;
    uint64_t back = 0, left = 0;
    pthread_mutex_lock(&vmm_lock);
    HASH_ITER(hh, vmms, x, tmp) {
        CUmemGenericAllocationHandle h;
        if (!x->spilled)
            continue;
        if (map_fresh(x->va, x->size, &h) != 0) {
            left += x->size;
            continue;
        }
        x->handle = h;
        x->spilled = 0;
        spill_bytes -= x->size;
        back += x->size;
        REAL(cudaMemcpy)((void *)(uintptr_t)x->va, x->host, x->size, cudaMemcpyHostToDevice);
    }
    pthread_mutex_unlock(&vmm_lock);
    if (back > 0 && why != NULL)
        FT_WARN("FT_SPILL: %s: %.1f MiB brought back to the device, over the budget",
                why, (double)back / 1048576.0);
    else if (back > 0)
        FT_INFO("FT_SPILL: %.1f MiB that the plan keeps resident brought back to the device",
                (double)back / 1048576.0);
    if (left > 0)
        FT_LOG(why != NULL ? FT_LOG_WARN : FT_LOG_ERROR,
               "FT_SPILL: the device has no room for %.1f MiB more%s", (double)left / 1048576.0,
               why != NULL ? ": it stays in host memory and is brought in on use, one "
                             "allocation at a time (slow)"
                           : "; kernels touching it will fault");
    return left;
}

/* FT_GPU_DEVICE: the one device whose allocations FlexTensor manages (-1: the device
 * current at the first allocation). Others pass through, untracked, so their
 * launches touch no region. */

/* runtime: the caller is a runtime allocation, which makes the primary context
 * current first (a driver caller has its own context current). */
/* The process allocates on device `other` too: where it can reach the managed device,
 * FlexTensor's mappings from now on, and those mapped already, grant it access, as the
 * allocations cudaMalloc would have made are reachable once the application enables
 * peer access. Said once per device. */
static void peer_note(int other, int managed)
{
    static uint32_t checked;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    if (other < 0 || other >= 32 || managed < 0 || (__atomic_load_n(&checked, __ATOMIC_ACQUIRE) >> other & 1u))
        return;
    pthread_mutex_lock(&lock);
    if (checked >> other & 1u) {
        pthread_mutex_unlock(&lock);
        return;
    }
    int can = 0;
    if (drv.can_access_peer != NULL && drv.set_access != NULL &&
        drv.can_access_peer(&can, other, managed) == CUDA_SUCCESS && can) {
        __atomic_or_fetch(&peer_devs, 1u << other, __ATOMIC_ACQ_REL);
        unsigned granted = 0, mapped = 0;
        CUmemAccessDesc a = { { CU_MEM_LOCATION_TYPE_DEVICE, other }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
        vmm_t *v, *tmp;
        pthread_mutex_lock(&vmm_lock);
        HASH_ITER(hh, vmms, v, tmp) {
            if (v->spilled)
                continue;
            mapped++;
            /* Streamed units not loaded have nothing mapped: refused, and granted at
             * their next load. */
            granted += drv.set_access(v->va, v->size, &a, 1) == CUDA_SUCCESS;
        }
        pthread_mutex_unlock(&vmm_lock);
        FT_INFO("device %d is used too: FlexTensor's mappings on device %d are made accessible from it "
                "(%u of %u allocations now, the rest as they are mapped)", other, managed, granted, mapped);
    } else {
        FT_INFO("device %d is used too, and cannot reach device %d's memory (no peer access): kernels "
                "and copies on it cannot touch FlexTensor's allocations", other, managed);
    }
    /* After the grants: what standing down brings back to the device is mapped with
     * them. */
    if (!__atomic_load_n(&res.active, __ATOMIC_ACQUIRE) && !__atomic_load_n(&res.pending, __ATOMIC_ACQUIRE))
        stand_down(other);
    else
        FT_ERROR("an allocation on device %d after FlexTensor's plan for device %d: one process on "
                 "several GPUs is not supported; kernels or copies on device %d that touch streamed "
                 "weights may find them unloaded", other, managed, other);
    __atomic_or_fetch(&checked, 1u << other, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&lock);
}

/* FT_GPU_DEVICE names no device of this process: it stood down at the first
 * allocation, and every allocation passes through (no peer to note). */
static int no_such_device;

/* At the first allocation (the driver answers by then): 1 when FT_GPU_DEVICE names a
 * device the process does not have. FlexTensor then stands down at once, and says
 * why, rather than at the first allocation on a device it does not manage. Set before
 * the managed device is, so that no thread takes the missing device for a real one. */
static int missing_device(int pick)
{
    int count = 0;
    if (cfgp->gpu_device < 0 || drv.device_count == NULL || drv.device_count(&count) != CUDA_SUCCESS ||
        pick < count)
        return 0;
    char why[192];
    snprintf(why, sizeof why, "FT_GPU_DEVICE=%d, but this process sees %d CUDA device(s), "
             "numbered from 0 (CUDA_VISIBLE_DEVICES renumbers them)", pick, count);
    __atomic_store_n(&no_such_device, 1, __ATOMIC_RELEASE);
    stand_down_because(why);
    return 1;
}

/* The managed device is chosen: it is said, and a budget it cannot hold is said now,
 * not found out later. FT_GPU_MEM_LIMIT above the device's memory is never reached:
 * FT_SPILL, holding allocations to it, moves none to host memory before the device is
 * full (a model larger than the device then fails to load: seen on the simulator), and
 * the plan caps it to what the device has free. */
static void managed_device_chosen(int pick)
{
    FT_INFO("managing device %d (FT_GPU_DEVICE%s)", pick, cfgp->gpu_device >= 0 ? "" : "=-1: the first allocation's");
    size_t total = 0;
    if (cfgp->gpu_mem_limit > 0 && drv.device_total_mem != NULL &&
        drv.device_total_mem(&total, (CUdevice)pick) == CUDA_SUCCESS && total > 0 &&
        cfgp->gpu_mem_limit > (uint64_t)total) {
        char a[32], b[32];
        FT_WARN("FT_GPU_MEM_LIMIT (%s) is more than device %d has (%s): %sthe plan will cap it to "
                "what the device has free; set it to at most %s", human_bytes(cfgp->gpu_mem_limit, a, sizeof a),
                pick, human_bytes(total, b, sizeof b),
                cfgp->spill ? "FT_SPILL moves nothing to host memory before the device is full (a "
                "model larger than the device fails to load), and " : "", b);
    }
}

static int on_managed_device(int runtime)
{
    CUdevice dev;
    resolve_driver();
    if (__atomic_load_n(&no_such_device, __ATOMIC_ACQUIRE))
        return 0;
    if (drv.ctx_get_device == NULL || (runtime && REAL(cudaFree)(NULL) != cudaSuccess) ||
        drv.ctx_get_device(&dev) != CUDA_SUCCESS)
        return 1; /* cannot tell: managed, as before the option existed */
    int want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE);
    if (want == -2) {
        int pick = cfgp->gpu_device >= 0 ? cfgp->gpu_device : (int)dev;
        int unset = -2;
        if (missing_device(pick))
            return 0;
        if (__atomic_compare_exchange_n(&managed_dev, &unset, pick, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            managed_device_chosen(pick);
        want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE);
    }
    if ((int)dev != want)
        peer_note((int)dev, want);
    return (int)dev == want;
}

/* The device FlexTensor's physical memory goes on: the managed one, whatever device
 * the calling thread has current (a fault-in from a copy issued on another device put
 * a weight's memory there, and the next kernel on the managed device faulted). 0 on
 * success. */
static int managed_cu_device(CUdevice *dev)
{
    int want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE);
    if (want >= 0) {
        *dev = (CUdevice)want;
        return 0;
    }
    return drv.ctx_get_device(dev) == CUDA_SUCCESS ? 0 : -1;
}

/* Makes the managed device current for FlexTensor's own device work, from whatever
 * thread and device the application's call came: the checksum's module, stream and
 * buffers are the managed device's, and a kernel reading its memory from another
 * device without peer access faults. Returns the device to restore, or -1. */
static struct {
    cudaError_t (*get)(int *);
    cudaError_t (*set)(int);
} cur_dev;

static void cur_dev_resolve(void)
{
    if (cur_dev.get == NULL) {
        cur_dev.set = (cudaError_t(*)(int))ft_shim_real_dlsym(RTLD_NEXT, "cudaSetDevice");
        cur_dev.get = (cudaError_t(*)(int *))ft_shim_real_dlsym(RTLD_NEXT, "cudaGetDevice");
    }
}

static int managed_device_enter(void)
{
    cur_dev_resolve();
    int want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE), cur = -1;
    if (want < 0 || cur_dev.get == NULL || cur_dev.set == NULL || cur_dev.get(&cur) != cudaSuccess || cur == want)
        return -1;
    return cur_dev.set(want) == cudaSuccess ? cur : -1;
}

static void managed_device_leave(int prev)
{
    if (prev >= 0)
        cur_dev.set(prev);
}

/* The host waits for every device that can reach FlexTensor's memory: the managed one
 * and its peers in use (peer_devs), whatever device the thread has current. Before an
 * allocation is unmapped, a copy that another device's stream has queued on it must be
 * over: cudaDeviceSynchronize waits for the current device alone, and with the thread
 * back on the managed device, a copy still queued on device 1 read an allocation
 * FT_SPILL had just moved out (illegal address on the simulator under load). */
static void sync_reaching_devices(void)
{
    uint32_t peers = __atomic_load_n(&peer_devs, __ATOMIC_ACQUIRE);
    int managed = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE), cur = -1;
    REAL(cudaDeviceSynchronize)();
    if (peers == 0)
        return;
    cur_dev_resolve();
    if (cur_dev.get == NULL || cur_dev.set == NULL || cur_dev.get(&cur) != cudaSuccess)
        return;
    for (int d = 0; d < 32; d++)
        if ((d == managed || (peers >> d & 1u)) && d != cur && cur_dev.set(d) == cudaSuccess)
            REAL(cudaDeviceSynchronize)();
    cur_dev.set(cur);
}

/* Device addresses of virtual-memory allocations (core/vaspace.h): cut in order out of
 * reservations of FT_VMM_RESERVE bytes, so that a unit's regions, allocated one after
 * another, lie end to end and a load sets their access in one call (set_unit_access).
 * One reservation per allocation, at the end of the last as a hint, had the H200's
 * driver put about 70% of them elsewhere (5875 cuMemSetAccess calls for 8337 regions in
 * the tensor-parallel run, 270 us each). Its own lock: allocations come from any thread,
 * and a chunk's reservation is a driver call not to make under res.lock. */
static ft_vaspace_t *vas;
static int vas_off; /* FT_VMM_RESERVE=0, or a chunk could not be reserved: one reservation each */
static pthread_mutex_t vas_lock = PTHREAD_MUTEX_INITIALIZER;

static int vas_reserve(uint64_t *base, uint64_t size, uint64_t hint, void *ctx)
{
    CUdeviceptr va = 0;
    (void)ctx;
    if (drv.reserve(&va, size, vmm_granularity, hint, 0) != CUDA_SUCCESS &&
        (hint == 0 || drv.reserve(&va, size, vmm_granularity, 0, 0) != CUDA_SUCCESS))
        return -1;
    *base = va;
    return 0;
}

/* Address space for len bytes: 0 and *va, or the driver's error. */
static CUresult va_get(size_t len, CUdeviceptr *va)
{
    pthread_mutex_lock(&vas_lock);
    if (vas == NULL && !vas_off) {
        uint64_t chunk = va_chunk / vmm_granularity * vmm_granularity;
        vas = chunk != 0 ? ft_vaspace_new(chunk, vmm_granularity, vas_reserve, NULL) : NULL;
        vas_off = vas == NULL;
    }
    uint64_t got = 0;
    int ok = !vas_off && ft_vaspace_get(vas, len, &got) == 0;
    if (!ok && !vas_off) {
        char a[32];
        vas_off = 1;
        FT_WARN("could not reserve %s of device address space (FT_VMM_RESERVE): one reservation per "
                "allocation from now on, and a load sets access region by region",
                human_bytes(va_chunk, a, sizeof a));
    }
    pthread_mutex_unlock(&vas_lock);
    if (ok) {
        *va = (CUdeviceptr)got;
        return CUDA_SUCCESS;
    }
    return drv.reserve(va, len, vmm_granularity, 0, 0);
}

/* Gives [va, va+len) back to where va_get found it. */
static void va_put(CUdeviceptr va, size_t len)
{
    pthread_mutex_lock(&vas_lock);
    int mine = vas != NULL && ft_vaspace_put(vas, va, len) == 0;
    pthread_mutex_unlock(&vas_lock);
    if (!mine)
        drv.address_free(va, len);
}

/* Serves an allocation from virtual memory. cudaSuccess, cudaErrorMemoryAllocation,
 * or cudaErrorNotSupported (the caller then passes it through). *admitted: bytes counted
 * in `admitting`, for the caller to take off once the region is tracked. */
static cudaError_t vmm_alloc(void **out, size_t size, uint64_t *admitted)
{
    CUdevice dev;
    if (!vmm_ready(&dev))
        return cudaErrorNotSupported;
    size_t len = (size + vmm_granularity - 1) / vmm_granularity * vmm_granularity;
    CUdeviceptr va = 0;
    CUmemGenericAllocationHandle h = 0;
    CUresult rc = va_get(len, &va);
    if (rc != CUDA_SUCCESS)
        goto fail;
    /* FT_SPILL: over the budget, the allocation starts in host memory; within it, it
     * counts as held from this decision on. */
    void *host = NULL;
    int spill_on = spill_wanted() && spill_budget() > 0;
    if (spill_on) {
        pthread_mutex_lock(&res.lock);
        int over = spill_held() + len > spill_budget();
        if (!over) {
            admitting += len;
            *admitted = len;
        }
        pthread_mutex_unlock(&res.lock);
        spill_on = over;
    }
    if (spill_on && (host = host_store_alloc(len)) != NULL) {
        vmm_t *v = calloc(1, sizeof *v);
        if (v == NULL) {
            host_store_free(host);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto fail_va;
        }
        *v = (vmm_t){ .va = va, .size = len, .asked = size, .spilled = 1, .host = host };
        pthread_mutex_lock(&vmm_lock);
        HASH_ADD(hh, vmms, va, sizeof v->va, v);
        pthread_mutex_unlock(&vmm_lock);
        pthread_mutex_lock(&res.lock);
        spill_bytes += len;
        __atomic_add_fetch(&vmm_pad, len - size, __ATOMIC_RELAXED);
        /* Until the caller tracks the region, its size is counted here: the pad and the
         * spilled bytes are counted already, so held would be `size` short meanwhile. */
        admitting += size;
        *admitted = size;
        if (!spill_engaged) {
            char a[32];
            FT_INFO("FT_SPILL: allocations past the budget (%s) start in host memory",
                    human_bytes(spill_budget(), a, sizeof a));
            spill_engage_locked();
        }
        pthread_mutex_unlock(&res.lock);
        *out = (void *)(uintptr_t)va;
        return cudaSuccess;
    }
    rc = map_physical(dev, va, len, &h, 0, NULL, 0);
    if (rc != CUDA_SUCCESS)
        goto fail_va;
    vmm_t *v = calloc(1, sizeof *v);
    if (v == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail_map;
    }
    v->va = va;
    v->size = len;
    v->asked = size;
    v->handle = h;
    pthread_mutex_lock(&vmm_lock);
    HASH_ADD(hh, vmms, va, sizeof v->va, v);
    int added = v->hh.tbl != NULL;
    pthread_mutex_unlock(&vmm_lock);
    if (!added) {
        free(v);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail_map;
    }
    /* The pad is counted from now on; of what was admitted, the region's size remains. */
    pthread_mutex_lock(&res.lock);
    __atomic_add_fetch(&vmm_pad, len - size, __ATOMIC_RELAXED);
    if (*admitted > 0) {
        admitting -= len - size;
        *admitted = size;
    }
    pthread_mutex_unlock(&res.lock);
    *out = (void *)(uintptr_t)va;
    return cudaSuccess;

fail_map:
    drv.unmap(va, len);
    drv.release(h);
fail_va:
    va_put(va, len);
fail:
    if (rc == CUDA_ERROR_OUT_OF_MEMORY)
        return cudaErrorMemoryAllocation;
    FT_LOG_CAPPED(FT_LOG_WARN, 3, "virtual memory allocation of %zu bytes failed (CUresult %d); "
                  "passing it to cudaMalloc", size, (int)rc);
    return cudaErrorNotSupported;
}

/* 1 when p was a virtual-memory allocation (now released), 0 when it is not one. */
static int vmm_free(void *p)
{
    uint64_t va = (uint64_t)(uintptr_t)p;
    pthread_mutex_lock(&vmm_lock);
    vmm_t *v;
    HASH_FIND(hh, vmms, &va, sizeof va, v);
    if (v != NULL)
        HASH_DEL(vmms, v);
    pthread_mutex_unlock(&vmm_lock);
    if (v == NULL)
        return 0;
    /* cudaFree synchronises the device before releasing; so do we. */
    REAL(cudaDeviceSynchronize)();
    int mapped = !v->spilled;
    __atomic_sub_fetch(&vmm_pad, v->size - v->asked, __ATOMIC_RELAXED);
    pthread_mutex_lock(&res.lock);
    if (v->spilled)
        spill_bytes -= v->size;
    if (v->host != NULL) { /* a streamed unit's host copy is its region's by now */
        host_store_free(v->host);
        v->host = NULL;
    }
    res_region_t *r = res.active ? res_find(va) : NULL;
    if (r != NULL) {
        /* A streamed region: unmapped while its unit is not loaded; it leaves the
         * engine for good. */
        mapped = res.units[r->unit].loaded;
        if (mapped)
            res.held_bytes -= r->len;
        r->va = r->size = 0;
        host_store_free(r->host);
        r->host = NULL;
    }
    pthread_mutex_unlock(&res.lock);
    if (mapped) {
        drv.unmap(v->va, v->size);
        drv.release(v->handle);
    }
    va_put(v->va, v->size);
    free(v);
    return 1;
}

cudaError_t ft_hook_rt_malloc(cudaMalloc_fn_t real, void **devPtr, size_t size)
{
    if (!on_managed_device(1))
        return real(devPtr, size);
    int vmm = devPtr != NULL && vmm_min_bytes != 0 && size >= vmm_min_bytes;
    int adm = budget_admit(size, !vmm);
    if (adm < 0)
        return cudaErrorMemoryAllocation;
    cudaError_t rc = cudaErrorInvalidValue;
    uint32_t flags = 0;
    uint64_t admitted = 0;
    if (vmm) {
        rc = vmm_alloc(devPtr, size, &admitted);
        flags = FT_REGION_VMM;
    }
    if (rc != cudaSuccess && rc != cudaErrorMemoryAllocation) {
        rc = real(devPtr, size);
        flags = 0;
    }
    admit_done(adm, size, rc == cudaSuccess ? *devPtr : NULL, flags);
    if (admitted > 0) {
        pthread_mutex_lock(&res.lock);
        admitting -= admitted;
        pthread_mutex_unlock(&res.lock);
    }
    return rc;
}

/* A free begins: what it will give back counts as held until free_end (the budget's
 * admissions meanwhile, on other threads, must not take it as room). */
static uint64_t free_begin(const void *p)
{
    ft_region_t r;
    /* Only budget_admit and FT_SPILL (spill_held) read it: nothing to count while
     * everything is admitted. Before the plan, FT_SPILL's faults took a free under
     * way for room: four threads freeing while others faulted weights in went 2-4 MiB
     * over a 30 MiB budget on the simulator (spill.sh, --race-alloc). */
    int kept = (__atomic_load_n(&res.active, __ATOMIC_ACQUIRE) && plan.in.budget_bytes != 0) ||
               __atomic_load_n(&spill_engaged, __ATOMIC_ACQUIRE);
    if (p == NULL || !kept || !ft_regions_find(regions, (uint64_t)(uintptr_t)p, &r))
        return 0;
    vmm_t *v = vmm_find(r.base);
    uint64_t bytes = v != NULL ? v->size : r.size;
    __atomic_add_fetch(&releasing, bytes, __ATOMIC_RELAXED);
    return bytes;
}

static void free_end(uint64_t bytes)
{
    __atomic_sub_fetch(&releasing, bytes, __ATOMIC_RELAXED);
}

cudaError_t ft_hook_rt_free(cudaFree_fn_t real, void *devPtr)
{
    uint64_t bytes = free_begin(devPtr);
    untrack(devPtr);
    cudaError_t rc = devPtr != NULL && vmm_free(devPtr) ? cudaSuccess : real(devPtr);
    free_end(bytes);
    return rc;
}

cudaError_t ft_hook_rt_malloc_async(cudaMallocAsync_fn_t real, void **devPtr, size_t size,
                                    cudaStream_t stream)
{
    if (!on_managed_device(1))
        return real(devPtr, size, stream);
    int adm = budget_admit(size, 1);
    if (adm < 0)
        return cudaErrorMemoryAllocation;
    cudaError_t rc = real(devPtr, size, stream);
    admit_done(adm, size, rc == cudaSuccess ? *devPtr : NULL, 0);
    return rc;
}

cudaError_t ft_hook_rt_malloc_pool_async(cudaMallocFromPoolAsync_fn_t real, void **ptr, size_t size,
                                         cudaMemPool_t pool, cudaStream_t stream)
{
    if (!on_managed_device(1))
        return real(ptr, size, pool, stream);
    int adm = budget_admit(size, 1);
    if (adm < 0)
        return cudaErrorMemoryAllocation;
    cudaError_t rc = real(ptr, size, pool, stream);
    admit_done(adm, size, rc == cudaSuccess ? *ptr : NULL, 0);
    return rc;
}

cudaError_t ft_hook_rt_free_async(cudaFreeAsync_fn_t real, void *devPtr, cudaStream_t stream)
{
    untrack(devPtr);
    return real(devPtr, stream);
}

CUresult ft_hook_drv_malloc(cuMemAlloc_v2_fn_t real, CUdeviceptr *dptr, size_t n)
{
    if (!on_managed_device(0))
        return real(dptr, n);
    int adm = budget_admit(n, 1);
    if (adm < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, n);
    admit_done(adm, n, rc == CUDA_SUCCESS ? (void *)(uintptr_t)*dptr : NULL, 0);
    return rc;
}

CUresult ft_hook_drv_free(cuMemFree_v2_fn_t real, CUdeviceptr dptr)
{
    uint64_t bytes = free_begin((void *)(uintptr_t)dptr);
    untrack((void *)(uintptr_t)dptr);
    CUresult rc = real(dptr);
    free_end(bytes);
    return rc;
}

CUresult ft_hook_drv_malloc_async(cuMemAllocAsync_fn_t real, CUdeviceptr *dptr, size_t n, CUstream s)
{
    if (!on_managed_device(0))
        return real(dptr, n, s);
    int adm = budget_admit(n, 1);
    if (adm < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, n, s);
    admit_done(adm, n, rc == CUDA_SUCCESS ? (void *)(uintptr_t)*dptr : NULL, 0);
    return rc;
}

CUresult ft_hook_drv_free_async(cuMemFreeAsync_fn_t real, CUdeviceptr dptr, CUstream s)
{
    untrack((void *)(uintptr_t)dptr);
    return real(dptr, s);
}

/* --- launches -------------------------------------------------------------------------- */

/* FlexTensor's own host time in a launch -- the hook less the real call -- sampled
 * at one launch in LAUNCH_SAMPLE on each thread (a clock read costs about as much as
 * the engine's whole work once the plan streams nothing), summed by phase for the exit
 * report: the per-launch cost measured in the process, beside the same launches,
 * rather than against another process on a host whose speed drifts. */
#define LAUNCH_SAMPLE 64
enum { PH_DISCOVERY, PH_PROFILING, PH_STREAMING, PH_IDLE, PH_OTHER, PH_COUNT };
static _Atomic uint64_t launch_self_ns[PH_COUNT], launch_samples[PH_COUNT];
static __thread unsigned launch_tick; /* thread-local: no shared counter line per launch */

typedef struct {
    int on;
    uint64_t self, t;
} launch_clock_t;

/* Every launch hook: the engine's entry and the launch observed before the real call
 * (FlexTensor's time, on a sampled launch, starts here and pauses at the return). */
static inline int launch_enter(launch_clock_t *c, uint64_t key, int is_stub, void **params, void **extra,
                               cudaStream_t stream)
{
    c->on = ++launch_tick % LAUNCH_SAMPLE == 0;
    if (c->on) {
        launch_did_once = 0;
        c->t = now_ns();
    }
    int held = engine_enter();
    observe_launch(key, is_stub, params, extra, stream);
    if (c->on)
        c->self = now_ns() - c->t;
    return held;
}

/* A sampled launch's exit: its time added to the phase's. */
static void launch_leave_sampled(launch_clock_t *c, int held)
{
    c->t = now_ns();
    engine_leave(held);
    c->self += now_ns() - c->t;
    if (launch_did_once)
        return; /* timed apart (once_charge) */
    int ph = __atomic_load_n(&discovering, __ATOMIC_RELAXED)     ? PH_DISCOVERY
           : __atomic_load_n(&profiling, __ATOMIC_RELAXED)       ? PH_PROFILING
           : __atomic_load_n(&res.active, __ATOMIC_RELAXED)      ? PH_STREAMING
           : __atomic_load_n(&engine_off, __ATOMIC_RELAXED)      ? PH_IDLE
                                                                : PH_OTHER;
    atomic_fetch_add_explicit(&launch_self_ns[ph], c->self, memory_order_relaxed);
    atomic_fetch_add_explicit(&launch_samples[ph], 1, memory_order_relaxed);
}

/* ... and the engine's exit after the real call. */
static inline void launch_leave(launch_clock_t *c, int held)
{
    if (c->on)
        launch_leave_sampled(c, held);
    else
        engine_leave(held);
}

/* ns in n parts, in us each (0 for none). */
static double mean_us(uint64_t ns, uint64_t n)
{
    return n > 0 ? (double)ns / 1e3 / (double)n : 0.0;
}

static void report_launch_self(void)
{
    const char *const names[PH_COUNT] = { "discovery", "profiling", "streaming",
                                          __atomic_load_n(&stood_down, __ATOMIC_ACQUIRE)
                                              ? "after standing down" : "after a plan that streams nothing",
                                          "other" };
    char line[512];
    size_t len = 0;
    for (int ph = 0; ph < PH_COUNT; ph++) {
        uint64_t n = atomic_load(&launch_samples[ph]);
        if (n > 0)
            len += (size_t)snprintf(line + len, sizeof line - len, "%s%s %.2f us (%llu)", len ? ", " : "",
                                    names[ph], mean_us(atomic_load(&launch_self_ns[ph]), n),
                                    (unsigned long long)n);
        if (len >= sizeof line)
            break;
    }
    if (len > 0)
        FT_INFO("host time in FlexTensor per launch, the real call excluded (1 launch in %d sampled): %s",
                LAUNCH_SAMPLE, line);
    uint64_t nk = atomic_load(&once_n[ONCE_KERNEL]), np = atomic_load(&once_n[ONCE_PEEK]), nw = 0, ws = 0;
    if (disc != NULL)
        ft_disc_pass_work(disc, &nw, &ws);
    if (nk + np + nw > 0)
        FT_INFO("one-time work in launches, left out of the line above: %llu kernels' first launch "
                "%.1f us each; %llu pointer-array peeks %.1f us each (a stream sync and small copies); "
                "%llu weight snapshots of discovery's passes %.1f us each",
                (unsigned long long)nk, mean_us(atomic_load(&once_ns[ONCE_KERNEL]), nk),
                (unsigned long long)np, mean_us(atomic_load(&once_ns[ONCE_PEEK]), np),
                (unsigned long long)nw, mean_us(ws, nw));
}

cudaError_t ft_hook_rt_launch_handle(__cudaLaunchKernel_fn_t real, cudaKernel_t kernel, dim3 grid,
                                     dim3 block, void **args, size_t shmem, cudaStream_t stream)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)kernel, 0, args, NULL, stream);
    cudaError_t r_ = real(kernel, grid, block, args, shmem, stream);
    launch_leave(&clk, held);
    return r_;
}

cudaError_t ft_hook_rt_launch_stub(cudaLaunchKernel_fn_t real, const void *func, dim3 grid, dim3 block,
                                   void **args, size_t shmem, cudaStream_t stream)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)func, 1, args, NULL, stream);
    cudaError_t r_ = real(func, grid, block, args, shmem, stream);
    launch_leave(&clk, held);
    return r_;
}

cudaError_t ft_hook_rt_launch_ex(cudaLaunchKernelExC_fn_t real, const cudaLaunchConfig_t *config,
                                 const void *func, void **args)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)func, 1, args, NULL, config ? config->stream : NULL);
    cudaError_t r_ = real(config, func, args);
    launch_leave(&clk, held);
    return r_;
}

cudaError_t ft_hook_rt_graph_launch(cudaGraphLaunch_fn_t real, cudaGraphExec_t exec, cudaStream_t stream)
{
    /* Graphs get their own treatment later; for now they are counted. */
    return real(exec, stream);
}

CUresult ft_hook_drv_launch(cuLaunchKernel_fn_t real, CUfunction f, unsigned int gx, unsigned int gy,
                            unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                            unsigned int shmem, CUstream stream, void **params, void **extra)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)f, 0, params, extra, (cudaStream_t)stream);
    CUresult r_ = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
    launch_leave(&clk, held);
    return r_;
}

CUresult ft_hook_drv_launch_ex(cuLaunchKernelEx_fn_t real, const CUlaunchConfig *config, CUfunction f,
                               void **params, void **extra)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)f, 0, params, extra,
                            config ? (cudaStream_t)config->hStream : NULL);
    CUresult r_ = real(config, f, params, extra);
    launch_leave(&clk, held);
    return r_;
}

CUresult ft_hook_drv_launch_coop(cuLaunchCooperativeKernel_fn_t real, CUfunction f, unsigned int gx,
                                 unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                                 unsigned int bz, unsigned int shmem, CUstream stream, void **params)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)f, 0, params, NULL, (cudaStream_t)stream);
    CUresult r_ = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
    launch_leave(&clk, held);
    return r_;
}

/* --- copies and sets ------------------------------------------------------------------- */

static void observe_sync(void);

/* A copy between host memory and a streamed unit that is not loaded is served from
 * the unit's host store, after the stream's earlier work, instead of loading the unit
 * (res.lock held by the caller). A write makes the unit's checksum reference stale: its
 * next eviction copies it back. 1 when served. */
/* Where the host store holds [dev, dev + n) of a streamed unit that is not loaded, once
 * the stream's earlier work is done; NULL when it does not (the call then loads the
 * unit as usual). res.lock held. */
static char *host_store_at(uint64_t dev, size_t n, cudaStream_t s, res_unit_t **unit)
{
    ft_region_t reg;
    if (!res.active || n == 0 || !ft_regions_find(regions, dev, &reg) || reg.id >= res.n_ids ||
        res.by_id[reg.id] < 0)
        return NULL;
    res_region_t *r = &res.regions[res.by_id[reg.id]];
    res_unit_t *un = &res.units[r->unit];
    if (un->loaded || r->host == NULL || dev < r->va || dev + n > r->va + r->size)
        return NULL;
    if (REAL(cudaStreamSynchronize)(s) != cudaSuccess)
        return NULL;
    *unit = un;
    return (char *)r->host + (dev - r->va);
}

static int host_store_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost)
        return 0;
    res_unit_t *un;
    char *h = host_store_at((uint64_t)(uintptr_t)(kind == cudaMemcpyHostToDevice ? dst : src), n, s, &un);
    if (h == NULL)
        return 0;
    if (kind == cudaMemcpyHostToDevice) {
        memcpy(h, src, n);
        un->ref_valid = 0;
    } else {
        memcpy(dst, h, n);
    }
    res.host_copies++;
    return 1;
}

/* A memset of count elements of `width` bytes (1 or 4) into a streamed unit that is not
 * loaded, done on its host store (the next load copies it in; the checksum reference
 * is stale, so its next eviction copies it back). 1 when served. */
static int host_store_set(uint64_t dev, unsigned v, int width, size_t count, cudaStream_t s)
{
    res_unit_t *un;
    char *h = host_store_at(dev, count * (size_t)width, s, &un);
    if (h == NULL)
        return 0;
    if (width == 1) {
        memset(h, (int)(v & 0xff), count);
    } else {
        uint32_t w = v;
        for (size_t i = 0; i < count; i++)
            memcpy(h + 4 * i, &w, 4);
    }
    un->ref_valid = 0;
    res.host_copies++;
    return 1;
}

/* A memset's entry (the engine held or not): 1 when it was served on a host store (the
 * caller returns success without forwarding), 0 when it is guarded and must be
 * forwarded. */
static int set_enter(int held, uint64_t dst, unsigned v, int width, size_t count, cudaStream_t s)
{
    if (held && host_store_set(dst, v, width, count, s))
        return 1;
    copy_guard(held, (const void *)(uintptr_t)dst, NULL, s);
    return 0;
}

cudaError_t ft_hook_rt_memcpy(cudaMemcpy_fn_t real, void *dst, const void *src, size_t n,
                              enum cudaMemcpyKind kind)
{
    int held = engine_enter();
    if (held && host_store_copy(dst, src, n, kind, 0)) {
        engine_leave(held);
        return cudaSuccess;
    }
    copy_guard(held, dst, src, 0);
    cudaError_t rc = real(dst, src, n, kind);
    engine_leave(held);
    if (kind == cudaMemcpyDeviceToHost)
        observe_sync(); /* a synchronous read of a result */
    return rc;
}

cudaError_t ft_hook_rt_memcpy_async(cudaMemcpyAsync_fn_t real, void *dst, const void *src, size_t n,
                                    enum cudaMemcpyKind kind, cudaStream_t s)
{
    int held = engine_enter();
    if (held && host_store_copy(dst, src, n, kind, s)) {
        engine_leave(held);
        return cudaSuccess;
    }
    copy_guard(held, dst, src, s);
    cudaError_t r_ = real(dst, src, n, kind, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_2d(cudaMemcpy2D_fn_t real, void *dst, size_t dp, const void *src, size_t sp,
                                 size_t w, size_t h, enum cudaMemcpyKind kind)
{
    int held = copy_enter(dst, src, 0);
    cudaError_t r_ = real(dst, dp, src, sp, w, h, kind);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_2d_async(cudaMemcpy2DAsync_fn_t real, void *dst, size_t dp, const void *src,
                                       size_t sp, size_t w, size_t h, enum cudaMemcpyKind kind,
                                       cudaStream_t s)
{
    int held = copy_enter(dst, src, s);
    cudaError_t r_ = real(dst, dp, src, sp, w, h, kind, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_3d(cudaMemcpy3D_fn_t real, const struct cudaMemcpy3DParms *p)
{
    int held = copy_enter(p != NULL ? p->dstPtr.ptr : NULL, p != NULL ? p->srcPtr.ptr : NULL, 0);
    cudaError_t r_ = real(p);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_3d_async(cudaMemcpy3DAsync_fn_t real, const struct cudaMemcpy3DParms *p,
                                       cudaStream_t s)
{
    int held = copy_enter(p != NULL ? p->dstPtr.ptr : NULL, p != NULL ? p->srcPtr.ptr : NULL, s);
    cudaError_t r_ = real(p, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_peer(cudaMemcpyPeer_fn_t real, void *dst, int dd, const void *src, int sd,
                                   size_t n)
{
    int held = copy_enter(dst, src, 0);
    cudaError_t r_ = real(dst, dd, src, sd, n);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_peer_async(cudaMemcpyPeerAsync_fn_t real, void *dst, int dd, const void *src,
                                         int sd, size_t n, cudaStream_t s)
{
    int held = copy_enter(dst, src, s);
    cudaError_t r_ = real(dst, dd, src, sd, n, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memset(cudaMemset_fn_t real, void *dst, int v, size_t n)
{
    int held = engine_enter();
    cudaError_t r_ = cudaSuccess;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 1, n, (cudaStream_t)0))
        r_ = real(dst, v, n);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memset_async(cudaMemsetAsync_fn_t real, void *dst, int v, size_t n, cudaStream_t s)
{
    int held = engine_enter();
    cudaError_t r_ = cudaSuccess;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 1, n, s))
        r_ = real(dst, v, n, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memset_2d(cudaMemset2D_fn_t real, void *dst, size_t pitch, int v, size_t w, size_t h)
{
    int held = copy_enter(dst, NULL, 0);
    cudaError_t r_ = real(dst, pitch, v, w, h);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memset_2d_async(cudaMemset2DAsync_fn_t real, void *dst, size_t pitch, int v,
                                       size_t w, size_t h, cudaStream_t s)
{
    int held = copy_enter(dst, NULL, s);
    cudaError_t r_ = real(dst, pitch, v, w, h, s);
    engine_leave(held);
    return r_;
}

#define DPTR(x) ((void *)(uintptr_t)(x))

CUresult ft_hook_drv_memcpy(cuMemcpy_fn_t real, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    int held = copy_enter(DPTR(dst), DPTR(src), 0);
    CUresult r_ = real(dst, src, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_async(cuMemcpyAsync_fn_t real, CUdeviceptr dst, CUdeviceptr src, size_t n,
                                  CUstream s)
{
    int held = copy_enter(DPTR(dst), DPTR(src), (cudaStream_t)s);
    CUresult r_ = real(dst, src, n, s);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_htod(cuMemcpyHtoD_v2_fn_t real, CUdeviceptr dst, const void *src, size_t n)
{
    int held = copy_enter(DPTR(dst), NULL, 0);
    CUresult r_ = real(dst, src, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_dtoh(cuMemcpyDtoH_v2_fn_t real, void *dst, CUdeviceptr src, size_t n)
{
    int held = copy_enter(NULL, DPTR(src), 0);
    CUresult r_ = real(dst, src, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_htod_async(cuMemcpyHtoDAsync_v2_fn_t real, CUdeviceptr dst, const void *src,
                                       size_t n, CUstream s)
{
    int held = copy_enter(DPTR(dst), NULL, (cudaStream_t)s);
    CUresult r_ = real(dst, src, n, s);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_dtoh_async(cuMemcpyDtoHAsync_v2_fn_t real, void *dst, CUdeviceptr src,
                                       size_t n, CUstream s)
{
    int held = copy_enter(NULL, DPTR(src), (cudaStream_t)s);
    CUresult r_ = real(dst, src, n, s);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memset_d8(cuMemsetD8_v2_fn_t real, CUdeviceptr dst, unsigned char v, size_t n)
{
    int held = engine_enter();
    CUresult r_ = CUDA_SUCCESS;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 1, n, (cudaStream_t)0))
        r_ = real(dst, v, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memset_d32(cuMemsetD32_v2_fn_t real, CUdeviceptr dst, unsigned int v, size_t n)
{
    int held = engine_enter();
    CUresult r_ = CUDA_SUCCESS;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 4, n, (cudaStream_t)0))
        r_ = real(dst, v, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memset_d8_async(cuMemsetD8Async_fn_t real, CUdeviceptr dst, unsigned char v, size_t n,
                                     CUstream s)
{
    int held = engine_enter();
    CUresult r_ = CUDA_SUCCESS;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 1, n, (cudaStream_t)s))
        r_ = real(dst, v, n, s);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memset_d32_async(cuMemsetD32Async_fn_t real, CUdeviceptr dst, unsigned int v,
                                      size_t n, CUstream s)
{
    int held = engine_enter();
    CUresult r_ = CUDA_SUCCESS;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 4, n, (cudaStream_t)s))
        r_ = real(dst, v, n, s);
    engine_leave(held);
    return r_;
}

/* --- synchronisation: where the host waits is a hint of where a pass ends ------------ */

static void observe_sync(void)
{
    if (__atomic_load_n(&discovering, __ATOMIC_RELAXED))
        ft_disc_sync(disc, lane_id());
}

cudaError_t ft_hook_rt_device_sync(cudaDeviceSynchronize_fn_t real)
{
    cudaError_t rc = real();
    observe_sync();
    return rc;
}

cudaError_t ft_hook_rt_stream_sync(cudaStreamSynchronize_fn_t real, cudaStream_t stream)
{
    cudaError_t rc = real(stream);
    observe_sync();
    return rc;
}

cudaError_t ft_hook_rt_event_sync(cudaEventSynchronize_fn_t real, cudaEvent_t event)
{
    cudaError_t rc = real(event);
    observe_sync();
    return rc;
}

/* --- NVTX ranges name the units (libflextensor-nvtx.so, shim/nvtx.c, calls these) --- */

FT_EXPORT void ft_nvtx_range_push(const char *name)
{
    static int told;
    if (ft_shim_active && __atomic_load_n(&discovering, __ATOMIC_RELAXED)) {
        if (name != NULL && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
            FT_INFO("discovery: NVTX ranges arrive (first: \"%.60s\"); units whose weights are used "
                    "inside one are named after it", name);
        ft_disc_range_push(disc, lane_id(), name); /* NULL: a range without a readable name */
    }
}

FT_EXPORT void ft_nvtx_range_pop(void)
{
    if (ft_shim_active && __atomic_load_n(&discovering, __ATOMIC_RELAXED))
        ft_disc_range_pop(disc, lane_id());
}

/* --- the control API and the reports ------------------------------------------------- */

/* Reference counted: warm-up or evaluation passes bracketed by these calls are not
 * profiled. Before profiling begins the count is kept and applied when it does. */
FT_EXPORT void ft_profiling_suspend(void)
{
    if (!ft_shim_active)
        return;
    pthread_mutex_lock(&prof.lock);
    if (prof.prof != NULL)
        ft_prof_suspend(prof.prof);
    else
        __atomic_add_fetch(&early_suspends, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&prof.lock);
}

FT_EXPORT int ft_profiling_resume(void)
{
    if (!ft_shim_active)
        return -1;
    int rc = -1;
    pthread_mutex_lock(&prof.lock);
    if (prof.prof != NULL)
        rc = ft_prof_resume(prof.prof);
    else if (__atomic_load_n(&early_suspends, __ATOMIC_RELAXED) > 0)
        rc = (__atomic_sub_fetch(&early_suspends, 1, __ATOMIC_RELAXED), 0);
    pthread_mutex_unlock(&prof.lock);
    if (rc != 0)
        FT_LOG_CAPPED(FT_LOG_WARN, 3, "ft_profiling_resume without a matching ft_profiling_suspend");
    return rc;
}

FT_EXPORT void ft_iteration_mark(void)
{
    if (ft_shim_active && disc != NULL)
        ft_disc_mark(disc, lane_id());
}

/* What the process holds on the device now (budget_bytes left 0). Before the plan
 * every byte counts as `other`. */
/* The breakdown, res.lock held. */
static void usage_locked(ft_gpu_memory_usage_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t weights = 0, streamed = 0;
    if (__atomic_load_n(&plan.made, __ATOMIC_ACQUIRE) && plan.rc == 0)
        weights = plan.weight_bytes;
    if (res.active)
        for (int i = 0; i < res.n_regions; i++) {
            const res_region_t *r = &res.regions[i];
            uint64_t len = r->size != 0 ? r->len : 0; /* size 0: freed */
            streamed += len;
            if (res.units[r->unit].loaded)
                out->slots_bytes += len;
            else
                out->unmapped_bytes += len;
        }
    uint64_t tracked = device_bytes();
    /* Before the plan (FT_SPILL), allocations may wait in host memory too. */
    out->unmapped_bytes += __atomic_load_n(&spill_bytes, __ATOMIC_RELAXED);
    uint64_t held = tracked > out->unmapped_bytes ? tracked - out->unmapped_bytes : 0;
    /* A slot's physical memory between an unload and the load that reuses it: held,
     * though no region maps it (the H200 pair's 5 ms samples found 392 MiB more in use
     * than counted, two slots' worth). */
    uint64_t spare = spare_bytes_locked();
    out->slots_bytes += spare;
    held += spare;
    /* The bandwidth measurement's buffer, while the plan is made: other bytes. */
    held += __atomic_load_n(&bw_device_bytes, __ATOMIC_RELAXED);
    uint64_t resident = weights > streamed ? weights - streamed : 0;
    if (out->slots_bytes > held)
        out->slots_bytes = held;
    /* Weights freed since the plan: no longer held. */
    if (resident + out->slots_bytes > held)
        resident = held - out->slots_bytes;
    out->resident_bytes = resident;
    out->other_bytes = held - resident - out->slots_bytes;
    out->total_bytes = held;
}

static void usage_now(ft_gpu_memory_usage_t *out)
{
    pthread_mutex_lock(&res.lock);
    usage_locked(out);
    pthread_mutex_unlock(&res.lock);
}

/* Device memory outside FlexTensor's count: the device's memory in use (the real
 * cudaMemGetInfo, device-wide, as nvidia-smi sees it) less what FlexTensor holds. The
 * context, library code, NCCL's buffers and anything else allocated around the shim
 * lie there; the budget does not hold them. Sampled at the first allocation, at each
 * profiled pass and at inference passes (the first 64, then one in 64), reported at
 * exit: where it grows shows what the budget cannot see (the two-H200 run found 490
 * MiB more there during profiling than at the end, sampled from outside). */
static struct {
    pthread_mutex_t lock;
    int n;
    uint64_t first, last, max, labelled;
    char max_at[48]; /* where it last grew by 1 MiB or more */
} outside = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* held: the caller holds res.lock. Otherwise the sample is skipped when res.lock is
 * busy: its holder may be waiting for this very call to finish (activate_locked and
 * spill_admit wait for the calls past an unguarded entry, which a profiled launch is). */
static void outside_sample(const char *phase, long pass, int held)
{
    size_t free_b = 0, total_b = 0;
    if (REAL(cudaMemGetInfo) == NULL || REAL(cudaMemGetInfo)(&free_b, &total_b) != cudaSuccess || total_b < free_b)
        return;
    ft_gpu_memory_usage_t u;
    if (held) {
        usage_locked(&u);
    } else {
        if (pthread_mutex_trylock(&res.lock) != 0)
            return;
        usage_locked(&u);
        pthread_mutex_unlock(&res.lock);
    }
    uint64_t used = (uint64_t)(total_b - free_b), out = used > u.total_bytes ? used - u.total_bytes : 0;
    pthread_mutex_lock(&outside.lock);
    if (outside.n++ == 0)
        outside.first = out;
    outside.last = out;
    /* Where it grew by a MiB or more, not where a few KiB more came (the checksum's
     * buffers at the plan, say). */
    if (out > outside.max)
        outside.max = out;
    if (outside.n == 1 || out >= outside.labelled + (1u << 20)) {
        outside.labelled = out;
        if (pass >= 0)
            snprintf(outside.max_at, sizeof outside.max_at, "%s pass %ld", phase, pass);
        else
            snprintf(outside.max_at, sizeof outside.max_at, "%s", phase);
    }
    pthread_mutex_unlock(&outside.lock);
}

FT_EXPORT int ft_get_gpu_memory_usage(ft_gpu_memory_usage_t *out)
{
    if (!ft_shim_active || out == NULL || disc == NULL)
        return -1;
    int made = __atomic_load_n(&plan.made, __ATOMIC_ACQUIRE);
    if (made && plan.rc != 0)
        return -1;
    usage_now(out);
    /* Before the plan no byte is known to be a weight: all of it is other_bytes, and
     * the budget is FT_SPILL's once it holds one. */
    out->budget_bytes = made ? plan.in.budget_bytes : __atomic_load_n(&spill_limit, __ATOMIC_RELAXED);
    return made ? 0 : 1;
}

/* With a budget, what the application sees of the device: the budget as total, what is
 * left of it (never more than the device has free) as free -- so that frameworks that
 * size caches from it see the truth. */
static void budget_view(size_t *free_b, size_t *total_b)
{
    uint64_t budget = __atomic_load_n(&plan.made, __ATOMIC_ACQUIRE) && plan.rc == 0
                    ? plan.in.budget_bytes : configured_budget(*total_b);
    if (budget == 0 || budget >= *total_b || regions == NULL)
        return;
    ft_gpu_memory_usage_t u;
    usage_now(&u);
    uint64_t left = budget > u.total_bytes ? budget - u.total_bytes : 0;
    *total_b = (size_t)budget;
    if (left < *free_b)
        *free_b = (size_t)left;
}

cudaError_t ft_hook_rt_mem_get_info(cudaMemGetInfo_fn_t real, size_t *free_b, size_t *total_b)
{
    cudaError_t err = real(free_b, total_b);
    if (err == cudaSuccess && free_b != NULL && total_b != NULL)
        budget_view(free_b, total_b);
    return err;
}

CUresult ft_hook_drv_mem_get_info(cuMemGetInfo_v2_fn_t real, size_t *free_b, size_t *total_b)
{
    CUresult rc = real(free_b, total_b);
    if (rc == CUDA_SUCCESS && free_b != NULL && total_b != NULL)
        budget_view(free_b, total_b);
    return rc;
}

void ft_hooks_trace(void *trace_writer)
{
    ft_trace_writer_t *w = trace_writer;
    if (disc != NULL)
        ft_disc_trace(disc, w);
    pthread_mutex_lock(&prof.lock);
    if (prof.prof != NULL && prof.n > 0) {
        ft_trace_begin(w, FT_TRACE_PROFILE);
        ft_trace_put_u32(w, (uint32_t)ft_prof_passes(prof.prof));
        ft_trace_put_u32(w, (uint32_t)prof.n);
        for (size_t i = 0; i < prof.n; i++) {
            ft_prof_stat_t st = ft_prof_stat(prof.prof, i);
            ft_trace_put_str(w, ft_disc_unit(disc, i)->name);
            ft_trace_put_u32(w, (uint32_t)st.n);
            ft_trace_put_u64(w, (uint64_t)(st.min * 1000.0 + 0.5));
            ft_trace_put_u64(w, (uint64_t)(st.median * 1000.0 + 0.5));
            ft_trace_put_u64(w, (uint64_t)(st.max * 1000.0 + 0.5));
        }
        ft_trace_end(w);
    }
    if (plan.made && plan.rc == 0) {
        ft_trace_begin(w, FT_TRACE_PLAN);
        ft_trace_put_u32(w, plan.in.budget_bytes ? 1 : 0);
        ft_trace_put_u64(w, plan.in.budget_bytes);
        ft_trace_put_u64(w, plan.in.other_bytes);
        ft_trace_put_u32(w, (uint32_t)plan.out.slots);
        ft_trace_put_u64(w, plan.out.slot_bytes);
        ft_trace_put_u64(w, plan.out.device_bytes);
        ft_trace_put_u64(w, (uint64_t)(plan.out.step_us * 1000.0 + 0.5));
        ft_trace_put_u64(w, (uint64_t)(plan.out.all_resident_us * 1000.0 + 0.5));
        ft_trace_put_u32(w, (uint32_t)plan.in.n);
        /* The plan as made: units made to stream later (demote_for) are counted in the
         * RESIDENCY record. */
        for (size_t i = 0; i < plan.in.n; i++) {
            int demoted = res.units != NULL && (int)i < res.n_units && res.units[i].demoted;
            ft_trace_put_u32(w, (uint32_t)(plan.out.resident[i] || demoted));
            ft_trace_put_u32(w, (uint32_t)plan.out.slot[i]);
            ft_trace_put_u64(w, (uint64_t)(plan.out.unit_stall_us[i] * 1000.0 + 0.5));
        }
        ft_trace_end(w);
    }
    if (res.active) {
        uint64_t n;
        double us = step_median_us(&n);
        ft_trace_begin(w, FT_TRACE_RESIDENCY);
        ft_trace_put_u64(w, res.loads);
        ft_trace_put_u64(w, res.prefetches);
        ft_trace_put_u64(w, res.misses);
        ft_trace_put_u64(w, res.copied_in_bytes);
        ft_trace_put_u64(w, res.unloads);
        ft_trace_put_u64(w, res.peak_held_bytes);
        ft_trace_put_u64(w, n);
        ft_trace_put_u64(w, (uint64_t)(us * 1000.0 + 0.5));
        ft_trace_put_u64(w, (uint64_t)(plan.out.step_us * 1000.0 + 0.5));
        ft_trace_put_u64(w, res.written_back);
        ft_trace_put_u64(w, res.unsure_skipped);
        ft_trace_put_u64(w, res.host_copies);
        uint64_t demoted = 0;
        for (int i = 0; i < res.n_units; i++)
            demoted += (uint64_t)res.units[i].demoted;
        ft_trace_put_u64(w, demoted);
        ft_trace_put_u64(w, spill_faults);
        ft_trace_put_u64(w, spill_evictions);
        pthread_mutex_lock(&outside.lock);
        ft_trace_put_u64(w, outside.first);
        ft_trace_put_u64(w, outside.max);
        ft_trace_put_u64(w, outside.last);
        ft_trace_put_u64(w, (uint64_t)outside.n);
        pthread_mutex_unlock(&outside.lock);
        ft_trace_end(w);
        ft_trace_begin(w, FT_TRACE_MISSES);
        ft_trace_put_u32(w, (uint32_t)res.n_miss_log);
        for (int i = 0; i < res.n_miss_log; i++) {
            const struct miss *m = &res.miss_log[i];
            ft_trace_put_u32(w, (uint32_t)m->unit);
            ft_trace_put_u64(w, m->pass);
            ft_trace_put_u64(w, m->pos >= 0 ? (uint64_t)m->pos + 1 : 0);
            ft_trace_put_u32(w, (uint32_t)m->off_script);
            ft_trace_put_str(w, m->kernel);
        }
        ft_trace_end(w);
    }
    if (bw.bytes > 0) {
        ft_trace_begin(w, FT_TRACE_BANDWIDTH);
        ft_trace_put_u64(w, bw.bytes);
        ft_trace_put_u64(w, (uint64_t)(bw.h2d * 1e6));
        ft_trace_put_u64(w, (uint64_t)(bw.d2h * 1e6));
        ft_trace_put_u64(w, (uint64_t)(bw.h2d_both * 1e6));
        ft_trace_put_u64(w, (uint64_t)(bw.d2h_both * 1e6));
        ft_trace_end(w);
    }
    pthread_mutex_unlock(&prof.lock);
}

void ft_hooks_report(void)
{
    if (disc == NULL)
        return;
    report_launch_self();
    pthread_mutex_lock(&outside.lock);
    if (outside.n > 0)
        FT_INFO("device memory outside FlexTensor's count (in use on the device, less what "
                "FlexTensor holds): %.2f MiB at the first sample, at most %.2f MiB (from %s on), %.2f MiB "
                "at the last of %d", (double)outside.first / 1048576.0, (double)outside.max / 1048576.0,
                outside.max_at, (double)outside.last / 1048576.0, outside.n);
    pthread_mutex_unlock(&outside.lock);
    if (res.active)
        FT_INFO("residency: %llu load(s), %llu of them prefetched and %llu on demand (misses), "
                "%.1f MiB copied in; %llu unload(s), %llu of them copied back (changed, or "
                "not proven unchanged by the device checksum); at most %.1f MiB of streamed "
                "units held at once",
                (unsigned long long)res.loads, (unsigned long long)res.prefetches,
                (unsigned long long)res.misses, (double)res.copied_in_bytes / 1048576.0,
                (unsigned long long)res.unloads, (unsigned long long)res.written_back,
                (double)res.peak_held_bytes / 1048576.0);
    if (res.host_copies > 0)
        FT_INFO("residency: %llu copy(ies) or set(s) to or from units in host memory served there, "
                "without loading them", (unsigned long long)res.host_copies);
    if (spill_faults > 0 || spill_evictions > 0)
        FT_INFO("FT_SPILL: before the plan, %llu allocation(s) moved in and %llu out "
                "(%.1f ms of copies at the measured bandwidth)",
                (unsigned long long)spill_faults, (unsigned long long)spill_evictions,
                (double)__atomic_load_n(&spill_ns, __ATOMIC_RELAXED) / 1e6);
    if (res.active && res.loads > 0)
        FT_INFO("residency: host time per load: %.1f us waiting for the evicted unit, %.1f us "
                "unloading it (checksum wait included), %.1f us mapping, %.1f us issuing copies; "
                "%llu of %llu regions mapped onto the physical memory of the unit unloaded before",
                (double)res.ns_wait / 1e3 / (double)res.loads, (double)res.ns_unmap / 1e3 / (double)res.loads,
                (double)res.ns_map / 1e3 / (double)res.loads, (double)res.ns_copy / 1e3 / (double)res.loads,
                (unsigned long long)res.reused, (unsigned long long)res.region_loads);
    if (res.active && res.loads > 0)
        FT_INFO("residency: of the mapping per load, %.1f us in cuMemMap, %.1f us in "
                "cuMemSetAccess (%llu call(s) for %llu region(s)), %.1f us creating physical "
                "memory (for %llu region(s) in all, no "
                "unloaded one matching their size), %.1f us releasing what was not reused",
                (double)res.ns_map_call / 1e3 / (double)res.loads,
                (double)res.ns_access / 1e3 / (double)res.loads,
                (unsigned long long)res.access_calls, (unsigned long long)res.region_loads,
                (double)res.ns_create / 1e3 / (double)res.loads,
                (unsigned long long)(res.region_loads - res.reused),
                (double)res.ns_release / 1e3 / (double)res.loads);
    if (res.active && res.unsure_skipped > 0)
        FT_INFO("residency: %llu touch(es) of units not loaded were taken for stale pointers and "
                "loaded nothing: %llu found only at argument words that held garbage, or never a "
                "device address, in discovery; %llu from a kernel that touched no weight in the "
                "recorded pass or at a position outside their unit's range; %llu touched by the "
                "same kernel every few launches (FT_STRICT_GUARD=1 loads them)",
                (unsigned long long)res.unsure_skipped,
                (unsigned long long)(res.unsure_skipped - res.unexpected_skipped - res.repeat_skipped),
                (unsigned long long)res.unexpected_skipped, (unsigned long long)res.repeat_skipped);
    if (res.active) {
        uint64_t n;
        double us = step_median_us(&n);
        if (n > 0)
            FT_INFO("residency: measured step %.1f us (median of %llu, first launch of a pass to "
                    "the next, idle time between passes included); the plan predicted %.1f us, "
                    "%.1f us all resident", us, (unsigned long long)n, plan.out.step_us,
                    plan.out.all_resident_us);
        else
            FT_INFO("residency: no step measured (fewer than two passes completed since the "
                    "engine started); the plan predicted %.1f us", plan.out.step_us);
    }
    static const char *const state[] = { "waiting for the first launch", "observing", "done" };
    FT_INFO("discovery: %s, %d iteration(s), %zu units, %.1f MiB of weights",
            state[ft_disc_state(disc)], ft_disc_iterations(disc), ft_disc_unit_count(disc),
            (double)ft_disc_weight_bytes(disc) / 1048576.0);
}

/* Why the plan streams nothing, into buf (plan.rc == 0). */
static void verdict_all_resident(char *buf, size_t len)
{
    size_t n = plan.in.n, kept = 0;
    for (size_t i = 0; i < n; i++)
        kept += plan.in.units[i].keep_resident != 0;
    char a[32], b[32];
    if (kept == n)
        snprintf(buf, len, "all %zu units stay resident: %s keeps every one", n, kept_by());
    else if (plan.in.budget_bytes > 0)
        /* the least step of all: chosen whenever it fits */
        snprintf(buf, len, "all %zu units stay resident: the budget %s holds the whole model (%s "
                 "planned)", n, human_bytes(plan.in.budget_bytes, a, sizeof a),
                 human_bytes(plan.out.device_bytes, b, sizeof b));
    else
        snprintf(buf, len, "all %zu units stay resident: latency mode (no FT_GPU_MEM_LIMIT or "
                 "FT_MAX_GPU_MEM_FRACTION), and no plan that streams saves memory within "
                 "FT_TIME_BUDGET_FACTOR of the all-resident step", n);
}

/* Why no plan was made, into buf: the phase the process ended in. */
static void verdict_no_plan(char *buf, size_t len)
{
    ft_disc_status_t st;
    ft_disc_status(disc, &st);
    char marker[160] = "";
    if (cfgp->iteration_marker[0] && st.marker_hits == 0)
        snprintf(marker, sizeof marker, "; FT_ITERATION_MARKER '%s' matched no kernel", cfgp->iteration_marker);
    if (cfgp->skip_discovery) {
        snprintf(buf, len, "FT_SKIP_DISCOVERY skipped discovery and no saved profile was loaded");
    } else if (st.launches == 0) {
        snprintf(buf, len, "no kernel was launched%s",
                 __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE) >= 0 ? " on the managed device" : "");
    } else if (ft_disc_state(disc) != FT_DISC_DONE) {
        if (st.restarts > 0)
            snprintf(buf, len, "discovery found no weights: the passes it found touched none "
                     "(%d restart(s)), and the program ended before another pass completed (%llu "
                     "launches)%s", st.restarts, (unsigned long long)st.launches, marker);
        else
            snprintf(buf, len, "the program ended during discovery, after %d of %d iteration(s) "
                     "(%llu launches)%s", st.iterations, st.iters_wanted,
                     (unsigned long long)st.launches, marker);
    } else if (ft_disc_unit_count(disc) == 0) {
        snprintf(buf, len, "discovery found no weights (%d iteration(s), %d restart(s))",
                 st.iterations, st.restarts);
    } else if (prof.prof != NULL && prof.n > 0) {
        snprintf(buf, len, "the program ended during profiling, after %d of %d pass(es) timed",
                 ft_prof_passes(prof.prof), profiling_iters < 1 ? 1 : profiling_iters);
    } else {
        snprintf(buf, len, "profiling could not start (no CUDA events)");
    }
}

void ft_hooks_verdict(void)
{
    if (disc == NULL)
        return;
    char why[640], a[32], b[32];
    const char *kind = "no plan";
    if (__atomic_load_n(&stood_down, __ATOMIC_ACQUIRE)) {
        kind = "stood down";
        snprintf(why, sizeof why, "%s", stood_down_why);
    } else if (!__atomic_load_n(&plan.made, __ATOMIC_ACQUIRE)) {
        if (plan.rc == -ENOMEM) /* make_plan's arrays */
            snprintf(why, sizeof why, "planning ran out of memory");
        else
            verdict_no_plan(why, sizeof why);
    } else if (plan.rc == -ENOSPC) {
        size_t kept = 0;
        for (size_t i = 0; i < plan.in.n; i++)
            kept += plan.in.units[i].keep_resident != 0;
        char k[96] = "";
        if (kept > 0)
            snprintf(k, sizeof k, "; %zu unit(s) kept resident by %s", kept, kept_by());
        snprintf(why, sizeof why, "the budget %s is below the smallest that works, %s (FT_GPU_MEM_LIMIT "
                 "or FT_MAX_GPU_MEM_FRACTION%s)", human_bytes(plan.in.budget_bytes, a, sizeof a),
                 human_bytes(plan.min_budget, b, sizeof b), k);
    } else if (plan.rc != 0) {
        snprintf(why, sizeof why, "planning failed (error %d)", plan.rc);
    } else if (plan.out.slots == 0) {
        verdict_all_resident(why, sizeof why);
    } else if (res_start_failed) {
        snprintf(why, sizeof why, "the residency engine could not be set up (out of memory or CUDA events)");
    } else if (!__atomic_load_n(&res.active, __ATOMIC_ACQUIRE)) {
        snprintf(why, sizeof why, "the program ended right after planning, before the first unit streamed");
    } else {
        int streaming = 0, demoted = 0;
        size_t kept = 0;
        for (int i = 0; i < res.n_units; i++) {
            streaming += res.units[i].n > 0;
            demoted += res.units[i].demoted;
            kept += plan.in.units[i].keep_resident != 0;
        }
        char extra[160] = "";
        size_t at = 0;
        if (kept > 0)
            at += (size_t)snprintf(extra + at, sizeof extra - at, "; %zu kept resident by %s", kept, kept_by());
        if (demoted > 0 && at < sizeof extra)
            snprintf(extra + at, sizeof extra - at, "; %d made to stream past the plan to hold the budget",
                     demoted);
        kind = "offloaded";
        if (plan.in.budget_bytes > 0)
            snprintf(why, sizeof why, "%d of %d units stream (memory mode, budget %s, %s planned%s)",
                     streaming, res.n_units, human_bytes(plan.in.budget_bytes, a, sizeof a),
                     human_bytes(plan.out.device_bytes, b, sizeof b), extra);
        else
            snprintf(why, sizeof why, "%d of %d units stream (latency mode, no budget, %s planned%s)",
                     streaming, res.n_units, human_bytes(plan.out.device_bytes, b, sizeof b), extra);
    }
    FT_INFO("verdict: %s: %s", kind, why);
}

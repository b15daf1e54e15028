/* drv_api.c - the simulated driver's front: options, cuInit, devices, contexts, the
 * API enter/exit frame that fires CUPTI callbacks and enforces the callback rule,
 * fault injection, error strings, cuGetProcAddress and the private export tables. */
#define _GNU_SOURCE
#include "drv_internal.h"

#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <errno.h>
#include <generated_cuda_meta.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

sim_state_t g_sim = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};

/* ------------------------------------------------------------------ logging */

void sim_log(const char *fmt, ...)
{
    /* write(2) of one formatted line: no stdio buffering that a fork could duplicate,
     * and one syscall so lines from several threads do not interleave. */
    char buf[512];
    int n = snprintf(buf, sizeof buf, "simcuda: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    n += m;
    if ((size_t)n > sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

/* ------------------------------------------------------------------ options */

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || v < 0)
        return -1;
    while (*end == ' ')
        end++;
    static const struct { const char *suf; double mul; } units[] = {
        {"", 1}, {"B", 1},
        {"K", 1024.0}, {"KiB", 1024.0}, {"KB", 1e3},
        {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6},
        {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9},
        {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suf) == 0 &&
            (strcmp(units[i].suf, "") == 0 || strcmp(end, units[i].suf) == 0 ||
             strlen(units[i].suf) == 1)) {
            double b = v * units[i].mul;
            if (b > 1.8e19)
                return -1;
            *out = (uint64_t)llround(b);
            return 0;
        }
    }
    return -1;
}

static int parse_long(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static int check_option(const char *name, sim_options_t *o)
{
    /* Range rules per option; -1 makes the loader fall back to the default. */
    if (!strcmp(name, "DEVICE_COUNT"))
        return o->DEVICE_COUNT >= 1 && o->DEVICE_COUNT <= SIM_MAX_DEVICES ? 0 : -1;
    if (!strcmp(name, "VMM_GRANULARITY"))
        return o->VMM_GRANULARITY >= SIM_PAGE &&
               (o->VMM_GRANULARITY & (o->VMM_GRANULARITY - 1)) == 0 ? 0 : -1;
    if (!strcmp(name, "ARENA_SIZE"))
        return o->ARENA_SIZE >= (64ull << 20) ? 0 : -1;
    if (!strcmp(name, "H2D_GBPS"))
        return o->H2D_GBPS > 0 ? 0 : -1;
    if (!strcmp(name, "D2H_GBPS"))
        return o->D2H_GBPS > 0 ? 0 : -1;
    if (!strcmp(name, "PAGEABLE_GBPS"))
        return o->PAGEABLE_GBPS > 0 ? 0 : -1;
    if (!strcmp(name, "D2D_GBPS"))
        return o->D2D_GBPS > 0 ? 0 : -1;
    if (!strcmp(name, "COPY_LATENCY_NS"))
        return o->COPY_LATENCY_NS >= 0 ? 0 : -1;
    if (!strcmp(name, "VMM_ACCESS_NS") || !strcmp(name, "VMM_MAP_NS") || !strcmp(name, "VMM_CREATE_NS") ||
        !strcmp(name, "PIN_NS_PER_MIB")) {
        long v = !strcmp(name, "VMM_ACCESS_NS") ? o->VMM_ACCESS_NS : !strcmp(name, "VMM_MAP_NS") ? o->VMM_MAP_NS
                 : !strcmp(name, "VMM_CREATE_NS") ? o->VMM_CREATE_NS : o->PIN_NS_PER_MIB;
        return v >= 0 && v <= 1000000000L ? 0 : -1;
    }
    if (!strcmp(name, "VMM_UNMAP_ONE"))
        return o->VMM_UNMAP_ONE == 0 || o->VMM_UNMAP_ONE == 1 ? 0 : -1;
    if (!strcmp(name, "LAG_US"))
        return o->LAG_US >= 0 && o->LAG_US <= 1000000 ? 0 : -1;
    if (!strcmp(name, "LAG_DEVICE"))
        return o->LAG_DEVICE >= -1 && o->LAG_DEVICE < 16 ? 0 : -1;
    if (!strcmp(name, "TIME_SCALE"))
        return o->TIME_SCALE >= 0 && o->TIME_SCALE <= 1000 ? 0 : -1;
    if (!strcmp(name, "FAIL_ALLOC"))
        return o->FAIL_ALLOC >= 0 ? 0 : -1;
    if (!strcmp(name, "FAIL_HOST_ALLOC"))
        return o->FAIL_HOST_ALLOC >= 0 ? 0 : -1;
    if (!strcmp(name, "FAIL_COPY"))
        return o->FAIL_COPY >= 0 ? 0 : -1;
    if (!strcmp(name, "FAIL_EVENT"))
        return o->FAIL_EVENT >= 0 ? 0 : -1;
    if (!strcmp(name, "FAIL_PERSIST"))
        return o->FAIL_PERSIST == 0 || o->FAIL_PERSIST == 1 ? 0 : -1;
    if (!strcmp(name, "CUPTI_HELD"))
        return o->CUPTI_HELD == 0 || o->CUPTI_HELD == 1 ? 0 : -1;
    return 0;
}

static long g_fault_nth[SIM_FAULT_KIND_N];
static long g_fault_count[SIM_FAULT_KIND_N];
static int g_fault_persist[SIM_FAULT_KIND_N];

static pthread_once_t g_opt_once = PTHREAD_ONCE_INIT;

static void load_options_once(void)
{
    sim_options_t *o = &g_sim.opt;
    char var[64];
    const char *v;
#define X(name, type, def, doc)                                                         \
    o->name = def;                                                                      \
    snprintf(var, sizeof var, "FTSIM_%s", #name);                                       \
    v = getenv(var);                                                                    \
    if (v && *v) {                                                                      \
        if (parse_##type(v, &o->name) != 0 || check_option(#name, o) != 0) {            \
            sim_log("%s='%s' is not valid (%s); using the default", var, v, doc);       \
            o->name = def;                                                              \
        }                                                                               \
    }
    SIM_OPTIONS(X)
#undef X
    g_fault_nth[SIM_FAULT_KIND_ALLOC] = o->FAIL_ALLOC;
    g_fault_nth[SIM_FAULT_KIND_HOST_ALLOC] = o->FAIL_HOST_ALLOC;
    g_fault_nth[SIM_FAULT_KIND_COPY] = o->FAIL_COPY;
    g_fault_nth[SIM_FAULT_KIND_EVENT] = o->FAIL_EVENT;
    for (int i = 0; i < SIM_FAULT_KIND_N; i++)
        g_fault_persist[i] = (int)o->FAIL_PERSIST;
}

void sim_load_options(void)
{
    pthread_once(&g_opt_once, load_options_once);
}

/* ------------------------------------------------------------------ fault injection */

int sim_fault_hit(int kind)
{
    /* Called with g_sim.lock held: the counters are shared by every thread. */
    if (kind < 0 || kind >= SIM_FAULT_KIND_N || g_fault_nth[kind] <= 0)
        return 0;
    long n = ++g_fault_count[kind];
    if (n == g_fault_nth[kind])
        return 1;
    return g_fault_persist[kind] && n > g_fault_nth[kind];
}

SIM_EXPORT int simcudaInjectFault(simcuda_fault_t kind, long nth, int persist)
{
    if ((int)kind < 0 || (int)kind >= SIM_FAULT_KIND_N || nth < 0)
        return -1;
    sim_load_options();
    pthread_mutex_lock(&g_sim.lock);
    g_fault_nth[kind] = nth;
    g_fault_count[kind] = 0;
    g_fault_persist[kind] = persist != 0;
    pthread_mutex_unlock(&g_sim.lock);
    return 0;
}

/* ------------------------------------------------------------------ thread state */

/* Per-thread API state. The CUPTI rule (no CUDA calls inside a callback) and the
 * correlation id of nested runtime->driver calls are properties of one thread's call
 * stack, hence thread-locals. */
static __thread struct CUctx_st *t_ctx;
static __thread struct CUctx_st *t_ctx_stack[16];
static __thread int t_ctx_depth;
static __thread int t_in_callback;
static __thread int t_call_depth;
static __thread uint32_t t_corr;
static __thread uint64_t t_ext[SIMCU_EXT_KINDS][8];
static __thread int t_ext_n[SIMCU_EXT_KINDS];

struct CUctx_st *sim_current_ctx(void) { return t_ctx; }
void sim_set_current_ctx(struct CUctx_st *ctx) { t_ctx = ctx; }
uint32_t sim_current_corr(void) { return t_call_depth > 0 ? t_corr : 0; }

/* ------------------------------------------------------------------ callbacks */

/* The CUPTI subscriber and its enabled callbacks. Written under g_sim.lock by
 * libcupti's calls, read without it on every API call, hence atomic: a callback racing
 * with cuptiUnsubscribe may fire once more, as on real CUPTI, with the user data it was
 * subscribed with (unsubscribing leaves g_sub_user; subscribing sets it before g_sub_fn). */
static _Atomic(CUpti_CallbackFunc) g_sub_fn;
static void *_Atomic g_sub_user;
static int g_sub_taken;
static _Atomic uint8_t g_cb_driver[CUPTI_DRIVER_TRACE_CBID_SIZE];
static _Atomic uint8_t g_cb_runtime[CUPTI_RUNTIME_TRACE_CBID_SIZE];
static uint32_t g_next_corr;

/* An outermost API call on a thread with pushed external ids: one EXTCORR record per
 * kind, tying the call's correlation id to the id on top of that kind's stack. */
static void emit_external(uint32_t corr)
{
    if (!(g_sim.act_mask & SIMCU_ACTMASK_EXTCORR))
        return;
    simcu_activity_sink_t sink = g_sim.act_sink;
    if (sink == NULL)
        return;
    for (uint32_t k = 0; k < SIMCU_EXT_KINDS; k++) {
        if (t_ext_n[k] == 0)
            continue;
        simcu_activity_t a;
        memset(&a, 0, sizeof a);
        a.kind = SIMCU_ACT_EXTCORR;
        a.correlation_id = corr;
        a.external_kind = k;
        a.external_id = t_ext[k][t_ext_n[k] - 1];
        sink(&a);
    }
}

/* Which calls get an API activity record (CUPTI_ACTIVITY_KIND_RUNTIME / DRIVER): every
 * runtime call, nested ones too, under the correlation id of the outermost call on the
 * thread (t_corr); a driver call only when it is the outermost, as a driver call made
 * inside a runtime call belongs to that call's record. This is the model under which a
 * runtime call made inside another one (FlexTensor's own call inside a library's
 * runtime call it cannot see) shows as two CPU-side records of one correlation id: the
 * case torch.profiler's Kineto refuses (collection.cpp's setParents). */
static int api_recorded(CUpti_CallbackDomain domain, int outer)
{
    unsigned mask = g_sim.act_mask;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
        return (mask & SIMCU_ACTMASK_RUNTIME) != 0;
    return domain == CUPTI_CB_DOMAIN_DRIVER_API && outer && (mask & SIMCU_ACTMASK_DRIVER) != 0;
}

static _Atomic long g_api_records; /* for FTSIM_CUPTI_DUP_API */

/* The API record of the call c, at its exit; twice when it is the FTSIM_CUPTI_DUP_API-th. */
static void emit_api(const simcu_call_t *c)
{
    simcu_activity_sink_t sink = g_sim.act_sink;
    if (sink == NULL)
        return;
    simcu_activity_t a;
    memset(&a, 0, sizeof a);
    a.kind = SIMCU_ACT_API;
    a.domain = (uint32_t)c->domain;
    a.cbid = (uint32_t)c->cbid;
    a.start = c->t0;
    a.end = simcudaHostNow();
    a.correlation_id = c->corr;
    a.thread_id = (uint32_t)gettid();
    a.process_id = (uint32_t)getpid();
    a.name = c->name;
    sink(&a);
    long n = __atomic_add_fetch(&g_api_records, 1, __ATOMIC_RELAXED);
    if (g_sim.opt.CUPTI_DUP_API > 0 && n == g_sim.opt.CUPTI_DUP_API) {
        a.start++;
        sink(&a);
    }
}

static int cb_enabled(CUpti_CallbackDomain d, CUpti_CallbackId cbid)
{
    if (d == CUPTI_CB_DOMAIN_DRIVER_API)
        return cbid < CUPTI_DRIVER_TRACE_CBID_SIZE && g_cb_driver[cbid];
    if (d == CUPTI_CB_DOMAIN_RUNTIME_API)
        return cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE && g_cb_runtime[cbid];
    return 0;
}

static void fire(simcu_call_t *c)
{
    CUpti_CallbackFunc fn = g_sub_fn;
    if (!fn)
        return;
    t_in_callback++;
    fn(g_sub_user, c->domain, c->cbid, &c->cb);
    t_in_callback--;
}

static _Atomic unsigned g_warned_in_cb;  /* any thread's callback may count */

CUresult sim_api_enter(simcu_call_t *c, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                       const char *name, const void *params, const char *symbol,
                       void *retp, unsigned flags)
{
    c->domain = domain;
    c->cbid = cbid;
    c->flags = flags;
    c->fired = 0;
    c->entered = 0;
    if (t_in_callback && !(flags & (SIMCU_CALL_SYNC | SIMCU_CALL_QUIET))) {
        /* The CUPTI guide forbids CUDA calls inside a callback except synchronize
         * calls; a GPU may deadlock or corrupt state. Refusing keeps observers honest. */
        if (g_warned_in_cb++ < 100)
            sim_log("%s called from inside a CUPTI callback: not permitted "
                    "(only synchronize calls are); returning an error", name);
        return CUDA_ERROR_NOT_PERMITTED;
    }
    if (!(flags & SIMCU_CALL_NOINIT) && !g_sim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags & SIMCU_CALL_QUIET)
        return CUDA_SUCCESS;
    int outer = t_call_depth++ == 0;
    if (outer) {
        t_corr = __atomic_add_fetch(&g_next_corr, 1, __ATOMIC_RELAXED);
        emit_external(t_corr);
    }
    c->entered = 1;
    c->corr = t_corr;
    c->name = name;
    c->api_record = api_recorded(domain, outer);
    if (c->api_record)
        c->t0 = simcudaHostNow();
    if (g_sub_fn && cb_enabled(domain, cbid)) {
        memset(&c->cb, 0, sizeof c->cb);
        c->cb.callbackSite = CUPTI_API_ENTER;
        c->cb.functionName = name;
        c->cb.functionParams = params;
        c->cb.functionReturnValue = retp;
        c->cb.symbolName = symbol;
        c->cb.context = (CUcontext)t_ctx;
        c->cb.contextUid = t_ctx ? t_ctx->id : 0;
        c->corr_data = 0;
        c->cb.correlationData = &c->corr_data;
        c->cb.correlationId = t_corr;
        c->fired = 1;
        fire(c);
    }
    return (flags & SIMCU_CALL_STICKY) && t_ctx ? t_ctx->sticky : CUDA_SUCCESS;
}

void sim_api_exit(simcu_call_t *c)
{
    if (c->fired && g_sub_fn) {
        c->cb.callbackSite = CUPTI_API_EXIT;
        c->cb.context = (CUcontext)t_ctx;
        c->cb.contextUid = t_ctx ? t_ctx->id : 0;
        fire(c);
    }
    if (c->entered && c->api_record)
        emit_api(c);
    if (c->entered)
        t_call_depth--;
}

/* ------------------------------------------------------------------ init, devices */

/* FTSIM_REPORT_PEAK=1: each device's peak physical memory at exit, the figure a
 * reading from outside the process (nvidia-smi) would give, less the context; and what
 * is still in use then (physical memory nobody released). */
static void report_peak(void)
{
    for (int i = 0; i < g_sim.ndev; i++)
        sim_log("device %d: peak physical memory %llu bytes (%.2f MiB) of %llu; %llu bytes in use at exit", i,
                (unsigned long long)g_sim.dev[i].peak, (double)g_sim.dev[i].peak / 1048576.0,
                (unsigned long long)g_sim.dev[i].capacity, (unsigned long long)g_sim.dev[i].used);
}

static CUresult init_locked(void)
{
    if (g_sim.initialized)
        return CUDA_SUCCESS;
    if (sim_mem_init() != 0 || sim_exec_init() != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g_sim.ndev = (int)g_sim.opt.DEVICE_COUNT;
    for (int i = 0; i < g_sim.ndev; i++) {
        g_sim.dev[i].ordinal = i;
        g_sim.dev[i].capacity = g_sim.opt.DEVICE_MEM;
    }
    if (g_sim.opt.REPORT_PEAK)
        atexit(report_peak);
    g_sim.initialized = 1;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuInit(unsigned int Flags)
{
    cuInit_params p = {Flags};
    simcu_call_t c;
    CUresult r;
    sim_load_options();
    r = DRV_ENTER(&c, cuInit, &p, &r, SIMCU_CALL_NOINIT);
    if (r == CUDA_SUCCESS) {
        if (Flags != 0) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            r = init_locked();
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    cuDriverGetVersion_params p = {driverVersion};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDriverGetVersion, &p, &r, SIMCU_CALL_NOINIT);
    if (r == CUDA_SUCCESS) {
        if (!driverVersion)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *driverVersion = 13000;
    }
    sim_api_exit(&c);
    return r;
}

static sim_dev_t *dev_of(CUdevice d)
{
    return d >= 0 && d < g_sim.ndev ? &g_sim.dev[d] : NULL;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    cuDeviceGetCount_params p = {count};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceGetCount, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!count)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *count = g_sim.ndev;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    cuDeviceGet_params p = {device, ordinal};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceGet, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!device)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!dev_of(ordinal))
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            *device = ordinal;
    }
    sim_api_exit(&c);
    return r;
}

#define SIM_DEVICE_NAME "FlexTensor simulated device"

SIM_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    cuDeviceGetName_params p = {name, len, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceGetName, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!name || len <= 0)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!dev_of(dev))
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            snprintf(name, (size_t)len, "%s", SIM_DEVICE_NAME);
    }
    sim_api_exit(&c);
    return r;
}

static int rt_peer_access(int dev, int peer);

SIM_EXPORT CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    cuDeviceCanAccessPeer_params p = {canAccessPeer, dev, peerDev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceCanAccessPeer, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!canAccessPeer)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!dev_of(dev) || !dev_of(peerDev))
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            *canAccessPeer = rt_peer_access(dev, peerDev);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    cuDeviceTotalMem_v2_params p = {bytes, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceTotalMem_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!bytes)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!dev_of(dev))
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            *bytes = g_sim.dev[dev].capacity;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    cuDeviceGetUuid_v2_params p = {uuid, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceGetUuid_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!uuid)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!dev_of(dev))
            r = CUDA_ERROR_INVALID_DEVICE;
        else {
            memset(uuid, 0, sizeof *uuid);
            memcpy(uuid->bytes, "ftsim-device-", 13);
            uuid->bytes[15] = (char)dev;
        }
    }
    sim_api_exit(&c);
    return r;
}

/* Attributes of an H200-like device (sm_90). Anything not listed reads 0. */
static int device_attribute(CUdevice_attribute a, int dev)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + dev;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 6144;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return g_sim.opt.HOST_VMM > 0;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return 1;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 32505856;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 134213632;
    default: return 0;
    }
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    cuDeviceGetAttribute_params p = {pi, attrib, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceGetAttribute, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!dev_of(dev))
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            *pi = device_attribute(attrib, dev);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ contexts */

CUresult sim_ctx_init(struct CUctx_st *ctx, sim_dev_t *dev)
{
    ctx->magic = SIM_MAGIC_CTX;
    ctx->id = ++g_sim.next_ctx_id;
    ctx->dev = dev;
    ctx->sticky = CUDA_SUCCESS;
    return sim_stream_init_legacy(ctx);
}

static CUresult primary_retain_locked(sim_dev_t *d, struct CUctx_st **out)
{
    if (!d->primary) {
        struct CUctx_st *ctx = calloc(1, sizeof *ctx);
        if (!ctx)
            return CUDA_ERROR_OUT_OF_MEMORY;
        CUresult r = sim_ctx_init(ctx, d);
        if (r != CUDA_SUCCESS) {
            free(ctx);
            return r;
        }
        d->primary = ctx;
    }
    d->primary_refs++;
    *out = d->primary;
    return CUDA_SUCCESS;
}

int sim_ctx_valid(CUcontext ctx)
{
    return ctx && ((struct CUctx_st *)ctx)->magic == SIM_MAGIC_CTX;
}

SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    cuDevicePrimaryCtxRetain_params p = {pctx, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDevicePrimaryCtxRetain, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!pctx)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!dev_of(dev))
            r = CUDA_ERROR_INVALID_DEVICE;
        else {
            pthread_mutex_lock(&g_sim.lock);
            r = primary_retain_locked(&g_sim.dev[dev], (struct CUctx_st **)pctx);
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    cuDevicePrimaryCtxRelease_v2_params p = {dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDevicePrimaryCtxRelease_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_dev_t *d = dev_of(dev);
        if (!d)
            r = CUDA_ERROR_INVALID_DEVICE;
        else if (d->primary_refs <= 0)
            r = CUDA_ERROR_INVALID_CONTEXT;
        else
            d->primary_refs--;  /* the context object stays: handles never dangle */
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    cuDevicePrimaryCtxGetState_params p = {dev, flags, active};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDevicePrimaryCtxGetState, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_dev_t *d = dev_of(dev);
        if (!flags || !active)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!d)
            r = CUDA_ERROR_INVALID_DEVICE;
        else {
            pthread_mutex_lock(&g_sim.lock);
            *flags = d->primary_flags;
            *active = d->primary_refs > 0;
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    cuDevicePrimaryCtxSetFlags_v2_params p = {dev, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDevicePrimaryCtxSetFlags_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_dev_t *d = dev_of(dev);
        if (!d)
            r = CUDA_ERROR_INVALID_DEVICE;
        else
            d->primary_flags = flags;
    }
    sim_api_exit(&c);
    return r;
}

/* Reset: waits for the device's work and clears a sticky error, the only way out of
 * one on a GPU too. Allocations are kept (unlike a GPU), documented in simulator.md. */
SIM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    cuDevicePrimaryCtxReset_v2_params p = {dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDevicePrimaryCtxReset_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_dev_t *d = dev_of(dev);
        if (!d) {
            r = CUDA_ERROR_INVALID_DEVICE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            if (d->primary) {
                sim_ctx_sync_locked(d->primary);
                d->primary->sticky = CUDA_SUCCESS;
            }
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    cuCtxGetCurrent_params p = {pctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxGetCurrent, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!pctx)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *pctx = (CUcontext)t_ctx;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    cuCtxSetCurrent_params p = {ctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxSetCurrent, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (ctx && !sim_ctx_valid(ctx))
            r = CUDA_ERROR_INVALID_CONTEXT;
        else
            t_ctx = (struct CUctx_st *)ctx;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    cuCtxPushCurrent_v2_params p = {ctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxPushCurrent_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!sim_ctx_valid(ctx))
            r = CUDA_ERROR_INVALID_CONTEXT;
        else if (t_ctx_depth >= (int)(sizeof t_ctx_stack / sizeof t_ctx_stack[0]))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else {
            t_ctx_stack[t_ctx_depth++] = t_ctx;
            t_ctx = (struct CUctx_st *)ctx;
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    cuCtxPopCurrent_v2_params p = {pctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxPopCurrent_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!t_ctx)
            r = CUDA_ERROR_INVALID_CONTEXT;
        else {
            if (pctx)
                *pctx = (CUcontext)t_ctx;
            t_ctx = t_ctx_depth > 0 ? t_ctx_stack[--t_ctx_depth] : NULL;
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    cuCtxGetDevice_params p = {device};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxGetDevice, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!device)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!t_ctx)
            r = CUDA_ERROR_INVALID_CONTEXT;
        else
            *device = t_ctx->dev->ordinal;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    cuCtxGetId_params p = {ctx, ctxId};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxGetId, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        struct CUctx_st *x = ctx ? (struct CUctx_st *)ctx : t_ctx;
        if (!ctxId)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!x || !sim_ctx_valid((CUcontext)x))
            r = CUDA_ERROR_INVALID_CONTEXT;
        else
            *ctxId = x->id;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
    cuCtxGetFlags_params p = {flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxGetFlags, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!flags)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!t_ctx)
            r = CUDA_ERROR_INVALID_CONTEXT;
        else
            *flags = t_ctx->dev->primary_flags;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    cuCtxGetStreamPriorityRange_params p = {leastPriority, greatestPriority};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxGetStreamPriorityRange, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (leastPriority)
            *leastPriority = 0;
        if (greatestPriority)
            *greatestPriority = -5;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuCtxSynchronize(void)
{
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuCtxSynchronize, NULL, &r, SIMCU_CALL_SYNC | SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        if (!t_ctx) {
            r = CUDA_ERROR_INVALID_CONTEXT;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            r = sim_capture_ctx_check(t_ctx);
            if (r == CUDA_SUCCESS)
                r = sim_ctx_sync_locked(t_ctx);
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ errors */

#define SIM_ERRORS(X)                                                                       \
    X(CUDA_SUCCESS, "no error")                                                             \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")                                         \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                            \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                   \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                     \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                           \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                  \
    X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")                           \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                 \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                 \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")                                       \
    X(CUDA_ERROR_NOT_READY, "device not ready")                                             \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")               \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch")        \
    X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                               \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,                                            \
      "part or all of the requested memory range is already mapped")                       \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "pointer does not correspond to a registered memory region") \
    X(CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                  \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                  \
    X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed")                               \
    X(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped")                                 \
    X(CUDA_ERROR_NOT_MAPPED, "resource not mapped")                                         \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing") \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

SIM_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define X(code, str) case code: *pStr = str; return CUDA_SUCCESS;
        SIM_ERRORS(X)
#undef X
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define X(code, str) case code: *pStr = #code; return CUDA_SUCCESS;
        SIM_ERRORS(X)
#undef X
    default:
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* ------------------------------------------------------------------ extension API */

SIM_EXPORT uint64_t simcudaVirtualNow(void)
{
    pthread_mutex_lock(&g_sim.lock);
    uint64_t t = g_sim.horizon > g_sim.host_now ? g_sim.horizon : g_sim.host_now;
    pthread_mutex_unlock(&g_sim.lock);
    return t;
}

SIM_EXPORT uint64_t simcudaHostNow(void)
{
    pthread_mutex_lock(&g_sim.lock);
    uint64_t t = g_sim.host_now;
    pthread_mutex_unlock(&g_sim.lock);
    return t;
}

SIM_EXPORT uint64_t simcudaDeviceMemUsed(int device)
{
    pthread_mutex_lock(&g_sim.lock);
    uint64_t u = device >= 0 && device < g_sim.ndev ? g_sim.dev[device].used : 0;
    pthread_mutex_unlock(&g_sim.lock);
    return u;
}

/* ------------------------------------------------------------------ export tables */

static CUresult rt_use_device(int ordinal)
{
    /* The runtime's implicit primary-context handling, without callbacks: retained
     * once per thread and device, then made current. */
    static __thread uint32_t retained;
    if (!g_sim.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    sim_dev_t *d = dev_of(ordinal);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!(retained & (1u << ordinal)) || !d->primary) {
        struct CUctx_st *ctx;
        pthread_mutex_lock(&g_sim.lock);
        CUresult r = primary_retain_locked(d, &ctx);
        pthread_mutex_unlock(&g_sim.lock);
        if (r != CUDA_SUCCESS)
            return r;
        retained |= 1u << ordinal;
    }
    t_ctx = d->primary;
    return CUDA_SUCCESS;
}

static int rt_device_count(void) { return g_sim.ndev; }

static int rt_peer_access(int dev, int peer)
{
    sim_load_options();
    return g_sim.opt.PEER && dev != peer;
}

static CUresult rt_sticky(void)
{
    return t_ctx ? t_ctx->sticky : CUDA_SUCCESS;
}

static const simcu_rt_table_t g_rt_table = {
    .size = sizeof(simcu_rt_table_t),
    .register_kernel = sim_register_kernel,
    .kernel_by_stub = sim_kernel_by_stub,
    .kernel_name = sim_kernel_name,
    .function_of = sim_function_of,
    .api_enter = sim_api_enter,
    .api_exit = sim_api_exit,
    .use_device = rt_use_device,
    .device_count = rt_device_count,
    .sticky_error = rt_sticky,
    .peer_access = rt_peer_access,
};

static int cupti_subscribe(CUpti_CallbackFunc fn, void *userdata)
{
    sim_load_options();
    pthread_mutex_lock(&g_sim.lock);
    int busy = g_sub_taken || g_sim.opt.CUPTI_HELD;
    if (!busy) {
        g_sub_taken = 1;
        g_sub_user = userdata;
        g_sub_fn = fn;
    }
    pthread_mutex_unlock(&g_sim.lock);
    return busy ? -1 : 0;
}

/* tab[1..n-1] = on (cbid 0 is INVALID in both domains). */
static void cb_set_all(_Atomic uint8_t *tab, size_t n, int on)
{
    for (size_t i = 1; i < n; i++)
        tab[i] = on ? 1 : 0;
}

static void cupti_unsubscribe(void)
{
    pthread_mutex_lock(&g_sim.lock);
    g_sub_fn = NULL;
    g_sub_taken = 0;
    cb_set_all(g_cb_driver, CUPTI_DRIVER_TRACE_CBID_SIZE, 0);
    cb_set_all(g_cb_runtime, CUPTI_RUNTIME_TRACE_CBID_SIZE, 0);
    pthread_mutex_unlock(&g_sim.lock);
}

static int cupti_enable(CUpti_CallbackDomain d, CUpti_CallbackId cbid, int on)
{
    _Atomic uint8_t *tab;
    size_t n;
    if (d == CUPTI_CB_DOMAIN_DRIVER_API) {
        tab = g_cb_driver;
        n = CUPTI_DRIVER_TRACE_CBID_SIZE;
    } else if (d == CUPTI_CB_DOMAIN_RUNTIME_API) {
        tab = g_cb_runtime;
        n = CUPTI_RUNTIME_TRACE_CBID_SIZE;
    } else {
        return -1;
    }
    pthread_mutex_lock(&g_sim.lock);
    int rc = 0;
    if (cbid == (CUpti_CallbackId)-1)
        cb_set_all(tab, n, on);
    else if (cbid == 0 || cbid >= n)
        rc = -1;
    else
        tab[cbid] = on ? 1 : 0;
    pthread_mutex_unlock(&g_sim.lock);
    return rc;
}

static int cupti_cb_state(CUpti_CallbackDomain d, CUpti_CallbackId cbid)
{
    return cb_enabled(d, cbid);
}

static void cupti_set_activity(unsigned mask, simcu_activity_sink_t sink)
{
    pthread_mutex_lock(&g_sim.lock);
    g_sim.act_mask = sink ? mask : 0;
    g_sim.act_sink = sink;
    pthread_mutex_unlock(&g_sim.lock);
}

/* CUPTI's activity buffers: held per context, on its device, until cuptiFinalize. */
static void cupti_activity_memory(uint64_t bytes)
{
    pthread_mutex_lock(&g_sim.lock);
    for (int i = 0; i < g_sim.ndev; i++) {
        sim_dev_t *dev = &g_sim.dev[i];
        uint64_t want = dev->primary != NULL ? bytes : 0;
        dev->used = dev->used - dev->activity_bytes + want;
        dev->activity_bytes = want;
        if (dev->used > dev->peak)
            dev->peak = dev->used;
    }
    pthread_mutex_unlock(&g_sim.lock);
}

static uint64_t cupti_host_now(void) { return simcudaHostNow(); }

static int cupti_push_external(uint32_t kind, uint64_t id)
{
    if (kind >= SIMCU_EXT_KINDS || t_ext_n[kind] == 8)
        return -1;
    t_ext[kind][t_ext_n[kind]++] = id;
    return 0;
}

static int cupti_pop_external(uint32_t kind, uint64_t *id)
{
    if (kind >= SIMCU_EXT_KINDS || t_ext_n[kind] == 0)
        return -1;
    uint64_t v = t_ext[kind][--t_ext_n[kind]];
    if (id)
        *id = v;
    return 0;
}

static uint32_t cupti_ctx_id(CUcontext ctx)
{
    return sim_ctx_valid(ctx) ? ((struct CUctx_st *)ctx)->id : 0;
}

static uint32_t cupti_stream_id(CUstream h)
{
    struct CUstream_st *s = NULL;
    pthread_mutex_lock(&g_sim.lock);
    uint32_t id = sim_stream_resolve(h, &s) == CUDA_SUCCESS ? s->id : 0;
    pthread_mutex_unlock(&g_sim.lock);
    return id;
}

static uint32_t cupti_device_id(CUcontext ctx)
{
    return sim_ctx_valid(ctx) ? (uint32_t)((struct CUctx_st *)ctx)->dev->ordinal : 0;
}

static const simcu_cupti_table_t g_cupti_table = {
    .size = sizeof(simcu_cupti_table_t),
    .subscribe = cupti_subscribe,
    .unsubscribe = cupti_unsubscribe,
    .enable_callback = cupti_enable,
    .callback_state = cupti_cb_state,
    .set_activity = cupti_set_activity,
    .push_external = cupti_push_external,
    .pop_external = cupti_pop_external,
    .host_now = cupti_host_now,
    .activity_memory = cupti_activity_memory,
    .context_id = cupti_ctx_id,
    .stream_id = cupti_stream_id,
    .device_id = cupti_device_id,
};

SIM_EXPORT CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    static const CUuuid rt = SIMCU_RT_TABLE_UUID, cu = SIMCU_CUPTI_TABLE_UUID;
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    if (!memcmp(pExportTableId, &rt, sizeof rt)) {
        *ppExportTable = &g_rt_table;
        return CUDA_SUCCESS;
    }
    if (!memcmp(pExportTableId, &cu, sizeof cu)) {
        *ppExportTable = &g_cupti_table;
        return CUDA_SUCCESS;
    }
    *ppExportTable = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ cuGetProcAddress */

/* below: 0 for the current ABI, else the CUDA version from which on it is not handed out. */
typedef struct { const char *name; void *fn; int below; } sim_proc_t;

/* drv_procs.def lists every entry point: SIM_PROC(base name, exported symbol), and
 * SIM_PROC_OLD(base name, exported symbol, version) for older ABIs. */
#define SIM_PROC(base, sym) {#base, (void *)sym, 0},
#define SIM_PROC_OLD(base, sym, below) {#base, (void *)sym, below},
static const sim_proc_t g_procs[] = {
#include "drv_procs.def"
};
#undef SIM_PROC
#undef SIM_PROC_OLD

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    /* The current ABI, unless the caller's version predates it and an older one is
     * listed. */
    const sim_proc_t *hit = NULL;
    for (size_t i = 0; i < sizeof g_procs / sizeof g_procs[0]; i++) {
        const sim_proc_t *e = &g_procs[i];
        if (strcmp(e->name, symbol) != 0 || (e->below != 0 && cudaVersion >= e->below))
            continue;
        if (!hit || e->below != 0)
            hit = e;
    }
    if (hit) {
        *pfn = hit->fn;
        if (status)
            *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    *pfn = NULL;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

SIM_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                                cuuint64_t flags,
                                                CUdriverProcAddressQueryResult *symbolStatus)
{
    cuGetProcAddress_v2_params p = {symbol, pfn, cudaVersion, flags, symbolStatus};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGetProcAddress_v2, &p, &r, SIMCU_CALL_NOINIT);
    if (r == CUDA_SUCCESS)
        r = get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
    sim_api_exit(&c);
    return r;
}

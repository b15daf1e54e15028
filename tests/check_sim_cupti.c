/* check_sim_cupti.c - the simulated CUPTI: one subscriber, cbid filtering, the real
 * params structs, nested runtime->driver callbacks, the no-CUDA-in-callbacks rule, and
 * activity records timed by the virtual clock. libcupti is dlopened, as an optional
 * observer loads it. */
#include "sim_test.h"

#include <cupti.h>
#include <dlfcn.h>

/* generated_cuda_meta.h needs the driver's internal-mode types; the two params
 * structs used here are restated with the header's exact layout instead. */
typedef struct { CUdeviceptr *dptr; size_t bytesize; } memalloc_params_t;  /* cuMemAlloc_v2_params */
typedef struct {
    const CUlaunchConfig *config;
    CUfunction f;
    void **kernelParams;
    void **extra;
} launchex_params_t;  /* cuLaunchKernelEx_params */

static struct {
#define CUPTI_FNS(X)                                                                         \
    X(Subscribe) X(Unsubscribe) X(EnableCallback) X(EnableDomain) X(GetCallbackState)        \
    X(ActivityEnable) X(ActivityDisable) X(ActivityRegisterCallbacks) X(ActivityFlushAll)    \
    X(ActivityGetNextRecord) X(GetTimestamp) X(GetResultString) X(GetStreamId)              \
    X(ActivityPushExternalCorrelationId) X(ActivityPopExternalCorrelationId)
#define X(n) __typeof__(cupti##n) *n;
    CUPTI_FNS(X)
#undef X
} C;

static void load_cupti(void)
{
    void *h = dlopen("libcupti.so.13", RTLD_NOW);
    ck_assert_ptr_nonnull(h);
#define X(n)                                  \
    C.n = dlsym(h, "cupti" #n);               \
    ck_assert_ptr_nonnull(C.n);
    CUPTI_FNS(X)
#undef X
}

/* ---- a recording subscriber ---- */

typedef struct {
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
    CUpti_ApiCallbackSite site;
    char name[64];
    char symbol[64];
    uint32_t corr;
    CUcontext ctx;
    size_t bytes;         /* cuMemAlloc_v2: bytesize */
    CUdeviceptr dptr;     /* cuMemAlloc_v2 at exit: *dptr */
    int ret;              /* at exit: the return value */
    unsigned grid_x;      /* cuLaunchKernelEx: config->gridDimX */
    void **extra;
    int inner_rt, inner_drv, inner_sync;  /* results of calls made inside the callback */
} rec_t;

static rec_t g_rec[512];
static int g_nrec;
static int g_call_inside;

static void CUPTIAPI on_cb(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data)
{
    (void)user;
    const CUpti_CallbackData *cb = data;
    if (g_nrec >= 512)
        return;
    rec_t *r = &g_rec[g_nrec++];
    memset(r, 0, sizeof *r);
    r->domain = domain;
    r->cbid = cbid;
    r->site = cb->callbackSite;
    snprintf(r->name, sizeof r->name, "%s", cb->functionName ? cb->functionName : "");
    snprintf(r->symbol, sizeof r->symbol, "%s", cb->symbolName ? cb->symbolName : "");
    r->corr = cb->correlationId;
    r->ctx = cb->context;
    if (cb->callbackSite == CUPTI_API_EXIT && cb->functionReturnValue)
        r->ret = *(int *)cb->functionReturnValue;
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) {
        const memalloc_params_t *p = cb->functionParams;
        r->bytes = p->bytesize;
        if (cb->callbackSite == CUPTI_API_EXIT)
            r->dptr = *p->dptr;
    }
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx) {
        const launchex_params_t *p = cb->functionParams;
        r->grid_x = p->config->gridDimX;
        r->extra = p->extra;
    }
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020) {
        const cudaMalloc_v3020_params *p = cb->functionParams;
        r->bytes = p->size;
    }
    if (g_call_inside && cb->callbackSite == CUPTI_API_ENTER) {
        size_t fr, tot;
        r->inner_rt = cudaMemGetInfo(&fr, &tot);
        r->inner_drv = cuMemGetInfo(&fr, &tot);
        r->inner_sync = cuCtxSynchronize();
    }
}

static int find_rec(CUpti_CallbackDomain d, CUpti_CallbackId cbid, CUpti_ApiCallbackSite site, int from)
{
    for (int i = from; i < g_nrec; i++)
        if (g_rec[i].domain == d && g_rec[i].cbid == cbid && g_rec[i].site == site)
            return i;
    return -1;
}

START_TEST(test_single_subscriber)
{
    load_cupti();
    CUpti_SubscriberHandle a, b;
    ck_assert_int_eq(C.Subscribe(&a, on_cb, NULL), CUPTI_SUCCESS);
    ck_assert_int_eq(C.Subscribe(&b, on_cb, NULL), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    ck_assert_int_eq(C.Subscribe(&b, on_cb, NULL), 39);
    const char *s;
    ck_assert_int_eq(C.GetResultString(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, &s), CUPTI_SUCCESS);
    ck_assert_str_eq(s, "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED");
    ck_assert_int_eq(C.Unsubscribe(a), CUPTI_SUCCESS);
    ck_assert_int_eq(C.Unsubscribe(a), CUPTI_ERROR_INVALID_PARAMETER);
    ck_assert_int_eq(C.Subscribe(&b, on_cb, NULL), CUPTI_SUCCESS);
}
END_TEST

START_TEST(test_held_by_another_profiler)
{
    setenv("FTSIM_CUPTI_HELD", "1", 1);
    load_cupti();
    CUpti_SubscriberHandle a;
    ck_assert_int_eq(C.Subscribe(&a, on_cb, NULL), CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
    /* Nothing fires for us: the application runs as usual. */
    void *p;
    RT_OK(cudaMalloc(&p, 16));
    ck_assert_int_eq(g_nrec, 0);
}
END_TEST

/* Only enabled cbids fire, at ENTER and EXIT, with the real params structs. */
START_TEST(test_cbid_filter_and_params)
{
    load_cupti();
    sim_test_register();
    RT_OK(cudaFree(0));
    CUpti_SubscriberHandle sub;
    ck_assert_int_eq(C.Subscribe(&sub, on_cb, NULL), CUPTI_SUCCESS);
    ck_assert_int_eq(C.EnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2),
                     CUPTI_SUCCESS);
    uint32_t on = 0;
    ck_assert_int_eq(C.GetCallbackState(&on, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2),
                     CUPTI_SUCCESS);
    ck_assert_uint_eq(on, 1);
    void *p;
    RT_OK(cudaMalloc(&p, 12345));
    size_t fr, tot;
    RT_OK(cudaMemGetInfo(&fr, &tot));  /* not enabled: no record */
    RT_OK(launch_spin(10, 0));
    ck_assert_int_eq(g_nrec, 2);
    rec_t *en = &g_rec[0], *ex = &g_rec[1];
    ck_assert_int_eq(en->site, CUPTI_API_ENTER);
    ck_assert_int_eq(ex->site, CUPTI_API_EXIT);
    ck_assert_str_eq(en->name, "cuMemAlloc_v2");
    ck_assert_uint_eq(en->bytes, 12345);
    ck_assert_uint_eq(ex->dptr, (CUdeviceptr)p);
    ck_assert_int_eq(ex->ret, CUDA_SUCCESS);
    ck_assert_uint_ne(en->corr, 0);
    ck_assert_uint_eq(en->corr, ex->corr);
    CUcontext cur;
    CU_OK(cuCtxGetCurrent(&cur));
    ck_assert_ptr_eq(en->ctx, cur);
    /* A failing call reports its error at EXIT. */
    ck_assert_int_eq(cudaMalloc(&p, 1ull << 50), cudaErrorMemoryAllocation);
    ck_assert_int_eq(g_rec[g_nrec - 1].ret, CUDA_ERROR_OUT_OF_MEMORY);
    /* Disabling stops it; enabling the domain enables everything in it. */
    ck_assert_int_eq(C.EnableCallback(0, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2),
                     CUPTI_SUCCESS);
    int n = g_nrec;
    RT_OK(cudaMalloc(&p, 16));
    ck_assert_int_eq(g_nrec, n);
    ck_assert_int_eq(C.EnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API), CUPTI_SUCCESS);
    RT_OK(cudaMemGetInfo(&fr, &tot));
    ck_assert_int_ge(find_rec(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2, CUPTI_API_ENTER, n),
                     0);
    ck_assert_int_eq(find_rec(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemGetInfo_v3020,
                              CUPTI_API_ENTER, 0),
                     -1);
}
END_TEST

/* A runtime call fires the runtime callback around the nested driver callback. */
START_TEST(test_nested_runtime_driver_callbacks)
{
    load_cupti();
    sim_test_register();
    RT_OK(cudaFree(0));
    CUpti_SubscriberHandle sub;
    ck_assert_int_eq(C.Subscribe(&sub, on_cb, NULL), CUPTI_SUCCESS);
    C.EnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
    C.EnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
    C.EnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    C.EnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
    void *p;
    RT_OK(cudaMalloc(&p, 777));
    ck_assert_int_eq(g_nrec, 4);
    ck_assert_int_eq(g_rec[0].domain, CUPTI_CB_DOMAIN_RUNTIME_API);
    ck_assert_str_eq(g_rec[0].name, "cudaMalloc");
    ck_assert_uint_eq(g_rec[0].bytes, 777);
    ck_assert_int_eq(g_rec[1].domain, CUPTI_CB_DOMAIN_DRIVER_API);
    ck_assert_int_eq(g_rec[1].site, CUPTI_API_ENTER);
    ck_assert_int_eq(g_rec[2].domain, CUPTI_CB_DOMAIN_DRIVER_API);
    ck_assert_int_eq(g_rec[2].site, CUPTI_API_EXIT);
    ck_assert_int_eq(g_rec[3].domain, CUPTI_CB_DOMAIN_RUNTIME_API);
    ck_assert_int_eq(g_rec[3].site, CUPTI_API_EXIT);
    /* One correlation id for the runtime call and the driver call it made. */
    ck_assert_uint_eq(g_rec[0].corr, g_rec[1].corr);
    ck_assert_uint_eq(g_rec[0].corr, g_rec[3].corr);
    /* Launches carry the kernel's name. */
    RT_OK(launch_spin(10, 0));
    int i = find_rec(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER, 4);
    ck_assert_int_ge(i, 0);
    ck_assert_str_eq(g_rec[i].symbol, "spin");
    i = find_rec(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_ENTER, 4);
    ck_assert_int_ge(i, 0);
    ck_assert_str_eq(g_rec[i].symbol, "spin");
    ck_assert_uint_ne(g_rec[i].corr, g_rec[0].corr);
}
END_TEST

/* cuLaunchKernelEx with the argument buffer in `extra`, as cuBLAS launches. */
START_TEST(test_launch_ex_params_visible)
{
    load_cupti();
    sim_test_register();
    RT_OK(cudaFree(0));
    CUpti_SubscriberHandle sub;
    ck_assert_int_eq(C.Subscribe(&sub, on_cb, NULL), CUPTI_SUCCESS);
    C.EnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx);
    cudaKernel_t k;
    RT_OK(cudaGetKernel(&k, &k_spin));
    uint64_t ns = 100;
    size_t size = sizeof ns;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ns, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CUlaunchConfig cfg = {.gridDimX = 7, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                          .blockDimZ = 1};
    CU_OK(cuLaunchKernelEx(&cfg, (CUfunction)k, NULL, extra));
    ck_assert_int_eq(g_nrec, 2);
    ck_assert_uint_eq(g_rec[0].grid_x, 7);
    ck_assert_ptr_eq(g_rec[0].extra, extra);
    ck_assert_str_eq(g_rec[0].symbol, "spin");
}
END_TEST

/* CUDA calls inside a callback are refused (except synchronize), with a warning. */
START_TEST(test_no_cuda_calls_inside_callbacks)
{
    load_cupti();
    RT_OK(cudaFree(0));
    CUpti_SubscriberHandle sub;
    ck_assert_int_eq(C.Subscribe(&sub, on_cb, NULL), CUPTI_SUCCESS);
    C.EnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
    g_call_inside = 1;
    stderr_capture_begin();
    void *p;
    cudaError_t e = cudaMalloc(&p, 64);
    const char *err = stderr_capture_end();
    g_call_inside = 0;
    RT_OK(e);  /* the outer call itself is fine */
    ck_assert_int_eq(g_rec[0].inner_rt, cudaErrorNotPermitted);
    ck_assert_int_eq(g_rec[0].inner_drv, CUDA_ERROR_NOT_PERMITTED);
    ck_assert_int_eq(g_rec[0].inner_sync, CUDA_SUCCESS);
    ck_assert_ptr_nonnull(strstr(err, "cudaMemGetInfo called from inside a CUPTI callback"));
    ck_assert_ptr_nonnull(strstr(err, "cuMemGetInfo_v2 called from inside a CUPTI callback"));
    ck_assert_ptr_null(strstr(err, "cuCtxSynchronize called"));
    /* Outside a callback the same call works. */
    size_t fr, tot;
    RT_OK(cudaMemGetInfo(&fr, &tot));
}
END_TEST

/* ---- activity ---- */

static uint8_t *g_bufs[16];
static size_t g_valid[16];
static int g_nbufs;

static void CUPTIAPI buf_req(uint8_t **buffer, size_t *size, size_t *maxNumRecords)
{
    *size = 4096;
    *buffer = aligned_alloc(8, *size);
    *maxNumRecords = 0;
}

static void CUPTIAPI buf_done(CUcontext ctx, uint32_t streamId, uint8_t *buffer, size_t size, size_t validSize)
{
    (void)ctx;
    (void)streamId;
    (void)size;
    if (g_nbufs < 16) {
        g_bufs[g_nbufs] = buffer;
        g_valid[g_nbufs++] = validSize;
    } else {
        free(buffer);
    }
}

static CUpti_Activity *g_acts[64];
static int g_nacts;

static void collect(void)
{
    g_nacts = 0;
    for (int b = 0; b < g_nbufs; b++) {
        CUpti_Activity *r = NULL;
        while (C.ActivityGetNextRecord(g_bufs[b], g_valid[b], &r) == CUPTI_SUCCESS && g_nacts < 64)
            g_acts[g_nacts++] = r;
    }
}

static CUpti_Activity *find_act(CUpti_ActivityKind kind, int nth)
{
    for (int i = 0; i < g_nacts; i++)
        if (g_acts[i]->kind == kind && nth-- == 0)
            return g_acts[i];
    return NULL;
}

START_TEST(test_activity_records_match_events)
{
    setenv("FTSIM_H2D_GBPS", "10", 1);
    setenv("FTSIM_COPY_LATENCY_NS", "1000", 1);
    load_cupti();
    sim_test_register();
    ck_assert_int_eq(C.ActivityRegisterCallbacks(buf_req, buf_done), CUPTI_SUCCESS);
    ck_assert_int_eq(C.ActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
    ck_assert_int_eq(C.ActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), CUPTI_SUCCESS);
    ck_assert_int_eq(C.ActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), CUPTI_SUCCESS);
    ck_assert_int_eq(C.ActivityEnable(CUPTI_ACTIVITY_KIND_PC_SAMPLING), CUPTI_ERROR_NOT_SUPPORTED);
    CUpti_SubscriberHandle sub;
    ck_assert_int_eq(C.Subscribe(&sub, on_cb, NULL), CUPTI_SUCCESS);
    C.EnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);

    cudaStream_t s;
    cudaEvent_t e0, e1;
    void *h, *d;
    RT_OK(cudaStreamCreate(&s));
    RT_OK(cudaEventCreate(&e0));
    RT_OK(cudaEventCreate(&e1));
    RT_OK(cudaMallocHost(&h, 1000000));
    RT_OK(cudaMalloc(&d, 1000000));
    RT_OK(cudaEventRecord(e0, s));
    RT_OK(launch_spin(5000, s));
    RT_OK(cudaEventRecord(e1, s));
    RT_OK(cudaMemcpyAsync(d, h, 1000000, cudaMemcpyHostToDevice, s));
    RT_OK(cudaMemsetAsync(d, 1, 4096, s));
    RT_OK(cudaStreamSynchronize(s));
    uint64_t ts;
    ck_assert_int_eq(C.GetTimestamp(&ts), CUPTI_SUCCESS);
    ck_assert_uint_eq(ts, simcudaHostNow());
    ck_assert_uint_eq(ts, 5000 + 101000 + 1000 + 2);  /* memset: 4096 B at 2000 GB/s */
    ck_assert_int_eq(C.ActivityFlushAll(0), CUPTI_SUCCESS);
    collect();
    ck_assert_int_eq(g_nacts, 3);

    CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)find_act(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, 0);
    ck_assert_ptr_nonnull(k);
    ck_assert_str_eq(k->name, "spin");
    ck_assert_uint_eq(k->end - k->start, 5000);
    float ms;
    RT_OK(cudaEventElapsedTime(&ms, e0, e1));
    ck_assert_uint_eq((uint64_t)(ms * 1e6f + 0.5f), k->end - k->start);
    uint32_t sid;
    ck_assert_int_eq(C.GetStreamId(NULL, s, &sid), CUPTI_SUCCESS);
    ck_assert_uint_eq(k->streamId, sid);
    int i = find_rec(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER, 0);
    ck_assert_int_ge(i, 0);
    ck_assert_uint_eq(k->correlationId, g_rec[i].corr);
    ck_assert_uint_eq(k->gridX, 1);

    CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)find_act(CUPTI_ACTIVITY_KIND_MEMCPY, 0);
    ck_assert_ptr_nonnull(m);
    ck_assert_uint_eq(m->bytes, 1000000);
    ck_assert_uint_eq(m->copyKind, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
    ck_assert_uint_eq(m->srcKind, CUPTI_ACTIVITY_MEMORY_KIND_PINNED);
    ck_assert_uint_eq(m->dstKind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
    ck_assert_uint_eq(m->start, k->end);
    ck_assert_uint_eq(m->end - m->start, 101000);
    ck_assert_uint_eq(m->flags & CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC, CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC);

    CUpti_ActivityMemset4 *ms4 = (CUpti_ActivityMemset4 *)find_act(CUPTI_ACTIVITY_KIND_MEMSET, 0);
    ck_assert_ptr_nonnull(ms4);
    ck_assert_uint_eq(ms4->bytes, 4096);
    ck_assert_uint_eq(ms4->value, 1);
    ck_assert_uint_eq(ms4->start, m->end);

    /* Disabled kinds produce nothing. */
    ck_assert_int_eq(C.ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
    g_nbufs = 0;
    RT_OK(launch_spin(5000, s));
    RT_OK(cudaMemcpyAsync(d, h, 100, cudaMemcpyHostToDevice, s));
    RT_OK(cudaStreamSynchronize(s));
    C.ActivityFlushAll(0);
    collect();
    ck_assert_int_eq(g_nacts, 1);
    ck_assert_int_eq(g_acts[0]->kind, CUPTI_ACTIVITY_KIND_MEMCPY);
}
END_TEST

START_TEST(test_activity_buffers_fill_and_iterate)
{
    load_cupti();
    sim_test_register();
    ck_assert_int_eq(C.ActivityRegisterCallbacks(buf_req, buf_done), CUPTI_SUCCESS);
    ck_assert_int_eq(C.ActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL), CUPTI_SUCCESS);
    for (int i = 0; i < 30; i++)
        RT_OK(launch_spin((uint64_t)(i + 1) * 10, 0));
    RT_OK(cudaDeviceSynchronize());
    ck_assert_int_eq(C.ActivityFlushAll(0), CUPTI_SUCCESS);
    /* 30 kernel records do not fit in one 4 KiB buffer: several come back. */
    ck_assert_int_gt(g_nbufs, 1);
    collect();
    ck_assert_int_eq(g_nacts, 30);
    uint64_t prev_end = 0;
    for (int i = 0; i < 30; i++) {
        CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)g_acts[i];
        ck_assert_int_eq(k->kind, CUPTI_ACTIVITY_KIND_KERNEL);
        ck_assert_uint_eq(k->end - k->start, (uint64_t)(i + 1) * 10);
        ck_assert_uint_eq(k->start, prev_end);  /* back to back on one engine */
        prev_end = k->end;
    }
    CUpti_Activity *r = g_acts[29];
    int b = g_nbufs - 1;
    ck_assert_int_eq(C.ActivityGetNextRecord(g_bufs[b], g_valid[b], &r), CUPTI_ERROR_MAX_LIMIT_REACHED);
}
END_TEST

/* Threads calling the API while activity kinds are switched on and off: every outermost
 * call reads the activity settings (for its external correlation records) without the
 * driver's lock. They were plain variables, and SAN=thread found the race (a cudaFree
 * against cuptiActivityEnable); the test fails under it if they are again. Afterwards
 * the settings are those last made: one call, one record. */
#define SWITCH_THREADS 3
static int g_callers_done;

static void *call_with_external_id(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    ck_assert_int_eq(C.ActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id),
                     CUPTI_SUCCESS);
    for (int i = 0; i < 300; i++) {
        void *p;
        RT_OK(cudaMalloc(&p, 256));
        RT_OK(cudaFree(p));
    }
    uint64_t last = 0;
    ck_assert_int_eq(C.ActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
                     CUPTI_SUCCESS);
    ck_assert_uint_eq(last, id);
    __atomic_add_fetch(&g_callers_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

START_TEST(test_activity_switched_while_threads_call)
{
    load_cupti();
    sim_test_register();
    RT_OK(cudaFree(0));
    ck_assert_int_eq(C.ActivityRegisterCallbacks(buf_req, buf_done), CUPTI_SUCCESS);
    pthread_t t[SWITCH_THREADS];
    for (int i = 0; i < SWITCH_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, call_with_external_id, (void *)(uintptr_t)(i + 1)), 0);
    while (__atomic_load_n(&g_callers_done, __ATOMIC_ACQUIRE) < SWITCH_THREADS) {
        ck_assert_int_eq(C.ActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), CUPTI_SUCCESS);
        ck_assert_int_eq(C.ActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
        ck_assert_int_eq(C.ActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), CUPTI_SUCCESS);
        ck_assert_int_eq(C.ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), CUPTI_SUCCESS);
    }
    for (int i = 0; i < SWITCH_THREADS; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(C.ActivityFlushAll(0), CUPTI_SUCCESS);
    while (g_nbufs > 0)
        free(g_bufs[--g_nbufs]);

    ck_assert_int_eq(C.ActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION), CUPTI_SUCCESS);
    ck_assert_int_eq(C.ActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 77),
                     CUPTI_SUCCESS);
    RT_OK(cudaFree(0));
    uint64_t last;
    ck_assert_int_eq(C.ActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
                     CUPTI_SUCCESS);
    ck_assert_int_eq(C.ActivityFlushAll(0), CUPTI_SUCCESS);
    collect();
    ck_assert_int_eq(g_nacts, 1);
    CUpti_ActivityExternalCorrelation *x = (CUpti_ActivityExternalCorrelation *)g_acts[0];
    ck_assert_int_eq(x->kind, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    ck_assert_int_eq(x->externalKind, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0);
    ck_assert_uint_eq(x->externalId, 77);
}
END_TEST

Suite *sim_cupti_suite(void)
{
    Suite *s = suite_create("sim_cupti");
    TCase *tc = tcase_create("cupti");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_single_subscriber);
    tcase_add_test(tc, test_held_by_another_profiler);
    tcase_add_test(tc, test_cbid_filter_and_params);
    tcase_add_test(tc, test_nested_runtime_driver_callbacks);
    tcase_add_test(tc, test_launch_ex_params_visible);
    tcase_add_test(tc, test_no_cuda_calls_inside_callbacks);
    tcase_add_test(tc, test_activity_records_match_events);
    tcase_add_test(tc, test_activity_buffers_fill_and_iterate);
    tcase_add_test(tc, test_activity_switched_while_threads_call);
    suite_add_tcase(s, tc);
    return s;
}

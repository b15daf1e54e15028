/* cupti.c - the simulated CUPTI, libcupti.so.13: callback API and activity API.
 *
 * Subscription state and callback filtering live in the driver (every API call checks
 * them); this library reaches it through cuGetExportTable with a private UUID, as the
 * real CUPTI reaches the real driver. Activity records arrive from the driver's
 * workers as neutral structs when an operation completes; they are queued here and
 * laid out as the header's current records (CUpti_ActivityKernel10,
 * CUpti_ActivityMemcpy6, CUpti_ActivityMemset4) in the client's buffers on flush.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_priv.h"

#define CUPTI_EXPORT __attribute__((visibility("default")))

static const simcu_cupti_table_t *T;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void cupti_log(const char *msg)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "simcuda cupti: %s\n", msg);
    if (n > 0) {
        ssize_t w = write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
        (void)w;
    }
}

static void init_once(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        cupti_log("cannot load libcuda.so.1");
        return;
    }
    __typeof__(cuGetProcAddress_v2) *gpa = (__typeof__(cuGetProcAddress_v2) *)dlsym(h, "cuGetProcAddress_v2");
    __typeof__(cuGetExportTable) *get = NULL;
    CUdriverProcAddressQueryResult st;
    if (!gpa || gpa("cuGetExportTable", (void **)&get, 13000, 0, &st) != CUDA_SUCCESS || !get) {
        cupti_log("libcuda.so.1 is not the simulated driver");
        return;
    }
    static const CUuuid id = SIMCU_CUPTI_TABLE_UUID;
    const void *tab = NULL;
    if (get(&tab, &id) != CUDA_SUCCESS || !tab ||
        ((const simcu_cupti_table_t *)tab)->size < sizeof(simcu_cupti_table_t)) {
        cupti_log("libcuda.so.1 is not the simulated driver");
        return;
    }
    T = tab;
}

static int ready(void)
{
    pthread_once(&g_once, init_once);
    return T != NULL;
}

/* ------------------------------------------------------------------ results */

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char **str)
{
    if (!str)
        return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_INVALID_DEVICE: *str = "CUPTI_ERROR_INVALID_DEVICE"; break;
    case CUPTI_ERROR_INVALID_CONTEXT: *str = "CUPTI_ERROR_INVALID_CONTEXT"; break;
    case CUPTI_ERROR_INVALID_OPERATION: *str = "CUPTI_ERROR_INVALID_OPERATION"; break;
    case CUPTI_ERROR_OUT_OF_MEMORY: *str = "CUPTI_ERROR_OUT_OF_MEMORY"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *str = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    case CUPTI_ERROR_NOT_SUPPORTED: *str = "CUPTI_ERROR_NOT_SUPPORTED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
        *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
        break;
    case CUPTI_ERROR_UNKNOWN: *str = "CUPTI_ERROR_UNKNOWN"; break;
    default:
        *str = NULL;
        return CUPTI_ERROR_INVALID_PARAMETER;
    }
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetLastError(void) { return CUPTI_SUCCESS; }

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version)
{
    if (!version)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *version = CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ callbacks */

struct CUpti_Subscriber_st { int active; };
static struct CUpti_Subscriber_st g_sub;

static CUptiResult subscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback, void *userdata)
{
    if (!subscriber)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!ready())
        return CUPTI_ERROR_NOT_INITIALIZED;
    if (T->subscribe(callback, userdata) != 0)
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    g_sub.active = 1;
    *subscriber = &g_sub;
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                                 void *userdata)
{
    return subscribe(subscriber, callback, userdata);
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiSubscribe_v2(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                                    void *userdata, CUpti_SubscriberParams *params)
{
    CUptiResult r = subscribe(subscriber, callback, userdata);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && params && params->oldSubscriberName &&
        params->oldSubscriberSize > 0)
        snprintf(params->oldSubscriberName, params->oldSubscriberSize, "%s", "unknown (simulated)");
    return r;
}

static int sub_ok(CUpti_SubscriberHandle s)
{
    return s == &g_sub && g_sub.active && T;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
    if (!sub_ok(subscriber))
        return CUPTI_ERROR_INVALID_PARAMETER;
    g_sub.active = 0;
    T->unsubscribe();
    return CUPTI_SUCCESS;
}

static int domain_ok(CUpti_CallbackDomain d)
{
    return d > CUPTI_CB_DOMAIN_INVALID && d < CUPTI_CB_DOMAIN_SIZE;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                                      CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
    if (!sub_ok(subscriber) || !domain_ok(domain))
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API && domain != CUPTI_CB_DOMAIN_RUNTIME_API)
        return CUPTI_SUCCESS;  /* accepted; the simulator fires no such callbacks */
    return T->enable_callback(domain, cbid, enable != 0) == 0 ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                                    CUpti_CallbackDomain domain)
{
    if (!sub_ok(subscriber) || !domain_ok(domain))
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API && domain != CUPTI_CB_DOMAIN_RUNTIME_API)
        return CUPTI_SUCCESS;
    return T->enable_callback(domain, (CUpti_CallbackId)-1, enable != 0) == 0 ? CUPTI_SUCCESS
                                                                             : CUPTI_ERROR_INVALID_PARAMETER;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber)
{
    if (!sub_ok(subscriber))
        return CUPTI_ERROR_INVALID_PARAMETER;
    T->enable_callback(CUPTI_CB_DOMAIN_DRIVER_API, (CUpti_CallbackId)-1, enable != 0);
    T->enable_callback(CUPTI_CB_DOMAIN_RUNTIME_API, (CUpti_CallbackId)-1, enable != 0);
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetCallbackState(uint32_t *enable, CUpti_SubscriberHandle subscriber,
                                                        CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
    if (!enable || !sub_ok(subscriber) || !domain_ok(domain))
        return CUPTI_ERROR_INVALID_PARAMETER;
    *enable = (uint32_t)T->callback_state(domain, cbid);
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiSupportedDomains(size_t *domainCount, CUpti_DomainTable *domainTable)
{
    static CUpti_CallbackDomain domains[] = {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RUNTIME_API};
    if (!domainCount || !domainTable)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *domainCount = 2;
    *domainTable = domains;
    return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------------ ids, time */

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp)
{
    if (!timestamp)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!ready())
        return CUPTI_ERROR_NOT_INITIALIZED;
    *timestamp = T->host_now();
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetContextId(CUcontext context, uint32_t *contextId)
{
    if (!contextId || !ready())
        return CUPTI_ERROR_INVALID_PARAMETER;
    uint32_t id = T->context_id(context);
    if (!id)
        return CUPTI_ERROR_INVALID_CONTEXT;
    *contextId = id;
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext context, uint32_t *deviceId)
{
    if (!deviceId || !ready())
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (context && !T->context_id(context))
        return CUPTI_ERROR_INVALID_CONTEXT;
    *deviceId = T->device_id(context);
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetStreamId(CUcontext context, CUstream stream, uint32_t *streamId)
{
    if (!streamId || !ready())
        return CUPTI_ERROR_INVALID_PARAMETER;
    uint32_t id = T->stream_id(stream);
    if (!id)
        return CUPTI_ERROR_INVALID_STREAM;
    *streamId = id;
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetStreamIdEx(CUcontext context, CUstream stream, uint8_t perThreadStream,
                                                     uint32_t *streamId)
{
    return cuptiGetStreamId(context, perThreadStream && !stream ? CU_STREAM_PER_THREAD : stream, streamId);
}

/* ------------------------------------------------------------------ activity */

/* Pending records and client callbacks, under g_act_lock. The driver calls sink()
 * from its worker threads; client callbacks are called without the lock. */
static pthread_mutex_t g_act_lock = PTHREAD_MUTEX_INITIALIZER;
static simcu_activity_t *g_pending;
static size_t g_npending, g_cap;
static size_t g_dropped;
static unsigned g_mask;
static int g_kernel_kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
static CUpti_BuffersCallbackRequestFunc g_req;
static CUpti_BuffersCallbackCompleteFunc g_done;

static void remember_name(const simcu_activity_t *a);

static void sink(const simcu_activity_t *rec)
{
    pthread_mutex_lock(&g_act_lock);
    if (g_npending == g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 256;
        simcu_activity_t *p = realloc(g_pending, cap * sizeof *p);
        if (!p) {
            g_dropped++;
            pthread_mutex_unlock(&g_act_lock);
            return;
        }
        g_pending = p;
        g_cap = cap;
    }
    g_pending[g_npending++] = *rec;
    pthread_mutex_unlock(&g_act_lock);
    if (rec->kind == SIMCU_ACT_API)
        remember_name(rec);
}

static unsigned kind_bit(CUpti_ActivityKind kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        return SIMCU_ACTMASK_KERNEL;
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        return SIMCU_ACTMASK_MEMCPY;
    case CUPTI_ACTIVITY_KIND_MEMSET:
        return SIMCU_ACTMASK_MEMSET;
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return SIMCU_ACTMASK_EXTCORR;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
        return SIMCU_ACTMASK_RUNTIME;
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return SIMCU_ACTMASK_DRIVER;
    default:
        return 0;
    }
}

/* Where the records of kernels, copies and sets wait until they are read: as CUPTI
 * 12.0 Update 1 and later, DEVICE_BUFFER_PRE_ALLOCATE_VALUE buffers of
 * DEVICE_BUFFER_SIZE bytes in device memory per context, from the first such kind
 * enabled until cuptiFinalize; none in device memory with MEM_ALLOCATION_TYPE_HOST_PINNED. */
static size_t g_buf_size = 3200000, g_buf_count = 3;
static uint8_t g_host_pinned;
static int g_buffers_held;

static CUptiResult set_kind(CUpti_ActivityKind kind, int on)
{
    unsigned bit = kind_bit(kind);
    if (!bit)
        return CUPTI_ERROR_NOT_SUPPORTED;
    if (!ready())
        return CUPTI_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&g_act_lock);
    if (on && (bit & (SIMCU_ACTMASK_KERNEL | SIMCU_ACTMASK_MEMCPY | SIMCU_ACTMASK_MEMSET)) && !g_buffers_held) {
        g_buffers_held = 1;
        T->activity_memory(g_host_pinned ? 0 : (uint64_t)g_buf_size * g_buf_count);
    }
    if (on) {
        g_mask |= bit;
        if (bit == SIMCU_ACTMASK_KERNEL)
            g_kernel_kind = kind;
    } else {
        g_mask &= ~bit;
    }
    /* Under the lock: two threads changing kinds at once hand the driver their masks in
     * the order they made them, the last one standing. */
    T->set_activity(g_mask, sink);
    pthread_mutex_unlock(&g_act_lock);
    return CUPTI_SUCCESS;
}

/* Through the exported cuptiActivityEnableContext, so through the PLT (default
 * visibility, no -Bsymbolic): as a libcupti that calls its own entry points would, and
 * a preloaded library exporting that name then sees libcupti's own call. */
CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind)
{
    return cuptiActivityEnableContext(NULL, kind);
}
CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) { return set_kind(kind, 0); }

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableContext(CUcontext context, CUpti_ActivityKind kind)
{
    return set_kind(kind, 1);
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityDisableContext(CUcontext context, CUpti_ActivityKind kind)
{
    return set_kind(kind, 0);
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                                                 CUpti_BuffersCallbackCompleteFunc funcBufferCompleted)
{
    if (!funcBufferRequested || !funcBufferCompleted)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_act_lock);
    g_req = funcBufferRequested;
    g_done = funcBufferCompleted;
    pthread_mutex_unlock(&g_act_lock);
    return CUPTI_SUCCESS;
}

static size_t record_size(uint32_t kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
        return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET:
        return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        return sizeof(CUpti_ActivityAPI);
    default:
        return 0;
    }
}

/* The names of the API calls recorded so far, by domain and callback id, for
 * cuptiGetCallbackName (the driver hands each record's name with it). */
static const char *_Atomic g_rt_names[CUPTI_RUNTIME_TRACE_CBID_SIZE];
static const char *_Atomic g_drv_names[CUPTI_DRIVER_TRACE_CBID_SIZE];

static void remember_name(const simcu_activity_t *a)
{
    if (a->name == NULL)
        return;
    if (a->domain == CUPTI_CB_DOMAIN_RUNTIME_API && a->cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE)
        g_rt_names[a->cbid] = a->name;
    else if (a->domain == CUPTI_CB_DOMAIN_DRIVER_API && a->cbid < CUPTI_DRIVER_TRACE_CBID_SIZE)
        g_drv_names[a->cbid] = a->name;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char **name)
{
    if (name == NULL)
        return CUPTI_ERROR_INVALID_PARAMETER;
    *name = NULL;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE)
        *name = g_rt_names[cbid];
    else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid < CUPTI_DRIVER_TRACE_CBID_SIZE)
        *name = g_drv_names[cbid];
    return *name != NULL ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

/* Writes one record at p (which has room); returns its size. */
static size_t write_record(uint8_t *p, const simcu_activity_t *a, int kernel_kind)
{
    switch (a->kind) {
    case SIMCU_ACT_KERNEL: {
        CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)p;
        memset(k, 0, sizeof *k);
        k->kind = (CUpti_ActivityKind)kernel_kind;
        k->start = a->start;
        k->end = a->end;
        k->completed = a->end;
        k->deviceId = a->device_id;
        k->contextId = a->context_id;
        k->streamId = a->stream_id;
        k->gridX = (int32_t)a->grid[0];
        k->gridY = (int32_t)a->grid[1];
        k->gridZ = (int32_t)a->grid[2];
        k->blockX = (int32_t)a->block[0];
        k->blockY = (int32_t)a->block[1];
        k->blockZ = (int32_t)a->block[2];
        k->dynamicSharedMemory = (int32_t)a->dynamic_smem;
        k->correlationId = a->correlation_id;
        k->name = a->name;
        k->queued = CUPTI_TIMESTAMP_UNKNOWN;
        k->submitted = CUPTI_TIMESTAMP_UNKNOWN;
        k->launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
        k->channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
        return sizeof *k;
    }
    case SIMCU_ACT_MEMCPY: {
        CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)p;
        memset(m, 0, sizeof *m);
        m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
        m->copyKind = a->copy_kind;
        m->srcKind = a->src_kind;
        m->dstKind = a->dst_kind;
        m->flags = a->async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
        m->bytes = a->bytes;
        m->start = a->start;
        m->end = a->end;
        m->deviceId = a->device_id;
        m->contextId = a->context_id;
        m->streamId = a->stream_id;
        m->correlationId = a->correlation_id;
        m->channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
        m->copyCount = 1;
        return sizeof *m;
    }
    case SIMCU_ACT_MEMSET: {
        CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)p;
        memset(m, 0, sizeof *m);
        m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
        m->value = a->memset_value;
        m->bytes = a->bytes;
        m->start = a->start;
        m->end = a->end;
        m->deviceId = a->device_id;
        m->contextId = a->context_id;
        m->streamId = a->stream_id;
        m->correlationId = a->correlation_id;
        m->flags = a->async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
        m->memoryKind = a->memset_memkind;
        m->channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
        return sizeof *m;
    }
    case SIMCU_ACT_API: {
        CUpti_ActivityAPI *r = (CUpti_ActivityAPI *)p;
        memset(r, 0, sizeof *r);
        r->kind = a->domain == CUPTI_CB_DOMAIN_RUNTIME_API ? CUPTI_ACTIVITY_KIND_RUNTIME : CUPTI_ACTIVITY_KIND_DRIVER;
        r->cbid = (CUpti_CallbackId)a->cbid;
        r->start = a->start;
        r->end = a->end;
        r->processId = a->process_id;
        r->threadId = a->thread_id;
        r->correlationId = a->correlation_id;
        r->returnValue = a->ret;
        return sizeof *r;
    }
    case SIMCU_ACT_EXTCORR: {
        CUpti_ActivityExternalCorrelation *x = (CUpti_ActivityExternalCorrelation *)p;
        memset(x, 0, sizeof *x);
        x->kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
        x->externalKind = (CUpti_ExternalCorrelationKind)a->external_kind;
        x->externalId = a->external_id;
        x->correlationId = a->correlation_id;
        return sizeof *x;
    }
    }
    return 0;
}

static size_t sim_record_size(const simcu_activity_t *a)
{
    return a->kind == SIMCU_ACT_KERNEL ? sizeof(CUpti_ActivityKernel10)
         : a->kind == SIMCU_ACT_MEMCPY ? sizeof(CUpti_ActivityMemcpy6)
         : a->kind == SIMCU_ACT_EXTCORR ? sizeof(CUpti_ActivityExternalCorrelation)
         : a->kind == SIMCU_ACT_API ? sizeof(CUpti_ActivityAPI)
         : sizeof(CUpti_ActivityMemset4);
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
    pthread_mutex_lock(&g_act_lock);
    simcu_activity_t *recs = g_pending;
    size_t n = g_npending;
    CUpti_BuffersCallbackRequestFunc req = g_req;
    CUpti_BuffersCallbackCompleteFunc done = g_done;
    int kernel_kind = g_kernel_kind;
    if (!req || !done) {
        pthread_mutex_unlock(&g_act_lock);
        return n ? CUPTI_ERROR_INVALID_OPERATION : CUPTI_SUCCESS;
    }
    g_pending = NULL;
    g_npending = g_cap = 0;
    pthread_mutex_unlock(&g_act_lock);

    size_t i = 0, dropped = 0;
    while (i < n) {
        uint8_t *buf = NULL;
        size_t size = 0, maxrec = 0;
        req(&buf, &size, &maxrec);
        if (!buf || size < sim_record_size(&recs[i])) {
            dropped += n - i;  /* no room given: the records are lost, as on CUPTI */
            break;
        }
        size_t used = 0, count = 0;
        while (i < n && used + sim_record_size(&recs[i]) <= size && (maxrec == 0 || count < maxrec)) {
            used += write_record(buf + used, &recs[i], kernel_kind);
            i++;
            count++;
        }
        done(NULL, 0, buf, size, used);
    }
    free(recs);
    if (dropped) {
        pthread_mutex_lock(&g_act_lock);
        g_dropped += dropped;
        pthread_mutex_unlock(&g_act_lock);
    }
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityFlush(CUcontext context, uint32_t streamId, uint32_t flag)
{
    return cuptiActivityFlushAll(flag);
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                                             CUpti_Activity **record)
{
    if (!buffer || !record)
        return CUPTI_ERROR_INVALID_PARAMETER;
    size_t off = 0;
    if (*record) {
        uint8_t *cur = (uint8_t *)*record;
        if (cur < buffer || cur >= buffer + validBufferSizeBytes)
            return CUPTI_ERROR_INVALID_PARAMETER;
        size_t sz = record_size((*record)->kind);
        if (!sz)
            return CUPTI_ERROR_INVALID_KIND;
        off = (size_t)(cur - buffer) + sz;
    }
    if (off >= validBufferSizeBytes) {
        *record = NULL;
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    }
    *record = (CUpti_Activity *)(buffer + off);
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                                                    size_t *dropped)
{
    if (!dropped)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_act_lock);
    *dropped = g_dropped;
    g_dropped = 0;
    pthread_mutex_unlock(&g_act_lock);
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t *valueSize,
                                                            void *value)
{
    if (!valueSize || !value)
        return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&g_act_lock);
    if (attr == CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED && *valueSize >= 1)
        g_host_pinned = *(uint8_t *)value != 0;
    else if (attr == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE && *valueSize >= sizeof(size_t))
        g_buf_size = *(size_t *)value;
    else if (attr == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE && *valueSize >= sizeof(size_t))
        g_buf_count = *(size_t *)value;
    pthread_mutex_unlock(&g_act_lock); /* other knobs: nothing to tune in the simulator */
    return CUPTI_SUCCESS;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityGetAttribute(CUpti_ActivityAttribute attr, size_t *valueSize,
                                                            void *value)
{
    if (!valueSize || !value)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (*valueSize >= sizeof(size_t)) {
        *(size_t *)value = 8u << 20;
        *valueSize = sizeof(size_t);
        return CUPTI_SUCCESS;
    }
    return CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                                        uint64_t id)
{
    if (!ready())
        return CUPTI_ERROR_NOT_INITIALIZED;
    return T->push_external((uint32_t)kind, id) == 0 ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                                       uint64_t *lastId)
{
    if (!ready())
        return CUPTI_ERROR_NOT_INITIALIZED;
    return T->pop_external((uint32_t)kind, lastId) == 0 ? CUPTI_SUCCESS : CUPTI_ERROR_QUEUE_EMPTY;
}

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableLatencyTimestamps(uint8_t enable) { return CUPTI_SUCCESS; }
CUPTI_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableLaunchAttributes(uint8_t enable) { return CUPTI_SUCCESS; }

CUPTI_EXPORT CUptiResult CUPTIAPI cuptiFinalize(void)
{
    if (!ready())
        return CUPTI_SUCCESS;
    pthread_mutex_lock(&g_act_lock);
    g_mask = 0;
    T->set_activity(0, NULL);
    if (g_buffers_held) {
        g_buffers_held = 0;
        T->activity_memory(0);
    }
    free(g_pending);
    g_pending = NULL;
    g_npending = g_cap = 0;
    pthread_mutex_unlock(&g_act_lock);
    if (g_sub.active) {
        g_sub.active = 0;
        T->unsubscribe();
    }
    return CUPTI_SUCCESS;
}

/* observer.c - see observer.h. With audit.c, the only files that include <cupti.h>. */
#define _GNU_SOURCE
#include "cupti/observer.h"

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

__thread int ft_intercept_depth;

typedef CUptiResult (*subscribe_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
typedef CUptiResult (*unsubscribe_fn)(CUpti_SubscriberHandle);
typedef CUptiResult (*enable_cb_fn)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
typedef CUptiResult (*result_string_fn)(CUptiResult, const char **);
typedef CUptiResult (*finalize_fn)(void);

static struct {
    pthread_mutex_t lock;     /* start and stop may race between threads at exit */
    ft_cupti_status_t status;
    CUpti_SubscriberHandle sub;
    unsubscribe_fn unsubscribe;
    finalize_fn finalize;
    ft_cupti_lookup_fn lookup; /* ft_cupti_init's, for every libcupti function */
} obs = { PTHREAD_MUTEX_INITIALIZER, FT_CUPTI_STATUS_OFF, NULL, NULL, NULL, NULL };

/* Set to DETACH_WANTED by ft_cupti_stop: the next watched call's exit detaches CUPTI
 * (cuptiFinalize), the place CUPTI's guide gives for a dynamic detach. Merely
 * unsubscribing leaves CUPTI attached, and the driver slower on every launch for the
 * rest of the run. One atomic value, because the hand-over (ft_cupti_hand_over) may
 * come on another thread while a callback detaches: it cancels a detach not begun
 * (still subscribed: it unsubscribes itself) and waits for one under way (RUNNING),
 * so that the application's cuptiSubscribe never races our cuptiFinalize. */
enum { DETACH_NONE, DETACH_WANTED, DETACH_RUNNING };
static atomic_int detach_state;
static _Atomic uint64_t n_detached;
static _Atomic uint64_t detach_ns; /* cuptiFinalize's time, summed (the exit report) */

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* The application (or a tool) asked for CUPTI: set once, never cleared. FlexTensor
 * does not subscribe after it, even when the application has unsubscribed since. */
static atomic_int handed_over;

static _Atomic uint64_t n_launch, n_copy, n_set, u_launch, u_copy, u_set;
typedef CUptiResult (*act_attr_fn)(CUpti_ActivityAttribute, size_t *, void *);
static void *cupti_lib;       /* dlopen handle, for the activity API */

/* A function of libcupti, found through the lookup the shim handed in. */
static void *cupti_fn(const char *name)
{
    return obs.lookup(cupti_lib, name);
}
static atomic_flag first_taken = ATOMIC_FLAG_INIT;
static char first_unseen[160];

enum { KIND_LAUNCH = 1, KIND_COPY, KIND_SET };

/* The driver calls we watch, and what they are. */
static const struct {
    CUpti_CallbackId cbid;
    int kind;
} watched[] = {
    { CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, KIND_LAUNCH },
    { CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, KIND_LAUNCH },
    { CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, KIND_LAUNCH },
    { CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, KIND_LAUNCH },
    { CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, KIND_LAUNCH },
    { CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz, KIND_LAUNCH },
    { CUPTI_DRIVER_TRACE_CBID_cuMemcpy, KIND_COPY },
    { CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, KIND_COPY },
    { CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, KIND_COPY },
    { CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, KIND_COPY },
    { CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2, KIND_COPY },
    { CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, KIND_COPY },
    { CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, KIND_COPY },
    { CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2, KIND_COPY },
    { CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2, KIND_SET },
    { CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2, KIND_SET },
    { CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, KIND_SET },
    { CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async, KIND_SET },
};

static int kind_of(CUpti_CallbackId cbid)
{
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++)
        if (watched[i].cbid == cbid)
            return watched[i].kind;
    return 0;
}

/* Runs inside the driver call: counters and, once, a name copy. No CUDA here. */
static void CUPTIAPI callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                              const void *data)
{
    const CUpti_CallbackData *cb = data;
    int wanted = DETACH_WANTED;
    if (cb->callbackSite == CUPTI_API_EXIT &&
        atomic_compare_exchange_strong(&detach_state, &wanted, DETACH_RUNNING)) {
        /* A CUPTI call, not a CUDA one: allowed here. */
        uint64_t t0 = mono_ns();
        if (obs.finalize() == CUPTI_SUCCESS)
            atomic_fetch_add(&n_detached, 1);
        atomic_fetch_add(&detach_ns, mono_ns() - t0);
        atomic_store(&detach_state, DETACH_NONE);
        return;
    }
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_ENTER)
        return;
    int kind = kind_of(cbid);
    _Atomic uint64_t *total = kind == KIND_LAUNCH ? &n_launch : kind == KIND_COPY ? &n_copy : &n_set;
    _Atomic uint64_t *unseen = kind == KIND_LAUNCH ? &u_launch : kind == KIND_COPY ? &u_copy : &u_set;
    if (kind == 0)
        return;
    atomic_fetch_add_explicit(total, 1, memory_order_relaxed);
    if (ft_intercept_depth > 0)
        return;
    atomic_fetch_add_explicit(unseen, 1, memory_order_relaxed);
    if (!atomic_flag_test_and_set(&first_taken))
        snprintf(first_unseen, sizeof first_unseen, "%s%s%s", cb->functionName ? cb->functionName : "?",
                 cb->symbolName ? ": " : "", cb->symbolName ? cb->symbolName : "");
}

/* Activity records (profiling's kernel times) wait in pinned host memory rather than
 * in CUPTI's default device buffers (3.2 MB each, up to 250 per context since CUDA 12.0
 * Update 1), which the budget does not count: the whole run's peak must stay within
 * it. CUPTI's documentation asks for its buffer settings before CUDA initialises or
 * the context is made, and says they apply to new buffers: set as soon as CUPTI is
 * loaded, and again before profiling enables the kinds that fill them. Refused on
 * confidential computing devices; the records then stay on the device. */
static void records_in_host_memory(void)
{
    act_attr_fn set_attr = (act_attr_fn)cupti_fn("cuptiActivitySetAttribute");
    uint8_t host_pinned = 1;
    size_t attr_size = sizeof host_pinned;
    if (set_attr != NULL)
        set_attr(CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED, &attr_size, &host_pinned);
}

void ft_cupti_init(ft_cupti_lookup_fn lookup)
{
    pthread_mutex_lock(&obs.lock);
    obs.lookup = lookup;
    pthread_mutex_unlock(&obs.lock);
}

ft_cupti_status_t ft_cupti_start(char *why, size_t len)
{
    pthread_mutex_lock(&obs.lock);
    if (obs.status == FT_CUPTI_STATUS_ACTIVE) {
        pthread_mutex_unlock(&obs.lock);
        return FT_CUPTI_STATUS_ACTIVE;
    }
    if (atomic_load(&handed_over)) {
        snprintf(why, len, "the application's profiler uses CUPTI (FlexTensor handed it over)");
        obs.status = FT_CUPTI_STATUS_HANDED;
        pthread_mutex_unlock(&obs.lock);
        return obs.status;
    }
    int wanted = DETACH_WANTED;
    if (atomic_compare_exchange_strong(&detach_state, &wanted, DETACH_NONE)) {
        /* Stopped, then started again before any call detached CUPTI: still subscribed. */
        obs.status = FT_CUPTI_STATUS_ACTIVE;
        pthread_mutex_unlock(&obs.lock);
        return obs.status;
    }
    /* A detach under way on another thread's driver call: subscribing now would race
     * its cuptiFinalize. It takes one CUPTI call. */
    while (atomic_load(&detach_state) == DETACH_RUNNING)
        sched_yield();
    if (obs.lookup == NULL) {
        snprintf(why, len, "no lookup function for libcupti (ft_cupti_init not called)");
        obs.status = FT_CUPTI_STATUS_FAILED;
        pthread_mutex_unlock(&obs.lock);
        return obs.status;
    }
    void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        h = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(why, len, "libcupti.so.13 not found (%s)", dlerror());
        obs.status = FT_CUPTI_STATUS_MISSING;
        pthread_mutex_unlock(&obs.lock);
        return obs.status;
    }
    cupti_lib = h;
    records_in_host_memory();
    subscribe_fn subscribe = (subscribe_fn)cupti_fn("cuptiSubscribe");
    enable_cb_fn enable = (enable_cb_fn)cupti_fn("cuptiEnableCallback");
    result_string_fn result_string = (result_string_fn)cupti_fn("cuptiGetResultString");
    obs.unsubscribe = (unsubscribe_fn)cupti_fn("cuptiUnsubscribe");
    obs.finalize = (finalize_fn)cupti_fn("cuptiFinalize");
    if (subscribe == NULL || enable == NULL || obs.unsubscribe == NULL) {
        snprintf(why, len, "libcupti lacks cuptiSubscribe/cuptiEnableCallback");
        obs.status = FT_CUPTI_STATUS_MISSING;
        pthread_mutex_unlock(&obs.lock);
        return obs.status;
    }
    CUptiResult rc = subscribe(&obs.sub, callback, NULL);
    if (rc != CUPTI_SUCCESS) {
        const char *msg = "?";
        if (result_string)
            result_string(rc, &msg);
        if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
            snprintf(why, len, "CUPTI is held by another subscriber (a profiler such as "
                     "torch.profiler or Nsight); continuing with the interposed view only");
            obs.status = FT_CUPTI_STATUS_HELD;
        } else {
            snprintf(why, len, "cuptiSubscribe failed: %s (%d)", msg, (int)rc);
            obs.status = FT_CUPTI_STATUS_FAILED;
        }
        pthread_mutex_unlock(&obs.lock);
        return obs.status;
    }
    /* Only the callback ids we need: every enabled id costs on every such call. */
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++) {
        rc = enable(1, obs.sub, CUPTI_CB_DOMAIN_DRIVER_API, watched[i].cbid);
        if (rc != CUPTI_SUCCESS) {
            snprintf(why, len, "cuptiEnableCallback(%u) failed (%d)", (unsigned)watched[i].cbid, (int)rc);
            obs.unsubscribe(obs.sub);
            obs.status = FT_CUPTI_STATUS_FAILED;
            pthread_mutex_unlock(&obs.lock);
            return obs.status;
        }
    }
    obs.status = FT_CUPTI_STATUS_ACTIVE;
    pthread_mutex_unlock(&obs.lock);
    return obs.status;
}

void ft_cupti_stop(void)
{
    pthread_mutex_lock(&obs.lock);
    if (obs.status == FT_CUPTI_STATUS_ACTIVE) {
        if (obs.finalize != NULL)
            atomic_store(&detach_state, DETACH_WANTED);
        else
            obs.unsubscribe(obs.sub);
        obs.status = FT_CUPTI_STATUS_OFF;
    }
    pthread_mutex_unlock(&obs.lock);
}

uint64_t ft_cupti_detached(void)
{
    return atomic_load(&n_detached);
}

uint64_t ft_cupti_detach_ns(void)
{
    return atomic_load(&detach_ns);
}

void ft_cupti_get_stats(ft_cupti_stats_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&obs.lock);
    out->status = obs.status;
    pthread_mutex_unlock(&obs.lock);
    out->launches = atomic_load(&n_launch);
    out->copies = atomic_load(&n_copy);
    out->sets = atomic_load(&n_set);
    out->unseen_launches = atomic_load(&u_launch);
    out->unseen_copies = atomic_load(&u_copy);
    out->unseen_sets = atomic_load(&u_set);
    if (out->unseen_launches + out->unseen_copies + out->unseen_sets > 0)
        snprintf(out->first_unseen, sizeof out->first_unseen, "%s", first_unseen);
}

/* --- kernel timing (activity API) ---------------------------------------------------
 *
 * A tagged launch is bracketed by cuptiActivityPushExternalCorrelationId /
 * PopExternalCorrelationId (CUSTOM0): CUPTI then writes an EXTERNAL_CORRELATION record
 * tying the tag to the launching API call's correlation id, which the kernel's record
 * carries too -- for a runtime launch and the driver call inside it alike, so both
 * pairs are kept. The buffer callbacks run on CUPTI's threads: they only parse and
 * append, under timing.lock. */
typedef CUptiResult (*act_enable_fn)(CUpti_ActivityKind);
typedef CUptiResult (*act_register_fn)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
typedef CUptiResult (*act_next_fn)(uint8_t *, size_t, CUpti_Activity **);
typedef CUptiResult (*act_flush_fn)(uint32_t);
typedef CUptiResult (*act_push_fn)(CUpti_ExternalCorrelationKind, uint64_t);
typedef CUptiResult (*act_pop_fn)(CUpti_ExternalCorrelationKind, uint64_t *);

#define TIMING_BUF (1u << 20)

static struct {
    pthread_mutex_t lock;
    _Atomic int on;
    act_enable_fn enable, disable;
    act_next_fn next;
    act_flush_fn flush;
    act_push_fn push;
    act_pop_fn pop;
    /* correlation id -> tag, and kernels by correlation id, joined at collection */
    struct { uint32_t corr; uint64_t tag; } *ext;
    size_t n_ext, cap_ext;
    struct { uint32_t corr; uint64_t start, end; } *k;
    size_t n_k, cap_k;
} timing = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, TIMING_BUF);
    *size = *buffer != NULL ? TIMING_BUF : 0;
    *max_records = 0;
}

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 1024;
    void *q = realloc(*p, c * elem);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&timing.lock);
    /* Timing stopped: the last flush's records are dropped, not kept for no one. */
    if (!atomic_load(&timing.on)) {
        pthread_mutex_unlock(&timing.lock);
        free(buffer);
        return;
    }
    while (timing.next != NULL && timing.next(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
            const CUpti_ActivityExternalCorrelation *x = (const void *)rec;
            if (x->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0 &&
                grow((void **)&timing.ext, &timing.cap_ext, timing.n_ext, sizeof *timing.ext) == 0) {
                timing.ext[timing.n_ext].corr = x->correlationId;
                timing.ext[timing.n_ext++].tag = x->externalId;
            }
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const void *)rec;
            if (grow((void **)&timing.k, &timing.cap_k, timing.n_k, sizeof *timing.k) == 0) {
                timing.k[timing.n_k].corr = k->correlationId;
                timing.k[timing.n_k].start = k->start;
                timing.k[timing.n_k++].end = k->end;
            }
        }
    }
    pthread_mutex_unlock(&timing.lock);
    free(buffer);
}

int ft_cupti_timing_start(void)
{
    pthread_mutex_lock(&obs.lock);
    int active = obs.status == FT_CUPTI_STATUS_ACTIVE && cupti_lib != NULL;
    pthread_mutex_unlock(&obs.lock);
    if (!active)
        return -1;
    timing.enable = (act_enable_fn)cupti_fn("cuptiActivityEnable");
    timing.disable = (act_enable_fn)cupti_fn("cuptiActivityDisable");
    timing.next = (act_next_fn)cupti_fn("cuptiActivityGetNextRecord");
    timing.flush = (act_flush_fn)cupti_fn("cuptiActivityFlushAll");
    timing.push = (act_push_fn)cupti_fn("cuptiActivityPushExternalCorrelationId");
    timing.pop = (act_pop_fn)cupti_fn("cuptiActivityPopExternalCorrelationId");
    act_register_fn reg = (act_register_fn)cupti_fn("cuptiActivityRegisterCallbacks");
    records_in_host_memory();
    if (!timing.enable || !timing.disable || !timing.next || !timing.flush || !timing.push ||
        !timing.pop || !reg || reg(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        timing.enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) != CUPTI_SUCCESS)
        return -1;
    if (timing.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        timing.disable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
        return -1;
    }
    /* CUPTI writes external correlation records for the API records it writes: the
     * runtime's and the driver's are asked for too (the simulator needs neither and
     * refuses them, which is fine). */
    timing.enable(CUPTI_ACTIVITY_KIND_RUNTIME);
    timing.enable(CUPTI_ACTIVITY_KIND_DRIVER);
    atomic_store(&timing.on, 1);
    return 0;
}

int ft_cupti_tag_push(uint64_t tag)
{
    return atomic_load_explicit(&timing.on, memory_order_relaxed) &&
           timing.push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, tag) == CUPTI_SUCCESS;
}

/* Whether timing is still on or not: a hand-over between the push and the pop must not
 * leave our id on the thread's CUSTOM0 stack, under the application's own ids (Kineto
 * pushes CUSTOM0 too). */
void ft_cupti_tag_pop(void)
{
    uint64_t last;
    timing.pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}

static int cmp_corr(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

size_t ft_cupti_timing_collect(ft_cupti_kernel_t *out, size_t max)
{
    if (!atomic_load(&timing.on))
        return 0;
    timing.flush(0);
    pthread_mutex_lock(&timing.lock);
    /* ext sorted by correlation id, for a binary search per kernel (the struct's first
     * member is the id, so cmp_corr reads it); none may have come yet, ext still NULL
     * (qsort's argument must not be: UBSan stopped a fresh-clone CI there) */
    if (timing.n_ext > 1)
        qsort(timing.ext, timing.n_ext, sizeof *timing.ext, cmp_corr);
    size_t n = 0;
    for (size_t i = 0; i < timing.n_k && n < max; i++) {
        size_t lo = 0, hi = timing.n_ext;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (timing.ext[mid].corr < timing.k[i].corr)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < timing.n_ext && timing.ext[lo].corr == timing.k[i].corr)
            out[n++] = (ft_cupti_kernel_t){ timing.ext[lo].tag, timing.k[i].start, timing.k[i].end };
    }
    timing.n_ext = timing.n_k = 0;
    pthread_mutex_unlock(&timing.lock);
    return n;
}

/* Our kinds are disabled before the flush: the application's profiler, which may
 * register its own buffer callbacks next, gets none of the records they made, and the
 * flush (forced: records of kernels not yet finished too) hands the pending ones to
 * buffer_completed, which drops them now that timing is off. */
void ft_cupti_timing_stop(void)
{
    if (!atomic_exchange(&timing.on, 0))
        return;
    timing.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    timing.disable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    timing.disable(CUPTI_ACTIVITY_KIND_RUNTIME);
    timing.disable(CUPTI_ACTIVITY_KIND_DRIVER);
    timing.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&timing.lock);
    free(timing.ext);
    free(timing.k);
    timing.ext = NULL;
    timing.k = NULL;
    timing.n_ext = timing.cap_ext = timing.n_k = timing.cap_k = 0;
    pthread_mutex_unlock(&timing.lock);
}

/* --- the application's profiler -------------------------------------------------------
 *
 * Called by the shim's CUPTI wrappers before the application's call goes on: our
 * activity kinds off and flushed (ft_cupti_timing_stop), then our subscriber removed at
 * once, so that the application's cuptiSubscribe, which follows, is the only one (one
 * subscriber per process before CUDA 13.3). Unsubscribing, not cuptiFinalize: the
 * application's profiler attaches CUPTI anyway, and finalize belongs at a callback's
 * exit. */
int ft_cupti_hand_over(void)
{
    if (atomic_exchange(&handed_over, 1))
        return -1;
    ft_cupti_timing_stop();
    pthread_mutex_lock(&obs.lock);
    int held = obs.status == FT_CUPTI_STATUS_ACTIVE;
    int wanted = DETACH_WANTED;
    if (atomic_compare_exchange_strong(&detach_state, &wanted, DETACH_NONE))
        held = 1; /* stopped, but the detach had not begun: still subscribed */
    else
        while (atomic_load(&detach_state) == DETACH_RUNNING)
            sched_yield(); /* another thread's callback is finalizing: one CUPTI call */
    if (held) {
        obs.unsubscribe(obs.sub);
        obs.status = FT_CUPTI_STATUS_HANDED;
    }
    pthread_mutex_unlock(&obs.lock);
    return held;
}

int ft_cupti_handed_over(void)
{
    return atomic_load(&handed_over);
}

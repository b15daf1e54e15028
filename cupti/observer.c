/* observer.c - see observer.h. The only file that includes <cupti.h>. */
#define _GNU_SOURCE
#include "cupti/observer.h"

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

__thread int ft_intercept_depth;

typedef CUptiResult (*subscribe_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
typedef CUptiResult (*unsubscribe_fn)(CUpti_SubscriberHandle);
typedef CUptiResult (*enable_cb_fn)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
typedef CUptiResult (*result_string_fn)(CUptiResult, const char **);

static struct {
    pthread_mutex_t lock;     /* start and stop may race between threads at exit */
    ft_cupti_status_t status;
    CUpti_SubscriberHandle sub;
    unsubscribe_fn unsubscribe;
} obs = { PTHREAD_MUTEX_INITIALIZER, FT_CUPTI_STATUS_OFF, NULL, NULL };

static _Atomic uint64_t n_launch, n_copy, n_set, u_launch, u_copy, u_set;
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

ft_cupti_status_t ft_cupti_start(char *why, size_t len)
{
    pthread_mutex_lock(&obs.lock);
    if (obs.status == FT_CUPTI_STATUS_ACTIVE) {
        pthread_mutex_unlock(&obs.lock);
        return FT_CUPTI_STATUS_ACTIVE;
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
    subscribe_fn subscribe = (subscribe_fn)dlsym(h, "cuptiSubscribe");
    enable_cb_fn enable = (enable_cb_fn)dlsym(h, "cuptiEnableCallback");
    result_string_fn result_string = (result_string_fn)dlsym(h, "cuptiGetResultString");
    obs.unsubscribe = (unsubscribe_fn)dlsym(h, "cuptiUnsubscribe");
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
        obs.unsubscribe(obs.sub);
        obs.status = FT_CUPTI_STATUS_OFF;
    }
    pthread_mutex_unlock(&obs.lock);
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

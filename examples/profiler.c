/* profiler.c - model --profile-from N: from forward N on, the program itself uses
 * CUPTI as a profiler would (torch.profiler's Kineto: cuptiSubscribe, then activity
 * kinds and buffer callbacks), and at the end prints the records it received:
 *
 *   profiler: K model kernel(s), O other kernel(s), C copy(ies), D driver callback(s)
 *   profiler: other kernels: NAME,...          (when O > 0: their distinct names)
 *   profiler: A runtime and driver API record(s)   (enabled as Kineto enables them)
 *
 * K counts the kernels whose name is one of the model's ("model_" in it, as
 * kernels.cu names them): the records a profiler shows for the application, which
 * must be the same with FlexTensor and without. O (FlexTensor's own kernels, the
 * device checksum) and C (its loads and write-backs are copies too) may differ.
 *
 * libcupti is reached by dlopen and dlsym (the model-sim and model-gpu builds), or,
 * built with -DMODEL_CUPTI_LINKED, by direct calls to a linked libcupti (model-sim-cupti),
 * as libtorch_cuda.so reaches it: the two ways a preloaded library can see the calls. */
#define _GNU_SOURCE
#include "examples/profiler.h"

#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROFILER_FNS(X)                                                                    \
    X(cuptiSubscribe) X(cuptiUnsubscribe) X(cuptiEnableDomain) X(cuptiActivityEnable)       \
    X(cuptiActivityDisable) X(cuptiActivityRegisterCallbacks) X(cuptiActivityFlushAll)      \
    X(cuptiActivityGetNextRecord) X(cuptiGetResultString)

static struct {
#define FIELD(name) __typeof__(name) *name;
    PROFILER_FNS(FIELD)
#undef FIELD
} C;

static CUpti_SubscriberHandle sub;
/* Written by CUPTI's buffer callback (any thread) and the driver callback. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long model_kernels, other_kernels, copies, callbacks, api_records;
static char other_names[256]; /* the other kernels' distinct names, comma separated */

static const char *why(CUptiResult r)
{
    const char *s = NULL;
    if (C.cuptiGetResultString == NULL || C.cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == NULL)
        s = "?";
    return s;
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
    const CUpti_CallbackData *cb = data;
    if (cb->callbackSite == CUPTI_API_ENTER)
        __atomic_add_fetch(&callbacks, 1, __ATOMIC_RELAXED);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    enum { BYTES = 1 << 20 };
    *buffer = aligned_alloc(8, BYTES);
    *size = *buffer != NULL ? BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    CUpti_Activity *rec = NULL;
    pthread_mutex_lock(&lock);
    while (C.cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const void *)rec;
            if (k->name != NULL && strstr(k->name, "model_") != NULL)
                model_kernels++;
            else if (++other_kernels > 0 && k->name != NULL && strlen(other_names) + strlen(k->name) + 2 <
                                                                    sizeof other_names) {
                size_t n = strlen(k->name);
                const char *at = strstr(other_names, k->name);
                if (at == NULL || (at[n] != ',' && at[n] != '\0'))
                    snprintf(other_names + strlen(other_names), sizeof other_names - strlen(other_names),
                             "%s%s", other_names[0] ? "," : "", k->name);
            }
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            copies++;
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME || rec->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            api_records++;
        }
    }
    pthread_mutex_unlock(&lock);
    free(buffer);
}

static int resolve(void)
{
#ifdef MODEL_CUPTI_LINKED
#define DIRECT(name) C.name = name;
    PROFILER_FNS(DIRECT)
#undef DIRECT
#else
    void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        h = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "model: --profile-from: libcupti not found (%s)\n", dlerror());
        return -1;
    }
#define LOOKUP(name)                                                                       \
    if ((C.name = (__typeof__(name) *)dlsym(h, #name)) == NULL) {                          \
        fprintf(stderr, "model: --profile-from: libcupti lacks %s\n", #name);             \
        return -1;                                                                         \
    }
    PROFILER_FNS(LOOKUP)
#undef LOOKUP
#endif
    return 0;
}

int profiler_start(void)
{
    if (resolve() != 0)
        return -1;
    CUptiResult r = C.cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_callback, NULL);
    if (r != CUPTI_SUCCESS) {
        fprintf(stderr, "model: --profile-from: cuptiSubscribe failed: %s (%d)\n", why(r), (int)r);
        return -1;
    }
    if ((r = C.cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API)) != CUPTI_SUCCESS ||
        (r = C.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS ||
        (r = C.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS ||
        (r = C.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY)) != CUPTI_SUCCESS ||
        (r = C.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME)) != CUPTI_SUCCESS ||
        (r = C.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER)) != CUPTI_SUCCESS) {
        fprintf(stderr, "model: --profile-from: enabling CUPTI failed: %s (%d)\n", why(r), (int)r);
        return -1;
    }
    return 0;
}

int profiler_stop(void)
{
    CUptiResult r = C.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS) {
        fprintf(stderr, "model: --profile-from: cuptiActivityFlushAll failed: %s (%d)\n", why(r), (int)r);
        return -1;
    }
    C.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    C.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    C.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);
    C.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
    pthread_mutex_lock(&lock);
    printf("profiler: %llu model kernel(s), %llu other kernel(s), %llu copy(ies), %llu driver callback(s)\n",
           model_kernels, other_kernels, copies, __atomic_load_n(&callbacks, __ATOMIC_RELAXED));
    if (other_kernels > 0)
        printf("profiler: other kernels: %s\n", other_names);
    printf("profiler: %llu runtime and driver API record(s)\n", api_records);
    pthread_mutex_unlock(&lock);
    if ((r = C.cuptiUnsubscribe(sub)) != CUPTI_SUCCESS) {
        fprintf(stderr, "model: --profile-from: cuptiUnsubscribe failed: %s (%d)\n", why(r), (int)r);
        return -1;
    }
    return 0;
}

/* audit.c - see audit.h. One of the two files that include <cupti.h> (observer.c). */
#define _GNU_SOURCE
#include "cupti/audit.h"

#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

typedef CUptiResult (*next_fn_t)(uint8_t *, size_t, CUpti_Activity **);
typedef CUptiResult (*name_fn_t)(CUpti_CallbackDomain, uint32_t, const char **);

/* Written by ft_cupti_audit_wrap (the application's registration), read by the
 * trampolines on CUPTI's threads: atomics, no lock on the way of a buffer. */
static _Atomic(CUpti_BuffersCallbackRequestFunc) app_requested;
static _Atomic(CUpti_BuffersCallbackCompleteFunc) app_completed;
static _Atomic(next_fn_t) next_record;
static _Atomic(name_fn_t) callback_name;

/* One API record, as kept per correlation id. */
typedef struct {
    uint32_t corr; /* 0: an empty slot (CUPTI's ids start at 1) */
    uint32_t cbid;
    uint32_t thread;
    uint32_t kind; /* CUpti_ActivityKind */
    uint64_t start, end;
} entry_t;

/* A correlation id's slot: its first record, and its first record that starts a flow
 * for Kineto (flow.corr 0: none yet). Records come in the order their calls ended, so
 * the outer call of a nested pair comes after the calls made inside it: a record is
 * compared with the id's first, and, when it starts a flow, with the id's first that
 * started one, so that two flow starts are caught whatever came between. */
typedef struct {
    entry_t first, flow;
} slot_t;

/* A pair of calls seen under one id, and how often. */
typedef struct {
    uint32_t kind[2], cbid[2];
    uint64_t n;
    int flow; /* both start a flow for Kineto */
} pair_t;

#define MAX_PAIRS 32
/* The table never grows past this many slots (half of them used): 32 MiB. A longer run
 * starts a fresh table, which can miss a pair split across the reset, no more. */
#define MAX_SLOTS (1u << 19)

static struct {
    pthread_mutex_t lock;
    slot_t *slot;
    size_t cap, used;
    uint64_t records, duplicates, flow_duplicates, resets;
    pair_t pairs[MAX_PAIRS];
    size_t n_pairs;
    int ran;
} audit = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Whether torch.profiler's Kineto makes the record a flow start (CuptiCbidRegistry:
 * launches, graph launches, synchronizes and waits, cudaMemcpy..cudaMemset2DAsync; the
 * driver's cuLaunchKernel[Ex]): two of them under one id are what setParents refuses. */
static int kineto_flow_start(uint32_t kind, uint32_t cbid)
{
    if (kind == CUPTI_ACTIVITY_KIND_DRIVER)
        return cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx;
    if (kind != CUPTI_ACTIVITY_KIND_RUNTIME)
        return 0;
    switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020:
        return 1;
    default:
        return cbid >= CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020 &&
               cbid <= CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_v3020;
    }
}

static const char *kind_name(uint32_t kind)
{
    return kind == CUPTI_ACTIVITY_KIND_RUNTIME ? "RUNTIME"
         : kind == CUPTI_ACTIVITY_KIND_DRIVER  ? "DRIVER"
                                               : "INTERNAL_LAUNCH_API";
}

/* The function's name from libcupti, or "?". A CUPTI call, allowed in a buffer callback. */
static const char *fn_name(uint32_t kind, uint32_t cbid)
{
    name_fn_t fn = atomic_load_explicit(&callback_name, memory_order_relaxed);
    const char *name = NULL;
    CUpti_CallbackDomain d = kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API
                           : kind == CUPTI_ACTIVITY_KIND_DRIVER  ? CUPTI_CB_DOMAIN_DRIVER_API
                                                                 : CUPTI_CB_DOMAIN_INVALID;
    if (fn == NULL || d == CUPTI_CB_DOMAIN_INVALID || fn(d, cbid, &name) != CUPTI_SUCCESS || name == NULL)
        return "?";
    return name;
}

static size_t slot_of(uint32_t corr, size_t cap)
{
    return (size_t)(corr * 2654435761u) & (cap - 1);
}

/* Doubles the table (audit.lock held); -1 when out of memory or at MAX_SLOTS, where it
 * starts afresh instead. */
static int grow(void)
{
    size_t cap = audit.cap ? audit.cap * 2 : 4096;
    if (cap > MAX_SLOTS) {
        memset(audit.slot, 0, audit.cap * sizeof *audit.slot);
        audit.used = 0;
        audit.resets++;
        return 0;
    }
    slot_t *s = calloc(cap, sizeof *s);
    if (s == NULL)
        return -1;
    for (size_t i = 0; i < audit.cap; i++) {
        if (audit.slot[i].first.corr == 0)
            continue;
        size_t j = slot_of(audit.slot[i].first.corr, cap);
        while (s[j].first.corr != 0)
            j = (j + 1) & (cap - 1);
        s[j] = audit.slot[i];
    }
    free(audit.slot);
    audit.slot = s;
    audit.cap = cap;
    return 0;
}

/* Counts the pair (first, second) (audit.lock held). */
static void count_pair(const entry_t *a, const entry_t *b, int flow)
{
    for (size_t i = 0; i < audit.n_pairs; i++) {
        pair_t *p = &audit.pairs[i];
        if (p->kind[0] == a->kind && p->cbid[0] == a->cbid && p->kind[1] == b->kind && p->cbid[1] == b->cbid) {
            p->n++;
            return;
        }
    }
    if (audit.n_pairs < MAX_PAIRS)
        audit.pairs[audit.n_pairs++] = (pair_t){ { a->kind, b->kind }, { a->cbid, b->cbid }, 1, flow };
}

/* Keeps e, which starts a flow when `flow`; 1 when its id was seen before, with the
 * record to pair it with in *prev: the id's first flow start when both start one
 * (*both set), else the id's first record (e is then dropped); 0 when new, -1 out of
 * memory (audit.lock held). */
static int keep(const entry_t *e, int flow, entry_t *prev, int *both)
{
    *both = 0;
    if ((audit.used + 1) * 2 > audit.cap && grow() != 0)
        return -1;
    size_t j = slot_of(e->corr, audit.cap);
    for (; audit.slot[j].first.corr != 0; j = (j + 1) & (audit.cap - 1)) {
        slot_t *s = &audit.slot[j];
        if (s->first.corr != e->corr)
            continue;
        *both = flow && s->flow.corr != 0;
        *prev = *both ? s->flow : s->first;
        if (flow && s->flow.corr == 0)
            s->flow = *e;
        return 1;
    }
    audit.slot[j] = (slot_t){ .first = *e, .flow = flow ? *e : (entry_t){ 0 } };
    audit.used++;
    return 0;
}

static void log_duplicate(const entry_t *a, const entry_t *b, int flow)
{
    int nested = a->thread == b->thread && ((b->start >= a->start && b->end <= a->end) ||
                                            (a->start >= b->start && a->end <= b->end));
#define DUP_FMT                                                                                           \
    "CUPTI audit: correlation id %u twice: %s %s (cbid %u, thread %u, %llu-%llu ns) and %s %s (cbid %u, "   \
    "thread %u, %llu-%llu ns)%s%s"
#define DUP_ARGS                                                                                          \
    a->corr, kind_name(a->kind), fn_name(a->kind, a->cbid), a->cbid, a->thread,                           \
        (unsigned long long)a->start, (unsigned long long)a->end, kind_name(b->kind),                     \
        fn_name(b->kind, b->cbid), b->cbid, b->thread, (unsigned long long)b->start,                      \
        (unsigned long long)b->end, nested ? "; one inside the other on one thread" : "",                 \
        flow ? "; both start a flow in torch.profiler, which asserts on this (setParents)" : ""
    if (flow)
        FT_LOG_CAPPED(FT_LOG_WARN, 100, DUP_FMT, DUP_ARGS);
    else
        FT_LOG_CAPPED(FT_LOG_INFO, 30, DUP_FMT, DUP_ARGS);
#undef DUP_FMT
#undef DUP_ARGS
}

/* Reads the buffer's API records; writes nothing in it. */
static void audit_buffer(uint8_t *buffer, size_t valid)
{
    next_fn_t next = atomic_load_explicit(&next_record, memory_order_relaxed);
    CUpti_Activity *rec = NULL;
    if (next == NULL || buffer == NULL)
        return;
    while (next(buffer, valid, &rec) == CUPTI_SUCCESS && rec != NULL) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_RUNTIME && rec->kind != CUPTI_ACTIVITY_KIND_DRIVER &&
            rec->kind != CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API)
            continue;
        const CUpti_ActivityAPI *api = (const CUpti_ActivityAPI *)rec;
        if (api->correlationId == 0)
            continue;
        entry_t e = { api->correlationId, (uint32_t)api->cbid, api->threadId, (uint32_t)rec->kind, api->start,
                      api->end };
        entry_t prev;
        int flow;
        pthread_mutex_lock(&audit.lock);
        audit.records++;
        int dup = keep(&e, kineto_flow_start(e.kind, e.cbid), &prev, &flow);
        if (dup == 1) {
            audit.duplicates++;
            audit.flow_duplicates += flow;
            count_pair(&prev, &e, flow);
        }
        pthread_mutex_unlock(&audit.lock);
        if (dup == 1)
            log_duplicate(&prev, &e, flow);
    }
}

static void CUPTIAPI requested_trampoline(uint8_t **buffer, size_t *size, size_t *max_records)
{
    CUpti_BuffersCallbackRequestFunc fn = atomic_load(&app_requested);
    if (fn != NULL) {
        fn(buffer, size, max_records);
        return;
    }
    *buffer = NULL; /* no application callback: CUPTI drops the records */
    *size = 0;
    *max_records = 0;
}

static void CUPTIAPI completed_trampoline(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    audit_buffer(buffer, valid);
    __atomic_store_n(&audit.ran, 1, __ATOMIC_RELAXED);
    CUpti_BuffersCallbackCompleteFunc fn = atomic_load(&app_completed);
    if (fn != NULL)
        fn(ctx, stream, buffer, size, valid);
}

int ft_cupti_audit_wrap(ft_cupti_audit_lookup_fn lookup, void *requested, void *completed, void **req_out,
                        void **done_out)
{
    next_fn_t next = lookup != NULL ? (next_fn_t)lookup("cuptiActivityGetNextRecord") : NULL;
    if (next == NULL || requested == NULL || completed == NULL)
        return -1; /* libcupti checks the arguments itself */
    atomic_store(&next_record, next);
    atomic_store(&callback_name, (name_fn_t)lookup("cuptiGetCallbackName"));
    atomic_store(&app_requested, (CUpti_BuffersCallbackRequestFunc)requested);
    atomic_store(&app_completed, (CUpti_BuffersCallbackCompleteFunc)completed);
    *req_out = (void *)requested_trampoline;
    *done_out = (void *)completed_trampoline;
    return 0;
}

void ft_cupti_audit_counts(uint64_t *records, uint64_t *duplicates, uint64_t *flow_duplicates)
{
    pthread_mutex_lock(&audit.lock);
    *records = audit.records;
    *duplicates = audit.duplicates;
    *flow_duplicates = audit.flow_duplicates;
    pthread_mutex_unlock(&audit.lock);
}

static int by_count(const void *x, const void *y)
{
    const pair_t *a = x, *b = y;
    return (a->n < b->n) - (a->n > b->n);
}

void ft_cupti_audit_report(void)
{
    if (!__atomic_load_n(&audit.ran, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&audit.lock);
    pair_t pairs[MAX_PAIRS];
    size_t n = audit.n_pairs;
    memcpy(pairs, audit.pairs, n * sizeof *pairs);
    uint64_t records = audit.records, dups = audit.duplicates, flow = audit.flow_duplicates;
    uint64_t resets = audit.resets;
    pthread_mutex_unlock(&audit.lock);
    qsort(pairs, n, sizeof *pairs, by_count);
    char list[768];
    size_t len = 0;
    list[0] = '\0';
    for (size_t i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s+%s x%llu%s", i ? ", " : ": ",
                                fn_name(pairs[i].kind[0], pairs[i].cbid[0]),
                                fn_name(pairs[i].kind[1], pairs[i].cbid[1]), (unsigned long long)pairs[i].n,
                                pairs[i].flow ? " (both flow starts)" : "");
    FT_INFO("CUPTI audit: %llu API records of the application's profiler read, %llu correlation id(s) seen "
            "twice, %llu of them with two flow starts (torch.profiler asserts on those)%s%s",
            (unsigned long long)records, (unsigned long long)dups, (unsigned long long)flow,
            resets ? " (the id table was restarted when full; pairs across a restart are missed)" : "", list);
}

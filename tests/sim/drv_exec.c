/* drv_exec.c - streams, events, copies, memsets and the worker threads that run them.
 *
 * Every stream gets a worker thread on its first operation and runs its FIFO queue
 * for real, asynchronously to the host. The virtual clock is computed at enqueue
 * time, so it does not depend on thread scheduling:
 *   start = max(host now, stream's previous end, awaited events, legacy-stream
 *               ordering, engine free time);  end = start + duration
 * with three FIFO engines per device (compute: kernels, memsets, D2D; H2D; D2H). The
 * host's virtual time moves to an operation's end only when the host waits for it.
 *
 * A worker that touches an unmapped or inaccessible address while running a kernel or
 * a copy takes SIGSEGV/SIGBUS; the handler jumps back to the worker, which makes the
 * context's error sticky (CUDA_ERROR_ILLEGAL_ADDRESS) and names the culprit.
 */
#define _GNU_SOURCE
#include "drv_internal.h"

#include <cupti_activity.h>
#include <errno.h>
#include <generated_cuda_meta.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ faults */

struct fault_frame {
    sigjmp_buf jb;
    void *addr;
    int sig;
};

/* Set only while a worker runs device work. Initial-exec TLS: the handler must not
 * allocate a TLS block (a fault in malloc would deadlock it), and this is one pointer
 * of the static TLS surplus even when libcuda is dlopened. */
static __thread struct fault_frame *t_frame __attribute__((tls_model("initial-exec")));
static struct sigaction g_old_segv, g_old_bus;

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    struct fault_frame *f = t_frame;
    if (f) {
        t_frame = NULL;
        f->addr = si->si_addr;
        f->sig = sig;
        siglongjmp(f->jb, 1);
    }
    /* Not device work: chain to whoever handled it before us. */
    struct sigaction *old = sig == SIGSEGV ? &g_old_segv : &g_old_bus;
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
        old->sa_sigaction(sig, si, uc);
        return;
    }
    if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
        old->sa_handler(sig);
        return;
    }
    /* Default action: restore it; a real fault re-executes and kills the process
     * with the original signal, a sent one is re-raised. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, NULL);
    if (si->si_code <= 0)
        raise(sig);
}

int sim_exec_init(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &g_old_segv) != 0 || sigaction(SIGBUS, &sa, &g_old_bus) != 0)
        return -1;
    return 0;
}

/* ------------------------------------------------------------------ clock */

void sim_advance_host(uint64_t t)
{
    if (t > g_sim.host_now)
        g_sim.host_now = t;
}

uint64_t sim_copy_duration(size_t bytes, double gbps)
{
    /* GB/s is bytes per ns. */
    return (uint64_t)g_sim.opt.COPY_LATENCY_NS + (uint64_t)llround((double)bytes / gbps);
}

/* ------------------------------------------------------------------ streams */

static void stream_init(struct CUstream_st *s, struct CUctx_st *ctx, unsigned flags, int prio)
{
    s->magic = SIM_MAGIC_STREAM;
    s->id = ++g_sim.next_stream_id;
    s->ctx = ctx;
    s->flags = flags;
    s->priority = prio;
    pthread_cond_init(&s->cv, NULL);
}

CUresult sim_stream_init_legacy(struct CUctx_st *ctx)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    stream_init(s, ctx, 0, 0);
    s->legacy = 1;
    ctx->legacy = s;
    return CUDA_SUCCESS;
}

static struct CUstream_st *stream_new_locked(struct CUctx_st *ctx, unsigned flags, int prio)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    stream_init(s, ctx, flags, prio);
    s->next_in_ctx = ctx->streams;
    ctx->streams = s;
    s->key = s;
    HASH_ADD(hh, g_sim.live_streams, key, sizeof(void *), s);
    return s;
}

/* The per-thread default stream of each context this thread used. */
static __thread struct { struct CUctx_st *ctx; struct CUstream_st *s; } t_ptds[SIM_MAX_DEVICES];

CUresult sim_stream_resolve(CUstream h, struct CUstream_st **out)
{
    struct CUctx_st *ctx = sim_current_ctx();
    if (h == NULL || h == CU_STREAM_LEGACY) {
        if (!ctx)
            return CUDA_ERROR_INVALID_CONTEXT;
        *out = ctx->legacy;
        return CUDA_SUCCESS;
    }
    if (h == CU_STREAM_PER_THREAD) {
        if (!ctx)
            return CUDA_ERROR_INVALID_CONTEXT;
        for (int i = 0; i < SIM_MAX_DEVICES; i++) {
            if (t_ptds[i].ctx == ctx) {
                *out = t_ptds[i].s;
                return CUDA_SUCCESS;
            }
            if (!t_ptds[i].ctx) {
                struct CUstream_st *s = stream_new_locked(ctx, 0, 0);
                if (!s)
                    return CUDA_ERROR_OUT_OF_MEMORY;
                t_ptds[i].ctx = ctx;
                t_ptds[i].s = s;
                *out = s;
                return CUDA_SUCCESS;
            }
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct CUstream_st *s;
    HASH_FIND(hh, g_sim.live_streams, &h, sizeof(void *), s);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ operations */

sim_op_t *sim_op_new(sim_op_kind_t kind)
{
    sim_op_t *op = calloc(1, sizeof *op);
    if (op) {
        op->kind = kind;
        op->engine = SIM_ENG_NONE;
    }
    return op;
}

void sim_op_free(sim_op_t *op)
{
    if (!op)
        return;
    if (op->kind == SIM_OP_KERNEL) {
        free(op->u.kern.argbuf);
        free(op->u.kern.args);
    }
    if (op->kind == SIM_OP_COPY)
        free(op->u.copy.snapshot);
    if (op->kind == SIM_OP_GRAPH)
        sim_graph_free(op->u.child.graph);
    free(op->deps);
    free(op);
}

static int add_dep(sim_op_t *op, struct CUstream_st *s, uint64_t seq)
{
    if (seq <= s->done_seq)
        return 0;  /* already complete: nothing to wait for */
    sim_dep_t *d = realloc(op->deps, (size_t)(op->ndeps + 1) * sizeof *d);
    if (!d)
        return -1;
    op->deps = d;
    op->deps[op->ndeps].s = s;
    op->deps[op->ndeps].seq = seq;
    op->ndeps++;
    return 0;
}

static void *worker_main(void *arg);

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

void sim_enqueue(struct CUstream_st *s, sim_op_t *op, int engine, uint64_t duration)
{
    struct CUctx_st *ctx = s->ctx;
    sim_dev_t *dev = ctx->dev;
    uint64_t start = max_u64(g_sim.host_now, max_u64(s->vend, op->vfloor));

    /* Legacy default stream semantics: it waits for every blocking stream of its
     * context, and every blocking stream waits for it. */
    if (s->legacy) {
        for (struct CUstream_st *t = ctx->streams; t; t = t->next_in_ctx) {
            if (t->flags & CU_STREAM_NON_BLOCKING)
                continue;
            add_dep(op, t, t->enq_seq);
            start = max_u64(start, t->vend);
        }
    } else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
        add_dep(op, ctx->legacy, ctx->legacy->enq_seq);
        start = max_u64(start, ctx->legacy->vend);
    }
    if (engine != SIM_ENG_NONE) {
        start = max_u64(start, dev->eng_free[engine]);
        dev->eng_free[engine] = start + duration;
    }
    op->engine = engine;
    op->vstart = start;
    op->vend = start + duration;
    op->seq = ++s->enq_seq;
    op->corr = sim_current_corr();
    s->vend = op->vend;
    g_sim.horizon = max_u64(g_sim.horizon, op->vend);

    op->next = NULL;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;

    if (!s->worker) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, worker_main, s) == 0)
            s->worker = 1;
        else
            sim_log("cannot start a stream worker thread: %s", strerror(errno));
        pthread_attr_destroy(&at);
    } else {
        pthread_cond_signal(&s->cv);
    }
}

void sim_wait_seq(struct CUstream_st *s, uint64_t seq)
{
    while (s->done_seq < seq)
        pthread_cond_wait(&g_sim.done_cv, &g_sim.lock);
}

CUresult sim_ctx_sync_locked(struct CUctx_st *ctx)
{
    struct CUstream_st *l = ctx->legacy;
    sim_wait_seq(l, l->enq_seq);
    sim_advance_host(l->vend);
    /* The list may change while we wait (the lock is released): restart after each
     * wait until a full pass finds nothing pending. */
    int again = 1;
    while (again) {
        again = 0;
        for (struct CUstream_st *s = ctx->streams; s; s = s->next_in_ctx) {
            sim_advance_host(s->vend);
            if (s->done_seq < s->enq_seq) {
                sim_wait_seq(s, s->enq_seq);
                again = 1;
                break;
            }
        }
    }
    return ctx->sticky;
}

static void emit_activity(struct CUstream_st *s, sim_op_t *op, simcu_activity_sink_t sink)
{
    simcu_activity_t a;
    memset(&a, 0, sizeof a);
    a.start = op->vstart;
    a.end = op->vend;
    a.device_id = (uint32_t)s->ctx->dev->ordinal;
    a.context_id = s->ctx->id;
    a.context = (CUcontext)s->ctx;
    a.stream_id = s->id;
    a.correlation_id = op->corr;
    a.async = op->async;
    switch (op->kind) {
    case SIM_OP_KERNEL:
        a.kind = SIMCU_ACT_KERNEL;
        a.name = op->u.kern.k->name;
        for (int i = 0; i < 3; i++) {
            a.grid[i] = op->u.kern.dims.grid[i];
            a.block[i] = op->u.kern.dims.block[i];
        }
        a.dynamic_smem = (unsigned)op->u.kern.dims.shared_mem;
        break;
    case SIM_OP_COPY:
        a.kind = SIMCU_ACT_MEMCPY;
        a.bytes = op->u.copy.bytes;
        a.copy_kind = op->u.copy.copy_kind;
        a.src_kind = op->u.copy.src_kind;
        a.dst_kind = op->u.copy.dst_kind;
        break;
    case SIM_OP_MEMSET:
        a.kind = SIMCU_ACT_MEMSET;
        a.bytes = (uint64_t)op->u.memset.count * op->u.memset.elem;
        a.memset_value = op->u.memset.value;
        a.memset_memkind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
        break;
    default:
        return;
    }
    sink(&a);
}

static int op_report_bit(sim_op_kind_t k)
{
    return k == SIM_OP_KERNEL ? SIMCU_ACTMASK_KERNEL
         : k == SIM_OP_COPY ? SIMCU_ACTMASK_MEMCPY
         : k == SIM_OP_MEMSET ? SIMCU_ACTMASK_MEMSET : 0;
}

static void describe_op(const sim_op_t *op, char *buf, size_t n)
{
    switch (op->kind) {
    case SIM_OP_KERNEL:
        snprintf(buf, n, "kernel '%s'", op->u.kern.k->name);
        break;
    case SIM_OP_COPY:
        snprintf(buf, n, "copy of %zu bytes %p -> %p", op->u.copy.bytes,
                 op->u.copy.snapshot ? op->u.copy.snapshot : op->u.copy.src, op->u.copy.dst);
        break;
    case SIM_OP_MEMSET:
        snprintf(buf, n, "memset of %zu bytes at %p", op->u.memset.count * op->u.memset.elem,
                 op->u.memset.dst);
        break;
    default:
        snprintf(buf, n, "operation");
        break;
    }
}

static void do_memset(void *dst, unsigned value, unsigned elem, size_t count)
{
    if (elem == 1) {
        memset(dst, (int)(value & 0xff), count);
    } else if (elem == 2) {
        uint16_t v = (uint16_t)value, *p = dst;
        for (size_t i = 0; i < count; i++)
            p[i] = v;
    } else {
        uint32_t v = value, *p = dst;
        for (size_t i = 0; i < count; i++)
            p[i] = v;
    }
}

/* Runs device work with faults caught. Returns 0, or -1 after a fault (reported). */
static int run_device_work(struct CUstream_st *s, sim_op_t *op)
{
    struct fault_frame frame;
    if (sigsetjmp(frame.jb, 1) != 0) {
        char what[160];
        describe_op(op, what, sizeof what);
        sim_log("illegal address %p (%s) in %s on stream %u of device %d: "
                "CUDA_ERROR_ILLEGAL_ADDRESS is now sticky on the context",
                frame.addr, frame.sig == SIGBUS ? "SIGBUS" : "SIGSEGV", what, s->id,
                s->ctx->dev->ordinal);
        return -1;
    }
    t_frame = &frame;
    switch (op->kind) {
    case SIM_OP_KERNEL:
        if (op->u.kern.foreign != 0) {
            char whose[48];
            if (op->u.kern.foreign_dev == SIM_MAX_DEVICES)
                snprintf(whose, sizeof whose, "host-located memory, no access granted");
            else
                snprintf(whose, sizeof whose, "device %d's memory, no peer access", op->u.kern.foreign_dev);
            sim_log("illegal address %#llx (%s) in kernel %s on stream %u of device %d: "
                    "CUDA_ERROR_ILLEGAL_ADDRESS is now sticky on the context",
                    (unsigned long long)op->u.kern.foreign, whose, op->u.kern.k->name, s->id,
                    s->ctx->dev->ordinal);
            t_frame = NULL;
            return -1;
        }
        op->u.kern.k->desc.fn(op->u.kern.args, &op->u.kern.dims);
        break;
    case SIM_OP_COPY:
        memcpy(op->u.copy.dst, op->u.copy.snapshot ? op->u.copy.snapshot : op->u.copy.src,
               op->u.copy.bytes);
        break;
    case SIM_OP_MEMSET:
        do_memset(op->u.memset.dst, op->u.memset.value, op->u.memset.elem, op->u.memset.count);
        break;
    default:
        break;
    }
    t_frame = NULL;
    return 0;
}

static int deps_ready(const sim_op_t *op)
{
    for (int i = 0; i < op->ndeps; i++)
        if (op->deps[i].s->done_seq < op->deps[i].seq)
            return 0;
    return 1;
}

static void *worker_main(void *arg)
{
    struct CUstream_st *s = arg;
    /* An alternate stack lets the fault handler run even when a kernel body
     * overflowed its own stack. */
    stack_t ss;
    ss.ss_size = 64 * 1024;
    ss.ss_sp = malloc(ss.ss_size);
    ss.ss_flags = 0;
    if (ss.ss_sp)
        sigaltstack(&ss, NULL);

    pthread_mutex_lock(&g_sim.lock);
    for (;;) {
        while (!s->head && !s->destroyed)
            pthread_cond_wait(&s->cv, &g_sim.lock);
        if (!s->head)
            break;
        sim_op_t *op = s->head;
        while (!deps_ready(op))
            pthread_cond_wait(&g_sim.done_cv, &g_sim.lock);
        struct CUctx_st *ctx = s->ctx;
        simcu_activity_sink_t sink = op->report ? g_sim.act_sink : NULL;
        int skip = ctx->sticky != CUDA_SUCCESS;  /* a faulted context runs nothing */
        if (op->kind == SIM_OP_FREE)
            sim_mem_free_async_op(op->u.free.ptr);
        pthread_mutex_unlock(&g_sim.lock);

        int faulted = 0;
        if (g_sim.opt.LAG_US > 0 && !skip &&
            (g_sim.opt.LAG_DEVICE < 0 || g_sim.opt.LAG_DEVICE == ctx->dev->ordinal)) {
            struct timespec ts = {g_sim.opt.LAG_US / 1000000, g_sim.opt.LAG_US % 1000000 * 1000};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
        }
        if (!skip) {
            if (op->kind == SIM_OP_HOSTFN)
                op->u.hostfn.fn(op->u.hostfn.user);
            else if (op->kind == SIM_OP_KERNEL || op->kind == SIM_OP_COPY ||
                     op->kind == SIM_OP_MEMSET)
                faulted = run_device_work(s, op) != 0;
        }
        if (g_sim.opt.TIME_SCALE > 0 && op->vend > op->vstart) {
            double ns = (double)(op->vend - op->vstart) * g_sim.opt.TIME_SCALE;
            struct timespec ts = {(time_t)(ns / 1e9), (long)fmod(ns, 1e9)};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
        }
        if (sink && !skip && !faulted)
            emit_activity(s, op, sink);

        pthread_mutex_lock(&g_sim.lock);
        if (faulted && ctx->sticky == CUDA_SUCCESS)
            ctx->sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->done_seq = op->seq;
        pthread_cond_broadcast(&g_sim.done_cv);
        sim_op_free(op);
    }
    /* Destroyed and drained: leave the context's list; the struct itself stays
     * allocated because recorded events may still point at it (retired_streams). */
    for (struct CUstream_st **pp = &s->ctx->streams; *pp; pp = &(*pp)->next_in_ctx) {
        if (*pp == s) {
            *pp = s->next_in_ctx;
            break;
        }
    }
    s->worker = 0;
    pthread_mutex_unlock(&g_sim.lock);
    if (ss.ss_sp) {
        ss.ss_flags = SS_DISABLE;
        sigaltstack(&ss, NULL);
        free(ss.ss_sp);
    }
    return NULL;
}

/* Enqueues `op` with activity reporting decided now (as a GPU decides at launch). */
void sim_enqueue_reported(struct CUstream_st *s, sim_op_t *op, int engine, uint64_t dur)
{
    op->report = (g_sim.act_mask & op_report_bit(op->kind)) != 0;
    sim_enqueue(s, op, engine, dur);
}

/* ------------------------------------------------------------------ stream API */

static CUresult need_ctx(void)
{
    return sim_current_ctx() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult stream_create(CUstream *ph, unsigned flags, int prio)
{
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_ctx();
    if (r != CUDA_SUCCESS)
        return r;
    if (prio > 0)
        prio = 0;
    if (prio < -5)
        prio = -5;
    pthread_mutex_lock(&g_sim.lock);
    struct CUstream_st *s = stream_new_locked(sim_current_ctx(), flags, prio);
    pthread_mutex_unlock(&g_sim.lock);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    cuStreamCreate_params p = {phStream, Flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamCreate, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = stream_create(phStream, Flags, 0);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    cuStreamCreateWithPriority_params p = {phStream, flags, priority};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamCreateWithPriority, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = stream_create(phStream, flags, priority);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    cuStreamDestroy_v2_params p = {hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamDestroy_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
            r = CUDA_ERROR_INVALID_HANDLE;
        } else if ((r = sim_stream_resolve(hStream, &s)) == CUDA_SUCCESS) {
            /* Queued work still completes, as on a GPU. */
            sim_capture_stream_destroyed(s);
            HASH_DELETE(hh, g_sim.live_streams, s);
            s->next_retired = g_sim.retired_streams;
            g_sim.retired_streams = s;
            s->destroyed = 1;
            if (s->worker) {
                pthread_cond_signal(&s->cv);
            } else {
                for (struct CUstream_st **pp = &s->ctx->streams; *pp; pp = &(*pp)->next_in_ctx) {
                    if (*pp == s) {
                        *pp = s->next_in_ctx;
                        break;
                    }
                }
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

static CUresult stream_sync_locked(struct CUstream_st *s)
{
    CUresult r = sim_capture_sync_check(s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s->legacy) {
        /* Synchronising the legacy stream covers the blocking streams: a marker
         * enqueued there waits for all of them. */
        sim_op_t *op = sim_op_new(SIM_OP_MARKER);
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        sim_enqueue(s, op, SIM_ENG_NONE, 0);
    }
    sim_wait_seq(s, s->enq_seq);
    sim_advance_host(s->vend);
    return s->ctx->sticky;
}

SIM_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    cuStreamSynchronize_params p = {hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamSynchronize, &p, &r, SIMCU_CALL_SYNC | SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = sim_stream_resolve(hStream, &s);
        if (r == CUDA_SUCCESS)
            r = stream_sync_locked(s);
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    cuStreamQuery_params p = {hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamQuery, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = sim_stream_resolve(hStream, &s);
        if (r == CUDA_SUCCESS)
            r = sim_capture_sync_check(s);
        int busy = 0;
        if (r == CUDA_SUCCESS && s->legacy) {
            /* The legacy stream's next op would wait for every blocking stream, so
             * it is not idle while one is busy (measured on the H200). */
            for (struct CUstream_st *t = s->ctx->streams; t; t = t->next_in_ctx)
                if (!(t->flags & CU_STREAM_NON_BLOCKING) && t->done_seq < t->enq_seq)
                    busy = 1;
        }
        if (r == CUDA_SUCCESS) {
            if (busy || s->done_seq < s->enq_seq) {
                r = CUDA_ERROR_NOT_READY;
            } else {
                /* The host saw it complete: its clock is past the stream's end. */
                sim_advance_host(s->vend);
                for (struct CUstream_st *t = s->legacy ? s->ctx->streams : NULL; t; t = t->next_in_ctx)
                    if (!(t->flags & CU_STREAM_NON_BLOCKING))
                        sim_advance_host(t->vend);
                r = s->ctx->sticky;
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

static CUresult event_of(CUevent h, struct CUevent_st **out)
{
    struct CUevent_st *e;
    HASH_FIND(hh, g_sim.live_events, &h, sizeof(void *), e);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = e;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    cuStreamWaitEvent_params p = {hStream, hEvent, Flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamWaitEvent, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        struct CUevent_st *e;
        r = sim_stream_resolve(hStream, &s);
        if (r == CUDA_SUCCESS)
            r = event_of(hEvent, &e);
        if (r == CUDA_SUCCESS && (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL))
            r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            r = sim_capture_event_wait(s, e, Flags);
        if (r == CUDA_SUCCESS)
            r = sim_capture_enqueue_check(s);
        if (r == SIM_CAPTURED)
            r = CUDA_SUCCESS; /* the capture's ordering: nothing runs now */
        else if (r == CUDA_SUCCESS && e->recorded) {
            sim_op_t *op = sim_op_new(SIM_OP_MARKER);
            if (!op || add_dep(op, e->s, e->seq) != 0) {
                sim_op_free(op);
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                op->vfloor = e->vtime;
                sim_enqueue(s, op, SIM_ENG_NONE, 0);
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    cuStreamGetFlags_params p = {hStream, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamGetFlags, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = flags ? sim_stream_resolve(hStream, &s) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *flags = s->flags;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetPriority(CUstream hStream, int *priority)
{
    cuStreamGetPriority_params p = {hStream, priority};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamGetPriority, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = priority ? sim_stream_resolve(hStream, &s) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *priority = s->priority;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    cuStreamGetId_params p = {hStream, streamId};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamGetId, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = streamId ? sim_stream_resolve(hStream, &s) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *streamId = s->id;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    cuStreamGetCtx_params p = {hStream, pctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamGetCtx, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = pctx ? sim_stream_resolve(hStream, &s) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *pctx = (CUcontext)s->ctx;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
    cuStreamGetDevice_params p = {hStream, device};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamGetDevice, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = device ? sim_stream_resolve(hStream, &s) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *device = s->ctx->dev->ordinal;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    cuLaunchHostFunc_params p = {hStream, fn, userData};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuLaunchHostFunc, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = fn ? sim_stream_resolve(hStream, &s) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS) {
            CUresult how = sim_capture_enqueue_check(s);
            sim_op_t *op = NULL;
            if (how != CUDA_SUCCESS && how != SIM_CAPTURED) {
                r = how;
            } else if (!(op = sim_op_new(SIM_OP_HOSTFN))) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                op->u.hostfn.fn = fn;
                op->u.hostfn.user = userData;
                if (how == SIM_CAPTURED)
                    sim_capture_node(s, op, SIM_ENG_NONE, 0);
                else
                    sim_enqueue(s, op, SIM_ENG_NONE, 0);
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ events */

SIM_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    cuEventCreate_params p = {phEvent, Flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuEventCreate, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = need_ctx();
    if (r == CUDA_SUCCESS) {
        unsigned ok = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
        struct CUevent_st *e;
        int fail = 0; /* counted only for a call whose arguments hold, as a copy's */
        if (phEvent && !(Flags & ~ok)) {
            pthread_mutex_lock(&g_sim.lock);
            fail = sim_fault_hit(SIM_FAULT_KIND_EVENT);
            pthread_mutex_unlock(&g_sim.lock);
        }
        if (!phEvent || (Flags & ~ok)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (fail || !(e = calloc(1, sizeof *e))) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->magic = SIM_MAGIC_EVENT;
            e->flags = Flags;
            e->ctx = sim_current_ctx();
            pthread_mutex_lock(&g_sim.lock);
            e->key = e;
            HASH_ADD(hh, g_sim.live_events, key, sizeof(void *), e);
            pthread_mutex_unlock(&g_sim.lock);
            *phEvent = (CUevent)e;
        }
    }
    sim_api_exit(&c);
    return r;
}

static CUresult event_record(CUevent hEvent, CUstream hStream)
{
    pthread_mutex_lock(&g_sim.lock);
    struct CUstream_st *s;
    struct CUevent_st *e;
    CUresult r = event_of(hEvent, &e);
    if (r == CUDA_SUCCESS)
        r = sim_stream_resolve(hStream, &s);
    if (r == CUDA_SUCCESS && s->cap) {
        r = sim_capture_event_record(e, s);
    } else if (r == CUDA_SUCCESS && (r = sim_capture_enqueue_check(s)) == CUDA_SUCCESS) {
        sim_op_t *op = sim_op_new(SIM_OP_MARKER);
        if (!op) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            sim_enqueue(s, op, SIM_ENG_NONE, 0);
            e->cap_id = 0; /* recorded outside a capture: usable again */
            e->cap = NULL;
            e->recorded = 1;
            e->s = s;
            e->seq = op->seq;      /* op may already be freed by its worker after */
            e->vtime = s->vend;    /* the unlock: read nothing from it later */
        }
    }
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    cuEventRecord_params p = {hEvent, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuEventRecord, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = event_record(hEvent, hStream);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    cuEventRecordWithFlags_params p = {hEvent, hStream, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuEventRecordWithFlags, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) ? CUDA_ERROR_INVALID_VALUE
                                                          : event_record(hEvent, hStream);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    cuEventQuery_params p = {hEvent};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuEventQuery, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUevent_st *e;
        r = event_of(hEvent, &e);
        if (r == CUDA_SUCCESS)
            r = sim_capture_event_query_check(e);
        if (r == CUDA_SUCCESS && e->recorded) {
            if (e->s->done_seq < e->seq)
                r = CUDA_ERROR_NOT_READY;
            else
                sim_advance_host(e->vtime);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    cuEventSynchronize_params p = {hEvent};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuEventSynchronize, &p, &r, SIMCU_CALL_SYNC | SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUevent_st *e;
        r = event_of(hEvent, &e);
        if (r == CUDA_SUCCESS)
            r = sim_capture_event_query_check(e);
        if (r == CUDA_SUCCESS && e->recorded) {
            sim_wait_seq(e->s, e->seq);
            sim_advance_host(e->vtime);
            r = e->s->ctx->sticky;
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    cuEventElapsedTime_v2_params p = {pMilliseconds, hStart, hEnd};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuEventElapsedTime_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUevent_st *a, *b;
        r = event_of(hStart, &a);
        if (r == CUDA_SUCCESS)
            r = event_of(hEnd, &b);
        if (r == CUDA_SUCCESS && !pMilliseconds)
            r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS && (a->cap_id || b->cap_id))
            r = CUDA_ERROR_CAPTURED_EVENT;
        if (r == CUDA_SUCCESS && ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING || !a->recorded ||
                                  !b->recorded))
            r = CUDA_ERROR_INVALID_HANDLE;
        if (r == CUDA_SUCCESS && (a->s->done_seq < a->seq || b->s->done_seq < b->seq))
            r = CUDA_ERROR_NOT_READY;
        if (r == CUDA_SUCCESS)
            *pMilliseconds = (float)(((double)b->vtime - (double)a->vtime) / 1e6);
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
    cuEventDestroy_v2_params p = {hEvent};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuEventDestroy_v2, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUevent_st *e;
        r = event_of(hEvent, &e);
        if (r == CUDA_SUCCESS) {
            /* Ops never point at events (waits copy the stream/seq), so freeing now is
             * safe even with a record or wait still queued. */
            HASH_DELETE(hh, g_sim.live_events, e);
            e->magic = SIM_MAGIC_DEAD;
            free(e);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ copies */

enum { DIR_H2D, DIR_D2H, DIR_D2D, DIR_ANY };

static uint8_t mem_kind(const void *p, size_t n)
{
    if (sim_in_arena(p, n))
        return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    return sim_host_pinned(p, n) ? CUPTI_ACTIVITY_MEMORY_KIND_PINNED
                                 : CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
}

/* A copy operation of `bytes` from src to dst, with what CUPTI reports of it (kinds)
 * and the engine and time it takes; NULL when out of memory. For copies enqueued or
 * captured, and a graph's memcpy nodes. */
sim_op_t *sim_copy_op_new(void *dst, const void *src, size_t bytes, int *engine, uint64_t *dur)
{
    sim_op_t *op = sim_op_new(SIM_OP_COPY);
    if (!op)
        return NULL;
    const sim_options_t *o = &g_sim.opt;
    uint8_t sk = mem_kind(src, bytes), dk = mem_kind(dst, bytes);
    int sdev = sk == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, ddev = dk == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    double bw;
    uint8_t kind;
    if (!sdev && ddev) {
        kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
        *engine = SIM_ENG_H2D;
        bw = sk == CUPTI_ACTIVITY_MEMORY_KIND_PINNED ? o->H2D_GBPS : o->PAGEABLE_GBPS;
    } else if (sdev && !ddev) {
        kind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
        *engine = SIM_ENG_D2H;
        bw = dk == CUPTI_ACTIVITY_MEMORY_KIND_PINNED ? o->D2H_GBPS : o->PAGEABLE_GBPS;
    } else if (sdev && ddev) {
        kind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
        *engine = SIM_ENG_COMPUTE;
        bw = o->D2D_GBPS;
    } else {
        kind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
        *engine = SIM_ENG_NONE;
        bw = o->PAGEABLE_GBPS;
    }
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.bytes = bytes;
    op->u.copy.copy_kind = kind;
    op->u.copy.src_kind = sk;
    op->u.copy.dst_kind = dk;
    *dur = sim_copy_duration(bytes, bw);
    return op;
}

/* The one copy path. `sync`: the synchronous API (host waits, except D2D);
 * otherwise async on `h`, except that copies to pageable memory still block the host
 * and copies from pageable memory snapshot the source now, as the real driver
 * stages them. */
static CUresult copy(void *dst, const void *src, size_t bytes, CUstream h, int sync, int dir)
{
    if (bytes == 0)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_sim.lock);
    uint8_t sk = mem_kind(src, bytes), dk = mem_kind(dst, bytes);
    int sdev = sk == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, ddev = dk == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    if ((dir == DIR_H2D && (sdev || !ddev)) || (dir == DIR_D2H && (!sdev || ddev)) ||
        (dir == DIR_D2D && (!sdev || !ddev)))
        r = CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s = NULL;
    if (r == CUDA_SUCCESS)
        r = sim_stream_resolve(h, &s);
    /* Another device's virtual-memory mapping is reachable where cuMemSetAccess granted
     * the stream's device access (the H200 pair: "invalid argument" otherwise); its
     * ordinary allocations are, the driver staging the copy. */
    for (int e = 0; r == CUDA_SUCCESS && e < 2; e++) {
        const void *p = e == 0 ? src : dst;
        sim_dev_t *pd = (e == 0 ? sdev : ddev) ? sim_mem_device_of(p) : NULL;
        if (pd != NULL && pd != s->ctx->dev && sim_mem_granted(p, s->ctx->dev) == 0)
            r = CUDA_ERROR_INVALID_VALUE;
    }
    /* A synchronous copy is a potentially unsafe call during a capture; an
     * asynchronous one on a capturing stream becomes a node. */
    CUresult how = CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && sync)
        r = sim_capture_unsafe_check();
    if (r == CUDA_SUCCESS) {
        how = sim_capture_enqueue_check(s);
        if (how != CUDA_SUCCESS && how != SIM_CAPTURED)
            r = how;
    }
    if (r == CUDA_SUCCESS && sim_fault_hit(SIM_FAULT_KIND_COPY))
        r = CUDA_ERROR_UNKNOWN;
    sim_op_t *op = NULL;
    int engine;
    uint64_t dur;
    if (r == CUDA_SUCCESS && !(op = sim_copy_op_new(dst, src, bytes, &engine, &dur)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r != CUDA_SUCCESS) {
        pthread_mutex_unlock(&g_sim.lock);
        return r;
    }
    /* The host waits for a synchronous copy to or from the host, and for any copy to
     * pageable memory, which the driver must see land. */
    uint8_t kind = op->u.copy.copy_kind;
    int wait = kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? sync
             : kind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? sync || dk == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE
                                                       : kind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    op->async = !sync;
    if (how == SIM_CAPTURED) {
        r = sim_capture_check_mapped(s, sdev ? src : NULL);
        if (r == CUDA_SUCCESS)
            r = sim_capture_check_mapped(s, ddev ? dst : NULL);
        if (r != CUDA_SUCCESS) {
            sim_op_free(op);
            pthread_mutex_unlock(&g_sim.lock);
            return r;
        }
        /* A node reads its source when a replay runs it. */
        sim_capture_node(s, op, engine, dur);
        pthread_mutex_unlock(&g_sim.lock);
        return CUDA_SUCCESS;
    }
    if (!wait && sk == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE) {
        /* Staged like the real driver does; copied without the lock, which a large
         * copy would otherwise hold from every other thread. */
        pthread_mutex_unlock(&g_sim.lock);
        op->u.copy.snapshot = malloc(bytes);
        if (!op->u.copy.snapshot) {
            sim_op_free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(op->u.copy.snapshot, src, bytes);
        pthread_mutex_lock(&g_sim.lock);
        if (s->destroyed) {  /* destroyed meanwhile by another thread */
            sim_op_free(op);
            pthread_mutex_unlock(&g_sim.lock);
            return CUDA_ERROR_INVALID_HANDLE;
        }
    }
    sim_enqueue_reported(s, op, engine, dur);
    if (wait) {
        uint64_t seq = op->seq, vend = op->vend;  /* op is freed once done */
        sim_wait_seq(s, seq);
        sim_advance_host(vend);
        r = s->ctx->sticky;
    }
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

#define COPY_FLAGS SIMCU_CALL_STICKY

SIM_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    cuMemcpy_params p = {dst, src, ByteCount};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemcpy, &p, &r, COPY_FLAGS);
    if (r == CUDA_SUCCESS)
        r = copy((void *)dst, (const void *)src, ByteCount, NULL, 1, DIR_ANY);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    cuMemcpyAsync_params p = {dst, src, ByteCount, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemcpyAsync, &p, &r, COPY_FLAGS);
    if (r == CUDA_SUCCESS)
        r = copy((void *)dst, (const void *)src, ByteCount, hStream, 0, DIR_ANY);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    cuMemcpyHtoD_v2_params p = {dstDevice, srcHost, ByteCount};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemcpyHtoD_v2, &p, &r, COPY_FLAGS);
    if (r == CUDA_SUCCESS)
        r = copy((void *)dstDevice, srcHost, ByteCount, NULL, 1, DIR_H2D);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    cuMemcpyDtoH_v2_params p = {dstHost, srcDevice, ByteCount};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemcpyDtoH_v2, &p, &r, COPY_FLAGS);
    if (r == CUDA_SUCCESS)
        r = copy(dstHost, (const void *)srcDevice, ByteCount, NULL, 1, DIR_D2H);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    cuMemcpyDtoD_v2_params p = {dstDevice, srcDevice, ByteCount};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemcpyDtoD_v2, &p, &r, COPY_FLAGS);
    if (r == CUDA_SUCCESS)
        r = copy((void *)dstDevice, (const void *)srcDevice, ByteCount, NULL, 1, DIR_D2D);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                                 CUstream hStream)
{
    cuMemcpyHtoDAsync_v2_params p = {dstDevice, srcHost, ByteCount, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemcpyHtoDAsync_v2, &p, &r, COPY_FLAGS);
    if (r == CUDA_SUCCESS)
        r = copy((void *)dstDevice, srcHost, ByteCount, hStream, 0, DIR_H2D);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                                 CUstream hStream)
{
    cuMemcpyDtoHAsync_v2_params p = {dstHost, srcDevice, ByteCount, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemcpyDtoHAsync_v2, &p, &r, COPY_FLAGS);
    if (r == CUDA_SUCCESS)
        r = copy(dstHost, (const void *)srcDevice, ByteCount, hStream, 0, DIR_D2H);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                                 CUstream hStream)
{
    cuMemcpyDtoDAsync_v2_params p = {dstDevice, srcDevice, ByteCount, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemcpyDtoDAsync_v2, &p, &r, COPY_FLAGS);
    if (r == CUDA_SUCCESS)
        r = copy((void *)dstDevice, (const void *)srcDevice, ByteCount, hStream, 0, DIR_D2D);
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ memset */

/* Memsets run on the compute engine and, like on a GPU, never block the host. */
static CUresult memset_enqueue(CUdeviceptr dst, unsigned value, unsigned elem, size_t n, CUstream h,
                               int async)
{
    if (n == 0)
        return CUDA_SUCCESS;
    if (!sim_in_arena((void *)dst, n * elem) || dst % elem)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    struct CUstream_st *s;
    CUresult r = sim_stream_resolve(h, &s);
    CUresult how = CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && !async) /* a synchronous set: potentially unsafe in a capture */
        r = sim_capture_unsafe_check();
    if (r == CUDA_SUCCESS) {
        how = sim_capture_enqueue_check(s);
        if (how != CUDA_SUCCESS && how != SIM_CAPTURED)
            r = how;
    }
    if (r == CUDA_SUCCESS) {
        sim_op_t *op = sim_op_new(SIM_OP_MEMSET);
        if (!op) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            op->u.memset.dst = (void *)dst;
            op->u.memset.value = value;
            op->u.memset.elem = elem;
            op->u.memset.count = n;
            op->async = async;
            if (how == SIM_CAPTURED && (r = sim_capture_check_mapped(s, (const void *)dst)) != CUDA_SUCCESS)
                sim_op_free(op);
            else if (how == SIM_CAPTURED)
                sim_capture_node(s, op, SIM_ENG_COMPUTE, sim_copy_duration(n * elem, g_sim.opt.D2D_GBPS));
            else
                sim_enqueue_reported(s, op, SIM_ENG_COMPUTE, sim_copy_duration(n * elem, g_sim.opt.D2D_GBPS));
        }
    }
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    cuMemsetD8_v2_params p = {dstDevice, uc, N};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemsetD8_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = memset_enqueue(dstDevice, uc, 1, N, NULL, 0);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    cuMemsetD16_v2_params p = {dstDevice, us, N};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemsetD16_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = memset_enqueue(dstDevice, us, 2, N, NULL, 0);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    cuMemsetD32_v2_params p = {dstDevice, ui, N};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemsetD32_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = memset_enqueue(dstDevice, ui, 4, N, NULL, 0);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    cuMemsetD8Async_params p = {dstDevice, uc, N, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemsetD8Async, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = memset_enqueue(dstDevice, uc, 1, N, hStream, 1);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    cuMemsetD16Async_params p = {dstDevice, us, N, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemsetD16Async, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = memset_enqueue(dstDevice, us, 2, N, hStream, 1);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    cuMemsetD32Async_params p = {dstDevice, ui, N, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemsetD32Async, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = memset_enqueue(dstDevice, ui, 4, N, hStream, 1);
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ for drv_kernel.c */

void sim_enqueue_kernel(struct CUstream_st *s, sim_op_t *op, uint64_t cost)
{
    sim_enqueue_reported(s, op, SIM_ENG_COMPUTE, cost);
}

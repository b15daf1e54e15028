/* drv_graph.c - stream capture and CUDA graphs, with CUDA's capture rules enforced.
 *
 * cuStreamBeginCapture puts a stream in capture mode: what is enqueued on it is not
 * run but recorded as a node of the capture's graph (kernels, copies, sets, host
 * functions), in capture order. Another stream joins the capture by waiting on an
 * event recorded on one of its streams (a fork) and must be joined back (a stream of
 * the capture waits on an event recorded on it after its last node) before
 * cuStreamEndCapture, else CUDA_ERROR_STREAM_CAPTURE_UNJOINED. A graph is instantiated
 * (its nodes copied) and launched: the nodes run in capture order on the launch
 * stream, which honours every dependency the capture saw.
 *
 * The rules (CUDA programming guide, "Prohibited and Unhandled Operations" and
 * "Invalidation"; cuThreadExchangeStreamCaptureMode for the modes):
 *   - synchronizing or querying a capturing stream, or the context while one of its
 *     streams captures: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
 *   - the legacy stream used while a blocking stream of its context captures:
 *     CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
 *   - querying or synchronizing an event last recorded in a capture:
 *     CUDA_ERROR_CAPTURED_EVENT;
 *   - a capturing stream waiting on an event recorded outside the capture:
 *     CUDA_ERROR_STREAM_CAPTURE_ISOLATION; on one of another capture:
 *     CUDA_ERROR_STREAM_CAPTURE_MERGE;
 *   - potentially unsafe calls (allocations, frees, VMM changes, synchronous copies
 *     and sets) from a thread whose mode forbids them: UNSUPPORTED. A thread in global
 *     mode (the default) is forbidden them while it has a capture not begun relaxed or
 *     any other thread has a global one; in thread-local mode only while it has one;
 *     in relaxed mode never;
 *   - stream-ordered allocation on a capturing stream: UNSUPPORTED (the simulator has
 *     no memory nodes).
 * Each of these invalidates the captures concerned: their streams then refuse work
 * with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and cuStreamEndCapture returns that
 * error and no graph.
 *
 * Locking: g_sim.lock, as every driver table. */
#define _GNU_SOURCE
#include "drv_internal.h"

#include <generated_cuda_meta.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ rules */

static void invalidate(sim_capture_t *c, const char *why)
{
    if (!c->invalid)
        sim_log("stream capture %llu invalidated: %s", (unsigned long long)c->id, why);
    c->invalid = 1;
}

/* A copy or set being captured on s names p: device memory must be there (a reserved
 * address with nothing mapped, as FlexTensor's FT_SPILL leaves an allocation it holds
 * in host memory, cannot become a copy node). On the H200, torch.cuda.graph's capture
 * of such a copy ended with cudaErrorInvalidValue; here the call fails with it and the
 * capture is invalidated. g_sim.lock held. */
CUresult sim_capture_check_mapped(struct CUstream_st *s, const void *p)
{
    if (p == NULL || !sim_in_arena(p, 1) || sim_mem_device_of(p) != NULL)
        return CUDA_SUCCESS;
    if (s->cap)
        invalidate(s->cap, "a captured copy or set names a device address with no memory mapped");
    return CUDA_ERROR_INVALID_VALUE;
}

/* A blocking stream of ctx captures: 1, invalidating them when `why` is given. */
static int blocking_capture(struct CUctx_st *ctx, const char *why)
{
    int found = 0;
    for (sim_capture_t *c = g_sim.captures; c; c = c->next)
        for (int i = 0; i < c->nstreams; i++)
            if (c->streams[i]->ctx == ctx && !(c->streams[i]->flags & CU_STREAM_NON_BLOCKING)) {
                found = 1;
                if (why)
                    invalidate(c, why);
            }
    return found;
}

CUresult sim_capture_enqueue_check(struct CUstream_st *s)
{
    if (s->cap)
        return s->cap->invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : SIM_CAPTURED;
    if (s->legacy && blocking_capture(s->ctx, "the legacy stream was used while a blocking stream captures"))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return CUDA_SUCCESS;
}

CUresult sim_capture_memnode_check(struct CUstream_st *s)
{
    if (s->cap) {
        if (!s->cap->invalid)
            invalidate(s->cap, "a stream-ordered allocation or free on a capturing stream (no memory "
                               "nodes in the simulator)");
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return sim_capture_enqueue_check(s);
}

CUresult sim_capture_sync_check(struct CUstream_st *s)
{
    if (s->cap) {
        invalidate(s->cap, "a capturing stream was synchronized or queried");
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s->legacy && blocking_capture(s->ctx, "the legacy stream was synchronized or queried while a "
                                              "blocking stream captures"))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return CUDA_SUCCESS;
}

CUresult sim_capture_ctx_check(struct CUctx_st *ctx)
{
    CUresult r = CUDA_SUCCESS;
    for (sim_capture_t *c = g_sim.captures; c; c = c->next)
        if (c->origin->ctx == ctx) {
            invalidate(c, "the context was synchronized while one of its streams captures");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    return r;
}

/* The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode). */
static __thread CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult sim_capture_unsafe_check(void)
{
    if (t_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_t self = pthread_self();
    for (sim_capture_t *c = g_sim.captures; c; c = c->next) {
        if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
            continue;
        int mine = pthread_equal(c->thread, self);
        if (mine || (t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            invalidate(c, mine ? "a potentially unsafe call was made by the capturing thread"
                               : "a potentially unsafe call was made by another thread in global mode");
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return r;
}

static int capture_add_stream(sim_capture_t *c, struct CUstream_st *s)
{
    if (c->nstreams == c->capstreams) {
        int n = c->capstreams ? 2 * c->capstreams : 4;
        struct CUstream_st **a = realloc(c->streams, (size_t)n * sizeof *a);
        if (!a)
            return -1;
        c->streams = a;
        c->capstreams = n;
    }
    c->streams[c->nstreams++] = s;
    s->cap = c;
    s->cap_tip = s->cap_joined = 0;
    s->cap_last = NULL;
    return 0;
}

CUresult sim_capture_event_record(struct CUevent_st *e, struct CUstream_st *s)
{
    if (s->cap->invalid)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    e->recorded = 1;
    e->cap_id = s->cap->id;
    e->cap = s->cap;
    e->cap_stream = s;
    e->cap_tip = s->cap_tip;
    e->cap_node = s->cap_last;
    return CUDA_SUCCESS;
}

/* SIM_CAPTURED: the wait is the capture's (no operation to enqueue); CUDA_SUCCESS: an
 * ordinary wait; or the rule it breaks. */
CUresult sim_capture_event_wait(struct CUstream_st *s, struct CUevent_st *e, unsigned flags)
{
    if (e->cap) {
        if (s->cap == e->cap) { /* inside the capture: joins the recording stream's nodes */
            if (s->cap->invalid)
                return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            if (e->cap_stream != s && e->cap_tip > e->cap_stream->cap_joined)
                e->cap_stream->cap_joined = e->cap_tip;
            if (e->cap_stream != s && e->cap_node != NULL)
                s->cap_last = e->cap_node; /* CUDA lists both nodes; the simulator keeps the event's */
            return SIM_CAPTURED;
        }
        if (s->cap) {
            invalidate(s->cap, "a capturing stream waited on an event of another capture");
            invalidate(e->cap, "a stream of another capture waited on one of its events");
            return CUDA_ERROR_STREAM_CAPTURE_MERGE;
        }
        if (s->legacy) {
            invalidate(e->cap, "the legacy stream cannot join a capture");
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
        if (e->cap->invalid)
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        /* A fork: s joins the capture, its next nodes after the event's. */
        if (capture_add_stream(e->cap, s) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        s->cap_last = e->cap_node;
        return SIM_CAPTURED;
    }
    if (s->cap) {
        if (s->cap->invalid)
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        if (flags & CU_EVENT_WAIT_EXTERNAL)
            return SIM_CAPTURED; /* an external wait node: nothing to order in a replay here */
        invalidate(s->cap, "a capturing stream waited on an event recorded outside the capture");
        return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    return CUDA_SUCCESS;
}

CUresult sim_capture_event_query_check(struct CUevent_st *e)
{
    if (e->cap_id == 0)
        return CUDA_SUCCESS;
    if (e->cap)
        invalidate(e->cap, "an event recorded in the capture was queried or synchronized");
    return CUDA_ERROR_CAPTURED_EVENT;
}

/* ------------------------------------------------------------------ nodes */

static void list_append(sim_op_t **head, sim_op_t **tail, sim_op_t *op)
{
    op->next = NULL;
    if (*tail)
        (*tail)->next = op;
    else
        *head = op;
    *tail = op;
}

void sim_capture_node(struct CUstream_st *s, sim_op_t *op, int engine, uint64_t dur)
{
    struct CUgraph_st *g = s->cap->graph;
    op->engine = engine;
    op->dur = dur;
    op->corr = 0;
    list_append(&g->head, &g->tail, op);
    g->nnodes++;
    s->cap_tip++;
    s->cap_last = op;
}

/* A copy of node op, to run once (a replay) or to keep (an instantiation). */
static sim_op_t *node_clone(const sim_op_t *op)
{
    sim_op_t *n = sim_op_new(op->kind);
    if (!n)
        return NULL;
    *n = *op;
    n->next = NULL;
    n->deps = NULL;
    n->ndeps = 0;
    n->vfloor = 0;
    if (op->kind == SIM_OP_KERNEL) {
        int np = op->u.kern.k->desc.nparams;
        n->u.kern.argbuf = malloc(op->u.kern.argbytes ? op->u.kern.argbytes : 1);
        n->u.kern.args = calloc((size_t)np + 1, sizeof(void *));
        if (!n->u.kern.argbuf || !n->u.kern.args) {
            free(n->u.kern.argbuf);
            free(n->u.kern.args);
            free(n);
            return NULL;
        }
        memcpy(n->u.kern.argbuf, op->u.kern.argbuf, op->u.kern.argbytes);
        for (int i = 0; i < np; i++)
            n->u.kern.args[i] = (char *)n->u.kern.argbuf + ((char *)op->u.kern.args[i] - (char *)op->u.kern.argbuf);
    }
    if (op->kind == SIM_OP_COPY)
        n->u.copy.snapshot = NULL; /* captured copies read their source when they run */
    return n;
}

static void nodes_free(sim_op_t *head)
{
    while (head) {
        sim_op_t *next = head->next;
        sim_op_free(head);
        head = next;
    }
}

/* ------------------------------------------------------------------ handles */

static struct CUgraph_st *graph_new_locked(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->magic = SIM_MAGIC_GRAPH;
    g->key = g;
    HASH_ADD(hh, g_sim.live_graphs, key, sizeof(void *), g);
    return g;
}

static void graph_free_locked(struct CUgraph_st *g)
{
    HASH_DELETE(hh, g_sim.live_graphs, g);
    nodes_free(g->head);
    g->magic = SIM_MAGIC_DEAD;
    free(g);
}

static struct CUgraph_st *graph_of(CUgraph h)
{
    struct CUgraph_st *g;
    HASH_FIND(hh, g_sim.live_graphs, &h, sizeof(void *), g);
    return g;
}

static struct CUgraphExec_st *exec_of(CUgraphExec h)
{
    struct CUgraphExec_st *x;
    HASH_FIND(hh, g_sim.live_execs, &h, sizeof(void *), x);
    return x;
}

/* The capture is over (lock held): its streams leave it, its captured events stay
 * unusable for queries (cap_id) but no longer point at it. */
static void capture_end_locked(sim_capture_t *c)
{
    for (int i = 0; i < c->nstreams; i++)
        c->streams[i]->cap = NULL;
    for (struct CUevent_st *e = g_sim.live_events; e; e = e->hh.next)
        if (e->cap == c)
            e->cap = NULL;
    for (sim_capture_t **pp = &g_sim.captures; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    free(c->streams);
    free(c);
}

void sim_capture_stream_destroyed(struct CUstream_st *s)
{
    if (s->cap)
        invalidate(s->cap, "a stream of the capture was destroyed");
}

/* ------------------------------------------------------------------ capture API */

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode)
{
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    struct CUstream_st *s;
    CUresult r = sim_stream_resolve(h, &s);
    if (r == CUDA_SUCCESS && s->legacy)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
    if (r == CUDA_SUCCESS && s->cap)
        r = CUDA_ERROR_ILLEGAL_STATE;
    sim_capture_t *c = NULL;
    if (r == CUDA_SUCCESS && (!(c = calloc(1, sizeof *c)) || !(c->graph = graph_new_locked())))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && capture_add_stream(c, s) != 0) {
        graph_free_locked(c->graph);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        c->id = ++g_sim.next_capture_id;
        c->origin = s;
        c->mode = mode;
        c->thread = pthread_self();
        c->next = g_sim.captures;
        g_sim.captures = c;
    } else {
        free(c);
    }
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    cuStreamBeginCapture_v2_params p = {hStream, mode};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamBeginCapture_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = begin_capture(hStream, mode);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    cuStreamEndCapture_params p = {hStream, phGraph};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamEndCapture, &p, &r, 0);
    if (r == CUDA_SUCCESS && !phGraph)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = sim_stream_resolve(hStream, &s);
        sim_capture_t *cap = r == CUDA_SUCCESS ? s->cap : NULL;
        if (r == CUDA_SUCCESS && !cap)
            r = CUDA_ERROR_ILLEGAL_STATE;
        else if (r == CUDA_SUCCESS && cap->origin != s)
            r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        else if (r == CUDA_SUCCESS && cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
                 !pthread_equal(cap->thread, pthread_self()))
            r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
        if (r == CUDA_SUCCESS) {
            for (int i = 1; i < cap->nstreams && !cap->invalid; i++)
                if (cap->streams[i]->cap_tip > cap->streams[i]->cap_joined) {
                    sim_log("stream capture %llu: a forked stream was not joined back before the end",
                            (unsigned long long)cap->id);
                    r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
                }
            if (cap->invalid)
                r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            struct CUgraph_st *g = cap->graph;
            if (r == CUDA_SUCCESS) {
                *phGraph = (CUgraph)g;
            } else {
                graph_free_locked(g);
                *phGraph = NULL;
            }
            capture_end_locked(cap);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

static CUresult capture_status(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
                               const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    struct CUstream_st *s;
    CUresult r = sim_stream_resolve(h, &s);
    /* The legacy stream's status while a blocking stream captures is not a stream's:
     * an error, which does not invalidate that capture. */
    if (r == CUDA_SUCCESS && s->legacy && blocking_capture(s->ctx, NULL))
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (r == CUDA_SUCCESS) {
        sim_capture_t *c = s->cap;
        *st = !c ? CU_STREAM_CAPTURE_STATUS_NONE
            : c->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
        if (c && !c->invalid) {
            if (id)
                *id = c->id;
            if (graph)
                *graph = (CUgraph)c->graph;
            /* The stream's last node: a pointer valid until its next captured call. */
            if (deps)
                *deps = s->cap_last != NULL ? (const CUgraphNode *)&s->cap_last : NULL;
            if (edges)
                *edges = NULL;
            if (ndeps)
                *ndeps = s->cap_last != NULL;
        }
    }
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    cuStreamIsCapturing_params p = {hStream, captureStatus};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamIsCapturing, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_status(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                      cuuint64_t *id_out, CUgraph *graph_out,
                                                      const CUgraphNode **dependencies_out,
                                                      const CUgraphEdgeData **edgeData_out,
                                                      size_t *numDependencies_out)
{
    cuStreamGetCaptureInfo_v3_params p = {hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                                          edgeData_out, numDependencies_out};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamGetCaptureInfo_v3, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && edgeData_out && !dependencies_out)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        r = capture_status(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                           numDependencies_out);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    cuThreadExchangeStreamCaptureMode_params p = {mode};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuThreadExchangeStreamCaptureMode, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                      *mode != CU_STREAM_CAPTURE_MODE_RELAXED)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            CUstreamCaptureMode old = t_capture_mode;
            t_capture_mode = *mode;
            *mode = old;
        }
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ graphs */

SIM_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                        unsigned long long flags)
{
    cuGraphInstantiateWithFlags_params p = {phGraphExec, hGraph, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphInstantiateWithFlags, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && !phGraphExec)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraph_st *g = graph_of(hGraph);
        struct CUgraphExec_st *x = NULL;
        if (!g)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!(x = calloc(1, sizeof *x)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        for (sim_op_t *op = g ? g->head : NULL; r == CUDA_SUCCESS && op; op = op->next) {
            sim_op_t *n = node_clone(op);
            if (!n) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            n->orig = op; /* for the calls that name the graph's node (cuGraphNodeSetEnabled) */
            list_append(&x->head, &x->tail, n);
            x->nnodes++;
        }
        if (r == CUDA_SUCCESS) {
            x->magic = SIM_MAGIC_GEXEC;
            x->key = x;
            HASH_ADD(hh, g_sim.live_execs, key, sizeof(void *), x);
            *phGraphExec = (CUgraphExec)x;
        } else if (x) {
            nodes_free(x->head);
            free(x);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    cuGraphLaunch_params p = {hGraphExec, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphLaunch, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraphExec_st *x = exec_of(hGraphExec);
        struct CUstream_st *s = NULL;
        r = x ? sim_stream_resolve(hStream, &s) : CUDA_ERROR_INVALID_VALUE;
        CUresult how = r == CUDA_SUCCESS ? sim_capture_enqueue_check(s) : r;
        if (how != CUDA_SUCCESS && how != SIM_CAPTURED)
            r = how;
        /* Each node runs as an operation of its own on s, in capture order; into a
         * capture (a child graph), its nodes join the capture's. */
        for (sim_op_t *op = r == CUDA_SUCCESS ? x->head : NULL; op; op = op->next) {
            if (op->disabled)
                continue;
            sim_op_t *n = node_clone(op);
            if (!n) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            if (how == SIM_CAPTURED)
                sim_capture_node(s, n, op->engine, op->dur);
            else
                sim_enqueue_reported(s, n, op->engine, op->dur);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    cuGraphExecDestroy_params p = {hGraphExec};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphExecDestroy, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraphExec_st *x = exec_of(hGraphExec);
        if (!x) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            /* Launches already enqueued run copies of the nodes: freeing is safe. */
            HASH_DELETE(hh, g_sim.live_execs, x);
            nodes_free(x->head);
            x->magic = SIM_MAGIC_DEAD;
            free(x);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    cuGraphDestroy_params p = {hGraph};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphDestroy, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraph_st *g = graph_of(hGraph);
        int capturing = 0;
        for (sim_capture_t *cap = g_sim.captures; cap; cap = cap->next)
            capturing |= cap->graph == g;
        if (!g || capturing)
            r = CUDA_ERROR_INVALID_VALUE; /* a graph being captured into is the capture's */
        else
            graph_free_locked(g);
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ graph surgery
 *
 * A node handle is the node itself (a sim_op_t in its graph's list). A clone's nodes
 * remember the node each copies (orig), for cuGraphNodeFindInClone. Destroying a node
 * takes it out of its graph; the order of the rest, which a replay follows, stays. */

/* The live graph whose list holds node n (lock held), with the node before it. */
static struct CUgraph_st *graph_holding(const sim_op_t *n, sim_op_t **prev)
{
    for (struct CUgraph_st *g = g_sim.live_graphs; g; g = g->hh.next) {
        sim_op_t *p = NULL;
        for (sim_op_t *op = g->head; op; p = op, op = op->next)
            if (op == n) {
                *prev = p;
                return g;
            }
    }
    return NULL;
}

static int graph_captured_into(const struct CUgraph_st *g)
{
    for (sim_capture_t *cap = g_sim.captures; cap; cap = cap->next)
        if (cap->graph == g)
            return 1;
    return 0;
}

SIM_EXPORT CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    cuGraphClone_params p = {phGraphClone, originalGraph};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphClone, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && !phGraphClone)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraph_st *g = graph_of(originalGraph), *x = NULL;
        if (!g || graph_captured_into(g))
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!(x = graph_new_locked()))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        for (sim_op_t *op = g && x ? g->head : NULL; r == CUDA_SUCCESS && op; op = op->next) {
            sim_op_t *n = node_clone(op);
            if (!n) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            n->orig = op;
            list_append(&x->head, &x->tail, n);
            x->nnodes++;
        }
        if (r == CUDA_SUCCESS)
            *phGraphClone = (CUgraph)x;
        else if (x)
            graph_free_locked(x);
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                                   CUgraph hClonedGraph)
{
    cuGraphNodeFindInClone_params p = {phNode, hOriginalNode, hClonedGraph};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphNodeFindInClone, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && (!phNode || !hOriginalNode))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraph_st *g = graph_of(hClonedGraph);
        sim_op_t *found = NULL;
        for (sim_op_t *op = g ? g->head : NULL; op && !found; op = op->next)
            if (op->orig == (const sim_op_t *)hOriginalNode)
                found = op;
        if (found)
            *phNode = (CUgraphNode)found;
        else
            r = CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    cuGraphGetNodes_params p = {hGraph, nodes, numNodes};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphGetNodes, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && !numNodes)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraph_st *g = graph_of(hGraph);
        if (!g) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            /* As CUDA: with nodes, up to *numNodes written and *numNodes the count
             * written; without, *numNodes the count. */
            size_t k = 0;
            for (sim_op_t *op = g->head; op; op = op->next, k++)
                if (nodes && k < *numNodes)
                    nodes[k] = (CUgraphNode)op;
            *numNodes = nodes && *numNodes < k ? *numNodes : k;
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    cuGraphNodeGetType_params p = {hNode, type};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphNodeGetType, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && (!hNode || !type))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_op_t *prev;
        const sim_op_t *n = (const sim_op_t *)hNode;
        if (!graph_holding(n, &prev))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *type = n->kind == SIM_OP_KERNEL ? CU_GRAPH_NODE_TYPE_KERNEL
                  : n->kind == SIM_OP_COPY   ? CU_GRAPH_NODE_TYPE_MEMCPY
                  : n->kind == SIM_OP_MEMSET ? CU_GRAPH_NODE_TYPE_MEMSET
                  : n->kind == SIM_OP_HOSTFN ? CU_GRAPH_NODE_TYPE_HOST
                                             : CU_GRAPH_NODE_TYPE_EMPTY;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode)
{
    cuGraphDestroyNode_params p = {hNode};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphDestroyNode, &p, &r, 0);
    if (r == CUDA_SUCCESS && !hNode)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_op_t *prev = NULL, *n = (sim_op_t *)hNode;
        struct CUgraph_st *g = graph_holding(n, &prev);
        if (!g || graph_captured_into(g)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            if (prev)
                prev->next = n->next;
            else
                g->head = n->next;
            if (g->tail == n)
                g->tail = prev;
            g->nnodes--;
            n->next = NULL;
            nodes_free(n);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* The graph's nodes become the executable graph's (their parameters updated). CUDA
 * refuses a graph of another topology; the simulator's graphs are lists, so the same
 * count of nodes of the same kinds in the same order. */
SIM_EXPORT CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                                 CUgraphExecUpdateResultInfo *resultInfo)
{
    cuGraphExecUpdate_v2_params p = {hGraphExec, hGraph, resultInfo};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphExecUpdate_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraphExec_st *x = exec_of(hGraphExec);
        struct CUgraph_st *g = graph_of(hGraph);
        CUgraphExecUpdateResult how = CU_GRAPH_EXEC_UPDATE_SUCCESS;
        if (!x || !g) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            const sim_op_t *a = x->head, *b = g->head;
            for (; a && b; a = a->next, b = b->next)
                if (a->kind != b->kind)
                    break;
            if (a || b)
                how = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        }
        sim_op_t *head = NULL, *tail = NULL;
        for (const sim_op_t *op = r == CUDA_SUCCESS && how == CU_GRAPH_EXEC_UPDATE_SUCCESS ? g->head : NULL; op;
             op = op->next) {
            sim_op_t *n = node_clone(op);
            if (!n) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            list_append(&head, &tail, n);
        }
        if (r == CUDA_SUCCESS && how == CU_GRAPH_EXEC_UPDATE_SUCCESS) {
            nodes_free(x->head);
            x->head = head;
            x->tail = tail;
        } else {
            nodes_free(head);
            if (r == CUDA_SUCCESS)
                r = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        }
        if (resultInfo) {
            memset(resultInfo, 0, sizeof *resultInfo);
            resultInfo->result = how;
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* Turns an executable graph's node (named by the graph's node it was instantiated
 * from) off or on; a node turned off does nothing at launches. */
SIM_EXPORT CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
    cuGraphNodeSetEnabled_params p = {hGraphExec, hNode, isEnabled};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphNodeSetEnabled, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraphExec_st *x = exec_of(hGraphExec);
        sim_op_t *found = NULL;
        for (sim_op_t *op = x ? x->head : NULL; op && !found; op = op->next)
            if (op->orig == (const sim_op_t *)hNode)
                found = op;
        if (!found)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            found->disabled = !isEnabled;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

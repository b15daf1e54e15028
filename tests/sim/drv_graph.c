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
 * A graph is also built node by node, as XLA builds its command buffers: cuGraphCreate,
 * then kernel, memset, memcpy, empty and child graph nodes, each added after its
 * dependencies (live nodes of the same graph), so that the order the nodes were made
 * in, which a launch follows, honours them too. A child graph node embeds its own copy
 * of the child graph, whose nodes run in its place; cuGraphChildGraphNodeGetGraph hands
 * that embedded graph out, to be changed in place as any graph (it goes with its node).
 * cuGraphAddNode(_v2) adds any of these from its generic parameters.
 * cuStreamBeginCaptureToGraph captures into such a graph, after its nodes. A graph's
 * kernel, memset and memcpy nodes take new parameters, which the instantiations made
 * after see; executable graphs take new parameters node by node (kernel, memset,
 * memcpy, child graph), named by the graph's node.
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

/* Appends op to g as a node of `dur` ns on `engine`. */
static void graph_append(struct CUgraph_st *g, sim_op_t *op, int engine, uint64_t dur)
{
    op->engine = engine;
    op->dur = dur;
    op->corr = 0;
    list_append(&g->head, &g->tail, op);
    g->nnodes++;
}

void sim_capture_node(struct CUstream_st *s, sim_op_t *op, int engine, uint64_t dur)
{
    graph_append(s->cap->graph, op, engine, dur);
    s->cap_tip++;
    s->cap_last = op;
}

static struct CUgraph_st *graph_copy_locked(const struct CUgraph_st *from, sim_op_t *owner, int live);

/* A copy of node op, to run once (a replay) or to keep (an instantiation, a clone). A
 * child graph node's copy embeds a copy of its graph, a live handle when `live` (the
 * copy is a graph's node). Lock held. */
static sim_op_t *node_clone(const sim_op_t *op, int live)
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
    if (op->kind == SIM_OP_GRAPH && !(n->u.child.graph = graph_copy_locked(op->u.child.graph, n, live))) {
        free(n);
        return NULL;
    }
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

/* Copies the list `from` (child graphs deep, live as node_clone's) into *head, *tail,
 * each copy remembering the node it copies (orig). The number of nodes, or -1 when out
 * of memory (nothing kept). Lock held. */
static long nodes_copy(const sim_op_t *from, sim_op_t **head, sim_op_t **tail, int live)
{
    long k = 0;
    *head = *tail = NULL;
    for (const sim_op_t *op = from; op; op = op->next, k++) {
        sim_op_t *n = node_clone(op, live);
        if (!n) {
            nodes_free(*head);
            *head = *tail = NULL;
            return -1;
        }
        n->orig = op;
        list_append(head, tail, n);
    }
    return k;
}

/* Two lists of the same topology, as CUDA requires of an update: the simulator's
 * graphs are lists, so the same kinds in the same order, child graphs alike. */
static int same_shape(const sim_op_t *a, const sim_op_t *b)
{
    for (; a && b; a = a->next, b = b->next)
        if (a->kind != b->kind ||
            (a->kind == SIM_OP_GRAPH && !same_shape(a->u.child.graph->head, b->u.child.graph->head)))
            return 0;
    return !a && !b;
}

/* ------------------------------------------------------------------ handles */

/* A graph with no nodes; live: its handle valid (g_sim.live_graphs). */
static struct CUgraph_st *graph_alloc_locked(int live)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->magic = SIM_MAGIC_GRAPH;
    g->key = g;
    g->live = live;
    if (live)
        HASH_ADD(hh, g_sim.live_graphs, key, sizeof(void *), g);
    return g;
}

static struct CUgraph_st *graph_new_locked(void)
{
    return graph_alloc_locked(1);
}

/* Embedded graphs of its child graph nodes go with it (sim_op_free), their handles
 * with them. */
void sim_graph_free(struct CUgraph_st *g)
{
    if (!g)
        return;
    if (g->live)
        HASH_DELETE(hh, g_sim.live_graphs, g);
    nodes_free(g->head);
    g->magic = SIM_MAGIC_DEAD;
    free(g);
}

/* A copy of graph `from` (nodes and embedded graphs deep) for child graph node owner:
 * a live handle when the node is a graph's (live), NULL when out of memory. */
static struct CUgraph_st *graph_copy_locked(const struct CUgraph_st *from, sim_op_t *owner, int live)
{
    struct CUgraph_st *g = graph_alloc_locked(live);
    long n = g ? nodes_copy(from->head, &g->head, &g->tail, live) : -1;
    if (n < 0) {
        sim_graph_free(g);
        return NULL;
    }
    g->nnodes = (size_t)n;
    g->owner = owner;
    return g;
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

static int graph_captured_into(const struct CUgraph_st *g)
{
    for (sim_capture_t *cap = g_sim.captures; cap; cap = cap->next)
        if (cap->graph == g)
            return 1;
    return 0;
}

/* A capture records into g or into a graph embedded in it, at any depth: g may be
 * neither copied (its contents are the capture's until it ends) nor freed (the
 * capture would record into freed memory). */
static int graph_busy(const struct CUgraph_st *g)
{
    if (graph_captured_into(g))
        return 1;
    for (const sim_op_t *op = g->head; op; op = op->next)
        if (op->kind == SIM_OP_GRAPH && graph_busy(op->u.child.graph))
            return 1;
    return 0;
}

/* deps (n of them) are live nodes of g, as CUDA requires of a new node's dependencies.
 * Each is in g's list, which runs in creation order: they run before the new node. */
static int deps_in_graph(const struct CUgraph_st *g, const CUgraphNode *deps, size_t n)
{
    if (n > 0 && !deps)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const sim_op_t *op = g->head;
        while (op && op != (const sim_op_t *)deps[i])
            op = op->next;
        if (!op)
            return 0;
    }
    return 1;
}

/* The executable graph's node made from graph node n (top level, as CUDA names them). */
static sim_op_t *exec_node(struct CUgraphExec_st *x, CUgraphNode n)
{
    for (sim_op_t *op = x ? x->head : NULL; op; op = op->next)
        if (op->orig == (const sim_op_t *)n)
            return op;
    return NULL;
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

/* A capture on h into a graph of its own, or (into) after the nodes of the caller's
 * graph, its first node depending on deps (ndeps nodes of that graph). */
static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, CUgraph into, const CUgraphNode *deps,
                              size_t ndeps)
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
    struct CUgraph_st *g = NULL;
    if (r == CUDA_SUCCESS && into &&
        (!(g = graph_of(into)) || graph_captured_into(g) || !deps_in_graph(g, deps, ndeps)))
        r = CUDA_ERROR_INVALID_VALUE;
    sim_capture_t *c = NULL;
    if (r == CUDA_SUCCESS && (!(c = calloc(1, sizeof *c)) || (!into && !(g = graph_new_locked()))))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && capture_add_stream(c, s) != 0) {
        if (!into)
            sim_graph_free(g);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        c->id = ++g_sim.next_capture_id;
        c->origin = s;
        c->mode = mode;
        c->thread = pthread_self();
        c->graph = g;
        c->into = into != NULL;
        c->base = g->tail;
        /* What the next node depends on, as cuStreamGetCaptureInfo tells it; CUDA lists
         * every dependency, the simulator keeps the last. */
        s->cap_last = ndeps > 0 ? (sim_op_t *)deps[ndeps - 1] : NULL;
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
        r = begin_capture(hStream, mode, NULL, NULL, 0);
    sim_api_exit(&c);
    return r;
}

/* Edge data the simulator has: none, or all default (no ports, no programmatic
 * dependencies). */
static int default_edges(const CUgraphEdgeData *edges, size_t n)
{
    static const CUgraphEdgeData none;
    for (size_t i = 0; edges && i < n; i++)
        if (memcmp(&edges[i], &none, sizeof none) != 0)
            return 0;
    return 1;
}

/* A capture into hGraph, which keeps its nodes: the captured ones come after them, and
 * cuStreamEndCapture gives hGraph back. */
SIM_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                        const CUgraphNode *dependencies,
                                                        const CUgraphEdgeData *dependencyData,
                                                        size_t numDependencies, CUstreamCaptureMode mode)
{
    cuStreamBeginCaptureToGraph_params p = {hStream, hGraph, dependencies, dependencyData, numDependencies, mode};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuStreamBeginCaptureToGraph, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && !hGraph)
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS && !default_edges(dependencyData, numDependencies))
        r = CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS)
        r = begin_capture(hStream, mode, hGraph, dependencies, numDependencies);
    sim_api_exit(&c);
    return r;
}

/* An invalidated capture into the caller's graph: the captured nodes go, the graph and
 * its own nodes stay (CUDA destroys no graph it did not make). */
static void drop_captured(sim_capture_t *c)
{
    struct CUgraph_st *g = c->graph;
    sim_op_t *first = c->base ? c->base->next : g->head;
    if (c->base)
        c->base->next = NULL;
    else
        g->head = NULL;
    g->tail = c->base;
    for (const sim_op_t *op = first; op; op = op->next)
        g->nnodes--;
    nodes_free(first);
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
                if (cap->into)
                    drop_captured(cap);
                else
                    sim_graph_free(g);
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
        long n = 0;
        if (!g)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!(x = calloc(1, sizeof *x)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        /* Each copy remembers its graph node (orig), for the calls that name it
         * (cuGraphNodeSetEnabled, cuGraphExec*NodeSetParams). */
        else if ((n = nodes_copy(g->head, &x->head, &x->tail, 0)) < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS) {
            x->nnodes = (size_t)n;
            x->magic = SIM_MAGIC_GEXEC;
            x->key = x;
            HASH_ADD(hh, g_sim.live_execs, key, sizeof(void *), x);
            *phGraphExec = (CUgraphExec)x;
        } else {
            free(x);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* Each node runs as an operation of its own on s, in order, a child graph's nodes in
 * its place; into a capture (how: SIM_CAPTURED, a child graph), they join the
 * capture's. Lock held. */
static CUresult launch_nodes(struct CUstream_st *s, const sim_op_t *head, CUresult how)
{
    for (const sim_op_t *op = head; op; op = op->next) {
        if (op->disabled)
            continue;
        if (op->kind == SIM_OP_GRAPH) {
            CUresult r = launch_nodes(s, op->u.child.graph->head, how);
            if (r != CUDA_SUCCESS)
                return r;
            continue;
        }
        sim_op_t *n = node_clone(op, 0);
        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (how == SIM_CAPTURED)
            sim_capture_node(s, n, op->engine, op->dur);
        else
            sim_enqueue_reported(s, n, op->engine, op->dur);
    }
    return CUDA_SUCCESS;
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
        if (r == CUDA_SUCCESS)
            r = launch_nodes(s, x->head, how);
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
        /* A graph being captured into (or one embedded in it) is the capture's; an
         * embedded graph is its node's, and goes with it. */
        if (!g || g->owner || graph_busy(g))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            sim_graph_free(g);
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
        long n = 0;
        if (!g || graph_busy(g))
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!(x = graph_new_locked()))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else if ((n = nodes_copy(g->head, &x->head, &x->tail, 1)) < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS) {
            x->nnodes = (size_t)n;
            *phGraphClone = (CUgraph)x;
        } else if (x) {
            sim_graph_free(x);
        }
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
                  : n->kind == SIM_OP_GRAPH  ? CU_GRAPH_NODE_TYPE_GRAPH
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
        if (!g || graph_captured_into(g) || (n->kind == SIM_OP_GRAPH && graph_busy(n->u.child.graph))) {
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

/* The graph's nodes become the executable graph's (their parameters updated), each
 * still named by the node the executable graph was instantiated from. CUDA refuses a
 * graph of another topology (same_shape). */
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
        if (!x || !g)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (!same_shape(x->head, g->head))
            how = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
        sim_op_t *head = NULL, *tail = NULL;
        if (r == CUDA_SUCCESS && how == CU_GRAPH_EXEC_UPDATE_SUCCESS && nodes_copy(g->head, &head, &tail, 0) < 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r == CUDA_SUCCESS && how == CU_GRAPH_EXEC_UPDATE_SUCCESS) {
            for (sim_op_t *a = x->head, *b = head; b; a = a->next, b = b->next)
                b->orig = a->orig;
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
        sim_op_t *found = exec_node(exec_of(hGraphExec), hNode);
        if (!found)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            found->disabled = !isEnabled;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ graphs built node by node
 *
 * Each node is appended to its graph's list after checking that its dependencies are
 * live nodes of that graph: they precede it, and a launch runs the list in order. Its
 * parameters are copied when it is added, as CUDA copies them (a kernel's argument
 * values, a child graph's nodes). */

SIM_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    cuGraphCreate_params p = {phGraph, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphCreate, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && (!phGraph || flags != 0))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUgraph_st *g = graph_new_locked();
        if (g)
            *phGraph = (CUgraph)g;
        else
            r = CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* Adds op to graph h, a node of `dur` ns on `engine` after its dependencies: the end of
 * every cuGraphAdd*Node (lock held). Takes op, freed on failure. A graph a capture
 * records into is the capture's until it ends: nothing else is added to it. */
static CUresult add_node_locked(CUgraphNode *node, CUgraph h, const CUgraphNode *deps, size_t ndeps, sim_op_t *op,
                                int engine, uint64_t dur)
{
    struct CUgraph_st *g = graph_of(h);
    if (!g || graph_captured_into(g) || !deps_in_graph(g, deps, ndeps)) {
        sim_op_free(op);
        return CUDA_ERROR_INVALID_VALUE;
    }
    graph_append(g, op, engine, dur);
    *node = (CUgraphNode)op;
    return CUDA_SUCCESS;
}

/* A kernel node's parameters as a kernel operation (its arguments copied) and its
 * duration: func, or kern when func is NULL, whose ctx the simulator only checks (its
 * kernels run in any context). Without the lock. */
static CUresult kernel_node_op(const CUDA_KERNEL_NODE_PARAMS *p, sim_op_t **op, uint64_t *cost)
{
    if (!p || (!p->func && !p->kern))
        return CUDA_ERROR_INVALID_VALUE;
    if (!p->func && p->ctx && !sim_ctx_valid(p->ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_launch_dims_t d = {{p->gridDimX, p->gridDimY, p->gridDimZ},
                           {p->blockDimX, p->blockDimY, p->blockDimZ},
                           p->sharedMemBytes};
    CUresult r = sim_kernel_op_new(p->func ? p->func : (CUfunction)p->kern, &d, p->kernelParams, p->extra, op, cost);
    if (r == CUDA_SUCCESS) {
        /* Arguments naming memory the current device may not reach fault when the
         * node runs, as a captured launch's do. */
        pthread_mutex_lock(&g_sim.lock);
        struct CUctx_st *ctx = sim_current_ctx();
        if (ctx)
            sim_kernel_op_check_peer(*op, ctx->dev);
        pthread_mutex_unlock(&g_sim.lock);
    }
    return r;
}

/* The CUDA 11 parameters (no kern, no ctx) in the current layout; NULL stays NULL. */
static const CUDA_KERNEL_NODE_PARAMS *kernel_params_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *p, CUDA_KERNEL_NODE_PARAMS *v2)
{
    if (!p)
        return NULL;
    memset(v2, 0, sizeof *v2);
    v2->func = p->func;
    v2->gridDimX = p->gridDimX;
    v2->gridDimY = p->gridDimY;
    v2->gridDimZ = p->gridDimZ;
    v2->blockDimX = p->blockDimX;
    v2->blockDimY = p->blockDimY;
    v2->blockDimZ = p->blockDimZ;
    v2->sharedMemBytes = p->sharedMemBytes;
    v2->kernelParams = p->kernelParams;
    v2->extra = p->extra;
    return v2;
}

static CUresult add_kernel_node(CUgraphNode *node, CUgraph h, const CUgraphNode *deps, size_t ndeps,
                                const CUDA_KERNEL_NODE_PARAMS *p)
{
    if (!node)
        return CUDA_ERROR_INVALID_VALUE;
    sim_op_t *op;
    uint64_t cost;
    CUresult r = kernel_node_op(p, &op, &cost);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        r = add_node_locked(node, h, deps, ndeps, op, SIM_ENG_COMPUTE, cost);
        pthread_mutex_unlock(&g_sim.lock);
    }
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                    const CUgraphNode *dependencies, size_t numDependencies,
                                                    const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    cuGraphAddKernelNode_v2_params p = {phGraphNode, hGraph, dependencies, numDependencies, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphAddKernelNode_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode *dependencies, size_t numDependencies,
                                                 const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    cuGraphAddKernelNode_params p = {phGraphNode, hGraph, dependencies, numDependencies, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphAddKernelNode, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        CUDA_KERNEL_NODE_PARAMS v2;
        r = add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, kernel_params_v2(nodeParams, &v2));
    }
    sim_api_exit(&c);
    return r;
}

/* Node h of a graph, of kind `kind`, when it may take new parameters: a live node of a
 * graph (an embedded one included) that no capture records into, as CUDA refuses
 * changes to such a graph as it refuses new nodes. NULL otherwise. Lock held. */
static sim_op_t *graph_node_to_set(CUgraphNode h, sim_op_kind_t kind)
{
    sim_op_t *prev, *n = (sim_op_t *)h;
    struct CUgraph_st *g = n ? graph_holding(n, &prev) : NULL;
    return g && !graph_captured_into(g) && n->kind == kind ? n : NULL;
}

/* Kernel node n takes op's kernel, geometry, arguments and duration; op goes. */
static void kernel_node_take(sim_op_t *n, sim_op_t *op, uint64_t cost)
{
    free(n->u.kern.argbuf);
    free(n->u.kern.args);
    n->u.kern = op->u.kern;
    n->dur = cost;
    op->u.kern.argbuf = NULL;
    op->u.kern.args = NULL;
    sim_op_free(op);
}

/* A graph's kernel node (x NULL), or the executable graph x's node made from it, takes
 * new parameters. */
static CUresult kernel_node_set(CUgraphExec x, CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p)
{
    sim_op_t *op;
    uint64_t cost;
    CUresult r = h ? kernel_node_op(p, &op, &cost) : CUDA_ERROR_INVALID_VALUE;
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_sim.lock);
    sim_op_t *n = x ? exec_node(exec_of(x), h) : graph_node_to_set(h, SIM_OP_KERNEL);
    if (n && n->kind == SIM_OP_KERNEL) {
        kernel_node_take(n, op, cost);
    } else {
        sim_op_free(op);
        r = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    cuGraphKernelNodeSetParams_v2_params p = {hNode, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphKernelNodeSetParams_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = kernel_node_set(NULL, hNode, nodeParams);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    cuGraphKernelNodeSetParams_params p = {hNode, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphKernelNodeSetParams, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        CUDA_KERNEL_NODE_PARAMS v2;
        r = kernel_node_set(NULL, hNode, kernel_params_v2(nodeParams, &v2));
    }
    sim_api_exit(&c);
    return r;
}

/* CUDA wants the new function in the node's context; the simulator takes any kernel. */
SIM_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                              const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    cuGraphExecKernelNodeSetParams_v2_params p = {hGraphExec, hNode, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphExecKernelNodeSetParams_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = hGraphExec ? kernel_node_set(hGraphExec, hNode, nodeParams) : CUDA_ERROR_INVALID_VALUE;
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                           const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    cuGraphExecKernelNodeSetParams_params p = {hGraphExec, hNode, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphExecKernelNodeSetParams, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        CUDA_KERNEL_NODE_PARAMS v2;
        r = hGraphExec ? kernel_node_set(hGraphExec, hNode, kernel_params_v2(nodeParams, &v2))
                       : CUDA_ERROR_INVALID_VALUE;
    }
    sim_api_exit(&c);
    return r;
}

/* A memset node's parameters as an operation and its duration (lock held), in context
 * ctx (NODE_CTX: the node's own, which a graph-level setter keeps). The simulator sets
 * 1-D ranges: a set of several rows is CUDA_ERROR_NOT_SUPPORTED. */
#define NODE_CTX ((CUcontext)(uintptr_t)-1)
static CUresult memset_node_op(const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx, sim_op_t **out, uint64_t *dur)
{
    if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || p->width == 0 ||
        p->height == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx != NODE_CTX && !sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (p->height != 1)
        return CUDA_ERROR_NOT_SUPPORTED;
    void *dst = (void *)(uintptr_t)p->dst;
    size_t bytes = p->width * p->elementSize;
    if (!sim_in_arena(dst, bytes) || p->dst % p->elementSize || !sim_mem_device_of(dst))
        return CUDA_ERROR_INVALID_VALUE;
    sim_op_t *op = sim_op_new(SIM_OP_MEMSET);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.memset.dst = dst;
    op->u.memset.value = p->value;
    op->u.memset.elem = p->elementSize;
    op->u.memset.count = p->width;
    op->async = 1;
    *dur = sim_copy_duration(bytes, g_sim.opt.D2D_GBPS);
    *out = op;
    return CUDA_SUCCESS;
}

static CUresult add_memset_node(CUgraphNode *node, CUgraph h, const CUgraphNode *deps, size_t ndeps,
                                const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    if (!node)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    sim_op_t *op;
    uint64_t dur;
    CUresult r = memset_node_op(p, ctx, &op, &dur);
    if (r == CUDA_SUCCESS)
        r = add_node_locked(node, h, deps, ndeps, op, SIM_ENG_COMPUTE, dur);
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode *dependencies, size_t numDependencies,
                                                 const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    cuGraphAddMemsetNode_params p = {phGraphNode, hGraph, dependencies, numDependencies, memsetParams, ctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphAddMemsetNode, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = add_memset_node(phGraphNode, hGraph, dependencies, numDependencies, memsetParams, ctx);
    sim_api_exit(&c);
    return r;
}

/* One end of a CUDA_MEMCPY3D copy of `bytes`: its address, the base plus the offsets
 * as CUDA adds them, which its memory type must allow (lock held). Device memory is
 * the arena's, with memory mapped; the simulator has no CUDA arrays. */
static CUresult copy_end(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z,
                         size_t pitch, size_t height, size_t bytes, void **out)
{
    if (type == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return CUDA_ERROR_INVALID_VALUE;
    const char *base = type == CU_MEMORYTYPE_HOST ? host : (const char *)(uintptr_t)dev;
    if (!base)
        return CUDA_ERROR_INVALID_VALUE;
    char *p = (char *)base + (z * height + y) * pitch + x;
    int device = sim_in_arena(p, bytes);
    if ((type == CU_MEMORYTYPE_HOST && device) || (type == CU_MEMORYTYPE_DEVICE && !device) ||
        (device && !sim_mem_device_of(p)))
        return CUDA_ERROR_INVALID_VALUE;
    *out = p;
    return CUDA_SUCCESS;
}

/* A memcpy node's parameters as an operation, its engine and duration (lock held), in
 * context ctx (NODE_CTX as for memset_node_op). The simulator copies 1-D ranges:
 * several rows or planes are CUDA_ERROR_NOT_SUPPORTED. The node reads its source when
 * it runs. */
static CUresult copy_node_op(const CUDA_MEMCPY3D *p, CUcontext ctx, sim_op_t **out, int *engine, uint64_t *dur)
{
    if (!p || p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ctx != NODE_CTX && !sim_ctx_valid(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (p->Height != 1 || p->Depth != 1)
        return CUDA_ERROR_NOT_SUPPORTED;
    void *src, *dst;
    CUresult r = copy_end(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
                          p->srcHeight, p->WidthInBytes, &src);
    if (r == CUDA_SUCCESS)
        r = copy_end(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
                     p->dstHeight, p->WidthInBytes, &dst);
    if (r == CUDA_SUCCESS && !(*out = sim_copy_op_new(dst, src, p->WidthInBytes, engine, dur)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS)
        (*out)->async = 1;
    return r;
}

static CUresult add_memcpy_node(CUgraphNode *node, CUgraph h, const CUgraphNode *deps, size_t ndeps,
                                const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    if (!node)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    sim_op_t *op;
    int engine;
    uint64_t dur;
    CUresult r = copy_node_op(p, ctx, &op, &engine, &dur);
    if (r == CUDA_SUCCESS)
        r = add_node_locked(node, h, deps, ndeps, op, engine, dur);
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode *dependencies, size_t numDependencies,
                                                 const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    cuGraphAddMemcpyNode_params p = {phGraphNode, hGraph, dependencies, numDependencies, copyParams, ctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphAddMemcpyNode, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = add_memcpy_node(phGraphNode, hGraph, dependencies, numDependencies, copyParams, ctx);
    sim_api_exit(&c);
    return r;
}

static CUresult add_empty_node(CUgraphNode *node, CUgraph h, const CUgraphNode *deps, size_t ndeps)
{
    if (!node)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    sim_op_t *op = sim_op_new(SIM_OP_MARKER);
    CUresult r = op ? add_node_locked(node, h, deps, ndeps, op, SIM_ENG_NONE, 0) : CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                const CUgraphNode *dependencies, size_t numDependencies)
{
    cuGraphAddEmptyNode_params p = {phGraphNode, hGraph, dependencies, numDependencies};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphAddEmptyNode, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = add_empty_node(phGraphNode, hGraph, dependencies, numDependencies);
    sim_api_exit(&c);
    return r;
}

/* A copy of the child graph h for child graph node owner (lock held), live as
 * graph_copy_locked's: h must be a graph no capture is recording into (nor into a graph
 * embedded in it). */
static CUresult child_copy(CUgraph h, sim_op_t *owner, int live, struct CUgraph_st **out)
{
    struct CUgraph_st *child = graph_of(h);
    if (!child || graph_busy(child))
        return CUDA_ERROR_INVALID_VALUE;
    return (*out = graph_copy_locked(child, owner, live)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* The node embeds its own copy of the child (CUDA clones the child): the child may
 * change or go, the node stays as it was added. Its embedded graph is changed only in
 * place (cuGraphChildGraphNodeGetGraph). */
static CUresult add_child_node(CUgraphNode *node, CUgraph h, const CUgraphNode *deps, size_t ndeps, CUgraph child)
{
    if (!node || child == h)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    sim_op_t *op = sim_op_new(SIM_OP_GRAPH);
    if (op)
        r = child_copy(child, op, 1, &op->u.child.graph);
    if (r == CUDA_SUCCESS)
        r = add_node_locked(node, h, deps, ndeps, op, SIM_ENG_NONE, 0);
    else
        free(op);
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                                     const CUgraphNode *dependencies, size_t numDependencies,
                                                     CUgraph childGraph)
{
    cuGraphAddChildGraphNode_params p = {phGraphNode, hGraph, dependencies, numDependencies, childGraph};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphAddChildGraphNode, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = add_child_node(phGraphNode, hGraph, dependencies, numDependencies, childGraph);
    sim_api_exit(&c);
    return r;
}

/* cuGraphAddNode's parameters, by type, through the add path of that type's own
 * cuGraphAdd*Node. The simulator has kernel, memset, memcpy, empty and child graph
 * nodes; any other type is CUDA_ERROR_NOT_SUPPORTED. A memset or memcpy node's NULL
 * context is the current one. A child graph is always cloned: the simulator treats
 * CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE as CLONE, so the caller keeps the child graph
 * (and destroys it) where CUDA would have handed it to the parent. */
static CUresult add_generic_node(CUgraphNode *node, CUgraph h, const CUgraphNode *deps, size_t ndeps,
                                 const CUgraphNodeParams *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
        const CUDA_KERNEL_NODE_PARAMS_v3 *k = &p->kernel;
        CUDA_KERNEL_NODE_PARAMS v2 = {k->func, k->gridDimX, k->gridDimY, k->gridDimZ, k->blockDimX,
                                      k->blockDimY, k->blockDimZ, k->sharedMemBytes, k->kernelParams,
                                      k->extra, k->kern, k->ctx};
        return add_kernel_node(node, h, deps, ndeps, &v2);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
        CUDA_MEMSET_NODE_PARAMS v1 = {m->dst, m->pitch, m->value, m->elementSize, m->width, m->height};
        return add_memset_node(node, h, deps, ndeps, &v1, m->ctx ? m->ctx : (CUcontext)sim_current_ctx());
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags || p->memcpy.reserved)
            return CUDA_ERROR_INVALID_VALUE;
        return add_memcpy_node(node, h, deps, ndeps, &p->memcpy.copyParams,
                               p->memcpy.copyCtx ? p->memcpy.copyCtx : (CUcontext)sim_current_ctx());
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return add_empty_node(node, h, deps, ndeps);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE &&
            p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE)
            return CUDA_ERROR_INVALID_VALUE;
        return add_child_node(node, h, deps, ndeps, p->graph.graph);
    default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/* The generic form CUDA recommends for new code (CUDA 12.3). Edge data as
 * cuStreamBeginCaptureToGraph's: only the default. */
SIM_EXPORT CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                              const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
                                              size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    cuGraphAddNode_v2_params p = {phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphAddNode_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && !default_edges(dependencyData, numDependencies))
        r = CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS)
        r = add_generic_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
    sim_api_exit(&c);
    return r;
}

/* The CUDA 12.2 form, without edge data. */
SIM_EXPORT CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                           size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    cuGraphAddNode_params p = {phGraphNode, hGraph, dependencies, numDependencies, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphAddNode, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = add_generic_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
    sim_api_exit(&c);
    return r;
}

/* The graph child graph node hNode embeds, not a copy: nodes added to it, destroyed in
 * it or given new parameters are what the node runs from then on (in the
 * instantiations and clones made after), and its nodes stay valid handles while the
 * node lives. The node owns it: cuGraphDestroy refuses it, and it goes with the node
 * (the node destroyed, or its graph). */
SIM_EXPORT CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    cuGraphChildGraphNodeGetGraph_params p = {hNode, phGraph};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphChildGraphNodeGetGraph, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && (!hNode || !phGraph))
        r = CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_op_t *prev, *n = (sim_op_t *)hNode;
        if (graph_holding(n, &prev) && n->kind == SIM_OP_GRAPH)
            *phGraph = (CUgraph)n->u.child.graph;
        else
            r = CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* The executable graph's child graph node made from hNode runs a copy of childGraph's
 * nodes from now on. CUDA requires the child's topology to be the node's (same_shape). */
SIM_EXPORT CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                               CUgraph childGraph)
{
    cuGraphExecChildGraphNodeSetParams_params p = {hGraphExec, hNode, childGraph};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphExecChildGraphNodeSetParams, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_op_t *n = exec_node(exec_of(hGraphExec), hNode);
        struct CUgraph_st *child = graph_of(childGraph), *copy = NULL;
        if (!n || n->kind != SIM_OP_GRAPH || !child || !same_shape(n->u.child.graph->head, child->head))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            r = child_copy(childGraph, n, 0, &copy);
        if (r == CUDA_SUCCESS) {
            sim_graph_free(n->u.child.graph);
            n->u.child.graph = copy;
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* CUDA requires the same memory (contexts, 1-D) as the node's: the simulator checks
 * the new range as a new node's. */
SIM_EXPORT CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                           const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    cuGraphExecMemsetNodeSetParams_params p = {hGraphExec, hNode, memsetParams, ctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphExecMemsetNodeSetParams, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_op_t *n = exec_node(exec_of(hGraphExec), hNode), *op;
        uint64_t dur;
        r = n && n->kind == SIM_OP_MEMSET ? memset_node_op(memsetParams, ctx, &op, &dur) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS) {
            n->u.memset = op->u.memset;
            n->dur = dur;
            sim_op_free(op);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* As for the memset: and the copy keeps its direction (host to device stays one). */
SIM_EXPORT CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                           const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    cuGraphExecMemcpyNodeSetParams_params p = {hGraphExec, hNode, copyParams, ctx};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphExecMemcpyNodeSetParams, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_op_t *n = exec_node(exec_of(hGraphExec), hNode), *op;
        int engine;
        uint64_t dur;
        r = n && n->kind == SIM_OP_COPY ? copy_node_op(copyParams, ctx, &op, &engine, &dur) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS && op->u.copy.copy_kind != n->u.copy.copy_kind) {
            sim_op_free(op);
            r = CUDA_ERROR_INVALID_VALUE;
        }
        if (r == CUDA_SUCCESS) {
            n->u.copy = op->u.copy;
            n->engine = engine;
            n->dur = dur;
            sim_op_free(op);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* A graph's memset node takes a new 1-D range, checked as a new node's: the
 * instantiations made after run it, the executable graphs made before keep theirs
 * (CUDA copies a graph at instantiation). The node keeps its context. */
SIM_EXPORT CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    cuGraphMemsetNodeSetParams_params p = {hNode, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphMemsetNodeSetParams, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_op_t *n = graph_node_to_set(hNode, SIM_OP_MEMSET), *op;
        uint64_t dur;
        r = n ? memset_node_op(nodeParams, NODE_CTX, &op, &dur) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS) {
            n->u.memset = op->u.memset;
            n->dur = dur;
            sim_op_free(op);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* As for the memset; unlike an executable graph's, a graph's copy may change direction
 * (its engine and duration follow). */
SIM_EXPORT CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    cuGraphMemcpyNodeSetParams_params p = {hNode, nodeParams};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuGraphMemcpyNodeSetParams, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_op_t *n = graph_node_to_set(hNode, SIM_OP_COPY), *op;
        int engine;
        uint64_t dur;
        r = n ? copy_node_op(nodeParams, NODE_CTX, &op, &engine, &dur) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS) {
            n->u.copy = op->u.copy;
            n->engine = engine;
            n->dur = dur;
            sim_op_free(op);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

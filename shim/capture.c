/* capture.c - CUDA stream captures and the graphs they make: which captures are under
 * way (while one is, FlexTensor does nothing that CUDA forbids during a capture), what
 * each capture's launches, copies and sets touch (from the argument scan, pure host
 * work), carried to the graph it makes, to its executable graphs, and loaded before
 * each launch of one (the units loaded before the launch, not inside the graph).
 *
 * During a capture nothing captured runs, and CUDA refuses (and invalidates the
 * capture for) a synchronisation or query of a capturing stream, the legacy stream
 * while a blocking stream captures, queries of events recorded in it, and potentially
 * unsafe calls (allocations, VMM changes, synchronous copies) from a thread whose
 * capture mode forbids them. So while any capture is under way in the process:
 * discovery, profiling and FT_SPILL's moves stand still (observe.c, hooks_copy.c); a
 * captured call is only recorded here; a call outside the capture is guarded as usual,
 * its own work done in relaxed capture mode (capture_relax), so that the loads it
 * needs are not taken for the application's unsafe calls.
 *
 * At a graph launch (capture_graph_launch), every streamed unit the graph's captured
 * calls touch is loaded before it, on the launch stream, and its use recorded behind
 * it (unloads wait for the graph to complete); before the plan, FT_SPILL brings the
 * graph's allocations in and waits for the graph. A graph FlexTensor did not see
 * captured (built node by node) may touch anything: every streamed unit is loaded.
 *
 * A graph that reads more streamed units than the slots hold is cut instead (FT_GRAPH_CUT,
 * docs/residency.md "CUDA graphs"): each captured call's node is asked for as it is
 * captured (cuStreamGetCaptureInfo: the node the stream's next one would follow), and at
 * instantiation, when every node of the graph is one of them, a clone of the graph is
 * kept. Capture order is an order of the graph's dependencies, so the calls cut where a
 * call first touches a streamed unit its segment has not (a layer's weights) give
 * segments that run one after another on the launch stream: each segment is the clone
 * with every node of the others destroyed, instantiated once per plan. A launch of the
 * graph launches the segments in order, each guarded as an eager call touching its units
 * (loaded or waited for, their use recorded behind it), the prefetch of the units that
 * follow issued after it: the graph streams as eager launches do, its kernels replayed.
 * A launch on another stream than the last one first waits for the last one's end, as
 * CUDA orders launches of one executable graph. The application changing an executable
 * graph (cudaGraphExecUpdate, a node's parameters) makes its touches unknown: every
 * streamed unit is loaded for it from then on.
 *
 * In discovery and profiling a graph's launches are observed as its captured calls, in
 * capture order (each call's kernel, regions and pointers kept for it): a program whose
 * work is graph replays is discovered and profiled from them; profiling launches the
 * graph in parts cut where a unit's time begins, its events between them.
 *
 * Owns: the captures under way, the graphs and the executable graphs (cap_lock, a
 * mutex: begin, end, instantiation, destruction and graph launches are rare; captured
 * calls add to their capture under it), the count of captures under way (atomic: every
 * launch, copy and set reads it once) and the thread's relaxed flag (thread-local). */
#define _GNU_SOURCE
#include "shim/engine.h"

/* What a capture's calls touch: device addresses, one per region (ids kept beside
 * them for the check), or everything (`all`: a call whose scan set lost regions). */
typedef struct {
    uint64_t *ptr;
    uint32_t *id;
    size_t n, cap;
    int all;
} touches_t;

/* A captured call in capture order: the graph node it made (NULL: not known), what it
 * was (a kernel's key and name, as observe.c knows them; key 0: a copy or set, which
 * writes its first `written` regions) and its regions, entry first .. first + n of its
 * owner's calls_t. */
typedef struct {
    CUgraphNode node;
    CUgraphNode orig; /* the node in the application's graph (node: the clone's, once cloned) */
    uint64_t key;
    const char *name;
    size_t first, n, written;
} call_t;

/* Per region entry: its id, the pointer that led to it and the lowest one (as the scan
 * set has them), and its flags (CALL_INDIRECT, CALL_UNSURE). */
enum { CALL_INDIRECT = 1, CALL_UNSURE = 2 };

typedef struct {
    call_t *v;
    size_t n, cap;
    uint32_t *ids;
    uint64_t *ptr, *lo;
    uint8_t *flags;
    size_t n_ids, cap_ids;
    int broken; /* a call's node not had (or lost): the graph is not cut */
    int lost;   /* a call not kept (no memory): its launches are not observed either */
} calls_t;

/* A segment of a cut graph: its executable graph (FlexTensor's) and the graph it was
 * instantiated from (kept: a node change of the application's executable graph is made
 * again on the segment's, which names the node by that graph's), the regions its calls
 * touch, and its place in the pass (res_guard_segment's begins and ends). */
typedef struct {
    CUgraphExec exec;
    CUgraph graph;
    uint32_t *ids;
    uint64_t *lo;             /* per id, its calls' lowest pointers there, the highest of them (0: not
                                 known): whether a call reaches on into the next piece (res.follow) */
    size_t n;
    int begins, ends;
} seg_t;

/* A capture under way (by its CUDA id), a graph or an executable graph (by handle). */
typedef struct touch_owner {
    uint64_t key;
    touches_t t;
    calls_t calls;            /* a capture's and a graph's calls; an exec's, its clone's nodes */
    /* An executable graph that can be cut: the graph it was instantiated from, cloned
     * (NULL: none), its instantiation flags, its segments for plan seg_plan
     * (res.switches; n_seg 0: none, uncut, or not needed), and why it is not cut. */
    CUgraph clone;
    unsigned long long flags;
    seg_t *seg;
    int n_seg;
    uint64_t seg_plan;
    int cut_said;
    char why[96];             /* why it has no clone ("": none asked, or it has one) */
    int stale;                /* the clone missed a node change: the segments are not made again */
    /* Child graph nodes the application set on the executable graph since the clone
     * was made (CUDA has no graph-level form): the clone's node and a copy of the child,
     * set on each segment and part as it is made. */
    CUgraphNode *re_node;
    CUgraph *re_child;
    int n_re;
    int to_graph;             /* a capture into an existing graph (cudaStreamBeginCaptureToGraph) */
    /* Profiling's cut (its calls cut where a unit's time begins, as the profiled pass
     * fell at its last launch): the first call of each of its p_n parts, their
     * executable graphs, and how many times it was made. */
    size_t *p_first;
    CUgraphExec *p_exec;
    CUgraph *p_graph;
    int p_n, p_made;
    /* The end of its last segmented launch, on last_stream (done_set: recorded). */
    cudaEvent_t done;
    cudaStream_t last_stream;
    int done_set;
    struct touch_owner *next;
} owner_t;

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static owner_t *captures, *graphs, *execs;
static int under_way; /* captures under way: atomic, read without cap_lock */
static uint64_t graph_launches, graph_units_loaded; /* cap_lock, for the exit report */
static uint64_t cut_launches, cut_segments, cut_graphs; /* cap_lock: launches of cut graphs, ... */
/* cap_lock, for the exit report: graphs made empty (cudaGraphCreate), nodes recorded as
 * they were added, executable-graph node changes followed, instantiations of graphs
 * whose nodes were not all known. */
static uint64_t made_graphs, made_nodes, nodes_followed, unknown_graphs;

/* The thread's captured call whose node is still to be asked for (capture_call_done):
 * its capture, its index in the capture's calls, its stream. Thread-local, as the call. */
__thread int capture_pending;
static __thread uint64_t pend_cap;
static __thread size_t pend_idx;
static __thread cudaStream_t pend_stream;

int capture_under_way(void)
{
    return __atomic_load_n(&under_way, __ATOMIC_ACQUIRE) > 0;
}

static owner_t **find(owner_t **list, uint64_t key)
{
    for (; *list != NULL; list = &(*list)->next)
        if ((*list)->key == key)
            return list;
    return list;
}

static void touches_free(touches_t *t)
{
    free(t->ptr);
    free(t->id);
    memset(t, 0, sizeof *t);
}

/* Adds the region `id` at `ptr` (cap_lock held); a duplicate is skipped while the list
 * is short enough to check (a duplicate only costs a lookup at the graph's launch). */
static void touches_add(touches_t *t, uint32_t id, uint64_t ptr)
{
    if (t->n < 4096)
        for (size_t i = 0; i < t->n; i++)
            if (t->id[i] == id)
                return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        uint64_t *p = realloc(t->ptr, cap * sizeof *p);
        if (p != NULL)
            t->ptr = p;
        uint32_t *i = p != NULL ? realloc(t->id, cap * sizeof *i) : NULL;
        if (i == NULL) { /* out of memory: the graph is taken to touch everything */
            t->all = 1;
            return;
        }
        t->id = i;
        t->cap = cap;
    }
    t->ptr[t->n] = ptr;
    t->id[t->n++] = id;
}

static int touches_copy(touches_t *to, const touches_t *from)
{
    memset(to, 0, sizeof *to);
    to->all = from->all;
    if (from->n == 0)
        return 0;
    to->ptr = malloc(from->n * sizeof *to->ptr);
    to->id = malloc(from->n * sizeof *to->id);
    if (to->ptr == NULL || to->id == NULL) {
        touches_free(to);
        to->all = 1;
        return -1;
    }
    memcpy(to->ptr, from->ptr, from->n * sizeof *to->ptr);
    memcpy(to->id, from->id, from->n * sizeof *to->id);
    to->n = to->cap = from->n;
    return 0;
}

static void calls_free(calls_t *c)
{
    free(c->v);
    free(c->ids);
    free(c->ptr);
    free(c->lo);
    free(c->flags);
    memset(c, 0, sizeof *c);
}

/* Room for n more region entries (cap_lock held, or c private); 0, or -1 (out of memory:
 * the calls are lost). */
static int calls_room(calls_t *c, size_t n)
{
    if (c->n_ids + n <= c->cap_ids)
        return 0;
    size_t cap = c->cap_ids ? 2 * c->cap_ids : 1024;
    while (cap < c->n_ids + n)
        cap *= 2;
    uint32_t *i = realloc(c->ids, cap * sizeof *i);
    if (i != NULL)
        c->ids = i;
    uint64_t *p = i != NULL ? realloc(c->ptr, cap * sizeof *p) : NULL;
    if (p != NULL)
        c->ptr = p;
    uint64_t *l = p != NULL ? realloc(c->lo, cap * sizeof *l) : NULL;
    if (l != NULL)
        c->lo = l;
    uint8_t *f = l != NULL ? realloc(c->flags, cap) : NULL;
    if (f == NULL)
        return c->lost = c->broken = 1, -1;
    c->flags = f;
    c->cap_ids = cap;
    return 0;
}

/* Room for one more call of n region entries (cap_lock held, or c private); 0, or -1
 * (out of memory, or lost before: the calls are lost, the graph will not be cut nor its
 * launches observed). */
static int call_room(calls_t *c, size_t n)
{
    if (c->lost)
        return -1;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        call_t *v = realloc(c->v, cap * sizeof *v);
        if (v == NULL)
            return c->lost = c->broken = 1, -1;
        c->v = v;
        c->cap = cap;
    }
    return calls_room(c, n);
}

/* Appends a call of kernel `key` (0: a copy or set writing its first `written` regions)
 * touching the regions of set, naming `node` (the application knows it as `orig`;
 * NULL both: asked for later) (cap_lock held, or c private); its index, or -1 (out of
 * memory: call_room). */
static long calls_add(calls_t *c, const ft_scan_set_t *set, uint64_t key, const char *name, size_t written,
                      CUgraphNode node, CUgraphNode orig)
{
    if (call_room(c, set->n) != 0)
        return -1;
    for (size_t j = 0; j < set->n; j++) {
        c->ids[c->n_ids + j] = set->id[j];
        c->ptr[c->n_ids + j] = set->ptr[j];
        c->lo[c->n_ids + j] = set->lo[j];
        c->flags[c->n_ids + j] = (uint8_t)((set->indirect[j] ? CALL_INDIRECT : 0) | (set->unsure[j] ? CALL_UNSURE : 0));
    }
    c->v[c->n] = (call_t){ .node = node, .orig = orig, .key = key, .name = name, .first = c->n_ids, .n = set->n,
                           .written = written };
    c->n_ids += set->n;
    return (long)c->n++;
}

/* to = a copy of from (to's old content dropped); 0, or -1 (out of memory: to empty). */
static int calls_copy(calls_t *to, const calls_t *from)
{
    memset(to, 0, sizeof *to);
    to->broken = from->broken;
    to->lost = from->lost;
    to->v = malloc((from->n + 1) * sizeof *to->v);
    if (to->v == NULL || calls_room(to, from->n_ids + 1) != 0) {
        calls_free(to);
        return -1;
    }
    to->cap = from->n + 1;
    if (from->n > 0)
        memcpy(to->v, from->v, from->n * sizeof *to->v);
    if (from->n_ids > 0) { /* calls that touch nothing known have no arrays */
        memcpy(to->ids, from->ids, from->n_ids * sizeof *to->ids);
        memcpy(to->ptr, from->ptr, from->n_ids * sizeof *to->ptr);
        memcpy(to->lo, from->lo, from->n_ids * sizeof *to->lo);
        memcpy(to->flags, from->flags, from->n_ids);
    }
    to->n = from->n;
    to->n_ids = from->n_ids;
    return 0;
}

/* Appends from's call i to c, naming `node` in a graph where the application knows it
 * as `orig` (orig NULL: the nodes it names) (cap_lock held, or c private); 0, or -1 (out
 * of memory: c's calls are lost). */
static int calls_push(calls_t *c, const calls_t *from, size_t i, CUgraphNode node, CUgraphNode orig)
{
    const call_t *f = &from->v[i];
    if (call_room(c, f->n) != 0)
        return -1;
    if (f->n > 0) { /* a call that touches nothing known (calls of none: no arrays) */
        memcpy(c->ids + c->n_ids, from->ids + f->first, f->n * sizeof *c->ids);
        memcpy(c->ptr + c->n_ids, from->ptr + f->first, f->n * sizeof *c->ptr);
        memcpy(c->lo + c->n_ids, from->lo + f->first, f->n * sizeof *c->lo);
        memcpy(c->flags + c->n_ids, from->flags + f->first, f->n);
    }
    c->v[c->n] = *f;
    c->v[c->n].first = c->n_ids;
    if (orig != NULL) {
        c->v[c->n].node = node;
        c->v[c->n].orig = orig;
    }
    c->n_ids += f->n;
    c->n++;
    return 0;
}

/* to gains from's calls (each naming `node`, or its own when NULL) and touches
 * (cap_lock held); from unknown makes to unknown. */
static void owner_absorb(owner_t *to, const owner_t *from, CUgraphNode node)
{
    to->t.all |= from->t.all;
    for (size_t i = 0; i < from->t.n; i++)
        touches_add(&to->t, from->t.id[i], from->t.ptr[i]);
    to->calls.broken |= from->calls.broken;
    if (from->calls.lost)
        to->calls.lost = to->calls.broken = 1;
    for (size_t i = 0; i < from->calls.n && !to->calls.lost; i++)
        calls_push(&to->calls, &from->calls, i, node, node);
}

static void segs_free(owner_t *x)
{
    for (int k = 0; k < x->n_seg; k++) {
        /* An executable graph still running is freed when it completes (CUDA). */
        if (x->seg[k].exec != NULL && drv.graph_exec_destroy != NULL)
            drv.graph_exec_destroy(x->seg[k].exec);
        if (x->seg[k].graph != NULL && drv.graph_destroy != NULL)
            drv.graph_destroy(x->seg[k].graph);
        free(x->seg[k].ids);
        free(x->seg[k].lo);
    }
    free(x->seg);
    x->seg = NULL;
    x->n_seg = 0;
}

static void parts_free(owner_t *x)
{
    for (int k = 0; k < x->p_n; k++) {
        if (x->p_exec[k] != NULL && drv.graph_exec_destroy != NULL)
            drv.graph_exec_destroy(x->p_exec[k]);
        if (x->p_graph[k] != NULL && drv.graph_destroy != NULL)
            drv.graph_destroy(x->p_graph[k]);
    }
    free(x->p_exec);
    free(x->p_graph);
    free(x->p_first);
    x->p_exec = NULL;
    x->p_graph = NULL;
    x->p_first = NULL;
    x->p_n = 0;
}

static void owner_free(owner_t *o)
{
    for (int i = 0; i < o->n_re; i++)
        if (drv.graph_destroy != NULL)
            drv.graph_destroy(o->re_child[i]);
    free(o->re_node);
    free(o->re_child);
    touches_free(&o->t);
    calls_free(&o->calls);
    segs_free(o);
    parts_free(o);
    if (o->clone != NULL && drv.graph_destroy != NULL)
        drv.graph_destroy(o->clone);
    if (o->done != NULL)
        own_event_destroy(o->done);
    free(o);
}

/* The capture stream s belongs to (its CUDA id), 0 when it captures nothing. Only
 * asked while a capture is under way: the driver's query costs a call. */
uint64_t capture_of(cudaStream_t s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    resolve_driver();
    /* The legacy stream while a blocking stream captures answers an error: a call on it
     * then fails anyway, and is not the capture's. */
    if (drv.capture_info == NULL ||
        drv.capture_info((CUstream)s, &st, &id, NULL, NULL, NULL, NULL) != CUDA_SUCCESS)
        return 0;
    return st == CU_STREAM_CAPTURE_STATUS_NONE ? 0 : id;
}

/* A captured call on `stream`, of kernel `key` named `name` (key 0: a copy or set
 * writing the first `written` regions of set), touches the regions of `set` (every
 * region when it lost some); its node is asked for once it is captured
 * (capture_call_done). */
void capture_note(uint64_t id, cudaStream_t stream, const ft_scan_set_t *set, uint64_t key, const char *name,
                  size_t written)
{
    pthread_mutex_lock(&cap_lock);
    owner_t *c = *find(&captures, id);
    if (c != NULL) {
        for (size_t i = 0; i < set->n; i++)
            touches_add(&c->t, set->id[i], set->ptr[i]);
        c->t.all |= set->dropped > 0;
        long at = calls_add(&c->calls, set, key, name, written, NULL, NULL);
        if (at >= 0) {
            capture_pending = 1;
            pend_cap = id;
            pend_idx = (size_t)at;
            pend_stream = stream;
        }
    }
    pthread_mutex_unlock(&cap_lock);
}

/* The call noted last on this thread has been captured (or refused): the node it made
 * is the one the stream's next node would follow. Asked of the driver only while
 * capturing, the query CUDA allows then. A call that made no node (refused, or nothing
 * to do) names the node before it: the two are one call when the graph is cut. */
void capture_call_done(void)
{
    capture_pending = 0;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    const CUgraphNode *deps = NULL;
    size_t nd = 0;
    int ok = drv.capture_info != NULL &&
             drv.capture_info((CUstream)pend_stream, &st, &id, NULL, &deps, NULL, &nd) == CUDA_SUCCESS &&
             st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id == pend_cap && nd == 1 && deps != NULL;
    pthread_mutex_lock(&cap_lock);
    owner_t *c = *find(&captures, pend_cap);
    if (c != NULL && pend_idx < c->calls.n) {
        if (ok)
            c->calls.v[pend_idx].node = c->calls.v[pend_idx].orig = deps[0];
        else
            c->calls.broken = 1;
    }
    pthread_mutex_unlock(&cap_lock);
}

/* The regions a copy or set touches, dst's (written) first: into set (cleared by the
 * caller); returns how many are dst's. Over an allocation served in pieces, every piece
 * the bytes reach (a span of 0: to the allocation's end). */
size_t capture_copy_set(ft_scan_set_t *set, const void *dst, const void *src, size_t dspan, size_t sspan)
{
    const void *p[2] = { dst, src };
    size_t span[2] = { dspan, sspan }, written = 0;
    for (int i = 0; i < 2; i++) {
        if (i == 1)
            written = set->n;
        ft_region_t r;
        if (p[i] == NULL || !ft_regions_find(regions, (uint64_t)(uintptr_t)p[i], &r))
            continue;
        ft_scan_set_add(set, r.id, (uint64_t)(uintptr_t)p[i]);
        uint64_t end = span[i] != 0 ? (uint64_t)(uintptr_t)p[i] + span[i] : UINT64_MAX;
        ft_region_t q;
        for (; r.base + r.size < end && piece_after(&r, &q); r = q)
            ft_scan_set_add(set, q.id, q.base); /* out of memory: counted in `dropped`, every unit */
    }
    return written;
}

/* A captured copy or set touches dst and src (NULL: none). */
void capture_note_copy(uint64_t id, cudaStream_t stream, const void *dst, const void *src, size_t dspan,
                       size_t sspan)
{
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    size_t written = capture_copy_set(&set, dst, src, dspan, sspan);
    capture_note(id, stream, &set, 0, NULL, written);
    ft_scan_set_free(&set);
}

/* --- the thread's capture mode -------------------------------------------------------- */

/* FlexTensor's own work for a call outside a capture, while one is under way, runs in
 * relaxed capture mode: its VMM calls and allocations are its own, ordered by events,
 * and must not count as the application's potentially unsafe calls (which would
 * invalidate, say, another thread's global capture). Thread-local: the mode is the
 * thread's. Returns whether it relaxed (capture_restore's argument). */
static __thread CUstreamCaptureMode saved_mode;

int capture_relax(void)
{
    if (!capture_under_way())
        return 0;
    resolve_driver();
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (drv.exchange_mode == NULL || drv.exchange_mode(&m) != CUDA_SUCCESS)
        return 0;
    saved_mode = m;
    return 1;
}

void capture_restore(int relaxed)
{
    if (relaxed) {
        CUstreamCaptureMode m = saved_mode;
        drv.exchange_mode(&m);
    }
}

/* --- entry points: begin and end ---------------------------------------------------------- */

/* A capture began on s (the real call succeeded): it is recorded under its CUDA id.
 * to_graph: its nodes go into an existing graph, after the ones it has. */
static void began(cudaStream_t s, int to_graph)
{
    uint64_t id = capture_of(s);
    owner_t *c = id != 0 ? calloc(1, sizeof *c) : NULL;
    pthread_mutex_lock(&cap_lock);
    if (c != NULL) {
        c->key = id;
        c->to_graph = to_graph;
        c->next = captures;
        captures = c;
    }
    /* Counted even when it cannot be recorded (its graph is then unknown: every
     * streamed unit is loaded for it), so that nothing illegal happens meanwhile; one
     * whose id the driver did not give (no cuStreamGetCaptureInfo) is never uncounted:
     * discovery, profiling and FT_SPILL's moves then stand still for the rest of the run. */
    __atomic_add_fetch(&under_way, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&cap_lock);
    if (engine_phase() == PHASE_DISCOVERY || engine_phase() == PHASE_PROFILING)
        FT_LOG_CAPPED(FT_LOG_INFO, 4, "stream capture %llu began during %s: it stands still until the capture ends; "
                       "the graph's launches are observed as the calls captured into it", (unsigned long long)id,
                       engine_phase() == PHASE_DISCOVERY ? "discovery" : "profiling");
}

/* The capture whose origin is s ends (before the real call): its id, 0 when s does not
 * capture. */
static uint64_t ending(cudaStream_t s)
{
    return capture_of(s);
}

/* ... and has ended (ok: the real call succeeded), making `graph` (0: none). A failed
 * end may leave the capture going (from the wrong thread, on a joined stream): then
 * nothing changed. */
static void ended(cudaStream_t s, uint64_t id, int ok, uint64_t graph)
{
    if (id == 0 || (!ok && capture_of(s) == id))
        return;
    pthread_mutex_lock(&cap_lock);
    owner_t **pc = find(&captures, id), *c = *pc;
    if (c != NULL)
        *pc = c->next;
    /* A capture into an existing graph adds to what its nodes touch: its calls follow
     * the graph's (an unknown capture makes the graph unknown). */
    owner_t *into = ok && graph != 0 && (c == NULL || c->to_graph) ? *find(&graphs, graph) : NULL;
    if (into != NULL) {
        if (c != NULL)
            owner_absorb(into, c, NULL);
        else
            into->t.all = 1;
    } else if (ok && graph != 0) {
        /* A graph of that handle still listed was destroyed unseen: this one replaces it. */
        owner_t **stale = find(&graphs, graph);
        if (*stale != NULL) {
            owner_t *o = *stale;
            *stale = o->next;
            owner_free(o);
        }
        owner_t *g = c != NULL ? c : calloc(1, sizeof *g);
        if (g != NULL) {
            if (c == NULL)
                g->t.all = 1; /* not recorded: it may touch anything */
            g->key = graph;
            g->next = graphs;
            graphs = g;
            c = NULL;
        }
    }
    if (c != NULL)
        owner_free(c);
    __atomic_sub_fetch(&under_way, 1, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&cap_lock);
}

/* A capture is about to begin (no other under way: nothing forbids synchronising yet).
 * An allocation FT_SPILL holds in host memory has no device memory behind its address,
 * and a captured copy or set naming it cannot become a graph node: on the H200,
 * torch.cuda.graph's capture during profiling ended with cudaErrorInvalidValue (a
 * workspace memset, presumably, into a segment FT_SPILL had moved out). Faulting it in
 * during the capture is not allowed either, nor are its replays' kernels to find host
 * memory FlexTensor moves. So FT_SPILL brings everything back now and holds nothing
 * more until the plan (spill_stop: an allocation during the capture, PyTorch's graph
 * pool, must not start in host memory either; on the H200 one did, and the capture
 * ended with "invalid argument" again): the budget gives way, said once with the
 * bytes. */
static uint64_t spill_stopped_bytes; /* what it brought back (written once, before the capture) */
static const char *spill_stopped; /* what began: "a stream capture", "a CUDA graph built node by node" */

/* what: the graph's making that begins (no capture under way: nothing forbids
 * synchronising). The same holds for a graph built node by node: a copy or set node
 * naming an address FT_SPILL holds in host memory is refused (the simulator refuses
 * it as it refuses the captured call), and its replays' kernels must not find host
 * memory either. */
static void spill_halt(const char *what, const char *why)
{
    if (capture_under_way() || !state_spill(engine_state()))
        return;
    uint64_t held = __atomic_load_n(&spill_bytes, __ATOMIC_RELAXED);
    spill_stop(why);
    spill_stopped_bytes = held - __atomic_load_n(&spill_bytes, __ATOMIC_RELAXED);
    spill_stopped = what;
}

static void before_capture(void)
{
    spill_halt("a stream capture", "a stream capture begins (a captured copy, set or kernel cannot reach an address with nothing mapped)");
}

/* For the verdict: "; FT_SPILL stopped at ..." when a capture made it stop, else "". */
const char *capture_spill_note(char *buf, size_t len)
{
    if (!spill_stopped)
        return "";
    snprintf(buf, len, "; FT_SPILL stopped when %s began before the plan (%.1f MiB brought back "
             "to the device, over the budget)", spill_stopped, (double)spill_stopped_bytes / 1048576.0);
    return buf;
}

cudaError_t ft_hook_rt_begin_capture(cudaStreamBeginCapture_fn_t real, cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    mover_hold(); /* no move of the prefetching thread from here to the capture's count */
    before_capture();
    cudaError_t rc = real(s, mode);
    if (rc == cudaSuccess)
        began(s, 0);
    mover_release();
    return rc;
}

cudaError_t ft_hook_rt_begin_capture_to_graph(cudaStreamBeginCaptureToGraph_fn_t real, cudaStream_t s,
                                              cudaGraph_t graph, const cudaGraphNode_t *deps,
                                              const cudaGraphEdgeData *data, size_t n,
                                              enum cudaStreamCaptureMode mode)
{
    mover_hold(); /* no move of the prefetching thread from here to the capture's count */
    before_capture();
    cudaError_t rc = real(s, graph, deps, data, n, mode);
    if (rc == cudaSuccess)
        began(s, 1);
    mover_release();
    return rc;
}

cudaError_t ft_hook_rt_end_capture(cudaStreamEndCapture_fn_t real, cudaStream_t s, cudaGraph_t *graph)
{
    uint64_t id = ending(s);
    cudaError_t rc = real(s, graph);
    ended(s, id, rc == cudaSuccess, rc == cudaSuccess && graph != NULL ? (uint64_t)(uintptr_t)*graph : 0);
    return rc;
}

CUresult ft_hook_drv_begin_capture(cuStreamBeginCapture_v2_fn_t real, CUstream s, CUstreamCaptureMode mode)
{
    mover_hold(); /* no move of the prefetching thread from here to the capture's count */
    before_capture();
    CUresult rc = real(s, mode);
    if (rc == CUDA_SUCCESS)
        began((cudaStream_t)s, 0);
    mover_release();
    return rc;
}

CUresult ft_hook_drv_begin_capture_to_graph(cuStreamBeginCaptureToGraph_fn_t real, CUstream s, CUgraph graph,
                                            const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
                                            CUstreamCaptureMode mode)
{
    mover_hold(); /* no move of the prefetching thread from here to the capture's count */
    before_capture();
    CUresult rc = real(s, graph, deps, data, n, mode);
    if (rc == CUDA_SUCCESS)
        began((cudaStream_t)s, 1);
    mover_release();
    return rc;
}

CUresult ft_hook_drv_end_capture(cuStreamEndCapture_fn_t real, CUstream s, CUgraph *graph)
{
    uint64_t id = ending((cudaStream_t)s);
    CUresult rc = real(s, graph);
    ended((cudaStream_t)s, id, rc == CUDA_SUCCESS, rc == CUDA_SUCCESS && graph != NULL ? (uint64_t)(uintptr_t)*graph : 0);
    return rc;
}

/* --- instantiation and destruction -------------------------------------------------------- */

static int cmp_node(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(const CUgraphNode *)a, y = (uintptr_t)*(const CUgraphNode *)b;
    return (x > y) - (x < y);
}

/* A node FlexTensor did not see made that touches no device memory a kernel could
 * read: an empty node, an event's record or wait, a host function, a semaphore. */
static int node_harmless(CUgraphNode n)
{
    CUgraphNodeType t;
    if (drv.graph_node_type == NULL || drv.graph_node_type(n, &t) != CUDA_SUCCESS)
        return 0;
    return t == CU_GRAPH_NODE_TYPE_EMPTY || t == CU_GRAPH_NODE_TYPE_WAIT_EVENT ||
           t == CU_GRAPH_NODE_TYPE_EVENT_RECORD || t == CU_GRAPH_NODE_TYPE_HOST ||
           t == CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL || t == CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT;
}

/* Whether the graph's nodes are the nodes of its recorded calls (captured, or added
 * node by node), every one: 1; 0 when some are not but touch nothing (no cut, what
 * it touches is known); -1 when a node not recorded may touch device memory (a kernel
 * added by a call FlexTensor does not watch, a conditional node), or the nodes could
 * not be listed: what the graph touches is not known. why says which. Calls that
 * name one node (a call that made none names the one before; a child graph's calls
 * its node) are one. */
static int nodes_check(CUgraph graph, const calls_t *calls, char *why, size_t len)
{
    size_t n = 0;
    if (drv.graph_get_nodes == NULL || drv.graph_get_nodes(graph, NULL, &n) != CUDA_SUCCESS) {
        snprintf(why, len, "its nodes could not be listed");
        return -1;
    }
    CUgraphNode *have = malloc((n + 1) * sizeof *have), *seen = malloc((calls->n + 1) * sizeof *seen);
    int ok = have != NULL && seen != NULL && drv.graph_get_nodes(graph, have, &n) == CUDA_SUCCESS;
    int res = -1;
    size_t m = 0;
    for (size_t i = 0; ok && i < calls->n; i++)
        if (calls->v[i].node != NULL)
            seen[m++] = calls->v[i].node;
    if (ok) {
        qsort(seen, m, sizeof *seen, cmp_node);
        size_t u = 0, unseen = 0, harmful = 0;
        for (size_t i = 0; i < m; i++)
            if (u == 0 || seen[u - 1] != seen[i])
                seen[u++] = seen[i];
        for (size_t i = 0; i < n; i++)
            if (bsearch(&have[i], seen, u, sizeof *seen, cmp_node) == NULL) {
                unseen++;
                harmful += !node_harmless(have[i]);
            }
        res = harmful > 0 ? -1 : unseen > 0 || u != n ? 0 : 1;
        if (harmful > 0)
            snprintf(why, len, "%zu of its %zu node(s) were made by calls FlexTensor does not watch", harmful, n);
        else if (res == 0)
            snprintf(why, len, "%zu of its %zu node(s) were not seen made", unseen > 0 ? unseen : n - u, n);
    } else {
        snprintf(why, len, "no memory to list its nodes");
    }
    free(have);
    free(seen);
    return res;
}

/* exec was instantiated from graph with `flags`: it touches what the graph does, and is
 * kept for cutting (its clone, the calls' nodes found in it) when it may need cutting:
 * every node known, more than one call, nothing touched unknown. */
static void instantiated(uint64_t exec, uint64_t graph, unsigned long long flags)
{
    owner_t *x = calloc(1, sizeof *x);
    if (x == NULL)
        return; /* unknown at its launch: every streamed unit is loaded for it */
    pthread_mutex_lock(&cap_lock);
    owner_t *g = *find(&graphs, graph);
    if (g != NULL)
        touches_copy(&x->t, &g->t);
    else
        x->t.all = 1;
    /* Why it will not be cut, where that may matter ("": it may be). */
    const char *nocut = !cfgp->graph_cut                               ? ""
                      : g == NULL                                      ? "FlexTensor did not see it made"
                      : g->calls.n < 2                                 ? ""
                      : g->t.all                                       ? "a captured call's regions were not all kept"
                      : g->calls.broken                                ? "a captured call's node was not had"
                      : (flags & cudaGraphInstantiateFlagDeviceLaunch) ? "it is launched from the device"
                                                                       : "";
    /* Its calls, kept for discovery and profiling (observed at each of its launches)
     * and for the cut. */
    calls_t calls;
    memset(&calls, 0, sizeof calls);
    int known = g != NULL && !g->t.all;
    if (known && !g->calls.lost && g->calls.n > 0)
        calls_copy(&calls, &g->calls); /* out of memory: none, and the graph is unknown */
    int lost = known && (g->calls.lost || (g->calls.n > 0 && calls.v == NULL));
    int cut = cfgp->graph_cut && known && !g->calls.broken && calls.n > 1 &&
              !(flags & cudaGraphInstantiateFlagDeviceLaunch) && drv.graph_clone != NULL &&
              drv.graph_get_nodes != NULL && drv.graph_find_in_clone != NULL &&
              drv.graph_destroy_node != NULL && drv.graph_instantiate != NULL;
    pthread_mutex_unlock(&cap_lock);
    /* Every node of the graph must be one whose call FlexTensor recorded, or one that
     * touches nothing: a node added by a call it does not watch (a conditional node,
     * CUDA 12.2's cuGraphAddNode, the runtime's cudaGraphAddNode) may read any unit, so
     * the graph is then unknown and every streamed unit is loaded before its launches. */
    char why[128] = "";
    int check = !known || lost ? -1 : nodes_check((CUgraph)(uintptr_t)graph, &calls, why, sizeof why);
    if (known && check < 0) {
        FT_LOG_CAPPED(FT_LOG_INFO, 4, "CUDA graphs: graph %#llx: %s: every streamed unit is loaded before the "
                      "launches of its executable graphs", (unsigned long long)graph,
                      lost ? "its calls could not all be kept (no memory)" : why);
        x->t.all = 1;
        calls_free(&calls);
        cut = 0;
        pthread_mutex_lock(&cap_lock);
        unknown_graphs++;
        pthread_mutex_unlock(&cap_lock);
    } else if (check == 0 && cut) {
        cut = 0;
        nocut = "some of its nodes were not seen made";
    }
    /* The clone: the graph may be destroyed once instantiated (torch.cuda.graph does),
     * and the cut is made later, at a launch under a plan. Its calls name the clone's
     * nodes. */
    if (cut && drv.graph_clone(&x->clone, (CUgraph)(uintptr_t)graph) == CUDA_SUCCESS) {
        for (size_t i = 0; i < calls.n; i++)
            if (drv.graph_find_in_clone(&calls.v[i].node, calls.v[i].node, x->clone) != CUDA_SUCCESS) {
                snprintf(why, sizeof why, "its clone lacks a node");
                break;
            }
        if (why[0] != '\0') {
            drv.graph_destroy(x->clone);
            x->clone = NULL;
        }
    }
    if (x->clone == NULL)
        for (size_t i = 0; i < calls.n; i++)
            calls.v[i].node = NULL; /* nodes of a graph that may be gone */
    x->calls = calls;
    x->flags = flags;
    if (cut && x->clone == NULL)
        snprintf(x->why, sizeof x->why, "%s", why[0] != '\0' ? why : "it could not be cloned");
    else if (!cut)
        snprintf(x->why, sizeof x->why, "%s", nocut);
    pthread_mutex_lock(&cap_lock);
    /* An update (exec_updated), or a handle reused after a destroy we missed: the end
     * of its last segmented launch stays its own, for the next launch's order. */
    owner_t **old = find(&execs, exec);
    if (*old != NULL) {
        owner_t *o = *old;
        *old = o->next;
        x->done = o->done;
        x->done_set = o->done_set;
        x->last_stream = o->last_stream;
        o->done = NULL;
        owner_free(o);
    }
    x->key = exec;
    x->next = execs;
    execs = x;
    pthread_mutex_unlock(&cap_lock);
}

static void forget(owner_t **list, uint64_t key)
{
    pthread_mutex_lock(&cap_lock);
    owner_t **p = find(list, key), *o = *p;
    if (o != NULL) {
        *p = o->next;
        owner_free(o);
    }
    pthread_mutex_unlock(&cap_lock);
}

void capture_exec_changed(uint64_t exec)
{
    pthread_mutex_lock(&cap_lock);
    owner_t *x = *find(&execs, exec);
    if (x != NULL && !x->t.all) {
        x->t.all = 1;
        segs_free(x);
        parts_free(x);
        calls_free(&x->calls);
        FT_INFO("CUDA graphs: the program changed executable graph %#llx after its instantiation: every "
                "streamed unit is loaded before its launches from now on", (unsigned long long)exec);
    }
    pthread_mutex_unlock(&cap_lock);
}

cudaError_t ft_hook_rt_graph_instantiate(cudaGraphInstantiate_fn_t real, cudaGraphExec_t *exec, cudaGraph_t graph,
                                         unsigned long long flags)
{
    cudaError_t rc = real(exec, graph, flags);
    if (rc == cudaSuccess && exec != NULL)
        instantiated((uint64_t)(uintptr_t)*exec, (uint64_t)(uintptr_t)graph, flags);
    return rc;
}

CUresult ft_hook_drv_graph_instantiate(cuGraphInstantiateWithFlags_fn_t real, CUgraphExec *exec, CUgraph graph,
                                       unsigned long long flags)
{
    CUresult rc = real(exec, graph, flags);
    if (rc == CUDA_SUCCESS && exec != NULL)
        instantiated((uint64_t)(uintptr_t)*exec, (uint64_t)(uintptr_t)graph, flags);
    return rc;
}

cudaError_t ft_hook_rt_graph_exec_destroy(cudaGraphExecDestroy_fn_t real, cudaGraphExec_t exec)
{
    forget(&execs, (uint64_t)(uintptr_t)exec);
    return real(exec);
}

CUresult ft_hook_drv_graph_exec_destroy(cuGraphExecDestroy_fn_t real, CUgraphExec exec)
{
    forget(&execs, (uint64_t)(uintptr_t)exec);
    return real(exec);
}

cudaError_t ft_hook_rt_graph_destroy(cudaGraphDestroy_fn_t real, cudaGraph_t graph)
{
    forget(&graphs, (uint64_t)(uintptr_t)graph);
    return real(graph);
}

CUresult ft_hook_drv_graph_destroy(cuGraphDestroy_fn_t real, CUgraph graph)
{
    forget(&graphs, (uint64_t)(uintptr_t)graph);
    return real(graph);
}

/* --- graphs built node by node ------------------------------------------------------------- */

/* The application made an empty graph (cudaGraphCreate): its nodes are recorded as
 * they are added, each as the captured call it stands for would be, in the order they
 * are added (an order of the graph's dependencies: a node's are added before it). */
void capture_graph_made(uint64_t graph)
{
    spill_halt("a CUDA graph built node by node",
               "a CUDA graph is built node by node (a copy, set or kernel node cannot reach an address with nothing mapped)");
    owner_t *g = calloc(1, sizeof *g);
    pthread_mutex_lock(&cap_lock);
    owner_t **stale = find(&graphs, graph); /* destroyed unseen */
    if (*stale != NULL) {
        owner_t *o = *stale;
        *stale = o->next;
        owner_free(o);
    }
    if (g != NULL) { /* else unknown: every streamed unit is loaded for it */
        g->key = graph;
        g->next = graphs;
        graphs = g;
    }
    made_graphs++;
    pthread_mutex_unlock(&cap_lock);
}

/* A node added to graph: a launch of kernel key named name (key 0: a copy or set
 * writing the first `written` regions of set) touching set's regions. A graph with no
 * record (made by a call FlexTensor does not watch) stays unknown. */
void capture_node_added(uint64_t graph, CUgraphNode node, const ft_scan_set_t *set, uint64_t key,
                        const char *name, size_t written)
{
    pthread_mutex_lock(&cap_lock);
    owner_t *g = *find(&graphs, graph);
    if (g != NULL) {
        for (size_t i = 0; i < set->n; i++)
            touches_add(&g->t, set->id[i], set->ptr[i]);
        g->t.all |= set->dropped > 0;
        calls_add(&g->calls, set, key, name, written, node, node);
        made_nodes++;
    }
    pthread_mutex_unlock(&cap_lock);
}

/* A child graph node added to graph (CUDA copies the child into it): the child's calls,
 * each naming the node. A child whose own nodes are not all known makes the graph
 * unknown. */
void capture_child_added(uint64_t graph, CUgraphNode node, uint64_t child)
{
    char why[128];
    pthread_mutex_lock(&cap_lock);
    owner_t *g = *find(&graphs, graph), *c = *find(&graphs, child);
    if (g != NULL) {
        if (c != NULL && !c->t.all && !c->calls.lost &&
            nodes_check((CUgraph)(uintptr_t)child, &c->calls, why, sizeof why) >= 0)
            owner_absorb(g, c, node);
        else
            g->t.all = 1;
        made_nodes++;
    }
    pthread_mutex_unlock(&cap_lock);
}

/* A node's parameters changed in its graph (cudaGraphKernelNodeSetParams and kin), or a
 * child node's graph was handed out to be changed in place: the graph holding it no
 * longer knows what it touches. */
void capture_node_changed(CUgraphNode node)
{
    pthread_mutex_lock(&cap_lock);
    for (owner_t *g = graphs; g != NULL; g = g->next)
        for (size_t i = 0; i < g->calls.n; i++)
            if (g->calls.v[i].orig == node) {
                g->t.all = 1;
                break;
            }
    pthread_mutex_unlock(&cap_lock);
}

/* Segment sg now also touches the regions `ids` (n of them): the guard loads their
 * units before it. 0, or -1 (no memory). */
static int seg_grow(seg_t *sg, const uint32_t *ids, size_t n)
{
    uint32_t *v = realloc(sg->ids, (sg->n + n + 1) * sizeof *v);
    if (v == NULL)
        return -1;
    sg->ids = v;
    uint64_t *l = realloc(sg->lo, (sg->n + n + 1) * sizeof *l);
    if (l == NULL)
        return -1;
    sg->lo = l;
    for (size_t i = 0; i < n; i++) {
        size_t q = 0;
        while (q < sg->n && sg->ids[q] != ids[i])
            q++;
        if (q == sg->n)
            sg->ids[sg->n++] = ids[i];
        sg->lo[q] = 0; /* its pointers not known */
    }
    return 0;
}

/* The change `redo` makes again on x's own executable graphs (its segments and
 * profiling's parts, each instantiated from a graph of its own that holds the clone's
 * node `in`, or not) and on its clone (cap_lock held). The segment holding the node
 * also touches what the node now does (ids, n: loaded before it, as its other
 * regions). 0, or -1 when a segment or part could not follow (they are then dropped);
 * a clone that could not is stale: the segments are not made from it again. */
static int redo_change(owner_t *x, CUgraphNode in, const node_redo_t *redo, const uint32_t *ids, size_t n_ids)
{
    int ok = 1;
    CUgraphNode n;
    for (int k = 0; ok && k < x->n_seg; k++)
        if (drv.graph_find_in_clone(&n, in, x->seg[k].graph) == CUDA_SUCCESS)
            ok = redo->exec_fn(redo->ctx, x->seg[k].exec, n) == 0 && seg_grow(&x->seg[k], ids, n_ids) == 0;
    for (int k = 0; ok && k < x->p_n; k++)
        if (drv.graph_find_in_clone(&n, in, x->p_graph[k]) == CUDA_SUCCESS)
            ok = redo->exec_fn(redo->ctx, x->p_exec[k], n) == 0;
    if (!x->stale && redo->graph_fn != NULL && redo->graph_fn(redo->ctx, in) != 0) {
        x->stale = 1;
        snprintf(x->why, sizeof x->why, "a node change could not be made on its clone");
    }
    return ok ? 0 : -1;
}

/* The clone's child node `in` set to graph child on the application's executable graph
 * (cap_lock held): kept, a copy, for the segments and parts made later; the clone is
 * stale when it cannot be. */
static void relog_child(owner_t *x, CUgraphNode in, uint64_t child)
{
    CUgraph copy = NULL;
    int i = 0;
    while (i < x->n_re && x->re_node[i] != in)
        i++;
    if (drv.graph_clone(&copy, (CUgraph)(uintptr_t)child) != CUDA_SUCCESS) {
        x->stale = 1;
        snprintf(x->why, sizeof x->why, "a child graph set on it could not be copied");
        return;
    }
    if (i == x->n_re) {
        CUgraphNode *n = realloc(x->re_node, (size_t)(i + 1) * sizeof *n);
        if (n != NULL)
            x->re_node = n;
        CUgraph *c = n != NULL ? realloc(x->re_child, (size_t)(i + 1) * sizeof *c) : NULL;
        if (c == NULL) {
            drv.graph_destroy(copy);
            x->stale = 1;
            snprintf(x->why, sizeof x->why, "no memory");
            return;
        }
        x->re_child = c;
        x->re_node[i] = in;
        x->re_child[i] = NULL;
        x->n_re++;
    }
    if (x->re_child[i] != NULL)
        drv.graph_destroy(x->re_child[i]);
    x->re_child[i] = copy;
}

/* exec's node `node` (the application's graph's) now stands for a launch of kernel key
 * (key 0: a copy or set writing the first `written` regions of set) touching set's
 * regions, or (set NULL) for the calls of graph `child`: its calls are replaced by
 * those, and what exec touches grows by theirs (what it no longer touches still counts:
 * loading too much costs time, never a fault). A node not recorded, a child not known,
 * or no memory makes exec unknown. A cut exec's segments, profiling's parts and clone
 * get the same change (redo_change). */
static void exec_node_set(uint64_t exec, CUgraphNode node, const ft_scan_set_t *set, uint64_t key,
                          const char *name, size_t written, uint64_t child, const node_redo_t *redo)
{
    char why[128] = "";
    pthread_mutex_lock(&cap_lock);
    owner_t *x = *find(&execs, exec);
    if (x == NULL || x->t.all) {
        pthread_mutex_unlock(&cap_lock);
        return;
    }
    owner_t *c = set == NULL ? *find(&graphs, child) : NULL;
    int ok = set != NULL ? set->dropped == 0
                         : c != NULL && !c->t.all && !c->calls.lost &&
                               nodes_check((CUgraph)(uintptr_t)child, &c->calls, why, sizeof why) >= 0;
    calls_t next;
    memset(&next, 0, sizeof next);
    int found = 0;
    for (size_t i = 0; ok && i < x->calls.n; i++) {
        const call_t *v = &x->calls.v[i];
        if (v->orig != node) {
            calls_push(&next, &x->calls, i, NULL, NULL);
            continue;
        }
        if (found++)
            continue; /* the node's other calls: replaced by the first's */
        if (set == NULL) {
            for (size_t j = 0; j < c->calls.n; j++)
                calls_push(&next, &c->calls, j, v->node, node);
        } else {
            calls_add(&next, set, key, name, written, v->node, node);
        }
    }
    if (!ok || !found || next.lost) {
        calls_free(&next);
        pthread_mutex_unlock(&cap_lock);
        capture_exec_changed(exec);
        return;
    }
    if (set != NULL) {
        for (size_t i = 0; i < set->n; i++)
            touches_add(&x->t, set->id[i], set->ptr[i]);
    } else {
        for (size_t i = 0; i < c->t.n; i++)
            touches_add(&x->t, c->t.id[i], c->t.ptr[i]);
    }
    calls_free(&x->calls);
    x->calls = next;
    nodes_followed++;
    CUgraphNode in = NULL; /* the clone's node */
    for (size_t i = 0; i < x->calls.n && in == NULL; i++)
        if (x->calls.v[i].orig == node)
            in = x->calls.v[i].node;
    int was_stale = x->stale, dropped = 0;
    if (x->clone != NULL && in != NULL && set == NULL)
        relog_child(x, in, child);
    const uint32_t *ids = set != NULL ? set->id : c->t.id;
    size_t n_ids = set != NULL ? set->n : c->t.n;
    if (x->clone != NULL && in != NULL && redo_change(x, in, redo, ids, n_ids) != 0) {
        segs_free(x);
        parts_free(x);
        x->stale = dropped = 1;
        snprintf(x->why, sizeof x->why, "a node change could not be made on its segments");
    }
    int stale = x->stale && !was_stale;
    pthread_mutex_unlock(&cap_lock);
    if (dropped || stale)
        FT_LOG_CAPPED(FT_LOG_INFO, 4, "CUDA graphs: the program changed a node of executable graph %#llx: what "
                      "it touches is followed; %s", (unsigned long long)exec,
                      dropped ? "its segments could not follow: it is no longer cut"
                              : "its clone could not follow: its segments are kept, but not made again for "
                                "another plan");
}

void capture_exec_node_set(uint64_t exec, CUgraphNode node, const ft_scan_set_t *set, uint64_t key,
                           const char *name, size_t written, const node_redo_t *redo)
{
    exec_node_set(exec, node, set, key, name, written, 0, redo);
}

void capture_exec_child_set(uint64_t exec, CUgraphNode node, uint64_t child, const node_redo_t *redo)
{
    exec_node_set(exec, node, NULL, 0, NULL, 0, child, redo);
}

/* The application changed an executable graph: by a whole graph (cudaGraphExecUpdate,
 * which makes exec what `graph` would instantiate to: taken as its instantiation, with
 * the flags it had), or a node's parameters (capture_exec_changed). */
static void exec_updated(uint64_t exec, uint64_t graph)
{
    pthread_mutex_lock(&cap_lock);
    owner_t *x = *find(&execs, exec);
    unsigned long long flags = x != NULL ? x->flags : 0;
    pthread_mutex_unlock(&cap_lock);
    instantiated(exec, graph, flags);
    FT_DEBUG("CUDA graphs: executable graph %#llx updated from graph %#llx", (unsigned long long)exec,
             (unsigned long long)graph);
}

cudaError_t ft_hook_rt_graph_exec_update(cudaGraphExecUpdate_fn_t real, cudaGraphExec_t x, cudaGraph_t g,
                                         cudaGraphExecUpdateResultInfo *info)
{
    cudaError_t rc = real(x, g, info);
    if (rc == cudaSuccess)
        exec_updated((uint64_t)(uintptr_t)x, (uint64_t)(uintptr_t)g);
    return rc;
}

CUresult ft_hook_drv_graph_exec_update(cuGraphExecUpdate_v2_fn_t real, CUgraphExec x, CUgraph g,
                                       CUgraphExecUpdateResultInfo *info)
{
    CUresult rc = real(x, g, info);
    if (rc == CUDA_SUCCESS)
        exec_updated((uint64_t)(uintptr_t)x, (uint64_t)(uintptr_t)g);
    return rc;
}

/* A node of exec changed (whatever the call's result: a failed one may have changed
 * it too, and the cost of thinking so is loads, never a fault). */
#define NODE_CHANGE(ret, hook, fn_t, params, ...)                         \
    ret ft_hook_##hook(fn_t real, UNPAREN params)                          \
    {                                                                      \
        ret rc = real(__VA_ARGS__);                                        \
        capture_exec_changed((uint64_t)(uintptr_t)x);                      \
        return rc;                                                         \
    }
#define UNPAREN(...) __VA_ARGS__
NODE_CHANGE(cudaError_t, rt_graph_exec_node_params, cudaGraphExecNodeSetParams_fn_t,
            (cudaGraphExec_t x, cudaGraphNode_t n, struct cudaGraphNodeParams *p), x, n, p)
NODE_CHANGE(cudaError_t, rt_graph_node_enabled, cudaGraphNodeSetEnabled_fn_t,
            (cudaGraphExec_t x, cudaGraphNode_t n, unsigned int on), x, n, on)
NODE_CHANGE(CUresult, drv_graph_exec_node_params, cuGraphExecNodeSetParams_fn_t,
            (CUgraphExec x, CUgraphNode n, CUgraphNodeParams *p), x, n, p)
NODE_CHANGE(CUresult, drv_graph_node_enabled, cuGraphNodeSetEnabled_fn_t,
            (CUgraphExec x, CUgraphNode n, unsigned int on), x, n, on)
NODE_CHANGE(cudaError_t, rt_graph_exec_host_params, cudaGraphExecHostNodeSetParams_fn_t,
            (cudaGraphExec_t x, cudaGraphNode_t n, const struct cudaHostNodeParams *p), x, n, p)
NODE_CHANGE(cudaError_t, rt_graph_exec_record_event, cudaGraphExecEventRecordNodeSetEvent_fn_t,
            (cudaGraphExec_t x, cudaGraphNode_t n, cudaEvent_t e), x, n, e)
NODE_CHANGE(cudaError_t, rt_graph_exec_wait_event, cudaGraphExecEventWaitNodeSetEvent_fn_t,
            (cudaGraphExec_t x, cudaGraphNode_t n, cudaEvent_t e), x, n, e)
NODE_CHANGE(cudaError_t, rt_graph_exec_sem_signal, cudaGraphExecExternalSemaphoresSignalNodeSetParams_fn_t,
            (cudaGraphExec_t x, cudaGraphNode_t n, const struct cudaExternalSemaphoreSignalNodeParams *p), x, n, p)
NODE_CHANGE(cudaError_t, rt_graph_exec_sem_wait, cudaGraphExecExternalSemaphoresWaitNodeSetParams_fn_t,
            (cudaGraphExec_t x, cudaGraphNode_t n, const struct cudaExternalSemaphoreWaitNodeParams *p), x, n, p)
NODE_CHANGE(CUresult, drv_graph_exec_host_params, cuGraphExecHostNodeSetParams_fn_t,
            (CUgraphExec x, CUgraphNode n, const CUDA_HOST_NODE_PARAMS *p), x, n, p)
NODE_CHANGE(CUresult, drv_graph_exec_record_event, cuGraphExecEventRecordNodeSetEvent_fn_t,
            (CUgraphExec x, CUgraphNode n, CUevent e), x, n, e)
NODE_CHANGE(CUresult, drv_graph_exec_wait_event, cuGraphExecEventWaitNodeSetEvent_fn_t,
            (CUgraphExec x, CUgraphNode n, CUevent e), x, n, e)
NODE_CHANGE(CUresult, drv_graph_exec_sem_signal, cuGraphExecExternalSemaphoresSignalNodeSetParams_fn_t,
            (CUgraphExec x, CUgraphNode n, const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS *p), x, n, p)
NODE_CHANGE(CUresult, drv_graph_exec_sem_wait, cuGraphExecExternalSemaphoresWaitNodeSetParams_fn_t,
            (CUgraphExec x, CUgraphNode n, const CUDA_EXT_SEM_WAIT_NODE_PARAMS *p), x, n, p)
NODE_CHANGE(CUresult, drv_graph_exec_batch_mem_op, cuGraphExecBatchMemOpNodeSetParams_fn_t,
            (CUgraphExec x, CUgraphNode n, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p), x, n, p)
#undef NODE_CHANGE
#undef UNPAREN

/* Why no graph may be cut any more (NULL: they may): the program was handed a way to
 * change executable graphs that FlexTensor does not watch. Its segments would run what
 * the graph was before the change. */
static const char *cut_forbidden;

void capture_cut_forbid(const char *why)
{
    __atomic_store_n(&cut_forbidden, why, __ATOMIC_RELEASE);
}

/* --- cutting a graph ------------------------------------------------------------------------ */

/* The streamed unit of region id that a cut follows (-1: none): a unit kept on the
 * device (pinned), loaded or not yet, costs no load past its first. */
/* The j-th region id call c touches, j < 2 * c->n (res.lock held): its own ids, then for
 * each the piece its pointer reaches on into (res.follow: a tensor that starts in a
 * piece kept on the device and runs on into a streamed unit's; the graph guard counts
 * the same, res_guard_graph). UINT32_MAX: none. A cut by the ids alone found no
 * streamed unit in a graph over the program's own pool, whose tensors all start in
 * such pieces, and the graph was launched whole with every unit over the slots. */
static uint32_t call_id(const calls_t *cs, const call_t *c, size_t j)
{
    if (j < c->n)
        return cs->ids[c->first + j];
    size_t e = c->first + (j - c->n);
    uint32_t next = res_follow_of(cs->ids[e], cs->lo[e]);
    return next != 0 ? next : UINT32_MAX;
}

static int cut_unit(uint32_t id)
{
    if (id == UINT32_MAX)
        return -1;
    int u = res_unit_of(id);
    return u >= 0 && res.units[u].pinned ? -1 : u;
}

/* The segment each of x's calls falls in (seg_of), by the plan's units: a call that
 * first touches a streamed unit the segment under way has not touched begins the next
 * (when that one touched any). Returns the count, and each unit's last segment. */
static int cut_points(const owner_t *x, int *seg_of, int *mark, int *last)
{
    int k = 0, any = 0, trace = FT_LOG_ENABLED(FT_LOG_TRACE);
    for (int u = 0; u < res.n_units; u++)
        mark[u] = last[u] = -1;
    for (size_t i = 0; i < x->calls.n; i++) {
        const call_t *c = &x->calls.v[i];
        int fresh = 0;
        for (size_t j = 0; j < 2 * c->n; j++) {
            int u = cut_unit(call_id(&x->calls, c, j));
            fresh |= u >= 0 && mark[u] != k;
        }
        /* Never between two calls of one node (a child graph's calls; a call that made
         * no node and the one before): a node runs in one segment. */
        int same = i > 0 && c->node != NULL && c->node == x->calls.v[i - 1].node;
        if (fresh && any && !same) {
            k++;
            any = 0;
        }
        char units[160];
        size_t at = 0;
        units[0] = '\0';
        for (size_t j = 0; j < 2 * c->n; j++) {
            int u = cut_unit(call_id(&x->calls, c, j));
            if (u >= 0) {
                mark[u] = last[u] = k;
                any = 1;
                if (trace && at < sizeof units - 12)
                    at += (size_t)snprintf(units + at, sizeof units - at, " %d", u);
            }
        }
        seg_of[i] = k;
        /* FT_LOG_LEVEL=trace: every call's segment and the streamed units its
         * arguments reach, to match a fault in a segment with what it loaded. */
        if (trace) {
            /* ... and the regions themselves: id, the lowest word's offset in it, its
             * streamed unit */
            char regs[256];
            size_t rt = 0;
            regs[0] = '\0';
            for (size_t j = 0; j < c->n && rt < sizeof regs - 40; j++) {
                size_t e = c->first + j;
                int u = res_unit_of(x->calls.ids[e]);
                ft_region_t r;
                uint64_t off = ft_regions_find(regions, x->calls.lo[e], &r) ? x->calls.lo[e] - r.base : 0;
                rt += (size_t)snprintf(regs + rt, sizeof regs - rt, " %u+%lluK", x->calls.ids[e],
                                       (unsigned long long)(off >> 10));
                if (u >= 0)
                    rt += (size_t)snprintf(regs + rt, sizeof regs - rt, "=unit.%d", u);
            }
            FT_TRACE("CUDA graphs: call %zu (node %p) in segment %d: %s, %zu region(s)%s, streamed units:%s; "
                     "regions:%s", i, (void *)c->orig, k,
                     c->key != 0 && c->name != NULL ? c->name : "(a copy or set)", c->n,
                     x->calls.lost ? " (some lost)" : "", at > 0 ? units : " none", regs);
        }
    }
    return k + 1;
}

/* The room of the program's pools that x's calls point into, in host-located memory
 * since the plan (XLA's prefill temporaries, carved from it after the decode's replays),
 * comes to the device once per plan, before the graph is cut (res_room_in). res.lock
 * held. */
static void graph_room_in(const owner_t *x, uint64_t exec)
{
    if (__atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED) == 0 || x->calls.n_ids == 0)
        return;
    uint64_t *ptr = malloc(x->calls.n_ids * sizeof *ptr);
    if (ptr == NULL)
        return;
    size_t n = 0;
    for (size_t e = 0; e < x->calls.n_ids; e++)
        if (res_in_room(x->calls.lo[e]))
            ptr[n++] = x->calls.lo[e];
    char what[64];
    snprintf(what, sizeof what, "graph %#llx's calls", (unsigned long long)exec);
    res_room_in(ptr, n, what, 0);
    free(ptr);
}

/* The segment each call's node runs in (home): that of the first call naming the
 * node. A call that made no node names the one before it, which may lie in the
 * segment before: the node stays there, and no segment destroys it twice over. */
static int cmp_call_node(const void *a, const void *b, void *arg)
{
    const call_t *v = arg;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    uintptr_t x = (uintptr_t)v[i].node, y = (uintptr_t)v[j].node;
    return x != y ? (x > y) - (x < y) : (i > j) - (i < j);
}

static int node_homes(const owner_t *x, const int *seg_of, int *home)
{
    size_t n = x->calls.n, *by = malloc((n + 1) * sizeof *by);
    if (by == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        by[i] = i;
    qsort_r(by, n, sizeof *by, cmp_call_node, x->calls.v);
    for (size_t k = 0; k < n; k++) {
        size_t i = by[k], first = k > 0 && x->calls.v[by[k - 1]].node == x->calls.v[i].node ? by[k - 1] : i;
        home[i] = first == i ? seg_of[i] : home[first];
    }
    free(by);
    return 0;
}

/* Segment k: the clone less every node of the other segments (*graph), instantiated. */
static CUresult seg_instantiate(const owner_t *x, const int *home, int k, CUgraphExec *out, CUgraph *graph)
{
    CUgraph g = NULL;
    CUresult rc = drv.graph_clone(&g, x->clone);
    for (size_t i = 0; rc == CUDA_SUCCESS && i < x->calls.n; i++) {
        if (home[i] == k)
            continue;
        /* Calls that name one node: destroyed once (the later finds it gone). */
        CUgraphNode n = NULL;
        if (drv.graph_find_in_clone(&n, x->calls.v[i].node, g) == CUDA_SUCCESS)
            rc = drv.graph_destroy_node(n);
    }
    if (rc == CUDA_SUCCESS)
        rc = drv.graph_instantiate(out, g, x->flags);
    /* The child graphs set since the clone was made. */
    for (int i = 0; rc == CUDA_SUCCESS && i < x->n_re; i++) {
        CUgraphNode n = NULL;
        if (drv.graph_find_in_clone(&n, x->re_node[i], g) == CUDA_SUCCESS)
            rc = drv.graph_exec_child_set != NULL ? drv.graph_exec_child_set(*out, n, x->re_child[i])
                                                  : CUDA_ERROR_NOT_SUPPORTED;
    }
    if (rc == CUDA_SUCCESS) {
        *graph = g;
    } else {
        if (*out != NULL)
            drv.graph_exec_destroy(*out);
        *out = NULL;
        if (g != NULL)
            drv.graph_destroy(g);
    }
    return rc;
}

/* A unit read again after other units' segments this many times in one graph is read
 * all over it (PyTorch's rotary frequencies in every layer's compiled kernel, seen with
 * torch.compile's reduce-overhead): it is kept on the device rather than loaded that
 * many times a launch. A unit read twice (a graph of two forwards) streams. */
#define AGAIN_PIN 2

/* Units that segments apart read (a unit read again after another's segment): each
 * such unit is loaded again at every launch. Those read again AGAIN_PIN times or more
 * are kept on the device (res_pin_unit); 1 when one was (the cut is made again). The
 * others are said once per cut, with the first few; FT_LOG_LEVEL=debug lists every
 * segment's units. seen: scratch of res.n_units. */
static int units_again(const owner_t *x, uint64_t exec, const int *seg_of, int *seen)
{
    int *count = calloc((size_t)res.n_units + 1, sizeof *count), pinned = 0;
    char list[256] = "", dbg[1024] = "";
    size_t len = 0, dlen = 0;
    int again = 0, k = -1;
    for (int u = 0; u < res.n_units; u++)
        seen[u] = -1;
    for (size_t i = 0; i < x->calls.n; i++) {
        const call_t *c = &x->calls.v[i];
        if (seg_of[i] != k && dlen < sizeof dbg)
            dlen += (size_t)snprintf(dbg + dlen, sizeof dbg - dlen, "%s%d:", k < 0 ? "" : " | ", seg_of[i]);
        k = seg_of[i];
        for (size_t j = 0; j < 2 * c->n; j++) {
            int u = cut_unit(call_id(&x->calls, c, j));
            if (u < 0 || seen[u] == k)
                continue;
            if (dlen < sizeof dbg)
                dlen += (size_t)snprintf(dbg + dlen, sizeof dbg - dlen, " %d", u);
            if (seen[u] >= 0 && seen[u] < k - 1) {
                again++;
                if (count != NULL)
                    count[u]++;
                if (len < sizeof list)
                    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s (segments %d and %d)",
                                            again > 1 ? ", " : "", ft_disc_unit(disc, (size_t)u)->name, seen[u], k);
            }
            seen[u] = k;
        }
    }
    FT_DEBUG("CUDA graphs: graph %#llx's segments and the units they read: %s", (unsigned long long)exec, dbg);
    char why[128];
    for (int u = 0; count != NULL && u < res.n_units; u++) {
        if (count[u] < AGAIN_PIN)
            continue;
        snprintf(why, sizeof why, "CUDA graph %#llx reads it again after other units' segments %d times",
                 (unsigned long long)exec, count[u]);
        pinned |= res_pin_unit(u, why) == 0;
    }
    free(count);
    if (again > 0 && !pinned)
        FT_INFO("CUDA graphs: graph %#llx reads %d unit(s) again after other units' segments, each loaded again at "
                "every launch: %s", (unsigned long long)exec, again, list);
    return pinned;
}

/* x's segments for the plan now (cap_lock and res.lock held): made once per plan.
 * Returns how many (0: launched whole: no clone, not needed, or it failed, said once). */
static int segments(owner_t *x, uint64_t exec)
{
    if (x->clone == NULL || x->t.all)
        return 0;
    const char *forbidden = __atomic_load_n(&cut_forbidden, __ATOMIC_ACQUIRE);
    if (forbidden != NULL) {
        if (x->n_seg > 0 || !x->cut_said)
            FT_INFO("CUDA graphs: graph %#llx is not cut into segments: %s; its streamed units are loaded "
                    "before each of its launches", (unsigned long long)exec, forbidden);
        x->cut_said = 1;
        segs_free(x);
        return 0;
    }
    if (x->seg_plan == res.switches)
        return x->n_seg;
    segs_free(x);
    parts_free(x); /* profiling's, done with */
    if (x->stale) { /* the clone no longer is the graph the application launches */
        if (!x->cut_said)
            FT_INFO("CUDA graphs: graph %#llx is not cut into segments for this plan: %s; its streamed units are "
                    "loaded before each of its launches", (unsigned long long)exec, x->why);
        x->cut_said = 1;
        x->seg_plan = res.switches;
        return 0;
    }
    x->seg_plan = res.switches;
    graph_room_in(x, exec);
    int *seg_of = malloc((x->calls.n + 1) * sizeof *seg_of), *home = malloc((x->calls.n + 1) * sizeof *home);
    int *mark = malloc(((size_t)res.n_units + 1) * sizeof *mark), *last = malloc(((size_t)res.n_units + 1) * sizeof *last);
    int n = 0, units = 0;
    const char *why = NULL;
    CUresult rc = CUDA_SUCCESS;
    if (seg_of == NULL || home == NULL || mark == NULL || last == NULL) {
        why = "no memory";
    } else {
        /* Units read all over the graph are kept on the device (units_again), and the
         * cut is made again without them. */
        for (int again = 0;; again = 1) {
            n = cut_points(x, seg_of, mark, last);
            units = 0;
            for (int u = 0; u < res.n_units; u++)
                units += last[u] >= 0;
            /* Cut only where it streams: the graph's units do not fit the slots together. */
            if (n < 2 || units <= res.slots)
                n = 0;
            FT_DEBUG("CUDA graphs: graph %#llx: %d segment(s), %d streamed unit(s) read, %d slot(s)",
                     (unsigned long long)exec, n, units, res.slots);
            if (again || n == 0 || !units_again(x, exec, seg_of, mark))
                break;
        }
        if (n > 0 && node_homes(x, seg_of, home) != 0)
            why = "no memory";
        /* A node's calls apart (one named again after other nodes' calls): its segment
         * would run touches the guard loads for a later one. */
        for (size_t i = 0; why == NULL && n > 0 && i < x->calls.n; i++)
            if (home[i] != seg_of[i])
                why = "a node's calls fall in two segments";
    }
    if (why == NULL && n > 0 && (x->seg = calloc((size_t)n, sizeof *x->seg)) == NULL)
        why = "no memory";
    uint64_t t0 = now_ns();
    for (int k = 0; why == NULL && k < n; k++) {
        seg_t *sg = &x->seg[k];
        x->n_seg = k + 1;
        sg->begins = sg->ends = -1;
        size_t m = 0;
        for (size_t i = 0; i < x->calls.n; i++)
            if (seg_of[i] == k)
                m += x->calls.v[i].n;
        sg->ids = malloc((m + 1) * sizeof *sg->ids);
        sg->lo = malloc((m + 1) * sizeof *sg->lo);
        if (sg->ids == NULL || sg->lo == NULL) {
            why = "no memory";
            break;
        }
        for (size_t i = 0; i < x->calls.n; i++) {
            if (seg_of[i] != k)
                continue;
            const call_t *c = &x->calls.v[i];
            /* The segment's own ids (its guard, res_guard_graph, adds the pieces they
             * reach on into); its first and last units with those pieces. */
            for (size_t j = 0; j < 2 * c->n; j++) {
                uint32_t id = call_id(&x->calls, c, j);
                if (id == UINT32_MAX)
                    continue;
                int u = cut_unit(id);
                if (j < c->n) {
                    uint64_t lo = x->calls.lo[c->first + j];
                    size_t q = 0;
                    while (q < sg->n && sg->ids[q] != id)
                        q++;
                    if (q == sg->n) {
                        sg->ids[sg->n++] = id;
                        sg->lo[q] = lo;
                    } else if (sg->lo[q] != 0 && (lo == 0 || lo > sg->lo[q])) {
                        sg->lo[q] = lo; /* the highest call's: any call that reaches on counts */
                    }
                }
                if (u >= 0 && sg->begins < 0)
                    sg->begins = u;
                if (u >= 0 && last[u] == k && sg->ends < 0)
                    sg->ends = u;
            }
        }
        if ((rc = seg_instantiate(x, home, k, &sg->exec, &sg->graph)) != CUDA_SUCCESS)
            why = "a segment could not be made";
    }
    free(seg_of);
    free(home);
    free(mark);
    free(last);
    if (why != NULL) {
        segs_free(x);
        FT_WARN("CUDA graphs: graph %#llx cannot be cut into segments (%s, CUresult %d): its streamed units "
                "are loaded before each of its launches, over the slots", (unsigned long long)exec, why, (int)rc);
        return 0;
    }
    if (x->n_seg > 0) {
        cut_graphs++;
        FT_INFO("CUDA graphs: graph %#llx reads %d streamed unit(s), more than the %d slot(s) hold: cut into %d "
                "segment(s) at its units' first launches (%.1f ms), launched one after another with the units "
                "streamed between them", (unsigned long long)exec, units, res.slots, x->n_seg,
                (double)(now_ns() - t0) / 1e6);
    }
    return x->n_seg;
}

/* FT_LOG_LEVEL=trace, before a segment runs: from each pointer of its calls, the
 * driver is asked granule by granule (CU_POINTER_ATTRIBUTE_MAPPED) for up to 128 MiB on,
 * within its allocation (its region, and the pieces of it after); the first unmapped one
 * a pointer reaches is said with what FlexTensor holds there, so that a fault in the segment is matched
 * with the memory a kernel of it reached. */
static void trace_unmapped(const seg_t *sg, uint64_t exec, int k)
{
    cuPointerGetAttribute_fn_t get = (cuPointerGetAttribute_fn_t)ft_shim_real(FT_FN_cuPointerGetAttribute);
    size_t g = vmm_gran();
    if (get == NULL || g == 0)
        return;
    size_t asked = 0, bad = 0;
    for (size_t q = 0; q < sg->n; q++) {
        uint64_t lo = sg->lo[q];
        uint32_t first = 0;
        if (lo == 0)
            continue;
        for (uint64_t a = lo & ~(uint64_t)(g - 1); a < lo + (128ull << 20); a += g) {
            uint64_t at = a < lo ? lo : a;
            ft_region_t r;
            if (!ft_regions_find(regions, at, &r))
                break;
            /* within the pointer's allocation: its region, and the pieces after it */
            if (at == lo)
                first = r.id;
            else if (r.id != first && (!(r.flags & FT_REGION_PIECE) || (r.flags & FT_REGION_PIECE_FIRST)))
                break;
            unsigned int mapped = 0;
            CUresult rc = get(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, (CUdeviceptr)at);
            asked++;
            if (rc == CUDA_SUCCESS && mapped)
                continue;
            int u = r.id < res.n_ids && res.by_id[r.id] >= 0 ? res.regions[res.by_id[r.id]].unit : -1;
            vmm_t *v = vmm_find(a);
            bad++;
            FT_TRACE("CUDA graphs: graph %#llx segment %d: region %u's pointer %#llx reaches %#llx (+%llu KiB), "
                     "not mapped (CUresult %d, mapped %u): region %u (%llu KiB, flags %#x)%s%s%s, unit %d%s%s",
                     (unsigned long long)exec, k, sg->ids[q], (unsigned long long)lo, (unsigned long long)at,
                     (unsigned long long)((at - lo) >> 10), (int)rc, mapped, r.id,
                     (unsigned long long)(r.size >> 10), r.flags, v == NULL ? ", no piece of FlexTensor's there" : "",
                     v != NULL && v->on_host ? ", a piece in host memory" : "",
                     v != NULL && v->spilled ? ", spilled" : "", u,
                     u >= 0 && res.units[u].loaded ? " (loaded)" : u >= 0 ? " (not loaded)" : "",
                     u >= 0 && plan.out.resident[u] ? " (resident in the plan)" : "");
            break;
        }
    }
    FT_TRACE("CUDA graphs: graph %#llx segment %d: %zu granule(s) its %zu region(s)' pointers reach asked of the "
             "driver, %zu pointer(s) reach an unmapped one", (unsigned long long)exec, k, asked, sg->n, bad);
}

/* Launches x's segments in order on stream (cap_lock and res.lock held): each guarded
 * as a call touching its regions, the calls before the last one completed here (the
 * last one's by engine_leave, as a launch's). */
static void launch_segments(owner_t *x, uint64_t exec, cudaStream_t stream, graph_launch_t *how)
{
    char name[64];
    how->launched = 1;
    how->rc = 0;
    if (x->done_set && x->last_stream != stream)
        ev.wait(stream, x->done, 0);
    for (int k = 0; k < x->n_seg; k++) {
        seg_t *sg = &x->seg[k];
        snprintf(name, sizeof name, "graph %#llx segment %d", (unsigned long long)exec, k);
        graph_units_loaded += (uint64_t)res_guard_segment(name, sg->ids, sg->lo, sg->n, k == 0, sg->begins, sg->ends, stream);
        if (FT_LOG_ENABLED(FT_LOG_TRACE))
            trace_unmapped(sg, exec, k);
        int rc = how->fn(how->real, (uint64_t)(uintptr_t)sg->exec, stream);
        if (rc != 0) {
            how->rc = rc;
            return;
        }
        /* FT_LOG_LEVEL=trace: each segment is waited for and its end said, so that a
         * fault is seen in the segment that made it (this changes the timing: a fault
         * that comes only without the wait is one of ordering). */
        if (FT_LOG_ENABLED(FT_LOG_TRACE)) {
            cudaError_t e = REAL(cudaStreamSynchronize)(stream);
            FT_TRACE("CUDA graphs: graph %#llx segment %d of %d ran: cudaError %d", (unsigned long long)exec, k,
                     x->n_seg, (int)e);
        }
        if (k + 1 < x->n_seg)
            res_call_done();
    }
    if (x->done == NULL && ev.create(&x->done, cudaEventDisableTiming) != cudaSuccess)
        x->done = NULL;
    x->done_set = x->done != NULL && ev.record(x->done, stream) == cudaSuccess;
    x->last_stream = stream;
    cut_launches++;
    cut_segments += (uint64_t)x->n_seg;
}

/* --- discovery and profiling of graph launches --------------------------------------------- */

/* A graph's kernels never pass through the launch wrappers. In discovery and profiling
 * each launch of a graph whose calls FlexTensor saw captured is observed as those calls,
 * in capture order, on the launching thread's lane (observe_replayed): discovery finds
 * the passes of a program whose work is graph replays (torch.compile's reduce-overhead,
 * a serving engine that captures its decode at start-up) as it finds eager ones. Capture
 * order is an order of the graph's dependencies, so it is an order the kernels may run
 * in. The calls' sure regions are fed; a copy or set is a write of its destination. */

/* Graph launches in discovery or profiling whose calls are not known (captured before
 * FlexTensor saw it, changed since, lost, or launched during another capture): their
 * kernels are not observed. Atomic. */
static uint64_t unobserved;

uint64_t capture_unobserved(void)
{
    return __atomic_load_n(&unobserved, __ATOMIC_RELAXED);
}

/* exec's calls fed to discovery or profiling (ph) before its launch, into *calls (a copy,
 * the caller frees it); in profiling each kernel's position in the lane's pass into
 * *pos (-1: none; the caller frees it). 1 when observed, 0 when its calls are not known. */
static int replay_feed(uint64_t exec, int ph, calls_t *calls, long **pos)
{
    *pos = NULL;
    pthread_mutex_lock(&cap_lock);
    owner_t *x = *find(&execs, exec);
    int ok = x != NULL && !x->t.all && x->calls.n > 0 && !x->calls.lost && calls_copy(calls, &x->calls) == 0;
    pthread_mutex_unlock(&cap_lock);
    if (!ok)
        return 0;
    long *p = ph == PHASE_PROFILING ? malloc(calls->n * sizeof *p) : NULL;
    ft_scan_set_t set;
    for (size_t i = 0; i < calls->n; i++) {
        const call_t *c = &calls->v[i];
        ft_scan_set_clear(&set);
        for (size_t j = 0; j < c->n; j++) {
            size_t e = c->first + j;
            /* Unsure words are left out, as an eager launch's are (a copy has none). */
            if ((calls->flags[e] & CALL_UNSURE) || !ft_scan_set_add(&set, calls->ids[e], calls->ptr[e]))
                continue;
            set.lo[set.n - 1] = calls->lo[e];
            set.indirect[set.n - 1] = (calls->flags[e] & CALL_INDIRECT) != 0;
        }
        long r = observe_replayed(ph, c->key, c->name, &set, c->written);
        ft_scan_set_free(&set);
        if (p != NULL)
            p[i] = r >= 0 ? r : -1;
        if (r == -2) { /* observation is over (the phase moved on, or its bound) */
            for (size_t k = i + 1; p != NULL && k < calls->n; k++)
                p[k] = -1;
            break;
        }
    }
    *pos = p;
    return 1;
}

/* This thread's profiling tag for its launch (profile_launch), popped. */
static void tag_pop(void)
{
    if (tag_pushed) {
        tag_pushed = 0;
        ft_cupti_tag_pop();
    }
}

/* Profiling's cut of x for the parts beginning at first[0..n) (cap_lock held): made, or
 * kept from the last launch when the same. 1 when x has it, 0 when it cannot (no clone,
 * no memory, remade too often: the pass's timing then goes without this launch). */
#define PARTS_REMADE_MAX 4
static int parts(owner_t *x, const size_t *first, int n)
{
    if (x->p_n == n && memcmp(x->p_first, first, (size_t)n * sizeof *first) == 0)
        return 1;
    if (x->clone == NULL || x->stale || x->p_made >= PARTS_REMADE_MAX)
        return 0;
    parts_free(x);
    x->p_made++;
    int *seg_of = malloc((x->calls.n + 1) * sizeof *seg_of), *home = malloc((x->calls.n + 1) * sizeof *home);
    x->p_first = malloc((size_t)n * sizeof *x->p_first);
    x->p_exec = calloc((size_t)n, sizeof *x->p_exec);
    x->p_graph = calloc((size_t)n, sizeof *x->p_graph);
    int ok = seg_of != NULL && home != NULL && x->p_first != NULL && x->p_exec != NULL && x->p_graph != NULL;
    for (size_t i = 0, k = 0; ok && i < x->calls.n; i++) {
        while (k + 1 < (size_t)n && first[k + 1] <= i)
            k++;
        seg_of[i] = (int)k;
    }
    ok = ok && node_homes(x, seg_of, home) == 0;
    x->p_n = ok ? n : 0;
    for (int k = 0; ok && k < n; k++)
        ok = seg_instantiate(x, home, k, &x->p_exec[k], &x->p_graph[k]) == CUDA_SUCCESS;
    free(seg_of);
    free(home);
    if (!ok) {
        parts_free(x);
        return 0;
    }
    memcpy(x->p_first, first, (size_t)n * sizeof *first);
    FT_DEBUG("profiling: graph %#llx launched in %d part(s), cut where its units' times begin", (unsigned long long)x->key,
             n);
    return 1;
}

/* A graph launch in profiling, its calls at positions pos in the lane's pass: profiling
 * times a unit from its first launch to the next unit's (CUDA events recorded between
 * them, or CUPTI's kernel records tagged by unit), so the graph is launched in parts cut
 * where a unit's time begins, each after profile_launch for its calls. A graph in which
 * no unit begins is launched whole after them. Sets how->launched when it launched the
 * parts. */
static void replay_profiled(uint64_t exec, cudaStream_t stream, const calls_t *calls, const long *pos,
                            graph_launch_t *how)
{
    uint64_t lane = lane_id();
    size_t n = calls->n, *first = malloc((n + 1) * sizeof *first), nf = 0;
    if (first == NULL)
        return;
    first[nf++] = 0;
    for (size_t i = 1; i < n; i++)
        if (calls->v[i].key != 0 && pos[i] >= 0 && profile_cut_at(pos[i]))
            first[nf++] = i;
    int whole = nf == 1;
    owner_t *x = NULL;
    if (!whole) {
        pthread_mutex_lock(&cap_lock);
        x = *find(&execs, exec);
        if (x == NULL || x->t.all || !parts(x, first, (int)nf)) {
            pthread_mutex_unlock(&cap_lock);
            FT_LOG_CAPPED(FT_LOG_INFO, 2, "profiling: graph %#llx cannot be launched in parts between its units "
                          "(%s): it is timed whole, its units' times all in its last one's",
                          (unsigned long long)exec,
                          x == NULL || x->t.all ? "its calls are no longer known"
                          : x->clone == NULL    ? "it was not cloned"
                                                : "its parts could not be made, or changed too often");
            whole = 1;
        }
    }
    /* Timed whole: its calls' positions go to profiling before the caller launches it,
     * so the pass is timed (before, a program whose passes were such launches, as
     * XLA's under FT_GRAPH_CUT=false, never finished profiling). */
    if (whole) {
        for (size_t i = 0; i < n; i++)
            if (calls->v[i].key != 0) {
                tag_pop();
                profile_launch(lane, pos[i], stream); /* its tag popped after the launch (engine_leave) */
            }
        free(first);
        return;
    }
    how->launched = 1;
    how->rc = 0;
    if (x->done_set && x->last_stream != stream)
        ev.wait(stream, x->done, 0);
    for (size_t k = 0; k < nf; k++) {
        size_t end = k + 1 < nf ? first[k + 1] : n;
        for (size_t i = first[k]; i < end; i++)
            if (calls->v[i].key != 0) {
                tag_pop();
                profile_launch(lane, pos[i], stream);
            }
        int rc = how->fn(how->real, (uint64_t)(uintptr_t)x->p_exec[k], stream);
        tag_pop();
        if (rc != 0) {
            how->rc = rc;
            break;
        }
    }
    if (x->done == NULL && ev.create(&x->done, cudaEventDisableTiming) != cudaSuccess)
        x->done = NULL;
    x->done_set = x->done != NULL && ev.record(x->done, stream) == cudaSuccess;
    x->last_stream = stream;
    pthread_mutex_unlock(&cap_lock);
    free(first);
}

/* --- launch --------------------------------------------------------------------------------- */

/* Before the plan, with FT_SPILL holding allocations in host memory: the graph's are
 * brought in (every one for a graph that may touch anything). Its moves are
 * synchronous and the graph's kernels run later on a stream the legacy stream may not
 * wait for, so the caller waits for the graph before another call can move one out. */
static void spill_for_graph(const touches_t *t, cudaStream_t stream)
{
    spill_touch(t->ptr, t->n, t->all, stream);
}

/* What the graph of `exec` touches, brought in before its launch on `stream` (FT_SPILL
 * before the plan, the guard or the cut after it; res.lock held). Returns 1 when the
 * caller must wait for the graph after launching it (FT_SPILL's moves). */
static int graph_guard(uint64_t exec, cudaStream_t stream, unsigned s, graph_launch_t *how)
{
    int streaming = state_phase(s) == PHASE_STREAMING, spill = !streaming && state_spill(s);
    if (!streaming && !spill)
        return 0;
    if (capture_under_way() && (spill || capture_of(stream) != 0)) {
        /* Into another capture (a child graph), or moves that would break one: nothing
         * can be brought in now. */
        FT_WARN_CAPPED(1, "graph launch during a stream capture: FlexTensor cannot bring its memory in now "
                       "(a launch into a capture, or FT_SPILL's synchronous moves); it is left as it is");
        return 0;
    }
    pthread_mutex_lock(&cap_lock);
    owner_t *x = *find(&execs, exec);
    graph_launches++;
    if (streaming && x != NULL && segments(x, exec) > 0) {
        launch_segments(x, exec, stream, how);
        pthread_mutex_unlock(&cap_lock);
        return 0;
    }
    touches_t t;
    if (x != NULL)
        touches_copy(&t, &x->t);
    else
        memset(&t, 0, sizeof t), t.all = 1;
    /* Why a graph that may read more than the slots is not cut: once, at its first
     * launch under a plan. */
    if (streaming && x != NULL && x->why[0] != '\0' && !x->cut_said) {
        x->cut_said = 1;
        FT_INFO("CUDA graphs: graph %#llx is not cut into segments (%s): its streamed units are loaded before "
                "each of its launches", (unsigned long long)exec, x->why);
    }
    pthread_mutex_unlock(&cap_lock);
    int wait = 0;
    if (spill) {
        spill_for_graph(&t, stream);
        wait = 1;
    } else {
        char name[48];
        snprintf(name, sizeof name, "graph %#llx", (unsigned long long)exec);
        int n = res_guard_graph(name, t.id, NULL, t.n, t.all, stream);
        pthread_mutex_lock(&cap_lock);
        graph_units_loaded += (uint64_t)n;
        pthread_mutex_unlock(&cap_lock);
    }
    touches_free(&t);
    return wait;
}

/* Before the graph of `exec` is launched on `stream` (the engine entered; res.lock held
 * when `held`): observed in discovery and profiling, what it touches brought in
 * (graph_guard), and in profiling launched in parts (how). Returns 1 when the caller
 * must wait for the graph after launching it. */
int capture_graph_launch(uint64_t exec, cudaStream_t stream, int held, graph_launch_t *how)
{
    how->launched = 0;
    unsigned s = engine_state();
    int ph = state_phase(s);
    calls_t calls;
    long *pos = NULL;
    memset(&calls, 0, sizeof calls);
    if (ph == PHASE_DISCOVERY || ph == PHASE_PROFILING) {
        /* Not during another capture: discovery and profiling stand still then. */
        if (capture_under_way() || !replay_feed(exec, ph, &calls, &pos))
            __atomic_add_fetch(&unobserved, 1, __ATOMIC_RELAXED);
        s = engine_state(); /* discovery may have ended at one of its calls */
    }
    int wait = held ? graph_guard(exec, stream, s, how) : 0;
    if (pos != NULL && !how->launched && engine_phase() == PHASE_PROFILING)
        replay_profiled(exec, stream, &calls, pos, how);
    free(pos);
    calls_free(&calls);
    return wait;
}

void capture_report(void)
{
    pthread_mutex_lock(&cap_lock);
    uint64_t n = graph_launches, u = graph_units_loaded, cl = cut_launches, cs = cut_segments, cg = cut_graphs;
    uint64_t mg = made_graphs, mn = made_nodes, nf = nodes_followed, ug = unknown_graphs;
    pthread_mutex_unlock(&cap_lock);
    if (mg > 0)
        FT_INFO("CUDA graphs: %llu graph(s) built node by node, %llu node(s) recorded as they were added; %llu "
                "executable-graph node change(s) followed", (unsigned long long)mg, (unsigned long long)mn,
                (unsigned long long)nf);
    if (ug > 0)
        FT_INFO("CUDA graphs: %llu instantiation(s) of graphs with a node FlexTensor did not see made (every "
                "streamed unit loaded for their launches)", (unsigned long long)ug);
    if (n > 0)
        FT_INFO("CUDA graphs: %llu launch(es) guarded, %llu streamed unit(s) loaded for them",
                (unsigned long long)n, (unsigned long long)u);
    if (cg > 0)
        FT_INFO("CUDA graphs: %llu graph(s) cut into segments; %llu launch(es) of them streamed, %llu segment "
                "launch(es) in all", (unsigned long long)cg, (unsigned long long)cl, (unsigned long long)cs);
}

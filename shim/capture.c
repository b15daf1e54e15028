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

/* A capture under way (by its CUDA id), a graph or an executable graph (by handle). */
typedef struct touch_owner {
    uint64_t key;
    touches_t t;
    struct touch_owner *next;
} owner_t;

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static owner_t *captures, *graphs, *execs;
static int under_way; /* captures under way: atomic, read without cap_lock */
static uint64_t graph_launches, graph_units_loaded; /* cap_lock, for the exit report */

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

/* A captured call touches the regions of `set` (every region when it lost some). */
void capture_note(uint64_t id, const ft_scan_set_t *set)
{
    pthread_mutex_lock(&cap_lock);
    owner_t *c = *find(&captures, id);
    if (c != NULL) {
        for (size_t i = 0; i < set->n; i++)
            touches_add(&c->t, set->id[i], set->ptr[i]);
        c->t.all |= set->dropped > 0;
    }
    pthread_mutex_unlock(&cap_lock);
}

/* A captured copy or set touches dst and src (NULL: none). */
void capture_note_copy(uint64_t id, const void *dst, const void *src, size_t dspan, size_t sspan)
{
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    const void *p[2] = { dst, src };
    size_t span[2] = { dspan, sspan };
    for (int i = 0; i < 2; i++) {
        ft_region_t r;
        if (p[i] == NULL || !ft_regions_find(regions, (uint64_t)(uintptr_t)p[i], &r))
            continue;
        ft_scan_set_add(&set, r.id, (uint64_t)(uintptr_t)p[i]);
        /* Over an allocation served in pieces: every piece its bytes reach (a span not
         * known: to the allocation's end). */
        uint64_t end = span[i] != 0 ? (uint64_t)(uintptr_t)p[i] + span[i] : UINT64_MAX;
        ft_region_t q;
        for (; r.base + r.size < end && piece_after(&r, &q); r = q)
            ft_scan_set_add(&set, q.id, q.base); /* out of memory: counted in `dropped`, every unit */
    }
    capture_note(id, &set);
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

/* A capture began on s (the real call succeeded): it is recorded under its CUDA id. */
static void began(cudaStream_t s)
{
    uint64_t id = capture_of(s);
    owner_t *c = id != 0 ? calloc(1, sizeof *c) : NULL;
    pthread_mutex_lock(&cap_lock);
    if (c != NULL) {
        c->key = id;
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
        FT_LOG_CAPPED(FT_LOG_INFO, 4, "stream capture %llu began during %s: it stands still until the capture ends, and "
                       "the graph's replays are not observed", (unsigned long long)id,
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
    if (ok && graph != 0) {
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
    if (c != NULL) {
        touches_free(&c->t);
        free(c);
    }
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
static int spill_stopped;

static void before_capture(void)
{
    if (capture_under_way() || !state_spill(engine_state()))
        return;
    uint64_t held = __atomic_load_n(&spill_bytes, __ATOMIC_RELAXED);
    spill_stop("a stream capture begins (a captured copy, set or kernel cannot reach host memory)");
    spill_stopped_bytes = held - __atomic_load_n(&spill_bytes, __ATOMIC_RELAXED);
    spill_stopped = 1;
}

/* For the verdict: "; FT_SPILL stopped at ..." when a capture made it stop, else "". */
const char *capture_spill_note(char *buf, size_t len)
{
    if (!spill_stopped)
        return "";
    snprintf(buf, len, "; FT_SPILL stopped when a stream capture began before the plan (%.1f MiB brought back "
             "to the device, over the budget)", (double)spill_stopped_bytes / 1048576.0);
    return buf;
}

cudaError_t ft_hook_rt_begin_capture(cudaStreamBeginCapture_fn_t real, cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    mover_hold(); /* no move of the prefetching thread from here to the capture's count */
    before_capture();
    cudaError_t rc = real(s, mode);
    if (rc == cudaSuccess)
        began(s);
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
        began(s);
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
        began((cudaStream_t)s);
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
        began((cudaStream_t)s);
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

/* exec was instantiated from graph: it touches what the graph does. */
static void instantiated(uint64_t exec, uint64_t graph)
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
    owner_t **old = find(&execs, exec); /* a handle reused after a destroy we missed */
    if (*old != NULL) {
        owner_t *o = *old;
        *old = o->next;
        touches_free(&o->t);
        free(o);
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
        touches_free(&o->t);
        free(o);
    }
    pthread_mutex_unlock(&cap_lock);
}

cudaError_t ft_hook_rt_graph_instantiate(cudaGraphInstantiate_fn_t real, cudaGraphExec_t *exec, cudaGraph_t graph,
                                         unsigned long long flags)
{
    cudaError_t rc = real(exec, graph, flags);
    if (rc == cudaSuccess && exec != NULL)
        instantiated((uint64_t)(uintptr_t)*exec, (uint64_t)(uintptr_t)graph);
    return rc;
}

CUresult ft_hook_drv_graph_instantiate(cuGraphInstantiateWithFlags_fn_t real, CUgraphExec *exec, CUgraph graph,
                                       unsigned long long flags)
{
    CUresult rc = real(exec, graph, flags);
    if (rc == CUDA_SUCCESS && exec != NULL)
        instantiated((uint64_t)(uintptr_t)*exec, (uint64_t)(uintptr_t)graph);
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

/* --- launch --------------------------------------------------------------------------------- */

/* Before the plan, with FT_SPILL holding allocations in host memory: the graph's are
 * brought in (every one for a graph that may touch anything). Its moves are
 * synchronous and the graph's kernels run later on a stream the legacy stream may not
 * wait for, so the caller waits for the graph before another call can move one out. */
static void spill_for_graph(const touches_t *t, cudaStream_t stream)
{
    spill_touch(t->ptr, t->n, t->all, stream);
}

/* Before the graph of `exec` is launched on `stream` (the engine entered; res.lock held
 * when guarded): what it touches is brought in. Returns 1 when the caller must wait
 * for the graph after launching it (FT_SPILL's moves). */
int capture_graph_launch(uint64_t exec, cudaStream_t stream, int held)
{
    if (!held)
        return 0;
    unsigned s = engine_state();
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
    touches_t t;
    if (x != NULL)
        touches_copy(&t, &x->t);
    else
        memset(&t, 0, sizeof t), t.all = 1;
    graph_launches++;
    pthread_mutex_unlock(&cap_lock);
    int wait = 0;
    if (spill) {
        spill_for_graph(&t, stream);
        wait = 1;
    } else {
        char name[48];
        snprintf(name, sizeof name, "graph %#llx", (unsigned long long)exec);
        int n = res_guard_graph(name, t.id, t.n, t.all, stream);
        pthread_mutex_lock(&cap_lock);
        graph_units_loaded += (uint64_t)n;
        pthread_mutex_unlock(&cap_lock);
    }
    touches_free(&t);
    return wait;
}

void capture_report(void)
{
    pthread_mutex_lock(&cap_lock);
    uint64_t n = graph_launches, u = graph_units_loaded;
    pthread_mutex_unlock(&cap_lock);
    if (n > 0)
        FT_INFO("CUDA graphs: %llu launch(es) guarded, %llu streamed unit(s) loaded for them",
                (unsigned long long)n, (unsigned long long)u);
}

/* graphnodes.c - CUDA graphs built node by node, the way XLA builds its command
 * buffers: an empty graph (cudaGraphCreate), then kernel, copy, set, empty and child
 * graph nodes added one by one, executable graphs changed node by node between
 * launches (a buffer moved: the kernel node that reads it given new arguments, a child
 * graph traced again). Each added node is recorded as the captured call it stands for
 * (capture.c), so that such a graph is guarded, observed and cut as a captured one is.
 *
 * What each hook reads of its parameters: a kernel node's arguments (scanned as a
 * captured launch's, observe_node_args), a copy's or set's device addresses and span.
 * A node's parameters changed in its graph, or a child graph handed out to be changed
 * in place, make that graph unknown (every streamed unit loaded before its launches);
 * an executable graph's kernel, copy, set or child node changed is followed.
 *
 * Owns nothing: capture.c keeps the records, under its lock. */
#define _GNU_SOURCE
#include "shim/engine.h"

/* --- what a node touches ------------------------------------------------------------------- */

/* A kernel node's regions (key: its CUfunction, CUkernel or runtime stub). */
static void kernel_set(ft_scan_set_t *set, uint64_t key, int is_stub, void **params, void **extra,
                       const char **name)
{
    ft_scan_set_clear(set);
    observe_node_args(key, is_stub, params, extra, set, name);
}

/* The key of a driver kernel node's kernel: its function, else (CUDA 12's parameters)
 * its library kernel. Read only once the call succeeded: CUDA 11's struct ends before
 * `kern`, and a call with it succeeds only with a function. */
static uint64_t drv_kernel_key(const CUDA_KERNEL_NODE_PARAMS *p)
{
    return p->func != NULL ? (uint64_t)(uintptr_t)p->func : (uint64_t)(uintptr_t)p->kern;
}

/* A set's bytes from dst: a row, or rows `pitch` apart. */
static size_t set_span(size_t pitch, size_t width, size_t elem, size_t height)
{
    return height > 1 ? pitch * height : width * elem;
}

/* A copy's device address on one side (0: host memory or an array). */
static uint64_t drv_copy_side(CUmemorytype type, CUdeviceptr dev, size_t x, size_t y, size_t z, size_t pitch,
                              size_t height)
{
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return 0;
    return dev + x + y * pitch + z * pitch * height;
}

/* A copy's regions, dst's first (their count returned); a copy of more than one row
 * reaches to the allocations' ends. */
static size_t drv_copy_set(ft_scan_set_t *set, const CUDA_MEMCPY3D *p)
{
    ft_scan_set_clear(set);
    uint64_t dst = drv_copy_side(p->dstMemoryType, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
                                 p->dstHeight);
    uint64_t src = drv_copy_side(p->srcMemoryType, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
                                 p->srcHeight);
    size_t span = p->Height <= 1 && p->Depth <= 1 ? p->WidthInBytes : 0;
    return capture_copy_set(set, (const void *)(uintptr_t)dst, (const void *)(uintptr_t)src, span, span);
}

static const void *rt_copy_side(const struct cudaPitchedPtr *ptr, const struct cudaPos *pos)
{
    if (ptr->ptr == NULL)
        return NULL; /* an array */
    return (const char *)ptr->ptr + pos->x + pos->y * ptr->pitch + pos->z * ptr->pitch * ptr->ysize;
}

static size_t rt_copy_set(ft_scan_set_t *set, const struct cudaMemcpy3DParms *p)
{
    ft_scan_set_clear(set);
    size_t span = p->extent.height <= 1 && p->extent.depth <= 1 ? p->extent.width : 0;
    return capture_copy_set(set, rt_copy_side(&p->dstPtr, &p->dstPos), rt_copy_side(&p->srcPtr, &p->srcPos), span,
                            span);
}

static size_t plain_copy_set(ft_scan_set_t *set, const void *dst, const void *src, size_t count)
{
    ft_scan_set_clear(set);
    return capture_copy_set(set, dst, src, count, count);
}

static size_t memset_set(ft_scan_set_t *set, uint64_t dst, size_t pitch, size_t width, size_t elem, size_t height)
{
    ft_scan_set_clear(set);
    return capture_copy_set(set, (const void *)(uintptr_t)dst, NULL, set_span(pitch, width, elem, height), 0);
}

/* FlexTensor stood down: graphs are no longer recorded (nothing will be streamed), and
 * their calls pass through with no more than this check: XLA changes some 30 kernel
 * nodes of its command buffer before each launch. */
static int graphs_quiet(void)
{
    return engine_phase() == PHASE_STOOD_DOWN;
}

/* The node just added (ok: the real call succeeded) recorded with set's regions. */
static void added(int ok, const void *node, const void *graph, ft_scan_set_t *set, uint64_t key, const char *name,
                  size_t written)
{
    if (ok && node != NULL)
        capture_node_added((uint64_t)(uintptr_t)graph, (CUgraphNode)node, set, key, name, written);
    ft_scan_set_free(set);
}

/* An executable graph's node set (ok: the real call succeeded; a failed one may have
 * changed it too: then what it touches is no longer known). */
static void exec_set(int ok, const void *exec, const void *node, ft_scan_set_t *set, uint64_t key,
                     const char *name, size_t written, const node_redo_t *redo)
{
    if (ok)
        capture_exec_node_set((uint64_t)(uintptr_t)exec, (CUgraphNode)node, set, key, name, written, redo);
    else
        capture_exec_changed((uint64_t)(uintptr_t)exec);
    ft_scan_set_free(set);
}

/* --- graphs and their nodes: driver ----------------------------------------------------------- */

CUresult ft_hook_drv_graph_create(cuGraphCreate_fn_t real, CUgraph *g, unsigned int flags)
{
    CUresult rc = real(g, flags);
    if (graphs_quiet())
        return rc;
    if (rc == CUDA_SUCCESS && g != NULL)
        capture_graph_made((uint64_t)(uintptr_t)*g);
    return rc;
}

CUresult ft_hook_drv_graph_add_kernel(cuGraphAddKernelNode_v2_fn_t real, CUgraphNode *n, CUgraph g,
                                      const CUgraphNode *deps, size_t nd, const CUDA_KERNEL_NODE_PARAMS *p)
{
    CUresult rc = real(n, g, deps, nd, p);
    if (graphs_quiet())
        return rc;
    if (rc != CUDA_SUCCESS || p == NULL || n == NULL)
        return rc; /* (CUDA 11's shorter struct: read only where the call succeeded) */
    ft_scan_set_t set;
    const char *name;
    kernel_set(&set, drv_kernel_key(p), 0, p->kernelParams, p->extra, &name);
    added(1, *n, g, &set, drv_kernel_key(p), name, 0);
    return rc;
}

CUresult ft_hook_drv_graph_add_memset(cuGraphAddMemsetNode_fn_t real, CUgraphNode *n, CUgraph g,
                                      const CUgraphNode *deps, size_t nd, const CUDA_MEMSET_NODE_PARAMS *p,
                                      CUcontext ctx)
{
    CUresult rc = real(n, g, deps, nd, p, ctx);
    if (graphs_quiet())
        return rc;
    if (p == NULL || n == NULL)
        return rc;
    ft_scan_set_t set;
    size_t w = memset_set(&set, p->dst, p->pitch, p->width, p->elementSize, p->height);
    added(rc == CUDA_SUCCESS, *n, g, &set, 0, NULL, w);
    return rc;
}

CUresult ft_hook_drv_graph_add_memcpy(cuGraphAddMemcpyNode_fn_t real, CUgraphNode *n, CUgraph g,
                                      const CUgraphNode *deps, size_t nd, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    CUresult rc = real(n, g, deps, nd, p, ctx);
    if (graphs_quiet())
        return rc;
    if (p == NULL || n == NULL)
        return rc;
    ft_scan_set_t set;
    size_t w = drv_copy_set(&set, p);
    added(rc == CUDA_SUCCESS, *n, g, &set, 0, NULL, w);
    return rc;
}

CUresult ft_hook_drv_graph_add_empty(cuGraphAddEmptyNode_fn_t real, CUgraphNode *n, CUgraph g,
                                     const CUgraphNode *deps, size_t nd)
{
    CUresult rc = real(n, g, deps, nd);
    if (graphs_quiet())
        return rc;
    if (n == NULL)
        return rc;
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    added(rc == CUDA_SUCCESS, *n, g, &set, 0, NULL, 0);
    return rc;
}

CUresult ft_hook_drv_graph_add_child(cuGraphAddChildGraphNode_fn_t real, CUgraphNode *n, CUgraph g,
                                     const CUgraphNode *deps, size_t nd, CUgraph child)
{
    CUresult rc = real(n, g, deps, nd, child);
    if (graphs_quiet())
        return rc;
    if (rc == CUDA_SUCCESS && n != NULL)
        capture_child_added((uint64_t)(uintptr_t)g, *n, (uint64_t)(uintptr_t)child);
    return rc;
}

/* The generic form CUDA recommends for new code (CUDA 12.3's, with edge data; its 12.2
 * form is handed out as it is, driver.c: a node added through it is one FlexTensor did
 * not see made). A kernel, set, copy, empty or child graph node is recorded as through
 * its own call; a node of another type is not (at instantiation the graph is then
 * unknown, unless the type touches nothing: an event's, a host function's). */
CUresult ft_hook_drv_graph_add_node(cuGraphAddNode_v2_fn_t real, CUgraphNode *n, CUgraph g, const CUgraphNode *deps,
                                    const CUgraphEdgeData *edges, size_t nd, CUgraphNodeParams *p)
{
    CUresult rc = real(n, g, deps, edges, nd, p);
    if (graphs_quiet())
        return rc;
    if (rc != CUDA_SUCCESS || n == NULL || p == NULL)
        return rc;
    ft_scan_set_t set;
    const char *name;
    size_t w;
    uint64_t key;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        key = p->kernel.func != NULL ? (uint64_t)(uintptr_t)p->kernel.func : (uint64_t)(uintptr_t)p->kernel.kern;
        kernel_set(&set, key, 0, p->kernel.kernelParams, p->kernel.extra, &name);
        added(1, *n, g, &set, key, name, 0);
        break;
    case CU_GRAPH_NODE_TYPE_MEMSET:
        w = memset_set(&set, p->memset.dst, p->memset.pitch, p->memset.width, p->memset.elementSize,
                       p->memset.height);
        added(1, *n, g, &set, 0, NULL, w);
        break;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        w = drv_copy_set(&set, &p->memcpy.copyParams);
        added(1, *n, g, &set, 0, NULL, w);
        break;
    case CU_GRAPH_NODE_TYPE_EMPTY:
        ft_scan_set_clear(&set);
        added(1, *n, g, &set, 0, NULL, 0);
        break;
    case CU_GRAPH_NODE_TYPE_GRAPH:
        capture_child_added((uint64_t)(uintptr_t)g, *n, (uint64_t)(uintptr_t)p->graph.graph);
        break;
    default:
        break;
    }
    return rc;
}

/* A node changed in its graph: whatever the result (a failed call may have changed it). */
#define GRAPH_NODE_CHANGE(ret, hook, fn_t, params, ...)                    \
    ret ft_hook_##hook(fn_t real, UNPAREN params)                          \
    {                                                                      \
        ret rc = real(__VA_ARGS__);                                        \
        if (graphs_quiet())                                                \
            return rc;                                                     \
        capture_node_changed((CUgraphNode)n);                              \
        return rc;                                                         \
    }
#define UNPAREN(...) __VA_ARGS__
GRAPH_NODE_CHANGE(CUresult, drv_graph_kernel_params, cuGraphKernelNodeSetParams_v2_fn_t,
                  (CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p), n, p)
GRAPH_NODE_CHANGE(CUresult, drv_graph_memset_params, cuGraphMemsetNodeSetParams_fn_t,
                  (CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p), n, p)
GRAPH_NODE_CHANGE(CUresult, drv_graph_memcpy_params, cuGraphMemcpyNodeSetParams_fn_t,
                  (CUgraphNode n, const CUDA_MEMCPY3D *p), n, p)
GRAPH_NODE_CHANGE(CUresult, drv_graph_node_params, cuGraphNodeSetParams_fn_t, (CUgraphNode n, CUgraphNodeParams *p),
                  n, p)
GRAPH_NODE_CHANGE(CUresult, drv_graph_child_graph, cuGraphChildGraphNodeGetGraph_fn_t, (CUgraphNode n, CUgraph *g),
                  n, g)
GRAPH_NODE_CHANGE(cudaError_t, rt_graph_kernel_params, cudaGraphKernelNodeSetParams_fn_t,
                  (cudaGraphNode_t n, const struct cudaKernelNodeParams *p), n, p)
GRAPH_NODE_CHANGE(cudaError_t, rt_graph_memset_params, cudaGraphMemsetNodeSetParams_fn_t,
                  (cudaGraphNode_t n, const struct cudaMemsetParams *p), n, p)
GRAPH_NODE_CHANGE(cudaError_t, rt_graph_memcpy_params, cudaGraphMemcpyNodeSetParams_fn_t,
                  (cudaGraphNode_t n, const struct cudaMemcpy3DParms *p), n, p)
GRAPH_NODE_CHANGE(cudaError_t, rt_graph_memcpy_1d_params, cudaGraphMemcpyNodeSetParams1D_fn_t,
                  (cudaGraphNode_t n, void *dst, const void *src, size_t count, enum cudaMemcpyKind kind), n, dst,
                  src, count, kind)
GRAPH_NODE_CHANGE(cudaError_t, rt_graph_node_params, cudaGraphNodeSetParams_fn_t,
                  (cudaGraphNode_t n, struct cudaGraphNodeParams *p), n, p)
GRAPH_NODE_CHANGE(cudaError_t, rt_graph_child_graph, cudaGraphChildGraphNodeGetGraph_fn_t,
                  (cudaGraphNode_t n, cudaGraph_t *g), n, g)
#undef GRAPH_NODE_CHANGE
#undef UNPAREN

/* --- the same change on FlexTensor's copies (a cut graph's segments and clone) ----------------- */

/* A setter's arguments, for its redo functions: the application's real setter and what
 * it was given. */
typedef struct {
    void *real;
    const void *p;
    CUcontext ctx;
    void *dst;
    const void *src;
    size_t count;
    enum cudaMemcpyKind kind;
    CUgraph child;
} change_t;

static int drv_kernel_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cuGraphExecKernelNodeSetParams_v2_fn_t)h->real)(x, n, h->p) == CUDA_SUCCESS ? 0 : -1;
}

/* On the clone, through CUDA 12's graph-level setter: a CUDA 11 struct (it has a
 * function; CUDA 12's may have a library kernel instead) is copied into a whole one. */
static int drv_kernel_graph(const void *c, CUgraphNode n)
{
    const change_t *h = c;
    const CUDA_KERNEL_NODE_PARAMS *p = h->p;
    cuGraphKernelNodeSetParams_v2_fn_t f = REAL(cuGraphKernelNodeSetParams_v2);
    CUDA_KERNEL_NODE_PARAMS q;
    memset(&q, 0, sizeof q);
    memcpy(&q, p, p->func != NULL ? sizeof(CUDA_KERNEL_NODE_PARAMS_v1) : sizeof q);
    return f != NULL && f(n, &q) == CUDA_SUCCESS ? 0 : -1;
}

static int drv_memset_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cuGraphExecMemsetNodeSetParams_fn_t)h->real)(x, n, h->p, h->ctx) == CUDA_SUCCESS ? 0 : -1;
}

static int drv_memset_graph(const void *c, CUgraphNode n)
{
    cuGraphMemsetNodeSetParams_fn_t f = REAL(cuGraphMemsetNodeSetParams);
    return f != NULL && f(n, ((const change_t *)c)->p) == CUDA_SUCCESS ? 0 : -1;
}

static int drv_memcpy_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cuGraphExecMemcpyNodeSetParams_fn_t)h->real)(x, n, h->p, h->ctx) == CUDA_SUCCESS ? 0 : -1;
}

static int drv_memcpy_graph(const void *c, CUgraphNode n)
{
    cuGraphMemcpyNodeSetParams_fn_t f = REAL(cuGraphMemcpyNodeSetParams);
    return f != NULL && f(n, ((const change_t *)c)->p) == CUDA_SUCCESS ? 0 : -1;
}

static int drv_child_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cuGraphExecChildGraphNodeSetParams_fn_t)h->real)(x, n, h->child) == CUDA_SUCCESS ? 0 : -1;
}

static int rt_kernel_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cudaGraphExecKernelNodeSetParams_fn_t)h->real)((cudaGraphExec_t)x, (cudaGraphNode_t)n, h->p) ==
                   cudaSuccess ? 0 : -1;
}

static int rt_kernel_graph(const void *c, CUgraphNode n)
{
    cudaGraphKernelNodeSetParams_fn_t f = REAL(cudaGraphKernelNodeSetParams);
    return f != NULL && f((cudaGraphNode_t)n, ((const change_t *)c)->p) == cudaSuccess ? 0 : -1;
}

static int rt_memset_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cudaGraphExecMemsetNodeSetParams_fn_t)h->real)((cudaGraphExec_t)x, (cudaGraphNode_t)n, h->p) ==
                   cudaSuccess ? 0 : -1;
}

static int rt_memset_graph(const void *c, CUgraphNode n)
{
    cudaGraphMemsetNodeSetParams_fn_t f = REAL(cudaGraphMemsetNodeSetParams);
    return f != NULL && f((cudaGraphNode_t)n, ((const change_t *)c)->p) == cudaSuccess ? 0 : -1;
}

static int rt_memcpy_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cudaGraphExecMemcpyNodeSetParams_fn_t)h->real)((cudaGraphExec_t)x, (cudaGraphNode_t)n, h->p) ==
                   cudaSuccess ? 0 : -1;
}

static int rt_memcpy_graph(const void *c, CUgraphNode n)
{
    cudaGraphMemcpyNodeSetParams_fn_t f = REAL(cudaGraphMemcpyNodeSetParams);
    return f != NULL && f((cudaGraphNode_t)n, ((const change_t *)c)->p) == cudaSuccess ? 0 : -1;
}

static int rt_memcpy_1d_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cudaGraphExecMemcpyNodeSetParams1D_fn_t)h->real)((cudaGraphExec_t)x, (cudaGraphNode_t)n, h->dst,
                                                               h->src, h->count, h->kind) == cudaSuccess ? 0 : -1;
}

static int rt_memcpy_1d_graph(const void *c, CUgraphNode n)
{
    const change_t *h = c;
    cudaGraphMemcpyNodeSetParams1D_fn_t f = REAL(cudaGraphMemcpyNodeSetParams1D);
    return f != NULL && f((cudaGraphNode_t)n, h->dst, h->src, h->count, h->kind) == cudaSuccess ? 0 : -1;
}

static int rt_child_exec(const void *c, CUgraphExec x, CUgraphNode n)
{
    const change_t *h = c;
    return ((cudaGraphExecChildGraphNodeSetParams_fn_t)h->real)((cudaGraphExec_t)x, (cudaGraphNode_t)n,
                                                                 (cudaGraph_t)h->child) == cudaSuccess ? 0 : -1;
}

/* --- executable graphs changed node by node: driver ---------------------------------------------- */

CUresult ft_hook_drv_graph_exec_kernel_params(cuGraphExecKernelNodeSetParams_v2_fn_t real, CUgraphExec x,
                                              CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    CUresult rc = real(x, n, p);
    if (graphs_quiet())
        return rc;
    if (rc != CUDA_SUCCESS || p == NULL) {
        capture_exec_changed((uint64_t)(uintptr_t)x); /* (CUDA 11's shorter struct: not read) */
        return rc;
    }
    ft_scan_set_t set;
    const char *name;
    kernel_set(&set, drv_kernel_key(p), 0, p->kernelParams, p->extra, &name);
    change_t h = { .real = (void *)real, .p = p };
    node_redo_t redo = { drv_kernel_exec, drv_kernel_graph, &h };
    exec_set(1, x, n, &set, drv_kernel_key(p), name, 0, &redo);
    return rc;
}

CUresult ft_hook_drv_graph_exec_memset_params(cuGraphExecMemsetNodeSetParams_fn_t real, CUgraphExec x,
                                              CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
    CUresult rc = real(x, n, p, ctx);
    if (graphs_quiet())
        return rc;
    if (p == NULL) {
        capture_exec_changed((uint64_t)(uintptr_t)x);
        return rc;
    }
    ft_scan_set_t set;
    size_t w = memset_set(&set, p->dst, p->pitch, p->width, p->elementSize, p->height);
    change_t h = { .real = (void *)real, .p = p, .ctx = ctx };
    node_redo_t redo = { drv_memset_exec, drv_memset_graph, &h };
    exec_set(rc == CUDA_SUCCESS, x, n, &set, 0, NULL, w, &redo);
    return rc;
}

CUresult ft_hook_drv_graph_exec_memcpy_params(cuGraphExecMemcpyNodeSetParams_fn_t real, CUgraphExec x,
                                              CUgraphNode n, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
    CUresult rc = real(x, n, p, ctx);
    if (graphs_quiet())
        return rc;
    if (p == NULL) {
        capture_exec_changed((uint64_t)(uintptr_t)x);
        return rc;
    }
    ft_scan_set_t set;
    size_t w = drv_copy_set(&set, p);
    change_t h = { .real = (void *)real, .p = p, .ctx = ctx };
    node_redo_t redo = { drv_memcpy_exec, drv_memcpy_graph, &h };
    exec_set(rc == CUDA_SUCCESS, x, n, &set, 0, NULL, w, &redo);
    return rc;
}

CUresult ft_hook_drv_graph_exec_child_params(cuGraphExecChildGraphNodeSetParams_fn_t real, CUgraphExec x,
                                             CUgraphNode n, CUgraph child)
{
    CUresult rc = real(x, n, child);
    if (graphs_quiet())
        return rc;
    change_t h = { .real = (void *)real, .child = child };
    node_redo_t redo = { drv_child_exec, NULL, &h };
    if (rc == CUDA_SUCCESS)
        capture_exec_child_set((uint64_t)(uintptr_t)x, n, (uint64_t)(uintptr_t)child, &redo);
    else
        capture_exec_changed((uint64_t)(uintptr_t)x);
    return rc;
}

/* --- graphs and their nodes: runtime ------------------------------------------------------------- */

cudaError_t ft_hook_rt_graph_create(cudaGraphCreate_fn_t real, cudaGraph_t *g, unsigned int flags)
{
    cudaError_t rc = real(g, flags);
    if (graphs_quiet())
        return rc;
    if (rc == cudaSuccess && g != NULL)
        capture_graph_made((uint64_t)(uintptr_t)*g);
    return rc;
}

cudaError_t ft_hook_rt_graph_add_kernel(cudaGraphAddKernelNode_fn_t real, cudaGraphNode_t *n, cudaGraph_t g,
                                        const cudaGraphNode_t *deps, size_t nd, const struct cudaKernelNodeParams *p)
{
    cudaError_t rc = real(n, g, deps, nd, p);
    if (graphs_quiet())
        return rc;
    if (p == NULL || n == NULL)
        return rc;
    ft_scan_set_t set;
    const char *name;
    kernel_set(&set, (uint64_t)(uintptr_t)p->func, 1, p->kernelParams, p->extra, &name);
    added(rc == cudaSuccess, *n, g, &set, (uint64_t)(uintptr_t)p->func, name, 0);
    return rc;
}

cudaError_t ft_hook_rt_graph_add_memset(cudaGraphAddMemsetNode_fn_t real, cudaGraphNode_t *n, cudaGraph_t g,
                                        const cudaGraphNode_t *deps, size_t nd, const struct cudaMemsetParams *p)
{
    cudaError_t rc = real(n, g, deps, nd, p);
    if (graphs_quiet())
        return rc;
    if (p == NULL || n == NULL)
        return rc;
    ft_scan_set_t set;
    size_t w = memset_set(&set, (uint64_t)(uintptr_t)p->dst, p->pitch, p->width, p->elementSize, p->height);
    added(rc == cudaSuccess, *n, g, &set, 0, NULL, w);
    return rc;
}

cudaError_t ft_hook_rt_graph_add_memcpy(cudaGraphAddMemcpyNode_fn_t real, cudaGraphNode_t *n, cudaGraph_t g,
                                        const cudaGraphNode_t *deps, size_t nd, const struct cudaMemcpy3DParms *p)
{
    cudaError_t rc = real(n, g, deps, nd, p);
    if (graphs_quiet())
        return rc;
    if (p == NULL || n == NULL)
        return rc;
    ft_scan_set_t set;
    size_t w = rt_copy_set(&set, p);
    added(rc == cudaSuccess, *n, g, &set, 0, NULL, w);
    return rc;
}

cudaError_t ft_hook_rt_graph_add_memcpy_1d(cudaGraphAddMemcpyNode1D_fn_t real, cudaGraphNode_t *n, cudaGraph_t g,
                                           const cudaGraphNode_t *deps, size_t nd, void *dst, const void *src,
                                           size_t count, enum cudaMemcpyKind kind)
{
    cudaError_t rc = real(n, g, deps, nd, dst, src, count, kind);
    if (graphs_quiet())
        return rc;
    if (n == NULL)
        return rc;
    ft_scan_set_t set;
    size_t w = plain_copy_set(&set, dst, src, count);
    added(rc == cudaSuccess, *n, g, &set, 0, NULL, w);
    return rc;
}

cudaError_t ft_hook_rt_graph_add_empty(cudaGraphAddEmptyNode_fn_t real, cudaGraphNode_t *n, cudaGraph_t g,
                                       const cudaGraphNode_t *deps, size_t nd)
{
    cudaError_t rc = real(n, g, deps, nd);
    if (graphs_quiet())
        return rc;
    if (n == NULL)
        return rc;
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    added(rc == cudaSuccess, *n, g, &set, 0, NULL, 0);
    return rc;
}

cudaError_t ft_hook_rt_graph_add_child(cudaGraphAddChildGraphNode_fn_t real, cudaGraphNode_t *n, cudaGraph_t g,
                                       const cudaGraphNode_t *deps, size_t nd, cudaGraph_t child)
{
    cudaError_t rc = real(n, g, deps, nd, child);
    if (graphs_quiet())
        return rc;
    if (rc == cudaSuccess && n != NULL)
        capture_child_added((uint64_t)(uintptr_t)g, (CUgraphNode)*n, (uint64_t)(uintptr_t)child);
    return rc;
}

/* --- executable graphs changed node by node: runtime ------------------------------------------ */

cudaError_t ft_hook_rt_graph_exec_kernel_params(cudaGraphExecKernelNodeSetParams_fn_t real, cudaGraphExec_t x,
                                                cudaGraphNode_t n, const struct cudaKernelNodeParams *p)
{
    cudaError_t rc = real(x, n, p);
    if (graphs_quiet())
        return rc;
    if (p == NULL) {
        capture_exec_changed((uint64_t)(uintptr_t)x);
        return rc;
    }
    ft_scan_set_t set;
    const char *name;
    kernel_set(&set, (uint64_t)(uintptr_t)p->func, 1, p->kernelParams, p->extra, &name);
    change_t h = { .real = (void *)real, .p = p };
    node_redo_t redo = { rt_kernel_exec, rt_kernel_graph, &h };
    exec_set(rc == cudaSuccess, x, n, &set, (uint64_t)(uintptr_t)p->func, name, 0, &redo);
    return rc;
}

cudaError_t ft_hook_rt_graph_exec_memset_params(cudaGraphExecMemsetNodeSetParams_fn_t real, cudaGraphExec_t x,
                                                cudaGraphNode_t n, const struct cudaMemsetParams *p)
{
    cudaError_t rc = real(x, n, p);
    if (graphs_quiet())
        return rc;
    if (p == NULL) {
        capture_exec_changed((uint64_t)(uintptr_t)x);
        return rc;
    }
    ft_scan_set_t set;
    size_t w = memset_set(&set, (uint64_t)(uintptr_t)p->dst, p->pitch, p->width, p->elementSize, p->height);
    change_t h = { .real = (void *)real, .p = p };
    node_redo_t redo = { rt_memset_exec, rt_memset_graph, &h };
    exec_set(rc == cudaSuccess, x, n, &set, 0, NULL, w, &redo);
    return rc;
}

cudaError_t ft_hook_rt_graph_exec_memcpy_params(cudaGraphExecMemcpyNodeSetParams_fn_t real, cudaGraphExec_t x,
                                                cudaGraphNode_t n, const struct cudaMemcpy3DParms *p)
{
    cudaError_t rc = real(x, n, p);
    if (graphs_quiet())
        return rc;
    if (p == NULL) {
        capture_exec_changed((uint64_t)(uintptr_t)x);
        return rc;
    }
    ft_scan_set_t set;
    size_t w = rt_copy_set(&set, p);
    change_t h = { .real = (void *)real, .p = p };
    node_redo_t redo = { rt_memcpy_exec, rt_memcpy_graph, &h };
    exec_set(rc == cudaSuccess, x, n, &set, 0, NULL, w, &redo);
    return rc;
}

cudaError_t ft_hook_rt_graph_exec_memcpy_1d(cudaGraphExecMemcpyNodeSetParams1D_fn_t real, cudaGraphExec_t x,
                                            cudaGraphNode_t n, void *dst, const void *src, size_t count,
                                            enum cudaMemcpyKind kind)
{
    cudaError_t rc = real(x, n, dst, src, count, kind);
    if (graphs_quiet())
        return rc;
    ft_scan_set_t set;
    size_t w = plain_copy_set(&set, dst, src, count);
    change_t h = { .real = (void *)real, .dst = dst, .src = src, .count = count, .kind = kind };
    node_redo_t redo = { rt_memcpy_1d_exec, rt_memcpy_1d_graph, &h };
    exec_set(rc == cudaSuccess, x, n, &set, 0, NULL, w, &redo);
    return rc;
}

cudaError_t ft_hook_rt_graph_exec_child_params(cudaGraphExecChildGraphNodeSetParams_fn_t real, cudaGraphExec_t x,
                                               cudaGraphNode_t n, cudaGraph_t child)
{
    cudaError_t rc = real(x, n, child);
    if (graphs_quiet())
        return rc;
    change_t h = { .real = (void *)real, .child = (CUgraph)child };
    node_redo_t redo = { rt_child_exec, NULL, &h };
    if (rc == cudaSuccess)
        capture_exec_child_set((uint64_t)(uintptr_t)x, (CUgraphNode)n, (uint64_t)(uintptr_t)child, &redo);
    else
        capture_exec_changed((uint64_t)(uintptr_t)x);
    return rc;
}

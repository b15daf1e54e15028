/* check_sim_graph.c - stream capture and graphs: captured work runs only when the graph
 * is launched, in capture order; every capture rule the simulator enforces refuses the
 * call and invalidates the capture as CUDA does (tests/sim/drv_graph.c). */
#include "sim_test.h"

/* Begins a capture on a new stream (flags: cudaStreamNonBlocking or 0). */
static cudaStream_t begin(unsigned flags, enum cudaStreamCaptureMode mode)
{
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, flags));
    RT_OK(cudaStreamBeginCapture(s, mode));
    return s;
}

static enum cudaStreamCaptureStatus status_of(cudaStream_t s)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    RT_OK(cudaStreamIsCapturing(s, &st));
    return st;
}

/* The capture on s was invalidated: its streams refuse work, and its end gives no
 * graph. */
static void expect_invalidated(cudaStream_t s)
{
    ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusInvalidated);
    ck_assert_int_eq(launch_log(9, s), cudaErrorStreamCaptureInvalidated);
    cudaGraph_t g = (cudaGraph_t)1;
    ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
    ck_assert_ptr_null(g);
    ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusNone);
    (void)cudaGetLastError();
}

START_TEST(test_capture_then_replay_in_order)
{
    sim_test_register();
    g_nlog = 0;
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
    unsigned long long id = 0;
    enum cudaStreamCaptureStatus st;
    RT_OK(cudaStreamGetCaptureInfo(s, &st, &id, NULL, NULL, NULL, NULL));
    ck_assert_int_eq(st, cudaStreamCaptureStatusActive);
    ck_assert_uint_gt(id, 0);
    for (int i = 1; i <= 3; i++)
        RT_OK(launch_log(i, s));
    cudaGraph_t g;
    RT_OK(cudaStreamEndCapture(s, &g));
    ck_assert_ptr_nonnull(g);
    RT_OK(cudaDeviceSynchronize());
    ck_assert_int_eq(g_nlog, 0); /* captured, not run */
    cudaGraphExec_t x;
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    RT_OK(cudaGraphDestroy(g)); /* the executable graph keeps its own nodes */
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 6);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(g_log[i], i % 3 + 1);
    RT_OK(cudaGraphExecDestroy(x));
    ck_assert_int_eq(cudaGraphLaunch(x, s), cudaErrorInvalidValue);
    (void)cudaGetLastError();
}
END_TEST

/* Captures launch_log(first .. first + n - 1) on s; node[i] is the node each made, as
 * cuStreamGetCaptureInfo tells it right after the launch. */
static cudaGraph_t capture_logs(cudaStream_t s, int first, int n, CUgraphNode *node)
{
    RT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < n; i++) {
        RT_OK(launch_log(first + i, s));
        CUstreamCaptureStatus st;
        const CUgraphNode *deps = NULL;
        size_t nd = 0;
        ck_assert_int_eq(cuStreamGetCaptureInfo((CUstream)s, &st, NULL, NULL, &deps, NULL, &nd), CUDA_SUCCESS);
        ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        ck_assert_uint_eq(nd, 1);
        node[i] = deps[0];
        for (int j = 0; j < i; j++)
            ck_assert_ptr_ne(node[i], node[j]);
    }
    cudaGraph_t g;
    RT_OK(cudaStreamEndCapture(s, &g));
    return g;
}

/* What cutting a graph needs (FlexTensor's FT_GRAPH_CUT): each captured call's node,
 * the graph's nodes and their kinds, a clone whose nodes are found from the
 * original's, nodes destroyed in the clone (the rest run in their order); and what
 * changes an executable graph: an update from another graph of the same shape, a
 * node turned off and on. */
START_TEST(test_graph_nodes_clone_and_update)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUgraphNode node[4], other[4];
    cudaGraph_t g = capture_logs(s, 1, 4, node);
    CUgraphNode have[8];
    size_t n = 0;
    ck_assert_int_eq(cuGraphGetNodes((CUgraph)g, NULL, &n), CUDA_SUCCESS);
    ck_assert_uint_eq(n, 4);
    n = 8;
    ck_assert_int_eq(cuGraphGetNodes((CUgraph)g, have, &n), CUDA_SUCCESS);
    ck_assert_uint_eq(n, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_ptr_eq(have[i], node[i]);
    CUgraphNodeType t;
    ck_assert_int_eq(cuGraphNodeGetType(node[2], &t), CUDA_SUCCESS);
    ck_assert_int_eq(t, CU_GRAPH_NODE_TYPE_KERNEL);

    CUgraph c;
    ck_assert_int_eq(cuGraphClone(&c, (CUgraph)g), CUDA_SUCCESS);
    CUgraphNode in_clone[4];
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(cuGraphNodeFindInClone(&in_clone[i], node[i], c), CUDA_SUCCESS);
        ck_assert_ptr_ne(in_clone[i], node[i]);
    }
    ck_assert_int_eq(cuGraphDestroyNode(in_clone[1]), CUDA_SUCCESS);
    ck_assert_int_eq(cuGraphDestroyNode(in_clone[3]), CUDA_SUCCESS);
    CUgraphNode gone;
    ck_assert_int_eq(cuGraphNodeFindInClone(&gone, node[1], c), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cuGraphGetNodes(c, NULL, &n), CUDA_SUCCESS);
    ck_assert_uint_eq(n, 2);
    n = 4;
    ck_assert_int_eq(cuGraphGetNodes((CUgraph)g, NULL, &n), CUDA_SUCCESS);
    ck_assert_uint_eq(n, 4); /* the original keeps its own */
    cudaGraphExec_t half, whole;
    RT_OK(cudaGraphInstantiate(&half, (cudaGraph_t)c, 0));
    RT_OK(cudaGraphInstantiate(&whole, g, 0));
    ck_assert_int_eq(cuGraphDestroy(c), CUDA_SUCCESS);
    g_nlog = 0;
    RT_OK(cudaGraphLaunch(half, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 2);
    ck_assert_int_eq(g_log[0], 1);
    ck_assert_int_eq(g_log[1], 3);

    /* The same shape captured again, other work: the update takes it. */
    cudaGraph_t g2 = capture_logs(s, 5, 4, other);
    cudaGraphExecUpdateResultInfo info;
    RT_OK(cudaGraphExecUpdate(whole, g2, &info));
    ck_assert_int_eq(info.result, cudaGraphExecUpdateSuccess);
    g_nlog = 0;
    RT_OK(cudaGraphLaunch(whole, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(g_log[i], 5 + i);
    /* Another shape: refused, the executable graph as it was. */
    cudaGraph_t g3 = capture_logs(s, 9, 3, other);
    ck_assert_int_eq(cudaGraphExecUpdate(whole, g3, &info), cudaErrorGraphExecUpdateFailure);
    ck_assert_int_eq(info.result, cudaGraphExecUpdateErrorTopologyChanged);
    (void)cudaGetLastError();
    g_nlog = 0;
    RT_OK(cudaGraphLaunch(whole, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 4);
    ck_assert_int_eq(g_log[0], 5);
    /* A node turned off does nothing at launches, and again when turned on. */
    cudaGraphExec_t x4;
    RT_OK(cudaGraphInstantiate(&x4, g, 0));
    RT_OK(cudaGraphNodeSetEnabled(x4, (cudaGraphNode_t)node[2], 0));
    g_nlog = 0;
    RT_OK(cudaGraphLaunch(x4, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 3);
    ck_assert_int_eq(g_log[2], 4);
    RT_OK(cudaGraphNodeSetEnabled(x4, (cudaGraphNode_t)node[2], 1));
    g_nlog = 0;
    RT_OK(cudaGraphLaunch(x4, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 4);
    RT_OK(cudaGraphExecDestroy(x4));
    RT_OK(cudaGraphExecDestroy(half));
    RT_OK(cudaGraphExecDestroy(whole));
    RT_OK(cudaGraphDestroy(g));
    RT_OK(cudaGraphDestroy(g2));
    RT_OK(cudaGraphDestroy(g3));
    RT_OK(cudaStreamDestroy(s));
}
END_TEST

/* A captured copy reads its source when the graph runs, not at capture. */
START_TEST(test_captured_copy_runs_at_replay)
{
    sim_test_register();
    int *host, *dev, out = 0;
    RT_OK(cudaMallocHost((void **)&host, sizeof *host));
    RT_OK(cudaMalloc((void **)&dev, sizeof *dev));
    RT_OK(cudaMemset(dev, 0, sizeof *dev));
    *host = 7;
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    RT_OK(cudaMemcpyAsync(dev, host, sizeof *dev, cudaMemcpyHostToDevice, s));
    cudaGraph_t g;
    RT_OK(cudaStreamEndCapture(s, &g));
    RT_OK(cudaMemcpy(&out, dev, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert_int_eq(out, 0);
    *host = 42;
    cudaGraphExec_t x;
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(&out, dev, sizeof out, cudaMemcpyDeviceToHost));
    ck_assert_int_eq(out, 42);
}
END_TEST

START_TEST(test_sync_of_capturing_stream_invalidates)
{
    sim_test_register();
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    RT_OK(launch_log(1, s));
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
}
END_TEST

START_TEST(test_query_of_capturing_stream_invalidates)
{
    sim_test_register();
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    ck_assert_int_eq(cudaStreamQuery(s), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
}
END_TEST

START_TEST(test_device_sync_invalidates)
{
    sim_test_register();
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
}
END_TEST

/* The legacy stream orders behind every blocking stream: using it while one captures
 * would tie it to the capture. A non-blocking capture leaves it usable. */
START_TEST(test_legacy_stream_and_blocking_capture)
{
    sim_test_register();
    cudaStream_t nb = begin(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    RT_OK(launch_log(1, 0));
    RT_OK(cudaStreamSynchronize(0));
    ck_assert_int_eq(status_of(nb), cudaStreamCaptureStatusActive);
    cudaGraph_t g;
    RT_OK(cudaStreamEndCapture(nb, &g));

    cudaStream_t b = begin(0, cudaStreamCaptureModeRelaxed);
    enum cudaStreamCaptureStatus st;
    ck_assert_int_eq(cudaStreamIsCapturing(0, &st), cudaErrorStreamCaptureImplicit);
    ck_assert_int_eq(status_of(b), cudaStreamCaptureStatusActive); /* a status query is no use */
    ck_assert_int_eq(launch_log(2, 0), cudaErrorStreamCaptureImplicit);
    expect_invalidated(b);
}
END_TEST

/* Potentially unsafe calls follow the thread's mode: a global-mode thread may not
 * make them during its own capture, nor during another thread's global one; a
 * relaxed thread may. */
static cudaError_t g_other_rc;
static void *other_malloc(void *arg)
{
    (void)arg;
    void *p = NULL;
    g_other_rc = cudaMalloc(&p, 4096);
    return NULL;
}

static cudaError_t malloc_on_other_thread(void)
{
    pthread_t t;
    pthread_create(&t, NULL, other_malloc, NULL);
    pthread_join(t, NULL);
    return g_other_rc;
}

START_TEST(test_unsafe_calls_follow_capture_modes)
{
    sim_test_register();
    void *p;
    int x = 1, *dev;
    RT_OK(cudaMalloc((void **)&dev, sizeof x));
    /* Global capture: this thread (global mode) may not allocate or copy synchronously. */
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    ck_assert_int_eq(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    ck_assert_int_eq(cudaMemcpy(dev, &x, sizeof x, cudaMemcpyHostToDevice), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    /* ... nor may another thread in global mode. */
    s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    ck_assert_int_eq(malloc_on_other_thread(), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    /* A relaxed thread may, and the capture goes on. */
    s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    RT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    ck_assert_int_eq(m, cudaStreamCaptureModeGlobal);
    RT_OK(cudaMalloc(&p, 4096));
    RT_OK(cudaMemcpy(dev, &x, sizeof x, cudaMemcpyHostToDevice));
    RT_OK(cudaThreadExchangeStreamCaptureMode(&m));
    ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
    cudaGraph_t g;
    RT_OK(cudaStreamEndCapture(s, &g));
    /* A thread-local capture does not bind other threads. */
    s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeThreadLocal);
    RT_OK(malloc_on_other_thread());
    ck_assert_int_eq(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    /* A relaxed capture binds nobody. */
    s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    RT_OK(cudaMalloc(&p, 4096));
    ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
    RT_OK(cudaStreamEndCapture(s, &g));
    /* A free waits for the device: never during a capture of its context. */
    s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    ck_assert_int_eq(cudaFree(p), cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s);
    RT_OK(cudaFree(p));
}
END_TEST

START_TEST(test_captured_event_cannot_be_queried)
{
    sim_test_register();
    cudaEvent_t e;
    RT_OK(cudaEventCreate(&e));
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeRelaxed);
    RT_OK(cudaEventRecord(e, s));
    ck_assert_int_eq(cudaEventQuery(e), cudaErrorCapturedEvent);
    expect_invalidated(s);
    /* Still a captured event after the capture, until recorded outside one. */
    ck_assert_int_eq(cudaEventSynchronize(e), cudaErrorCapturedEvent);
    RT_OK(cudaEventRecord(e, s));
    RT_OK(cudaEventSynchronize(e));
    (void)cudaGetLastError();
}
END_TEST

/* A side stream joins a capture by waiting on an event recorded in it, and must be
 * joined back before the end; the replay honours the order of both. */
START_TEST(test_fork_and_join)
{
    sim_test_register();
    g_nlog = 0;
    cudaStream_t side;
    cudaEvent_t fork, join;
    RT_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    RT_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    RT_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    RT_OK(launch_log(1, s));
    RT_OK(cudaEventRecord(fork, s));
    RT_OK(cudaStreamWaitEvent(side, fork, 0));
    ck_assert_int_eq(status_of(side), cudaStreamCaptureStatusActive);
    RT_OK(launch_log(2, side));
    RT_OK(cudaEventRecord(join, side));
    RT_OK(cudaStreamWaitEvent(s, join, 0));
    RT_OK(launch_log(3, s));
    cudaGraph_t g;
    RT_OK(cudaStreamEndCapture(s, &g));
    ck_assert_int_eq(status_of(side), cudaStreamCaptureStatusNone);
    cudaGraphExec_t x;
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(g_log[i], i + 1);

    /* Not joined back: the end fails. */
    s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    RT_OK(cudaEventRecord(fork, s));
    RT_OK(cudaStreamWaitEvent(side, fork, 0));
    RT_OK(launch_log(4, side));
    ck_assert_int_eq(cudaStreamEndCapture(side, &g), cudaErrorStreamCaptureUnmatched);
    ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
    ck_assert_ptr_null(g);
    ck_assert_int_eq(status_of(side), cudaStreamCaptureStatusNone);
    (void)cudaGetLastError();
}
END_TEST

/* A capturing stream may not wait on work outside its capture. */
START_TEST(test_wait_on_uncaptured_event_invalidates)
{
    sim_test_register();
    cudaEvent_t e;
    RT_OK(cudaEventCreate(&e));
    RT_OK(cudaEventRecord(e, 0));
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    ck_assert_int_eq(cudaStreamWaitEvent(s, e, 0), cudaErrorStreamCaptureIsolation);
    expect_invalidated(s);
}
END_TEST

static cudaStream_t g_end_stream;
static cudaError_t g_end_rc;
static void *end_elsewhere(void *arg)
{
    (void)arg;
    cudaGraph_t g;
    g_end_rc = cudaStreamEndCapture(g_end_stream, &g);
    return NULL;
}

START_TEST(test_begin_and_end_rules)
{
    sim_test_register();
    ck_assert_int_eq(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    cudaStream_t s = begin(cudaStreamNonBlocking, cudaStreamCaptureModeGlobal);
    ck_assert_int_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
    g_end_stream = s;
    pthread_t t;
    pthread_create(&t, NULL, end_elsewhere, NULL);
    pthread_join(t, NULL);
    ck_assert_int_eq(g_end_rc, cudaErrorStreamCaptureWrongThread);
    ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusActive);
    cudaGraph_t g;
    RT_OK(cudaStreamEndCapture(s, &g));
    ck_assert_int_eq(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
    (void)cudaGetLastError();
}
END_TEST

/* ------------------------------------------------------------------ graphs built node by node */

/* A logk(id) kernel node of g after deps; id is the caller's local: the node keeps a
 * copy of the argument's value. */
static cudaGraphNode_t add_log(cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps, int id)
{
    void *args[] = {&id};
    struct cudaKernelNodeParams kp = {(void *)&k_log, ONE, ONE, 0, args, NULL};
    cudaGraphNode_t n;
    RT_OK(cudaGraphAddKernelNode(&n, g, deps, ndeps, &kp));
    return n;
}

/* A graph of logk(ids[0]) ... logk(ids[n - 1]), each after the one before. */
static cudaGraph_t log_graph(const int *ids, int n)
{
    cudaGraph_t g;
    RT_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t last = NULL;
    for (int i = 0; i < n; i++)
        last = add_log(g, last ? &last : NULL, last ? 1 : 0, ids[i]);
    return g;
}

/* Launches x on s and checks the kernels it ran, in order. */
static void expect_run(cudaGraphExec_t x, cudaStream_t s, const int *want, int n)
{
    g_nlog = 0;
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_int_eq(g_nlog, n);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(g_log[i], want[i]);
}

/* The driver's function for base name `name` as a caller built for CUDA `version` asks. */
static void *driver_proc(const char *name, int version)
{
    void *fn = NULL;
    CU_OK(cuGetProcAddress(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, NULL));
    ck_assert_ptr_nonnull(fn);
    return fn;
}

/* As XLA builds a command buffer: a memset, a kernel after it, a copy to the host after
 * that, then a child graph (a device copy and a kernel given a packed argument buffer);
 * nothing runs until a launch, which runs them in order. Each node copied what it was
 * given when it was added. */
START_TEST(test_node_built_graph_runs)
{
    sim_test_register();
    const size_t n = 64;
    float *d, *d2, *h, back[64];
    RT_OK(cudaMalloc((void **)&d, n * sizeof *d));
    RT_OK(cudaMalloc((void **)&d2, n * sizeof *d2));
    RT_OK(cudaMallocHost((void **)&h, n * sizeof *h));
    RT_OK(cudaMemset(d, 0, n * sizeof *d));
    RT_OK(cudaMemset(d2, 0, n * sizeof *d2));
    memset(h, 0, n * sizeof *h);
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cudaGraph_t g, child;
    cudaGraphNode_t set, fill, copy, sub, c1, c2;
    RT_OK(cudaGraphCreate(&g, 0));
    struct cudaMemsetParams mp = {d, 0, 0x3f800000u /* 1.0f */, 4, n, 1};
    RT_OK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &mp));
    float v = 2.0f;
    size_t half = n / 2;
    void *args[] = {&d, &v, &half};
    struct cudaKernelNodeParams kp = {(void *)&k_fill, ONE, ONE, 0, args, NULL};
    RT_OK(cudaGraphAddKernelNode(&fill, g, &set, 1, &kp));
    v = 9.0f;
    half = n;
    RT_OK(cudaGraphAddMemcpyNode1D(&copy, g, &fill, 1, h, d, n * sizeof *h, cudaMemcpyDeviceToHost));

    RT_OK(cudaGraphCreate(&child, 0));
    RT_OK(cudaGraphAddMemcpyNode1D(&c1, child, NULL, 0, d2, d, n * sizeof *d, cudaMemcpyDeviceToDevice));
    cudaKernel_t kf;
    RT_OK(cudaGetKernel(&kf, &k_fill));
    struct { float *p; float v; size_t n; } packed = {d2, 3.0f, 8}; /* fill's parameter buffer */
    size_t packed_size = sizeof packed;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                     CU_LAUNCH_PARAM_END};
    CUDA_KERNEL_NODE_PARAMS dp;
    memset(&dp, 0, sizeof dp);
    dp.kern = (CUkernel)kf;
    dp.gridDimX = dp.gridDimY = dp.gridDimZ = dp.blockDimX = dp.blockDimY = dp.blockDimZ = 1;
    dp.extra = extra;
    CU_OK(cuGraphAddKernelNode(&c2, child, &c1, 1, &dp));
    packed.v = 9.0f;
    RT_OK(cudaGraphAddChildGraphNode(&sub, g, &copy, 1, child));
    RT_OK(cudaGraphDestroy(child)); /* the node holds its own copy */

    cudaGraphNode_t node[4] = {set, fill, copy, sub}, have[4];
    CUgraphNodeType want[4] = {CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY,
                               CU_GRAPH_NODE_TYPE_GRAPH};
    size_t count = 4;
    RT_OK(cudaGraphGetNodes(g, have, &count));
    ck_assert_uint_eq(count, 4);
    for (int i = 0; i < 4; i++) {
        CUgraphNodeType t;
        ck_assert_ptr_eq(have[i], node[i]);
        CU_OK(cuGraphNodeGetType(node[i], &t));
        ck_assert_int_eq(t, want[i]);
    }
    cudaGraphExec_t x;
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    RT_OK(cudaDeviceSynchronize());
    ck_assert(h[0] == 0.0f); /* built, not run */
    for (int r = 0; r < 2; r++) {
        RT_OK(cudaGraphLaunch(x, s));
        RT_OK(cudaStreamSynchronize(s));
        RT_OK(cudaMemcpy(back, d2, sizeof back, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            ck_assert(h[i] == (i < n / 2 ? 2.0f : 1.0f));
            ck_assert(back[i] == (i < 8 ? 3.0f : i < n / 2 ? 2.0f : 1.0f));
        }
        memset(h, 0, n * sizeof *h);
    }
    RT_OK(cudaGraphExecDestroy(x));
    RT_OK(cudaGraphDestroy(g));
}
END_TEST

/* The generic form, cuGraphAddNode_v2: a memset, a kernel after it, a copy to the host,
 * an empty node and a child graph (a device copy), each from CUgraphNodeParams, run as
 * their own cuGraphAdd*Node's would. Other types and edge data are refused; the CUDA
 * 12.2 form (no edge data) adds the same nodes. */
START_TEST(test_generic_add_node)
{
    sim_test_register();
    enum { n = 64 };
    float *d, *d2, *h, back[n];
    RT_OK(cudaMalloc((void **)&d, n * sizeof *d));
    RT_OK(cudaMalloc((void **)&d2, n * sizeof *d2));
    RT_OK(cudaMallocHost((void **)&h, n * sizeof *h));
    RT_OK(cudaMemset(d2, 0, n * sizeof *d2));
    memset(h, 0, n * sizeof *h);
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUcontext ctx;
    CU_OK(cuCtxGetCurrent(&ctx));

    CUgraph g, child;
    CUgraphNode set, fill, copy, none, sub, c1;
    CU_OK(cuGraphCreate(&g, 0));
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMSET;
    p.memset = (CUDA_MEMSET_NODE_PARAMS_v2){(CUdeviceptr)d, 0, 0x3f800000u /* 1.0f */, 4, n, 1, ctx};
    CU_OK(cuGraphAddNode(&set, g, NULL, NULL, 0, &p));

    cudaKernel_t kf;
    RT_OK(cudaGetKernel(&kf, &k_fill));
    float v = 2.0f;
    size_t half = n / 2;
    void *args[] = {&d, &v, &half};
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_KERNEL;
    p.kernel.kern = (CUkernel)kf;
    p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
    p.kernel.blockDimX = p.kernel.blockDimY = p.kernel.blockDimZ = 1;
    p.kernel.kernelParams = args;
    CU_OK(cuGraphAddNode(&fill, g, &set, NULL, 1, &p));
    v = 9.0f; /* the node copied its arguments */
    half = n;

    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMCPY; /* copyCtx NULL: the current context */
    p.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.memcpy.copyParams.srcDevice = (CUdeviceptr)d;
    p.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_HOST;
    p.memcpy.copyParams.dstHost = h;
    p.memcpy.copyParams.WidthInBytes = n * sizeof *h;
    p.memcpy.copyParams.Height = p.memcpy.copyParams.Depth = 1;
    CU_OK(cuGraphAddNode(&copy, g, &fill, NULL, 1, &p));

    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_EMPTY;
    CU_OK(cuGraphAddNode(&none, g, &copy, NULL, 1, &p));

    CU_OK(cuGraphCreate(&child, 0));
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    p.memcpy.copyCtx = ctx;
    p.memcpy.copyParams.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.memcpy.copyParams.srcDevice = (CUdeviceptr)d;
    p.memcpy.copyParams.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.memcpy.copyParams.dstDevice = (CUdeviceptr)d2;
    p.memcpy.copyParams.WidthInBytes = n * sizeof *d;
    p.memcpy.copyParams.Height = p.memcpy.copyParams.Depth = 1;
    CU_OK(cuGraphAddNode(&c1, child, NULL, NULL, 0, &p));
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_GRAPH;
    p.graph.graph = child;
    p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE; /* cloned by the simulator */
    CU_OK(cuGraphAddNode(&sub, g, &none, NULL, 1, &p));
    CU_OK(cuGraphDestroy(child)); /* so the caller still owns it */

    CUgraphNode node[5] = {set, fill, copy, none, sub};
    CUgraphNodeType want[5] = {CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY,
                               CU_GRAPH_NODE_TYPE_EMPTY, CU_GRAPH_NODE_TYPE_GRAPH};
    for (int i = 0; i < 5; i++) {
        CUgraphNodeType t;
        CU_OK(cuGraphNodeGetType(node[i], &t));
        ck_assert_int_eq(t, want[i]);
    }

    /* Refused: a type the simulator has not, edge data other than the default, a
     * memcpy node's reserved fields. Nothing is added. */
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_HOST;
    CUgraphNode bad = NULL;
    ck_assert_int_eq(cuGraphAddNode(&bad, g, NULL, NULL, 0, &p), CUDA_ERROR_NOT_SUPPORTED);
    p.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    ck_assert_int_eq(cuGraphAddNode(&bad, g, NULL, NULL, 0, &p), CUDA_ERROR_NOT_SUPPORTED);
    p.type = CU_GRAPH_NODE_TYPE_EMPTY;
    CUgraphEdgeData edge;
    memset(&edge, 0, sizeof edge);
    edge.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    ck_assert_int_eq(cuGraphAddNode(&bad, g, &copy, &edge, 1, &p), CUDA_ERROR_NOT_SUPPORTED);
    ck_assert_int_eq(cuGraphAddNode(&bad, g, NULL, NULL, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    p.memcpy.flags = 1;
    ck_assert_int_eq(cuGraphAddNode(&bad, g, NULL, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE);
    ck_assert_ptr_null(bad);
    size_t count = 0;
    CU_OK(cuGraphGetNodes(g, NULL, &count));
    ck_assert_uint_eq(count, 5);

    CUgraphExec x;
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    RT_OK(cudaDeviceSynchronize());
    ck_assert(h[0] == 0.0f); /* built, not run */
    for (int r = 0; r < 2; r++) {
        CU_OK(cuGraphLaunch(x, (CUstream)s));
        RT_OK(cudaStreamSynchronize(s));
        RT_OK(cudaMemcpy(back, d2, sizeof back, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            ck_assert(h[i] == (i < n / 2 ? 2.0f : 1.0f));
            ck_assert(back[i] == h[i]);
        }
        memset(h, 0, n * sizeof *h);
    }
    CU_OK(cuGraphExecDestroy(x));

    /* The CUDA 12.2 form, as a caller built for 12.2 gets it; 12.3 on get _v2. */
    typedef CUresult (*add_node_12020_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t, CUgraphNodeParams *);
    add_node_12020_fn add_old = (add_node_12020_fn)driver_proc("cuGraphAddNode", 12020);
    ck_assert_ptr_eq(driver_proc("cuGraphAddNode", 12030), (void *)cuGraphAddNode);
    ck_assert_ptr_ne((void *)add_old, (void *)cuGraphAddNode);
    CUgraph g2;
    CU_OK(cuGraphCreate(&g2, 0));
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_MEMSET; /* ctx NULL: the current context */
    p.memset = (CUDA_MEMSET_NODE_PARAMS_v2){(CUdeviceptr)d2, 0, 0x40e00000u /* 7.0f */, 4, n, 1, NULL};
    CU_OK(add_old(&set, g2, NULL, 0, &p));
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_HOST;
    ck_assert_int_eq(add_old(&bad, g2, &set, 1, &p), CUDA_ERROR_NOT_SUPPORTED);
    CU_OK(cuGraphInstantiateWithFlags(&x, g2, 0));
    CU_OK(cuGraphLaunch(x, (CUstream)s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(back, d2, sizeof back, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        ck_assert(back[i] == 7.0f);
    CU_OK(cuGraphExecDestroy(x));
    CU_OK(cuGraphDestroy(g2));
    CU_OK(cuGraphDestroy(g));
    RT_OK(cudaStreamDestroy(s));
    RT_OK(cudaFreeHost(h));
    RT_OK(cudaFree(d2));
    RT_OK(cudaFree(d));
}
END_TEST

/* What CUDA refuses of a new node: dependencies that are not live nodes of its graph,
 * no handle to write, a graph that is not one (or its own child); and parameters the
 * simulator cannot run (several rows, CUDA arrays) are CUDA_ERROR_NOT_SUPPORTED. */
START_TEST(test_node_dependencies_and_params_checked)
{
    sim_test_register();
    cudaGraph_t g, other, bogus = (cudaGraph_t)&g;
    cudaGraphNode_t a, b, o, n;
    ck_assert_int_eq(cudaGraphCreate(NULL, 0), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphCreate(&g, 1), cudaErrorInvalidValue);
    RT_OK(cudaGraphCreate(&g, 0));
    RT_OK(cudaGraphCreate(&other, 0));
    RT_OK(cudaGraphAddEmptyNode(&a, g, NULL, 0));
    RT_OK(cudaGraphAddEmptyNode(&o, other, NULL, 0));
    ck_assert_int_eq(cudaGraphAddEmptyNode(&n, g, &o, 1), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddEmptyNode(&n, g, NULL, 1), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddEmptyNode(NULL, g, &a, 1), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddEmptyNode(&n, bogus, NULL, 0), cudaErrorInvalidValue);
    RT_OK(cudaGraphAddEmptyNode(&b, g, &a, 1));
    cudaGraphNode_t ab[] = {a, b};
    RT_OK(cudaGraphAddEmptyNode(&n, g, ab, 2));
    CU_OK(cuGraphDestroyNode(a));
    ck_assert_int_eq(cudaGraphAddEmptyNode(&n, g, &a, 1), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddChildGraphNode(&n, g, NULL, 0, g), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddChildGraphNode(&n, g, NULL, 0, bogus), cudaErrorInvalidValue);
    size_t count = 0;
    RT_OK(cudaGraphGetNodes(g, NULL, &count));
    ck_assert_uint_eq(count, 2); /* every refused node left the graph as it was */

    int *d, host[4];
    RT_OK(cudaMalloc((void **)&d, 4 * sizeof *d));
    struct cudaMemsetParams mp = {d, 0, 0, 3, 4, 1};
    ck_assert_int_eq(cudaGraphAddMemsetNode(&n, g, NULL, 0, &mp), cudaErrorInvalidValue);
    mp.elementSize = 4;
    mp.height = 2;
    mp.pitch = 16;
    ck_assert_int_eq(cudaGraphAddMemsetNode(&n, g, NULL, 0, &mp), cudaErrorNotSupported);
    mp.height = 1;
    mp.dst = host;
    ck_assert_int_eq(cudaGraphAddMemsetNode(&n, g, NULL, 0, &mp), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddMemcpyNode1D(&n, g, NULL, 0, d, host, 0, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddMemcpyNode1D(&n, g, NULL, 0, host, d, sizeof host, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddMemcpyNode1D(&n, g, NULL, 0, host, d, sizeof host, (enum cudaMemcpyKind)9),
                     cudaErrorInvalidMemcpyDirection);
    CUcontext ctx;
    CU_OK(cuCtxGetCurrent(&ctx));
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_HOST;
    cp.srcHost = host;
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = (CUdeviceptr)d;
    cp.WidthInBytes = 8;
    cp.Height = 2;
    cp.Depth = 1;
    cp.srcPitch = cp.dstPitch = 8;
    ck_assert_int_eq(cuGraphAddMemcpyNode(&n, g, NULL, 0, &cp, ctx), CUDA_ERROR_NOT_SUPPORTED);
    cp.Height = 1;
    ck_assert_int_eq(cuGraphAddMemcpyNode(&n, g, NULL, 0, &cp, NULL), CUDA_ERROR_INVALID_CONTEXT);
    cp.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    ck_assert_int_eq(cuGraphAddMemcpyNode(&n, g, NULL, 0, &cp, ctx), CUDA_ERROR_NOT_SUPPORTED);
    cp.srcMemoryType = CU_MEMORYTYPE_HOST;
    CU_OK(cuGraphAddMemcpyNode(&n, g, NULL, 0, &cp, ctx));

    void *args[] = {&d};
    struct cudaKernelNodeParams kp = {NULL, ONE, ONE, 0, args, NULL};
    ck_assert_int_eq(cudaGraphAddKernelNode(&n, g, NULL, 0, &kp), cudaErrorInvalidDeviceFunction);
    kp.func = (void *)&k_log;
    kp.gridDim.x = 0;
    ck_assert_int_eq(cudaGraphAddKernelNode(&n, g, NULL, 0, &kp), cudaErrorInvalidValue);
    CUDA_KERNEL_NODE_PARAMS dp;
    memset(&dp, 0, sizeof dp);
    dp.gridDimX = dp.gridDimY = dp.gridDimZ = dp.blockDimX = dp.blockDimY = dp.blockDimZ = 1;
    ck_assert_int_eq(cuGraphAddKernelNode(&n, g, NULL, 0, &dp), CUDA_ERROR_INVALID_VALUE);
    RT_OK(cudaGraphGetNodes(g, NULL, &count));
    ck_assert_uint_eq(count, 3);
    (void)cudaGetLastError();
    RT_OK(cudaGraphDestroy(g));
    RT_OK(cudaGraphDestroy(other));
}
END_TEST

/* A graph a capture records into is the capture's: no node is added to it, nor is it
 * taken as a child or destroyed, until the capture ends. */
START_TEST(test_add_to_graph_under_capture_refused)
{
    sim_test_register();
    cudaGraph_t g, other, got = NULL;
    cudaGraphNode_t a, n;
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    RT_OK(cudaGraphCreate(&g, 0));
    RT_OK(cudaGraphCreate(&other, 0));
    RT_OK(cudaGraphAddEmptyNode(&a, g, NULL, 0));
    RT_OK(cudaStreamBeginCaptureToGraph(s, g, &a, NULL, 1, cudaStreamCaptureModeThreadLocal));
    ck_assert_int_eq(cudaGraphAddEmptyNode(&n, g, NULL, 0), cudaErrorInvalidValue);
    int id = 1;
    void *args[] = {&id};
    struct cudaKernelNodeParams kp = {(void *)&k_log, ONE, ONE, 0, args, NULL};
    ck_assert_int_eq(cudaGraphAddKernelNode(&n, g, NULL, 0, &kp), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphAddChildGraphNode(&n, other, NULL, 0, g), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphDestroy(g), cudaErrorInvalidValue);
    RT_OK(launch_log(1, s));
    RT_OK(cudaStreamEndCapture(s, &got));
    ck_assert_ptr_eq(got, g);
    RT_OK(cudaGraphAddEmptyNode(&n, g, NULL, 0));
    (void)cudaGetLastError();
    RT_OK(cudaGraphDestroy(g));
    RT_OK(cudaGraphDestroy(other));
}
END_TEST

/* cuStreamBeginCaptureToGraph: the captured nodes come after the graph's own, the
 * capture info names the graph and the last node, and the end gives the same graph
 * back. An invalidated capture drops the captured nodes only. */
START_TEST(test_capture_to_graph_appends)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int first[] = {1, 2};
    cudaGraph_t g = log_graph(first, 2), other, got = NULL;
    cudaGraphNode_t have[8], o;
    size_t count = 8;
    RT_OK(cudaGraphGetNodes(g, have, &count));
    ck_assert_uint_eq(count, 2);
    RT_OK(cudaGraphCreate(&other, 0));
    RT_OK(cudaGraphAddEmptyNode(&o, other, NULL, 0));
    ck_assert_int_eq(cudaStreamBeginCaptureToGraph(s, g, &o, NULL, 1, cudaStreamCaptureModeGlobal),
                     cudaErrorInvalidValue);
    cudaGraphEdgeData edge;
    memset(&edge, 0, sizeof edge);
    edge.type = cudaGraphDependencyTypeProgrammatic;
    ck_assert_int_eq(cudaStreamBeginCaptureToGraph(s, g, &have[1], &edge, 1, cudaStreamCaptureModeGlobal),
                     cudaErrorNotSupported);
    ck_assert_int_eq(status_of(s), cudaStreamCaptureStatusNone);

    edge.type = cudaGraphDependencyTypeDefault;
    RT_OK(cudaStreamBeginCaptureToGraph(s, g, &have[1], &edge, 1, cudaStreamCaptureModeThreadLocal));
    CUstreamCaptureStatus st;
    CUgraph in = NULL;
    const CUgraphNode *deps = NULL;
    size_t nd = 0;
    CU_OK(cuStreamGetCaptureInfo((CUstream)s, &st, NULL, &in, &deps, NULL, &nd));
    ck_assert_int_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    ck_assert_ptr_eq(in, g);
    ck_assert_uint_eq(nd, 1);
    ck_assert_ptr_eq(deps[0], have[1]);
    RT_OK(launch_log(3, s));
    RT_OK(launch_log(4, s));
    CU_OK(cuStreamGetCaptureInfo((CUstream)s, &st, NULL, NULL, &deps, NULL, &nd));
    CUgraphNode last = deps[0];
    RT_OK(cudaStreamEndCapture(s, &got));
    ck_assert_ptr_eq(got, g);
    count = 8;
    RT_OK(cudaGraphGetNodes(g, have, &count));
    ck_assert_uint_eq(count, 4);
    ck_assert_ptr_eq(have[3], last);
    cudaGraphExec_t x;
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    int want[] = {1, 2, 3, 4};
    expect_run(x, s, want, 4);
    RT_OK(cudaGraphExecDestroy(x));

    RT_OK(cudaStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, cudaStreamCaptureModeRelaxed));
    RT_OK(launch_log(5, s));
    ck_assert_int_eq(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
    ck_assert_int_eq(cudaStreamEndCapture(s, &got), cudaErrorStreamCaptureInvalidated);
    ck_assert_ptr_null(got);
    count = 8;
    RT_OK(cudaGraphGetNodes(g, have, &count));
    ck_assert_uint_eq(count, 4);
    ck_assert_ptr_eq(have[3], last);
    RT_OK(cudaGraphAddEmptyNode(&o, g, &have[3], 1)); /* the graph's tail is its last node again */
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    expect_run(x, s, want, 4);
    (void)cudaGetLastError();
    RT_OK(cudaGraphExecDestroy(x));
    RT_OK(cudaGraphDestroy(g));
    RT_OK(cudaGraphDestroy(other));
}
END_TEST

/* An executable graph's kernel node takes new parameters (the argument values copied),
 * named by the node of the graph it was made from; the graph keeps its own. */
START_TEST(test_exec_kernel_node_setter)
{
    sim_test_register();
    const size_t n = 16;
    float *d, back[16];
    RT_OK(cudaMalloc((void **)&d, n * sizeof *d));
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g, other;
    cudaGraphNode_t fill, empty, o, late;
    RT_OK(cudaGraphCreate(&g, 0));
    RT_OK(cudaGraphCreate(&other, 0));
    float v = 1.0f;
    size_t count = n;
    void *args[] = {&d, &v, &count};
    struct cudaKernelNodeParams kp = {(void *)&k_fill, ONE, ONE, 0, args, NULL};
    RT_OK(cudaGraphAddKernelNode(&fill, g, NULL, 0, &kp));
    RT_OK(cudaGraphAddEmptyNode(&empty, g, &fill, 1));
    RT_OK(cudaGraphAddKernelNode(&o, other, NULL, 0, &kp));
    cudaGraphExec_t x, x2;
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    RT_OK(cudaGraphAddEmptyNode(&late, g, &empty, 1));

    v = 5.0f;
    RT_OK(cudaGraphExecKernelNodeSetParams(x, fill, &kp));
    v = 7.0f;
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        ck_assert(back[i] == 5.0f);
    RT_OK(cudaGraphInstantiate(&x2, g, 0));
    RT_OK(cudaGraphLaunch(x2, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    ck_assert(back[0] == 1.0f);

    /* The driver's forms: CUDA 12's (kern), and CUDA 11's, asked for by version. */
    cudaKernel_t kf;
    RT_OK(cudaGetKernel(&kf, &k_fill));
    CUDA_KERNEL_NODE_PARAMS dp;
    memset(&dp, 0, sizeof dp);
    dp.kern = (CUkernel)kf;
    dp.gridDimX = dp.gridDimY = dp.gridDimZ = dp.blockDimX = dp.blockDimY = dp.blockDimZ = 1;
    dp.kernelParams = args;
    v = 6.0f;
    CU_OK(cuGraphExecKernelNodeSetParams(x, fill, &dp));
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    ck_assert(back[n - 1] == 6.0f);
    CUresult (*set_v1)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1 *) =
        (CUresult(*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1 *))driver_proc(
            "cuGraphExecKernelNodeSetParams", 11080);
    CUDA_KERNEL_NODE_PARAMS_v1 v1;
    memset(&v1, 0, sizeof v1);
    v1.func = (CUfunction)kf;
    v1.gridDimX = v1.gridDimY = v1.gridDimZ = v1.blockDimX = v1.blockDimY = v1.blockDimZ = 1;
    v1.kernelParams = args;
    v = 8.0f;
    CU_OK(set_v1(x, fill, &v1));
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    ck_assert(back[0] == 8.0f);

    /* Not a kernel node; a node of another graph; one added after the instantiation. */
    ck_assert_int_eq(cudaGraphExecKernelNodeSetParams(x, empty, &kp), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphExecKernelNodeSetParams(x, o, &kp), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphExecKernelNodeSetParams(x, late, &kp), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    RT_OK(cudaGraphExecDestroy(x));
    RT_OK(cudaGraphExecDestroy(x2));
    RT_OK(cudaGraphDestroy(g));
    RT_OK(cudaGraphDestroy(other));
}
END_TEST

/* A graph's kernel node takes new parameters: instantiations made after see them, the
 * executable graphs made before keep theirs. */
START_TEST(test_graph_kernel_node_setter)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    RT_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t node = add_log(g, NULL, 0, 1), empty;
    RT_OK(cudaGraphAddEmptyNode(&empty, g, &node, 1));
    cudaGraphExec_t x1, x2, x3;
    RT_OK(cudaGraphInstantiate(&x1, g, 0));
    int id = 5;
    void *args[] = {&id};
    struct cudaKernelNodeParams kp = {(void *)&k_log, ONE, ONE, 0, args, NULL};
    RT_OK(cudaGraphKernelNodeSetParams(node, &kp));
    id = 0;
    RT_OK(cudaGraphInstantiate(&x2, g, 0));
    int one[] = {1}, five[] = {5}, six[] = {6};
    expect_run(x1, s, one, 1);
    expect_run(x2, s, five, 1);

    CUresult (*set_v1)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1 *) =
        (CUresult(*)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1 *))driver_proc("cuGraphKernelNodeSetParams",
                                                                                 11080);
    cudaKernel_t kl;
    RT_OK(cudaGetKernel(&kl, &k_log));
    CUDA_KERNEL_NODE_PARAMS_v1 v1;
    memset(&v1, 0, sizeof v1);
    v1.func = (CUfunction)kl;
    v1.gridDimX = v1.gridDimY = v1.gridDimZ = v1.blockDimX = v1.blockDimY = v1.blockDimZ = 1;
    v1.kernelParams = args;
    id = 6;
    CU_OK(set_v1(node, &v1));
    RT_OK(cudaGraphInstantiate(&x3, g, 0));
    expect_run(x3, s, six, 1);

    ck_assert_int_eq(cudaGraphKernelNodeSetParams(empty, &kp), cudaErrorInvalidValue);
    RT_OK(cudaStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, cudaStreamCaptureModeThreadLocal));
    ck_assert_int_eq(cudaGraphKernelNodeSetParams(node, &kp), cudaErrorInvalidValue);
    cudaGraph_t got;
    RT_OK(cudaStreamEndCapture(s, &got));
    CU_OK(cuGraphDestroyNode(node));
    ck_assert_int_eq(cudaGraphKernelNodeSetParams(node, &kp), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    RT_OK(cudaGraphExecDestroy(x1));
    RT_OK(cudaGraphExecDestroy(x2));
    RT_OK(cudaGraphExecDestroy(x3));
    RT_OK(cudaGraphDestroy(g));
}
END_TEST

/* An executable graph's child graph node runs a copy of another child of the same
 * topology from then on; a child of another topology is refused and changes nothing. */
START_TEST(test_exec_child_node_setter)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int inner[] = {2, 3}, next[] = {7, 8}, fewer[] = {9};
    cudaGraph_t g, child = log_graph(inner, 2), again = log_graph(next, 2), small = log_graph(fewer, 1), mixed;
    RT_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t head = add_log(g, NULL, 0, 1), sub, e;
    RT_OK(cudaGraphAddChildGraphNode(&sub, g, &head, 1, child));
    RT_OK(cudaGraphCreate(&mixed, 0));
    RT_OK(cudaGraphAddEmptyNode(&e, mixed, NULL, 0));
    add_log(mixed, &e, 1, 10);
    cudaGraphExec_t x, x2;
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    int before[] = {1, 2, 3}, after[] = {1, 7, 8};
    expect_run(x, s, before, 3);
    RT_OK(cudaGraphExecChildGraphNodeSetParams(x, sub, again));
    RT_OK(cudaGraphDestroy(again));
    expect_run(x, s, after, 3);
    ck_assert_int_eq(cudaGraphExecChildGraphNodeSetParams(x, sub, small), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphExecChildGraphNodeSetParams(x, sub, mixed), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphExecChildGraphNodeSetParams(x, head, child), cudaErrorInvalidValue);
    expect_run(x, s, after, 3);
    RT_OK(cudaGraphInstantiate(&x2, g, 0)); /* the graph's own child node is as it was added */
    expect_run(x2, s, before, 3);
    (void)cudaGetLastError();
    RT_OK(cudaGraphExecDestroy(x));
    RT_OK(cudaGraphExecDestroy(x2));
    RT_OK(cudaGraphDestroy(g));
    RT_OK(cudaGraphDestroy(child));
    RT_OK(cudaGraphDestroy(small));
    RT_OK(cudaGraphDestroy(mixed));
}
END_TEST

/* An executable graph's memset and memcpy nodes take new 1-D ranges; a copy keeps its
 * direction. */
START_TEST(test_exec_memset_memcpy_setters)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *d, *e, *h;
    const size_t n = 64;
    RT_OK(cudaMalloc((void **)&d, n * sizeof *d));
    RT_OK(cudaMalloc((void **)&e, n * sizeof *e));
    RT_OK(cudaMallocHost((void **)&h, n * sizeof *h));
    cudaGraph_t g;
    cudaGraphNode_t set, copy, k;
    RT_OK(cudaGraphCreate(&g, 0));
    struct cudaMemsetParams mp = {d, 0, 1, 1, n * sizeof *d, 1};
    RT_OK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &mp));
    RT_OK(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
    k = add_log(g, &copy, 1, 1);
    cudaGraphExec_t x;
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(h[n - 1], 0x01010101u);
    struct cudaMemsetParams mp2 = {e, 0, 0x12345678u, 4, n, 1};
    RT_OK(cudaGraphExecMemsetNodeSetParams(x, set, &mp2));
    RT_OK(cudaGraphExecMemcpyNodeSetParams1D(x, copy, h, e, n * sizeof *h, cudaMemcpyDeviceToHost));
    RT_OK(cudaGraphLaunch(x, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(h[0], 0x12345678u);
    ck_assert_uint_eq(h[n - 1], 0x12345678u);
    ck_assert_int_eq(cudaGraphExecMemcpyNodeSetParams1D(x, copy, e, h, n * sizeof *h, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphExecMemsetNodeSetParams(x, k, &mp2), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphExecMemcpyNodeSetParams1D(x, set, h, e, n * sizeof *h, cudaMemcpyDeviceToHost),
                     cudaErrorInvalidValue);
    (void)cudaGetLastError();
    RT_OK(cudaGraphExecDestroy(x));
    RT_OK(cudaGraphDestroy(g));
}
END_TEST

/* A clone copies a child graph node whole: it is found from the original's node, is a
 * child graph node, and runs the child's nodes in its place. An update takes a graph
 * whose child has the same topology, and the executable graph's nodes are still named
 * by the original's after it. */
START_TEST(test_clone_and_update_across_child)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int inner[] = {2, 3}, inner2[] = {12, 13}, inner3[] = {22, 23}, lone[] = {30};
    cudaGraph_t child = log_graph(inner, 2), g;
    RT_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t a = add_log(g, NULL, 0, 1), sub, b;
    RT_OK(cudaGraphAddChildGraphNode(&sub, g, &a, 1, child));
    b = add_log(g, &sub, 1, 4);
    CUgraph c;
    CU_OK(cuGraphClone(&c, g));
    CUgraphNode ca, csub, cb;
    CU_OK(cuGraphNodeFindInClone(&ca, a, c));
    CU_OK(cuGraphNodeFindInClone(&csub, sub, c));
    CU_OK(cuGraphNodeFindInClone(&cb, b, c));
    ck_assert_ptr_ne(csub, sub);
    CUgraphNodeType t;
    CU_OK(cuGraphNodeGetType(csub, &t));
    ck_assert_int_eq(t, CU_GRAPH_NODE_TYPE_GRAPH);
    CU_OK(cuGraphDestroyNode(ca));
    cudaGraphExec_t xc, x;
    RT_OK(cudaGraphInstantiate(&xc, c, 0));
    RT_OK(cudaGraphInstantiate(&x, g, 0));
    CU_OK(cuGraphDestroy(c));
    int clone_run[] = {2, 3, 4}, whole[] = {1, 2, 3, 4};
    expect_run(xc, s, clone_run, 3);
    expect_run(x, s, whole, 4);

    /* The same shape with other work: the update takes it; a child of another shape
     * is a topology change. */
    cudaGraph_t child2 = log_graph(inner2, 2), child3 = log_graph(lone, 1), g2, g3;
    RT_OK(cudaGraphCreate(&g2, 0));
    RT_OK(cudaGraphCreate(&g3, 0));
    cudaGraphNode_t n2 = add_log(g2, NULL, 0, 11), n3 = add_log(g3, NULL, 0, 11), sub2, sub3;
    RT_OK(cudaGraphAddChildGraphNode(&sub2, g2, &n2, 1, child2));
    RT_OK(cudaGraphAddChildGraphNode(&sub3, g3, &n3, 1, child3));
    add_log(g2, &sub2, 1, 14);
    add_log(g3, &sub3, 1, 14);
    cudaGraphExecUpdateResultInfo info;
    ck_assert_int_eq(cudaGraphExecUpdate(x, g3, &info), cudaErrorGraphExecUpdateFailure);
    ck_assert_int_eq(info.result, cudaGraphExecUpdateErrorTopologyChanged);
    RT_OK(cudaGraphExecUpdate(x, g2, &info));
    int updated[] = {11, 12, 13, 14}, set[] = {11, 22, 23, 14};
    expect_run(x, s, updated, 4);
    cudaGraph_t child4 = log_graph(inner3, 2);
    RT_OK(cudaGraphExecChildGraphNodeSetParams(x, sub, child4));
    expect_run(x, s, set, 4);
    (void)cudaGetLastError();
    RT_OK(cudaGraphExecDestroy(xc));
    RT_OK(cudaGraphExecDestroy(x));
    cudaGraph_t all[] = {g, g2, g3, child, child2, child3, child4};
    for (int i = 0; i < 7; i++)
        RT_OK(cudaGraphDestroy(all[i]));
}
END_TEST

/* The nodes of graph g, in order (at most 16). */
static size_t nodes_of(cudaGraph_t g, cudaGraphNode_t *node)
{
    size_t n = 16;
    RT_OK(cudaGraphGetNodes(g, node, &n));
    return n;
}

/* cuGraphChildGraphNodeGetGraph gives the graph a child node embeds, not a copy: a
 * node destroyed in it and a child added into it (nested) are what instantiations,
 * clones and replays made after run; an executable graph made before keeps what it
 * had. The node owns it: cuGraphDestroy refuses it, a capture into it keeps the node
 * alive, and it goes with its node (destroyed, or its graph destroyed). */
START_TEST(test_child_graph_node_embedded_graph)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int inner[] = {2, 3}, deeper[] = {5, 6};
    cudaGraph_t g, child = log_graph(inner, 2), nested = log_graph(deeper, 2), emb = NULL, emb2 = NULL;
    RT_OK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t head = add_log(g, NULL, 0, 1), sub, nest, e[16], n;
    RT_OK(cudaGraphAddChildGraphNode(&sub, g, &head, 1, child));
    add_log(g, &sub, 1, 4);
    cudaGraphExec_t before, after, cloned;
    RT_OK(cudaGraphInstantiate(&before, g, 0));

    RT_OK(cudaGraphChildGraphNodeGetGraph(sub, &emb));
    ck_assert_ptr_nonnull(emb);
    ck_assert_ptr_ne(emb, child); /* the node's own copy */
    CUresult (*get)(CUgraphNode, CUgraph *) =
        (CUresult(*)(CUgraphNode, CUgraph *))driver_proc("cuGraphChildGraphNodeGetGraph", 13000);
    CUgraph same = NULL;
    CU_OK(get(sub, &same));
    ck_assert_ptr_eq(same, emb); /* the same graph each time, not a copy */
    ck_assert_int_eq(cudaGraphChildGraphNodeGetGraph(head, &emb2), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphChildGraphNodeGetGraph(sub, NULL), cudaErrorInvalidValue);
    ck_assert_uint_eq(nodes_of(emb, e), 2);
    CUgraphNodeType t;
    CU_OK(cuGraphNodeGetType(e[1], &t));
    ck_assert_int_eq(t, CU_GRAPH_NODE_TYPE_KERNEL);
    ck_assert_int_eq(cudaGraphAddEmptyNode(&n, emb, &head, 1), cudaErrorInvalidValue); /* the parent's node */

    /* Changed in place: logk(3) goes, a nested child (5, 6) and logk(7) come after 2. */
    CU_OK(cuGraphDestroyNode(e[1]));
    RT_OK(cudaGraphAddChildGraphNode(&nest, emb, &e[0], 1, nested));
    add_log(emb, &nest, 1, 7);
    ck_assert_uint_eq(nodes_of(emb, e), 3);
    RT_OK(cudaGraphInstantiate(&after, g, 0));
    int old_run[] = {1, 2, 3, 4}, new_run[] = {1, 2, 5, 6, 7, 4}, set_run[] = {1, 2, 15, 6, 7, 4};
    expect_run(after, s, new_run, 6);
    expect_run(after, s, new_run, 6);
    expect_run(before, s, old_run, 4);

    /* The nested child's own embedded graph, a node of it given new parameters; a clone
     * copies what the graphs hold now, and its embedded graph is found from the
     * original's nodes. */
    RT_OK(cudaGraphChildGraphNodeGetGraph(nest, &emb2));
    cudaGraphNode_t d[16];
    ck_assert_uint_eq(nodes_of(emb2, d), 2);
    int id = 15;
    void *args[] = {&id};
    struct cudaKernelNodeParams kp = {(void *)&k_log, ONE, ONE, 0, args, NULL};
    RT_OK(cudaGraphKernelNodeSetParams(d[0], &kp));
    CUgraph c, cemb;
    CUgraphNode csub, ce0;
    CU_OK(cuGraphClone(&c, (CUgraph)g));
    CU_OK(cuGraphNodeFindInClone(&csub, sub, c));
    CU_OK(cuGraphChildGraphNodeGetGraph(csub, &cemb));
    ck_assert_ptr_ne(cemb, emb);
    CU_OK(cuGraphNodeFindInClone(&ce0, e[0], cemb));
    ck_assert_ptr_ne(ce0, e[0]);
    RT_OK(cudaGraphInstantiate(&cloned, (cudaGraph_t)c, 0));
    expect_run(cloned, s, set_run, 6);
    expect_run(after, s, new_run, 6);
    CU_OK(cuGraphDestroy(c));
    expect_run(cloned, s, set_run, 6);

    /* The node owns it. */
    ck_assert_int_eq(cudaGraphDestroy(emb), cudaErrorInvalidValue);
    ck_assert_int_eq(cuGraphDestroy((CUgraph)emb2), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cudaGraphAddChildGraphNode(&n, emb, NULL, 0, emb), cudaErrorInvalidValue);
    /* A capture into it: the node and the parent stay until it ends. */
    RT_OK(cudaStreamBeginCaptureToGraph(s, emb, NULL, NULL, 0, cudaStreamCaptureModeThreadLocal));
    RT_OK(launch_log(8, s));
    ck_assert_int_eq(cuGraphDestroyNode(sub), CUDA_ERROR_INVALID_VALUE);
    ck_assert_int_eq(cudaGraphDestroy(g), cudaErrorInvalidValue);
    cudaGraph_t got = NULL;
    RT_OK(cudaStreamEndCapture(s, &got));
    ck_assert_ptr_eq(got, emb);
    ck_assert_uint_eq(nodes_of(emb, e), 4);

    /* It dies with its node, and with its graph. */
    CU_OK(cuGraphDestroyNode(sub));
    size_t count = 0;
    ck_assert_int_eq(cudaGraphGetNodes(emb, NULL, &count), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphGetNodes(emb2, NULL, &count), cudaErrorInvalidValue);
    ck_assert_int_eq(cuGraphNodeGetType(e[0], &t), CUDA_ERROR_INVALID_VALUE);
    cudaGraph_t g2, emb3;
    cudaGraphNode_t sub2;
    RT_OK(cudaGraphCreate(&g2, 0));
    RT_OK(cudaGraphAddChildGraphNode(&sub2, g2, NULL, 0, child));
    RT_OK(cudaGraphChildGraphNodeGetGraph(sub2, &emb3));
    RT_OK(cudaGraphDestroy(g2));
    ck_assert_int_eq(cudaGraphGetNodes(emb3, NULL, &count), cudaErrorInvalidValue);
    expect_run(after, s, new_run, 6); /* the executable graphs keep their copies */
    (void)cudaGetLastError();
    RT_OK(cudaGraphExecDestroy(before));
    RT_OK(cudaGraphExecDestroy(after));
    RT_OK(cudaGraphExecDestroy(cloned));
    RT_OK(cudaGraphDestroy(g));
    RT_OK(cudaGraphDestroy(child));
    RT_OK(cudaGraphDestroy(nested));
}
END_TEST

/* A graph's memset and memcpy nodes take new 1-D ranges (a copy may change direction):
 * the instantiations made after run them, an executable graph made before keeps what
 * it copied. A node of an embedded graph takes them as any; a graph a capture records
 * into refuses them, as it refuses new nodes. */
START_TEST(test_graph_memset_memcpy_setters)
{
    sim_test_register();
    cudaStream_t s;
    RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint32_t *d, *e, *h, *h2, back[64];
    const size_t n = 64;
    RT_OK(cudaMalloc((void **)&d, n * sizeof *d));
    RT_OK(cudaMalloc((void **)&e, n * sizeof *e));
    RT_OK(cudaMallocHost((void **)&h, n * sizeof *h));
    RT_OK(cudaMallocHost((void **)&h2, n * sizeof *h2));
    cudaGraph_t g;
    cudaGraphNode_t set, copy, k;
    RT_OK(cudaGraphCreate(&g, 0));
    struct cudaMemsetParams mp = {d, 0, 1, 1, n * sizeof *d, 1};
    RT_OK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &mp));
    RT_OK(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
    k = add_log(g, &copy, 1, 1);
    cudaGraphExec_t x1, x2, x3;
    RT_OK(cudaGraphInstantiate(&x1, g, 0));

    struct cudaMemsetParams mp2 = {e, 0, 0x12345678u, 4, n, 1};
    RT_OK(cudaGraphMemsetNodeSetParams(set, &mp2));
    RT_OK(cudaGraphMemcpyNodeSetParams1D(copy, h, e, n * sizeof *h, cudaMemcpyDeviceToHost));
    RT_OK(cudaGraphInstantiate(&x2, g, 0));
    RT_OK(cudaGraphLaunch(x2, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(h[0], 0x12345678u);
    ck_assert_uint_eq(h[n - 1], 0x12345678u);
    RT_OK(cudaGraphLaunch(x1, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(h[0], 0x01010101u);
    ck_assert_uint_eq(h[n - 1], 0x01010101u);

    /* The driver's forms, asked for by name: a byte set of e, then a copy of h2 into d
     * (the other direction). */
    CUresult (*set_memset)(CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *) =
        (CUresult(*)(CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *))driver_proc("cuGraphMemsetNodeSetParams", 13000);
    CUresult (*set_memcpy)(CUgraphNode, const CUDA_MEMCPY3D *) =
        (CUresult(*)(CUgraphNode, const CUDA_MEMCPY3D *))driver_proc("cuGraphMemcpyNodeSetParams", 13000);
    CUDA_MEMSET_NODE_PARAMS dm;
    memset(&dm, 0, sizeof dm);
    dm.dst = (CUdeviceptr)e;
    dm.value = 0x77;
    dm.elementSize = 1;
    dm.width = n * sizeof *e;
    dm.height = 1;
    CU_OK(set_memset(set, &dm));
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_HOST;
    cp.srcHost = h2;
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = (CUdeviceptr)d;
    cp.WidthInBytes = n * sizeof *d;
    cp.Height = cp.Depth = 1;
    CU_OK(set_memcpy(copy, &cp));
    for (size_t i = 0; i < n; i++)
        h2[i] = 0xabc00000u + (uint32_t)i;
    memset(h, 0, n * sizeof *h);
    RT_OK(cudaGraphInstantiate(&x3, g, 0));
    RT_OK(cudaGraphLaunch(x3, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_eq(back[i], 0xabc00000u + (uint32_t)i);
    RT_OK(cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost));
    ck_assert_uint_eq(back[n - 1], 0x77777777u);
    ck_assert_uint_eq(h[0], 0); /* no copy to h any more */
    RT_OK(cudaGraphLaunch(x2, s));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(h[0], 0x12345678u);

    /* Refused, the node unchanged: another kind of node, parameters a new node could
     * not have, a graph under capture, a node destroyed. */
    ck_assert_int_eq(cudaGraphMemsetNodeSetParams(copy, &mp2), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphMemcpyNodeSetParams1D(k, h, e, n * sizeof *h, cudaMemcpyDeviceToHost),
                     cudaErrorInvalidValue);
    struct cudaMemsetParams bad = {e, 0, 0, 3, n, 1};
    ck_assert_int_eq(cudaGraphMemsetNodeSetParams(set, &bad), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphMemcpyNodeSetParams1D(copy, h, d, n * sizeof *h, cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);
    RT_OK(cudaStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, cudaStreamCaptureModeThreadLocal));
    ck_assert_int_eq(cudaGraphMemsetNodeSetParams(set, &mp2), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGraphMemcpyNodeSetParams1D(copy, h, e, n * sizeof *h, cudaMemcpyDeviceToHost),
                     cudaErrorInvalidValue);
    cudaGraph_t got;
    RT_OK(cudaStreamEndCapture(s, &got));
    cudaGraphExec_t x4;
    RT_OK(cudaGraphInstantiate(&x4, g, 0));
    memset(h, 0, n * sizeof *h);
    RT_OK(cudaMemsetAsync(d, 0, n * sizeof *d, s)); /* on s: before the launch */
    RT_OK(cudaGraphLaunch(x4, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    ck_assert_uint_eq(back[1], 0xabc00001u);
    RT_OK(cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost));
    ck_assert_uint_eq(back[0], 0x77777777u);
    ck_assert_uint_eq(h[0], 0);

    /* A node of an embedded graph: the caller's child keeps its own node, which the
     * parent no longer sees. */
    cudaGraph_t child, parent, emb;
    cudaGraphNode_t cset, sub, eset[16];
    RT_OK(cudaGraphCreate(&child, 0));
    RT_OK(cudaGraphAddMemsetNode(&cset, child, NULL, 0, &mp));
    RT_OK(cudaGraphCreate(&parent, 0));
    RT_OK(cudaGraphAddChildGraphNode(&sub, parent, NULL, 0, child));
    RT_OK(cudaGraphChildGraphNodeGetGraph(sub, &emb));
    ck_assert_uint_eq(nodes_of(emb, eset), 1);
    RT_OK(cudaGraphMemsetNodeSetParams(cset, &mp2)); /* the caller's: not the parent's */
    struct cudaMemsetParams mp3 = {d, 0, 0x5a, 1, n * sizeof *d, 1};
    RT_OK(cudaGraphMemsetNodeSetParams(eset[0], &mp3));
    cudaGraphExec_t xp;
    RT_OK(cudaGraphInstantiate(&xp, parent, 0));
    RT_OK(cudaMemsetAsync(e, 0, n * sizeof *e, s));
    RT_OK(cudaGraphLaunch(xp, s));
    RT_OK(cudaStreamSynchronize(s));
    RT_OK(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost));
    ck_assert_uint_eq(back[n - 1], 0x5a5a5a5au);
    RT_OK(cudaMemcpy(back, e, sizeof back, cudaMemcpyDeviceToHost));
    ck_assert_uint_eq(back[0], 0);

    CU_OK(cuGraphDestroyNode(set));
    ck_assert_int_eq(cudaGraphMemsetNodeSetParams(set, &mp2), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    cudaGraphExec_t xs[] = {x1, x2, x3, x4, xp};
    for (int i = 0; i < 5; i++)
        RT_OK(cudaGraphExecDestroy(xs[i]));
    RT_OK(cudaGraphDestroy(g));
    RT_OK(cudaGraphDestroy(child));
    RT_OK(cudaGraphDestroy(parent));
}
END_TEST

Suite *sim_graph_suite(void)
{
    Suite *s = suite_create("sim_graph");
    TCase *tc = tcase_create("graph");
    tcase_add_test(tc, test_capture_then_replay_in_order);
    tcase_add_test(tc, test_captured_copy_runs_at_replay);
    tcase_add_test(tc, test_sync_of_capturing_stream_invalidates);
    tcase_add_test(tc, test_query_of_capturing_stream_invalidates);
    tcase_add_test(tc, test_device_sync_invalidates);
    tcase_add_test(tc, test_legacy_stream_and_blocking_capture);
    tcase_add_test(tc, test_unsafe_calls_follow_capture_modes);
    tcase_add_test(tc, test_captured_event_cannot_be_queried);
    tcase_add_test(tc, test_fork_and_join);
    tcase_add_test(tc, test_wait_on_uncaptured_event_invalidates);
    tcase_add_test(tc, test_begin_and_end_rules);
    tcase_add_test(tc, test_graph_nodes_clone_and_update);
    tcase_add_test(tc, test_node_built_graph_runs);
    tcase_add_test(tc, test_generic_add_node);
    tcase_add_test(tc, test_node_dependencies_and_params_checked);
    tcase_add_test(tc, test_add_to_graph_under_capture_refused);
    tcase_add_test(tc, test_capture_to_graph_appends);
    tcase_add_test(tc, test_exec_kernel_node_setter);
    tcase_add_test(tc, test_graph_kernel_node_setter);
    tcase_add_test(tc, test_exec_child_node_setter);
    tcase_add_test(tc, test_exec_memset_memcpy_setters);
    tcase_add_test(tc, test_clone_and_update_across_child);
    tcase_add_test(tc, test_child_graph_node_embedded_graph);
    tcase_add_test(tc, test_graph_memset_memcpy_setters);
    suite_add_tcase(s, tc);
    return s;
}

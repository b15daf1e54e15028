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
    suite_add_tcase(s, tc);
    return s;
}

// graph_cut.cu - two questions before streaming weights under CUDA graph replay:
//
// 1. A captured graph cut into segments at layer boundaries (cudaGraphClone of the
//    whole, every node outside the segment destroyed in the clone, each clone
//    instantiated) and the segments launched one after another on the stream: is the
//    output the same, and what does a replay cost against the whole graph's? Between
//    the segments a streaming tool would load the next layer's weights, as it does
//    between eager launches.
// 2. One physical allocation mapped at two address ranges (cuMemMap twice): does a
//    graph's memcpy node into the first range feed a kernel node reading the second?
//    With that, every streamed unit's addresses could be mapped for good onto a few
//    slots' memory, and a graph could stream by copies alone.
//
// A model of L layers (argument 1, default 32), each a 64 MiB weight read by K kernels
// (argument 2, default 40: small kernels, as a decode step's), captured from one
// stream. Prints the medians of 20 replays and whether the outputs match. A diagnostic
// for bench/RESULTS.md, not a test.
//
//   nvcc -O2 -o graph_cut bench/graph_cut.cu -lcuda
//   ./graph_cut [L] [K]
#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define CU(x)                                                                              \
    do {                                                                                   \
        CUresult r_ = (x);                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                          \
            fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #x, (int)r_);   \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

// Adds a strided sample of w to acc: a small kernel that reads its layer's weight.
__global__ void layer_kernel(const float *w, size_t n, float *acc, int k)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t j = (i * 2654435761u + (size_t)k * 97) % n;
    if (i < 4096)
        acc[i] = acc[i] * 0.5f + w[j];
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double ms_since(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

int main(int argc, char **argv)
{
    int L = argc > 1 ? atoi(argv[1]) : 32, K = argc > 2 ? atoi(argv[2]) : 40;
    const size_t n = (64u << 20) / sizeof(float);
    std::vector<float *> w(L);
    for (int l = 0; l < L; l++) {
        CK(cudaMalloc(&w[l], n * sizeof(float)));
        std::vector<float> h(n);
        for (size_t i = 0; i < n; i++)
            h[i] = (float)((i * 31 + l * 7) % 1000) / 1000.0f;
        CK(cudaMemcpy(w[l], h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    }
    float *acc;
    CK(cudaMalloc(&acc, 4096 * sizeof(float)));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));

    // The forward, captured.
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(acc, 0, 4096 * sizeof(float), s));
    for (int l = 0; l < L; l++)
        for (int k = 0; k < K; k++)
            layer_kernel<<<16, 256, 0, s>>>(w[l], n, acc, k);
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t whole;
    CK(cudaGraphInstantiate(&whole, g, 0));

    // Its nodes in order: a capture from one stream is a chain from its one root.
    size_t nn = 0;
    CK(cudaGraphGetNodes(g, nullptr, &nn));
    std::vector<cudaGraphNode_t> nodes(nn), order;
    CK(cudaGraphGetNodes(g, nodes.data(), &nn));
    size_t nr = 0;
    CK(cudaGraphGetRootNodes(g, nullptr, &nr));
    if (nr != 1) {
        printf("graph: %zu roots, not a chain\n", nr);
        return 1;
    }
    cudaGraphNode_t cur;
    CK(cudaGraphGetRootNodes(g, &cur, &nr));
    for (;;) {
        order.push_back(cur);
        size_t nd = 0;
        CK(cudaGraphNodeGetDependentNodes(cur, nullptr, nullptr, &nd));
        if (nd == 0)
            break;
        if (nd != 1) {
            printf("graph: a node with %zu dependents, not a chain\n", nd);
            return 1;
        }
        CK(cudaGraphNodeGetDependentNodes(cur, &cur, nullptr, &nd));
    }
    printf("%d layers x %d kernels: %zu nodes, a chain of %zu\n", L, K, nn, order.size());

    // Segments: the memset with layer 0, then one a layer.
    std::vector<cudaGraphExec_t> seg;
    for (int l = 0; l < L; l++) {
        size_t lo = l == 0 ? 0 : 1 + (size_t)l * K, hi = 1 + (size_t)(l + 1) * K;
        cudaGraph_t c;
        CK(cudaGraphClone(&c, g));
        for (size_t i = 0; i < order.size(); i++) {
            if (i >= lo && i < hi)
                continue;
            cudaGraphNode_t x;
            CK(cudaGraphNodeFindInClone(&x, order[i], c));
            CK(cudaGraphDestroyNode(x));
        }
        cudaGraphExec_t e;
        CK(cudaGraphInstantiate(&e, c, 0));
        seg.push_back(e);
        CK(cudaGraphDestroy(c));
    }

    std::vector<float> out_whole(4096), out_seg(4096);
    std::vector<double> t_whole, t_seg, host_seg;
    for (int r = 0; r < 22; r++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(whole, s));
        CK(cudaEventRecord(b, s));
        CK(cudaStreamSynchronize(s));
        if (r >= 2)
            t_whole.push_back(ms_since(a, b));
    }
    CK(cudaMemcpy(out_whole.data(), acc, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < 22; r++) {
        struct timespec h0, h1;
        clock_gettime(CLOCK_MONOTONIC, &h0);
        CK(cudaEventRecord(a, s));
        for (auto e : seg)
            CK(cudaGraphLaunch(e, s));
        CK(cudaEventRecord(b, s));
        clock_gettime(CLOCK_MONOTONIC, &h1);
        CK(cudaStreamSynchronize(s));
        if (r >= 2) {
            t_seg.push_back(ms_since(a, b));
            host_seg.push_back((h1.tv_sec - h0.tv_sec) * 1e3 + (h1.tv_nsec - h0.tv_nsec) / 1e6);
        }
    }
    CK(cudaMemcpy(out_seg.data(), acc, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    printf("whole graph: %.3f ms a replay; %d segments: %.3f ms (%.1f us more a segment), their launches %.3f ms "
           "of host time; outputs %s\n",
           median(t_whole), L, median(t_seg), (median(t_seg) - median(t_whole)) * 1e3 / L, median(host_seg),
           memcmp(out_whole.data(), out_seg.data(), 4096 * sizeof(float)) == 0 ? "equal" : "DIFFER");

    // Two mappings of one physical allocation, and a graph across them.
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    size_t gran = 0;
    CU(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t len = (n * sizeof(float) + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle ph;
    CU(cuMemCreate(&ph, len, &p, 0));
    CUdeviceptr va1, va2;
    CU(cuMemAddressReserve(&va1, len, 0, 0, 0));
    CU(cuMemAddressReserve(&va2, len, 0, 0, 0));
    CU(cuMemMap(va1, len, 0, ph, 0));
    CU(cuMemMap(va2, len, 0, ph, 0));
    CUmemAccessDesc ad = {};
    ad.location = p.location;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(va1, len, &ad, 1));
    CU(cuMemSetAccess(va2, len, &ad, 1));
    float *host;
    CK(cudaHostAlloc(&host, n * sizeof(float), cudaHostAllocDefault));
    for (size_t i = 0; i < n; i++)
        host[i] = (float)((i * 31 + 5 * 7) % 1000) / 1000.0f;
    cudaGraph_t ga;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(acc, 0, 4096 * sizeof(float), s));
    CK(cudaMemcpyAsync((void *)va1, host, n * sizeof(float), cudaMemcpyHostToDevice, s));
    for (int k = 0; k < K; k++)
        layer_kernel<<<16, 256, 0, s>>>((const float *)va2, n, acc, k);
    CK(cudaStreamEndCapture(s, &ga));
    cudaGraphExec_t ea;
    CK(cudaGraphInstantiate(&ea, ga, 0));
    CK(cudaGraphLaunch(ea, s));
    CK(cudaStreamSynchronize(s));
    std::vector<float> out_alias(4096), out_ref(4096);
    CK(cudaMemcpy(out_alias.data(), acc, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemsetAsync(acc, 0, 4096 * sizeof(float), s));
    for (int k = 0; k < K; k++)
        layer_kernel<<<16, 256, 0, s>>>(w[5 % L], n, acc, k);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(out_ref.data(), acc, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    printf("one physical allocation at two addresses: a graph's copy into the first, read at the second: %s\n",
           memcmp(out_alias.data(), out_ref.data(), 4096 * sizeof(float)) == 0 ? "the same as layer 5's weight"
                                                                             : "DIFFERS");
    return 0;
}

// gpu_probe.cu - checks, on a real GPU, the driver/runtime/CUPTI facts the simulated
// device models (docs/simulator.md). Not built by default; on a GPU machine:
//   nvcc -O1 -o gpu_probe tests/sim/gpu_probe.cu -lcuda -lcupti && ./gpu_probe
// Each line prints "fact: value" for comparison with the simulator's behaviour.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__global__ void spin_kernel(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles)
        ;
}

__global__ void touch_kernel(char *p) { p[threadIdx.x] = 1; }

static double now_ms()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct rec { int domain, cbid, site; char name[64]; unsigned corr; };
static rec recs[256];
static int nrec;
static int call_inside;
static int inner_rt = -1, inner_drv = -1, inner_sync = -1, inner_kname = -1;
static CUkernel probe_kernel;

static void CUPTIAPI cb(void *, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data)
{
    const CUpti_CallbackData *c = (const CUpti_CallbackData *)data;
    if (nrec < 256) {
        rec *r = &recs[nrec++];
        r->domain = d;
        r->cbid = id;
        r->site = c->callbackSite;
        snprintf(r->name, sizeof r->name, "%s", c->functionName);
        r->corr = c->correlationId;
    }
    if (call_inside && c->callbackSite == CUPTI_API_ENTER) {
        size_t f, t;
        const char *nm;
        inner_rt = cudaMemGetInfo(&f, &t);
        inner_drv = cuMemGetInfo(&f, &t);
        inner_sync = cuCtxSynchronize();
        inner_kname = probe_kernel ? cuKernelGetName(&nm, probe_kernel) : -2;
        call_inside = 0;
    }
}

static unsigned kernel_corr;
static void CUPTIAPI buf_req(uint8_t **b, size_t *s, size_t *m)
{
    *s = 1 << 20;
    *b = (uint8_t *)aligned_alloc(8, *s);
    *m = 0;
}
static void CUPTIAPI buf_done(CUcontext, uint32_t, uint8_t *b, size_t, size_t valid)
{
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS)
        if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
            kernel_corr = ((CUpti_ActivityKernel10 *)r)->correlationId;
}

int main()
{
    cudaFree(0);
    // --- nested callbacks and correlation ids
    CUpti_SubscriberHandle sub;
    printf("subscribe: %d\n", cuptiSubscribe(&sub, cb, NULL));
    CUpti_SubscriberHandle sub2;
    printf("second subscribe: %d\n", cuptiSubscribe(&sub2, cb, NULL));
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
    cuptiActivityRegisterCallbacks(buf_req, buf_done);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    void *p;
    cudaMalloc(&p, 777);
    void *args[] = {&p};
    cudaLaunchKernel((const void *)touch_kernel, dim3(1), dim3(1), args, 0, 0);
    cudaDeviceSynchronize();
    cuptiActivityFlushAll(1);
    for (int i = 0; i < nrec; i++)
        printf("cb: domain %d cbid %d site %d name %s corr %u\n", recs[i].domain, recs[i].cbid, recs[i].site,
               recs[i].name, recs[i].corr);
    printf("kernel record corr: %u\n", kernel_corr);
    cudaGetKernel((cudaKernel_t *)&probe_kernel, (const void *)touch_kernel);
    call_inside = 1;
    cudaMalloc(&p, 64);
    printf("inside callback: cudaMemGetInfo %d cuMemGetInfo %d cuCtxSynchronize %d cuKernelGetName %d\n",
           inner_rt, inner_drv, inner_sync, inner_kname);
    cuptiUnsubscribe(sub);

    // --- cuGetProcAddress names
    void *fn;
    CUdriverProcAddressQueryResult st;
    CUresult r = cuGetProcAddress("cuMemAlloc_v2", &fn, 13000, 0, &st);
    printf("cuGetProcAddress(cuMemAlloc_v2): %d status %d\n", r, st);
    r = cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &st);
    printf("cuGetProcAddress(cuMemAlloc): %d status %d same=%d\n", r, st, fn == (void *)cuMemAlloc_v2);

    // --- kernel handles
    cudaKernel_t k;
    cudaFunction_t f;
    cudaGetKernel(&k, (const void *)touch_kernel);
    cudaGetFuncBySymbol(&f, (const void *)touch_kernel);
    const char *name = NULL;
    printf("cudaGetKernel == cudaGetFuncBySymbol: %d\n", (void *)k == (void *)f);
    printf("cuFuncGetName(CUkernel): %d\n", cuFuncGetName(&name, (CUfunction)k));
    printf("cuFuncGetName(cudaGetFuncBySymbol): %d\n", cuFuncGetName(&name, (CUfunction)f));
    CUfunction kf;
    cuKernelGetFunction(&kf, (CUkernel)k);
    printf("cuKernelGetName(CUfunction): %d\n", cuKernelGetName(&name, (CUkernel)kf));
    printf("cuKernelGetName(cudaGetFuncBySymbol): %d\n", cuKernelGetName(&name, (CUkernel)f));
    size_t off, sz;
    printf("cuKernelGetParamInfo(out of range): %d\n", cuKernelGetParamInfo((CUkernel)k, 5, &off, &sz));
    void *extra[] = {CU_LAUNCH_PARAM_END};
    printf("cuLaunchKernel(params+extra): %d\n",
           cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, 0, args, extra));
    cudaGetLastError();

    // --- pointers
    static char pageable[4096];
    cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, pageable);
    printf("cudaPointerGetAttributes(pageable): %d type %d device %d dev %p host %p (buf %p)\n", e, at.type,
           at.device, at.devicePointer, at.hostPointer, (void *)pageable);
    unsigned mt;
    printf("cuPointerGetAttribute(pageable, MEMORY_TYPE): %d\n",
           cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)pageable));
    void *z = (void *)1;
    printf("cudaMalloc(0): %d ptr %p\n", cudaMalloc(&z, 0), z);
    printf("cuMemFree(0): %d\n", cuMemFree(0));
    cudaGetLastError();

    // --- events
    cudaEvent_t a, b, nt;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventCreateWithFlags(&nt, cudaEventDisableTiming);
    float ms;
    cudaEventRecord(a, 0);
    printf("elapsed(recorded, unrecorded): %d\n", cudaEventElapsedTime(&ms, a, b));
    cudaEventRecord(nt, 0);
    cudaDeviceSynchronize();
    printf("elapsed(recorded, disable-timing): %d\n", cudaEventElapsedTime(&ms, a, nt));
    cudaGetLastError();

    // --- host blocking behaviour
    int clk;
    cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
    long long cycles = (long long)clk * 200;  // ~200 ms
    void *d1, *d2, *hp;
    cudaMalloc(&d1, 1 << 20);
    cudaMalloc(&d2, 1 << 20);
    cudaMallocHost(&hp, 1 << 20);
    cudaStream_t s;
    cudaStreamCreate(&s);
    spin_kernel<<<1, 1, 0, 0>>>(cycles);
    double t0 = now_ms();
    cudaMemset(d1, 0, 1 << 20);
    printf("cudaMemset after 200ms kernel blocked host: %.1f ms\n", now_ms() - t0);
    cudaDeviceSynchronize();
    spin_kernel<<<1, 1, 0, 0>>>(cycles);
    t0 = now_ms();
    cudaMemcpy(d2, d1, 1 << 20, cudaMemcpyDeviceToDevice);
    printf("cudaMemcpy D2D after 200ms kernel blocked host: %.1f ms\n", now_ms() - t0);
    cudaDeviceSynchronize();
    spin_kernel<<<1, 1, 0, s>>>(cycles);
    t0 = now_ms();
    cudaStreamSynchronize(0);
    printf("cudaStreamSynchronize(0) after 200ms kernel on blocking stream: %.1f ms\n", now_ms() - t0);
    spin_kernel<<<1, 1, 0, s>>>(cycles);
    printf("cudaStreamQuery(0) with blocking stream busy: %d\n", cudaStreamQuery(0));
    printf("cudaGetLastError after NotReady: %d\n", cudaGetLastError());
    cudaDeviceSynchronize();
    spin_kernel<<<1, 1, 0, s>>>(cycles);
    t0 = now_ms();
    cudaFreeHost(hp);
    printf("cudaFreeHost during kernel blocked host: %.1f ms\n", now_ms() - t0);
    cudaDeviceSynchronize();

    // --- VMM
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t g;
    cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    cuMemCreate(&h, 2 * g, &prop, 0);
    cuMemAddressReserve(&va, 4 * g, 0, 0, 0);
    cuMemMap(va, 2 * g, 0, h, 0);
    printf("cuMemMap over a mapped range: %d\n", cuMemMap(va, 2 * g, 0, h, 0));
    CUdeviceptr base;
    size_t size;
    printf("cuMemGetAddressRange(mapped+g): %d base-va %lld size %zu (g %zu)\n",
           cuMemGetAddressRange(&base, &size, va + g), (long long)(base - va), size, g);
    printf("cuMemAddressFree while mapped: %d\n", cuMemAddressFree(va, 4 * g));
    printf("cuMemUnmap half a mapping: %d\n", cuMemUnmap(va, g));
    printf("cuMemRelease while mapped: %d\n", cuMemRelease(h));
    size_t fr, tot;
    cudaMemGetInfo(&fr, &tot);
    printf("free after release while mapped: %zu\n", fr);
    printf("cuMemUnmap: %d\n", cuMemUnmap(va, 2 * g));
    cudaMemGetInfo(&fr, &tot);
    printf("free after unmap: %zu\n", fr);
    printf("cuMemRelease twice: %d\n", cuMemRelease(h));
    cudaGetLastError();
    printf("cuptiActivityEnable(PC_SAMPLING): %d\n", cuptiActivityEnable(CUPTI_ACTIVITY_KIND_PC_SAMPLING));
    printf("done\n");
    return 0;
}

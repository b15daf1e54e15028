/* rt.c - the simulated CUDA runtime, libcudart.so.13.
 *
 * Reaches the driver the way the real runtime does: dlopen("libcuda.so.1"),
 * dlsym(cuGetProcAddress_v2), then cuGetProcAddress for every entry point it uses, and
 * cuGetExportTable for the simulator's private interface. It never links libcuda, so
 * a shim that wraps cuGetProcAddress sees every driver call the runtime makes, and the
 * nested driver-API CUPTI callbacks fire as on a GPU. The runtime keeps only its own
 * state: the current device and the last error of each thread.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_runtime_cbid.h>
#include <dlfcn.h>
#include <generated_cuda_runtime_api_meta.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim_priv.h"
#include "simcuda.h"

#define RT_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------ the driver */

/* The driver entry points the runtime uses: RT_DRV(base name, symbol type). */
#define RT_DRIVER(X)                                                        \
    X(cuInit, cuInit)                                                       \
    X(cuDriverGetVersion, cuDriverGetVersion)                               \
    X(cuGetProcAddress, cuGetProcAddress_v2)                                \
    X(cuGetExportTable, cuGetExportTable)                                   \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute)                           \
    X(cuDeviceGetName, cuDeviceGetName)                                     \
    X(cuDeviceGetUuid, cuDeviceGetUuid_v2)                                  \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2)                                \
    X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool)                 \
    X(cuDeviceGetMemPool, cuDeviceGetMemPool)                               \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2)                  \
    X(cuCtxGetCurrent, cuCtxGetCurrent)                                     \
    X(cuCtxSynchronize, cuCtxSynchronize)                                   \
    X(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange)             \
    X(cuMemAlloc, cuMemAlloc_v2)                                            \
    X(cuMemFree, cuMemFree_v2)                                              \
    X(cuMemGetInfo, cuMemGetInfo_v2)                                        \
    X(cuMemAllocHost, cuMemAllocHost_v2)                                    \
    X(cuMemHostAlloc, cuMemHostAlloc)                                       \
    X(cuMemFreeHost, cuMemFreeHost)                                         \
    X(cuMemHostRegister, cuMemHostRegister_v2)                              \
    X(cuMemHostUnregister, cuMemHostUnregister)                             \
    X(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2)              \
    X(cuMemAllocAsync, cuMemAllocAsync)                                     \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync)                     \
    X(cuMemFreeAsync, cuMemFreeAsync)                                       \
    X(cuMemPoolSetAttribute, cuMemPoolSetAttribute)                         \
    X(cuMemPoolGetAttribute, cuMemPoolGetAttribute)                         \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo)                                     \
    X(cuPointerGetAttributes, cuPointerGetAttributes)                       \
    X(cuMemcpy, cuMemcpy)                                                   \
    X(cuMemcpyAsync, cuMemcpyAsync)                                         \
    X(cuMemcpyHtoD, cuMemcpyHtoD_v2)                                        \
    X(cuMemcpyDtoH, cuMemcpyDtoH_v2)                                        \
    X(cuMemcpyDtoD, cuMemcpyDtoD_v2)                                        \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2)                              \
    X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2)                              \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2)                              \
    X(cuMemsetD8, cuMemsetD8_v2)                                            \
    X(cuMemsetD8Async, cuMemsetD8Async)                                     \
    X(cuStreamCreateWithPriority, cuStreamCreateWithPriority)               \
    X(cuStreamDestroy, cuStreamDestroy_v2)                                  \
    X(cuStreamSynchronize, cuStreamSynchronize)                             \
    X(cuStreamQuery, cuStreamQuery)                                         \
    X(cuStreamWaitEvent, cuStreamWaitEvent)                                 \
    X(cuStreamGetFlags, cuStreamGetFlags)                                   \
    X(cuStreamGetPriority, cuStreamGetPriority)                             \
    X(cuStreamGetId, cuStreamGetId)                                         \
    X(cuStreamGetDevice, cuStreamGetDevice)                                 \
    X(cuLaunchHostFunc, cuLaunchHostFunc)                                   \
    X(cuStreamIsCapturing, cuStreamIsCapturing)                             \
    X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode) \
    X(cuStreamBeginCapture, cuStreamBeginCapture_v2)                        \
    X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph)             \
    X(cuStreamEndCapture, cuStreamEndCapture)                               \
    X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3)                    \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags)             \
    X(cuGraphLaunch, cuGraphLaunch)                                         \
    X(cuGraphExecDestroy, cuGraphExecDestroy)                               \
    X(cuGraphDestroy, cuGraphDestroy)                                       \
    X(cuGraphExecUpdate, cuGraphExecUpdate_v2)                              \
    X(cuGraphNodeSetEnabled, cuGraphNodeSetEnabled)                         \
    X(cuGraphGetNodes, cuGraphGetNodes)                                     \
    X(cuGraphCreate, cuGraphCreate)                                         \
    X(cuGraphAddKernelNode, cuGraphAddKernelNode_v2)                        \
    X(cuGraphKernelNodeSetParams, cuGraphKernelNodeSetParams_v2)            \
    X(cuGraphAddMemsetNode, cuGraphAddMemsetNode)                           \
    X(cuGraphAddMemcpyNode, cuGraphAddMemcpyNode)                           \
    X(cuGraphAddEmptyNode, cuGraphAddEmptyNode)                             \
    X(cuGraphAddChildGraphNode, cuGraphAddChildGraphNode)                   \
    X(cuGraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph)         \
    X(cuGraphMemsetNodeSetParams, cuGraphMemsetNodeSetParams)               \
    X(cuGraphMemcpyNodeSetParams, cuGraphMemcpyNodeSetParams)               \
    X(cuGraphExecKernelNodeSetParams, cuGraphExecKernelNodeSetParams_v2)    \
    X(cuGraphExecMemsetNodeSetParams, cuGraphExecMemsetNodeSetParams)       \
    X(cuGraphExecMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams)       \
    X(cuGraphExecChildGraphNodeSetParams, cuGraphExecChildGraphNodeSetParams) \
    X(cuEventCreate, cuEventCreate)                                         \
    X(cuEventRecord, cuEventRecord)                                         \
    X(cuEventRecordWithFlags, cuEventRecordWithFlags)                       \
    X(cuEventQuery, cuEventQuery)                                           \
    X(cuEventSynchronize, cuEventSynchronize)                               \
    X(cuEventElapsedTime, cuEventElapsedTime_v2)                            \
    X(cuEventDestroy, cuEventDestroy_v2)                                    \
    X(cuLaunchKernel, cuLaunchKernel)                                       \
    X(cuLaunchKernelEx, cuLaunchKernelEx)                                   \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel)                 \
    X(cuKernelGetAttribute, cuKernelGetAttribute)

static struct {
#define X(base, sym) __typeof__(sym) *base;
    RT_DRIVER(X)
#undef X
} D;

static const simcu_rt_table_t *P;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static cudaError_t g_init_error;

static void rt_log(const char *msg)
{
    char buf[256];
    int n = snprintf(buf, sizeof buf, "simcuda runtime: %s\n", msg);
    if (n > 0) {
        ssize_t w = write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
        (void)w;
    }
}

static void init_once(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        rt_log("cannot load libcuda.so.1");
        g_init_error = cudaErrorInsufficientDriver;
        return;
    }
    __typeof__(cuGetProcAddress_v2) *gpa = (__typeof__(cuGetProcAddress_v2) *)dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        rt_log("libcuda.so.1 has no cuGetProcAddress_v2");
        g_init_error = cudaErrorInsufficientDriver;
        return;
    }
    CUdriverProcAddressQueryResult st;
#define X(base, sym)                                                                 \
    if (gpa(#base, (void **)&D.base, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS) { \
        rt_log("the driver lacks " #base);                                           \
        g_init_error = cudaErrorInsufficientDriver;                                  \
        return;                                                                      \
    }
    RT_DRIVER(X)
#undef X
    static const CUuuid id = SIMCU_RT_TABLE_UUID;
    const void *tab = NULL;
    if (D.cuGetExportTable(&tab, &id) != CUDA_SUCCESS || !tab ||
        ((const simcu_rt_table_t *)tab)->size < sizeof(simcu_rt_table_t)) {
        rt_log("the driver is not the simulated one");
        g_init_error = cudaErrorInsufficientDriver;
        return;
    }
    P = tab;
}

/* The device itself starts at the first runtime call, not at load or kernel
 * registration (nvcc's registration runs in constructors, before main and before any
 * FTSIM_ variable a test sets). */
static pthread_once_t g_dev_once = PTHREAD_ONCE_INIT;

static void init_device_once(void)
{
    pthread_once(&g_once, init_once);
    if (g_init_error != cudaSuccess)
        return;
    CUresult r = D.cuInit(0);
    if (r != CUDA_SUCCESS)
        g_init_error = r == CUDA_ERROR_NO_DEVICE ? cudaErrorNoDevice : cudaErrorInitializationError;
}

/* ------------------------------------------------------------------ call frame */

/* Per-thread runtime state, as the real runtime keeps it. */
static __thread int t_device;
static __thread cudaError_t t_last;

enum { RT_CTX = 0x100 };  /* the call needs the current device's primary context */

static cudaError_t from_cu(CUresult r)
{
    /* The runtime codes the simulator can produce share the driver's numbers. */
    return (cudaError_t)r;
}

static cudaError_t rt_enter(simcu_call_t *c, CUpti_CallbackId cbid, const char *name, const void *params,
                            const char *symbol, cudaError_t *retp, unsigned flags)
{
    c->fired = c->entered = 0;
    pthread_once(&g_dev_once, init_device_once);
    if (g_init_error != cudaSuccess)
        return g_init_error;
    if (flags & RT_CTX) {
        CUresult r = P->use_device(t_device);
        if (r != CUDA_SUCCESS)
            return from_cu(r);
    }
    return from_cu(P->api_enter(c, CUPTI_CB_DOMAIN_RUNTIME_API, cbid, name, params, symbol, retp,
                                flags & ~(unsigned)RT_CTX));
}

static cudaError_t rt_exit(simcu_call_t *c, cudaError_t e)
{
    if (P)
        P->api_exit(c);
    if (e != cudaSuccess && e != cudaErrorNotReady)
        t_last = e;
    return e;
}

#define RT_CBID(suffix) CUPTI_RUNTIME_TRACE_CBID_##suffix

/* ------------------------------------------------------------------ extension */

RT_EXPORT int simcudaRegisterKernel(const void *stub, const simcuda_kernel_desc_t *desc)
{
    pthread_once(&g_once, init_once);
    if (g_init_error != cudaSuccess)
        return g_init_error;
    return P->register_kernel(stub, desc, NULL);
}

RT_EXPORT int simcudaRegisterKernelEx(const void *stub, const simcuda_kernel_desc_t *desc,
                                      const size_t param_align[SIMCUDA_MAX_PARAMS])
{
    pthread_once(&g_once, init_once);
    if (g_init_error != cudaSuccess)
        return g_init_error;
    return P->register_kernel(stub, desc, param_align);
}

/* ------------------------------------------------------------------ device */

RT_EXPORT cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
    cudaGetDeviceCount_v3020_params p = {count};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetDeviceCount_v3020), "cudaGetDeviceCount", &p, NULL, &e, 0);
    if (e == cudaSuccess) {
        if (!count)
            e = cudaErrorInvalidValue;
        else
            *count = P->device_count();
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaSetDevice(int device)
{
    cudaSetDevice_v3020_params p = {device};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaSetDevice_v3020), "cudaSetDevice", &p, NULL, &e, 0);
    if (e == cudaSuccess) {
        if (device < 0 || device >= P->device_count()) {
            e = cudaErrorInvalidDevice;
        } else {
            t_device = device;
            e = from_cu(P->use_device(device));
        }
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
{
    cudaInitDevice_v12000_params p = {device, deviceFlags, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaInitDevice_v12000), "cudaInitDevice", &p, NULL, &e, 0);
    if (e == cudaSuccess) {
        if (device < 0 || device >= P->device_count())
            e = cudaErrorInvalidDevice;
        else
            e = from_cu(P->use_device(device));
        P->use_device(t_device);
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
    cudaGetDevice_v3020_params p = {device};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetDevice_v3020), "cudaGetDevice", &p, NULL, &e, 0);
    if (e == cudaSuccess) {
        if (!device)
            e = cudaErrorInvalidValue;
        else
            *device = t_device;
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaSetDeviceFlags(unsigned int flags)
{
    cudaSetDeviceFlags_v3020_params p = {flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaSetDeviceFlags_v3020), "cudaSetDeviceFlags", &p, NULL, &e, RT_CTX);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGetDeviceFlags(unsigned int *flags)
{
    cudaGetDeviceFlags_v7000_params p = {flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetDeviceFlags_v7000), "cudaGetDeviceFlags", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess) {
        if (!flags)
            e = cudaErrorInvalidValue;
        else
            *flags = cudaDeviceMapHost;
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    cudaDeviceGetAttribute_v5000_params p = {value, attr, device};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaDeviceGetAttribute_v5000), "cudaDeviceGetAttribute", &p, NULL, &e, 0);
    if (e == cudaSuccess) {
        /* cudaDevAttr* and CU_DEVICE_ATTRIBUTE_* share their values. */
        e = from_cu(D.cuDeviceGetAttribute(value, (CUdevice_attribute)attr, device));
    }
    return rt_exit(&c, e);
}

static int attr(CUdevice_attribute a, int dev)
{
    int v = 0;
    D.cuDeviceGetAttribute(&v, a, dev);
    return v;
}

RT_EXPORT cudaError_t CUDARTAPI cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    cudaGetDeviceProperties_v12000_params p = {prop, device};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetDeviceProperties_v12000), "cudaGetDeviceProperties", &p, NULL, &e, 0);
    if (e == cudaSuccess && !prop)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess && (device < 0 || device >= P->device_count()))
        e = cudaErrorInvalidDevice;
    if (e == cudaSuccess) {
        memset(prop, 0, sizeof *prop);
        D.cuDeviceGetName(prop->name, sizeof prop->name, device);
        D.cuDeviceGetUuid((CUuuid *)&prop->uuid, device);
        D.cuDeviceTotalMem(&prop->totalGlobalMem, device);
        prop->sharedMemPerBlock = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, device);
        prop->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, device);
        prop->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE, device);
        prop->memPitch = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH, device);
        prop->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, device);
        prop->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, device);
        prop->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, device);
        prop->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, device);
        prop->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, device);
        prop->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, device);
        prop->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, device);
        prop->totalConstMem = (size_t)attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, device);
        prop->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
        prop->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
        prop->textureAlignment = (size_t)attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, device);
        prop->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
        prop->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device);
        prop->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, device);
        prop->ECCEnabled = attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED, device);
        prop->pciBusID = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, device);
        prop->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, device);
        prop->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, device);
        prop->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, device);
        prop->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device);
        prop->persistingL2CacheMaxSize = attr(CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, device);
        prop->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, device);
        prop->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, device);
        prop->globalL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, device);
        prop->localL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, device);
        prop->sharedMemPerMultiprocessor =
            (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, device);
        prop->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, device);
        prop->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, device);
        prop->concurrentManagedAccess = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, device);
        prop->computePreemptionSupported = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, device);
        prop->cooperativeLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, device);
        prop->sharedMemPerBlockOptin = (size_t)attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device);
        prop->maxBlocksPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, device);
        prop->accessPolicyMaxWindowSize = attr(CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, device);
        prop->reservedSharedMemPerBlock = (size_t)attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, device);
        prop->hostRegisterSupported = attr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, device);
        prop->hostRegisterReadOnlySupported = attr(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, device);
        prop->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device);
        prop->memoryPoolSupportedHandleTypes =
            (unsigned)attr(CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, device);
        prop->clusterLaunch = attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, device);
        prop->unifiedFunctionPointers = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS, device);
        prop->deviceNumaId = -1;
        prop->hostNumaId = -1;
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaDeviceSynchronize_v3020), "cudaDeviceSynchronize", NULL, NULL, &e,
                 RT_CTX | SIMCU_CALL_SYNC);
    if (e == cudaSuccess)
        e = from_cu(D.cuCtxSynchronize());
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaDeviceReset(void)
{
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaDeviceReset_v3020), "cudaDeviceReset", NULL, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuDevicePrimaryCtxReset(t_device));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    cudaDeviceGetStreamPriorityRange_v5050_params p = {leastPriority, greatestPriority};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaDeviceGetStreamPriorityRange_v5050), "cudaDeviceGetStreamPriorityRange", &p,
                 NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuCtxGetStreamPriorityRange(leastPriority, greatestPriority));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    cudaDeviceCanAccessPeer_v4000_params p = {canAccessPeer, device, peerDevice};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaDeviceCanAccessPeer_v4000), "cudaDeviceCanAccessPeer", &p, NULL, &e, 0);
    if (e == cudaSuccess) {
        int n = P->device_count();
        if (!canAccessPeer)
            e = cudaErrorInvalidValue;
        else if (device < 0 || device >= n || peerDevice < 0 || peerDevice >= n)
            e = cudaErrorInvalidDevice;
        else
            *canAccessPeer = P->peer_access(device, peerDevice);
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion)
{
    cudaDriverGetVersion_v3020_params p = {driverVersion};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaDriverGetVersion_v3020), "cudaDriverGetVersion", &p, NULL, &e, 0);
    if (e == cudaSuccess)
        e = from_cu(D.cuDriverGetVersion(driverVersion));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion)
{
    cudaRuntimeGetVersion_v3020_params p = {runtimeVersion};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaRuntimeGetVersion_v3020), "cudaRuntimeGetVersion", &p, NULL, &e, 0);
    if (e == cudaSuccess) {
        if (!runtimeVersion)
            e = cudaErrorInvalidValue;
        else
            *runtimeVersion = 13000;
    }
    return rt_exit(&c, e);
}

/* ------------------------------------------------------------------ errors */

RT_EXPORT cudaError_t CUDARTAPI cudaGetLastError(void)
{
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetLastError_v3020), "cudaGetLastError", NULL, NULL, &e, 0);
    if (e == cudaSuccess) {
        /* A sticky context error is returned every time; others once. */
        cudaError_t sticky = from_cu(P->sticky_error());
        e = sticky != cudaSuccess ? sticky : t_last;
        t_last = cudaSuccess;
    }
    P ? P->api_exit(&c) : (void)0;
    return e;
}

RT_EXPORT cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaPeekAtLastError_v3020), "cudaPeekAtLastError", NULL, NULL, &e, 0);
    if (e == cudaSuccess) {
        cudaError_t sticky = from_cu(P->sticky_error());
        e = sticky != cudaSuccess ? sticky : t_last;
    }
    P ? P->api_exit(&c) : (void)0;
    return e;
}

#define RT_ERRORS(X)                                                                          \
    X(cudaSuccess, "no error")                                                                \
    X(cudaErrorInvalidValue, "invalid argument")                                              \
    X(cudaErrorMemoryAllocation, "out of memory")                                             \
    X(cudaErrorInitializationError, "initialization error")                                   \
    X(cudaErrorCudartUnloading, "driver shutting down")                                       \
    X(cudaErrorInvalidConfiguration, "invalid configuration argument")                        \
    X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                   \
    X(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version") \
    X(cudaErrorInvalidDeviceFunction, "invalid device function")                              \
    X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                \
    X(cudaErrorInvalidDevice, "invalid device ordinal")                                       \
    X(cudaErrorDeviceUninitialized, "invalid device context")                                 \
    X(cudaErrorAlreadyMapped, "resource already mapped")                                      \
    X(cudaErrorNotMapped, "resource not mapped")                                              \
    X(cudaErrorInvalidResourceHandle, "invalid resource handle")                              \
    X(cudaErrorSymbolNotFound, "named symbol not found")                                      \
    X(cudaErrorNotReady, "device not ready")                                                  \
    X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                    \
    X(cudaErrorLaunchOutOfResources, "too many resources requested for launch")               \
    X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
    X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region") \
    X(cudaErrorLaunchFailure, "unspecified launch failure")                                   \
    X(cudaErrorNotPermitted, "operation not permitted")                                       \
    X(cudaErrorNotSupported, "operation not supported")                                       \
    X(cudaErrorIllegalState, "the operation cannot be performed in the present state")        \
    X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")  \
    X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture") \
    X(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences") \
    X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began") \
    X(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work")                   \
    X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream") \
    X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
    X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream") \
    X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread") \
    X(cudaErrorUnknown, "unknown error")

RT_EXPORT const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
    switch (error) {
#define X(code, str) case code: return str;
        RT_ERRORS(X)
#undef X
    default:
        return "unrecognized error code";
    }
}

RT_EXPORT const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
    switch (error) {
#define X(code, str) case code: return #code;
        RT_ERRORS(X)
#undef X
    default:
        return "cudaErrorUnknown";
    }
}

/* ------------------------------------------------------------------ memory */

RT_EXPORT cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
    cudaMalloc_v3020_params p = {devPtr, size};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMalloc_v3020), "cudaMalloc", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess) {
        if (!devPtr)
            e = cudaErrorInvalidValue;
        else if (size == 0)
            ;  /* as measured on the H200: success, *devPtr left as it was */
        else
            e = from_cu(D.cuMemAlloc((CUdeviceptr *)devPtr, size));
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
    cudaFree_v3020_params p = {devPtr};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaFree_v3020), "cudaFree", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess && devPtr)
        e = from_cu(D.cuMemFree((CUdeviceptr)devPtr));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMemGetInfo(size_t *free, size_t *total)
{
    cudaMemGetInfo_v3020_params p = {free, total};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMemGetInfo_v3020), "cudaMemGetInfo", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemGetInfo(free, total));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMallocHost(void **ptr, size_t size)
{
    cudaMallocHost_v3020_params p = {ptr, size};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMallocHost_v3020), "cudaMallocHost", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemAllocHost(ptr, size));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    cudaHostAlloc_v3020_params p = {pHost, size, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaHostAlloc_v3020), "cudaHostAlloc", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemHostAlloc(pHost, size, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaFreeHost(void *ptr)
{
    cudaFreeHost_v3020_params p = {ptr};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaFreeHost_v3020), "cudaFreeHost", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess && ptr)
        e = from_cu(D.cuMemFreeHost(ptr));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    cudaHostRegister_v4000_params p = {ptr, size, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaHostRegister_v4000), "cudaHostRegister", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemHostRegister(ptr, size, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaHostUnregister(void *ptr)
{
    cudaHostUnregister_v4000_params p = {ptr};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaHostUnregister_v4000), "cudaHostUnregister", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemHostUnregister(ptr));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    cudaHostGetDevicePointer_v3020_params p = {pDevice, pHost, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaHostGetDevicePointer_v3020), "cudaHostGetDevicePointer", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemHostGetDevicePointer((CUdeviceptr *)pDevice, pHost, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    cudaPointerGetAttributes_v4000_params p = {attributes, ptr};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaPointerGetAttributes_v4000), "cudaPointerGetAttributes", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess && !attributes)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess) {
        unsigned int type = 0;
        int ordinal = -2;
        CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
        void *data[] = {&type, &ordinal};
        e = from_cu(D.cuPointerGetAttributes(2, which, data, (CUdeviceptr)ptr));
        memset(attributes, 0, sizeof *attributes);
        if (e == cudaSuccess) {
            if (type == CU_MEMORYTYPE_DEVICE) {
                attributes->type = cudaMemoryTypeDevice;
                attributes->device = ordinal;
                attributes->devicePointer = (void *)ptr;
            } else if (type == CU_MEMORYTYPE_HOST) {
                attributes->type = cudaMemoryTypeHost;
                attributes->device = ordinal;
                attributes->devicePointer = (void *)ptr;
                attributes->hostPointer = (void *)ptr;
            } else {
                /* Memory CUDA does not know: success, "unregistered". */
                attributes->type = cudaMemoryTypeUnregistered;
                attributes->device = -2;
                attributes->hostPointer = (void *)ptr;
            }
        }
    }
    return rt_exit(&c, e);
}

static cudaError_t memcpy_impl(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                               cudaStream_t stream, int async)
{
    CUdeviceptr d = (CUdeviceptr)dst, s = (CUdeviceptr)src;
    CUstream st = (CUstream)stream;
    switch (kind) {
    case cudaMemcpyHostToDevice:
        return from_cu(async ? D.cuMemcpyHtoDAsync(d, src, count, st) : D.cuMemcpyHtoD(d, src, count));
    case cudaMemcpyDeviceToHost:
        return from_cu(async ? D.cuMemcpyDtoHAsync(dst, s, count, st) : D.cuMemcpyDtoH(dst, s, count));
    case cudaMemcpyDeviceToDevice:
        return from_cu(async ? D.cuMemcpyDtoDAsync(d, s, count, st) : D.cuMemcpyDtoD(d, s, count));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
        return from_cu(async ? D.cuMemcpyAsync(d, s, count, st) : D.cuMemcpy(d, s, count));
    default:
        return cudaErrorInvalidMemcpyDirection;
    }
}

RT_EXPORT cudaError_t CUDARTAPI cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    cudaMemcpy_v3020_params p = {dst, src, count, kind};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMemcpy_v3020), "cudaMemcpy", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = memcpy_impl(dst, src, count, kind, NULL, 0);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                                cudaStream_t stream)
{
    cudaMemcpyAsync_v3020_params p = {dst, src, count, kind, stream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMemcpyAsync_v3020), "cudaMemcpyAsync", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = memcpy_impl(dst, src, count, kind, stream, 1);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMemset(void *devPtr, int value, size_t count)
{
    cudaMemset_v3020_params p = {devPtr, value, count};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMemset_v3020), "cudaMemset", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemsetD8((CUdeviceptr)devPtr, (unsigned char)value, count));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    cudaMemsetAsync_v3020_params p = {devPtr, value, count, stream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMemsetAsync_v3020), "cudaMemsetAsync", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemsetD8Async((CUdeviceptr)devPtr, (unsigned char)value, count, (CUstream)stream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    cudaMallocAsync_v11020_params p = {devPtr, size, hStream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMallocAsync_v11020), "cudaMallocAsync", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemAllocAsync((CUdeviceptr *)devPtr, size, (CUstream)hStream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                                        cudaStream_t stream)
{
    cudaMallocFromPoolAsync_v11020_params p = {ptr, size, memPool, stream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMallocFromPoolAsync_v11020), "cudaMallocFromPoolAsync", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemAllocFromPoolAsync((CUdeviceptr *)ptr, size, (CUmemoryPool)memPool, (CUstream)stream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    cudaFreeAsync_v11020_params p = {devPtr, hStream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaFreeAsync_v11020), "cudaFreeAsync", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess && devPtr)
        e = from_cu(D.cuMemFreeAsync((CUdeviceptr)devPtr, (CUstream)hStream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    cudaDeviceGetDefaultMemPool_v11020_params p = {memPool, device};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaDeviceGetDefaultMemPool_v11020), "cudaDeviceGetDefaultMemPool", &p, NULL, &e, 0);
    if (e == cudaSuccess)
        e = from_cu(D.cuDeviceGetDefaultMemPool((CUmemoryPool *)memPool, device));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    cudaDeviceGetMemPool_v11020_params p = {memPool, device};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaDeviceGetMemPool_v11020), "cudaDeviceGetMemPool", &p, NULL, &e, 0);
    if (e == cudaSuccess)
        e = from_cu(D.cuDeviceGetMemPool((CUmemoryPool *)memPool, device));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaMemPoolSetAttribute_v11020_params p = {memPool, attr, value};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMemPoolSetAttribute_v11020), "cudaMemPoolSetAttribute", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemPoolSetAttribute((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaMemPoolGetAttribute_v11020_params p = {memPool, attr, value};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMemPoolGetAttribute_v11020), "cudaMemPoolGetAttribute", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemPoolGetAttribute((CUmemoryPool)memPool, (CUmemPool_attribute)attr, value));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    cudaMemPoolTrimTo_v11020_params p = {memPool, minBytesToKeep};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaMemPoolTrimTo_v11020), "cudaMemPoolTrimTo", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuMemPoolTrimTo((CUmemoryPool)memPool, minBytesToKeep));
    return rt_exit(&c, e);
}

/* ------------------------------------------------------------------ streams */

static cudaError_t stream_create(cudaStream_t *s, unsigned flags, int prio)
{
    if (!s)
        return cudaErrorInvalidValue;
    return from_cu(D.cuStreamCreateWithPriority((CUstream *)s, flags, prio));
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
    cudaStreamCreate_v3020_params p = {pStream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamCreate_v3020), "cudaStreamCreate", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = stream_create(pStream, 0, 0);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    cudaStreamCreateWithFlags_v5000_params p = {pStream, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamCreateWithFlags_v5000), "cudaStreamCreateWithFlags", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = stream_create(pStream, flags, 0);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    cudaStreamCreateWithPriority_v5050_params p = {pStream, flags, priority};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamCreateWithPriority_v5050), "cudaStreamCreateWithPriority", &p, NULL, &e,
                 RT_CTX);
    if (e == cudaSuccess)
        e = stream_create(pStream, flags, priority);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
    cudaStreamDestroy_v5050_params p = {stream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamDestroy_v5050), "cudaStreamDestroy", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamDestroy((CUstream)stream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
    cudaStreamSynchronize_v3020_params p = {stream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamSynchronize_v3020), "cudaStreamSynchronize", &p, NULL, &e,
                 RT_CTX | SIMCU_CALL_SYNC);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamSynchronize((CUstream)stream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream)
{
    cudaStreamQuery_v3020_params p = {stream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamQuery_v3020), "cudaStreamQuery", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamQuery((CUstream)stream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    cudaStreamWaitEvent_v3020_params p = {stream, event, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamWaitEvent_v3020), "cudaStreamWaitEvent", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamWaitEvent((CUstream)stream, (CUevent)event, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags)
{
    cudaStreamGetFlags_v5050_params p = {hStream, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamGetFlags_v5050), "cudaStreamGetFlags", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamGetFlags((CUstream)hStream, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    cudaStreamGetPriority_v5050_params p = {hStream, priority};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamGetPriority_v5050), "cudaStreamGetPriority", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamGetPriority((CUstream)hStream, priority));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId)
{
    cudaStreamGetId_v12000_params p = {hStream, streamId};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamGetId_v12000), "cudaStreamGetId", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamGetId((CUstream)hStream, streamId));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamGetDevice(cudaStream_t hStream, int *device)
{
    cudaStreamGetDevice_v12080_params p = {hStream, device};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamGetDevice_v12080), "cudaStreamGetDevice", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamGetDevice((CUstream)hStream, device));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    cudaLaunchHostFunc_v10000_params p = {stream, fn, userData};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaLaunchHostFunc_v10000), "cudaLaunchHostFunc", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuLaunchHostFunc((CUstream)stream, (CUhostFn)fn, userData));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    cudaStreamIsCapturing_v10000_params p = {stream, pCaptureStatus};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamIsCapturing_v10000), "cudaStreamIsCapturing", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamIsCapturing((CUstream)stream, (CUstreamCaptureStatus *)pCaptureStatus));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    cudaThreadExchangeStreamCaptureMode_v10010_params p = {mode};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaThreadExchangeStreamCaptureMode_v10010), "cudaThreadExchangeStreamCaptureMode", &p,
                 NULL, &e, 0);
    if (e == cudaSuccess)
        e = from_cu(D.cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)mode));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    cudaStreamBeginCapture_v10000_params p = {stream, mode};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamBeginCapture_v10000), "cudaStreamBeginCapture", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamBeginCapture((CUstream)stream, (CUstreamCaptureMode)mode));
    return rt_exit(&c, e);
}

/* cudaGraphEdgeData has the driver's layout. */
RT_EXPORT cudaError_t CUDARTAPI cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                              const cudaGraphNode_t *dependencies,
                                                              const cudaGraphEdgeData *dependencyData,
                                                              size_t numDependencies, enum cudaStreamCaptureMode mode)
{
    cudaStreamBeginCaptureToGraph_v12030_params p = {stream, graph, dependencies, dependencyData, numDependencies,
                                                     mode};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamBeginCaptureToGraph_v12030), "cudaStreamBeginCaptureToGraph", &p, NULL, &e,
                 RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamBeginCaptureToGraph((CUstream)stream, (CUgraph)graph, (const CUgraphNode *)dependencies,
                                                  (const CUgraphEdgeData *)dependencyData, numDependencies,
                                                  (CUstreamCaptureMode)mode));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    cudaStreamEndCapture_v10000_params p = {stream, pGraph};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamEndCapture_v10000), "cudaStreamEndCapture", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamEndCapture((CUstream)stream, (CUgraph *)pGraph));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaStreamGetCaptureInfo(cudaStream_t stream,
                                                         enum cudaStreamCaptureStatus *captureStatus_out,
                                                         unsigned long long *id_out, cudaGraph_t *graph_out,
                                                         const cudaGraphNode_t **dependencies_out,
                                                         const cudaGraphEdgeData **edgeData_out,
                                                         size_t *numDependencies_out)
{
    cudaStreamGetCaptureInfo_v12030_params p = {stream, captureStatus_out, id_out, graph_out, dependencies_out,
                                                edgeData_out, numDependencies_out};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaStreamGetCaptureInfo_v12030), "cudaStreamGetCaptureInfo", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuStreamGetCaptureInfo((CUstream)stream, (CUstreamCaptureStatus *)captureStatus_out,
                                             (cuuint64_t *)id_out, (CUgraph *)graph_out,
                                             (const CUgraphNode **)dependencies_out,
                                             (const CUgraphEdgeData **)edgeData_out, numDependencies_out));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                     unsigned long long flags)
{
    cudaGraphInstantiate_v12000_params p = {pGraphExec, graph, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphInstantiate_v12000), "cudaGraphInstantiate", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                              unsigned long long flags)
{
    cudaGraphInstantiateWithFlags_v11040_params p = {pGraphExec, graph, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphInstantiateWithFlags_v11040), "cudaGraphInstantiateWithFlags", &p, NULL, &e,
                 RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    cudaGraphLaunch_v10000_params p = {graphExec, stream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphLaunch_v10000), "cudaGraphLaunch", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphLaunch((CUgraphExec)graphExec, (CUstream)stream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                                    cudaGraphExecUpdateResultInfo *resultInfo)
{
    cudaGraphExecUpdate_v10020_params p = {hGraphExec, hGraph, resultInfo};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphExecUpdate_v10020), "cudaGraphExecUpdate", &p, NULL, &e, RT_CTX);
    /* The runtime's result info has the driver's layout. */
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphExecUpdate((CUgraphExec)hGraphExec, (CUgraph)hGraph,
                                        (CUgraphExecUpdateResultInfo *)resultInfo));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                        unsigned int isEnabled)
{
    cudaGraphNodeSetEnabled_v11060_params p = {hGraphExec, hNode, isEnabled};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphNodeSetEnabled_v11060), "cudaGraphNodeSetEnabled", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphNodeSetEnabled((CUgraphExec)hGraphExec, (CUgraphNode)hNode, isEnabled));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
    cudaGraphGetNodes_v10000_params p = {graph, nodes, numNodes};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphGetNodes_v10000), "cudaGraphGetNodes", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphGetNodes((CUgraph)graph, (CUgraphNode *)nodes, numNodes));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    cudaGraphExecDestroy_v10000_params p = {graphExec};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphExecDestroy_v10000), "cudaGraphExecDestroy", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphExecDestroy((CUgraphExec)graphExec));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
    cudaGraphDestroy_v10000_params p = {graph};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphDestroy_v10000), "cudaGraphDestroy", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphDestroy((CUgraph)graph));
    return rt_exit(&c, e);
}

/* ------------------------------------------------------------------ events */

RT_EXPORT cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t *event)
{
    cudaEventCreate_v3020_params p = {event};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaEventCreate_v3020), "cudaEventCreate", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuEventCreate((CUevent *)event, 0));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    cudaEventCreateWithFlags_v3020_params p = {event, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaEventCreateWithFlags_v3020), "cudaEventCreateWithFlags", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuEventCreate((CUevent *)event, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    cudaEventRecord_v3020_params p = {event, stream};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaEventRecord_v3020), "cudaEventRecord", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuEventRecord((CUevent)event, (CUstream)stream));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    cudaEventRecordWithFlags_v11010_params p = {event, stream, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaEventRecordWithFlags_v11010), "cudaEventRecordWithFlags", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuEventRecordWithFlags((CUevent)event, (CUstream)stream, flags));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event)
{
    cudaEventQuery_v3020_params p = {event};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaEventQuery_v3020), "cudaEventQuery", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuEventQuery((CUevent)event));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event)
{
    cudaEventSynchronize_v3020_params p = {event};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaEventSynchronize_v3020), "cudaEventSynchronize", &p, NULL, &e,
                 RT_CTX | SIMCU_CALL_SYNC);
    if (e == cudaSuccess)
        e = from_cu(D.cuEventSynchronize((CUevent)event));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    cudaEventElapsedTime_v12080_params p = {ms, start, end};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaEventElapsedTime_v12080), "cudaEventElapsedTime", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuEventElapsedTime(ms, (CUevent)start, (CUevent)end));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event)
{
    cudaEventDestroy_v3020_params p = {event};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaEventDestroy_v3020), "cudaEventDestroy", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuEventDestroy((CUevent)event));
    return rt_exit(&c, e);
}

/* ------------------------------------------------------------------ kernels */

/* The meta header has no params structs for the CUDA 13 entry points below; these
 * mirror their prototypes (what CUPTI's functionParams points at). */
typedef struct { cudaKernel_t *kernel; const void *entryFuncAddr; } simcu___cudaGetKernel_params;
typedef struct {
    cudaKernel_t kernel;
    dim3 gridDim;
    dim3 blockDim;
    void **args;
    size_t sharedMem;
    cudaStream_t stream;
} simcu___cudaLaunchKernel_params;

static cudaError_t kernel_of_stub(const void *stub, CUkernel *out)
{
    CUkernel k = stub ? P->kernel_by_stub(stub) : NULL;
    if (!k)
        return cudaErrorInvalidDeviceFunction;
    *out = k;
    return cudaSuccess;
}

static cudaError_t launch(CUkernel k, dim3 g, dim3 b, void **args, size_t smem, cudaStream_t s)
{
    if (smem > 0xffffffffu)
        return cudaErrorInvalidValue;
    return from_cu(D.cuLaunchKernel((CUfunction)k, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem,
                                    (CUstream)s, args, NULL));
}

static cudaError_t launch_kernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                 cudaStream_t stream)
{
    cudaLaunchKernel_v7000_params p = {func, gridDim, blockDim, args, sharedMem, stream};
    simcu_call_t c;
    cudaError_t e;
    CUkernel k = NULL;
    pthread_once(&g_once, init_once);
    if (P)
        k = P->kernel_by_stub(func);
    e = rt_enter(&c, RT_CBID(cudaLaunchKernel_v7000), "cudaLaunchKernel", &p, P ? P->kernel_name(k) : NULL, &e,
                 RT_CTX);
    if (e == cudaSuccess)
        e = kernel_of_stub(func, &k);
    if (e == cudaSuccess)
        e = launch(k, gridDim, blockDim, args, sharedMem, stream);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                                 size_t sharedMem, cudaStream_t stream)
{
    return launch_kernel(func, gridDim, blockDim, args, sharedMem, stream);
}

/* cudaLaunchKernel as a library that links its own copy of the runtime makes it (cuBLAS
 * links cudart statically): the same runtime call, under an exported name a preloaded
 * interposer does not know, so that it sees only the driver's cuLaunchKernel, made
 * while this runtime call is open (CUPTI's runtime record and callbacks as for
 * cudaLaunchKernel). For tests: model --static-rt. */
RT_EXPORT cudaError_t CUDARTAPI simcudaStaticLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                                          size_t sharedMem, cudaStream_t stream)
{
    return launch_kernel(func, gridDim, blockDim, args, sharedMem, stream);
}

RT_EXPORT cudaError_t CUDARTAPI cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                                            void **args, size_t sharedMem, cudaStream_t stream)
{
    cudaLaunchCooperativeKernel_v9000_params p = {func, gridDim, blockDim, args, sharedMem, stream};
    simcu_call_t c;
    cudaError_t e;
    CUkernel k = NULL;
    pthread_once(&g_once, init_once);
    if (P)
        k = P->kernel_by_stub(func);
    e = rt_enter(&c, RT_CBID(cudaLaunchCooperativeKernel_v9000), "cudaLaunchCooperativeKernel", &p,
                 P ? P->kernel_name(k) : NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = kernel_of_stub(func, &k);
    if (e == cudaSuccess) {
        if (sharedMem > 0xffffffffu)
            e = cudaErrorInvalidValue;
        else
            e = from_cu(D.cuLaunchCooperativeKernel((CUfunction)k, gridDim.x, gridDim.y, gridDim.z, blockDim.x,
                                                    blockDim.y, blockDim.z, (unsigned)sharedMem,
                                                    (CUstream)stream, args));
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    cudaLaunchKernelExC_v11060_params p = {config, func, args};
    simcu_call_t c;
    cudaError_t e;
    CUkernel k = NULL;
    pthread_once(&g_once, init_once);
    if (P)
        k = P->kernel_by_stub(func);
    e = rt_enter(&c, RT_CBID(cudaLaunchKernelExC_v11060), "cudaLaunchKernelExC", &p, P ? P->kernel_name(k) : NULL,
                 &e, RT_CTX);
    if (e == cudaSuccess && !config)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = kernel_of_stub(func, &k);
    if (e == cudaSuccess) {
        /* cudaLaunchAttribute and CUlaunchAttribute share their layout. */
        CUlaunchConfig cfg = {config->gridDim.x, config->gridDim.y, config->gridDim.z,
                              config->blockDim.x, config->blockDim.y, config->blockDim.z,
                              (unsigned)config->dynamicSmemBytes, (CUstream)config->stream,
                              (CUlaunchAttribute *)config->attrs, config->numAttrs};
        e = from_cu(D.cuLaunchKernelEx(&cfg, (CUfunction)k, args, NULL));
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI __cudaGetKernel(cudaKernel_t *kernel, const void *entryFuncAddr)
{
    simcu___cudaGetKernel_params p = {kernel, entryFuncAddr};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(__cudaGetKernel_v13000), "__cudaGetKernel", &p, NULL, &e, 0);
    if (e == cudaSuccess)
        e = kernel ? kernel_of_stub(entryFuncAddr, (CUkernel *)kernel) : cudaErrorInvalidValue;
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
    cudaGetKernel_v12000_params p = {kernelPtr, entryFuncAddr};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetKernel_v12000), "cudaGetKernel", &p, NULL, &e, 0);
    if (e == cudaSuccess)
        e = kernelPtr ? kernel_of_stub(entryFuncAddr, (CUkernel *)kernelPtr) : cudaErrorInvalidValue;
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr)
{
    cudaGetFuncBySymbol_v11000_params p = {functionPtr, symbolPtr};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetFuncBySymbol_v11000), "cudaGetFuncBySymbol", &p, NULL, &e, 0);
    CUkernel k;
    if (e == cudaSuccess)
        e = functionPtr ? kernel_of_stub(symbolPtr, &k) : cudaErrorInvalidValue;
    if (e == cudaSuccess)
        *functionPtr = (cudaFunction_t)P->function_of(k);  /* a CUfunction, as on the H200 */
    return rt_exit(&c, e);
}

static cudaError_t launch_handle(CUpti_CallbackId cbid, const char *name, cudaKernel_t kernel, dim3 g, dim3 b,
                                 void **args, size_t smem, cudaStream_t stream)
{
    simcu___cudaLaunchKernel_params p = {kernel, g, b, args, smem, stream};
    simcu_call_t c;
    cudaError_t e;
    pthread_once(&g_once, init_once);
    e = rt_enter(&c, cbid, name, &p, P ? P->kernel_name(kernel) : NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = launch((CUkernel)kernel, g, b, args, smem, stream);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                                   size_t sharedMem, cudaStream_t stream)
{
    return launch_handle(RT_CBID(__cudaLaunchKernel_v13000), "__cudaLaunchKernel", kernel, gridDim, blockDim, args,
                         sharedMem, stream);
}

RT_EXPORT cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                        void **args, size_t sharedMem, cudaStream_t stream)
{
    /* Compiled with per-thread default stream: 0 means this thread's stream. */
    if (stream == NULL)
        stream = cudaStreamPerThread;
    return launch_handle(RT_CBID(__cudaLaunchKernel_ptsz_v13000), "__cudaLaunchKernel_ptsz", kernel, gridDim,
                         blockDim, args, sharedMem, stream);
}

RT_EXPORT cudaError_t CUDARTAPI cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    cudaFuncGetAttributes_v3020_params p = {attr, func};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaFuncGetAttributes_v3020), "cudaFuncGetAttributes", &p, NULL, &e, RT_CTX);
    CUkernel k = NULL;
    if (e == cudaSuccess)
        e = attr ? kernel_of_stub(func, &k) : cudaErrorInvalidValue;
    if (e == cudaSuccess) {
        memset(attr, 0, sizeof *attr);
        D.cuKernelGetAttribute(&attr->maxThreadsPerBlock, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 0);
        D.cuKernelGetAttribute(&attr->numRegs, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 0);
        D.cuKernelGetAttribute(&attr->ptxVersion, CU_FUNC_ATTRIBUTE_PTX_VERSION, k, 0);
        D.cuKernelGetAttribute(&attr->binaryVersion, CU_FUNC_ATTRIBUTE_BINARY_VERSION, k, 0);
        D.cuKernelGetAttribute(&attr->maxDynamicSharedSizeBytes, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                               k, 0);
    }
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    cudaFuncSetAttribute_v9000_params p = {func, attr, value};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaFuncSetAttribute_v9000), "cudaFuncSetAttribute", &p, NULL, &e, RT_CTX);
    CUkernel k;
    if (e == cudaSuccess)
        e = kernel_of_stub(func, &k);
    return rt_exit(&c, e);
}

/* ------------------------------------------------------------------ graphs built node by node */

RT_EXPORT cudaError_t CUDARTAPI cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
    cudaGraphCreate_v10000_params p = {pGraph, flags};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphCreate_v10000), "cudaGraphCreate", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphCreate((CUgraph *)pGraph, flags));
    return rt_exit(&c, e);
}

/* A runtime kernel node's parameters in the driver's form: func is the host stub, as
 * cudaLaunchKernel's. */
static cudaError_t kernel_node_params(const struct cudaKernelNodeParams *p, CUDA_KERNEL_NODE_PARAMS *out)
{
    CUkernel k;
    cudaError_t e = p ? kernel_of_stub(p->func, &k) : cudaErrorInvalidValue;
    if (e != cudaSuccess)
        return e;
    memset(out, 0, sizeof *out);
    out->func = (CUfunction)k;
    out->gridDimX = p->gridDim.x;
    out->gridDimY = p->gridDim.y;
    out->gridDimZ = p->gridDim.z;
    out->blockDimX = p->blockDim.x;
    out->blockDimY = p->blockDim.y;
    out->blockDimZ = p->blockDim.z;
    out->sharedMemBytes = p->sharedMemBytes;
    out->kernelParams = p->kernelParams;
    out->extra = p->extra;
    return cudaSuccess;
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                       const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                                       const struct cudaKernelNodeParams *pNodeParams)
{
    cudaGraphAddKernelNode_v10000_params p = {pGraphNode, graph, pDependencies, numDependencies, pNodeParams};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphAddKernelNode_v10000), "cudaGraphAddKernelNode", &p, NULL, &e, RT_CTX);
    CUDA_KERNEL_NODE_PARAMS kp;
    if (e == cudaSuccess)
        e = kernel_node_params(pNodeParams, &kp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphAddKernelNode((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                           (const CUgraphNode *)pDependencies, numDependencies, &kp));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphKernelNodeSetParams(cudaGraphNode_t node,
                                                             const struct cudaKernelNodeParams *pNodeParams)
{
    cudaGraphKernelNodeSetParams_v10000_params p = {node, pNodeParams};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphKernelNodeSetParams_v10000), "cudaGraphKernelNodeSetParams", &p, NULL, &e,
                 RT_CTX);
    CUDA_KERNEL_NODE_PARAMS kp;
    if (e == cudaSuccess)
        e = kernel_node_params(pNodeParams, &kp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphKernelNodeSetParams((CUgraphNode)node, &kp));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                                 const struct cudaKernelNodeParams *pNodeParams)
{
    cudaGraphExecKernelNodeSetParams_v10010_params p = {hGraphExec, node, pNodeParams};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphExecKernelNodeSetParams_v10010), "cudaGraphExecKernelNodeSetParams", &p, NULL,
                 &e, RT_CTX);
    CUDA_KERNEL_NODE_PARAMS kp;
    if (e == cudaSuccess)
        e = kernel_node_params(pNodeParams, &kp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphExecKernelNodeSetParams((CUgraphExec)hGraphExec, (CUgraphNode)node, &kp));
    return rt_exit(&c, e);
}

/* The runtime's memset and copy nodes run in its current context (the device's
 * primary one, made current by RT_CTX). */
static CUcontext current_ctx(void)
{
    CUcontext ctx = NULL;
    D.cuCtxGetCurrent(&ctx);
    return ctx;
}

static cudaError_t memset_node_params(const struct cudaMemsetParams *p, CUDA_MEMSET_NODE_PARAMS *out)
{
    if (!p)
        return cudaErrorInvalidValue;
    out->dst = (CUdeviceptr)p->dst;
    out->pitch = p->pitch;
    out->value = p->value;
    out->elementSize = p->elementSize;
    out->width = p->width;
    out->height = p->height;
    return cudaSuccess;
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                       const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                                       const struct cudaMemsetParams *pMemsetParams)
{
    cudaGraphAddMemsetNode_v10000_params p = {pGraphNode, graph, pDependencies, numDependencies, pMemsetParams};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphAddMemsetNode_v10000), "cudaGraphAddMemsetNode", &p, NULL, &e, RT_CTX);
    CUDA_MEMSET_NODE_PARAMS mp;
    if (e == cudaSuccess)
        e = memset_node_params(pMemsetParams, &mp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphAddMemsetNode((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                           (const CUgraphNode *)pDependencies, numDependencies, &mp, current_ctx()));
    return rt_exit(&c, e);
}

/* The node keeps its context: the driver's setter takes none. */
RT_EXPORT cudaError_t CUDARTAPI cudaGraphMemsetNodeSetParams(cudaGraphNode_t node,
                                                             const struct cudaMemsetParams *pNodeParams)
{
    cudaGraphMemsetNodeSetParams_v10000_params p = {node, pNodeParams};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphMemsetNodeSetParams_v10000), "cudaGraphMemsetNodeSetParams", &p, NULL, &e,
                 RT_CTX);
    CUDA_MEMSET_NODE_PARAMS mp;
    if (e == cudaSuccess)
        e = memset_node_params(pNodeParams, &mp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphMemsetNodeSetParams((CUgraphNode)node, &mp));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                                 const struct cudaMemsetParams *pNodeParams)
{
    cudaGraphExecMemsetNodeSetParams_v10020_params p = {hGraphExec, node, pNodeParams};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphExecMemsetNodeSetParams_v10020), "cudaGraphExecMemsetNodeSetParams", &p, NULL,
                 &e, RT_CTX);
    CUDA_MEMSET_NODE_PARAMS mp;
    if (e == cudaSuccess)
        e = memset_node_params(pNodeParams, &mp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphExecMemsetNodeSetParams((CUgraphExec)hGraphExec, (CUgraphNode)node, &mp,
                                                     current_ctx()));
    return rt_exit(&c, e);
}

/* A 1-D copy as the driver's CUDA_MEMCPY3D, with the memory types the kind names
 * (cudaMemcpyDefault: unified addressing tells). */
static cudaError_t copy_params_1d(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                  CUDA_MEMCPY3D *out)
{
    CUmemorytype st, dt;
    switch (kind) {
    case cudaMemcpyHostToHost: st = dt = CU_MEMORYTYPE_HOST; break;
    case cudaMemcpyHostToDevice: st = CU_MEMORYTYPE_HOST; dt = CU_MEMORYTYPE_DEVICE; break;
    case cudaMemcpyDeviceToHost: st = CU_MEMORYTYPE_DEVICE; dt = CU_MEMORYTYPE_HOST; break;
    case cudaMemcpyDeviceToDevice: st = dt = CU_MEMORYTYPE_DEVICE; break;
    case cudaMemcpyDefault: st = dt = CU_MEMORYTYPE_UNIFIED; break;
    default: return cudaErrorInvalidMemcpyDirection;
    }
    memset(out, 0, sizeof *out);
    out->srcMemoryType = st;
    if (st == CU_MEMORYTYPE_HOST)
        out->srcHost = src;
    else
        out->srcDevice = (CUdeviceptr)src;
    out->dstMemoryType = dt;
    if (dt == CU_MEMORYTYPE_HOST)
        out->dstHost = dst;
    else
        out->dstDevice = (CUdeviceptr)dst;
    out->WidthInBytes = count;
    out->Height = out->Depth = 1;
    return cudaSuccess;
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                         const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                                         void *dst, const void *src, size_t count,
                                                         enum cudaMemcpyKind kind)
{
    cudaGraphAddMemcpyNode1D_v11010_params p = {pGraphNode, graph, pDependencies, numDependencies, dst, src, count,
                                                kind};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphAddMemcpyNode1D_v11010), "cudaGraphAddMemcpyNode1D", &p, NULL, &e, RT_CTX);
    CUDA_MEMCPY3D cp;
    if (e == cudaSuccess)
        e = copy_params_1d(dst, src, count, kind, &cp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphAddMemcpyNode((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                           (const CUgraphNode *)pDependencies, numDependencies, &cp, current_ctx()));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst, const void *src,
                                                               size_t count, enum cudaMemcpyKind kind)
{
    cudaGraphMemcpyNodeSetParams1D_v11010_params p = {node, dst, src, count, kind};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphMemcpyNodeSetParams1D_v11010), "cudaGraphMemcpyNodeSetParams1D", &p, NULL,
                 &e, RT_CTX);
    CUDA_MEMCPY3D cp;
    if (e == cudaSuccess)
        e = copy_params_1d(dst, src, count, kind, &cp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphMemcpyNodeSetParams((CUgraphNode)node, &cp));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                                   void *dst, const void *src, size_t count,
                                                                   enum cudaMemcpyKind kind)
{
    cudaGraphExecMemcpyNodeSetParams1D_v11010_params p = {hGraphExec, node, dst, src, count, kind};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphExecMemcpyNodeSetParams1D_v11010), "cudaGraphExecMemcpyNodeSetParams1D", &p,
                 NULL, &e, RT_CTX);
    CUDA_MEMCPY3D cp;
    if (e == cudaSuccess)
        e = copy_params_1d(dst, src, count, kind, &cp);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphExecMemcpyNodeSetParams((CUgraphExec)hGraphExec, (CUgraphNode)node, &cp,
                                                     current_ctx()));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                      const cudaGraphNode_t *pDependencies, size_t numDependencies)
{
    cudaGraphAddEmptyNode_v10000_params p = {pGraphNode, graph, pDependencies, numDependencies};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphAddEmptyNode_v10000), "cudaGraphAddEmptyNode", &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphAddEmptyNode((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                          (const CUgraphNode *)pDependencies, numDependencies));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                           const cudaGraphNode_t *pDependencies,
                                                           size_t numDependencies, cudaGraph_t childGraph)
{
    cudaGraphAddChildGraphNode_v10000_params p = {pGraphNode, graph, pDependencies, numDependencies, childGraph};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphAddChildGraphNode_v10000), "cudaGraphAddChildGraphNode", &p, NULL, &e,
                 RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphAddChildGraphNode((CUgraphNode *)pGraphNode, (CUgraph)graph,
                                               (const CUgraphNode *)pDependencies, numDependencies,
                                               (CUgraph)childGraph));
    return rt_exit(&c, e);
}

/* The node's embedded graph itself, not a copy (the driver's). */
RT_EXPORT cudaError_t CUDARTAPI cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *pGraph)
{
    cudaGraphChildGraphNodeGetGraph_v10000_params p = {node, pGraph};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphChildGraphNodeGetGraph_v10000), "cudaGraphChildGraphNodeGetGraph", &p, NULL,
                 &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphChildGraphNodeGetGraph((CUgraphNode)node, (CUgraph *)pGraph));
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
                                                                     cudaGraph_t childGraph)
{
    cudaGraphExecChildGraphNodeSetParams_v11010_params p = {hGraphExec, node, childGraph};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGraphExecChildGraphNodeSetParams_v11010), "cudaGraphExecChildGraphNodeSetParams",
                 &p, NULL, &e, RT_CTX);
    if (e == cudaSuccess)
        e = from_cu(D.cuGraphExecChildGraphNodeSetParams((CUgraphExec)hGraphExec, (CUgraphNode)node,
                                                         (CUgraph)childGraph));
    return rt_exit(&c, e);
}

/* ------------------------------------------------------------------ driver entry points */

static cudaError_t entry_point(const char *symbol, void **funcPtr, int version, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status)
{
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = D.cuGetProcAddress(symbol, funcPtr, version, flags, &st);
    if (status)
        *status = st == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess
                : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? cudaDriverEntryPointVersionNotSufficent
                : cudaDriverEntryPointSymbolNotFound;
    return from_cu(r);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                                        enum cudaDriverEntryPointQueryResult *driverStatus)
{
    cudaGetDriverEntryPoint_v11030_params p = {symbol, funcPtr, flags, driverStatus};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetDriverEntryPoint_v11030), "cudaGetDriverEntryPoint", &p, NULL, &e, 0);
    if (e == cudaSuccess)
        e = entry_point(symbol, funcPtr, 13000, flags, driverStatus);
    return rt_exit(&c, e);
}

RT_EXPORT cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                                 unsigned int cudaVersion, unsigned long long flags,
                                                                 enum cudaDriverEntryPointQueryResult *driverStatus)
{
    cudaGetDriverEntryPointByVersion_v12050_params p = {symbol, funcPtr, cudaVersion, flags, driverStatus};
    simcu_call_t c;
    cudaError_t e;
    e = rt_enter(&c, RT_CBID(cudaGetDriverEntryPointByVersion_v12050), "cudaGetDriverEntryPointByVersion", &p,
                 NULL, &e, 0);
    if (e == cudaSuccess)
        e = entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus);
    return rt_exit(&c, e);
}

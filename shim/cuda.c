/* cuda.c - FlexTensor's own way to CUDA: the driver entry points it calls for itself
 * (drv, looked up once through ft_shim_driver_proc), and its own runtime calls that can
 * fail in normal operation (own_*), which must not leave their error as the
 * application's last error.
 *
 * Owns: drv (written once, under resolve_driver's pthread_once; read without a lock
 * afterwards) and ev, the runtime's event calls (written once by events_resolve, when
 * profiling starts, before the plan or FT_SPILL's profiled moves can use them). Touches nothing else of the engine. The clock, now_ns, is an inline in
 * engine.h: the sampled launches read it. */
#define _GNU_SOURCE
#include "shim/engine.h"

drv_fns_t drv;

/* --- the driver entry points FlexTensor calls itself --------------------------------- */

static void resolve(void)
{
    /* Each with the CUDA version of the ABI this file calls (see ft_shim_driver_proc). */
    drv.kernel_param_info = (kernel_param_info_fn)ft_shim_driver_proc("cuKernelGetParamInfo", 12040);
    drv.func_param_info = (func_param_info_fn)ft_shim_driver_proc("cuFuncGetParamInfo", 12040);
    drv.kernel_name = (kernel_name_fn)ft_shim_driver_proc("cuKernelGetName", 12030);
    drv.func_name = (func_name_fn)ft_shim_driver_proc("cuFuncGetName", 12030);
    drv.ctx_get_device = ft_shim_driver_proc("cuCtxGetDevice", 2000);
    drv.granularity = ft_shim_driver_proc("cuMemGetAllocationGranularity", 10020);
    drv.reserve = ft_shim_driver_proc("cuMemAddressReserve", 10020);
    drv.address_free = ft_shim_driver_proc("cuMemAddressFree", 10020);
    drv.create = ft_shim_driver_proc("cuMemCreate", 10020);
    drv.release = ft_shim_driver_proc("cuMemRelease", 10020);
    drv.map = ft_shim_driver_proc("cuMemMap", 10020);
    drv.unmap = ft_shim_driver_proc("cuMemUnmap", 10020);
    drv.set_access = ft_shim_driver_proc("cuMemSetAccess", 10020);
    drv.event_query = ft_shim_driver_proc("cuEventQuery", 2000);
    drv.can_access_peer = ft_shim_driver_proc("cuDeviceCanAccessPeer", 4000);
    drv.device_count = ft_shim_driver_proc("cuDeviceGetCount", 2000);
    drv.device_total_mem = ft_shim_driver_proc("cuDeviceTotalMem", 3020);
    drv.capture_info = ft_shim_driver_proc("cuStreamGetCaptureInfo", 12030);
    drv.exchange_mode = ft_shim_driver_proc("cuThreadExchangeStreamCaptureMode", 10010);
    drv.graph_get_nodes = ft_shim_driver_proc("cuGraphGetNodes", 10000);
    drv.graph_clone = ft_shim_driver_proc("cuGraphClone", 10000);
    drv.graph_find_in_clone = ft_shim_driver_proc("cuGraphNodeFindInClone", 10000);
    drv.graph_destroy_node = ft_shim_driver_proc("cuGraphDestroyNode", 10000);
    drv.graph_destroy = ft_shim_driver_proc("cuGraphDestroy", 10000);
    drv.graph_instantiate = ft_shim_driver_proc("cuGraphInstantiateWithFlags", 11040);
    drv.graph_exec_destroy = ft_shim_driver_proc("cuGraphExecDestroy", 10000);
    drv.graph_node_type = ft_shim_driver_proc("cuGraphNodeGetType", 10000);
    drv.graph_exec_child_set = ft_shim_driver_proc("cuGraphExecChildGraphNodeSetParams", 11010);
    drv.get_kernel = (get_kernel_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaGetKernel");
}

/* Driver entry points are looked up once, on first need (libcuda is loaded by then:
 * the runtime loads it before any call we act on). */
void resolve_driver(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, resolve);
}

/* --- FlexTensor's own runtime calls and the application's last error ---------------
 *
 * A runtime call that fails leaves its error as the thread's last error, which the
 * application reads with its next cudaGetLastError: PyTorch checks after every launch,
 * and would raise FlexTensor's failed allocation (a device too full to measure the link
 * with 128 MiB, on the simulator) as its own out-of-memory. FlexTensor's own calls that
 * can fail in normal operation go through own_call, which takes such an error back
 * unless the application had one pending already. */
typedef cudaError_t (*last_error_fn)(void);

/* The runtime's entry `name`, looked up at the first call through *fn; any thread may
 * make it (FlexTensor's own threads too), and each stores the same value. */
static void *lazy_sym(void **fn, const char *name)
{
    void *f = __atomic_load_n(fn, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        f = ft_shim_real_dlsym(RTLD_NEXT, name);
        __atomic_store_n(fn, f, __ATOMIC_RELEASE);
    }
    return f;
}

cudaError_t own_pending(void)
{
    static void *peek;
    last_error_fn f = (last_error_fn)lazy_sym(&peek, "cudaPeekAtLastError");
    return f != NULL ? f() : cudaSuccess;
}

/* rc: what the own call returned; pending: own_pending() before it. */
cudaError_t own_call(cudaError_t rc, cudaError_t pending)
{
    static void *take;
    if (rc == cudaSuccess || pending != cudaSuccess)
        return rc;
    last_error_fn f = (last_error_fn)lazy_sym(&take, "cudaGetLastError");
    if (f != NULL)
        f();
    return rc;
}

/* A copy of FlexTensor's own that the device refused (async: at enqueue on s; else
 * synchronous) is made once more: one of the program's bytes (a load, a copy back,
 * FT_SPILL's moves) must happen, and one of FlexTensor's figures (a checksum read) is
 * cheaper made again than done without. When the second is made, the first's error is
 * taken back from the thread's last error: the program checks it after every launch
 * and would raise it as its own. (Nothing is asked before a copy: a runtime call of
 * FlexTensor's inside the application's is a second record under its correlation id
 * for the application's profiler, cupti_audit.sh. An error the application had
 * pending was overwritten by the refused copy anyway. A copy through the driver,
 * FT_DRIVER_OWN_CALLS=driver, leaves no runtime error to take back.) When the second
 * fails too, the error stays for the program to see: its bytes on one side are not
 * what they should be (a sticky error, the device lost, fails every call anyway). Said
 * at warning level. */
static cudaError_t copy_once(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s,
                             int async)
{
    return async ? REAL(cudaMemcpyAsync)(dst, src, n, kind, s) : REAL(cudaMemcpy)(dst, src, n, kind);
}

static cudaError_t own_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s,
                            int async)
{
    cudaError_t rc = copy_once(dst, src, n, kind, s, async);
    if (rc == cudaSuccess)
        return rc;
    cudaError_t again = copy_once(dst, src, n, kind, s, async);
    FT_LOG_CAPPED(FT_LOG_WARN, 3, "a copy of FlexTensor's own (%zu bytes) failed (cudaError %d); made again: %s", n,
                  (int)rc, again == cudaSuccess ? "done, the error taken back" : "failed too, the error left for the program");
    if (again == cudaSuccess && !(ft_driver_hook_depth > 0 && own_via_driver))
        own_call(rc, cudaSuccess);
    return again;
}

cudaError_t own_copy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    return own_copy(dst, src, n, kind, s, 1);
}

cudaError_t own_copy_sync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return own_copy(dst, src, n, kind, NULL, 0);
}

cudaError_t own_malloc(void **p, size_t n)
{
    cudaError_t pending = own_pending();
    return own_call(REAL(cudaMalloc)(p, n), pending);
}

cudaError_t own_host_alloc(void **p, size_t n)
{
    typedef cudaError_t (*host_alloc_fn)(void **, size_t, unsigned int);
    host_alloc_fn alloc = (host_alloc_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaHostAlloc");
    if (alloc == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(alloc(p, n, cudaHostAllocDefault), pending);
}

cudaError_t own_stream(cudaStream_t *s)
{
    typedef cudaError_t (*stream_create_fn)(cudaStream_t *, unsigned int);
    stream_create_fn create = (stream_create_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaStreamCreateWithFlags");
    if (create == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(create(s, cudaStreamNonBlocking), pending);
}

/* cudaEventCreateWithFlags for FlexTensor's own events (own_call). */
static cudaError_t own_event_create(cudaEvent_t *e, unsigned int flags)
{
    static event_create_fn create;
    if (create == NULL && (create = (event_create_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventCreateWithFlags")) == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(create(e, flags), pending);
}

/* --- own calls inside a driver hook (FT_DRIVER_OWN_CALLS=driver) ---------------------
 *
 * A driver call FlexTensor's hook handles may come from inside a runtime call it never
 * saw (cuBLAS's own copy of the runtime). CUPTI gives every call nested in an open API
 * call that call's correlation id: a runtime call of FlexTensor's there is a second
 * runtime record under one id, and when both start a flow (a launch and a copy, a set,
 * a synchronize or a stream wait), torch.profiler's Kineto asserts at the profiler's
 * exit. Driver calls nested in a runtime call are what the runtime itself makes, so
 * there FlexTensor's copies, sets, synchronizes and waits go to the driver. Same
 * semantics: the handles are the same objects (cudaStream_t is CUstream, cudaEvent_t is
 * CUevent, the legacy and per-thread stream values are equal), cuMemcpy infers the
 * direction as cudaMemcpyDefault does, both use the legacy default stream for stream 0
 * (FlexTensor calls the non-_ptsz runtime flavours); a failure comes back as the
 * driver's code cast to cudaError_t (equal for the common codes: 1, 2, 400, 700, 900),
 * and leaves no runtime last error behind. */
int own_via_driver;

static struct {
    CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*stream_sync)(CUstream);
    CUresult (*ctx_sync)(void);
    CUresult (*stream_wait)(CUstream, CUevent, unsigned int);
    CUresult (*event_record)(CUevent, CUstream);
} own_drv;

static void own_drv_resolve(void)
{
    own_drv.memcpy = ft_shim_driver_proc("cuMemcpy", 4000);
    own_drv.memcpy_async = ft_shim_driver_proc("cuMemcpyAsync", 4000);
    own_drv.memset_async = ft_shim_driver_proc("cuMemsetD8Async", 3020);
    own_drv.stream_sync = ft_shim_driver_proc("cuStreamSynchronize", 2000);
    own_drv.ctx_sync = ft_shim_driver_proc("cuCtxSynchronize", 2000);
    own_drv.stream_wait = ft_shim_driver_proc("cuStreamWaitEvent", 3020);
    own_drv.event_record = ft_shim_driver_proc("cuEventRecord", 2000);
}

static cudaError_t own_drv_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return (cudaError_t)own_drv.memcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n);
}

static cudaError_t own_drv_memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                        cudaStream_t s)
{
    return (cudaError_t)own_drv.memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n,
                                             (CUstream)s);
}

static cudaError_t own_drv_memset_async(void *p, int value, size_t n, cudaStream_t s)
{
    return (cudaError_t)own_drv.memset_async((CUdeviceptr)(uintptr_t)p, (unsigned char)value, n, (CUstream)s);
}

static cudaError_t own_drv_stream_sync(cudaStream_t s)
{
    return (cudaError_t)own_drv.stream_sync((CUstream)s);
}

static cudaError_t own_drv_device_sync(void)
{
    return (cudaError_t)own_drv.ctx_sync();
}

static cudaError_t own_drv_stream_wait(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    return (cudaError_t)own_drv.stream_wait((CUstream)s, (CUevent)e, flags);
}

static void own_drv_ready(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, own_drv_resolve);
}

void *own_driver_flavour(ft_shim_fn_t fn)
{
    own_drv_ready();
    switch (fn) {
    case FT_FN_cudaMemcpy: return own_drv.memcpy ? (void *)own_drv_memcpy : NULL;
    case FT_FN_cudaMemcpyAsync: return own_drv.memcpy_async ? (void *)own_drv_memcpy_async : NULL;
    case FT_FN_cudaMemsetAsync: return own_drv.memset_async ? (void *)own_drv_memset_async : NULL;
    case FT_FN_cudaStreamSynchronize: return own_drv.stream_sync ? (void *)own_drv_stream_sync : NULL;
    case FT_FN_cudaDeviceSynchronize: return own_drv.ctx_sync ? (void *)own_drv_device_sync : NULL;
    default: return NULL;
    }
}

/* ev.wait and ev.record: cudaStreamWaitEvent and cudaEventRecord, or the driver's inside
 * a driver hook (as REAL). The event record starts no flow in torch.profiler, but is
 * the call profiling makes most often there (a unit's first launch), so it goes too. */
static stream_wait_fn rt_stream_wait;
static event_record_fn rt_event_record;

static cudaError_t own_event_record(cudaEvent_t e, cudaStream_t s)
{
    if (ft_driver_hook_depth > 0 && own_via_driver) {
        own_drv_ready();
        if (own_drv.event_record != NULL)
            return (cudaError_t)own_drv.event_record((CUevent)e, (CUstream)s);
    }
    return rt_event_record(e, s);
}

static cudaError_t own_stream_wait(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    if (ft_driver_hook_depth > 0 && own_via_driver) {
        own_drv_ready();
        if (own_drv.stream_wait != NULL)
            return own_drv_stream_wait(s, e, flags);
    }
    return rt_stream_wait(s, e, flags);
}

events_t ev;

/* The runtime's event calls FlexTensor uses (ev); own_event_create for its own events. */
/* Destroys one of FlexTensor's own events (NULL: nothing), when the plan they served
 * goes (reload.c). */
void own_event_destroy(cudaEvent_t e)
{
    static cudaError_t (*destroy)(cudaEvent_t);
    if (e == NULL)
        return;
    if (destroy == NULL)
        destroy = (cudaError_t (*)(cudaEvent_t))ft_shim_real_dlsym(RTLD_NEXT, "cudaEventDestroy");
    cudaError_t pending = own_pending();
    if (destroy != NULL)
        own_call(destroy(e), pending);
}

void events_resolve(void)
{
    ev.create = own_event_create;
    rt_event_record = (event_record_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventRecord");
    ev.record = rt_event_record != NULL ? own_event_record : NULL;
    ev.sync = (event_sync_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventSynchronize");
    ev.elapsed = (event_elapsed_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventElapsedTime");
    rt_stream_wait = (stream_wait_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaStreamWaitEvent");
    ev.wait = rt_stream_wait != NULL ? own_stream_wait : NULL;
}

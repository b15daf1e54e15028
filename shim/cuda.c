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

cudaError_t own_pending(void)
{
    static last_error_fn peek;
    if (peek == NULL)
        peek = (last_error_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaPeekAtLastError");
    return peek != NULL ? peek() : cudaSuccess;
}

/* rc: what the own call returned; pending: own_pending() before it. */
cudaError_t own_call(cudaError_t rc, cudaError_t pending)
{
    static last_error_fn take;
    if (rc == cudaSuccess || pending != cudaSuccess)
        return rc;
    if (take == NULL)
        take = (last_error_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaGetLastError");
    if (take != NULL)
        take();
    return rc;
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

events_t ev;

/* The runtime's event calls FlexTensor uses (ev); own_event_create for its own events. */
void events_resolve(void)
{
    ev.create = own_event_create;
    ev.record = (event_record_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventRecord");
    ev.sync = (event_sync_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventSynchronize");
    ev.elapsed = (event_elapsed_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaEventElapsedTime");
    ev.wait = (stream_wait_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaStreamWaitEvent");
}

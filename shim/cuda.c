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

#include <signal.h>

drv_fns_t drv;

/* --- the driver entry points FlexTensor calls itself --------------------------------- */

static void resolve(void)
{
    /* Each with the CUDA version of the ABI this file calls (see ft_shim_driver_proc). */
    drv.kernel_param_info = (kernel_param_info_fn)ft_shim_driver_proc("cuKernelGetParamInfo", 12040);
    drv.func_param_info = (func_param_info_fn)ft_shim_driver_proc("cuFuncGetParamInfo", 12040);
    drv.func_is_loaded = ft_shim_driver_proc("cuFuncIsLoaded", 12040);
    drv.func_load = ft_shim_driver_proc("cuFuncLoad", 12040);
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
        f = own_rt(name);
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
 * inside a driver hook once the application profiles, leaves no runtime error to take
 * back.) When the second fails too, the error stays for the program to see: its bytes
 * on one side are not what they should be (a sticky error, the device lost, fails
 * every call anyway). Said at warning level. */
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
    if (again == cudaSuccess && !own_in_driver_hook())
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
    host_alloc_fn alloc = (host_alloc_fn)own_rt("cudaHostAlloc");
    if (alloc == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(alloc(p, n, cudaHostAllocDefault), pending);
}

cudaError_t own_stream(cudaStream_t *s)
{
    typedef cudaError_t (*stream_create_fn)(cudaStream_t *, unsigned int);
    stream_create_fn create = (stream_create_fn)own_rt("cudaStreamCreateWithFlags");
    if (create == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(create(s, cudaStreamNonBlocking), pending);
}

/* cudaEventCreateWithFlags for FlexTensor's own events (own_call). */
static cudaError_t own_event_create(cudaEvent_t *e, unsigned int flags)
{
    static event_create_fn create;
    if (create == NULL && (create = (event_create_fn)own_rt("cudaEventCreateWithFlags")) == NULL)
        return cudaErrorSharedObjectSymbolNotFound;
    cudaError_t pending = own_pending();
    return own_call(create(e, flags), pending);
}

/* --- own calls inside a driver hook ----------------------------------------------------
 *
 * A driver call FlexTensor's hook handles may come from inside a runtime call it never
 * saw (cuBLAS's own copy of the runtime). CUPTI gives every call nested in an open API
 * call that call's correlation id: a call of FlexTensor's there is a second record under
 * one id, and when both start a flow (a launch and a copy, a set, a synchronize or a
 * stream wait: runtime records; cuLaunchKernel: a driver record), torch.profiler's
 * Kineto asserts at the profiler's exit (docs/discovery.md, "One correlation id, two
 * CPU-side records").
 *
 * So once the application's profiler holds CUPTI (handover.c), FlexTensor's copies,
 * sets, synchronizes, stream waits and event records there go to the driver, and are
 * made on another thread, FlexTensor's own-call thread (`away`), as are the launches of
 * its own kernels (checksum.c: the checksum and copy-back kernels). There they are
 * nested in no call of the application's: each has an id of its own. The hook waits for
 * each: the same order on every stream, the same result. Only driver calls go there:
 * the application's thread may be inside a runtime call that holds the runtime's locks;
 * the driver is not entered yet.
 *
 * The driver forms have the runtime forms' semantics: the handles are the same objects
 * (cudaStream_t is CUstream, cudaEvent_t is CUevent, the legacy and per-thread stream
 * values are equal), cuMemcpy infers the direction as cudaMemcpyDefault does, both use
 * the legacy default stream for stream 0 (FlexTensor calls the non-_ptsz runtime
 * flavours); a failure comes back as the driver's code cast to cudaError_t (equal for
 * the common codes: 1, 2, 400, 700, 900), and leaves no runtime last error behind.
 * Before the hand-over no profiler of the application's reads the ids: the runtime
 * forms are kept. */

int own_in_driver_hook(void)
{
    return ft_driver_hook_depth > 0 && ft_cupti_handed_over();
}

static struct {
    CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*memset_async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*stream_sync)(CUstream);
    CUresult (*ctx_sync)(void);
    CUresult (*stream_wait)(CUstream, CUevent, unsigned int);
    CUresult (*event_record)(CUevent, CUstream);
} own_drv;

/* One of FlexTensor's own driver calls, as data: made where it is asked (job_do), or
 * on the own-call thread (job_run). */
typedef enum { JOB_MEMCPY, JOB_MEMCPY_ASYNC, JOB_MEMSET_ASYNC, JOB_STREAM_SYNC, JOB_CTX_SYNC, JOB_STREAM_WAIT,
               JOB_EVENT_RECORD, JOB_LAUNCH } job_op_t;

typedef struct {
    job_op_t op;
    CUdeviceptr dst, src;
    size_t n;
    unsigned char value;
    CUstream s;
    CUevent e;
    unsigned flags;
    launch_fn launch; /* JOB_LAUNCH: cuLaunchKernel, of f on `blocks` blocks of 256 */
    CUfunction f;
    unsigned blocks;
    void **args;
    CUcontext ctx;    /* the asking thread's current context */
    CUresult rc;
} job_t;

static CUresult job_do(const job_t *j)
{
    switch (j->op) {
    case JOB_MEMCPY: return own_drv.memcpy(j->dst, j->src, j->n);
    case JOB_MEMCPY_ASYNC: return own_drv.memcpy_async(j->dst, j->src, j->n, j->s);
    case JOB_MEMSET_ASYNC: return own_drv.memset_async(j->dst, j->value, j->n, j->s);
    case JOB_STREAM_SYNC: return own_drv.stream_sync(j->s);
    case JOB_CTX_SYNC: return own_drv.ctx_sync();
    case JOB_STREAM_WAIT: return own_drv.stream_wait(j->s, j->e, j->flags);
    case JOB_EVENT_RECORD: return own_drv.event_record(j->e, j->s);
    case JOB_LAUNCH: return j->launch(j->f, j->blocks, 1, 1, 256, 1, 1, 0, j->s, j->args, NULL);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* The own-call thread: one job at a time (`call`, held by the asking thread from the
 * job's post to its end); the job and its end under `lock`. `started`: 1 running, -1
 * could not be started (jobs are then made where they are asked), 0 not yet; atomic,
 * reset in a child of fork, where the thread is gone. */
static struct {
    pthread_mutex_t call, lock;
    pthread_cond_t cv;
    job_t *job;
    int done;
    int started;
    pthread_t thread;
    CUresult (*get_ctx)(CUcontext *);
    CUresult (*set_ctx)(CUcontext);
} away = { .call = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void *away_main(void *arg)
{
    (void)arg;
    /* Every call this thread makes is FlexTensor's own: the wrappers pass it through
     * (the driver may hand out FlexTensor's exports as its entry points). */
    ft_intercept_depth = 1;
    CUcontext cur = NULL;
    pthread_mutex_lock(&away.lock);
    for (;;) {
        while (away.job == NULL || away.done)
            pthread_cond_wait(&away.cv, &away.lock);
        job_t *j = away.job;
        pthread_mutex_unlock(&away.lock);
        if (j->ctx != cur)
            cur = away.set_ctx(j->ctx) == CUDA_SUCCESS ? j->ctx : NULL;
        j->rc = cur == j->ctx ? job_do(j) : CUDA_ERROR_INVALID_CONTEXT;
        pthread_mutex_lock(&away.lock);
        away.done = 1;
        pthread_cond_broadcast(&away.cv);
    }
    return NULL;
}

static void away_forked(void)
{
    pthread_mutex_init(&away.call, NULL);
    pthread_mutex_init(&away.lock, NULL);
    pthread_cond_init(&away.cv, NULL);
    away.job = NULL;
    away.done = 0;
    __atomic_store_n(&away.started, 0, __ATOMIC_RELEASE);
}

static void away_start(void)
{
    away.get_ctx = ft_shim_driver_proc("cuCtxGetCurrent", 4000);
    away.set_ctx = ft_shim_driver_proc("cuCtxSetCurrent", 4000);
    int rc = -1;
    if (away.get_ctx != NULL && away.set_ctx != NULL) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 1u << 18);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        /* Signals go to the application's threads, never to this one. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        rc = pthread_create(&away.thread, &a, away_main, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&a);
    }
    if (rc != 0)
        FT_INFO("no own-call thread (pthread_create: %d): FlexTensor's calls inside driver hooks are made there, "
                "under the correlation id of any call of the application's still open", rc);
    else
        pthread_atfork(NULL, NULL, away_forked);
    __atomic_store_n(&away.started, rc == 0 ? 1 : -1, __ATOMIC_RELEASE);
}

/* Makes the job on the own-call thread (the caller is in a driver hook, the
 * application's profiler holds CUPTI); here when that thread could not be started. The
 * result is the driver's. */
static CUresult job_run(job_t *j)
{
    int started = __atomic_load_n(&away.started, __ATOMIC_ACQUIRE);
    if (started == 0) {
        pthread_mutex_lock(&away.call);
        if (__atomic_load_n(&away.started, __ATOMIC_ACQUIRE) == 0)
            away_start();
        pthread_mutex_unlock(&away.call);
        started = __atomic_load_n(&away.started, __ATOMIC_ACQUIRE);
    }
    if (started < 0 || away.get_ctx(&j->ctx) != CUDA_SUCCESS)
        return job_do(j);
    pthread_mutex_lock(&away.call);
    pthread_mutex_lock(&away.lock);
    away.job = j;
    away.done = 0;
    pthread_cond_broadcast(&away.cv);
    while (!away.done)
        pthread_cond_wait(&away.cv, &away.lock);
    away.job = NULL;
    pthread_mutex_unlock(&away.lock);
    pthread_mutex_unlock(&away.call);
    return j->rc;
}

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
    job_t j = { .op = JOB_MEMCPY, .dst = (CUdeviceptr)(uintptr_t)dst, .src = (CUdeviceptr)(uintptr_t)src, .n = n };
    return (cudaError_t)job_run(&j);
}

static cudaError_t own_drv_memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                        cudaStream_t s)
{
    job_t j = { .op = JOB_MEMCPY_ASYNC, .dst = (CUdeviceptr)(uintptr_t)dst, .src = (CUdeviceptr)(uintptr_t)src,
                .n = n, .s = (CUstream)s };
    return (cudaError_t)job_run(&j);
}

static cudaError_t own_drv_memset_async(void *p, int value, size_t n, cudaStream_t s)
{
    job_t j = { .op = JOB_MEMSET_ASYNC, .dst = (CUdeviceptr)(uintptr_t)p, .value = (unsigned char)value, .n = n,
                .s = (CUstream)s };
    return (cudaError_t)job_run(&j);
}

static cudaError_t own_drv_stream_sync(cudaStream_t s)
{
    job_t j = { .op = JOB_STREAM_SYNC, .s = (CUstream)s };
    return (cudaError_t)job_run(&j);
}

static cudaError_t own_drv_device_sync(void)
{
    job_t j = { .op = JOB_CTX_SYNC };
    return (cudaError_t)job_run(&j);
}

static cudaError_t own_drv_stream_wait(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    job_t j = { .op = JOB_STREAM_WAIT, .s = (CUstream)s, .e = (CUevent)e, .flags = flags };
    return (cudaError_t)job_run(&j);
}

static cudaError_t own_drv_event_record(cudaEvent_t e, cudaStream_t s)
{
    job_t j = { .op = JOB_EVENT_RECORD, .e = (CUevent)e, .s = (CUstream)s };
    return (cudaError_t)job_run(&j);
}

static void own_drv_ready(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, own_drv_resolve);
}

CUresult own_launch(launch_fn launch, CUfunction f, unsigned blocks, CUstream s, void **args)
{
    job_t j = { .op = JOB_LAUNCH, .launch = launch, .f = f, .blocks = blocks, .s = s, .args = args };
    return own_in_driver_hook() ? job_run(&j) : job_do(&j);
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
    if (own_in_driver_hook()) {
        own_drv_ready();
        if (own_drv.event_record != NULL)
            return own_drv_event_record(e, s);
    }
    return rt_event_record(e, s);
}

static cudaError_t own_stream_wait(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    if (own_in_driver_hook()) {
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
        destroy = (cudaError_t (*)(cudaEvent_t))own_rt("cudaEventDestroy");
    cudaError_t pending = own_pending();
    if (destroy != NULL)
        own_call(destroy(e), pending);
}

void events_resolve(void)
{
    ev.create = own_event_create;
    rt_event_record = (event_record_fn)own_rt("cudaEventRecord");
    ev.record = rt_event_record != NULL ? own_event_record : NULL;
    ev.sync = (event_sync_fn)own_rt("cudaEventSynchronize");
    ev.elapsed = (event_elapsed_fn)own_rt("cudaEventElapsedTime");
    rt_stream_wait = (stream_wait_fn)own_rt("cudaStreamWaitEvent");
    ev.wait = rt_stream_wait != NULL ? own_stream_wait : NULL;
}

/* --- without the runtime: driver stand-ins -----------------------------------------
 *
 * A process may have no CUDA runtime that FlexTensor can find: JAX's XLA links its own
 * statically, and a library dlopened with RTLD_LOCAL under another name is in no scope
 * RTLD_NEXT searches. Its kernels, copies and allocations reach the driver and are seen
 * there; FlexTensor's own runtime calls (its streams, events, pinned buffers, copies,
 * checksums) would find nothing to call. Each of those has a stand-in here, of the
 * runtime's signature, made of driver calls: the handles are the same objects, the
 * enumerations the runtime passes through (event, stream and host-allocation flags,
 * device attributes) have the driver's values, and cuMemcpy infers the direction as
 * cudaMemcpyDefault does. The runtime makes the device's primary context current on a
 * thread's first call; so do the stand-ins (the managed device's, else device 0), and
 * cudaSetDevice makes a device's primary context current, as the runtime's does. There
 * is no runtime last error to take back: own_call finds no cudaGetLastError. */
#define SD_DEVICES 64
static struct {
    CUresult (*ctx_get)(CUcontext *);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*ctx_device)(CUdevice *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*mem_info)(size_t *, size_t *);
    CUresult (*host_alloc)(void **, size_t, unsigned int);
    CUresult (*host_free)(void *);
    CUresult (*host_register)(void *, size_t, unsigned int);
    CUresult (*host_unregister)(void *);
    CUresult (*stream_create)(CUstream *, unsigned int);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_destroy)(CUevent);
    CUresult (*event_sync)(CUevent);
    CUresult (*event_elapsed)(float *, CUevent, CUevent);
    CUcontext primary[SD_DEVICES];
    pthread_mutex_t lock;
} sd = { .lock = PTHREAD_MUTEX_INITIALIZER };


static void sd_resolve(void)
{
    own_drv_ready();
    sd.ctx_get = ft_shim_driver_proc("cuCtxGetCurrent", 4000);
    sd.ctx_set = ft_shim_driver_proc("cuCtxSetCurrent", 4000);
    sd.ctx_device = ft_shim_driver_proc("cuCtxGetDevice", 2000);
    sd.device_get = ft_shim_driver_proc("cuDeviceGet", 2000);
    sd.primary_retain = ft_shim_driver_proc("cuDevicePrimaryCtxRetain", 7000);
    sd.attr = ft_shim_driver_proc("cuDeviceGetAttribute", 2000);
    sd.mem_alloc = ft_shim_driver_proc("cuMemAlloc", 3020);
    sd.mem_free = ft_shim_driver_proc("cuMemFree", 3020);
    sd.mem_info = ft_shim_driver_proc("cuMemGetInfo", 3020);
    sd.host_alloc = ft_shim_driver_proc("cuMemHostAlloc", 3020);
    sd.host_free = ft_shim_driver_proc("cuMemFreeHost", 2000);
    sd.host_register = ft_shim_driver_proc("cuMemHostRegister", 6050);
    sd.host_unregister = ft_shim_driver_proc("cuMemHostUnregister", 4000);
    sd.stream_create = ft_shim_driver_proc("cuStreamCreate", 2000);
    sd.stream_destroy = ft_shim_driver_proc("cuStreamDestroy", 4000);
    sd.event_create = ft_shim_driver_proc("cuEventCreate", 2000);
    sd.event_destroy = ft_shim_driver_proc("cuEventDestroy", 4000);
    sd.event_sync = ft_shim_driver_proc("cuEventSynchronize", 2000);
    sd.event_elapsed = ft_shim_driver_proc("cuEventElapsedTime", 12080);
}

static void sd_ready(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, sd_resolve);
}

/* Device dev's primary context, retained once and kept (NULL: none). */
static CUcontext sd_primary(int dev)
{
    if (dev < 0 || dev >= SD_DEVICES || sd.device_get == NULL || sd.primary_retain == NULL)
        return NULL;
    CUcontext c = __atomic_load_n(&sd.primary[dev], __ATOMIC_ACQUIRE);
    if (c != NULL)
        return c;
    pthread_mutex_lock(&sd.lock);
    CUdevice d;
    if ((c = sd.primary[dev]) == NULL && sd.device_get(&d, dev) == CUDA_SUCCESS &&
        sd.primary_retain(&c, d) == CUDA_SUCCESS)
        __atomic_store_n(&sd.primary[dev], c, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&sd.lock);
    return c;
}

/* The calling thread's context: its current one, else the managed device's primary
 * context made current (the runtime's implicit initialisation). */
static CUresult sd_ctx(void)
{
    sd_ready();
    CUcontext c = NULL;
    if (sd.ctx_get == NULL || sd.ctx_set == NULL)
        return CUDA_ERROR_NOT_FOUND;
    if (sd.ctx_get(&c) == CUDA_SUCCESS && c != NULL)
        return CUDA_SUCCESS;
    int dev = managed_device();
    c = sd_primary(dev >= 0 ? dev : 0);
    return c != NULL ? sd.ctx_set(c) : CUDA_ERROR_INVALID_CONTEXT;
}

/* The stand-in's body: the driver's entry fn (NULL: not found) called once the thread
 * has a context, its CUresult as the runtime's error (equal for the common codes). */
#define SD_CALL(fn, ...)                                                                       \
    do {                                                                                       \
        CUresult rc_ = sd_ctx();                                                               \
        if (rc_ == CUDA_SUCCESS)                                                               \
            rc_ = (fn) != NULL ? (fn)(__VA_ARGS__) : CUDA_ERROR_NOT_FOUND;                     \
        return (cudaError_t)rc_;                                                               \
    } while (0)

static cudaError_t sd_malloc(void **p, size_t n) { SD_CALL(sd.mem_alloc, (CUdeviceptr *)p, n); }
static cudaError_t sd_mem_info(size_t *free, size_t *total) { SD_CALL(sd.mem_info, free, total); }
static cudaError_t sd_host_alloc(void **p, size_t n, unsigned int flags) { SD_CALL(sd.host_alloc, p, n, flags); }
static cudaError_t sd_free_host(void *p) { SD_CALL(sd.host_free, p); }
static cudaError_t sd_host_register(void *p, size_t n, unsigned int flags) { SD_CALL(sd.host_register, p, n, flags); }
static cudaError_t sd_host_unregister(void *p) { SD_CALL(sd.host_unregister, p); }
static cudaError_t sd_stream_create(cudaStream_t *s, unsigned int flags) { SD_CALL(sd.stream_create, (CUstream *)s, flags); }
static cudaError_t sd_stream_destroy(cudaStream_t s) { SD_CALL(sd.stream_destroy, (CUstream)s); }
static cudaError_t sd_event_create(cudaEvent_t *e, unsigned int flags) { SD_CALL(sd.event_create, (CUevent *)e, flags); }
static cudaError_t sd_event_destroy(cudaEvent_t e) { SD_CALL(sd.event_destroy, (CUevent)e); }
static cudaError_t sd_event_sync(cudaEvent_t e) { SD_CALL(sd.event_sync, (CUevent)e); }
static cudaError_t sd_event_elapsed(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    SD_CALL(sd.event_elapsed, ms, (CUevent)a, (CUevent)b);
}

static cudaError_t sd_free(void *p)
{
    /* cudaFree(NULL): the runtime's way to make the context; nothing to free. */
    if (p == NULL)
        return (cudaError_t)sd_ctx();
    SD_CALL(sd.mem_free, (CUdeviceptr)(uintptr_t)p);
}

static cudaError_t sd_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    (void)kind;
    SD_CALL(own_drv.memcpy, (CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n);
}

static cudaError_t sd_memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    (void)kind;
    SD_CALL(own_drv.memcpy_async, (CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, (CUstream)s);
}

static cudaError_t sd_memset_async(void *p, int value, size_t n, cudaStream_t s)
{
    SD_CALL(own_drv.memset_async, (CUdeviceptr)(uintptr_t)p, (unsigned char)value, n, (CUstream)s);
}

static cudaError_t sd_stream_sync(cudaStream_t s) { SD_CALL(own_drv.stream_sync, (CUstream)s); }
static cudaError_t sd_device_sync(void) { SD_CALL(own_drv.ctx_sync); }
static cudaError_t sd_stream_wait(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    SD_CALL(own_drv.stream_wait, (CUstream)s, (CUevent)e, flags);
}
static cudaError_t sd_event_record(cudaEvent_t e, cudaStream_t s) { SD_CALL(own_drv.event_record, (CUevent)e, (CUstream)s); }

static cudaError_t sd_get_device(int *dev)
{
    sd_ready();
    CUdevice d;
    /* No context yet: the runtime's current device is 0 until one is set. */
    if (sd.ctx_device == NULL || sd.ctx_device(&d) != CUDA_SUCCESS)
        d = 0;
    *dev = (int)d;
    return cudaSuccess;
}

static cudaError_t sd_set_device(int dev)
{
    sd_ready();
    CUcontext c = sd_primary(dev);
    if (c == NULL)
        return cudaErrorInvalidDevice;
    return (cudaError_t)sd.ctx_set(c);
}

static cudaError_t sd_device_attr(int *value, enum cudaDeviceAttr attr, int dev)
{
    sd_ready();
    CUdevice d;
    CUresult rc = sd.device_get != NULL && sd.attr != NULL ? sd.device_get(&d, dev) : CUDA_ERROR_NOT_FOUND;
    if (rc == CUDA_SUCCESS)
        rc = sd.attr(value, (CUdevice_attribute)attr, d);
    return (cudaError_t)rc;
}

static cudaError_t sd_no_error(void) { return cudaSuccess; }

static const struct {
    const char *name;
    void *fn;
} stand_ins[] = {
    { "cudaMalloc", (void *)sd_malloc },
    { "cudaFree", (void *)sd_free },
    { "cudaMemGetInfo", (void *)sd_mem_info },
    { "cudaHostAlloc", (void *)sd_host_alloc },
    { "cudaFreeHost", (void *)sd_free_host },
    { "cudaHostRegister", (void *)sd_host_register },
    { "cudaHostUnregister", (void *)sd_host_unregister },
    { "cudaStreamCreateWithFlags", (void *)sd_stream_create },
    { "cudaStreamDestroy", (void *)sd_stream_destroy },
    { "cudaStreamSynchronize", (void *)sd_stream_sync },
    { "cudaStreamWaitEvent", (void *)sd_stream_wait },
    { "cudaEventCreateWithFlags", (void *)sd_event_create },
    { "cudaEventDestroy", (void *)sd_event_destroy },
    { "cudaEventRecord", (void *)sd_event_record },
    { "cudaEventSynchronize", (void *)sd_event_sync },
    { "cudaEventElapsedTime", (void *)sd_event_elapsed },
    { "cudaMemcpy", (void *)sd_memcpy },
    { "cudaMemcpyAsync", (void *)sd_memcpy_async },
    { "cudaMemsetAsync", (void *)sd_memset_async },
    { "cudaDeviceSynchronize", (void *)sd_device_sync },
    { "cudaGetDevice", (void *)sd_get_device },
    { "cudaSetDevice", (void *)sd_set_device },
    { "cudaDeviceGetAttribute", (void *)sd_device_attr },
    { "cudaGetLastError", (void *)sd_no_error },
    { "cudaPeekAtLastError", (void *)sd_no_error },
};

/* The stand-in for runtime entry `name`, or NULL (none: the caller does without). */
static void *stand_in(const char *name)
{
    for (size_t i = 0; i < sizeof stand_ins / sizeof stand_ins[0]; i++)
        if (strcmp(stand_ins[i].name, name) == 0) {
            static int said;
            if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
                FT_INFO("no CUDA runtime in this process that FlexTensor can call (%s not found; a runtime linked "
                        "statically, as JAX's XLA links it): FlexTensor makes its own calls through the driver",
                        name);
            return stand_ins[i].fn;
        }
    return NULL;
}

void *own_rt(const char *name)
{
    void *f = ft_shim_real_dlsym(RTLD_NEXT, name);
    if (f == NULL)
        f = ft_shim_loaded_symbol("libcudart.so.13", name);
    return f != NULL ? f : stand_in(name);
}

void *own_rt_fn(ft_shim_fn_t fn)
{
    static void *cache[FT_FN_COUNT];
    void *f = ft_shim_real_quiet(fn);
    if (f != NULL)
        return f;
    if ((f = __atomic_load_n(&cache[fn], __ATOMIC_RELAXED)) == NULL) {
        f = stand_in(ft_shim_fn_name(fn));
        __atomic_store_n(&cache[fn], f, __ATOMIC_RELAXED);
    }
    return f;
}

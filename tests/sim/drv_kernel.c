/* drv_kernel.c - the kernel registry and the driver launch paths.
 *
 * A registered kernel is a host function run on a stream's worker. Its handle is a
 * CUkernel (what cudaGetKernel / __cudaGetKernel return and what the runtime passes
 * to cuLaunchKernel, cast to CUfunction); cuKernelGetFunction / cuModuleGetFunction
 * give a distinct CUfunction view of it. As measured on the H200, cuKernelGetName and
 * cuKernelGetParamInfo work on the CUkernel, while cuFuncGetName and
 * cuFuncGetParamInfo fail with CUDA_ERROR_INVALID_HANDLE on it. Arguments are copied
 * at enqueue, laid out at their natural-alignment offsets.
 */
#define _GNU_SOURCE
#include "drv_internal.h"

#include "core/checksum.h"

#include <cupti_driver_cbid.h>
#include <generated_cuda_meta.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const void *key;       /* the handle value */
    sim_kernel_t *k;
    int is_func;
    UT_hash_handle hh;
} handle_t;

/* Registry, under g_sim.lock. Kernels are never unregistered, so a sim_kernel_t found
 * under the lock may be used after it is released. */
static sim_kernel_t *g_by_stub;
static handle_t *g_handles;

static size_t natural_align(size_t size)
{
    size_t a = 1;
    while (a < 8 && size % (a * 2) == 0)
        a *= 2;
    return a;
}

static int add_handle(const void *key, sim_kernel_t *k, int is_func)
{
    handle_t *h = calloc(1, sizeof *h);
    if (!h)
        return -1;
    h->key = key;
    h->k = k;
    h->is_func = is_func;
    HASH_ADD(hh, g_handles, key, sizeof(void *), h);
    return 0;
}

int sim_register_kernel(const void *stub, const simcuda_kernel_desc_t *desc, const size_t *param_align)
{
    if (!stub || !desc || !desc->name || !desc->fn || desc->nparams < 0 ||
        desc->nparams > SIMCUDA_MAX_PARAMS)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < desc->nparams; i++) {
        size_t al = param_align ? param_align[i] : 0;
        if (desc->param_size[i] == 0 || (al && (al & (al - 1))))
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_sim.lock);
    sim_kernel_t *k;
    HASH_FIND(hh_stub, g_by_stub, &stub, sizeof stub, k);
    if (k) {
        /* Registering the same stub again is harmless if it is the same kernel. */
        int same = strcmp(k->name, desc->name) == 0 && k->desc.fn == desc->fn;
        pthread_mutex_unlock(&g_sim.lock);
        return same ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    k = calloc(1, sizeof *k);
    char *name = strdup(desc->name);
    if (!k || !name) {
        free(k);
        free(name);
        pthread_mutex_unlock(&g_sim.lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    k->magic = SIM_MAGIC_KERNEL;
    k->desc = *desc;
    k->name = name;
    k->desc.name = name;
    k->stub = stub;
    k->func.magic = SIM_MAGIC_FUNC;
    k->func.k = k;
    size_t off = 0;
    for (int i = 0; i < desc->nparams; i++) {
        size_t al = param_align && param_align[i] ? param_align[i] : natural_align(desc->param_size[i]);
        off = (off + al - 1) / al * al;
        k->offset[i] = off;
        off += desc->param_size[i];
    }
    k->argsize = off;
    HASH_ADD(hh_stub, g_by_stub, stub, sizeof(void *), k);
    int rc = add_handle(k, k, 0) | add_handle(&k->func, k, 1);
    pthread_mutex_unlock(&g_sim.lock);
    return rc ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

sim_kernel_t *sim_kernel_from_handle(const void *h, int *is_func)
{
    handle_t *e;
    HASH_FIND(hh, g_handles, &h, sizeof(void *), e);
    if (!e)
        return NULL;
    if (is_func)
        *is_func = e->is_func;
    return e->k;
}

CUkernel sim_kernel_by_stub(const void *stub)
{
    pthread_mutex_lock(&g_sim.lock);
    sim_kernel_t *k;
    HASH_FIND(hh_stub, g_by_stub, &stub, sizeof stub, k);
    pthread_mutex_unlock(&g_sim.lock);
    return (CUkernel)k;
}

const char *sim_kernel_name(const void *handle)
{
    pthread_mutex_lock(&g_sim.lock);
    sim_kernel_t *k = sim_kernel_from_handle(handle, NULL);
    pthread_mutex_unlock(&g_sim.lock);
    return k ? k->name : NULL;
}

CUfunction sim_function_of(CUkernel kernel)
{
    int is_func = 1;
    pthread_mutex_lock(&g_sim.lock);
    sim_kernel_t *k = sim_kernel_from_handle(kernel, &is_func);
    pthread_mutex_unlock(&g_sim.lock);
    return k && !is_func ? (CUfunction)&k->func : NULL;
}

static sim_kernel_t *kernel_by_name(const char *name)
{
    for (sim_kernel_t *k = g_by_stub; k; k = k->hh_stub.next)
        if (strcmp(k->name, name) == 0)
            return k;
    return NULL;
}

/* ------------------------------------------------------------------ launch */

CUresult sim_kernel_op_new(CUfunction f, const sim_launch_dims_t *d, void **params, void **extra, sim_op_t **out,
                           uint64_t *cost)
{
    int is_func = 0;
    pthread_mutex_lock(&g_sim.lock);
    sim_kernel_t *k = sim_kernel_from_handle(f, &is_func);
    pthread_mutex_unlock(&g_sim.lock);
    if (!k)
        return CUDA_ERROR_INVALID_HANDLE;
    if (is_func) /* a launch loads a partly loaded function */
        __atomic_store_n(&k->func_loaded, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 3; i++)
        if (d->grid[i] == 0 || d->block[i] == 0)
            return CUDA_ERROR_INVALID_VALUE;
    if ((uint64_t)d->block[0] * d->block[1] * d->block[2] > 1024 || d->block[2] > 64 ||
        d->grid[1] > 65535 || d->grid[2] > 65535 || d->grid[0] > 2147483647u)
        return CUDA_ERROR_INVALID_VALUE;
    if (d->smem > 232448)
        return CUDA_ERROR_INVALID_VALUE;

    /* Copy the arguments now: the caller may reuse its buffers at once. */
    const void *buf = NULL;
    size_t bufsize = 0;
    int have_buf = 0;
    if (extra && extra[0] == CU_LAUNCH_PARAM_END)
        extra = NULL;  /* an empty list: the H200 driver then uses kernelParams */
    if (extra) {
        if (params)
            return CUDA_ERROR_INVALID_VALUE;
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
                buf = extra[i + 1];
                have_buf |= 1;
            } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
                bufsize = extra[i + 1] ? *(size_t *)extra[i + 1] : 0;
                have_buf |= 2;
            } else {
                return CUDA_ERROR_INVALID_VALUE;
            }
        }
        if (have_buf != 3 || bufsize < k->argsize || (!buf && bufsize))
            return CUDA_ERROR_INVALID_VALUE;
    } else if (!params && k->desc.nparams > 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    sim_op_t *op = sim_op_new(SIM_OP_KERNEL);
    size_t n = extra ? bufsize : k->argsize;
    void *argbuf = malloc(n ? n : 1);
    void **args = calloc((size_t)k->desc.nparams + 1, sizeof(void *));
    if (!op || !argbuf || !args) {
        free(op);
        free(argbuf);
        free(args);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (extra) {
        memcpy(argbuf, buf, bufsize);
    } else {
        for (int i = 0; i < k->desc.nparams; i++)
            memcpy((char *)argbuf + k->offset[i], params[i], k->desc.param_size[i]);
    }
    for (int i = 0; i < k->desc.nparams; i++)
        args[i] = (char *)argbuf + k->offset[i];
    op->u.kern.k = k;
    op->u.kern.argbuf = argbuf;
    op->u.kern.argbytes = n;
    op->u.kern.args = args;
    for (int i = 0; i < 3; i++) {
        op->u.kern.dims.grid[i] = d->grid[i];
        op->u.kern.dims.block[i] = d->block[i];
    }
    op->u.kern.dims.shared_mem = d->smem;
    *cost = k->desc.cost ? k->desc.cost(args, &op->u.kern.dims) : k->desc.cost_ns;
    *out = op;
    return CUDA_SUCCESS;
}

/* A kernel given an address of another device's memory that this device was not
 * granted (cuMemSetAccess on a virtual-memory mapping; the simulator has no other peer
 * access) faults when it runs, as one reading it would on a GPU. */
void sim_kernel_op_check_peer(sim_op_t *op, const sim_dev_t *dev)
{
    const sim_kernel_t *k = op->u.kern.k;
    for (int i = 0; i < k->desc.nparams && op->u.kern.foreign == 0; i++) {
        uint64_t v;
        if (k->desc.param_size[i] != 8)
            continue;
        memcpy(&v, op->u.kern.args[i], 8);
        sim_dev_t *owner = sim_mem_device_of((const void *)(uintptr_t)v);
        if (owner != NULL && owner != dev && sim_mem_granted((const void *)(uintptr_t)v, dev) != 1) {
            op->u.kern.foreign = v;
            op->u.kern.foreign_dev = owner->ordinal;
        }
    }
}

static CUresult launch(CUfunction f, const sim_launch_dims_t *d, CUstream stream, void **params, void **extra)
{
    sim_op_t *op;
    uint64_t cost;
    CUresult r = sim_kernel_op_new(f, d, params, extra, &op, &cost);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&g_sim.lock);
    struct CUstream_st *s;
    r = sim_stream_resolve(stream, &s);
    /* A stream of another context is not a handle this context knows (the driver's
     * CUDA_ERROR_INVALID_HANDLE, "invalid resource handle" through the runtime). */
    if (r == CUDA_SUCCESS && s->ctx != sim_current_ctx())
        r = CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS)
        sim_kernel_op_check_peer(op, s->ctx->dev);
    CUresult how = r == CUDA_SUCCESS ? sim_capture_enqueue_check(s) : r;
    if (how == SIM_CAPTURED)
        sim_capture_node(s, op, SIM_ENG_COMPUTE, cost);
    else if (how == CUDA_SUCCESS)
        sim_enqueue_kernel(s, op, cost);
    else
        r = how;
    pthread_mutex_unlock(&g_sim.lock);
    if (r != CUDA_SUCCESS)
        sim_op_free(op);
    return r;
}

static CUresult launch_kernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                              unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                              unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);

SIM_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX,
                                           unsigned int blockDimY, unsigned int blockDimZ,
                                           unsigned int sharedMemBytes, CUstream hStream,
                                           void **kernelParams, void **extra)
{
    return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                         hStream, kernelParams, extra);
}

/* The driver's cuLaunchKernel reached as a library reaching the driver through a
 * private table would: not through the exported symbol, so an interposer does not
 * see the call, while CUPTI's callbacks still fire. */
SIM_EXPORT void *simcudaUninterposed(const char *name)
{
    return name != NULL && strcmp(name, "cuLaunchKernel") == 0 ? (void *)launch_kernel : NULL;
}

static CUresult launch_kernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                              unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                              unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    cuLaunchKernel_params p = {f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, extra};
    simcu_call_t c;
    CUresult r;
    r = sim_api_enter(&c, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                      "cuLaunchKernel", &p, sim_kernel_name(f), &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        sim_launch_dims_t d = {{gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes};
        r = launch(f, &d, hStream, kernelParams, extra);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                      unsigned int gridDimZ, unsigned int blockDimX,
                                                      unsigned int blockDimY, unsigned int blockDimZ,
                                                      unsigned int sharedMemBytes, CUstream hStream,
                                                      void **kernelParams)
{
    cuLaunchCooperativeKernel_params p = {f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                          blockDimZ, sharedMemBytes, hStream, kernelParams};
    simcu_call_t c;
    CUresult r;
    r = sim_api_enter(&c, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
                      "cuLaunchCooperativeKernel", &p, sim_kernel_name(f), &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        sim_launch_dims_t d = {{gridDimX, gridDimY, gridDimZ}, {blockDimX, blockDimY, blockDimZ}, sharedMemBytes};
        r = launch(f, &d, hStream, kernelParams, NULL);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                             void **extra)
{
    cuLaunchKernelEx_params p = {config, f, kernelParams, extra};
    simcu_call_t c;
    CUresult r;
    r = sim_api_enter(&c, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
                      "cuLaunchKernelEx", &p, sim_kernel_name(f), &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        if (!config || (config->numAttrs && !config->attrs)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            sim_launch_dims_t d = {{config->gridDimX, config->gridDimY, config->gridDimZ},
                                   {config->blockDimX, config->blockDimY, config->blockDimZ},
                                   config->sharedMemBytes};
            r = launch(f, &d, config->hStream, kernelParams, extra);
        }
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ metadata */

/* Looks a handle up; `want_func`: 1 only CUfunction views, 0 only CUkernels, -1 any. */
static CUresult handle_kernel(const void *h, int want_func, sim_kernel_t **out)
{
    int is_func = 0;
    pthread_mutex_lock(&g_sim.lock);
    sim_kernel_t *k = sim_kernel_from_handle(h, &is_func);
    pthread_mutex_unlock(&g_sim.lock);
    if (!k || (want_func >= 0 && is_func != want_func))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = k;
    return CUDA_SUCCESS;
}

/* FTSIM_NO_PARAM_INFO=NAME: the driver gives no parameter layout for the kernels whose
 * name holds NAME (CUDA_ERROR_INVALID_VALUE at every index, as for a kernel without
 * parameters), as the H100's driver answered for XLA's kernels that take pointers. */
static int no_param_info(const sim_kernel_t *k)
{
    const char *v = getenv("FTSIM_NO_PARAM_INFO");
    return v != NULL && *v != '\0' && k->name != NULL && strstr(k->name, v) != NULL;
}

static CUresult param_info(sim_kernel_t *k, size_t index, size_t *off, size_t *size)
{
    if ((int)index >= k->desc.nparams || index >= SIMCUDA_MAX_PARAMS || no_param_info(k))
        return CUDA_ERROR_INVALID_VALUE;
    if (off)
        *off = k->offset[index];
    if (size)
        *size = k->desc.param_size[index];
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc)
{
    cuKernelGetName_params p = {name, hfunc};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuKernelGetName, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = name ? handle_kernel(hfunc, 0, &k) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *name = k->name;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                                                 size_t *paramSize)
{
    cuKernelGetParamInfo_params p = {kernel, paramIndex, paramOffset, paramSize};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuKernelGetParamInfo, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = handle_kernel(kernel, 0, &k);
        if (r == CUDA_SUCCESS)
            r = param_info(k, paramIndex, paramOffset, paramSize);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
    cuFuncGetName_params p = {name, hfunc};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuFuncGetName, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = name ? handle_kernel(hfunc, 1, &k) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *name = k->name;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                               size_t *paramSize)
{
    cuFuncGetParamInfo_params p = {func, paramIndex, paramOffset, paramSize};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuFuncGetParamInfo, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = handle_kernel(func, 1, &k);
        if (r == CUDA_SUCCESS && g_sim.opt.LAZY_FUNCS && !__atomic_load_n(&k->func_loaded, __ATOMIC_ACQUIRE))
            r = CUDA_ERROR_INVALID_VALUE; /* partly loaded: no layout yet */
        if (r == CUDA_SUCCESS)
            r = param_info(k, paramIndex, paramOffset, paramSize);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    cuFuncIsLoaded_params p = {state, function};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuFuncIsLoaded, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = state ? handle_kernel(function, 1, &k) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *state = !g_sim.opt.LAZY_FUNCS || __atomic_load_n(&k->func_loaded, __ATOMIC_ACQUIRE)
                         ? CU_FUNCTION_LOADING_STATE_LOADED
                         : CU_FUNCTION_LOADING_STATE_UNLOADED;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuFuncLoad(CUfunction function)
{
    cuFuncLoad_params p = {function};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuFuncLoad, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = handle_kernel(function, 1, &k);
        if (r == CUDA_SUCCESS)
            __atomic_store_n(&k->func_loaded, 1, __ATOMIC_RELEASE);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    cuKernelGetFunction_params p = {pFunc, kernel};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuKernelGetFunction, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = pFunc ? handle_kernel(kernel, 0, &k) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *pFunc = (CUfunction)&k->func;
    }
    sim_api_exit(&c);
    return r;
}

static int func_attribute(CUfunction_attribute a, sim_kernel_t *k)
{
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: return 32;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: return 90;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: return 90;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: return 232448;
    default: (void)k; return 0;
    }
}

SIM_EXPORT CUresult CUDAAPI cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
                                                 CUdevice dev)
{
    cuKernelGetAttribute_params p = {pi, attrib, kernel, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuKernelGetAttribute, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = pi ? handle_kernel(kernel, 0, &k) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *pi = func_attribute(attrib, k);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                                 CUdevice dev)
{
    cuKernelSetAttribute_params p = {attrib, val, kernel, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuKernelSetAttribute, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = handle_kernel(kernel, 0, &k);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    cuFuncGetAttribute_params p = {pi, attrib, hfunc};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuFuncGetAttribute, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = pi ? handle_kernel(hfunc, -1, &k) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            *pi = func_attribute(attrib, k);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    cuFuncSetAttribute_params p = {hfunc, attrib, value};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuFuncSetAttribute, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        sim_kernel_t *k;
        r = handle_kernel(hfunc, -1, &k);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ libraries, modules */

/* One pseudo library / module stands for "every registered kernel": a simulated
 * image carries no code, so loading any data yields it and lookups go by name. */
static int g_library_token, g_module_token;

SIM_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                              void **jitOptionsValues, unsigned int numJitOptions,
                                              CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                              unsigned int numLibraryOptions)
{
    cuLibraryLoadData_params p = {library, code, jitOptions, jitOptionsValues, numJitOptions,
                                  libraryOptions, libraryOptionValues, numLibraryOptions};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuLibraryLoadData, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!library)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *library = (CUlibrary)&g_library_token;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
    cuLibraryUnload_params p = {library};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuLibraryUnload, &p, &r, 0);
    if (r == CUDA_SUCCESS && library != (CUlibrary)&g_library_token)
        r = CUDA_ERROR_INVALID_HANDLE;
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    cuLibraryGetKernel_params p = {pKernel, library, name};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuLibraryGetKernel, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!pKernel || !name) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (library != (CUlibrary)&g_library_token) {
            r = CUDA_ERROR_INVALID_HANDLE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            sim_kernel_t *k = kernel_by_name(name);
            pthread_mutex_unlock(&g_sim.lock);
            if (k)
                *pKernel = (CUkernel)k;
            else
                r = CUDA_ERROR_NOT_FOUND;
        }
    }
    sim_api_exit(&c);
    return r;
}

/* FlexTensor's own kernels, which it loads as PTX text (core/checksum_ptx.h): a
 * simulated image carries no code, so the device runs their C reference, registered
 * under the PTX entry's name the first time a module is loaded. */
static void builtin_checksum(void **args, const simcuda_dims_t *dims)
{
    const void *p = *(const void **)args[0];
    uint64_t n = *(uint64_t *)args[1], salt = *(uint64_t *)args[2];
    uint64_t *out = *(uint64_t **)args[3];
    *out += ft_checksum_host(p, n, salt);
}

/* A read-only pass at the H200's HBM read rate, about 3 TB/s (3000 bytes per ns),
 * plus a small kernel's fixed cost. */
static uint64_t builtin_checksum_cost(void **args, const simcuda_dims_t *dims)
{
    return *(uint64_t *)args[1] * 8 / 3000 + 2000;
}

/* FT_COPY_BACK_KERNEL: the words at src to dst (a host store, pinned, at its own
 * address under unified addressing) when the sum differs from the expected one. */
static void builtin_copy_back(void **args, const simcuda_dims_t *dims)
{
    const void *src = *(const void **)args[0];
    uint64_t n = *(uint64_t *)args[1];
    const uint64_t *sum = *(const uint64_t **)args[2];
    uint64_t expected = *(uint64_t *)args[3];
    void *dst = *(void **)args[4];
    if (*sum != expected)
        memcpy(dst, src, n * 8);
}

/* A read of the sum, a small kernel's fixed cost: the cost is set at enqueue, before
 * the sum is made, and the copy it makes is rare (a unit changed on the device). */
static uint64_t builtin_copy_back_cost(void **args, const simcuda_dims_t *dims)
{
    return 2000;
}

static const char builtin_checksum_stub, builtin_copy_back_stub;

static void register_builtins(void)
{
    static const simcuda_kernel_desc_t d = { FT_CHECKSUM_KERNEL, builtin_checksum, builtin_checksum_cost,
                                             0, 4, { 8, 8, 8, 8 } };
    static const simcuda_kernel_desc_t b = { FT_COPY_BACK_KERNEL, builtin_copy_back, builtin_copy_back_cost,
                                             0, 5, { 8, 8, 8, 8, 8 } };
    sim_register_kernel(&builtin_checksum_stub, &d, NULL);
    sim_register_kernel(&builtin_copy_back_stub, &b, NULL);
}

SIM_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    static pthread_once_t builtins = PTHREAD_ONCE_INIT;
    pthread_once(&builtins, register_builtins);
    cuModuleLoadData_params p = {module, image};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuModuleLoadData, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        sim_load_options();
        if (!module)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (g_sim.opt.NO_JIT)
            r = CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
        else
            *module = (CUmodule)&g_module_token;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    cuModuleUnload_params p = {hmod};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuModuleUnload, &p, &r, 0);
    if (r == CUDA_SUCCESS && hmod != (CUmodule)&g_module_token)
        r = CUDA_ERROR_INVALID_HANDLE;
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    cuModuleGetFunction_params p = {hfunc, hmod, name};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuModuleGetFunction, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!hfunc || !name) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (hmod != (CUmodule)&g_module_token) {
            r = CUDA_ERROR_INVALID_HANDLE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            sim_kernel_t *k = kernel_by_name(name);
            pthread_mutex_unlock(&g_sim.lock);
            if (k)
                *hfunc = (CUfunction)&k->func;
            else
                r = CUDA_ERROR_NOT_FOUND;
        }
    }
    sim_api_exit(&c);
    return r;
}

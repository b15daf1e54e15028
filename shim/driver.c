/* driver.c - reaching the CUDA driver the way libraries do, and handing them our
 * wrappers: the wrapped dlsym (libcublasLt and libcudart dlopen libcuda and look up
 * its entry points themselves) and the wrapped cuGetProcAddress (how libcudart,
 * cuBLAS, Triton and XLA get every other driver function).
 *
 * Owns: the real dlsym and the real cuGetProcAddress.
 *
 * Limitation: dlsym(RTLD_NEXT, ...) called by the application resolves relative to
 * libflextensor.so, not to the caller, once it passes through this wrapper.
 */
#define _GNU_SOURCE
#include "shim/shim.h"

#include <dlfcn.h>
#include <string.h>

#include "core/log.h"

#undef cuGetProcAddress

typedef void *(*dlsym_fn_t)(void *, const char *);
typedef CUresult (*gpa_v2_fn_t)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn_t)(const char *, void **, int, cuuint64_t);

static _Atomic(dlsym_fn_t) real_dlsym;
static _Atomic(gpa_v2_fn_t) real_gpa_v2;
static _Atomic(gpa_v1_fn_t) real_gpa_v1;

void *ft_shim_real_dlsym(void *handle, const char *name)
{
    dlsym_fn_t fn = atomic_load_explicit(&real_dlsym, memory_order_relaxed);
    if (fn == NULL) {
        /* dlvsym is not interposed; glibc 2.34 moved dlsym into libc. */
        fn = (dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (fn == NULL)
            fn = (dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        atomic_store_explicit(&real_dlsym, fn, memory_order_relaxed);
    }
    return fn ? fn(handle, name) : NULL;
}

static void *libcuda_symbol(const char *name)
{
    void *p = ft_shim_real_dlsym(RTLD_NEXT, name);
    if (p == NULL) {
        /* libcudart dlopens libcuda RTLD_LOCAL: look in it directly. */
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL) {
            p = ft_shim_real_dlsym(h, name);
            dlclose(h);
        }
    }
    return p;
}

static gpa_v2_fn_t get_real_gpa_v2(void)
{
    gpa_v2_fn_t fn = atomic_load_explicit(&real_gpa_v2, memory_order_relaxed);
    if (fn == NULL) {
        fn = (gpa_v2_fn_t)libcuda_symbol("cuGetProcAddress_v2");
        atomic_store_explicit(&real_gpa_v2, fn, memory_order_relaxed);
    }
    return fn;
}

FT_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status);

void *ft_shim_driver_proc(const char *base, int abi_version)
{
    gpa_v2_fn_t gpa = get_real_gpa_v2();
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    if (gpa == NULL || gpa(base, &fn, abi_version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

FT_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

/* What to hand out for a driver function the caller asked for. */
static void *substitute(const char *symbol, int version, cuuint64_t flags, void *real)
{
    if (!ft_shim_active || real == NULL || symbol == NULL)
        return real;
    if (strcmp(symbol, "cuGetProcAddress") == 0 && version < 12000) {
        /* The CUDA 11.3 ABI (four arguments) for callers built against CUDA 11. */
        if (real != (void *)cuGetProcAddress)
            atomic_store_explicit(&real_gpa_v1, (gpa_v1_fn_t)real, memory_order_relaxed);
        return (void *)cuGetProcAddress;
    }
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        /* A driver that takes its own exported address may hand out ours (we are
         * first in the global scope): never record our own function as the real one. */
        if (real != (void *)cuGetProcAddress_v2)
            atomic_store_explicit(&real_gpa_v2, (gpa_v2_fn_t)real, memory_order_relaxed);
        return (void *)cuGetProcAddress_v2;
    }
    void *w = ft_shim_wrap_driver_proc(symbol, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0,
                                       real);
    FT_TRACE("cuGetProcAddress(%s, %d, %#llx): %s", symbol, version, (unsigned long long)flags,
             w ? "wrapped" : "passed");
    return w ? w : real;
}

FT_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    gpa_v2_fn_t real = get_real_gpa_v2();
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = substitute(symbol, cudaVersion, flags, *pfn);
    return r;
}

/* The CUDA 11.3 ABI of the same function, still exported by libcuda. */
FT_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    gpa_v1_fn_t real = atomic_load_explicit(&real_gpa_v1, memory_order_relaxed);
    if (real == NULL) {
        real = (gpa_v1_fn_t)libcuda_symbol("cuGetProcAddress");
        atomic_store_explicit(&real_gpa_v1, real, memory_order_relaxed);
    }
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = substitute(symbol, cudaVersion, flags, *pfn);
    return r;
}

FT_EXPORT void *dlsym(void *handle, const char *symbol)
{
    void *p = ft_shim_real_dlsym(handle, symbol);
    if (p == NULL || !ft_shim_active || symbol[0] != 'c' || symbol[1] != 'u')
        return p;
    /* RTLD_DEFAULT finds our own exports first: never record one as the real one. */
    if (p == (void *)cuGetProcAddress_v2 || p == (void *)cuGetProcAddress)
        return p;
    if (strcmp(symbol, "cuGetProcAddress_v2") == 0) {
        atomic_store_explicit(&real_gpa_v2, (gpa_v2_fn_t)p, memory_order_relaxed);
        return (void *)cuGetProcAddress_v2;
    }
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        atomic_store_explicit(&real_gpa_v1, (gpa_v1_fn_t)p, memory_order_relaxed);
        return (void *)cuGetProcAddress;
    }
    void *w = ft_shim_wrap_driver_symbol(symbol, p);
    FT_TRACE("dlsym(%p, %s): %s", handle, symbol, w ? "wrapped" : "passed");
    return w ? w : p;
}

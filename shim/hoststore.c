/* hoststore.c - the host memory that streamed regions and FT_SPILL's allocations live
 * in while not on the device: FT_PINNED_MEMORY (pinned or pageable) and
 * FT_PINNED_MEMORY_MODE (cudaHostAlloc, or page-aligned memory registered in place).
 *
 * Owns no state. It knows nothing of units: copies and sets served on a unit's host
 * store are residency.c's (res_host_copy, res_host_set). It calls cuda.c only. */
#define _GNU_SOURCE
#include "shim/engine.h"

typedef cudaError_t (*host_register_fn)(void *, size_t, unsigned int);
typedef cudaError_t (*host_free_fn)(void *);

const char *host_store_kind(void)
{
    if (!cfgp->pinned_memory)
        return "pageable host memory (FT_PINNED_MEMORY=false)";
    return cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_HOST_REGISTER
         ? "pinned host memory (registered in place)" : "pinned host memory";
}

void *host_store_alloc(size_t size)
{
    void *p = NULL;
    if (cfgp->pinned_memory && cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC) {
        return own_host_alloc(&p, size) == cudaSuccess ? p : NULL;
    }
    size_t page = 4096;
    if (posix_memalign(&p, page, (size + page - 1) / page * page) != 0)
        return NULL;
    if (!cfgp->pinned_memory)
        return p;
    host_register_fn reg = (host_register_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaHostRegister");
    cudaError_t pending = own_pending();
    if (reg == NULL || own_call(reg(p, size, cudaHostRegisterDefault), pending) != cudaSuccess) {
        free(p);
        return NULL;
    }
    return p;
}

void host_store_free(void *p)
{
    if (p == NULL)
        return;
    if (cfgp->pinned_memory && cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC) {
        host_free_fn f = (host_free_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaFreeHost");
        if (f != NULL)
            f(p);
        return;
    }
    if (cfgp->pinned_memory) {
        host_free_fn unreg = (host_free_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaHostUnregister");
        if (unreg != NULL)
            unreg(p);
    }
    free(p);
}

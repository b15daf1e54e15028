/* hoststore.c - the host stores of streamed regions (FT_PINNED_MEMORY,
 * FT_PINNED_MEMORY_MODE), and copies and sets served on them while their unit is not
 * loaded.
 *
 * Owns no state: host_store_at, host_store_copy and host_store_set run under res.lock
 * (the caller's engine_enter took it). */
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

/* A copy between host memory and a streamed unit that is not loaded is served from
 * the unit's host store, after the stream's earlier work, instead of loading the unit
 * (res.lock held by the caller). A write makes the unit's checksum reference stale: its
 * next eviction copies it back. 1 when served. */
/* Where the host store holds [dev, dev + n) of a streamed unit that is not loaded, once
 * the stream's earlier work is done; NULL when it does not (the call then loads the
 * unit as usual). res.lock held. */
static char *host_store_at(uint64_t dev, size_t n, cudaStream_t s, res_unit_t **unit)
{
    ft_region_t reg;
    if (engine_phase() != PHASE_STREAMING || n == 0 || !ft_regions_find(regions, dev, &reg) || reg.id >= res.n_ids ||
        res.by_id[reg.id] < 0)
        return NULL;
    res_region_t *r = &res.regions[res.by_id[reg.id]];
    res_unit_t *un = &res.units[r->unit];
    if (un->loaded || r->host == NULL || dev < r->va || dev + n > r->va + r->size)
        return NULL;
    if (REAL(cudaStreamSynchronize)(s) != cudaSuccess)
        return NULL;
    *unit = un;
    return (char *)r->host + (dev - r->va);
}

int host_store_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost)
        return 0;
    res_unit_t *un;
    char *h = host_store_at((uint64_t)(uintptr_t)(kind == cudaMemcpyHostToDevice ? dst : src), n, s, &un);
    if (h == NULL)
        return 0;
    if (kind == cudaMemcpyHostToDevice) {
        memcpy(h, src, n);
        un->ref_valid = 0;
    } else {
        memcpy(dst, h, n);
    }
    res.host_copies++;
    return 1;
}

/* A memset of count elements of `width` bytes (1 or 4) into a streamed unit that is not
 * loaded, done on its host store (the next load copies it in; the checksum reference
 * is stale, so its next eviction copies it back). 1 when served. */
int host_store_set(uint64_t dev, unsigned v, int width, size_t count, cudaStream_t s)
{
    res_unit_t *un;
    char *h = host_store_at(dev, count * (size_t)width, s, &un);
    if (h == NULL)
        return 0;
    if (width == 1) {
        memset(h, (int)(v & 0xff), count);
    } else {
        uint32_t w = v;
        for (size_t i = 0; i < count; i++)
            memcpy(h + 4 * i, &w, 4);
    }
    un->ref_valid = 0;
    res.host_copies++;
    return 1;
}

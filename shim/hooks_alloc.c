/* hooks_alloc.c - the interposed allocation entry points (cudaMalloc, cudaFree, their
 * asynchronous and driver flavours, cudaMemGetInfo / cuMemGetInfo): each allocation
 * admitted by the budget (never refused by it: one the budget cannot hold is served
 * past it, and only the device's own failure reaches the application), served from
 * virtual memory when large enough, and tracked in the region table; each free
 * untracked and counted as held until it returns.
 *
 * Owns no state of its own. It calls budget.c (admissions, frees under way), reload.c
 * (the plan's weights freed), profiling.c (the table's peak), device.c, vmm.c (passing
 * down FT_SPILL's placement, spill_placement) and residency.c (res_vmm_free and
 * res_vmm_free_program, which free through vmm.c under res.lock). */
#define _GNU_SOURCE
#include "shim/engine.h"

/* --- allocation --------------------------------------------------------------------- */

static void track_one(void *p, size_t size, uint32_t flags);

/* Not a region flag: pieces that continue an allocation tracked before (the program's
 * mappings end to end, alloc_program_mapping), whose first piece is not the first. */
#define TRACK_CONTINUES (1u << 31)

/* p's region, or its pieces' (FT_REGION_PIECE: one a granule, vmm_alloc's). */
static void track(void *p, size_t size, uint32_t flags)
{
    size_t g = vmm_gran();
    int first = !(flags & TRACK_CONTINUES);
    flags &= ~(uint32_t)TRACK_CONTINUES;
    if (p == NULL || size == 0 || !(flags & FT_REGION_PIECE) || g == 0) {
        track_one(p, size, flags & ~(uint32_t)(FT_REGION_PIECE | FT_REGION_PIECE_FIRST));
        return;
    }
    for (size_t off = 0; off < size; off += g)
        track_one((char *)p + off, size - off < g ? size - off : g,
                  flags | (off == 0 && first ? FT_REGION_PIECE_FIRST : 0));
}

static void track_one(void *p, size_t size, uint32_t flags)
{
    if (p == NULL || size == 0)
        return;
    int64_t id = ft_regions_insert(regions, (uint64_t)(uintptr_t)p, size, flags, 0);
    if (id == 1)
        outside_sample("the first allocation", -1, 0);
    if (id >= 0)
        profile_note_tracked();
    if (id > 0)
        savedprof_region((uint32_t)id, size); /* a saved profile's weight sizes */
    if (id < 0)
        FT_LOG_CAPPED(FT_LOG_WARN, 5, "region %p (%zu bytes) not tracked: %s", p, size,
                      id == -17 ? "overlaps a live region" : "out of memory");
}

/* After the allocation budget_admit let through (adm its answer): p (NULL when it
 * failed) is tracked, then the budget's reservation goes. */
static void allocated(int adm, uint64_t size, void *p, uint32_t flags)
{
    if (p != NULL)
        track(p, size, flags);
    admit_done(adm, size, p != NULL);
}

/* A region taken out of the table: discovery and reload.c let go of it. */
static void forgotten(const ft_region_t *r)
{
    ft_disc_region_freed(disc, r->id);
    reload_note_free(r->id); /* most of the plan's weights gone: reload.c */
}

static void untrack(const void *p)
{
    ft_region_t r;
    if (p == NULL || ft_regions_remove(regions, (uint64_t)(uintptr_t)p, &r) != 0)
        return;
    /* An allocation served in pieces: the ones after the first go too. */
    ft_region_t n;
    for (;;) {
        forgotten(&r);
        if (!piece_after(&r, &n) || ft_regions_remove(regions, n.base, &r) != 0)
            break;
    }
}

/* Whether an allocation of size bytes is served in pieces (vmm_alloc): larger than
 * half the budget, it could not stream as one unit (two slots of it would not fit),
 * and one allocation may hold every weight of a model (transformers' from_pretrained
 * with device_map). */
static int wants_pieces(size_t size)
{
    static size_t total; /* the device's memory, asked once (atomic) */
    if (size < (4u << 20))
        return 0; /* two granules at least */
    size_t t = __atomic_load_n(&total, __ATOMIC_RELAXED), free_b = 0;
    if (t == 0 && REAL(cudaMemGetInfo) != NULL && REAL(cudaMemGetInfo)(&free_b, &t) == cudaSuccess)
        __atomic_store_n(&total, t, __ATOMIC_RELAXED);
    /* Not spill_budget(): FT_SPILL's budget, once set, says it holds one. */
    uint64_t budget = t != 0 ? configured_budget(t) : 0;
    return budget != 0 && size > budget / 2;
}

/* An allocation as the budget admits it (budget_admit) and, when large enough, as
 * virtual memory serves it with FT_SPILL's placement: cudaMalloc and the driver's
 * cuMemAlloc_v2 both take this path (XLA's allocator and programs on the driver API
 * allocate their weights through the latter). */
typedef struct {
    int adm;
    uint32_t flags;    /* FT_REGION_VMM once virtual memory served it */
    uint64_t admitted; /* counted in `admitting` until the region is tracked */
} alloc_t;

/* Admits size bytes, then serves them from virtual memory when it can: cudaSuccess,
 * cudaErrorMemoryAllocation, or another error (out NULL, too small, virtual memory
 * unable), after which the caller makes the real call. */
static cudaError_t alloc_begin(alloc_t *a, void **out, size_t size)
{
    int vmm = out != NULL && vmm_serves(size);
    *a = (alloc_t){ budget_admit(size, !vmm), 0, 0 };
    if (!vmm)
        return cudaErrorNotSupported;
    int pieced = wants_pieces(size);
    cudaError_t rc = vmm_alloc(out, size, pieced, &spill_placement, &a->admitted);
    vmm_t *v = rc == cudaSuccess ? vmm_find((uint64_t)(uintptr_t)*out) : NULL;
    if (rc == cudaSuccess)
        a->flags = FT_REGION_VMM | (v != NULL && v->piece ? FT_REGION_PIECE : 0);
    return rc;
}

/* ... and its end: p (NULL when it failed) tracked, the admission given back. */
static void alloc_end(const alloc_t *a, size_t size, void *p)
{
    allocated(a->adm, size, p, a->flags);
    if (a->admitted > 0) {
        res_lock();
        admitting -= a->admitted;
        pthread_mutex_unlock(&res.lock);
    }
}

cudaError_t ft_hook_rt_malloc(cudaMalloc_fn_t real, void **devPtr, size_t size)
{
    if (!on_managed_device(1))
        return real(devPtr, size);
    alloc_t a;
    cudaError_t rc = alloc_begin(&a, devPtr, size);
    if (rc != cudaSuccess && rc != cudaErrorMemoryAllocation)
        rc = real(devPtr, size);
    alloc_end(&a, size, rc == cudaSuccess ? *devPtr : NULL);
    return rc;
}

cudaError_t ft_hook_rt_free(cudaFree_fn_t real, void *devPtr)
{
    uint64_t bytes = budget_free_begin(devPtr);
    untrack(devPtr);
    cudaError_t rc = res_vmm_free(devPtr) ? cudaSuccess : real(devPtr);
    budget_free_end(bytes);
    return rc;
}

cudaError_t ft_hook_rt_malloc_async(cudaMallocAsync_fn_t real, void **devPtr, size_t size,
                                    cudaStream_t stream)
{
    if (!on_managed_device(1))
        return real(devPtr, size, stream);
    int adm = budget_admit(size, 1);
    cudaError_t rc = real(devPtr, size, stream);
    allocated(adm, size, rc == cudaSuccess ? *devPtr : NULL, 0);
    return rc;
}

cudaError_t ft_hook_rt_malloc_pool_async(cudaMallocFromPoolAsync_fn_t real, void **ptr, size_t size,
                                         cudaMemPool_t pool, cudaStream_t stream)
{
    if (!on_managed_device(1))
        return real(ptr, size, pool, stream);
    int adm = budget_admit(size, 1);
    cudaError_t rc = real(ptr, size, pool, stream);
    allocated(adm, size, rc == cudaSuccess ? *ptr : NULL, 0);
    return rc;
}

cudaError_t ft_hook_rt_free_async(cudaFreeAsync_fn_t real, void *devPtr, cudaStream_t stream)
{
    untrack(devPtr);
    return real(devPtr, stream);
}

CUresult ft_hook_drv_malloc(cuMemAlloc_v2_fn_t real, CUdeviceptr *dptr, size_t n)
{
    if (!on_managed_device(0))
        return real(dptr, n);
    alloc_t a;
    void *p = NULL;
    cudaError_t err = alloc_begin(&a, dptr != NULL ? &p : NULL, n);
    CUresult rc = err == cudaSuccess ? CUDA_SUCCESS
                : err == cudaErrorMemoryAllocation ? CUDA_ERROR_OUT_OF_MEMORY : real(dptr, n);
    if (err == cudaSuccess)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    alloc_end(&a, n, rc == CUDA_SUCCESS ? (void *)(uintptr_t)*dptr : NULL);
    return rc;
}

/* progmap.c: the program's own mapping of size bytes at va (reserved by it), served as
 * an allocation at that address: admitted, from virtual memory in pieces, tracked. Right
 * after another served mapping, its pieces continue that one's allocation (vmm.c's
 * vmm_chain_before): no first piece of its own. */
CUresult alloc_program_mapping(uint64_t va, size_t size)
{
    if (!vmm_serves(size))
        return CUDA_ERROR_NOT_SUPPORTED;
    uint32_t continues = vmm_chain_before(va) != NULL ? TRACK_CONTINUES : 0;
    alloc_t a = { budget_admit(size, 0), FT_REGION_VMM | FT_REGION_PIECE | FT_REGION_PROGRAM | continues, 0 };
    cudaError_t rc = vmm_alloc_at(va, size, 1, &spill_placement, &a.admitted);
    alloc_end(&a, size, rc == cudaSuccess ? (void *)(uintptr_t)va : NULL);
    return rc == cudaSuccess ? CUDA_SUCCESS
         : rc == cudaErrorMemoryAllocation ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
}

/* ... and its unmapping: each piece untracked, released; the address range stays the
 * program's. */
void free_program_mapping(uint64_t va, uint64_t size)
{
    uint64_t bytes = budget_free_begin_bytes(size);
    size_t g = vmm_gran();
    for (uint64_t off = 0; g != 0 && off < size; off += g) {
        ft_region_t r;
        if (ft_regions_remove(regions, va + off, &r) == 0)
            forgotten(&r);
    }
    res_vmm_free_program(va, size);
    budget_free_end(bytes);
}

CUresult ft_hook_drv_free(cuMemFree_v2_fn_t real, CUdeviceptr dptr)
{
    void *p = (void *)(uintptr_t)dptr;
    uint64_t bytes = budget_free_begin(p);
    untrack(p);
    CUresult rc = res_vmm_free(p) ? CUDA_SUCCESS : real(dptr);
    budget_free_end(bytes);
    return rc;
}

CUresult ft_hook_drv_malloc_async(cuMemAllocAsync_fn_t real, CUdeviceptr *dptr, size_t n, CUstream s)
{
    if (!on_managed_device(0))
        return real(dptr, n, s);
    int adm = budget_admit(n, 1);
    CUresult rc = real(dptr, n, s);
    allocated(adm, n, rc == CUDA_SUCCESS ? (void *)(uintptr_t)*dptr : NULL, 0);
    return rc;
}

CUresult ft_hook_drv_free_async(cuMemFreeAsync_fn_t real, CUdeviceptr dptr, CUstream s)
{
    untrack((void *)(uintptr_t)dptr);
    return real(dptr, s);
}

cudaError_t ft_hook_rt_mem_get_info(cudaMemGetInfo_fn_t real, size_t *free_b, size_t *total_b)
{
    cudaError_t err = real(free_b, total_b);
    if (err == cudaSuccess && free_b != NULL && total_b != NULL)
        budget_view(free_b, total_b);
    return err;
}

CUresult ft_hook_drv_mem_get_info(cuMemGetInfo_v2_fn_t real, size_t *free_b, size_t *total_b)
{
    CUresult rc = real(free_b, total_b);
    if (rc == CUDA_SUCCESS && free_b != NULL && total_b != NULL)
        budget_view(free_b, total_b);
    return rc;
}

/* hooks_alloc.c - the interposed allocation entry points (cudaMalloc, cudaFree, their
 * asynchronous and driver flavours, cudaMemGetInfo / cuMemGetInfo): each allocation
 * admitted by the budget, served from virtual memory when large enough, and tracked in
 * the region table; each free untracked and counted as held until it returns.
 *
 * Owns no state of its own. */
#define _GNU_SOURCE
#include "shim/engine.h"

/* --- allocation --------------------------------------------------------------------- */

void track(void *p, size_t size, uint32_t flags)
{
    if (p == NULL || size == 0)
        return;
    int64_t id = ft_regions_insert(regions, (uint64_t)(uintptr_t)p, size, flags, 0);
    if (id == 1)
        outside_sample("the first allocation", -1, 0);
    if (id >= 0 && engine_phase() == PHASE_PROFILING) {
        uint64_t now = device_bytes(), was = __atomic_load_n(&peak_tracked, __ATOMIC_RELAXED);
        while (now > was && !__atomic_compare_exchange_n(&peak_tracked, &was, now, 1, __ATOMIC_RELAXED,
                                                         __ATOMIC_RELAXED))
            ;
    }
    if (id < 0)
        FT_LOG_CAPPED(FT_LOG_WARN, 5, "region %p (%zu bytes) not tracked: %s", p, size,
                      id == -17 ? "overlaps a live region" : "out of memory");
}

static void untrack(const void *p)
{
    ft_region_t r;
    if (p != NULL && ft_regions_remove(regions, (uint64_t)(uintptr_t)p, &r) == 0)
        ft_disc_region_freed(disc, r.id);
}

cudaError_t ft_hook_rt_malloc(cudaMalloc_fn_t real, void **devPtr, size_t size)
{
    if (!on_managed_device(1))
        return real(devPtr, size);
    int vmm = devPtr != NULL && vmm_min_bytes != 0 && size >= vmm_min_bytes;
    int adm = budget_admit(size, !vmm);
    if (adm < 0)
        return cudaErrorMemoryAllocation;
    cudaError_t rc = cudaErrorInvalidValue;
    uint32_t flags = 0;
    uint64_t admitted = 0;
    if (vmm) {
        rc = vmm_alloc(devPtr, size, &spill_placement, &admitted);
        flags = FT_REGION_VMM;
    }
    if (rc != cudaSuccess && rc != cudaErrorMemoryAllocation) {
        rc = real(devPtr, size);
        flags = 0;
    }
    admit_done(adm, size, rc == cudaSuccess ? *devPtr : NULL, flags);
    if (admitted > 0) {
        pthread_mutex_lock(&res.lock);
        admitting -= admitted;
        pthread_mutex_unlock(&res.lock);
    }
    return rc;
}

/* A free begins: what it will give back counts as held until free_end (the budget's
 * admissions meanwhile, on other threads, must not take it as room). */
static uint64_t free_begin(const void *p)
{
    ft_region_t r;
    /* Only budget_admit and FT_SPILL (spill_held) read it: nothing to count while
     * everything is admitted. Before the plan, FT_SPILL's faults took a free under
     * way for room: four threads freeing while others faulted weights in went 2-4 MiB
     * over a 30 MiB budget on the simulator (spill.sh, --race-alloc). */
    unsigned s = engine_state();
    int kept = (state_phase(s) == PHASE_STREAMING && plan.in.budget_bytes != 0) || state_spill(s);
    if (p == NULL || !kept || !ft_regions_find(regions, (uint64_t)(uintptr_t)p, &r))
        return 0;
    vmm_t *v = vmm_find(r.base);
    uint64_t bytes = v != NULL ? v->size : r.size;
    __atomic_add_fetch(&releasing, bytes, __ATOMIC_RELAXED);
    return bytes;
}

static void free_end(uint64_t bytes)
{
    __atomic_sub_fetch(&releasing, bytes, __ATOMIC_RELAXED);
}

cudaError_t ft_hook_rt_free(cudaFree_fn_t real, void *devPtr)
{
    uint64_t bytes = free_begin(devPtr);
    untrack(devPtr);
    cudaError_t rc = devPtr != NULL && vmm_free(devPtr, res_forget) ? cudaSuccess : real(devPtr);
    free_end(bytes);
    return rc;
}

cudaError_t ft_hook_rt_malloc_async(cudaMallocAsync_fn_t real, void **devPtr, size_t size,
                                    cudaStream_t stream)
{
    if (!on_managed_device(1))
        return real(devPtr, size, stream);
    int adm = budget_admit(size, 1);
    if (adm < 0)
        return cudaErrorMemoryAllocation;
    cudaError_t rc = real(devPtr, size, stream);
    admit_done(adm, size, rc == cudaSuccess ? *devPtr : NULL, 0);
    return rc;
}

cudaError_t ft_hook_rt_malloc_pool_async(cudaMallocFromPoolAsync_fn_t real, void **ptr, size_t size,
                                         cudaMemPool_t pool, cudaStream_t stream)
{
    if (!on_managed_device(1))
        return real(ptr, size, pool, stream);
    int adm = budget_admit(size, 1);
    if (adm < 0)
        return cudaErrorMemoryAllocation;
    cudaError_t rc = real(ptr, size, pool, stream);
    admit_done(adm, size, rc == cudaSuccess ? *ptr : NULL, 0);
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
    int adm = budget_admit(n, 1);
    if (adm < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, n);
    admit_done(adm, n, rc == CUDA_SUCCESS ? (void *)(uintptr_t)*dptr : NULL, 0);
    return rc;
}

CUresult ft_hook_drv_free(cuMemFree_v2_fn_t real, CUdeviceptr dptr)
{
    uint64_t bytes = free_begin((void *)(uintptr_t)dptr);
    untrack((void *)(uintptr_t)dptr);
    CUresult rc = real(dptr);
    free_end(bytes);
    return rc;
}

CUresult ft_hook_drv_malloc_async(cuMemAllocAsync_fn_t real, CUdeviceptr *dptr, size_t n, CUstream s)
{
    if (!on_managed_device(0))
        return real(dptr, n, s);
    int adm = budget_admit(n, 1);
    if (adm < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = real(dptr, n, s);
    admit_done(adm, n, rc == CUDA_SUCCESS ? (void *)(uintptr_t)*dptr : NULL, 0);
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

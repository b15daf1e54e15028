/* hooks_alloc.c - the interposed allocation entry points (cudaMalloc, cudaFree, their
 * asynchronous and driver flavours, cudaMemGetInfo / cuMemGetInfo): each allocation
 * admitted by the budget (never refused by it: one the budget cannot hold is served
 * past it, and only the device's own failure reaches the application), served from
 * virtual memory when large enough, and tracked in the region table; each free
 * untracked and counted as held until it returns.
 *
 * Owns no state of its own. It calls budget.c (admissions, frees under way), reload.c
 * (the plan's weights freed), profiling.c (the table's peak), device.c and vmm.c,
 * passing down FT_SPILL's
 * placement (spill_placement) and residency.c's res_forget for vmm.c to call back. */
#define _GNU_SOURCE
#include "shim/engine.h"

/* --- allocation --------------------------------------------------------------------- */

static void track(void *p, size_t size, uint32_t flags)
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

static void untrack(const void *p)
{
    ft_region_t r;
    if (p != NULL && ft_regions_remove(regions, (uint64_t)(uintptr_t)p, &r) == 0) {
        ft_disc_region_freed(disc, r.id);
        reload_note_free(r.id); /* most of the plan's weights gone: reload.c */
    }
}

cudaError_t ft_hook_rt_malloc(cudaMalloc_fn_t real, void **devPtr, size_t size)
{
    if (!on_managed_device(1))
        return real(devPtr, size);
    int vmm = devPtr != NULL && vmm_serves(size);
    int adm = budget_admit(size, !vmm);
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
    allocated(adm, size, rc == cudaSuccess ? *devPtr : NULL, flags);
    if (admitted > 0) {
        pthread_mutex_lock(&res.lock);
        admitting -= admitted;
        pthread_mutex_unlock(&res.lock);
    }
    return rc;
}

cudaError_t ft_hook_rt_free(cudaFree_fn_t real, void *devPtr)
{
    uint64_t bytes = budget_free_begin(devPtr);
    untrack(devPtr);
    cudaError_t rc = devPtr != NULL && vmm_free(devPtr, res_forget) ? cudaSuccess : real(devPtr);
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

/* The driver's allocation is served as cudaMalloc is (XLA's allocator and programs on
 * the driver API allocate their weights through it): from virtual memory when large
 * enough, so that what it holds can stream and FT_SPILL can start it in host memory;
 * what virtual memory cannot serve goes to the driver. */
CUresult ft_hook_drv_malloc(cuMemAlloc_v2_fn_t real, CUdeviceptr *dptr, size_t n)
{
    if (!on_managed_device(0))
        return real(dptr, n);
    int vmm = dptr != NULL && vmm_serves(n);
    int adm = budget_admit(n, !vmm);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    uint32_t flags = 0;
    uint64_t admitted = 0;
    if (vmm) {
        void *p = NULL;
        cudaError_t err = vmm_alloc(&p, n, &spill_placement, &admitted);
        if (err == cudaSuccess) {
            *dptr = (CUdeviceptr)(uintptr_t)p;
            rc = CUDA_SUCCESS;
            flags = FT_REGION_VMM;
        } else if (err == cudaErrorMemoryAllocation) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY) {
        rc = real(dptr, n);
        flags = 0;
    }
    allocated(adm, n, rc == CUDA_SUCCESS ? (void *)(uintptr_t)*dptr : NULL, flags);
    if (admitted > 0) {
        pthread_mutex_lock(&res.lock);
        admitting -= admitted;
        pthread_mutex_unlock(&res.lock);
    }
    return rc;
}

CUresult ft_hook_drv_free(cuMemFree_v2_fn_t real, CUdeviceptr dptr)
{
    void *p = (void *)(uintptr_t)dptr;
    uint64_t bytes = budget_free_begin(p);
    untrack(p);
    CUresult rc = p != NULL && vmm_free(p, res_forget) ? CUDA_SUCCESS : real(dptr);
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

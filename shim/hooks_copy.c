/* hooks_copy.c - the interposed copy, set and synchronisation entry points: each
 * copy or set enters the engine, is seen by discovery (its destination is written),
 * FT_SPILL's faults and the residency guard, or is served on a host store; a
 * synchronisation is a hint of where a pass ends.
 *
 * Owns no state. */
#define _GNU_SOURCE
#include "shim/engine.h"


/* The guard for copies and sets: their device source and destination. */
static void guard_copy(const void *dst, const void *src, cudaStream_t stream)
{
    if (!guarding())
        return;
    const void *p[2] = { dst, src };
    uint32_t ids[2];
    size_t n = 0;
    ft_region_t r;
    for (int i = 0; i < 2; i++)
        if (p[i] != NULL && ft_regions_find(regions, (uint64_t)(uintptr_t)p[i], &r))
            ids[n++] = r.id;
    res_touch(ids, NULL, n, stream, -1, 0, 0, -1);
}

/* Every copy and set begins here: the engine's entry, the write seen by discovery, and
 * the guard of its device destination and source (NULL where there is none). */
static void copy_guard(int held, const void *dst, const void *src, cudaStream_t stream)
{
    if (held && !res.active && __atomic_load_n(&spill_engaged, __ATOMIC_RELAXED)) {
        uint64_t p[2] = { (uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src };
        spill_touch(p, 2, stream);
    }
    observe_write(dst);
    guard_copy(dst, src, stream);
}

static int copy_enter(const void *dst, const void *src, cudaStream_t stream)
{
    int held = engine_enter();
    copy_guard(held, dst, src, stream);
    return held;
}

/* A memset's entry (the engine held or not): 1 when it was served on a host store (the
 * caller returns success without forwarding), 0 when it is guarded and must be
 * forwarded. */
static int set_enter(int held, uint64_t dst, unsigned v, int width, size_t count, cudaStream_t s)
{
    if (held && host_store_set(dst, v, width, count, s))
        return 1;
    copy_guard(held, (const void *)(uintptr_t)dst, NULL, s);
    return 0;
}

cudaError_t ft_hook_rt_memcpy(cudaMemcpy_fn_t real, void *dst, const void *src, size_t n,
                              enum cudaMemcpyKind kind)
{
    int held = engine_enter();
    if (held && host_store_copy(dst, src, n, kind, 0)) {
        engine_leave(held);
        return cudaSuccess;
    }
    copy_guard(held, dst, src, 0);
    cudaError_t rc = real(dst, src, n, kind);
    engine_leave(held);
    if (kind == cudaMemcpyDeviceToHost)
        observe_sync(); /* a synchronous read of a result */
    return rc;
}

cudaError_t ft_hook_rt_memcpy_async(cudaMemcpyAsync_fn_t real, void *dst, const void *src, size_t n,
                                    enum cudaMemcpyKind kind, cudaStream_t s)
{
    int held = engine_enter();
    if (held && host_store_copy(dst, src, n, kind, s)) {
        engine_leave(held);
        return cudaSuccess;
    }
    copy_guard(held, dst, src, s);
    cudaError_t r_ = real(dst, src, n, kind, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_2d(cudaMemcpy2D_fn_t real, void *dst, size_t dp, const void *src, size_t sp,
                                 size_t w, size_t h, enum cudaMemcpyKind kind)
{
    int held = copy_enter(dst, src, 0);
    cudaError_t r_ = real(dst, dp, src, sp, w, h, kind);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_2d_async(cudaMemcpy2DAsync_fn_t real, void *dst, size_t dp, const void *src,
                                       size_t sp, size_t w, size_t h, enum cudaMemcpyKind kind,
                                       cudaStream_t s)
{
    int held = copy_enter(dst, src, s);
    cudaError_t r_ = real(dst, dp, src, sp, w, h, kind, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_3d(cudaMemcpy3D_fn_t real, const struct cudaMemcpy3DParms *p)
{
    int held = copy_enter(p != NULL ? p->dstPtr.ptr : NULL, p != NULL ? p->srcPtr.ptr : NULL, 0);
    cudaError_t r_ = real(p);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_3d_async(cudaMemcpy3DAsync_fn_t real, const struct cudaMemcpy3DParms *p,
                                       cudaStream_t s)
{
    int held = copy_enter(p != NULL ? p->dstPtr.ptr : NULL, p != NULL ? p->srcPtr.ptr : NULL, s);
    cudaError_t r_ = real(p, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_peer(cudaMemcpyPeer_fn_t real, void *dst, int dd, const void *src, int sd,
                                   size_t n)
{
    int held = copy_enter(dst, src, 0);
    cudaError_t r_ = real(dst, dd, src, sd, n);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memcpy_peer_async(cudaMemcpyPeerAsync_fn_t real, void *dst, int dd, const void *src,
                                         int sd, size_t n, cudaStream_t s)
{
    int held = copy_enter(dst, src, s);
    cudaError_t r_ = real(dst, dd, src, sd, n, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memset(cudaMemset_fn_t real, void *dst, int v, size_t n)
{
    int held = engine_enter();
    cudaError_t r_ = cudaSuccess;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 1, n, (cudaStream_t)0))
        r_ = real(dst, v, n);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memset_async(cudaMemsetAsync_fn_t real, void *dst, int v, size_t n, cudaStream_t s)
{
    int held = engine_enter();
    cudaError_t r_ = cudaSuccess;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 1, n, s))
        r_ = real(dst, v, n, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memset_2d(cudaMemset2D_fn_t real, void *dst, size_t pitch, int v, size_t w, size_t h)
{
    int held = copy_enter(dst, NULL, 0);
    cudaError_t r_ = real(dst, pitch, v, w, h);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_memset_2d_async(cudaMemset2DAsync_fn_t real, void *dst, size_t pitch, int v,
                                       size_t w, size_t h, cudaStream_t s)
{
    int held = copy_enter(dst, NULL, s);
    cudaError_t r_ = real(dst, pitch, v, w, h, s);
    engine_leave(held);
    return r_;
}

#define DPTR(x) ((void *)(uintptr_t)(x))

CUresult ft_hook_drv_memcpy(cuMemcpy_fn_t real, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    int held = copy_enter(DPTR(dst), DPTR(src), 0);
    CUresult r_ = real(dst, src, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_async(cuMemcpyAsync_fn_t real, CUdeviceptr dst, CUdeviceptr src, size_t n,
                                  CUstream s)
{
    int held = copy_enter(DPTR(dst), DPTR(src), (cudaStream_t)s);
    CUresult r_ = real(dst, src, n, s);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_htod(cuMemcpyHtoD_v2_fn_t real, CUdeviceptr dst, const void *src, size_t n)
{
    int held = copy_enter(DPTR(dst), NULL, 0);
    CUresult r_ = real(dst, src, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_dtoh(cuMemcpyDtoH_v2_fn_t real, void *dst, CUdeviceptr src, size_t n)
{
    int held = copy_enter(NULL, DPTR(src), 0);
    CUresult r_ = real(dst, src, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_htod_async(cuMemcpyHtoDAsync_v2_fn_t real, CUdeviceptr dst, const void *src,
                                       size_t n, CUstream s)
{
    int held = copy_enter(DPTR(dst), NULL, (cudaStream_t)s);
    CUresult r_ = real(dst, src, n, s);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memcpy_dtoh_async(cuMemcpyDtoHAsync_v2_fn_t real, void *dst, CUdeviceptr src,
                                       size_t n, CUstream s)
{
    int held = copy_enter(NULL, DPTR(src), (cudaStream_t)s);
    CUresult r_ = real(dst, src, n, s);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memset_d8(cuMemsetD8_v2_fn_t real, CUdeviceptr dst, unsigned char v, size_t n)
{
    int held = engine_enter();
    CUresult r_ = CUDA_SUCCESS;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 1, n, (cudaStream_t)0))
        r_ = real(dst, v, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memset_d32(cuMemsetD32_v2_fn_t real, CUdeviceptr dst, unsigned int v, size_t n)
{
    int held = engine_enter();
    CUresult r_ = CUDA_SUCCESS;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 4, n, (cudaStream_t)0))
        r_ = real(dst, v, n);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memset_d8_async(cuMemsetD8Async_fn_t real, CUdeviceptr dst, unsigned char v, size_t n,
                                     CUstream s)
{
    int held = engine_enter();
    CUresult r_ = CUDA_SUCCESS;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 1, n, (cudaStream_t)s))
        r_ = real(dst, v, n, s);
    engine_leave(held);
    return r_;
}

CUresult ft_hook_drv_memset_d32_async(cuMemsetD32Async_fn_t real, CUdeviceptr dst, unsigned int v,
                                      size_t n, CUstream s)
{
    int held = engine_enter();
    CUresult r_ = CUDA_SUCCESS;
    if (!set_enter(held, (uint64_t)(uintptr_t)(dst), (unsigned)(v), 4, n, (cudaStream_t)s))
        r_ = real(dst, v, n, s);
    engine_leave(held);
    return r_;
}

cudaError_t ft_hook_rt_device_sync(cudaDeviceSynchronize_fn_t real)
{
    cudaError_t rc = real();
    observe_sync();
    return rc;
}

cudaError_t ft_hook_rt_stream_sync(cudaStreamSynchronize_fn_t real, cudaStream_t stream)
{
    cudaError_t rc = real(stream);
    observe_sync();
    return rc;
}

cudaError_t ft_hook_rt_event_sync(cudaEventSynchronize_fn_t real, cudaEvent_t event)
{
    cudaError_t rc = real(event);
    observe_sync();
    return rc;
}

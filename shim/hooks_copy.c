/* hooks_copy.c - the interposed copy, set and synchronisation entry points: each
 * copy or set enters the engine, is seen by discovery (its destination is written),
 * FT_SPILL's faults and the residency guard, or is served on a host store; a
 * synchronisation is a hint of where a pass ends.
 *
 * Owns no state. A guarded copy or set reads the phase word once (FT_SPILL's faults);
 * it calls engine.c, observe.c, spill.c and residency.c (res_host_copy, res_host_set,
 * res_guard_copy). */
#define _GNU_SOURCE
#include "shim/engine.h"

/* The guard of a copy or set once the engine is entered: FT_SPILL's faults, the write
 * seen by discovery, and the residency guard of its device destination and source
 * (NULL where there is none). */
static void copy_guard(int held, const void *dst, const void *src, size_t dspan, size_t sspan, cudaStream_t stream)
{
    unsigned s = held ? engine_state() : 0;
    if (state_spill(s) && state_phase(s) != PHASE_STREAMING) {
        uint64_t p[2] = { (uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src };
        spill_touch(p, 2, 0, stream);
    }
    observe_write(dst);
    res_guard_copy(dst, src, dspan, sspan, stream);
}

/* A copy or set, as the one path every copy and set hook takes sees it. */
typedef struct {
    const void *dst, *src;    /* device destination and source; NULL where there is none */
    cudaStream_t stream;
    /* What a host store may serve while the unit is not loaded (residency.c): a
     * one-dimensional copy between host and device, or a one-dimensional set; other
     * copies and sets (2-D, 3-D, peer, device to device) are only guarded. */
    enum { COPY_GUARDED, COPY_1D, SET_1D } what;
    enum cudaMemcpyKind kind; /* COPY_1D */
    size_t n;                 /* COPY_1D: bytes; SET_1D: elements */
    unsigned v;               /* SET_1D: the value, of `width` bytes (1 or 4) */
    int width;
    int sync;                 /* a synchronous read of a result: a hint of a pass's end */
    /* The bytes it reaches from dst and from src (0: not known): an allocation served in
     * pieces has a unit's weights beside another's, and the guard loads every piece
     * the copy reaches. */
    size_t dspan, sspan;
} copy_t;

/* Every copy and set begins here: the engine's entry, then the copy or set served on
 * a host store (-1: the engine is left already, and the hook returns success without
 * the real call), or guarded (the engine held or not, for copy_leave). */
static int copy_enter(const copy_t *c)
{
    /* A copy into an allocation served in pieces: the extent of what it fills. */
    if (c->what != SET_1D)
        vmm_note_copy(c->dst, c->dspan);
    int held = engine_enter_copy();
    if (capture_under_way()) {
        /* A captured copy or set runs at its graph's launches, which load what it
         * touches; one outside the capture is guarded, FT_SPILL's moves aside, and
         * FlexTensor's own work done in relaxed capture mode (capture.c). */
        uint64_t cap = capture_of(c->stream);
        if (cap != 0) {
            capture_note_copy(cap, c->stream, c->dst, c->src, c->dspan, c->sspan);
            return held;
        }
        int relaxed = capture_relax();
        if (held && ((c->what == COPY_1D && res_host_copy((void *)c->dst, c->src, c->n, c->kind, c->stream)) ||
                     (c->what == SET_1D &&
                      res_host_set((uint64_t)(uintptr_t)c->dst, c->v, c->width, c->n, c->stream)))) {
            capture_restore(relaxed);
            engine_leave(held);
            return -1;
        }
        observe_write(c->dst);
        res_guard_copy(c->dst, c->src, c->dspan, c->sspan, c->stream);
        capture_restore(relaxed);
        return held;
    }
    if (held && ((c->what == COPY_1D && (spill_host_copy((void *)c->dst, c->src, c->n, c->kind, c->stream) ||
                                         res_host_copy((void *)c->dst, c->src, c->n, c->kind, c->stream))) ||
                 (c->what == SET_1D &&
                  res_host_set((uint64_t)(uintptr_t)c->dst, c->v, c->width, c->n, c->stream)))) {
        observe_write(c->dst);
        engine_leave(held);
        return -1;
    }
    copy_guard(held, c->dst, c->src, c->dspan, c->sspan, c->stream);
    return held;
}

/* ... and its end, once the real call has returned. */
static void copy_leave(const copy_t *c, int held)
{
    engine_leave(held);
    if (c->sync)
        observe_sync();
}

/* One copy or set hook: its return type and success value, its hook name, the type of
 * its real function, its parameters after `real`, the real call's arguments, and the
 * copy_t it is (designated initializers over the parameters). */
#define COPY_HOOK(ret, ok, hook, fn, params, args, ...)                                        \
    ret ft_hook_##hook(fn real, FT_EXPAND params)                                              \
    {                                                                                          \
        const copy_t c = { __VA_ARGS__ };                                                      \
        int held = copy_enter(&c);                                                             \
        if (held < 0)                                                                          \
            return ok;                                                                         \
        ret rc = real args;                                                                    \
        copy_leave(&c, held);                                                                  \
        return rc;                                                                             \
    }
#define RT_COPY_HOOK(hook, fn, params, args, ...) COPY_HOOK(cudaError_t, cudaSuccess, hook, fn, params, args, __VA_ARGS__)
#define DRV_COPY_HOOK(hook, fn, params, args, ...) COPY_HOOK(CUresult, CUDA_SUCCESS, hook, fn, params, args, __VA_ARGS__)
#define DPTR(x) ((const void *)(uintptr_t)(x))
/* The bytes a 2-D copy or set reaches from its start: h rows of `pitch`, the last w. */
#define SPAN_2D(pitch, w, h) ((h) > 0 ? (pitch) * ((h) - 1) + (w) : 0)

/* The runtime's copies and sets. */
RT_COPY_HOOK(rt_memcpy, cudaMemcpy_fn_t,
             (void *dst, const void *src, size_t n, enum cudaMemcpyKind kind), (dst, src, n, kind),
             .dst = dst, .src = src, .what = COPY_1D, .kind = kind, .n = n,
             .sync = kind == cudaMemcpyDeviceToHost, .dspan = n, .sspan = n)
RT_COPY_HOOK(rt_memcpy_async, cudaMemcpyAsync_fn_t,
             (void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s),
             (dst, src, n, kind, s), .dst = dst, .src = src, .stream = s, .what = COPY_1D, .kind = kind, .n = n,
             .dspan = n, .sspan = n)
RT_COPY_HOOK(rt_memcpy_2d, cudaMemcpy2D_fn_t,
             (void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h, enum cudaMemcpyKind kind),
             (dst, dp, src, sp, w, h, kind), .dst = dst, .src = src, .dspan = SPAN_2D(dp, w, h),
             .sspan = SPAN_2D(sp, w, h))
RT_COPY_HOOK(rt_memcpy_2d_async, cudaMemcpy2DAsync_fn_t,
             (void *dst, size_t dp, const void *src, size_t sp, size_t w, size_t h, enum cudaMemcpyKind kind,
              cudaStream_t s),
             (dst, dp, src, sp, w, h, kind, s), .dst = dst, .src = src, .stream = s, .dspan = SPAN_2D(dp, w, h),
             .sspan = SPAN_2D(sp, w, h))
RT_COPY_HOOK(rt_memcpy_3d, cudaMemcpy3D_fn_t, (const struct cudaMemcpy3DParms *p), (p),
             .dst = p != NULL ? p->dstPtr.ptr : NULL, .src = p != NULL ? p->srcPtr.ptr : NULL)
RT_COPY_HOOK(rt_memcpy_3d_async, cudaMemcpy3DAsync_fn_t, (const struct cudaMemcpy3DParms *p, cudaStream_t s),
             (p, s), .dst = p != NULL ? p->dstPtr.ptr : NULL, .src = p != NULL ? p->srcPtr.ptr : NULL,
             .stream = s)
RT_COPY_HOOK(rt_memcpy_peer, cudaMemcpyPeer_fn_t, (void *dst, int dd, const void *src, int sd, size_t n),
             (dst, dd, src, sd, n), .dst = dst, .src = src, .dspan = n, .sspan = n)
RT_COPY_HOOK(rt_memcpy_peer_async, cudaMemcpyPeerAsync_fn_t,
             (void *dst, int dd, const void *src, int sd, size_t n, cudaStream_t s), (dst, dd, src, sd, n, s),
             .dst = dst, .src = src, .stream = s, .dspan = n, .sspan = n)
RT_COPY_HOOK(rt_memset, cudaMemset_fn_t, (void *dst, int v, size_t n), (dst, v, n),
             .dst = dst, .what = SET_1D, .v = (unsigned)v, .width = 1, .n = n, .dspan = n)
RT_COPY_HOOK(rt_memset_async, cudaMemsetAsync_fn_t, (void *dst, int v, size_t n, cudaStream_t s),
             (dst, v, n, s), .dst = dst, .stream = s, .what = SET_1D, .v = (unsigned)v, .width = 1, .n = n,
             .dspan = n)
RT_COPY_HOOK(rt_memset_2d, cudaMemset2D_fn_t, (void *dst, size_t pitch, int v, size_t w, size_t h),
             (dst, pitch, v, w, h), .dst = dst, .dspan = SPAN_2D(pitch, w, h))
RT_COPY_HOOK(rt_memset_2d_async, cudaMemset2DAsync_fn_t,
             (void *dst, size_t pitch, int v, size_t w, size_t h, cudaStream_t s), (dst, pitch, v, w, h, s),
             .dst = dst, .stream = s, .dspan = SPAN_2D(pitch, w, h))

/* The driver's. */
DRV_COPY_HOOK(drv_memcpy, cuMemcpy_fn_t, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n),
              .dst = DPTR(dst), .src = DPTR(src), .dspan = n, .sspan = n)
DRV_COPY_HOOK(drv_memcpy_async, cuMemcpyAsync_fn_t, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
              (dst, src, n, s), .dst = DPTR(dst), .src = DPTR(src), .stream = (cudaStream_t)s, .dspan = n,
              .sspan = n)
DRV_COPY_HOOK(drv_memcpy_htod, cuMemcpyHtoD_v2_fn_t, (CUdeviceptr dst, const void *src, size_t n),
              (dst, src, n), .dst = DPTR(dst), .dspan = n)
DRV_COPY_HOOK(drv_memcpy_dtoh, cuMemcpyDtoH_v2_fn_t, (void *dst, CUdeviceptr src, size_t n), (dst, src, n),
              .src = DPTR(src), .sspan = n)
DRV_COPY_HOOK(drv_memcpy_htod_async, cuMemcpyHtoDAsync_v2_fn_t,
              (CUdeviceptr dst, const void *src, size_t n, CUstream s), (dst, src, n, s),
              .dst = DPTR(dst), .stream = (cudaStream_t)s, .dspan = n)
DRV_COPY_HOOK(drv_memcpy_dtoh_async, cuMemcpyDtoHAsync_v2_fn_t,
              (void *dst, CUdeviceptr src, size_t n, CUstream s), (dst, src, n, s),
              .src = DPTR(src), .stream = (cudaStream_t)s, .sspan = n)
DRV_COPY_HOOK(drv_memset_d8, cuMemsetD8_v2_fn_t, (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n),
              .dst = DPTR(dst), .what = SET_1D, .v = v, .width = 1, .n = n, .dspan = n)
DRV_COPY_HOOK(drv_memset_d32, cuMemsetD32_v2_fn_t, (CUdeviceptr dst, unsigned int v, size_t n), (dst, v, n),
              .dst = DPTR(dst), .what = SET_1D, .v = v, .width = 4, .n = n, .dspan = 4 * n)
DRV_COPY_HOOK(drv_memset_d8_async, cuMemsetD8Async_fn_t,
              (CUdeviceptr dst, unsigned char v, size_t n, CUstream s), (dst, v, n, s),
              .dst = DPTR(dst), .stream = (cudaStream_t)s, .what = SET_1D, .v = v, .width = 1, .n = n, .dspan = n)
DRV_COPY_HOOK(drv_memset_d32_async, cuMemsetD32Async_fn_t,
              (CUdeviceptr dst, unsigned int v, size_t n, CUstream s), (dst, v, n, s),
              .dst = DPTR(dst), .stream = (cudaStream_t)s, .what = SET_1D, .v = v, .width = 4, .n = n,
              .dspan = 4 * n)

/* Synchronisations: where the host waits is a hint of where a pass ends (observe_sync). */
cudaError_t ft_hook_rt_device_sync(cudaDeviceSynchronize_fn_t real)
{
    cudaError_t rc = real();
    observe_sync();
    timing_poll(); /* offload timing: what completed is read (timing.c) */
    return rc;
}

cudaError_t ft_hook_rt_stream_sync(cudaStreamSynchronize_fn_t real, cudaStream_t stream)
{
    cudaError_t rc = real(stream);
    observe_sync();
    timing_poll(); /* offload timing: what completed is read (timing.c) */
    return rc;
}

cudaError_t ft_hook_rt_event_sync(cudaEventSynchronize_fn_t real, cudaEvent_t event)
{
    cudaError_t rc = real(event);
    observe_sync();
    timing_poll(); /* offload timing: what completed is read (timing.c) */
    return rc;
}

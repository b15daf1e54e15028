/* drv_mem.c - device memory of the simulated driver, on host memory.
 *
 * One PROT_NONE arena (MAP_NORESERVE) is reserved at cuInit; every device address lies
 * in it, so "is this a device pointer" is a range check and a stray access to freed or
 * unmapped device memory faults. cuMemAlloc backs a page-rounded range with anonymous
 * memory and leaves an unmapped guard page after it. VMM physical allocations are
 * ranges of a per-device memfd, so one can be mapped at two virtual ranges and show
 * the same bytes; cuMemMap
 * maps them PROT_NONE and only cuMemSetAccess makes them readable/writable, as a GPU
 * requires. Capacity (FTSIM_DEVICE_MEM) counts physical bytes per device.
 */
#define _GNU_SOURCE
#include "drv_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <generated_cuda_meta.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------------ range sets */

/* A sorted vector of [base, base+size) entries that do not overlap; every element type
 * starts with these two fields. Lookups are binary searches. */
typedef struct { uintptr_t base; size_t size; } sim_range_t;

typedef struct {
    char *v;
    size_t n, cap, esz;
} rangeset_t;

#define RS_AT(rs, i) ((void *)((rs)->v + (size_t)(i) * (rs)->esz))

/* Index of the first entry whose end is above addr (entries before it end at or below). */
static size_t rs_lower(const rangeset_t *rs, uintptr_t addr)
{
    size_t lo = 0, hi = rs->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const sim_range_t *e = RS_AT(rs, mid);
        if (e->base + e->size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void *rs_find(const rangeset_t *rs, uintptr_t addr)
{
    size_t i = rs_lower(rs, addr);
    if (i < rs->n && ((sim_range_t *)RS_AT(rs, i))->base <= addr)
        return RS_AT(rs, i);
    return NULL;
}

static int rs_overlaps(const rangeset_t *rs, uintptr_t base, size_t size)
{
    size_t i = rs_lower(rs, base);
    return i < rs->n && ((sim_range_t *)RS_AT(rs, i))->base < base + size;
}

static int rs_insert(rangeset_t *rs, const void *elem)
{
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 64;
        char *v = realloc(rs->v, cap * rs->esz);
        if (!v)
            return -1;
        rs->v = v;
        rs->cap = cap;
    }
    size_t i = rs_lower(rs, ((const sim_range_t *)elem)->base);
    memmove(rs->v + (i + 1) * rs->esz, rs->v + i * rs->esz, (rs->n - i) * rs->esz);
    memcpy(rs->v + i * rs->esz, elem, rs->esz);
    rs->n++;
    return 0;
}

static void rs_remove(rangeset_t *rs, void *elem)
{
    size_t i = (size_t)((char *)elem - rs->v) / rs->esz;
    memmove(rs->v + i * rs->esz, rs->v + (i + 1) * rs->esz, (rs->n - i - 1) * rs->esz);
    rs->n--;
}

/* ------------------------------------------------------------------ tables */

typedef struct {
    uintptr_t base;
    size_t size;        /* span: page-rounded bytes + guard page */
    size_t bytes;       /* what the caller asked for */
    size_t phys;        /* counted against the capacity */
    sim_dev_t *dev;
    int async;          /* from cuMemAllocAsync */
    int freeing;        /* a cuMemFreeAsync is queued */
    uint64_t buffer_id;
} sim_alloc_t;

/* guard: address space held after the reservation, never handed out (ADDR_HINT=0) */
typedef struct { uintptr_t base; size_t size; size_t guard; } sim_reserve_t;

typedef struct sim_phys {
    uint64_t handle;
    size_t offset;      /* in the device's physical memfd */
    size_t size;
    sim_dev_t *dev;
    int refs;           /* cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease */
    int nmaps;
    CUmemAllocationProp prop;
    UT_hash_handle hh;
} sim_phys_t;

typedef struct {
    uintptr_t base;
    size_t size;
    sim_phys_t *ph;
    size_t offset;
    CUmemAccess_flags access;
    uint32_t devs;      /* devices cuMemSetAccess granted access (bit per ordinal) */
    uint64_t buffer_id;
} sim_map_t;

enum { HOST_ALLOC, HOST_REGISTER };
typedef struct {
    uintptr_t base;
    size_t size;        /* bytes the caller asked for (registered or allocated) */
    size_t mapped;      /* HOST_ALLOC: bytes mmapped */
    int kind;
    unsigned flags;
} sim_host_t;

static uintptr_t g_arena;
static size_t g_arena_size;
static rangeset_t g_free = {.esz = sizeof(sim_range_t)};      /* free address space */
static rangeset_t g_allocs = {.esz = sizeof(sim_alloc_t)};
static rangeset_t g_reserves = {.esz = sizeof(sim_reserve_t)};
static rangeset_t g_maps = {.esz = sizeof(sim_map_t)};
static rangeset_t g_hosts = {.esz = sizeof(sim_host_t)};
static sim_phys_t *g_phys;
static uint64_t g_next_handle = 0x51a0000001ull;
static uint64_t g_next_buffer_id = 1;

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

int sim_mem_init(void)
{
    size_t size = g_sim.opt.ARENA_SIZE;
    void *p = MAP_FAILED;
    /* Address space limits (ulimit -v, small VMs) may refuse a terabyte: halve. */
    while (size >= (64ull << 20)) {
        p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED)
            break;
        size /= 2;
    }
    if (p == MAP_FAILED) {
        sim_log("cannot reserve the device arena: %s", strerror(errno));
        return -1;
    }
    /* Align the arena start to 2 MiB-ish granularity so VMM reservations can be. */
    size_t align = g_sim.opt.VMM_GRANULARITY;
    uintptr_t base = round_up((uintptr_t)p, align);
    g_arena = base;
    g_arena_size = size - (base - (uintptr_t)p);
    g_arena_size -= g_arena_size % align;
    sim_range_t all = {g_arena, g_arena_size};
    return rs_insert(&g_free, &all);
}

int sim_in_arena(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p;
    return a >= g_arena && a < g_arena + g_arena_size && n <= g_arena + g_arena_size - a;
}

/* ------------------------------------------------------------------ address space */

/* First fit in a free list of ranges (address space, or offsets in a device's
 * physical memfd); `hint` is taken when it is free. 0, or -1 when nothing fits. */
static int range_alloc(rangeset_t *fl, size_t size, size_t align, uintptr_t hint, uintptr_t *out)
{
    if (hint && (hint % align) == 0) {
        sim_range_t *f = rs_find(fl, hint);
        if (f && hint + size <= f->base + f->size) {
            sim_range_t before = {f->base, hint - f->base};
            sim_range_t after = {hint + size, f->base + f->size - (hint + size)};
            rs_remove(fl, f);
            if (before.size)
                rs_insert(fl, &before);
            if (after.size)
                rs_insert(fl, &after);
            *out = hint;
            return 0;
        }
    }
    for (size_t i = 0; i < fl->n; i++) {
        sim_range_t *f = RS_AT(fl, i);
        uintptr_t a = round_up(f->base, align);
        if (a + size > f->base + f->size || a < f->base)
            continue;
        sim_range_t before = {f->base, a - f->base};
        sim_range_t after = {a + size, f->base + f->size - (a + size)};
        rs_remove(fl, f);
        if (before.size && rs_insert(fl, &before) != 0)
            return -1;
        if (after.size && rs_insert(fl, &after) != 0)
            return -1;
        *out = a;
        return 0;
    }
    return -1;
}

static void range_free(rangeset_t *fl, uintptr_t base, size_t size)
{
    /* Coalesce with the neighbours so large reservations stay possible. */
    size_t i = rs_lower(fl, base);
    if (i > 0) {
        sim_range_t *prev = RS_AT(fl, i - 1);
        if (prev->base + prev->size == base) {
            base = prev->base;
            size += prev->size;
            rs_remove(fl, prev);
            i--;
        }
    }
    if (i < fl->n) {
        sim_range_t *next = RS_AT(fl, i);
        if (next->base == base + size) {
            size += next->size;
            rs_remove(fl, next);
        }
    }
    sim_range_t r = {base, size};
    rs_insert(fl, &r);
}

static int va_alloc(size_t size, size_t align, uintptr_t hint, uintptr_t *out)
{
    return range_alloc(&g_free, size, align, hint, out);
}

static void va_free(uintptr_t base, size_t size)
{
    range_free(&g_free, base, size);
}

/* Returns a range of the arena to inaccessible, dropping its pages. */
static void arena_discard(uintptr_t base, size_t size)
{
    void *p = mmap((void *)base, size, PROT_NONE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        sim_log("cannot return [%#lx, +%zu) to the arena: %s", (unsigned long)base, size,
                strerror(errno));
}

/* ------------------------------------------------------------------ cuMemAlloc */

static CUresult alloc_locked(sim_dev_t *dev, size_t bytes, int async, CUdeviceptr *out)
{
    if (sim_fault_hit(SIM_FAULT_KIND_ALLOC))
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t phys = round_up(bytes, SIM_PAGE);
    if (phys > dev->capacity - dev->used)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t base;
    size_t span = phys + SIM_PAGE;  /* guard page: overruns fault instead of landing
                                       in a neighbour */
    if (va_alloc(span, SIM_PAGE, 0, &base) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap((void *)base, phys, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        va_free(base, span);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_alloc_t a = {.base = base, .size = span, .bytes = bytes, .phys = phys, .dev = dev,
                     .async = async, .buffer_id = g_next_buffer_id++};
    if (rs_insert(&g_allocs, &a) != 0) {
        arena_discard(base, phys);
        va_free(base, span);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    dev->used += phys;
    if (dev->used > dev->peak)
        dev->peak = dev->used;
    *out = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

static void free_alloc_locked(sim_alloc_t *a)
{
    uintptr_t base = a->base;
    size_t span = a->size;
    a->dev->used -= a->phys;
    arena_discard(base, a->phys);
    rs_remove(&g_allocs, a);
    va_free(base, span);
}

static CUresult need_ctx(void)
{
    return sim_current_ctx() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* A potentially unsafe call during a stream capture (drv_graph.c): allocations, frees,
 * pinning and VMM changes are refused where the thread's capture mode forbids them; a
 * free (ctx_sync: it waits for the device) also while the context has a capture. */
static CUresult capture_unsafe(int ctx_sync)
{
    pthread_mutex_lock(&g_sim.lock);
    CUresult r = sim_capture_unsafe_check();
    struct CUctx_st *ctx = sim_current_ctx();
    if (r == CUDA_SUCCESS && ctx_sync && ctx)
        r = sim_capture_ctx_check(ctx);
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    cuMemAlloc_v2_params p = {dptr, bytesize};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemAlloc_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS)
        r = need_ctx();
    if (r == CUDA_SUCCESS) {
        if (!dptr || bytesize == 0) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            r = alloc_locked(sim_current_ctx()->dev, bytesize, 0, dptr);
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    cuMemFree_v2_params p = {dptr};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemFree_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(1);
    if (r == CUDA_SUCCESS)
        r = need_ctx();
    if (r == CUDA_SUCCESS && dptr) {  /* freeing 0 succeeds, as on the H200 */
        pthread_mutex_lock(&g_sim.lock);
        sim_alloc_t *a = rs_find(&g_allocs, (uintptr_t)dptr);
        if (!a || a->base != (uintptr_t)dptr || a->freeing) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            /* Like cudaFree, waits for the device: work in flight may still use it. */
            sim_dev_t *dev = a->dev;
            if (dev->primary)
                r = sim_ctx_sync_locked(dev->primary);
            if (r == CUDA_SUCCESS) {
                /* Waiting released the lock: look the allocation up again. */
                a = rs_find(&g_allocs, (uintptr_t)dptr);
                if (a && a->base == (uintptr_t)dptr && !a->freeing)
                    free_alloc_locked(a);
                else
                    r = CUDA_ERROR_INVALID_VALUE;
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_, size_t *total)
{
    cuMemGetInfo_v2_params p = {free_, total};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemGetInfo_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = need_ctx();
    if (r == CUDA_SUCCESS) {
        if (!free_ || !total) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            sim_dev_t *d = sim_current_ctx()->dev;
            *free_ = d->capacity - d->used;
            *total = d->capacity;
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

int sim_mem_granted(const void *ptr, const sim_dev_t *dev)
{
    sim_map_t *m = rs_find(&g_maps, (uintptr_t)ptr);
    if (m == NULL)
        return -1;
    return dev != NULL && (m->devs >> dev->ordinal & 1u);
}

sim_dev_t *sim_mem_device_of(const void *ptr)
{
    uintptr_t a = (uintptr_t)ptr;
    sim_alloc_t *al = rs_find(&g_allocs, a);
    if (al && a < al->base + al->phys)
        return al->dev;
    sim_map_t *m = rs_find(&g_maps, a);
    if (m)
        return m->ph->dev;
    return NULL;
}

SIM_EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    cuMemGetAddressRange_v2_params p = {pbase, psize, dptr};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemGetAddressRange_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        uintptr_t a = (uintptr_t)dptr;
        sim_alloc_t *al = rs_find(&g_allocs, a);
        /* Only cuMemAlloc-style allocations: on the H200 a VMM mapping gives
         * CUDA_ERROR_NOT_FOUND here. */
        if (al && a < al->base + al->phys) {
            if (pbase)
                *pbase = al->base;
            if (psize)
                *psize = al->bytes;
        } else {
            r = CUDA_ERROR_NOT_FOUND;
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ stream-ordered */

typedef struct { uint32_t magic; int dev; uint64_t threshold; } sim_pool_t;
#define SIM_MAGIC_POOL 0x4c4f4f50u
static sim_pool_t g_pools[SIM_MAX_DEVICES];

static sim_pool_t *pool_of(CUmemoryPool h)
{
    sim_pool_t *p = (sim_pool_t *)h;
    if (p >= g_pools && p < g_pools + SIM_MAX_DEVICES && p->magic == SIM_MAGIC_POOL)
        return p;
    return NULL;
}

static CUresult default_pool(CUmemoryPool *pool, CUdevice dev)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_sim.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    g_pools[dev].magic = SIM_MAGIC_POOL;
    g_pools[dev].dev = dev;
    *pool = (CUmemoryPool)&g_pools[dev];
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    cuDeviceGetDefaultMemPool_params p = {pool_out, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceGetDefaultMemPool, &p, &r, 0);
    if (r == CUDA_SUCCESS)
        r = default_pool(pool_out, dev);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    cuDeviceGetMemPool_params p = {pool, dev};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuDeviceGetMemPool, &p, &r, 0);
    if (r == CUDA_SUCCESS)
        r = default_pool(pool, dev);
    sim_api_exit(&c);
    return r;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytes, CUstream h, int pool_dev)
{
    if (!dptr || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    struct CUstream_st *s;
    CUresult r = sim_stream_resolve(h, &s);
    if (r == CUDA_SUCCESS)
        r = sim_capture_memnode_check(s);
    if (r == CUDA_SUCCESS) {
        sim_dev_t *dev = pool_dev >= 0 ? &g_sim.dev[pool_dev] : s->ctx->dev;
        /* The memory exists from now on; stream order only matters for its reuse,
         * which the simulator never does before the free executes. */
        r = alloc_locked(dev, bytes, 1, dptr);
    }
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    cuMemAllocAsync_params p = {dptr, bytesize, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemAllocAsync, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = alloc_async(dptr, bytesize, hStream, -1);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                    CUstream hStream)
{
    cuMemAllocFromPoolAsync_params p = {dptr, bytesize, pool, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemAllocFromPoolAsync, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        sim_pool_t *pl = pool_of(pool);
        r = pl ? alloc_async(dptr, bytesize, hStream, pl->dev) : CUDA_ERROR_INVALID_VALUE;
    }
    sim_api_exit(&c);
    return r;
}

void sim_mem_free_async_op(CUdeviceptr ptr)
{
    sim_alloc_t *a = rs_find(&g_allocs, (uintptr_t)ptr);
    if (a && a->base == (uintptr_t)ptr && a->freeing)
        free_alloc_locked(a);
}

SIM_EXPORT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    cuMemFreeAsync_params p = {dptr, hStream};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemFreeAsync, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        struct CUstream_st *s;
        r = sim_stream_resolve(hStream, &s);
        sim_alloc_t *a = rs_find(&g_allocs, (uintptr_t)dptr);
        if (r == CUDA_SUCCESS && (!a || a->base != (uintptr_t)dptr || a->freeing))
            r = CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            r = sim_capture_memnode_check(s);
        if (r == CUDA_SUCCESS) {
            sim_op_t *op = sim_op_new(SIM_OP_FREE);
            if (!op) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                a->freeing = 1;
                op->u.free.ptr = dptr;
                sim_enqueue(s, op, SIM_ENG_NONE, 0);
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

static uint64_t async_bytes(int dev)
{
    uint64_t n = 0;
    for (size_t i = 0; i < g_allocs.n; i++) {
        sim_alloc_t *a = RS_AT(&g_allocs, i);
        if (a->async && a->dev->ordinal == dev)
            n += a->phys;
    }
    return n;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    cuMemPoolSetAttribute_params p = {pool, attr, value};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemPoolSetAttribute, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        sim_pool_t *pl = pool_of(pool);
        if (!pl || !value)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
            pl->threshold = *(cuuint64_t *)value;
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    cuMemPoolGetAttribute_params p = {pool, attr, value};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemPoolGetAttribute, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        sim_pool_t *pl = pool_of(pool);
        if (!pl || !value) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            switch (attr) {
            case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
                *(cuuint64_t *)value = pl->threshold;
                break;
            case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
            case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
            case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
            case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
                *(cuuint64_t *)value = async_bytes(pl->dev);
                break;
            default:
                *(int *)value = 1;
                break;
            }
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    cuMemPoolTrimTo_params p = {pool, minBytesToKeep};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemPoolTrimTo, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS && !pool_of(pool))
        r = CUDA_ERROR_INVALID_VALUE;
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ pinned host */

int sim_host_pinned(const void *p, size_t n)
{
    sim_host_t *h = rs_find(&g_hosts, (uintptr_t)p);
    return h && (uintptr_t)p + n <= h->base + h->size;
}

/* Pinned memory is named: a private mapping of a memfd called "simcuda-pinned", which
 * /proc/PID/smaps lists under that name, so that a test can count the pinned bytes a
 * process holds (tests/scenario/shm.sh) as it would the driver's on a GPU machine.
 * Private: written pages are the process's own, as anonymous memory is. */
static void *pinned_map(size_t mapped)
{
    int fd = memfd_create("simcuda-pinned", MFD_CLOEXEC);
    if (fd < 0)
        return mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *p = ftruncate(fd, (off_t)mapped) == 0
            ? mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    return p;
}

static CUresult host_alloc(void **pp, size_t bytes, unsigned flags)
{
    if (!pp || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_sim.lock);
    CUresult r = CUDA_SUCCESS;
    if (sim_fault_hit(SIM_FAULT_KIND_HOST_ALLOC)) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        size_t mapped = round_up(bytes, SIM_PAGE);
        void *p = pinned_map(mapped);
        if (p == MAP_FAILED) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            sim_host_t h = {(uintptr_t)p, bytes, mapped, HOST_ALLOC, flags};
            if (rs_insert(&g_hosts, &h) != 0) {
                munmap(p, mapped);
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                *pp = p;
            }
        }
    }
    pthread_mutex_unlock(&g_sim.lock);
    return r;
}

/* Host time an API call takes (the FTSIM_*_NS options), on the virtual clock: what the
 * host enqueues after it starts that much later. Real drivers spend it pinning pages,
 * writing page tables, waiting for the copy engines (a map and its access took up to
 * 0.9 ms with copies in flight on the H200). */
static void host_cost(uint64_t ns)
{
    if (ns == 0)
        return;
    pthread_mutex_lock(&g_sim.lock);
    g_sim.host_now += ns;
    pthread_mutex_unlock(&g_sim.lock);
}

static uint64_t pin_cost(size_t bytes)
{
    return (uint64_t)((double)g_sim.opt.PIN_NS_PER_MIB * (double)bytes / 1048576.0);
}

SIM_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    cuMemHostAlloc_params p = {pp, bytesize, Flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemHostAlloc, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS)
        r = need_ctx();
    if (r == CUDA_SUCCESS)
        r = host_alloc(pp, bytesize, Flags);
    if (r == CUDA_SUCCESS)
        host_cost(pin_cost(bytesize));
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    cuMemAllocHost_v2_params p = {pp, bytesize};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemAllocHost_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS)
        r = need_ctx();
    if (r == CUDA_SUCCESS)
        r = host_alloc(pp, bytesize, 0);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemFreeHost(void *ptr)
{
    cuMemFreeHost_params p = {ptr};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemFreeHost, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(1);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_host_t *h = rs_find(&g_hosts, (uintptr_t)ptr);
        if (!h || h->base != (uintptr_t)ptr || h->kind != HOST_ALLOC) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            /* Pinned memory may be the source of queued copies: wait for them. */
            struct CUctx_st *ctx = sim_current_ctx();
            if (ctx)
                sim_ctx_sync_locked(ctx);
            h = rs_find(&g_hosts, (uintptr_t)ptr);
            if (h && h->base == (uintptr_t)ptr) {
                munmap((void *)h->base, h->mapped);
                rs_remove(&g_hosts, h);
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *ptr, size_t bytesize, unsigned int Flags)
{
    cuMemHostRegister_v2_params p = {ptr, bytesize, Flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemHostRegister_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS)
        r = need_ctx();
    if (r == CUDA_SUCCESS) {
        if (!ptr || bytesize == 0 || sim_in_arena(ptr, 1)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            if (rs_overlaps(&g_hosts, (uintptr_t)ptr, bytesize)) {
                r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
            } else if (sim_fault_hit(SIM_FAULT_KIND_HOST_ALLOC)) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                sim_host_t h = {(uintptr_t)ptr, bytesize, 0, HOST_REGISTER, Flags};
                if (rs_insert(&g_hosts, &h) != 0)
                    r = CUDA_ERROR_OUT_OF_MEMORY;
            }
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    if (r == CUDA_SUCCESS)
        host_cost(pin_cost(bytesize));
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *ptr)
{
    cuMemHostUnregister_params p = {ptr};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemHostUnregister, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_host_t *h = rs_find(&g_hosts, (uintptr_t)ptr);
        if (!h || h->base != (uintptr_t)ptr || h->kind != HOST_REGISTER)
            r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
        else
            rs_remove(&g_hosts, h);
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *ptr, unsigned int Flags)
{
    cuMemHostGetDevicePointer_v2_params p = {pdptr, ptr, Flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemHostGetDevicePointer_v2, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        if (!pdptr || Flags != 0 || !sim_host_pinned(ptr, 1))
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *pdptr = (CUdeviceptr)ptr;  /* unified addressing: same address */
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ VMM */

static size_t gran(void) { return g_sim.opt.VMM_GRANULARITY; }

SIM_EXPORT CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                          CUmemAllocationGranularity_flags option)
{
    cuMemGetAllocationGranularity_params p = {granularity, prop, option};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemGetAllocationGranularity, &p, &r, 0);
    if (r == CUDA_SUCCESS) {
        if (!granularity || !prop)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *granularity = gran();
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                                CUdeviceptr addr, unsigned long long flags)
{
    cuMemAddressReserve_params p = {ptr, size, alignment, addr, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemAddressReserve, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS) {
        size_t g = gran();
        if (!ptr || size == 0 || size % g || (alignment & (alignment - 1))) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            size_t align = alignment > g ? alignment : g;
            uintptr_t base;
            /* The H200's driver put about 70% of reservations asked for at the end of
             * the last one elsewhere: by default the hint is ignored and a granule is
             * kept free after each reservation, so that nothing relies on two of them
             * lying end to end. */
            size_t guard = g_sim.opt.ADDR_HINT ? 0 : g;
            pthread_mutex_lock(&g_sim.lock);
            if (va_alloc(size + guard, align, g_sim.opt.ADDR_HINT ? (uintptr_t)addr : 0, &base) != 0) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                sim_reserve_t rv = {base, size, guard};
                if (rs_insert(&g_reserves, &rv) != 0) {
                    va_free(base, size + guard);
                    r = CUDA_ERROR_OUT_OF_MEMORY;
                } else {
                    *ptr = (CUdeviceptr)base;
                }
            }
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    cuMemAddressFree_params p = {ptr, size};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemAddressFree, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_reserve_t *rv = rs_find(&g_reserves, (uintptr_t)ptr);
        if (!rv || rv->base != (uintptr_t)ptr || rv->size != size)
            r = CUDA_ERROR_INVALID_VALUE;
        else if (rs_overlaps(&g_maps, rv->base, rv->size))
            r = CUDA_ERROR_INVALID_VALUE;  /* still mapped: unmap first */
        else {
            size_t guard = rv->guard;
            rs_remove(&g_reserves, rv);
            va_free((uintptr_t)ptr, size + guard);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

static sim_phys_t *phys_find(CUmemGenericAllocationHandle h)
{
    sim_phys_t *ph;
    uint64_t key = h;
    HASH_FIND(hh, g_phys, &key, sizeof key, ph);
    return ph;
}

/* Physical memory of VMM allocations: one sparse memfd per device (so that thousands
 * of allocations do not use thousands of descriptors), carved by offset. A released
 * range has its pages punched out before it is reused. */
typedef struct {
    int fd;
    rangeset_t free;
} phys_heap_t;
static phys_heap_t g_heap[SIM_MAX_DEVICES + 1];

/* Host-located physical memory (cuMemCreate with CU_MEM_LOCATION_TYPE_HOST or
 * HOST_NUMA): pinned host memory the driver maps into device address ranges, which a
 * device reaches where cuMemSetAccess lets it (over the link on a GPU). Its own heap,
 * the last; it counts in no device's memory (FTSIM_HOST_VMM bytes at most). */
static sim_dev_t g_host_mem = {.ordinal = SIM_MAX_DEVICES};

static int host_located(const CUmemAllocationProp *prop)
{
    return prop->location.type == CU_MEM_LOCATION_TYPE_HOST || prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
}

static int heap_alloc(sim_dev_t *dev, size_t size, size_t *offset)
{
    phys_heap_t *h = &g_heap[dev->ordinal];
    if (!h->free.esz) {
        /* Sized to the capacity plus slack: the capacity check bounds what is live,
         * alignment may leave holes. */
        uint64_t bytes = dev->capacity + 64 * gran();
        h->fd = memfd_create("ftsim-vmm", MFD_CLOEXEC);
        if (h->fd < 0 || ftruncate(h->fd, (off_t)bytes) != 0) {
            sim_log("cannot create the VMM memory of device %d: %s", dev->ordinal, strerror(errno));
            if (h->fd >= 0)
                close(h->fd);
            return -1;
        }
        h->free.esz = sizeof(sim_range_t);
        sim_range_t all = {0, bytes};
        if (rs_insert(&h->free, &all) != 0)
            return -1;
    }
    uintptr_t off;
    if (range_alloc(&h->free, size, gran(), 0, &off) != 0)
        return -1;
    *offset = off;
    return 0;
}

static void phys_maybe_destroy(sim_phys_t *ph)
{
    if (ph->refs > 0 || ph->nmaps > 0)
        return;
    phys_heap_t *h = &g_heap[ph->dev->ordinal];
    ph->dev->used -= ph->size;
    if (fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)ph->offset, (off_t)ph->size) != 0)
        sim_log("cannot release VMM memory: %s", strerror(errno));
    range_free(&h->free, ph->offset, ph->size);
    HASH_DELETE(hh, g_phys, ph);
    free(ph);
}

SIM_EXPORT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                        const CUmemAllocationProp *prop, unsigned long long flags)
{
    cuMemCreate_params p = {handle, size, prop, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemCreate, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS) {
        /* A host location: HOST (id ignored) with no handle types, as the driver
         * documents; HOST_NUMA on node 0 (one node here); none where FTSIM_HOST_VMM is 0. */
        int host = prop != NULL && host_located(prop);
        if (!handle || !prop || size == 0 || size % gran() ||
            prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
            (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE && !host) ||
            (host && (g_sim.opt.HOST_VMM == 0 ||
                      (prop->location.type == CU_MEM_LOCATION_TYPE_HOST && prop->requestedHandleTypes != 0) ||
                      (prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && prop->location.id != 0)))) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (!host && (prop->location.id < 0 || prop->location.id >= g_sim.ndev)) {
            r = CUDA_ERROR_INVALID_DEVICE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            g_host_mem.capacity = g_sim.opt.HOST_VMM;
            sim_dev_t *dev = host ? &g_host_mem : &g_sim.dev[prop->location.id];
            sim_phys_t *ph = NULL;
            if (sim_fault_hit(SIM_FAULT_KIND_ALLOC) || size > dev->capacity - dev->used ||
                !(ph = calloc(1, sizeof *ph))) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                if (heap_alloc(dev, size, &ph->offset) != 0) {
                    free(ph);
                    r = CUDA_ERROR_OUT_OF_MEMORY;
                } else {
                    ph->handle = g_next_handle++;
                    ph->size = size;
                    ph->dev = dev;
                    ph->refs = 1;
                    ph->prop = *prop;
                    HASH_ADD(hh, g_phys, handle, sizeof ph->handle, ph);
                    dev->used += size;
                    if (dev->used > dev->peak)
                        dev->peak = dev->used;
                    *handle = ph->handle;
                }
            }
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    if (r == CUDA_SUCCESS)
        host_cost((uint64_t)g_sim.opt.VMM_CREATE_NS);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    cuMemRelease_params p = {handle};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemRelease, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_phys_t *ph = phys_find(handle);
        if (!ph || ph->refs <= 0) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            ph->refs--;
            phys_maybe_destroy(ph);
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    if (r == CUDA_SUCCESS)
        host_cost((uint64_t)g_sim.opt.VMM_CREATE_NS);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    cuMemRetainAllocationHandle_params p = {handle, addr};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemRetainAllocationHandle, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_map_t *m = rs_find(&g_maps, (uintptr_t)addr);
        if (!handle || !m) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            m->ph->refs++;
            *handle = m->ph->handle;
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* A POSIX file descriptor for a handle made with that type requested (a descriptor of
 * /dev/null: nothing imports it here); any other type, or a handle without it, is
 * refused as by the driver. */
SIM_EXPORT CUresult CUDAAPI cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                                         CUmemAllocationHandleType type, unsigned long long flags)
{
    cuMemExportToShareableHandle_params p = {shareable, handle, type, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemExportToShareableHandle, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_phys_t *ph = phys_find(handle);
        if (!ph || !shareable || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
            !(ph->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
            r = CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_unlock(&g_sim.lock);
        if (r == CUDA_SUCCESS) {
            int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                r = CUDA_ERROR_OPERATING_SYSTEM;
            else
                *(int *)shareable = fd;
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                                   CUmemGenericAllocationHandle handle)
{
    cuMemGetAllocationPropertiesFromHandle_params p = {prop, handle};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemGetAllocationPropertiesFromHandle, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_phys_t *ph = phys_find(handle);
        if (!ph || !prop)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *prop = ph->prop;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                     CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    cuMemMap_params p = {ptr, size, offset, handle, flags};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemMap, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS) {
        size_t g = gran();
        uintptr_t va = (uintptr_t)ptr;
        pthread_mutex_lock(&g_sim.lock);
        sim_phys_t *ph = phys_find(handle);
        sim_reserve_t *rv = rs_find(&g_reserves, va);
        if (!ph || ph->refs <= 0 || size == 0 || va % g || size % g || offset % g || flags ||
            offset > ph->size || size > ph->size - offset || !rv ||
            va + size > rv->base + rv->size) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else if (rs_overlaps(&g_maps, va, size)) {
            r = CUDA_ERROR_INVALID_VALUE;  /* as measured on the H200 */
        } else if (offset != 0 || size != ph->size) {
            /* An allocation is mapped whole: the H100's driver (580) refuses a part of
             * one, at offset 0 or past it (bench/map_cost.c). */
            r = CUDA_ERROR_NOT_SUPPORTED;
        } else {
            void *m = mmap((void *)va, size, PROT_NONE, MAP_FIXED | MAP_SHARED,
                           g_heap[ph->dev->ordinal].fd, (off_t)(ph->offset + offset));
            if (m == MAP_FAILED) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                sim_map_t e = {va, size, ph, offset, CU_MEM_ACCESS_FLAGS_PROT_NONE, 0,
                               g_next_buffer_id++};
                if (rs_insert(&g_maps, &e) != 0) {
                    arena_discard(va, size);
                    r = CUDA_ERROR_OUT_OF_MEMORY;
                } else {
                    ph->nmaps++;
                }
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    if (r == CUDA_SUCCESS)
        host_cost((uint64_t)g_sim.opt.VMM_MAP_NS);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    cuMemUnmap_params p = {ptr, size};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemUnmap, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS) {
        uintptr_t va = (uintptr_t)ptr, end = va + size;
        pthread_mutex_lock(&g_sim.lock);
        /* The range must be made of whole mappings, with no holes. */
        uintptr_t at = va;
        size_t i = rs_lower(&g_maps, va);
        size_t first = i;
        while (at < end && i < g_maps.n && ((sim_map_t *)RS_AT(&g_maps, i))->base == at) {
            at += ((sim_map_t *)RS_AT(&g_maps, i))->size;
            i++;
        }
        if (size == 0 || at != end || (g_sim.opt.VMM_UNMAP_ONE && i - first > 1)) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            /* Not synchronising, as on a GPU: work still using the range faults. */
            for (size_t k = i; k > first; k--) {
                sim_map_t *m = RS_AT(&g_maps, k - 1);
                sim_phys_t *ph = m->ph;
                arena_discard(m->base, m->size);
                rs_remove(&g_maps, m);
                ph->nmaps--;
                phys_maybe_destroy(ph);
            }
        }
        pthread_mutex_unlock(&g_sim.lock);
    }
    if (r == CUDA_SUCCESS)
        host_cost((uint64_t)g_sim.opt.VMM_MAP_NS);
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                           size_t count)
{
    cuMemSetAccess_params p = {ptr, size, desc, count};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemSetAccess, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS)
        r = capture_unsafe(0);
    if (r == CUDA_SUCCESS) {
        uintptr_t va = (uintptr_t)ptr, end = va + size;
        CUmemAccess_flags fl = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        if (!desc || count == 0 || size == 0)
            r = CUDA_ERROR_INVALID_VALUE;
        for (size_t k = 0; r == CUDA_SUCCESS && k < count; k++) {
            /* Host pages have one protection for all devices: the union applies. */
            if (desc[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
                desc[k].location.id < 0 || desc[k].location.id >= g_sim.ndev)
                r = CUDA_ERROR_INVALID_DEVICE;
            else if (desc[k].flags > fl)
                fl = desc[k].flags;
        }
        if (r == CUDA_SUCCESS) {
            pthread_mutex_lock(&g_sim.lock);
            uintptr_t at = va;
            size_t i = rs_lower(&g_maps, va);
            size_t first = i;
            while (at < end && i < g_maps.n && ((sim_map_t *)RS_AT(&g_maps, i))->base <= at) {
                sim_map_t *m = RS_AT(&g_maps, i);
                at = m->base + m->size;
                i++;
            }
            /* Another device than the memory's own needs peer access (FTSIM_PEER);
             * host-located memory any device reaches. */
            for (size_t k = first; r == CUDA_SUCCESS && !g_sim.opt.PEER && k < i; k++)
                for (size_t d = 0; d < count; d++) {
                    const sim_dev_t *own = ((sim_map_t *)RS_AT(&g_maps, k))->ph->dev;
                    if (own != &g_host_mem && own->ordinal != desc[d].location.id)
                        r = CUDA_ERROR_INVALID_DEVICE;
                }
            if (r == CUDA_SUCCESS && at < end) {
                r = CUDA_ERROR_INVALID_VALUE;  /* part of the range is not mapped */
            } else if (r == CUDA_SUCCESS) {
                int prot = fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                         : fl == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE;
                if (mprotect((void *)va, size, prot) != 0)
                    r = CUDA_ERROR_INVALID_VALUE;
                for (size_t k = first; r == CUDA_SUCCESS && k < i; k++) {
                    sim_map_t *m = RS_AT(&g_maps, k);
                    m->access = fl;
                    for (size_t d = 0; d < count; d++) { /* the listed devices; others keep theirs */
                        uint32_t bit = 1u << desc[d].location.id;
                        m->devs = desc[d].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE ? m->devs | bit : m->devs & ~bit;
                    }
                }
            }
            /* The host time the call takes (FTSIM_VMM_ACCESS_NS): work the host enqueues
             * afterwards starts that much later on the virtual clock. */
            if (r == CUDA_SUCCESS)
                g_sim.host_now += (uint64_t)g_sim.opt.VMM_ACCESS_NS; /* as host_cost, lock held */
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                           CUdeviceptr ptr)
{
    cuMemGetAccess_params p = {flags, location, ptr};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuMemGetAccess, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        sim_map_t *m = rs_find(&g_maps, (uintptr_t)ptr);
        if (!flags || !location || !m)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *flags = m->access;
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

/* ------------------------------------------------------------------ pointer queries */

typedef struct {
    int known;
    CUmemorytype type;
    sim_dev_t *dev;
    uintptr_t base;
    size_t size;
    uint64_t buffer_id;
    int mapped;
    CUmemAccess_flags access;
    int async;
    int vmm;
} ptr_info_t;

static ptr_info_t ptr_info(uintptr_t a)
{
    ptr_info_t i = {0};
    sim_alloc_t *al = rs_find(&g_allocs, a);
    if (al && a < al->base + al->phys) {
        i = (ptr_info_t){1, CU_MEMORYTYPE_DEVICE, al->dev, al->base, al->bytes, al->buffer_id,
                         1, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, al->async, 0};
        return i;
    }
    sim_map_t *m = rs_find(&g_maps, a);
    if (m) {
        /* Host-located memory: host memory of device 0's context, as the H100's driver
         * answers (bench/host_pieces.c: CU_MEMORYTYPE_HOST, ordinal 0). */
        int host = m->ph->dev == &g_host_mem;
        i = (ptr_info_t){1, host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE, host ? &g_sim.dev[0] : m->ph->dev,
                         m->base, m->size, m->buffer_id, 1, m->access, 0, 1};
        return i;
    }
    sim_host_t *h = rs_find(&g_hosts, a);
    if (h) {
        i = (ptr_info_t){1, CU_MEMORYTYPE_HOST, &g_sim.dev[0], h->base, h->size, 0, 1,
                         CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 0, 0};
        return i;
    }
    return i;
}

static CUresult pointer_attribute(void *data, CUpointer_attribute attr, uintptr_t ptr, ptr_info_t *pi)
{
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = pi->known && pi->type == CU_MEMORYTYPE_DEVICE
                             ? (CUcontext)pi->dev->primary : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = pi->type;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = pi->known ? (void *)ptr : NULL;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(unsigned int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = pi->known ? pi->dev->ordinal : -2;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = pi->buffer_id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(void **)data = (void *)pi->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = pi->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned int *)data = (unsigned int)pi->mapped;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = pi->vmm ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)data = pi->access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                                : pi->access == CU_MEM_ACCESS_FLAGS_PROT_READ
                                ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ
                                : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = pi->async ? (CUmemoryPool)&g_pools[pi->dev->ordinal] : NULL;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    cuPointerGetAttribute_params p = {data, attribute, ptr};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuPointerGetAttribute, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&g_sim.lock);
        ptr_info_t pi = ptr_info((uintptr_t)ptr);
        if (!pi.known)
            r = CUDA_ERROR_INVALID_VALUE;  /* not memory CUDA knows */
        else
            r = pointer_attribute(data, attribute, (uintptr_t)ptr, &pi);
        pthread_mutex_unlock(&g_sim.lock);
    }
    sim_api_exit(&c);
    return r;
}

SIM_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                                   void **data, CUdeviceptr ptr)
{
    cuPointerGetAttributes_params p = {numAttributes, attributes, data, ptr};
    simcu_call_t c;
    CUresult r;
    r = DRV_ENTER(&c, cuPointerGetAttributes, &p, &r, SIMCU_CALL_STICKY);
    if (r == CUDA_SUCCESS) {
        if (!attributes || !data) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            pthread_mutex_lock(&g_sim.lock);
            /* Unlike the single-attribute query, unknown pointers get zero values. */
            ptr_info_t pi = ptr_info((uintptr_t)ptr);
            for (unsigned k = 0; k < numAttributes && r == CUDA_SUCCESS; k++)
                r = pointer_attribute(data[k], attributes[k], (uintptr_t)ptr, &pi);
            pthread_mutex_unlock(&g_sim.lock);
        }
    }
    sim_api_exit(&c);
    return r;
}

/* vmm.c - allocations served from CUDA virtual memory: reserve, create, map, set
 * access, and the address arena (core/vaspace.c) the reservations come from. It knows
 * nothing of units: the residency engine and FT_SPILL map and unmap through it.
 *
 * Pieces may be backed by host-located memory (cuMemCreate with a host location, which
 * the device reads over the link): the room of the program's pools after the plan, and
 * before it what the budget cannot hold of an allocation served in pieces (below).
 *
 * Owns: the vmm table (vmm_lock: allocations and frees come from any thread), the
 * address arena (vas_lock: a chunk's reservation is a driver call not to make under
 * res.lock), the granularity, vmm_pad (atomic), the FT_VMM_* settings (written once
 * in ft_hooks_init), and whether host-located memory works (host_loc, its own lock). It calls hoststore.c, device.c, phys.c and cuda.c only, and takes
 * no lock of the engine's: what FT_SPILL decides of a new allocation (vmm_place_t) and
 * what the engine lets go of a freed one (vmm_free's `forget`) come from the caller,
 * as callbacks. */
#define _GNU_SOURCE
#include "shim/engine.h"

static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static vmm_t *vmms;
/* Both found by the first allocations, which may come from several threads at once:
 * atomic (vmm_ready). */
static size_t vmm_granularity;
static int vmm_disabled;
/* FT_VMM_MIN_SIZE: smaller allocations pass through (the 2 MiB granularity would waste
 * too much on them); 0 = none are served from virtual memory. */
static uint64_t vmm_min_bytes;
/* FT_VMM_RESERVE: address space reserved at a time (va_get). */
static uint64_t va_chunk;

/* The settings, once, before any hook runs (ft_hooks_init). */
void vmm_setup(uint64_t min_bytes, uint64_t reserve)
{
    vmm_min_bytes = min_bytes;
    va_chunk = reserve;
}

/* 1 when an allocation of `size` bytes is served from virtual memory (FT_VMM_MIN_SIZE). */
int vmm_serves(size_t size)
{
    return vmm_min_bytes != 0 && size >= vmm_min_bytes;
}
/* What virtual-memory backed allocations hold beyond their asked-for sizes (mapped in
 * whole granules): the region table counts the asked-for sizes. */
uint64_t vmm_pad;

/* Device memory held through the shim, FT_SPILL's allocations in host memory included:
 * the region table's bytes, virtual-memory backed ones in whole granules. */
uint64_t device_bytes(void)
{
    uint64_t b = ft_regions_bytes(regions) + __atomic_load_n(&vmm_pad, __ATOMIC_RELAXED),
             host = __atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED);
    return b > host ? b - host : 0;
}

/* vmm_find inside a vmm_each callback, vmm_lock held already. */
vmm_t *vmm_find_held(uint64_t va)
{
    vmm_t *v;
    HASH_FIND(hh, vmms, &va, sizeof va, v);
    return v;
}

vmm_t *vmm_find(uint64_t va)
{
    vmm_t *v;
    pthread_mutex_lock(&vmm_lock);
    HASH_FIND(hh, vmms, &va, sizeof va, v);
    pthread_mutex_unlock(&vmm_lock);
    return v;
}

/* Device `other` may now reach the managed device's memory (peer_devices has it): every
 * allocation mapped now is made readable and writable from it. *mapped counts them,
 * *granted those the driver accepted. */
void vmm_grant_peer(int other, unsigned *granted, unsigned *mapped)
{
    CUmemAccessDesc a = { { CU_MEM_LOCATION_TYPE_DEVICE, other }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    vmm_t *v, *tmp;
    pthread_mutex_lock(&vmm_lock);
    HASH_ITER(hh, vmms, v, tmp) {
        if (v->spilled)
            continue;
        (*mapped)++;
        /* Streamed units not loaded have nothing mapped: refused, and granted at
         * their next load. A split allocation's tail (res_split_tail) is mapped for
         * good: granted apart, whatever its head. */
        uint64_t head = v->tail_off != 0 ? v->tail_off : v->size;
        if (v->tail_off != 0)
            drv.set_access(v->va + v->tail_off, v->size - v->tail_off, &a, 1);
        *granted += drv.set_access(v->va, head, &a, 1) == CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&vmm_lock);
}

/* Calls fn(v, ctx) for every virtual-memory allocation, vmm_lock held (fn must not take
 * it, nor add or remove allocations). */
void vmm_each(void (*fn)(vmm_t *v, void *ctx), void *ctx)
{
    vmm_t *v, *tmp;
    pthread_mutex_lock(&vmm_lock);
    HASH_ITER(hh, vmms, v, tmp)
        fn(v, ctx);
    pthread_mutex_unlock(&vmm_lock);
}

/* Pinned memory on device dev: what every physical allocation of the shim is. */
CUmemAllocationProp vmm_prop(CUdevice dev)
{
    CUmemAllocationProp prop = { 0 };
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

/* Makes [va, va + len), mapped, readable and writable from dev and its peers in use. */
CUresult set_access(CUdevice dev, uint64_t va, size_t len)
{
    CUmemAccessDesc access[32];
    size_t n = 0;
    access[n++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    uint32_t peers = peer_devices();
    for (int d = 0; d < 32; d++)
        if ((peers >> d & 1u) && d != dev)
            access[n++] = (CUmemAccessDesc){ { CU_MEM_LOCATION_TYPE_DEVICE, d }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    return drv.set_access(va, len, access, n);
}

/* Maps physical memory of dev over [va, va + len), readable and writable from dev
 * unless `no_access` (the caller sets access, for several regions at once): *h when
 * `given`, else a new allocation (stored in *h). On failure nothing stays mapped and
 * the handle, given or new, is released. ns (NULL: not timed) adds the host time of
 * creating, mapping and setting access, in that order. */
CUresult map_physical(CUdevice dev, uint64_t va, size_t len, CUmemGenericAllocationHandle *h,
                             int given, uint64_t ns[3], int no_access)
{
    CUmemAllocationProp prop = vmm_prop(dev);
    uint64_t t0 = ns != NULL ? now_ns() : 0;
    CUresult rc = given ? CUDA_SUCCESS : drv.create(h, len, &prop, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    uint64_t t1 = ns != NULL ? now_ns() : 0;
    if ((rc = drv.map(va, len, 0, *h, 0)) != CUDA_SUCCESS) {
        drv.release(*h);
        return rc;
    }
    uint64_t t2 = ns != NULL ? now_ns() : 0;
    if (!no_access && (rc = set_access(dev, va, len)) != CUDA_SUCCESS) {
        drv.unmap(va, len);
        drv.release(*h);
        return rc;
    }
    if (ns != NULL) {
        ns[0] += t1 - t0;
        ns[1] += t2 - t1;
        ns[2] += now_ns() - t2;
    }
    return CUDA_SUCCESS;
}

static int vmm_ready(CUdevice *dev)
{
    resolve_driver();
    if (__atomic_load_n(&vmm_disabled, __ATOMIC_RELAXED) || !drv.reserve || !drv.create || !drv.map ||
        !drv.set_access || !drv.unmap || !drv.release || !drv.address_free || !drv.granularity ||
        !drv.ctx_get_device)
        return 0;
    /* cudaMalloc makes the primary context current; so must we before the driver. */
    if (REAL(cudaFree)(NULL) != cudaSuccess || drv.ctx_get_device(dev) != CUDA_SUCCESS)
        return 0;
    /* Written once (the first thread to learn it) and read with acquire, so that the
     * plain reads after vmm_ready returns are ordered after that one write. */
    if (__atomic_load_n(&vmm_granularity, __ATOMIC_ACQUIRE) == 0) {
        CUmemAllocationProp prop = vmm_prop(*dev);
        size_t g = 0, none = 0;
        if (drv.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || g == 0) {
            FT_WARN("virtual memory management unavailable; allocations are not evictable");
            __atomic_store_n(&vmm_disabled, 1, __ATOMIC_RELAXED);
            return 0;
        }
        __atomic_compare_exchange_n(&vmm_granularity, &none, g, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE);
    }
    return 1;
}

/* Device addresses of virtual-memory allocations (core/vaspace.h): cut in order out of
 * reservations of FT_VMM_RESERVE bytes, so that a unit's regions, allocated one after
 * another, lie end to end and a load sets their access in one call (set_unit_access).
 * One reservation per allocation, at the end of the last as a hint, had the H200's
 * driver put about 70% of them elsewhere (5875 cuMemSetAccess calls for 8337 regions in
 * the tensor-parallel run, 270 us each). Its own lock: allocations come from any thread,
 * and a chunk's reservation is a driver call not to make under res.lock. */
static ft_vaspace_t *vas;
static int vas_off; /* FT_VMM_RESERVE=0, or a chunk could not be reserved: one reservation each */
static pthread_mutex_t vas_lock = PTHREAD_MUTEX_INITIALIZER;

static int vas_reserve(uint64_t *base, uint64_t size, uint64_t hint, void *ctx)
{
    CUdeviceptr va = 0;
    (void)ctx;
    if (drv.reserve(&va, size, vmm_granularity, hint, 0) != CUDA_SUCCESS &&
        (hint == 0 || drv.reserve(&va, size, vmm_granularity, 0, 0) != CUDA_SUCCESS))
        return -1;
    *base = va;
    return 0;
}

/* Address space for len bytes: 0 and *va, or the driver's error. */
static CUresult va_get(size_t len, CUdeviceptr *va)
{
    pthread_mutex_lock(&vas_lock);
    if (vas == NULL && !vas_off) {
        uint64_t chunk = va_chunk / vmm_granularity * vmm_granularity;
        vas = chunk != 0 ? ft_vaspace_new(chunk, vmm_granularity, vas_reserve, NULL) : NULL;
        vas_off = vas == NULL;
    }
    uint64_t got = 0;
    int ok = !vas_off && ft_vaspace_get(vas, len, &got) == 0;
    if (!ok && !vas_off) {
        char a[32];
        vas_off = 1;
        FT_WARN("could not reserve %s of device address space (FT_VMM_RESERVE): one reservation per "
                "allocation from now on, and a load sets access region by region",
                human_bytes(va_chunk, a, sizeof a));
    }
    pthread_mutex_unlock(&vas_lock);
    if (ok) {
        *va = (CUdeviceptr)got;
        return CUDA_SUCCESS;
    }
    return drv.reserve(va, len, vmm_granularity, 0, 0);
}

/* Gives [va, va+len) back to where va_get found it. */
static void va_put(CUdeviceptr va, size_t len)
{
    pthread_mutex_lock(&vas_lock);
    int mine = vas != NULL && ft_vaspace_put(vas, va, len) == 0;
    pthread_mutex_unlock(&vas_lock);
    if (!mine)
        drv.address_free(va, len);
}

/* v is in the table: its granule padding counts from now on, then the caller's
 * placement counts it too (under its own lock). The padding first: a sum read in
 * between is then over what is held, never under. */
static void placed(vmm_t *v, int in_host, const vmm_place_t *place, uint64_t *admitted)
{
    __atomic_add_fetch(&vmm_pad, v->size - v->asked, __ATOMIC_RELAXED);
    if (place != NULL)
        place->placed(v, in_host, admitted);
}

/* Serves an allocation from virtual memory. cudaSuccess, cudaErrorMemoryAllocation,
 * or cudaErrorNotSupported (the caller then passes it through). place (NULL: none)
 * says whether it starts in host memory, and counts it. *admitted: bytes counted in
 * `admitting`, for the caller to take off once the region is tracked. */
static CUresult alloc_pieces(CUdevice dev, CUdeviceptr va, size_t len, size_t size, const vmm_place_t *place,
                             uint64_t *admitted, int external, vmm_t *chain);
/* Host-located memory (below): whether the device has it, and a handle of it. */
static int host_loc;
static CUresult create_host(CUmemGenericAllocationHandle *h, size_t len);
static int host_memory_works(size_t g);
/* Some allocation was served in pieces (atomic): until then a copy costs nothing in
 * vmm_note_copy. */
static int pieces_made;

/* at: 0, or the address the program reserved (external). */
static cudaError_t alloc_at(uint64_t at, void **out, size_t size, int pieced, const vmm_place_t *place,
                            uint64_t *admitted)
{
    CUdevice dev;
    if (!vmm_ready(&dev))
        return cudaErrorNotSupported;
    size_t len = (size + vmm_granularity - 1) / vmm_granularity * vmm_granularity;
    int external = at != 0;
    CUdeviceptr va = (CUdeviceptr)at;
    CUmemGenericAllocationHandle h = 0;
    CUresult rc = external ? CUDA_SUCCESS : va_get(len, &va);
    if (rc != CUDA_SUCCESS)
        goto fail;
    /* The program's own mapping: always pieces, and, right after another one served, more
     * pieces of that one's allocation (vmm_chain_before). */
    vmm_t *chain = external ? vmm_chain_before(va) : NULL;
    if (external || (pieced && len / vmm_granularity >= 2 && len / vmm_granularity <= VMM_PIECES_MAX)) {
        if ((rc = alloc_pieces(dev, va, len, size, place, admitted, external, chain)) != CUDA_SUCCESS)
            goto fail_va;
        *out = (void *)(uintptr_t)va;
        return cudaSuccess;
    }
    /* FT_SPILL: over the budget, the allocation starts in host memory; within it, it
     * counts as held from this decision on. */
    void *host = NULL;
    int in_host = place != NULL && place->over(len, admitted);
    if (in_host && (host = host_store_alloc(len)) != NULL) {
        vmm_t *v = calloc(1, sizeof *v);
        if (v == NULL) {
            host_store_free(host);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto fail_va;
        }
        *v = (vmm_t){ .va = va, .size = len, .asked = size, .spilled = 1, .host = host, .external = external };
        pthread_mutex_lock(&vmm_lock);
        HASH_ADD(hh, vmms, va, sizeof v->va, v);
        pthread_mutex_unlock(&vmm_lock);
        placed(v, 1, place, admitted);
        *out = (void *)(uintptr_t)va;
        return cudaSuccess;
    }
    rc = map_physical(dev, va, len, &h, 0, NULL, 0);
    if (rc != CUDA_SUCCESS)
        goto fail_va;
    vmm_t *v = calloc(1, sizeof *v);
    if (v == NULL) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail_map;
    }
    v->va = va;
    v->size = len;
    v->asked = size;
    v->handle = h;
    v->external = external;
    pthread_mutex_lock(&vmm_lock);
    HASH_ADD(hh, vmms, va, sizeof v->va, v);
    int added = v->hh.tbl != NULL;
    pthread_mutex_unlock(&vmm_lock);
    if (!added) {
        free(v);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail_map;
    }
    placed(v, 0, place, admitted);
    *out = (void *)(uintptr_t)va;
    return cudaSuccess;

fail_map:
    drv.unmap(va, len);
    drv.release(h);
fail_va:
    if (!external)
        va_put(va, len);
fail:
    if (rc == CUDA_ERROR_OUT_OF_MEMORY)
        return cudaErrorMemoryAllocation;
    FT_LOG_CAPPED(FT_LOG_WARN, 3, "virtual memory allocation of %zu bytes failed (CUresult %d); "
                  "passing it to cudaMalloc", size, (int)rc);
    return cudaErrorNotSupported;
}

cudaError_t vmm_alloc(void **out, size_t size, int pieced, const vmm_place_t *place, uint64_t *admitted)
{
    return alloc_at(0, out, size, pieced, place, admitted);
}

cudaError_t vmm_alloc_at(uint64_t at, size_t size, int pieced, const vmm_place_t *place, uint64_t *admitted)
{
    void *out = NULL;
    return at == 0 ? cudaErrorInvalidValue : alloc_at(at, &out, size, pieced, place, admitted);
}

/* [va, va + len), reserved, served in pieces of one granule, each with physical memory
 * of its own, so that the residency engine can unmap some and not others: a caching
 * allocator's segment may hold every weight of a model (transformers' from_pretrained
 * with device_map sizes one allocation for all of them), and whole, it could only
 * stream as one unit. Mapped on the device at first (place's on_device makes room for
 * it); before the plan FT_SPILL moves it whole, after it the units move its pieces.
 * Access is set once, for the whole range. */
static CUresult alloc_pieces(CUdevice dev, CUdeviceptr va, size_t len, size_t size, const vmm_place_t *place,
                             uint64_t *admitted, int external, vmm_t *chain)
{
    size_t g = vmm_granularity, n = len / g, k;
    vmm_t **p = calloc(n, sizeof *p);
    if (p == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* What the budget cannot hold of it besides the rest, its last pieces, goes to
     * host-located memory the device reaches over the link, until the plan
     * (vmm_used_to_device): nothing else moves out for it, and the budget holds. Where
     * the device has no such memory, room is made for all of it as far as it can be. */
    uint64_t excess = place != NULL && place->over_budget != NULL ? place->over_budget(len) : 0;
    size_t on_host_from = n;
    if (excess > 0 && host_memory_works(g))
        on_host_from = excess >= len ? 0 : n - (size_t)((excess + g - 1) / g);
    if (place != NULL && place->on_device != NULL)
        *admitted = place->on_device((uint64_t)on_host_from * g);
    if (on_host_from < n && *admitted != 0 && place->admit_host != NULL) {
        /* Admitted whole, as the caller counts it off once the region is tracked: the
         * pieces in host memory count in host_room_bytes instead, from when they are. */
        uint64_t rest = (uint64_t)(n - on_host_from) * g;
        place->admit_host(rest);
        *admitted += rest;
    }
    size_t hosted = 0;
    CUresult rc = CUDA_SUCCESS;
    for (k = 0; k < n; k++) {
        CUmemGenericAllocationHandle h;
        int host = k >= on_host_from && create_host(&h, g) == CUDA_SUCCESS;
        if (host && (rc = drv.map(va + k * g, g, 0, h, 0)) != CUDA_SUCCESS)
            drv.release(h);
        else if (!host && (rc = map_physical(dev, va + k * g, g, &h, 0, NULL, 1)) != CUDA_SUCCESS)
            break;
        if (rc != CUDA_SUCCESS)
            break;
        hosted += (size_t)host;
        if ((p[k] = calloc(1, sizeof *p[k])) == NULL) {
            drv.unmap(va + k * g, g);
            drv.release(h);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        *p[k] = (vmm_t){ .va = va + k * g, .size = g, .asked = size - k * g < g ? size - k * g : g, .handle = h,
                         .piece = 1, .pieces = k == 0 && chain == NULL ? (uint32_t)n : 0, .map_n = 1,
                         .external = external, .on_host = host };
    }
    for (size_t j = 0; hosted > 0 && j < k; j++)
        p[j]->host_pieced = 1;
    if (rc == CUDA_SUCCESS)
        rc = set_access(dev, va, len);
    if (rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&vmm_lock);
        for (k = 0; k < n; k++) {
            HASH_ADD(hh, vmms, va, sizeof p[k]->va, p[k]);
            if (p[k]->hh.tbl == NULL)
                break;
        }
        if (k < n) { /* the table could not grow: out of it again */
            for (size_t j = 0; j < k; j++)
                HASH_DEL(vmms, p[j]);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (chain != NULL) {
            chain->pieces += (uint32_t)n;
        }
        pthread_mutex_unlock(&vmm_lock);
        k = n;
    }
    if (rc != CUDA_SUCCESS) {
        for (size_t j = 0; j < k; j++) {
            drv.unmap(p[j]->va, g);
            drv.release(p[j]->handle);
            free(p[j]);
        }
        free(p);
        return rc;
    }
    if (hosted > 0) {
        __atomic_add_fetch(&host_room_bytes, (uint64_t)hosted * g, __ATOMIC_RELAXED);
        char a[32], b[32];
        FT_LOG_CAPPED(FT_LOG_INFO, 3, "an allocation of %s, past the budget before the plan: %s of it in host "
                      "memory the device reaches over the link, until the plan brings what stays to the device",
                      human_bytes(size, a, sizeof a), human_bytes((uint64_t)hosted * g, b, sizeof b));
    }
    __atomic_store_n(&pieces_made, 1, __ATOMIC_RELAXED);
    char a[32];
    if (!external)
        FT_LOG_CAPPED(FT_LOG_INFO, 3, "an allocation of %s, over half the budget, is served in %zu pieces of %zu "
                      "KiB, so that units can hold parts of it", human_bytes(size, a, sizeof a), n, g >> 10);
    /* The pad and the admission as for one allocation of len bytes. */
    vmm_t whole = { .va = va, .size = len, .asked = size };
    placed(&whole, 0, place, admitted);
    free(p);
    return CUDA_SUCCESS;
}

/* The granularity, asked of the driver now if no allocation has yet; 0 when virtual
 * memory cannot serve allocations. */
size_t vmm_gran_now(void)
{
    CUdevice dev;
    return vmm_ready(&dev) ? vmm_gran() : 0;
}

static void release_one(vmm_t *v, int (*forget)(vmm_t *v));

/* The first piece of the program's own mapping that ends right at va (served, the
 * program's address: the mappings it makes end to end are one allocation's pieces, as a
 * buffer of its allocator may lie across two), or NULL. */
vmm_t *vmm_chain_before(uint64_t va)
{
    size_t g = vmm_gran();
    if (g == 0 || va < g)
        return NULL;
    vmm_t *last = vmm_find(va - g);
    if (last == NULL || !last->external || !last->piece)
        return NULL;
    vmm_t *first = vmm_piece_first(last);
    return first != NULL && first->va + (uint64_t)first->pieces * g == va ? first : NULL;
}

/* The pieces of the program's own mappings in [va, va + len) released (forget: as
 * vmm_free's), the address range staying the program's. The allocation they were pieces
 * of keeps what lies before them; what lies after becomes one of its own. 1 when some
 * piece was there. */
int vmm_free_program(uint64_t va, uint64_t len, int (*forget)(vmm_t *v))
{
    size_t g = vmm_gran();
    if (g == 0 || len == 0)
        return 0;
    uint64_t n = len / g;
    vmm_t **all = calloc(n, sizeof *all);
    if (all == NULL)
        return 0;
    pthread_mutex_lock(&vmm_lock);
    vmm_t *at;
    HASH_FIND(hh, vmms, &va, sizeof va, at);
    vmm_t *first = at;
    while (first != NULL && first->piece && first->pieces == 0) {
        uint64_t back = first->va - first->size;
        HASH_FIND(hh, vmms, &back, sizeof back, first);
    }
    uint64_t end = first != NULL ? first->va + (uint64_t)first->pieces * g : 0;
    size_t found = 0;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t x = va + k * g;
        HASH_FIND(hh, vmms, &x, sizeof x, all[k]);
        if (all[k] != NULL && all[k]->external) {
            HASH_DEL(vmms, all[k]);
            found++;
        } else {
            all[k] = NULL;
        }
    }
    if (first != NULL && first->external && found > 0) {
        if (first->va < va)
            first->pieces = (uint32_t)((va - first->va) / g);
        if (va + len < end) {
            uint64_t rest_va = va + len;
            vmm_t *rest;
            HASH_FIND(hh, vmms, &rest_va, sizeof rest_va, rest);
            if (rest != NULL)
                rest->pieces = (uint32_t)((end - rest_va) / g);
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    if (found > 0)
        REAL(cudaDeviceSynchronize)(); /* as vmm_free */
    for (uint64_t k = 0; k < n; k++)
        if (all[k] != NULL) {
            release_one(all[k], forget);
            free(all[k]);
        }
    free(all);
    return found > 0;
}

size_t vmm_gran(void)
{
    return __atomic_load_n(&vmm_granularity, __ATOMIC_ACQUIRE);
}

static void release_one(vmm_t *v, int (*forget)(vmm_t *v));

/* 1 when p was a virtual-memory allocation (now released, all its pieces), 0 when it is
 * not one. forget (NULL: none) lets go of what the engine kept of each piece, the
 * device synchronised, and answers whether physical memory is mapped behind it. */
int vmm_free(void *p, int (*forget)(vmm_t *v))
{
    uint64_t va = (uint64_t)(uintptr_t)p;
    pthread_mutex_lock(&vmm_lock);
    vmm_t *v;
    HASH_FIND(hh, vmms, &va, sizeof va, v);
    /* A piece other than the first is not an allocation's address (the runtime's
     * cudaFree answers it). */
    if (v != NULL && v->piece && v->pieces == 0)
        v = NULL;
    size_t n = v == NULL ? 0 : v->piece ? v->pieces : 1;
    vmm_t **all = n > 1 ? malloc(n * sizeof *all) : &v;
    if (all == NULL)
        n = 0, v = NULL; /* no memory to free it with: left mapped, the runtime refuses it */
    for (size_t k = 0; k < n; k++) {
        uint64_t at = va + k * (v->size);
        HASH_FIND(hh, vmms, &at, sizeof at, all[k]);
        if (all[k] != NULL)
            HASH_DEL(vmms, all[k]);
    }
    pthread_mutex_unlock(&vmm_lock);
    if (v == NULL)
        return 0;
    /* cudaFree synchronises the device before releasing; so do we. */
    REAL(cudaDeviceSynchronize)();
    uint64_t len = n * v->size;
    int external = v->external;
    for (size_t k = 0; k < n; k++)
        if (all[k] != NULL)
            release_one(all[k], forget);
    if (!external)
        va_put(va, len);
    for (size_t k = 0; k < n; k++)
        free(all[k]);
    if (all != &v)
        free(all);
    return 1;
}

/* v, out of the table: what the engine kept of it goes, then its physical memory. */
static void release_one(vmm_t *v, int (*forget)(vmm_t *v))
{
    __atomic_sub_fetch(&vmm_pad, v->size - v->asked, __ATOMIC_RELAXED);
    vmm_left_host(v);
    int mapped = forget != NULL ? forget(v) : !v->spilled;
    /* Split (res_split_tail): the part before tail_off is the unit's, mapped when it is
     * loaded; the tail is mapped for good, with physical memory of its own. */
    uint64_t head = v->tail_off != 0 ? v->tail_off : v->size;
    CUresult rc = CUDA_SUCCESS;
    /* A piece inside an earlier piece's mapping went with it (vmm_free releases the
     * pieces in address order); the driver unmaps whole mappings only. */
    if (mapped && !(v->piece && v->map_n == 0))
        rc = drv.unmap(v->va, v->piece ? (uint64_t)v->map_n * v->size : head);
    if (mapped && rc == CUDA_SUCCESS && phys_drop(v->handle))
        phys_release(v->handle);
    for (int i = 0; rc == CUDA_SUCCESS && i < v->n_tails; i++) {
        uint64_t end = i == 0 ? v->size : v->tail_at[i - 1];
        if ((rc = drv.unmap(v->va + v->tail_at[i], end - v->tail_at[i])) == CUDA_SUCCESS)
            drv.release(v->tail_h[i]);
    }
    if (rc != CUDA_SUCCESS)
        FT_DEBUG("vmm: unmapping the allocation at %#llx (%llu bytes) failed: %d", (unsigned long long)v->va,
                 (unsigned long long)v->size, (int)rc);
}

/* A copy of n bytes to dst: when dst lies in a piece, the copy's end is kept as the
 * extent of the storage it filled (a loader copies each tensor in whole), which
 * discovery reads (vmm_piece_span) to check the units it cut the allocation into. */
void vmm_note_copy(const void *dst, size_t n)
{
    ft_region_t r;
    vmm_t *v;
    if (!__atomic_load_n(&pieces_made, __ATOMIC_RELAXED) || dst == NULL || n == 0 ||
        !ft_regions_find(regions, (uint64_t)(uintptr_t)dst, &r) || !(r.flags & FT_REGION_PIECE) ||
        (v = vmm_find(r.base)) == NULL)
        return;
    uint64_t end = (uint64_t)(uintptr_t)dst + n, was = __atomic_load_n(&v->copy_end, __ATOMIC_RELAXED);
    while (end > was && !__atomic_compare_exchange_n(&v->copy_end, &was, end, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* r is a piece and the region after it, end to end, is the next piece of the same
 * allocation: 1, that region in *q. */
int piece_after(const ft_region_t *r, ft_region_t *q)
{
    return (r->flags & FT_REGION_PIECE) && ft_regions_find(regions, r->base + r->size, q) &&
           q->base == r->base + r->size && (q->flags & FT_REGION_PIECE) && !(q->flags & FT_REGION_PIECE_FIRST);
}

/* The first piece of v's allocation (v itself when it is no piece, or the first). */
vmm_t *vmm_piece_first(vmm_t *v)
{
    while (v != NULL && v->piece && v->pieces == 0)
        v = vmm_find(v->va - v->size);
    return v;
}

/* Discovery's piece_span: see vmm_note_copy. FT_TEST_NO_COPY_SPAN=1 (tests only): no
 * extent known, as for weights a kernel made (JAX's jitted initialisers). */
uint64_t vmm_piece_span(uint64_t base)
{
    static int off = -1; /* under discovery's lock, as every call */
    if (off < 0) {
        const char *t = getenv("FT_TEST_NO_COPY_SPAN");
        off = t != NULL && strcmp(t, "1") == 0;
    }
    if (off)
        return 0;
    vmm_t *v = vmm_find(base);
    return v != NULL ? __atomic_load_n(&v->copy_end, __ATOMIC_RELAXED) : 0;
}

uint64_t vmm_bytes(const vmm_t *v)
{
    return v->piece ? (uint64_t)v->pieces * v->size : v->size;
}

/* --- the room of the program's pools in host memory ---------------------------------
 *
 * XLA grows its pool by doubling chunks, and with preallocation takes a fraction of the
 * device at once: at the plan much of it is room no buffer has used yet. On the device
 * it is non-weight memory the budget must hold, which a budget of a third of the
 * weights cannot. Host-located physical memory (cuMemCreate with a host location,
 * mapped with device access) is memory the device reads and writes over the link: the
 * room moved there stays valid at the same addresses whatever the program does with it
 * later, only slower, and counts in no device memory. Which pieces are room is a guess
 * (used(): no call FlexTensor observed touched them, no copy reached them), so nothing
 * depends on it but speed. Pieces are moved from the last one used on, a margin of
 * ROOM_MARGIN bytes past it: a buffer a kernel was given the start of may run on into
 * the next pieces. */
#define ROOM_MARGIN ((uint64_t)16 << 20)

uint64_t host_room_bytes;
/* host_loc: 1 when host-located memory works (host_prop), -1 refused, 0 not tried
 * (res.lock, or an allocating thread's: a race only tries twice). */
static CUmemAllocationProp host_prop;
/* The pinned buffer a piece's bytes pass through as it moves (one granule), made with
 * host_loc's answer, which it is part of: without FlexTensor's own copies (a process
 * without the CUDA runtime's exports, as JAX's), pieces that went to host-located
 * memory could never come back, and a kernel reading its weights over the link made
 * the H100's JAX run time out (4 min against 17 s). */
static void *host_bounce;

/* The bounce, once host_loc says host-located memory works (acquire), else NULL. */
static void *bounce_get(size_t g)
{
    (void)g;
    return __atomic_load_n(&host_loc, __ATOMIC_ACQUIRE) > 0 ? host_bounce : NULL;
}

/* A handle of len bytes of host-located memory: HOST_NUMA node 0 (CUDA 12.2), else
 * HOST (no node); the first that works is kept. */
static CUresult create_host(CUmemGenericAllocationHandle *h, size_t len)
{
    /* Learnt once, under its own lock: allocating threads and the switch may ask first. */
    static pthread_mutex_t learn = PTHREAD_MUTEX_INITIALIZER;
    int known = __atomic_load_n(&host_loc, __ATOMIC_ACQUIRE);
    if (known == 0) {
        pthread_mutex_lock(&learn);
        known = __atomic_load_n(&host_loc, __ATOMIC_ACQUIRE);
        CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
        static const CUmemLocationType types[] = { CU_MEM_LOCATION_TYPE_HOST_NUMA, CU_MEM_LOCATION_TYPE_HOST };
        void *b = NULL;
        if (known == 0 && own_host_alloc(&b, len) != cudaSuccess) {
            __atomic_store_n(&host_loc, -1, __ATOMIC_RELEASE);
            FT_INFO("FlexTensor's own copies are not available in this process (cudaHostAlloc): the room of the "
                    "program's pools, and what the budget cannot hold of an allocation served in pieces before the "
                    "plan, stay on the device");
            pthread_mutex_unlock(&learn);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        host_bounce = b;
        for (size_t i = 0; known == 0 && i < sizeof types / sizeof *types; i++) {
            CUmemAllocationProp p = { 0 };
            p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            p.location.type = types[i];
            p.location.id = 0;
            if ((rc = drv.create(h, len, &p, 0)) == CUDA_SUCCESS) {
                host_prop = p;
                __atomic_store_n(&host_loc, 1, __ATOMIC_RELEASE);
                pthread_mutex_unlock(&learn);
                return rc;
            }
        }
        if (known == 0) {
            __atomic_store_n(&host_loc, -1, __ATOMIC_RELEASE);
            FT_INFO("the device has no host-located virtual memory (cuMemCreate with a host location: CUresult %d): "
                    "the room of the program's pools, and what the budget cannot hold of an allocation served in "
                    "pieces before the plan, stay on the device", (int)rc);
            known = -1;
        }
        pthread_mutex_unlock(&learn);
    }
    return known > 0 ? drv.create(h, len, &host_prop, 0) : CUDA_ERROR_NOT_SUPPORTED;
}

void vmm_left_host(vmm_t *v)
{
    if (v->on_host) {
        v->on_host = 0;
        __atomic_sub_fetch(&host_room_bytes, v->size, __ATOMIC_RELAXED);
    }
}

/* Whether the device has host-located memory (learnt with one handle made and let go). */
static int host_memory_works(size_t g)
{
    CUmemGenericAllocationHandle h;
    if (__atomic_load_n(&host_loc, __ATOMIC_ACQUIRE) != 0)
        return __atomic_load_n(&host_loc, __ATOMIC_ACQUIRE) > 0;
    if (create_host(&h, g) != CUDA_SUCCESS)
        return 0;
    drv.release(h);
    return 1;
}

/* v's bytes onto memory of the other kind at the same addresses: host-located memory
 * (to_host), or device memory of its own; through bounce (pinned, v->size bytes).
 * 0, or -1 with v as it was. */
static int piece_move(vmm_t *v, CUdevice dev, void *bounce, int to_host)
{
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp prop = vmm_prop(dev);
    if ((to_host ? create_host(&h, v->size) : drv.create(&h, v->size, &prop, 0)) != CUDA_SUCCESS)
        return -1;
    if (own_copy_sync(bounce, (void *)(uintptr_t)v->va, v->size, cudaMemcpyDeviceToHost) != cudaSuccess ||
        drv.unmap(v->va, v->size) != CUDA_SUCCESS) {
        drv.release(h);
        return -1;
    }
    if (drv.map(v->va, v->size, 0, h, 0) != CUDA_SUCCESS || set_access(dev, v->va, v->size) != CUDA_SUCCESS) {
        drv.unmap(v->va, v->size);
        drv.release(h);
        /* Back onto its own memory, kept until now. */
        if (drv.map(v->va, v->size, 0, v->handle, 0) != CUDA_SUCCESS || set_access(dev, v->va, v->size) != CUDA_SUCCESS)
            FT_LOG_CAPPED(FT_LOG_ERROR, 3, "vmm: a piece at %#llx could not be mapped back after a failed move: "
                          "the program will fault there", (unsigned long long)v->va);
        return -1;
    }
    own_copy_sync((void *)(uintptr_t)v->va, bounce, v->size, cudaMemcpyHostToDevice);
    drv.release(v->handle);
    v->handle = h;
    if (to_host) {
        v->on_host = 1;
        __atomic_add_fetch(&host_room_bytes, v->size, __ATOMIC_RELAXED);
    } else {
        vmm_left_host(v);
    }
    return 0;
}

/* A piece mapped alone on device memory of its own, as alloc_pieces made it: one that
 * can move. */
static int alone_on_device(const vmm_t *v)
{
    return !v->on_host && !v->spilled && v->map_n == 1 && v->tail_off == 0 && phys_size(v->handle) == 0;
}

/* A piece, its copy end, and whether it may move (0: no; 1: alone on the device; 2: in
 * host memory). */
struct room_piece {
    uint64_t va, copy_end;
    uint8_t movable;
};

struct room_scan {
    struct room_piece *p;
    size_t n, cap;
};

static void room_push(struct room_scan *r, const vmm_t *v)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        struct room_piece *p = realloc(r->p, cap * sizeof *p);
        if (p == NULL)
            return;
        r->p = p;
        r->cap = cap;
    }
    r->p[r->n++] = (struct room_piece){ v->va, __atomic_load_n(&v->copy_end, __ATOMIC_RELAXED),
                                        v->on_host ? 2 : alone_on_device(v) ? 1 : 0 };
}

/* Every piece of the program's served mappings and of allocations with pieces in host
 * memory. */
static void room_collect(vmm_t *v, void *ctx)
{
    if (v->piece && (v->external || v->on_host || v->host_pieced))
        room_push(ctx, v);
}

/* The device pieces of allocations partly in host memory already (alloc_pieces). */
static void hosted_collect(vmm_t *v, void *ctx)
{
    if (v->host_pieced && alone_on_device(v))
        room_push(ctx, v);
}

static int cmp_piece(const void *a, const void *b)
{
    uint64_t x = ((const struct room_piece *)a)->va, y = ((const struct room_piece *)b)->va;
    return x < y ? -1 : x > y;
}

/* Every piece room_collect takes, in address order, *n of them; NULL when none (or no
 * memory). The caller frees it. */
static struct room_piece *room_sorted(size_t *n)
{
    struct room_scan r = { 0 };
    vmm_each(room_collect, &r);
    *n = r.n;
    if (r.p != NULL)
        qsort(r.p, r.n, sizeof *r.p, cmp_piece);
    return r.p;
}

/* The piece at va moved to host-located memory (to_host) or onto the device, the
 * devices that reach it synchronised first, once a walk (*synced): nothing the program
 * runs may be using what moves. 1 when it moved, 0 when not, -1 when there is no bounce
 * buffer (nothing more can move). */
/* The end of the run of pieces end to end that begins at p[i] (p in address order, np
 * of them, g the granule): the index past its last. */
static size_t run_end(const struct room_piece *p, size_t np, size_t i, size_t g)
{
    size_t j = i + 1;
    while (j < np && p[j].va == p[j - 1].va + g)
        j++;
    return j;
}

static int move_piece_at(uint64_t va, CUdevice dev, int to_host, int *synced)
{
    if (!*synced) {
        sync_reaching_devices();
        *synced = 1;
    }
    void *bounce = bounce_get(vmm_gran());
    if (bounce == NULL)
        return -1;
    vmm_t *v = vmm_find(va);
    return v != NULL && v->on_host != to_host && piece_move(v, dev, bounce, to_host) == 0;
}

/* What vmm_room_to_host and vmm_used_to_device share: the pieces in address order, and
 * for each run of them end to end, the room from its margin past the last piece used.
 * to_host: room on the device goes to host memory; else pieces in host memory that are
 * not room come to the device. */
static uint64_t pools_place(int (*used)(uint64_t va), int to_host, int dry, uint64_t *pieces)
{
    CUdevice dev;
    size_t g = vmm_gran();
    *pieces = 0;
    if (g == 0 || (to_host && __atomic_load_n(&host_loc, __ATOMIC_RELAXED) < 0) || !vmm_ready(&dev))
        return 0;
    size_t np;
    struct room_piece *p = room_sorted(&np);
    if (p == NULL)
        return 0;
    uint64_t moved = 0;
    int synced = 0;
    for (size_t i = 0; i < np;) {
        size_t j = run_end(p, np, i, g);
        uint64_t reach = p[i].va;
        for (size_t k = i; k < j; k++) {
            if (p[k].copy_end > reach)
                reach = p[k].copy_end;
            if (used(p[k].va) && p[k].va + g > reach)
                reach = p[k].va + g;
        }
        uint64_t from = reach + ROOM_MARGIN;
        for (size_t k = i; k < j; k++) {
            int room = p[k].va >= from;
            if (to_host ? !(room && p[k].movable == 1) : !(!room && p[k].movable == 2))
                continue;
            if (dry) {
                if (to_host && !host_memory_works(g))
                    break;
                moved += g;
                (*pieces)++;
                continue;
            }
            int rc = move_piece_at(p[k].va, dev, to_host, &synced);
            if (rc < 0)
                break;
            moved += rc * g;
            *pieces += (uint64_t)rc;
        }
        if (to_host && __atomic_load_n(&host_loc, __ATOMIC_RELAXED) < 0)
            break;
        i = j;
    }
    free(p);
    return moved;
}

uint64_t vmm_room_to_host(int (*used)(uint64_t va), int dry, uint64_t *pieces)
{
    return pools_place(used, 1, dry, pieces);
}

uint64_t vmm_used_to_device(int (*used)(uint64_t va), int dry, uint64_t *pieces)
{
    return pools_place(used, 0, dry, pieces);
}

/* Pieces in host-located memory that calls point into (ptrs, sorted) onto device memory
 * of their own: in each run of pieces end to end, with `spread` those from the lowest
 * pointer's piece to ROOM_MARGIN past the highest pointer (a buffer given by its start
 * runs on past it; the buffers between two pointers are the same program's), else the
 * pieces the pointers lie in and the one after each, the lowest first and at
 * most `limit` bytes, the device synchronised first. Its bytes and pieces moved (`dry`:
 * that would move, nothing done). res.lock held, no stream capture under way. */
uint64_t vmm_reached_to_device(const uint64_t *ptrs, size_t n, int spread, int dry, uint64_t limit, uint64_t *pieces)
{
    CUdevice dev;
    size_t g = vmm_gran();
    *pieces = 0;
    if (g == 0 || n == 0 || __atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED) == 0 || !vmm_ready(&dev))
        return 0;
    size_t np;
    struct room_piece *p = room_sorted(&np);
    if (p == NULL)
        return 0;
    uint64_t moved = 0;
    int synced = 0;
    size_t at = 0; /* the first pointer not below the run */
    for (size_t i = 0; i < np;) {
        size_t j = run_end(p, np, i, g);
        uint64_t lo = p[i].va, hi = p[j - 1].va + g;
        while (at < n && ptrs[at] < lo)
            at++;
        size_t k = at;
        uint64_t first = 0, last = 0;
        for (; k < n && ptrs[k] < hi; k++) {
            if (k == at)
                first = ptrs[k] - (ptrs[k] - lo) % g;
            last = ptrs[k];
        }
        uint64_t to = last + ROOM_MARGIN < hi ? last + ROOM_MARGIN : hi;
        size_t near = at; /* !spread: the first pointer at or past this piece */
        for (size_t q = i; k > at && q < j; q++) {
            if (p[q].movable != 2 || p[q].va < first || p[q].va >= to)
                continue;
            if (!spread) {
                while (near < k && ptrs[near] < p[q].va)
                    near++;
                int holds = near < k && ptrs[near] < p[q].va + g;
                int after = q > i && near > at && ptrs[near - 1] >= p[q].va - g && ptrs[near - 1] < p[q].va;
                if (!holds && !after)
                    continue;
            }
            if (moved + g > limit)
                break;
            if (dry) {
                moved += g;
                (*pieces)++;
                continue;
            }
            int rc = move_piece_at(p[q].va, dev, 0, &synced);
            if (rc < 0)
                break;
            moved += rc * g;
            *pieces += (uint64_t)rc;
        }
        at = k;
        i = j;
    }
    free(p);
    return moved;
}

static int cmp_piece_down(const void *a, const void *b)
{
    return cmp_piece(b, a);
}

uint64_t vmm_pieces_to_host(uint64_t need)
{
    CUdevice dev;
    size_t g = vmm_gran();
    void *bounce = bounce_get(g);
    if (g == 0 || need == 0 || bounce == NULL || !vmm_ready(&dev))
        return 0;
    struct room_scan r = { 0 };
    vmm_each(hosted_collect, &r);
    if (r.p == NULL)
        return 0;
    qsort(r.p, r.n, sizeof *r.p, cmp_piece_down); /* the last pieces first */
    sync_reaching_devices(); /* nothing the program runs may be using what moves */
    uint64_t moved = 0;
    for (size_t i = 0; i < r.n && moved < need; i++) {
        vmm_t *v = vmm_find(r.p[i].va);
        if (v != NULL && !v->on_host && piece_move(v, dev, bounce, 1) == 0)
            moved += g;
    }
    free(r.p);
    return moved;
}

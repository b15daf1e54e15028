/* progmap.c - device memory the program maps itself (cuMemCreate, cuMemMap,
 * cuMemSetAccess, cuMemUnmap, cuMemRelease): XLA's allocator grows its pool this way,
 * and so does PyTorch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
 *
 * A handle the program creates holds physical memory FlexTensor cannot give back while
 * the program holds the handle. So, with FT_PROGRAM_MAPPINGS=serve, for pinned,
 * uncompressed device memory on the managed device, cuMemCreate makes nothing and hands out a handle of FlexTensor's own
 * (a `stand_in`, its value tagged STAND_IN_TAG, which no driver handle has: those are
 * pointers or small counts). The first cuMemMap of it, whole, at offset 0, serves the
 * range the program reserved as an allocation of FlexTensor's at that address
 * (hooks_alloc.c's alloc_program_mapping: admitted by the budget, FT_SPILL's placement,
 * pieces of one granule, a region discovery can find weights in and the engine can
 * move). A mapping that begins where a served one ends continues that one's allocation
 * (vmm.c's vmm_chain_before): XLA maps its pool's chunks end to end, and a buffer of its
 * allocator may lie across two. cuMemUnmap frees the pieces in its range, the address
 * staying the program's. cuMemSetAccess over served memory is answered (FlexTensor sets
 * access itself whenever it maps), as are cuMemRetainAllocationHandle (the stand-in)
 * and cuMemGetAllocationPropertiesFromHandle (the properties it was made with).
 *
 * A stand-in exported (cuMemExportToShareableHandle: XLA asks for exportable handles,
 * and NCCL exports its buffers) or mapped in part or at an offset before any whole
 * mapping is made real then: a handle of the driver's with the same properties, the
 * program's from then on. Exported while served (NCCL maps its buffers, then exports
 * them): handed back to the program first, its bytes kept (hand_back), where it can be.
 * Mapped a second time while served, or exported where it cannot be handed back:
 * refused with an error, said (one allocation of FlexTensor's cannot be at two
 * addresses or in another process). Handles that are the program's (made real, another device's,
 * compressed) are counted as mapped outside FlexTensor (program_mapped), which a budget
 * they exceed makes FlexTensor stand down before the plan (observe.c).
 *
 * Owns: the stand-ins (pm_lock; the driver calls made for them are made outside it),
 * program_mapped and program_mapped_peak (atomics). */
#define _GNU_SOURCE
#include "shim/engine.h"

#define STAND_IN_TAG 0xF7E0000000000000ull

typedef struct {
    uint64_t handle;                   /* the value the program holds (STAND_IN_TAG | n) */
    size_t size;
    CUmemAllocationProp prop;
    int refs;                          /* the program's: 1 at creation, + retains, - releases */
    uint64_t served_at;                /* the address it is served at; 0: not mapped */
    CUmemGenericAllocationHandle real; /* made real (see above); 0: a stand-in still */
    UT_hash_handle hh;                 /* by handle */
} stand_in_t;

static pthread_mutex_t pm_lock = PTHREAD_MUTEX_INITIALIZER;
static stand_in_t *stand_ins;
static uint64_t next_id;
static uint64_t served_n, served_bytes, made_real, handed_back; /* pm_lock: for the exit report */

uint64_t program_mapped;      /* bytes the program has mapped itself now (atomic) */
uint64_t program_mapped_peak; /* the most it had mapped at once (atomic) */
/* The largest handle not stood in for only because it is more than FlexTensor serves
 * in pieces (XLA's preallocated arena: 75% of the device in one handle); 0 if none
 * (atomic), for the stand-down's reason. */
static uint64_t too_large;

static stand_in_t *find_handle(uint64_t h)
{
    stand_in_t *x = NULL;
    if ((h & STAND_IN_TAG) == STAND_IN_TAG)
        HASH_FIND(hh, stand_ins, &h, sizeof h, x);
    return x;
}

/* The stand-in served at an address in [va, va + size) with the lowest address, or NULL
 * (pm_lock held). A linear walk: XLA maps a few large ranges, PyTorch's expandable
 * segments one per 20 MiB. */
static stand_in_t *served_in(uint64_t va, uint64_t size)
{
    stand_in_t *x, *tmp, *best = NULL;
    HASH_ITER(hh, stand_ins, x, tmp) {
        if (x->served_at != 0 && x->served_at < va + size && x->served_at + x->size > va &&
            (best == NULL || x->served_at < best->served_at))
            best = x;
    }
    return best;
}

/* A handle FlexTensor may stand in for: pinned device memory on the managed device,
 * uncompressed, for any use. Exportable ones too (XLA asks for POSIX file descriptors
 * and RDMA capability, and releases each handle once mapped): an export before the
 * handle is mapped makes it real first; one after hands the mapping back (hand_back). */
static int servable(size_t size, const CUmemAllocationProp *p, unsigned long long flags)
{
    if (flags != 0 || p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        p->win32HandleMetaData != NULL || p->allocFlags.compressionType != 0 || p->allocFlags.usage != 0)
        return 0;
    if (cfgp->program_mappings != FT_PROGRAM_MAPPINGS_SERVE || !vmm_serves(size) || state_quiet(engine_state()))
        return 0;
    if (!on_managed_device(0) || p->location.id != managed_device())
        return 0;
    size_t g = vmm_gran_now();
    if (g == 0 || size % g != 0)
        return 0;
    if (size / g > VMM_PIECES_MAX) { /* vmm.c serves no more pieces */
        uint64_t was = __atomic_load_n(&too_large, __ATOMIC_RELAXED);
        while (size > was &&
               !__atomic_compare_exchange_n(&too_large, &was, size, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
        return 0;
    }
    return 1;
}

void progmap_why_kept(char *buf, size_t n)
{
    uint64_t big = __atomic_load_n(&too_large, __ATOMIC_RELAXED);
    size_t g = vmm_gran_now();
    char a[32], b[32];
    if (cfgp->program_mappings != FT_PROGRAM_MAPPINGS_SERVE)
        snprintf(buf, n, "FT_PROGRAM_MAPPINGS=leave keeps them the program's");
    else if (big > 0 && g > 0)
        snprintf(buf, n, "one handle of %s, more than FlexTensor serves in pieces (%s); XLA preallocates "
                 "75%% of the device so: with XLA_PYTHON_CLIENT_PREALLOCATE=false, or an "
                 "XLA_PYTHON_CLIENT_MEM_FRACTION whose arena is at most that, FlexTensor serves it",
                 human_bytes(big, a, sizeof a), human_bytes((uint64_t)g * VMM_PIECES_MAX, b, sizeof b));
    else
        snprintf(buf, n, "handles FlexTensor does not stand in for: exported, or another device's");
}

CUresult ft_hook_drv_mem_create(cuMemCreate_fn_t real, CUmemGenericAllocationHandle *h, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (h == NULL || prop == NULL || !servable(size, prop, flags)) {
        if (prop != NULL && cfgp->program_mappings == FT_PROGRAM_MAPPINGS_SERVE)
            FT_LOG_CAPPED(FT_LOG_INFO, 4, "cuMemCreate of %zu bytes not stood in for: type %d, location %d:%d (managed "
                          "%d), handle types %#x, compression %d, rdma %d, usage %d, flags %llu, granule %zu, "
                          "phase %s", size, (int)prop->type, (int)prop->location.type, prop->location.id,
                          managed_device(), (unsigned)prop->requestedHandleTypes,
                          (int)prop->allocFlags.compressionType, (int)prop->allocFlags.gpuDirectRDMACapable,
                          (int)prop->allocFlags.usage, flags, vmm_gran_now(), engine_phase_name(engine_phase()));
        return real(h, size, prop, flags);
    }
    stand_in_t *x = calloc(1, sizeof *x);
    if (x == NULL)
        return real(h, size, prop, flags);
    x->size = size;
    x->prop = *prop;
    x->refs = 1;
    pthread_mutex_lock(&pm_lock);
    x->handle = STAND_IN_TAG | ++next_id;
    HASH_ADD(hh, stand_ins, handle, sizeof x->handle, x);
    int added = x->hh.tbl != NULL;
    pthread_mutex_unlock(&pm_lock);
    if (!added) {
        free(x);
        return real(h, size, prop, flags);
    }
    *h = x->handle;
    return CUDA_SUCCESS;
}

static void count_mapped(size_t size)
{
    uint64_t now = __atomic_add_fetch(&program_mapped, size, __ATOMIC_RELAXED);
    uint64_t peak = __atomic_load_n(&program_mapped_peak, __ATOMIC_RELAXED);
    while (now > peak &&
           !__atomic_compare_exchange_n(&program_mapped_peak, &peak, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    static int said; /* atomic: any thread may map first */
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        FT_INFO("the program maps device memory itself with handles FlexTensor does not stand in for (cuMemMap: "
                "exported, another device's, or made before FlexTensor could): it neither finds weights "
                "there nor moves them");
}

/* Made real (while not mapped): the driver's handle with the stand-in's properties,
 * the program's from then on. 0, or the driver's error. */
static CUresult make_real(stand_in_t *x, CUmemGenericAllocationHandle *out)
{
    pthread_mutex_lock(&pm_lock);
    CUmemGenericAllocationHandle r = x->real;
    size_t size = x->size;
    CUmemAllocationProp prop = x->prop;
    pthread_mutex_unlock(&pm_lock);
    if (r != 0) {
        *out = r;
        return CUDA_SUCCESS;
    }
    cuMemCreate_fn_t create = (cuMemCreate_fn_t)ft_shim_real(FT_FN_cuMemCreate);
    CUresult rc = create != NULL ? create(&r, size, &prop, 0) : CUDA_ERROR_NOT_FOUND;
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&pm_lock);
    if (x->real == 0) {
        x->real = r;
        made_real++;
        r = 0;
    }
    *out = x->real;
    pthread_mutex_unlock(&pm_lock);
    if (r != 0) { /* another thread made it real first */
        cuMemRelease_fn_t release = (cuMemRelease_fn_t)ft_shim_real(FT_FN_cuMemRelease);
        if (release != NULL)
            release(r);
    }
    return CUDA_SUCCESS;
}

CUresult ft_hook_drv_mem_map(cuMemMap_fn_t real, CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    pthread_mutex_lock(&pm_lock);
    stand_in_t *x = find_handle(handle);
    if (x == NULL) {
        pthread_mutex_unlock(&pm_lock);
        CUresult rc = real(ptr, size, offset, handle, flags);
        if (rc == CUDA_SUCCESS)
            count_mapped(size);
        return rc;
    }
    int whole = x->real == 0 && x->served_at == 0 && offset == 0 && size == x->size && flags == 0 && ptr != 0;
    int twice = x->served_at != 0;
    if (whole)
        x->served_at = ptr; /* claimed: a second map of it is refused meanwhile */
    CUmemGenericAllocationHandle r = x->real;
    pthread_mutex_unlock(&pm_lock);
    if (whole) {
        CUresult rc = alloc_program_mapping(ptr, size);
        pthread_mutex_lock(&pm_lock);
        if (rc == CUDA_SUCCESS) {
            served_n++;
            served_bytes += size;
        } else {
            x->served_at = 0;
        }
        pthread_mutex_unlock(&pm_lock);
        if (rc != CUDA_SUCCESS)
            FT_LOG_CAPPED(FT_LOG_WARN, 3, "the program's mapping of %zu bytes at %#llx could not be served "
                          "(CUresult %d): the map fails as the driver's would", size, (unsigned long long)ptr, (int)rc);
        return rc;
    }
    if (twice) {
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "the program maps a handle a second time (cuMemMap at %#llx) while FlexTensor "
                      "serves its first mapping: one allocation cannot be at two addresses; refused "
                      "(CUDA_ERROR_NOT_SUPPORTED). FT_PROGRAM_MAPPINGS=leave leaves the program's handles to it",
                      (unsigned long long)ptr);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    /* Mapped in part or at an offset before any whole mapping: made real, the program's. */
    CUresult rc = r != 0 ? CUDA_SUCCESS : make_real(x, &r);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real(ptr, size, offset, r, flags);
    if (rc == CUDA_SUCCESS)
        count_mapped(size);
    return rc;
}

/* The stand-in goes when the program has released it and it is mapped nowhere
 * (pm_lock held); its real handle, if any, was released by the program's last release. */
static void maybe_drop(stand_in_t *x)
{
    if (x->refs <= 0 && x->served_at == 0) {
        HASH_DEL(stand_ins, x);
        free(x);
    }
}

CUresult ft_hook_drv_mem_unmap(cuMemUnmap_fn_t real, CUdeviceptr ptr, size_t size)
{
    /* [ptr, ptr + size) may cover several mappings: the served ones are freed, the
     * stretches between them unmapped by the driver. */
    uint64_t at = ptr, end = (uint64_t)ptr + size;
    CUresult rc = CUDA_SUCCESS;
    while (at < end && rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&pm_lock);
        stand_in_t *x = served_in(at, end - at);
        uint64_t next = x != NULL ? x->served_at : end;
        if (x != NULL && (x->served_at < at || x->served_at + x->size > end))
            x = NULL, next = end, rc = CUDA_ERROR_INVALID_VALUE; /* a served mapping cut in part */
        pthread_mutex_unlock(&pm_lock);
        if (rc != CUDA_SUCCESS)
            break;
        if (next > at) {
            rc = real(at, next - at);
            if (rc == CUDA_SUCCESS)
                __atomic_fetch_sub(&program_mapped, next - at, __ATOMIC_RELAXED);
            at = next;
            continue;
        }
        free_program_mapping(x->served_at, x->size);
        pthread_mutex_lock(&pm_lock);
        at = x->served_at + x->size;
        x->served_at = 0;
        maybe_drop(x);
        pthread_mutex_unlock(&pm_lock);
    }
    return rc;
}

CUresult ft_hook_drv_mem_release(cuMemRelease_fn_t real, CUmemGenericAllocationHandle handle)
{
    pthread_mutex_lock(&pm_lock);
    stand_in_t *x = find_handle(handle);
    if (x == NULL || x->refs <= 0) {
        pthread_mutex_unlock(&pm_lock);
        return x == NULL ? real(handle) : CUDA_ERROR_INVALID_VALUE;
    }
    CUmemGenericAllocationHandle r = --x->refs == 0 ? x->real : 0;
    maybe_drop(x);
    pthread_mutex_unlock(&pm_lock);
    return r != 0 ? real(r) : CUDA_SUCCESS;
}

CUresult ft_hook_drv_mem_retain(cuMemRetainAllocationHandle_fn_t real, CUmemGenericAllocationHandle *h, void *addr)
{
    uint64_t va = (uint64_t)(uintptr_t)addr;
    pthread_mutex_lock(&pm_lock);
    stand_in_t *x = h != NULL ? served_in(va, 1) : NULL;
    if (x != NULL) {
        x->refs++;
        *h = x->handle;
    }
    pthread_mutex_unlock(&pm_lock);
    return x != NULL ? CUDA_SUCCESS : real(h, addr);
}

/* Whether the driver has every granule of [va, va + size) mapped (it answers
 * CU_POINTER_ATTRIBUTE_MAPPED for each). */
static int all_mapped(uint64_t va, size_t size)
{
    cuPointerGetAttribute_fn_t get = (cuPointerGetAttribute_fn_t)ft_shim_real(FT_FN_cuPointerGetAttribute);
    size_t g = vmm_gran();
    if (get == NULL || g == 0)
        return 0;
    for (uint64_t off = 0; off < size; off += g) {
        unsigned int mapped = 0;
        if (get(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, (CUdeviceptr)(va + off)) != CUDA_SUCCESS || !mapped)
            return 0;
    }
    return 1;
}

/* A served mapping handed back to the program, as if never served (its handle is
 * exported while served: NCCL exports its buffers after mapping them, to share them with
 * its peers' processes): x made real, the device idle, the mapping's bytes copied into
 * the real handle through a mapping of it elsewhere, FlexTensor's pieces freed, the real
 * handle mapped at the program's address. Not while a capture is under way (no
 * synchronisation is legal then) or while a piece is not mapped (a unit streamed out,
 * or moved out by FT_SPILL): the bytes could not be read. CUDA_SUCCESS (*r the real
 * handle), or the error (nothing changed, save x made real, unless the last map failed:
 * said). */
static CUresult hand_back(stand_in_t *x, CUmemGenericAllocationHandle *r)
{
    pthread_mutex_lock(&pm_lock);
    uint64_t va = x->served_at;
    size_t size = x->size;
    int dev = x->prop.location.id;
    pthread_mutex_unlock(&pm_lock);
    if (va == 0 || capture_under_way() || !all_mapped(va, size) || drv.reserve == NULL || drv.map == NULL ||
        drv.unmap == NULL || drv.set_access == NULL || drv.address_free == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUmemAccessDesc ad = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUdeviceptr tmp = 0;
    int mapped = 0;
    CUresult rc = make_real(x, r);
    if (rc == CUDA_SUCCESS)
        rc = drv.reserve(&tmp, size, 0, 0, 0);
    if (rc == CUDA_SUCCESS && (rc = drv.map(tmp, size, 0, *r, 0)) == CUDA_SUCCESS)
        mapped = 1;
    if (rc == CUDA_SUCCESS)
        rc = drv.set_access(tmp, size, &ad, 1);
    if (rc == CUDA_SUCCESS &&
        (REAL(cudaDeviceSynchronize)() != cudaSuccess ||
         REAL(cudaMemcpy)((void *)(uintptr_t)tmp, (void *)(uintptr_t)va, size, cudaMemcpyDeviceToDevice) != cudaSuccess ||
         REAL(cudaDeviceSynchronize)() != cudaSuccess))
        rc = CUDA_ERROR_UNKNOWN;
    if (mapped)
        drv.unmap(tmp, size);
    if (tmp != 0)
        drv.address_free(tmp, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    free_program_mapping(va, size);
    rc = drv.map(va, size, 0, *r, 0);
    if (rc == CUDA_SUCCESS)
        rc = drv.set_access(va, size, &ad, 1);
    if (rc != CUDA_SUCCESS)
        FT_ERROR("the program's mapping at %#llx (%zu bytes), handed back to it for an export, could not be mapped "
                 "again at its address (CUresult %d): a launch reaching it will fault",
                 (unsigned long long)va, size, (int)rc);
    pthread_mutex_lock(&pm_lock);
    x->served_at = 0;
    handed_back++;
    pthread_mutex_unlock(&pm_lock);
    if (rc == CUDA_SUCCESS)
        count_mapped(size);
    return rc;
}

CUresult ft_hook_drv_mem_export(cuMemExportToShareableHandle_fn_t real, void *shareable,
                                CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
                                unsigned long long flags)
{
    pthread_mutex_lock(&pm_lock);
    stand_in_t *x = find_handle(handle);
    int served = x != NULL && x->served_at != 0;
    pthread_mutex_unlock(&pm_lock);
    if (x == NULL)
        return real(shareable, handle, type, flags);
    if (served) {
        /* One allocation of FlexTensor's cannot be mapped in another process: the
         * mapping goes back to the program first, its memory the program's from now on. */
        CUmemGenericAllocationHandle r = 0;
        CUresult rc = hand_back(x, &r);
        if (rc == CUDA_SUCCESS) {
            FT_LOG_CAPPED(FT_LOG_INFO, 3, "the program exports a handle whose mapping FlexTensor served "
                          "(cuMemExportToShareableHandle): the mapping is the program's again, its bytes kept; "
                          "FlexTensor moves nothing in it from now on");
            return real(shareable, r, type, flags);
        }
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "the program exports a handle whose mapping FlexTensor serves "
                      "(cuMemExportToShareableHandle), and it could not be handed back to the program now "
                      "(CUresult %d: a capture under way, a piece of it streamed out, or the driver refused); "
                      "the export is refused (CUDA_ERROR_NOT_SUPPORTED). FT_PROGRAM_MAPPINGS=leave leaves the "
                      "program's handles to it", (int)rc);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    CUmemGenericAllocationHandle r;
    CUresult rc = make_real(x, &r);
    return rc == CUDA_SUCCESS ? real(shareable, r, type, flags) : rc;
}

CUresult ft_hook_drv_mem_properties(cuMemGetAllocationPropertiesFromHandle_fn_t real, CUmemAllocationProp *prop,
                                    CUmemGenericAllocationHandle handle)
{
    pthread_mutex_lock(&pm_lock);
    stand_in_t *x = prop != NULL ? find_handle(handle) : NULL;
    if (x != NULL)
        *prop = x->prop;
    pthread_mutex_unlock(&pm_lock);
    return x != NULL ? CUDA_SUCCESS : real(prop, handle);
}

/* Access over a served mapping is FlexTensor's to set (the managed device's, its peers':
 * vmm.c sets it at every mapping): asked for the managed device alone, answered; the
 * stretches between served mappings go to the driver. */
CUresult ft_hook_drv_mem_set_access(cuMemSetAccess_fn_t real, CUdeviceptr ptr, size_t size,
                                    const CUmemAccessDesc *desc, size_t count)
{
    pthread_mutex_lock(&pm_lock);
    int any = stand_ins != NULL && served_in(ptr, size) != NULL;
    pthread_mutex_unlock(&pm_lock);
    if (!any)
        return real(ptr, size, desc, count);
    int managed = managed_device();
    for (size_t i = 0; i < count; i++)
        if (desc == NULL || desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id != managed ||
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
            FT_LOG_CAPPED(FT_LOG_WARN, 3, "cuMemSetAccess over memory FlexTensor serves asks for another device or "
                          "another access (%zu descriptor(s)): made by the driver, which fails it where the "
                          "memory is not on the device now", count);
            return real(ptr, size, desc, count);
        }
    uint64_t at = ptr, end = (uint64_t)ptr + size;
    CUresult rc = CUDA_SUCCESS;
    while (at < end && rc == CUDA_SUCCESS) {
        pthread_mutex_lock(&pm_lock);
        stand_in_t *x = served_in(at, end - at);
        uint64_t next = x != NULL ? (x->served_at > at ? x->served_at : at) : end;
        uint64_t past = x != NULL ? x->served_at + x->size : end;
        pthread_mutex_unlock(&pm_lock);
        if (next > at)
            rc = real(at, next - at, desc, count);
        at = past < end ? past : end;
    }
    return rc;
}

void progmap_report(void)
{
    pthread_mutex_lock(&pm_lock);
    uint64_t n = served_n, bytes = served_bytes, real_n = made_real, back = handed_back;
    pthread_mutex_unlock(&pm_lock);
    if (n == 0 && real_n == 0)
        return;
    char a[32];
    FT_INFO("the program's own mappings: %llu served as FlexTensor's allocations (%s in all), %llu handle(s) made "
            "real (exported before mapped, or mapped in part; %llu of them handed back after being served, for an "
            "export)", (unsigned long long)n, human_bytes(bytes, a, sizeof a), (unsigned long long)real_n,
            (unsigned long long)back);
}

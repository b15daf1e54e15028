/* ptrattr.c - pointer attributes of allocations FlexTensor holds unmapped, or in
 * host-located memory (vmm.c: the driver calls that host memory).
 *
 * An allocation FT_SPILL holds in host memory, or a streamed unit's weight while it
 * is not loaded, has its addresses reserved and nothing mapped there. To the driver
 * such an address is no CUDA memory: cuPointerGetAttribute fails with
 * CUDA_ERROR_INVALID_VALUE, and cuPointerGetAttributes answers with empty values.
 * Programs ask before they launch: Triton's launchers and PyTorch Inductor's static
 * launcher query every pointer argument's CU_POINTER_ATTRIBUTE_DEVICE_POINTER and stop
 * on the error (torch.compile on the H200: "CUDA driver error: invalid argument" at
 * the first compiled forward under FT_SPILL). The program allocated device memory and
 * must see device memory: for an address inside a virtual-memory region of the table
 * that the driver does not know, the answer is the driver's own for a mapped
 * allocation of FlexTensor's (a witness: they are all made alike), with the
 * attributes of the address itself (the pointer, the range, the buffer id) taken from
 * the region. Nothing is loaded: a query reads no memory; the launch that follows is
 * guarded as any other.
 *
 * Owns: the witness address (atomic). */
#define _GNU_SOURCE
#include "shim/engine.h"

static uint64_t witness; /* a mapped allocation of FlexTensor's, 0 none known (atomic) */

struct find_witness {
    cuPointerGetAttribute_fn_t real;
    uint64_t va;
};

static void try_witness(vmm_t *v, void *ctx)
{
    struct find_witness *f = ctx;
    unsigned int type = 0;
    if (f->va == 0 && !v->spilled &&
        f->real(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)v->va) == CUDA_SUCCESS &&
        type == CU_MEMORYTYPE_DEVICE)
        f->va = v->va;
}

/* A mapped allocation of FlexTensor's the driver knows now, 0 when there is none. */
static uint64_t mapped_witness(cuPointerGetAttribute_fn_t real)
{
    uint64_t w = __atomic_load_n(&witness, __ATOMIC_RELAXED);
    unsigned int type = 0;
    if (w != 0 && real(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)w) == CUDA_SUCCESS &&
        type == CU_MEMORYTYPE_DEVICE)
        return w;
    /* The search asks the driver of each allocation until one answers: with none
     * mapped, a query would cost one driver call per allocation, so after a search that
     * found none, the next 255 queries go without (what holds for all device memory). */
    static unsigned since_none; /* atomic */
    if (w == 0 && __atomic_fetch_add(&since_none, 1, __ATOMIC_RELAXED) % 256 != 0)
        return 0;
    struct find_witness f = { real, 0 };
    vmm_each(try_witness, &f);
    __atomic_store_n(&witness, f.va, __ATOMIC_RELAXED);
    if (f.va != 0)
        __atomic_store_n(&since_none, 0, __ATOMIC_RELAXED);
    return f.va;
}

/* ptr lies in a virtual-memory region of the table: 1, its region in *r. Whether the
 * driver knows it now (something mapped there) is the caller's to ask. */
static int held(CUdeviceptr ptr, ft_region_t *r)
{
    return ft_shim_active && regions != NULL && ft_regions_find(regions, (uint64_t)ptr, r) &&
           (r->flags & FT_REGION_VMM);
}

/* r is a piece of an allocation served in pieces (vmm_alloc): to the program, the
 * allocation is one range, which it asks for as the driver would answer for one
 * mapping -- its base, its bytes in whole granules, one buffer id (the first piece's
 * region id). 1 with those in *base, *size and *id; 0 when r is no piece. */
static int piece_allocation(const ft_region_t *r, uint64_t *base, uint64_t *size, uint32_t *id)
{
    ft_region_t q;
    vmm_t *v = (r->flags & FT_REGION_PIECE) ? vmm_piece_first(vmm_find(r->base)) : NULL;
    if (v == NULL || !v->piece || !ft_regions_find(regions, v->va, &q))
        return 0;
    *base = q.base;
    *size = vmm_bytes(v);
    *id = q.id;
    return 1;
}

/* The range attributes of ptr in the piece r, the allocation's (piece_allocation). */
static void piece_range(void *data, CUpointer_attribute a, const ft_region_t *r)
{
    uint64_t base, size;
    uint32_t id;
    if (data == NULL || (a != CU_POINTER_ATTRIBUTE_RANGE_START_ADDR && a != CU_POINTER_ATTRIBUTE_RANGE_SIZE &&
                         a != CU_POINTER_ATTRIBUTE_BUFFER_ID) ||
        !piece_allocation(r, &base, &size, &id))
        return;
    if (a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
        *(CUdeviceptr *)data = (CUdeviceptr)base;
    else if (a == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
        *(size_t *)data = (size_t)size;
    else
        *(unsigned long long *)data = (1ull << 62) | id;
}

/* One attribute of ptr in the unmapped region r, as the driver would give it mapped. */
static CUresult attribute_of(cuPointerGetAttribute_fn_t real, void *data, CUpointer_attribute a,
                             CUdeviceptr ptr, const ft_region_t *r)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)r->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = (size_t)r->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: /* one per allocation, never another's */
        *(unsigned long long *)data = (1ull << 62) | r->id;
        return CUDA_SUCCESS;
    default:
        break;
    }
    mover_settle(1); /* res.lock held (steady): the witness must not leave under the query */
    uint64_t w = mapped_witness(real);
    if (w != 0)
        return real(data, a, (CUdeviceptr)w);
    /* Nothing of FlexTensor's is mapped: what holds for all device memory. */
    switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = managed_device();
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The prefetching thread maps and unmaps the units it moves without res.lock (mover.c):
 * a query of an address FlexTensor holds is answered with res.lock held and the
 * address's unit out of any move, so that what the driver says stays true while the
 * answer is put together (a unit mapped between the query and the check that it is
 * unmapped gave the simulator's --ptr-query an empty answer). Not when this thread
 * holds res.lock already. 1 when taken. */
static int steady(const ft_region_t *r)
{
    if (engine_held)
        return 0;
    pthread_mutex_lock(&res.lock);
    res_steady(r->id);
    return 1;
}

/* Whether r is a piece FlexTensor keeps in host-located memory (vmm.c), which the driver
 * calls host memory and the program allocated as device memory: a table lookup, no
 * driver call (Triton's launchers ask before every launch). */
static int on_host_piece(const ft_region_t *r)
{
    vmm_t *v;
    return __atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED) != 0 && (v = vmm_find(r->base)) != NULL &&
           v->on_host;
}

CUresult ft_hook_drv_pointer_get_attribute(cuPointerGetAttribute_fn_t real, void *data,
                                           CUpointer_attribute attribute, CUdeviceptr ptr)
{
    ft_region_t r;
    int locked = held(ptr, &r) && steady(&r);
    CUresult rc = real(data, attribute, ptr);
    /* Unmapped, or in host-located memory: answered as device memory; else the driver
     * knows it. */
    if (data != NULL && held(ptr, &r) &&
        (rc == CUDA_ERROR_INVALID_VALUE || (rc == CUDA_SUCCESS && on_host_piece(&r))))
        rc = attribute_of(real, data, attribute, ptr, &r);
    if (rc == CUDA_SUCCESS && held(ptr, &r))
        piece_range(data, attribute, &r);
    if (locked)
        pthread_mutex_unlock(&res.lock);
    return rc;
}

CUresult ft_hook_drv_pointer_get_attributes(cuPointerGetAttributes_fn_t real, unsigned int n,
                                            CUpointer_attribute *attributes, void **data, CUdeviceptr ptr)
{
    ft_region_t r;
    int locked = held(ptr, &r) && steady(&r);
    CUresult rc = real(n, attributes, data, ptr);
    cuPointerGetAttribute_fn_t one = (cuPointerGetAttribute_fn_t)ft_shim_real(FT_FN_cuPointerGetAttribute);
    unsigned int type = 0;
    if (rc == CUDA_SUCCESS && attributes != NULL && data != NULL && one != NULL && held(ptr, &r) &&
        (on_host_piece(&r) || one(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) != CUDA_SUCCESS)) {
        /* unmapped, or in host-located memory; else mapped: the driver's answer */
        for (unsigned int i = 0; i < n && rc == CUDA_SUCCESS; i++)
            if (data[i] != NULL && attribute_of(one, data[i], attributes[i], ptr, &r) != CUDA_SUCCESS)
                rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS && attributes != NULL && data != NULL && held(ptr, &r))
        for (unsigned int i = 0; i < n; i++)
            piece_range(data[i], attributes[i], &r);
    if (locked)
        pthread_mutex_unlock(&res.lock);
    return rc;
}

/* cuMemGetAddressRange: for a piece of an allocation served in pieces, the allocation's
 * range, as one mapping of it would give (the driver knows each piece's mapping only);
 * for an address FlexTensor holds unmapped, its region's, as mapped. */
CUresult ft_hook_drv_mem_get_address_range(cuMemGetAddressRange_v2_fn_t real, CUdeviceptr *pbase, size_t *psize,
                                           CUdeviceptr ptr)
{
    ft_region_t r;
    int locked = held(ptr, &r) && steady(&r);
    CUresult rc = real(pbase, psize, ptr);
    uint64_t base, size;
    uint32_t id;
    if ((rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_FOUND || rc == CUDA_ERROR_INVALID_VALUE) && held(ptr, &r)) {
        if (piece_allocation(&r, &base, &size, &id)) {
            if (pbase != NULL)
                *pbase = (CUdeviceptr)base;
            if (psize != NULL)
                *psize = (size_t)size;
            rc = CUDA_SUCCESS;
        } else if (rc != CUDA_SUCCESS) {
            vmm_t *v = vmm_find(r.base);
            if (pbase != NULL)
                *pbase = (CUdeviceptr)r.base;
            if (psize != NULL)
                *psize = v != NULL ? (size_t)v->size : (size_t)r.size;
            rc = CUDA_SUCCESS;
        }
    }
    if (locked)
        pthread_mutex_unlock(&res.lock);
    return rc;
}

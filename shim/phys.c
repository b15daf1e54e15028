/* phys.c - physical allocations that back several pieces of an allocation served in
 * pieces (vmm.c's alloc_pieces): the residency engine maps a run of a unit's adjacent
 * pieces from few allocations, each mapped whole in one cuMemMap, because the driver's
 * mapping calls cost per mapping, not per call (docs/residency.md, "One physical
 * allocation a run").
 *
 * Each piece mapped from such an allocation holds one reference to it: its vmm_t's
 * `handle`. A hand-over adds the incoming unit's references before the
 * leaving unit's tail drops its own; the last reference let go releases the allocation
 * (phys_release) or keeps it for the next load (residency.c's spares). An allocation
 * that is not in this table is held by the one region mapping it (vmm.c's own, and
 * residency.c's map_region for a whole region).
 *
 * Owns: the table, under its own lock: the prefetching thread (a hand-over, its tail)
 * and the application's threads (loads, unloads, cudaFree) take and drop references
 * at once, under res.lock or not. It calls cuda.c only. */
#define _GNU_SOURCE
#include "shim/engine.h"

typedef struct {
    CUmemGenericAllocationHandle h;
    size_t size;
    int refs;
    UT_hash_handle hh;
} phys_t;

static pthread_mutex_t phys_lock = PTHREAD_MUTEX_INITIALIZER;
static phys_t *table;

static phys_t *find_locked(CUmemGenericAllocationHandle h)
{
    phys_t *p;
    HASH_FIND(hh, table, &h, sizeof h, p);
    return p;
}

/* h (size bytes, `refs` references already held) into the table; -1 without memory
 * for the entry (h is left as it was). A handle in the table already keeps its entry. */
int phys_adopt(CUmemGenericAllocationHandle h, size_t size, int refs)
{
    pthread_mutex_lock(&phys_lock);
    int rc = 0;
    if (find_locked(h) == NULL) {
        phys_t *p = calloc(1, sizeof *p);
        if (p != NULL) {
            *p = (phys_t){ .h = h, .size = size, .refs = refs };
            HASH_ADD(hh, table, h, sizeof p->h, p);
        }
        if (p == NULL || p->hh.tbl == NULL) { /* HASH_NONFATAL_OOM: not added */
            free(p);
            rc = -1;
        }
    }
    pthread_mutex_unlock(&phys_lock);
    return rc;
}

/* A new physical allocation of `size` bytes on dev, in the table with no reference. */
CUresult phys_make(CUdevice dev, size_t size, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop = vmm_prop(dev);
    CUresult rc = drv.create(h, size, &prop, 0);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (phys_adopt(*h, size, 0) != 0) {
        drv.release(*h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* h's size when it is in the table; 0 when it is not (held by one region alone). */
size_t phys_size(CUmemGenericAllocationHandle h)
{
    pthread_mutex_lock(&phys_lock);
    phys_t *p = find_locked(h);
    size_t size = p != NULL ? p->size : 0;
    pthread_mutex_unlock(&phys_lock);
    return size;
}

/* One more reference to h (a piece mapped from it), when it is in the table. */
void phys_hold(CUmemGenericAllocationHandle h)
{
    pthread_mutex_lock(&phys_lock);
    phys_t *p = find_locked(h);
    if (p != NULL)
        p->refs++;
    pthread_mutex_unlock(&phys_lock);
}

/* A reference to h let go (its piece unmapped): 1 when it was the last, or h is not in
 * the table (its one region's): the caller then releases it (phys_release) or keeps it
 * for a load to come; 0 while other pieces map it. */
int phys_drop(CUmemGenericAllocationHandle h)
{
    pthread_mutex_lock(&phys_lock);
    phys_t *p = find_locked(h);
    int last = p == NULL || --p->refs <= 0;
    if (p != NULL && p->refs < 0)
        p->refs = 0;
    pthread_mutex_unlock(&phys_lock);
    return last;
}

/* h out of the table, and released to the driver. */
CUresult phys_release(CUmemGenericAllocationHandle h)
{
    pthread_mutex_lock(&phys_lock);
    phys_t *p = find_locked(h);
    if (p != NULL) {
        HASH_DEL(table, p);
        free(p);
    }
    pthread_mutex_unlock(&phys_lock);
    return drv.release(h);
}

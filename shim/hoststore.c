/* hoststore.c - the host memory that streamed regions and FT_SPILL's allocations live
 * in while not on the device: FT_PINNED_MEMORY (pinned or pageable) and
 * FT_PINNED_MEMORY_MODE (cudaHostAlloc, or page-aligned memory registered in place);
 * and the one place that says where a streamed unit's host copy lives: in
 * FT_SHM_ENABLED's shared segment (shmstore.c), or private (host_store_alloc).
 *
 * Owns no state (the shared segment's is shmstore.c's). Of units it knows only the
 * regions residency.c hands it, to place them in the segment: copies and sets served
 * on a unit's host store are residency.c's (res_host_copy, res_host_set). It calls
 * shmstore.c and cuda.c only; res.lock is held for every call about units. */
#define _GNU_SOURCE
#include "shim/engine.h"

typedef cudaError_t (*host_register_fn)(void *, size_t, unsigned int);
typedef cudaError_t (*host_free_fn)(void *);

const char *host_store_kind(void)
{
    if (!cfgp->pinned_memory)
        return "pageable host memory (FT_PINNED_MEMORY=false)";
    return cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_HOST_REGISTER
         ? "pinned host memory (registered in place)" : "pinned host memory";
}

/* The host stores now held, for the exit report's count (held_lock). */
typedef struct {
    void *p;
    size_t size;
    UT_hash_handle hh;
} held_t;
static held_t *held;
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t held_bytes, held_peak, held_switch;
static int switched;

/* The plan's switch is done (activate_locked): what is held now is what streaming
 * needs, which the exit report gives. */
void host_store_switched(void)
{
    pthread_mutex_lock(&held_lock);
    held_switch = held_bytes;
    switched = 1;
    pthread_mutex_unlock(&held_lock);
}

static void *held_add(void *p, size_t size)
{
    held_t *h = p != NULL ? malloc(sizeof *h) : NULL;
    pthread_mutex_lock(&held_lock);
    if (h != NULL) {
        h->p = p;
        h->size = size;
        HASH_ADD_PTR(held, p, h);
    }
    if (p != NULL) {
        held_bytes += size;
        if (held_bytes > held_peak)
            held_peak = held_bytes;
    }
    pthread_mutex_unlock(&held_lock);
    return p;
}

static void held_remove(void *p)
{
    held_t *h;
    pthread_mutex_lock(&held_lock);
    HASH_FIND_PTR(held, &p, h);
    if (h != NULL) {
        HASH_DEL(held, h);
        held_bytes -= h->size;
    }
    pthread_mutex_unlock(&held_lock);
    free(h);
}

void *host_store_alloc(size_t size)
{
    void *p = NULL;
    if (cfgp->pinned_memory && cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC) {
        return held_add(own_host_alloc(&p, size) == cudaSuccess ? p : NULL, size);
    }
    size_t page = 4096;
    if (posix_memalign(&p, page, (size + page - 1) / page * page) != 0)
        return NULL;
    if (!cfgp->pinned_memory)
        return held_add(p, size);
    host_register_fn reg = (host_register_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaHostRegister");
    cudaError_t pending = own_pending();
    if (reg == NULL || own_call(reg(p, size, cudaHostRegisterDefault), pending) != cudaSuccess) {
        free(p);
        return NULL;
    }
    return held_add(p, size);
}

void host_store_free(void *p)
{
    if (p == NULL || shm_store_owns(p))
        return;
    held_remove(p);
    if (cfgp->pinned_memory && cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC) {
        host_free_fn f = (host_free_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaFreeHost");
        if (f != NULL)
            f(p);
        return;
    }
    if (cfgp->pinned_memory) {
        host_free_fn unreg = (host_free_fn)ft_shim_real_dlsym(RTLD_NEXT, "cudaHostUnregister");
        if (unreg != NULL)
            unreg(p);
    }
    free(p);
}

/* --- FT_SHM_ENABLED: a unit's host copy, shared or private ------------------------- */

int host_store_sharing(void)
{
    return shm_store_attached();
}

/* At the switch: the model's units as the segment lays them out (every unit, resident
 * ones too: the fingerprint is the whole model's, and a unit made to stream later
 * shares as well). */
void host_store_share(const shm_unit_desc_t *d, uint32_t n)
{
    if (cfgp->shm_enabled)
        shm_store_attach(d, n);
}

/* Where unit u's host copy lives (d: the unit now, r: its n streamed regions, in the
 * order d was made from). Shared: each r[k].host is set to its place in the segment,
 * the regions end to end; HOST_SHARED when the bytes there are this unit's already
 * (checked against d->sum), HOST_FILL when the caller copies them in and then calls
 * host_store_unit_filled. HOST_PRIVATE: r is untouched, and the caller makes private
 * copies with host_store_alloc. */
int host_store_unit(int u, const char *name, const shm_unit_desc_t *d, res_region_t *r, int n)
{
    char *base = NULL;
    int how = shm_store_unit((uint32_t)u, name, d, &base);
    if (how == HOST_PRIVATE)
        return how;
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        r[k].host = base + off;
        off += r[k].size;
    }
    return how;
}

void host_store_unit_filled(int u, int ok)
{
    shm_store_filled((uint32_t)u, ok);
}

/* Unit u's host copy is no longer the shared one (the caller has given its regions
 * private copies). */
void host_store_unit_leave(int u)
{
    shm_store_leave((uint32_t)u);
}

void host_store_report(void)
{
    pthread_mutex_lock(&held_lock);
    uint64_t at_switch = held_switch, now = held_bytes, peak = held_peak;
    int sw = switched;
    pthread_mutex_unlock(&held_lock);
    /* "at exit" also counts the units made to stream past the plan: what the process
     * holds for its streamed units in the end. */
    if (sw)
        FT_INFO("host memory: %.1f MiB of %s held by FlexTensor after the switch to the plan, %.1f MiB "
                "at exit, at most %.1f MiB (FT_SHM's shared segments not counted)",
                (double)at_switch / 1048576.0, host_store_kind(), (double)now / 1048576.0,
                (double)peak / 1048576.0);
    else if (peak > 0)
        FT_INFO("host memory: at most %.1f MiB of %s held by FlexTensor (FT_SHM's shared segments not "
                "counted)", (double)peak / 1048576.0, host_store_kind());
    shm_store_report();
}

void host_store_detach(void)
{
    shm_store_detach();
}

/* shmstore.c - the shared host store (FT_SHM_ENABLED): the streamed units' host copies
 * in one POSIX shared memory segment used by every process of FT_SHM_NAMESPACE that
 * runs the same model (core/shmseg.c: the segment, its header, its locks, who may
 * trust it, who removes it).
 *
 * This file: the segment attached at the switch for the model's layout and content
 * sums; for each unit, the wait for another process that fills it
 * (FT_SHM_WAIT_TIMEOUT), the check of its bytes against this process's own content
 * sum before it is used, its part of the mapping pinned (cudaHostRegister) while this
 * process uses it; what is said about all that; the detach at exit.
 *
 * Owns: shm, under res.lock (the residency engine calls hoststore.c, its only caller,
 * holding it: at the switch, at evictions, when a unit leaves the segment; the exit
 * takes it too). It calls cuda.c's own-call helpers and core/shmseg.c only. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include <signal.h>

#include "core/shmseg.h"

enum { USE_NONE, USE_SHARED };

static struct {
    ft_shmseg_t *seg;        /* NULL: not attached (off, refused, failed, or left) */
    uint32_t n;
    uint64_t *layout;        /* per unit, the layout hash it was attached with */
    uint64_t *claim_sum;     /* per unit, the sum a unit claimed here is filled with */
    unsigned char *use;      /* per unit, USE_*: this process's host copy is the segment's */
    unsigned char *pinned;   /* per unit, its part of the mapping registered here */
    uint64_t deadline;       /* of every wait (CLOCK_MONOTONIC ns; 0: none) */
    /* The mapping, kept after the detach at exit: a unit's host copy freed later (an
     * application's own exit handlers) must still be told apart from private ones. */
    const char *map_lo, *map_hi;
    int claims;              /* units claimed here, for FT_SHM_TEST_STOP_AFTER */
    /* for the exit report */
    unsigned filled, taken_over, checked, differing, waited_out, failed, left;
    uint64_t shared_bytes;
} shm;

typedef cudaError_t (*host_register_fn)(void *, size_t, unsigned int);
typedef cudaError_t (*host_unregister_fn)(void *);

/* The deadline of the waits, FT_SHM_WAIT_TIMEOUT from now (0: none). */
static uint64_t deadline_in(double seconds)
{
    return seconds > 0 ? now_ns() + (uint64_t)(seconds * 1e9) : 0;
}

int shm_store_attached(void)
{
    return shm.seg != NULL;
}

int shm_store_owns(const void *p)
{
    return (const char *)p >= shm.map_lo && (const char *)p < shm.map_hi;
}

/* At the switch (res.lock held): the segment of this model, created or joined. Every
 * unit keeps a private copy when it cannot be had, and the process says why. */
void shm_store_attach(const shm_unit_desc_t *d, uint32_t n)
{
    if (shm.seg != NULL || n == 0)
        return;
    uint64_t fp = ft_shmseg_fp_add(FT_SHMSEG_FP_START, n), bytes = 0;
    uint32_t summed = 0;
    uint64_t *unit_bytes = calloc(n, sizeof *unit_bytes);
    shm.layout = calloc(n, sizeof *shm.layout);
    shm.claim_sum = calloc(n, sizeof *shm.claim_sum);
    shm.use = calloc(n, 1);
    shm.pinned = calloc(n, 1);
    if (unit_bytes == NULL || shm.layout == NULL || shm.claim_sum == NULL || shm.use == NULL || shm.pinned == NULL) {
        FT_WARN("shm: out of memory: the streamed units keep private host copies");
        goto out;
    }
    /* The layout and the contents apart too, for the log: processes of one model that
     * land in different segments say which of the two differed. */
    uint64_t fp_layout = FT_SHMSEG_FP_START, fp_content = FT_SHMSEG_FP_START;
    for (uint32_t u = 0; u < n; u++) {
        fp = ft_shmseg_fp_add(fp, d[u].layout);
        fp = ft_shmseg_fp_add(fp, (uint64_t)d[u].sum_ok);
        fp = ft_shmseg_fp_add(fp, d[u].sum_ok ? d[u].sum : 0);
        fp_layout = ft_shmseg_fp_add(fp_layout, d[u].layout);
        fp_content = ft_shmseg_fp_add(ft_shmseg_fp_add(fp_content, (uint64_t)d[u].sum_ok), d[u].sum_ok ? d[u].sum : 0);
        FT_DEBUG("shm: unit %u: layout %016llx, %llu bytes, sum %s%016llx", u, (unsigned long long)d[u].layout,
                 (unsigned long long)d[u].bytes, d[u].sum_ok ? "" : "(none) ", (unsigned long long)d[u].sum);
        unit_bytes[u] = d[u].sum_ok ? d[u].bytes : 0; /* a unit that cannot be checked is never shared */
        shm.layout[u] = d[u].layout;
        summed += (uint32_t)(d[u].sum_ok != 0);
        bytes += unit_bytes[u];
    }
    if (summed == 0) {
        FT_WARN("shm: FT_SHM_ENABLED, but no unit's content can be summed (the device checksum kernel did "
                "not load, or no region is a whole number of words): a shared copy could not be checked, "
                "so the streamed units keep private host copies");
        goto out;
    }
    ft_shmseg_info_t info;
    shm.deadline = deadline_in(cfgp->shm_wait_timeout);
    int rc = ft_shmseg_open(&shm.seg, cfgp->shm_namespace, fp, unit_bytes, n, cfgp->shm_group, shm.deadline, &info);
    char a[32];
    if (rc == -EACCES || rc == -EPROTO) {
        FT_ERROR("shm: %s; the streamed units keep private host copies", info.why);
    } else if (rc != 0) {
        FT_WARN("shm: %s; the streamed units keep private host copies", info.why);
    } else {
        if (info.replaced)
            FT_WARN("shm: segment %s was left by a run that ended without leaving it (nobody attached): "
                    "replaced, its contents not used", ft_shmseg_name_of(shm.seg));
        FT_INFO("shm: %s segment %s (%u unit(s), %s, mode %s), namespace %s; the units' layout %016llx, "
                "contents %016llx", info.created ? "created" : "attached to",
                ft_shmseg_name_of(shm.seg), n, human_bytes(bytes, a, sizeof a), cfgp->shm_group ? "0660" : "0600",
                cfgp->shm_namespace, (unsigned long long)fp_layout, (unsigned long long)fp_content);
    }
out:
    free(unit_bytes);
    if (shm.seg == NULL) {
        free(shm.layout);
        free(shm.claim_sum);
        free(shm.use);
        free(shm.pinned);
        shm.layout = shm.claim_sum = NULL;
        shm.use = shm.pinned = NULL;
    } else {
        shm.n = n;
        shm.map_lo = ft_shmseg_base(shm.seg);
        shm.map_hi = shm.map_lo + ft_shmseg_size(shm.seg);
    }
}

/* Registers unit u's part of the mapping with CUDA (FT_PINNED_MEMORY): copies from
 * it then run at the pinned rate. Unit parts are page-aligned, so ranges never
 * overlap. 0, or -1 (then the unit keeps a private copy). */
static int pin(uint32_t u, const char *name)
{
    if (!cfgp->pinned_memory || shm.pinned[u])
        return 0;
    host_register_fn reg = (host_register_fn)own_rt("cudaHostRegister");
    uint64_t len = (ft_shmseg_unit_bytes(shm.seg, u) + 4095) / 4096 * 4096;
    cudaError_t pending = own_pending();
    cudaError_t err = reg == NULL ? cudaErrorSharedObjectSymbolNotFound
                                  : own_call(reg(ft_shmseg_unit_data(shm.seg, u), len, cudaHostRegisterDefault), pending);
    if (err != cudaSuccess) {
        FT_LOG_CAPPED(FT_LOG_WARN, 3, "shm: cannot pin %s in segment %s (cudaError %d): a private copy", name,
                      ft_shmseg_name_of(shm.seg), (int)err);
        return -1;
    }
    shm.pinned[u] = 1;
    return 0;
}

static void unpin(uint32_t u)
{
    if (!shm.pinned[u])
        return;
    host_unregister_fn unreg = (host_unregister_fn)own_rt("cudaHostUnregister");
    cudaError_t pending = own_pending();
    if (unreg != NULL)
        own_call(unreg(ft_shmseg_unit_data(shm.seg, u)), pending);
    shm.pinned[u] = 0;
}

/* Unit u's copy in the segment, for this process whose own unit (d, as it is now) has
 * content sum d->sum: HOST_SHARED (*base holds its bytes, checked), HOST_FILL (claimed
 * here: the caller copies the unit's bytes to *base, then calls shm_store_filled), or
 * HOST_PRIVATE (a private copy: not attached, another layout, waited out, differing, no
 * room). res.lock held. */
int shm_store_unit(uint32_t u, const char *name, const shm_unit_desc_t *d, char **base)
{
    if (shm.seg == NULL || u >= shm.n || !d->sum_ok || d->layout != shm.layout[u] ||
        d->bytes != ft_shmseg_unit_bytes(shm.seg, u) || d->bytes == 0)
        return HOST_PRIVATE;
    const char *seg = ft_shmseg_name_of(shm.seg);
    uint64_t sum = 0;
    int pid = 0;
    int rc = ft_shmseg_unit_try(shm.seg, u, &sum, &pid);
    if (rc == FT_SHMSEG_BUSY) {
        FT_DEBUG("shm: %s is being filled by pid %d in segment %s: waiting", name, pid, seg);
        rc = ft_shmseg_unit_wait(shm.seg, u, shm.deadline, &sum, &pid);
    }
    if (rc == FT_SHMSEG_BUSY) {
        shm.waited_out++;
        FT_LOG_CAPPED(FT_LOG_WARN, 8, "shm: %s was still being filled by pid %d in segment %s when the wait "
                      "ran out (FT_SHM_WAIT_TIMEOUT=%g s): a private copy", name, pid, seg, cfgp->shm_wait_timeout);
        return HOST_PRIVATE;
    }
    if (rc < 0) {
        shm.failed++;
        FT_LOG_CAPPED(FT_LOG_WARN, 3, "shm: no room for %s in segment %s (%s): a private copy", name, seg,
                      strerror(-rc));
        return HOST_PRIVATE;
    }
    *base = ft_shmseg_unit_data(shm.seg, u);
    if (rc == FT_SHMSEG_CLAIMED) {
        if (pid != 0) {
            shm.taken_over++;
            FT_WARN("shm: %s in segment %s was left half-filled by pid %d, which died: filled by this process "
                    "instead", name, seg, pid);
        }
        if (pin(u, name) != 0) {
            ft_shmseg_unit_abandon(shm.seg, u);
            shm.failed++;
            return HOST_PRIVATE;
        }
        shm.claim_sum[u] = d->sum;
        FT_DEBUG("shm: filling %s (%.1f MiB) in segment %s", name, (double)d->bytes / 1048576.0, seg);
        /* Test hook (FT_SHM_TEST_STOP_AFTER): stopped here, holding the claim, a test
         * kills this process half-way through filling the segment. */
        if (cfgp->shm_test_stop_after > 0 && ++shm.claims == cfgp->shm_test_stop_after)
            raise(SIGSTOP);
        return HOST_FILL;
    }
    /* Complete: used only when its bytes are this process's own weights. The recorded
     * sum is the filler's word; the bytes are summed here. */
    uint64_t here = ft_checksum_host_parallel(*base, d->bytes / 8, 0);
    if (sum != d->sum || here != d->sum) {
        shm.differing++;
        FT_LOG_CAPPED(FT_LOG_WARN, 8, "shm: %s in segment %s differs from this process's weights (content sum "
                      "%016llx, recorded %016llx, here %016llx): never used; a private copy", name, seg,
                      (unsigned long long)here, (unsigned long long)sum, (unsigned long long)d->sum);
        return HOST_PRIVATE;
    }
    if (pin(u, name) != 0) {
        shm.failed++;
        return HOST_PRIVATE;
    }
    shm.checked++;
    shm.use[u] = USE_SHARED;
    shm.shared_bytes += d->bytes;
    return HOST_SHARED;
}

/* The unit claimed by shm_store_unit is filled (ok), or could not be (its claim given
 * back, empty, for another process to fill). */
void shm_store_filled(uint32_t u, int ok)
{
    if (shm.seg == NULL || u >= shm.n)
        return;
    if (ok && ft_shmseg_unit_complete(shm.seg, u, shm.claim_sum[u]) == 0) {
        shm.filled++;
        shm.use[u] = USE_SHARED;
        shm.shared_bytes += ft_shmseg_unit_bytes(shm.seg, u);
        return;
    }
    ft_shmseg_unit_abandon(shm.seg, u);
    unpin(u);
    shm.failed++;
}

/* Unit u no longer uses the segment in this process (it was written to here: its
 * weights are its own from now on). The others keep using the shared copy. */
void shm_store_leave(uint32_t u)
{
    if (shm.seg == NULL || u >= shm.n || shm.use[u] != USE_SHARED)
        return;
    unpin(u);
    shm.use[u] = USE_NONE;
    shm.shared_bytes -= ft_shmseg_unit_bytes(shm.seg, u);
    shm.left++;
}

/* The exit report's line. */
void shm_store_report(void)
{
    if (shm.seg == NULL)
        return;
    unsigned used = 0;
    for (uint32_t u = 0; u < shm.n; u++)
        used += shm.use[u] == USE_SHARED;
    char a[32];
    FT_INFO("shm: segment %s: %u unit(s), %s, used from it: %u filled by this process (%u taken over from a "
            "process that died), %u checked and used as another filled them; private copies: %u waited out, "
            "%u differing, %u written to here, %u without room or pinning",
            ft_shmseg_name_of(shm.seg), used, human_bytes(shm.shared_bytes, a, sizeof a), shm.filled,
            shm.taken_over, shm.checked, shm.waited_out, shm.differing, shm.left, shm.failed);
}

/* At exit: the process leaves the segment, and the last one removes it. The mapping
 * stays: copies from it may still be queued on the device while the process ends. */
void shm_store_detach(void)
{
    if (shm.seg == NULL)
        return;
    char name[FT_SHMSEG_NAME_MAX];
    snprintf(name, sizeof name, "%s", ft_shmseg_name_of(shm.seg));
    int rc = ft_shmseg_close(shm.seg, now_ns() + 5000000000ull, 1);
    shm.seg = NULL;
    if (rc == 1)
        FT_INFO("shm: segment %s removed (the last process to leave it)", name);
    else if (rc < 0)
        FT_DEBUG("shm: leaving segment %s: %s", name, strerror(-rc));
}

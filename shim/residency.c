/* residency.c - the residency engine: the switch that makes streamed units leave the
 * device, loads (ahead of use on a side stream, or on a miss on the caller's stream)
 * and unloads proven by the device checksum.
 *
 * At the switch (activate_locked), each streamed unit's regions are copied out to
 * pinned host memory and their physical memory is unmapped and released; the addresses
 * stay reserved (docs/architecture.md, "Stable device addresses"). At each unit's first
 * launch of a pass, the streamed units that follow it (as many as the other slots) are
 * loaded on the side stream: physical memory is created and mapped at the same
 * addresses, the bytes copied in, and an event recorded that every call touching the
 * unit waits on. A call touching a unit that is not loaded (a miss) loads it on the
 * caller's stream. At most `slots` streamed units are loaded at once (a call that reads
 * more has them all loaded, over the slots until the next prefetch: res_shed); loading
 * one more first unloads the least recently loaded: after the events behind its copy in
 * and its last uses (its kernels must be done), it is dropped when the device checksum
 * proves it unchanged, else copied back to the host store (nothing written is lost),
 * and its physical memory goes to the unit loaded next or is released
 * (docs/residency.md). The prefetching thread's moves are mostly hand-overs instead
 * (handover, res_move_tail): the leaving unit's physical memory mapped at the incoming
 * unit's addresses too, its checksum and copy back waited for on the device, the host's
 * part (its sum read, its addresses unmapped) made later. A load the device refuses
 * memory to is given up whole, never left half mapped (map_short).
 *
 * With FT_SHM_ENABLED, the host store of a streamed unit may be the shared segment of
 * the processes running the same model (hoststore.c decides, at each eviction): then
 * it is used without a copy out, or filled by this eviction's copy; it is never
 * written afterwards (a unit that changes, or is written in host memory, gets a
 * private copy first: unit_go_private).
 *
 * The guard that decides what a call needs loaded is guard.c's; this file carries out
 * the loads and unloads it asks for. It also serves copies and sets on the host store
 * of a unit not loaded (res_host_copy, res_host_set), and lets go of what FT_SPILL and
 * the engine kept of a freed allocation (res_vmm_free, res_vmm_free_program).
 *
 * Owns: res, under res.lock (application threads launch concurrently; engine_enter
 * takes it for every guarded call, from the guard until the real call is enqueued,
 * so that no unload falls between a guard and its launch). Whether the engine runs is
 * the phase's (engine.c: PHASE_STREAMING, entered by engine_enter before
 * activate_locked; activate_locked's -1 sends it to PHASE_OFF), not res's. It calls
 * guard.c, spill.c, checksum.c, hoststore.c, vmm.c, phys.c, device.c and cuda.c. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include "core/shmseg.h"

res_state_t res = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Region r's entry when it is a piece of an allocation served in pieces (vmm.c); NULL
 * for a whole region, or one the application freed. */
static vmm_t *piece_of(const res_region_t *r)
{
    vmm_t *v = r->size != 0 ? vmm_find(r->va) : NULL;
    return v != NULL && v->piece ? v : NULL;
}

/* Maps physical memory over region r, a whole one (an unloaded unit's, when one
 * matches its size, else new), without access yet: load_unit sets it once for each run
 * of adjacent regions, then copies their bytes in. Pieces: map_pieces. */
static int map_region(res_region_t *r, CUdevice dev)
{
    CUmemGenericAllocationHandle h = 0;
    int given = 0;
    for (int i = 0; i < res.n_spare && !given; i++)
        if (!res.spare[i].pieces && res.spare[i].len == r->len) {
            h = res.spare[i].h;
            res.spare[i] = res.spare[--res.n_spare];
            res.reused++;
            given = 1;
        }
    uint64_t ns[3] = { 0, 0, 0 };
    CUresult rc = map_physical(dev, r->va, r->len, &h, given, ns, 1);
    res.map_calls++;
    res.ns_create += ns[0];
    res.ns_map_call += ns[1];
    if (rc != CUDA_SUCCESS) {
        FT_DEBUG("residency: mapping %zu bytes at %#llx failed: %d", r->len, (unsigned long long)r->va, (int)rc);
        return -1;
    }
    vmm_t *v = vmm_find(r->va);
    if (v != NULL)
        v->handle = h;
    return 0;
}

/* Where a load's pieces take physical memory from: a leaving unit's allocations, or
 * the spares; each is used from its start. */
typedef struct {
    CUmemGenericAllocationHandle h;
    size_t size;
} phys_src_t;

/* Lets go of piece v's reference to its allocation, mapped no more (the allocation
 * released with the last reference). */
int res_room_used(uint64_t va)
{
    ft_region_t r;
    return !ft_regions_find(regions, va, &r) || ft_disc_region_touched(disc, r.id);
}

static void drop_piece(vmm_t *v)
{
    vmm_left_host(v); /* room moved to host memory that a later plan's unit holds */
    if (phys_drop(v->handle))
        phys_release(v->handle);
}

/* Maps the pieces of unit un that have a size and no mapping yet (r->mapping 0),
 * without access, one driver mapping per physical allocation, each mapped whole: the
 * H100's driver maps no part of one (CUDA_ERROR_NOT_SUPPORTED, at offset 0 or past it),
 * and its mapping calls cost per mapping (53 one-granule mappings: 1.0 ms to set access
 * and 0.7 ms to unmap; one mapping of the 53 granules: 33 and 21 us; bench/map_cost.c).
 * Each run of such pieces (adjacent in address, of one allocation) takes, from its
 * start, the sources src[0 .. n) that fit whole in what is left of it (first fit;
 * taken[i] set), then one new allocation for the rest of it; or one new allocation for
 * all of it where that would make more than RUN_PARTS mappings. Each piece mapped holds a
 * reference to its allocation (phys.c). `dry`: nothing is made, mapped or written but
 * taken[]. *fresh: the new allocations made (or needed). 0; -1 when the device refused:
 * nothing this call mapped stays mapped, its new allocations are released, and the
 * sources are as they were. */
#define RUN_PARTS 4
static int map_pieces(res_unit_t *un, CUdevice dev, const phys_src_t *src, int n, unsigned char *taken, int dry,
                      int *fresh)
{
    *fresh = 0;
    if (n > 0)
        memset(taken, 0, (size_t)n);
    int failed = 0;
    uint64_t t = now_ns();
    for (int k = 0; k < un->n && !failed;) {
        res_region_t *r = &res.regions[un->first + k];
        vmm_t *v = r->mapping ? NULL : piece_of(r);
        if (v == NULL) {
            k++;
            continue;
        }
        int end = k + 1;
        uint64_t run_end = r->va + r->len;
        for (;;) {
            res_region_t *q = end < un->n ? &res.regions[un->first + end] : NULL;
            vmm_t *w = q != NULL && !q->mapping && q->va == run_end ? piece_of(q) : NULL;
            /* Not into the next allocation (its first piece): cudaFree unmaps one
             * allocation's mappings. */
            if (w == NULL || w->pieces != 0)
                break;
            run_end += q->len;
            end++;
        }
        /* The run's parts: the sources first fit takes, then new memory for the rest;
         * more than RUN_PARTS, one new allocation for all of it instead (so that a
         * unit's mappings do not multiply from move to move). */
        int part[RUN_PARTS + 1], parts = 0;
        for (uint64_t left = run_end - r->va; left > 0 && parts <= RUN_PARTS;) {
            int i = 0;
            for (;; i++) {
                int picked = 0;
                for (int p = 0; p < parts && !picked; p++)
                    picked = part[p] == i;
                if (i == n || (!taken[i] && !picked && src[i].size <= left))
                    break;
            }
            part[parts++] = i < n ? i : -1;
            left = i < n ? left - src[i].size : 0;
        }
        if (parts > RUN_PARTS) {
            part[0] = -1;
            parts = 1;
        }
        for (int p = 0, at = k; p < parts && !failed; p++) {
            int i = part[p];
            uint64_t va = res.regions[un->first + at].va, size = i >= 0 ? src[i].size : run_end - va;
            CUmemGenericAllocationHandle h = i >= 0 ? src[i].h : 0;
            if (i >= 0)
                taken[i] = 1;
            else
                (*fresh)++;
            int stop = at;
            for (uint64_t covered = 0; covered < size; stop++)
                covered += res.regions[un->first + stop].len;
            if (dry) {
                at = stop;
                continue;
            }
            if (i < 0) {
                uint64_t t0 = now_ns();
                CUresult rc = phys_make(dev, size, &h);
                res.ns_create += now_ns() - t0;
                if (rc != CUDA_SUCCESS) {
                    FT_LOG_CAPPED(FT_LOG_WARN, 3, "residency: the device refused %llu bytes of physical memory "
                                  "for pieces (CUresult %d)", (unsigned long long)size, (int)rc);
                    failed = 1;
                    break;
                }
            }
            res.map_calls++;
            CUresult rc = drv.map(va, size, 0, h, 0);
            if (rc != CUDA_SUCCESS) {
                FT_LOG_CAPPED(FT_LOG_WARN, 3, "residency: cuMemMap of %llu bytes of pieces at %#llx refused "
                              "(CUresult %d)", (unsigned long long)size, (unsigned long long)va, (int)rc);
                if (i < 0)
                    phys_release(h);
                failed = 1;
                break;
            }
            for (int j = at; j < stop; j++) {
                res_region_t *q = &res.regions[un->first + j];
                vmm_t *w = piece_of(q);
                w->handle = h;
                w->map_n = j == at ? (uint32_t)(stop - at) : 0;
                q->mapping = 1;
                phys_hold(h);
            }
            res.reused += i >= 0 ? (uint64_t)(stop - at) : 0; /* regions onto memory a unit held before */
            at = stop;
        }
        k = end;
    }
    res.ns_map_call += now_ns() - t;
    if (failed) {
        /* What this call mapped goes (no piece of un was mapped before it: a call maps
         * them all or none); the sources keep their holders, its new allocations go. */
        for (int k = 0; k < un->n; k++) {
            res_region_t *r = &res.regions[un->first + k];
            vmm_t *v = r->mapping ? piece_of(r) : NULL;
            if (v == NULL)
                continue;
            if (v->map_n > 0)
                drv.unmap(r->va, (uint64_t)v->map_n * r->len);
            int source = 0;
            for (int i = 0; i < n && !source; i++)
                source = src[i].h == v->handle;
            if (phys_drop(v->handle) && !source)
                phys_release(v->handle);
            r->mapping = 0;
        }
        return -1;
    }
    return 0;
}

/* Undoes the mapping a load made at region r (r->mapping), before its copy was issued.
 * A piece: the driver mapping that begins there (map_n pieces; one that lies inside
 * another's goes with it), and its reference (the allocation released with the last).
 * A whole region: its physical memory released too when `release` (0: a hand-over's,
 * still the leaving unit's). */
static void undo_mapping(res_region_t *r, int release)
{
    vmm_t *v = vmm_find(r->va);
    r->mapping = 0;
    if (v != NULL && v->piece) {
        if (v->map_n > 0)
            drv.unmap(r->va, (uint64_t)v->map_n * r->len);
        drop_piece(v);
        return;
    }
    drv.unmap(r->va, r->len);
    if (v != NULL && release) {
        drv.release(v->handle);
        v->handle = 0;
    }
}

/* Undoes the mappings of unit un's regions that a load made (r->mapping), before it
 * issued a copy; `release` as undo_mapping's. `pieces_only`: its pieces alone. */
static void unmap_mapped(res_unit_t *un, int release, int pieces_only)
{
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->mapping && (!pieces_only || piece_of(r) != NULL))
            undo_mapping(r, release);
    }
}

/* cuMemSetAccess over several regions at once was refused once: one call per region
 * from then on. The driver's documentation allows a range of several mappings. */
static int access_runs_refused;

/* Sets access on the regions of unit un that were mapped (r->mapping), one call per run
 * of adjacent ones: the call costs the same for 2 MiB as for 196 MiB (tens of us on the
 * one-H200 machine, 500-700 us on the two-H200 one while the engine runs), and a unit's
 * regions, allocated one after another, usually lie end to end. A region whose access
 * cannot be set is unmapped again (r->mapping cleared); a piece's, with every piece of
 * the unit (their mappings span several). */
static void set_unit_access(res_unit_t *un, CUdevice dev, int release)
{
    uint64_t t = now_ns();
    for (int k = 0; k < un->n;) {
        res_region_t *r = &res.regions[un->first + k];
        if (!r->mapping) {
            k++;
            continue;
        }
        int end = k + 1;
        uint64_t run_end = r->va + r->len;
        while (!access_runs_refused && end < un->n && res.regions[un->first + end].mapping &&
               res.regions[un->first + end].va == run_end)
            run_end += res.regions[un->first + end++].len;
        CUresult rc = set_access(dev, r->va, run_end - r->va);
        res.access_calls++;
        if (rc != CUDA_SUCCESS && end - k > 1) {
            access_runs_refused = 1;
            FT_INFO("residency: cuMemSetAccess refused a range of %d adjacent regions (%d): one "
                    "call per region from now on", end - k, (int)rc);
            continue; /* again, region by region */
        }
        if (rc != CUDA_SUCCESS) {
            FT_DEBUG("residency: access to %zu bytes at %#llx failed: %d", r->len,
                     (unsigned long long)r->va, (int)rc);
            if (piece_of(r) != NULL)
                unmap_mapped(un, release, 1);
            else
                undo_mapping(r, release);
        }
        k = end;
    }
    res.ns_access += now_ns() - t;
}

static __thread char per_thread_key; /* its address tells threads' per-thread streams apart */

/* What tells `stream` apart from the streams of other calls: cudaStreamPerThread is one
 * handle for a stream per thread. Keyed by the handle, a thread skipped the wait for a
 * unit's copy that another thread's stream had made (model --threads 3
 * --per-thread-stream on the simulator: wrong results in 3 runs of 24 under load). */
cudaStream_t stream_key(cudaStream_t stream)
{
    return stream == cudaStreamPerThread ? (cudaStream_t)(void *)&per_thread_key : stream;
}

/* A call on `stream` touched the unit: its use event for that stream is recorded. */
void unit_record_use(res_unit_t *un, cudaStream_t stream)
{
    cudaStream_t key = stream_key(stream);
    int k = 0;
    while (k < un->n_used && un->used_on[k] != key)
        k++;
    if (k == USE_STREAMS) {
        un->use_overflow = 1;
        return;
    }
    if (k == un->n_used) {
        un->used_on[k] = key;
        un->n_used++;
    }
    ev.record(un->used[k], stream);
}

/* The host waits for every call that touched the unit since its load. */
static void unit_sync_used(res_unit_t *un)
{
    if (un->use_overflow)
        REAL(cudaDeviceSynchronize)();
    for (int k = 0; k < un->n_used; k++)
        ev.sync(un->used[k]);
}

/* `stream` waits for every call that touched the unit since its load; -1 when it
 * cannot (more streams than USE_STREAMS touched it, or an error). */
static int unit_wait_used(res_unit_t *un, cudaStream_t stream)
{
    if (un->use_overflow)
        return -1;
    for (int k = 0; k < un->n_used; k++)
        if (ev.wait(stream, un->used[k], 0) != cudaSuccess)
            return -1;
    return 0;
}

/* Enqueues the checksum of unit u's bytes on the device, behind the calls that have
 * touched it so far, into ck.host[u]; ck_done marks its end. -1 when it cannot be had
 * (no kernel, an error, a region whose size is not a whole number of words). */
typedef CUresult (*host_dev_fn)(CUdeviceptr *, void *, unsigned int);

/* The device address of region r's host store (pinned, mapped under unified
 * addressing), looked up once for each store; 0 when it has none (pageable memory, an
 * error). */
static uint64_t host_dev_ptr(res_region_t *r)
{
    static host_dev_fn fn;
    static int looked;
    if (r->host == NULL)
        return 0;
    if (r->host_dev_of == r->host)
        return r->host_dev;
    if (!looked) {
        fn = (host_dev_fn)ft_shim_driver_proc("cuMemHostGetDevicePointer", 3020);
        looked = 1;
    }
    CUdeviceptr d = 0;
    r->host_dev = fn != NULL && fn(&d, r->host, 0) == CUDA_SUCCESS ? (uint64_t)d : 0;
    r->host_dev_of = r->host;
    return r->host_dev;
}

static int change_notes;
#define CHANGE_NOTES 8

/* Whether unit un's checksum is followed by its copy back when it changed
 * (FT_COPY_BACK_KERNEL), which a hand-over of its slot needs (res.lock held): for the
 * prefetching thread, a reference sum, a host store of its own, pinned and mapped. A
 * unit found changed before, while the log still says where changes are, is evicted
 * with a host wait instead, so that note_change compares its bytes with the host copy. */
static int copy_back_wanted(res_unit_t *un)
{
    if (ck.back_fn == NULL || !mover_running() || !un->ref_valid || un->shared || un->pinned ||
        (un->changes > 0 && change_notes < CHANGE_NOTES))
        return 0;
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size != 0 && host_dev_ptr(r) == 0)
            return 0;
    }
    return 1;
}

int checksum_issue(int u)
{
    res_unit_t *un = &res.units[u];
    un->ck_pending = 0;
    if (!ck.units || un->ck_done == NULL || (size_t)u >= ck.n)
        return -1;
    uint64_t *out = ck.dev + u;
    if ((un->ready_recorded && ev.wait(ck.stream, un->ready, 0) != cudaSuccess) ||
        unit_wait_used(un, ck.stream) != 0 ||
        REAL(cudaMemsetAsync)(out, 0, sizeof *out, ck.stream) != cudaSuccess)
        return -1;
    /* One launch for regions that lie end to end (an allocation's pieces): the sum
     * salts each word by its address, so it adds up the same. */
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size == 0)
            continue; /* freed by the application */
        if (r->size % 8 != 0)
            return -1;
        uint64_t end = r->va + r->size;
        while (k + 1 < un->n && res.regions[un->first + k + 1].va == end &&
               res.regions[un->first + k + 1].size % 8 == 0 && res.regions[un->first + k + 1].size != 0)
            end += res.regions[un->first + ++k].size;
        if (checksum_launch(r->va, (end - r->va) / 8, out) != CUDA_SUCCESS)
            return -1;
    }
    /* Behind the sum, its copy back when it changed, for a hand-over of its slot. */
    int back = copy_back_wanted(un);
    for (int k = 0; back && k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size != 0 && copy_back_launch(ck.stream, r->va, r->size / 8, out, un->ref, host_dev_ptr(r)) !=
                                CUDA_SUCCESS)
            return -1;
    }
    if (own_copy_async(ck.host + u, out, sizeof *out, cudaMemcpyDeviceToHost, ck.stream) != cudaSuccess ||
        ev.record(un->ck_done, ck.stream) != cudaSuccess)
        return -1;
    un->ck_pending = 1;
    un->ck_back = back;
    un->ck_uses = un->uses;
    return 0;
}

/* Unit u's checksum now: the one issued behind its last launch if nothing has touched
 * it since, else a new one; waits for it on the host. -1 when it cannot be had. */
static int unit_checksum(int u, uint64_t *sum)
{
    res_unit_t *un = &res.units[u];
    if (!checksum_current(un) && checksum_issue(u) != 0)
        return -1;
    un->ck_pending = 0;
    if (ev.sync(un->ck_done) != cudaSuccess)
        return -1;
    *sum = ck.host[u];
    return 0;
}

/* cuMemUnmap over several adjacent mappings was refused once: one call per mapping from
 * then on (atomic: the prefetching thread unmaps too, res_move_tail). */
static int unmap_runs_refused;

/* How many of the regions rg[0 .. n) the driver mapping that begins at rg[0] covers: a
 * piece's map_n (map_pieces), 1 for a whole region. */
static int mapping_len(const res_region_t *rg, int n)
{
    vmm_t *v = vmm_find(rg[0].va);
    int m = v != NULL && v->piece && v->map_n > 0 ? (int)v->map_n : 1;
    return m < n ? m : n;
}

/* Unmaps the regions rg[0 .. n) that have a size (the others were freed by the
 * application), one cuMemUnmap per run of adjacent ones, as access is set (a unit's
 * regions usually lie end to end; an allocation served in pieces: dozens of granules).
 * A run holds whole driver mappings: a mapping of several pieces covers regions that
 * follow one another in the unit (map_pieces). On the H100 the call's cost is per
 * mapping, not per call (bench/RESULTS.md, twenty-second session): fewer calls save
 * only their own overhead. ok[k] (may be NULL) is set to whether region k was unmapped;
 * calls[0] counts the calls, calls[1] the regions unmapped. 0 when every one was. */
static int unmap_regions(res_region_t *rg, int n, unsigned char *ok, uint64_t calls[2])
{
    int failed = 0;
    for (int k = 0; k < n;) {
        if (rg[k].size == 0) {
            if (ok != NULL)
                ok[k] = 0;
            k++;
            continue;
        }
        int one = mapping_len(rg + k, n - k), refused = __atomic_load_n(&unmap_runs_refused, __ATOMIC_RELAXED);
        int end = k + one;
        uint64_t run_end = rg[end - 1].va + rg[end - 1].len;
        while (!refused && end < n && rg[end].size != 0 && rg[end].va == run_end)
            run_end += rg[end++].len;
        CUresult rc = drv.unmap(rg[k].va, run_end - rg[k].va);
        calls[0]++;
        if (rc != CUDA_SUCCESS && end - k > one) {
            if (!__atomic_exchange_n(&unmap_runs_refused, 1, __ATOMIC_RELAXED))
                FT_INFO("residency: cuMemUnmap refused a range of %d adjacent regions (%d): one call "
                        "per mapping from now on", end - k, (int)rc);
            continue; /* again, mapping by mapping */
        }
        if (rc != CUDA_SUCCESS) {
            FT_DEBUG("residency: unmapping %#llx failed: %d", (unsigned long long)rg[k].va, (int)rc);
            failed = 1;
        }
        for (int j = k; ok != NULL && j < end; j++)
            ok[j] = rc == CUDA_SUCCESS;
        if (rc == CUDA_SUCCESS)
            calls[1] += (uint64_t)(end - k);
        k = end;
    }
    return failed ? -1 : 0;
}

/* Copies the regions rg[0 .. n) (those with a size) back to their host stores, on the
 * side stream, and waits for them. The calls that touched them have run. 0, or the
 * first error (every copy is still issued). */
static cudaError_t copy_back_regions(res_region_t *rg, int n)
{
    /* On the side stream, not the legacy one: a copy there would wait for all the
     * application's work, not only the unit's. */
    cudaError_t err = cudaSuccess;
    for (int k = 0; k < n; k++) {
        cudaError_t e = rg[k].size != 0 && vmm_find(rg[k].va) != NULL
                      ? own_copy_async(rg[k].host, (void *)(uintptr_t)rg[k].va, rg[k].size, cudaMemcpyDeviceToHost,
                                       res.side)
                      : cudaSuccess;
        if (err == cudaSuccess)
            err = e;
    }
    cudaError_t e = REAL(cudaStreamSynchronize)(res.side);
    if (err == cudaSuccess)
        err = e;
    if (err != cudaSuccess)
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: copying a region back failed (cudaError %d)", (int)err);
    return err;
}

/* Releases the physical memory of the regions rg[0 .. n) (a unit's; those with a size);
 * keep: an unload to give a slot up, whose physical allocations may go to the unit
 * loaded next (res.spare), not the switch's. 0; -1 when an unmapping or a release
 * failed. */
static int release_regions(res_region_t *rg, int n, int keep)
{
    /* One flag a region: a driver mapping of pieces may span hundreds (an allocation of
     * every weight, one unit's part of it mapped at once), and the driver unmaps whole
     * mappings only, so the regions are not taken in chunks. */
    unsigned char small[256], *ok = n <= (int)sizeof small ? small : malloc((size_t)n);
    if (ok == NULL) {
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: out of memory unloading %d regions: their device memory "
                      "stays mapped", n);
        return -1;
    }
    int ret = 0;
    uint64_t t = now_ns();
    uint64_t calls[2] = { 0, 0 };
    unmap_regions(rg, n, ok, calls);
    if (keep) {
        res.unmap_calls += calls[0];
        res.unmapped += calls[1];
        res.ns_unmap_call += now_ns() - t;
    }
    for (int k = 0; k < n; k++) {
        vmm_t *v = rg[k].size != 0 ? vmm_find(rg[k].va) : NULL;
        if (v == NULL)
            continue;
        if (!ok[k]) {
            ret = -1;
            continue;
        }
        /* A piece's allocation goes with the last piece mapping it (phys.c: one may
         * back a run of them), kept whole for the pieces of the next load. */
        if (v->piece && !phys_drop(v->handle))
            continue;
        if (v->on_host) { /* host-located memory (vmm.c): never a spare for a load */
            vmm_left_host(v);
            if (phys_release(v->handle) != CUDA_SUCCESS)
                ret = -1;
            continue;
        }
        size_t run = v->piece ? phys_size(v->handle) : 0;
        CUresult rc = CUDA_SUCCESS;
        if (keep && res.n_spare < res.cap_spare)
            res.spare[res.n_spare++] = (struct spare){ run != 0 ? run : rg[k].len, v->handle, v->piece };
        else
            rc = phys_release(v->handle);
        if (rc != CUDA_SUCCESS)
            ret = -1;
    }
    if (ok != small)
        free(ok);
    return ret;
}

static int unit_go_private(int u, int copy, const char *why);

static void unload_unit_ranged(int u);

/* The first CHANGE_NOTES units found changed at an unload: where, region by region,
 * their bytes on the device differ from the host copy (one more copy back of each, to
 * compare). The bytes a unit's kernels write are the program's data in a weight's
 * allocation, or weights it updates; the offsets tell which. */
static void note_change(int u)
{
    res_unit_t *un = &res.units[u];
    if (change_notes >= CHANGE_NOTES)
        return;
    change_notes++;
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        unsigned char *dev = r->size != 0 && r->host != NULL ? malloc(r->size) : NULL;
        if (dev == NULL)
            continue;
        if (own_copy_sync(dev, (void *)(uintptr_t)r->va, r->size, cudaMemcpyDeviceToHost) == cudaSuccess) {
            const unsigned char *h = r->host;
            uint64_t lo = 0, hi = r->size;
            while (lo < r->size && dev[lo] == h[lo])
                lo++;
            while (hi > lo && dev[hi - 1] == h[hi - 1])
                hi--;
            char a[32];
            if (lo < hi)
                FT_INFO("residency: %s changed on the device: region %u (%s), bytes %llu to %llu differ from "
                        "its host copy", ft_disc_unit(disc, (size_t)u)->name, r->id,
                        human_bytes(r->size, a, sizeof a), (unsigned long long)lo, (unsigned long long)hi - 1);
        }
        free(dev);
    }
}

static void unload_unit(int u)
{
    own_range_push("unload", u);
    unload_unit_ranged(u);
    own_range_pop();
}

static void unload_unit_ranged(int u)
{
    res_unit_t *un = &res.units[u];
    /* Dropped without a copy back only when the device checksum proves it unchanged. */
    uint64_t sum = 0, t = now_ns();
    int sum_ok = unit_checksum(u, &sum) == 0;
    res.ns_ck_wait += now_ns() - t;
    ft_res_unload_t verdict = ft_res_unload(sum_ok, sum, un->ref_valid, un->ref);
    int write_back = verdict.write_back;
    if (verdict.changed)
        note_change(u);
    /* FT_SHM: a changed unit is never copied back into the shared segment, which other
     * processes read; it becomes this process's own. Without memory for that, it stays
     * on the device (a pinned unit holds no slot). */
    if (write_back && un->shared && unit_go_private(u, 0, "it changed on the device in this process") != 0) {
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "shm: no host memory for a private copy of %s, which changed: it stays "
                      "on the device", ft_disc_unit(disc, (size_t)u)->name);
        un->pinned = 1;
        res.loaded--;
        return;
    }
    /* The host store matches the sum once written back (or proven equal). */
    if (sum_ok)
        un->ref = sum;
    un->ref_valid = sum_ok;
    if (verdict.changed && ft_res_pin(++un->changes)) {
        un->pinned = 1;
        char a[32];
        FT_WARN("residency: %s changed between loads %d times: it stays on the device from its "
                "next load on (%s over the plan)", ft_disc_unit(disc, (size_t)u)->name,
                FT_RES_KEEP_AFTER_CHANGES, human_bytes(un->bytes, a, sizeof a));
    }
    /* A copy back that fails (twice: own_copy) leaves the unit where its bytes are,
     * on the device: nothing the program wrote is lost. */
    uint64_t t_back = now_ns();
    cudaError_t back = write_back ? copy_back_regions(&res.regions[un->first], un->n) : cudaSuccess;
    res.ns_back += now_ns() - t_back;
    if (back != cudaSuccess) {
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: %s could not be copied back: it stays on the device",
                      ft_disc_unit(disc, (size_t)u)->name);
        un->pinned = 1;
        res.loaded--;
        return;
    }
    release_regions(&res.regions[un->first], un->n, 1);
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size != 0) /* else freed by the application */
            res.held_bytes -= r->len;
    }
    res.written_back += (uint64_t)write_back;
    un->loaded = 0;
    res.loaded -= !un->pinned; /* a pinned unit held no slot (ft_release unloads them too) */
    res.unloads++;
}

/* The physical allocations kept from the unit just unloaded that no whole region of un
 * can take (more of a size than un has regions of it) are released before un's regions
 * get new ones: held together, the two would go over the budget. Those of pieces:
 * map_pieces_spared. */
static void release_unmatched_spares(const res_unit_t *un)
{
    uint64_t t = now_ns();
    for (int i = res.n_spare - 1; i >= 0; i--) {
        if (res.spare[i].pieces)
            continue;
        int want = 0, same = 0;
        for (int k = 0; k < un->n; k++) {
            const res_region_t *r = &res.regions[un->first + k];
            want += r->size != 0 && r->len == res.spare[i].len && piece_of(r) == NULL;
        }
        for (int j = 0; j < res.n_spare; j++)
            same += !res.spare[j].pieces && res.spare[j].len == res.spare[i].len;
        if (same > want) {
            phys_release(res.spare[i].h);
            res.spare[i] = res.spare[--res.n_spare];
        }
    }
    res.ns_release += now_ns() - t;
}

/* arr, an array of elem-byte entries kept for the next call, grown to one entry per
 * unit (one at least, so that it is never NULL for want of units); res.lock held.
 * Returns the array, or NULL when the memory cannot be had (arr and *cap are then left
 * as they were). */
void *unit_array(void *arr, int *cap, size_t elem)
{
    int want = res.n_units > 0 ? res.n_units : 1;
    if (*cap >= want)
        return arr;
    void *grown = realloc(arr, (size_t)want * elem);
    if (grown != NULL)
        *cap = want;
    return grown;
}

/* The units as core/residency.h's slot decisions see them (res.lock held): `u` (the
 * unit being loaded) and `keep` (the unit running now, -1: none) busy, and so are those
 * the call being guarded touched already (a launch reading two units: the first,
 * loaded, was taken for the second's slot while the launch was not enqueued, and it
 * read unmapped memory). One array, reused: NULL when it cannot be had. */
const ft_res_unit_t *res_view(int u, int keep)
{
    static ft_res_unit_t *view;
    static int cap;
    ft_res_unit_t *grown = unit_array(view, &cap, sizeof *view);
    if (grown == NULL) {
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: out of memory: no unit leaves its slot, and "
                      "no prefetch runs, until memory is had");
        return NULL;
    }
    view = grown;
    for (int i = 0; i < res.n_units; i++) {
        const res_unit_t *un = &res.units[i];
        view[i] = (ft_res_unit_t){ un->stamp, un->loaded, un->n > 0, un->pinned,
                                   i == u || i == keep || touched_by_this_call(i) };
    }
    return view;
}

/* The physical memory kept from unloaded units that no load has taken is released. */
static void release_spares(void)
{
    uint64_t t = now_ns();
    while (res.n_spare > 0)
        phys_release(res.spare[--res.n_spare].h);
    res.ns_release += now_ns() - t;
}

/* Room for one index per unit, for the victims of a load or of res_shed (res.lock
 * held); NULL when it cannot be had. */
static int *victims_array(void)
{
    static int *victims;
    static int cap;
    int *grown = unit_array(victims, &cap, sizeof *victims);
    if (grown != NULL)
        victims = grown;
    return grown;
}

/* Unloads loaded unit v to give its slot up (res.lock held). Mapping is not
 * stream-ordered: its copy in and the calls that touched it must have run, so the host
 * waits for their events first. */
static void evict_loaded(int v)
{
    uint64_t t = now_ns();
    if (res.units[v].ready_recorded)
        ev.sync(res.units[v].ready);
    unit_sync_used(&res.units[v]);
    uint64_t t1 = now_ns();
    res.ns_wait += t1 - t;
    timing_unload_begin(v); /* offload timing (timing.c): off, a return */
    unload_unit(v);
    timing_unload_end(v);
    res.ns_unmap += now_ns() - t1;
}

/* After a call that went over the slots (a launch reading more streamed units than they
 * hold): the units beyond them are unloaded, as ft_res_victims chooses, other than
 * `running` (the unit whose launch was just enqueued) and the n_soon units of `soon`
 * (those its prefetch is about to load). guard.c calls it before a prefetch: the call
 * that went over has recorded its use events by then, and each eviction waits for
 * them (evict_loaded), so nothing leaves under a kernel that may still read it; the
 * launch just enqueued keeps the device busy meanwhile. res.lock held. */
void res_shed(int running, const int *soon, int n_soon)
{
    /* A move under way ends first (the counts are the mover's meanwhile); a hand-over's
     * tail only when units are to leave (its leaving addresses still map physical
     * memory an eviction would let go): at every prefetch, it had the application wait
     * for the device to finish the leaving unit. */
    mover_settle_move();
    if (res.loaded <= res.slots)
        return;
    mover_settle(1);
    const ft_res_unit_t *view = res_view(-1, running);
    int *out = victims_array();
    if (view == NULL || out == NULL)
        return; /* the next load makes the room it can */
    int k = ft_res_victims(view, res.n_units, res.loaded, res.slots, 0, soon, n_soon, out);
    uint64_t held = res.held_bytes;
    for (int i = 0; i < k; i++)
        evict_loaded(out[i]);
    /* Their memory is not kept for a load to reuse: the prefetch that follows may load
     * nothing (its units stayed), and until a load took it, it would be held over the
     * slots still. */
    release_spares();
    res.shed += (uint64_t)k;
    if (k > 0)
        FT_DEBUG("residency: %d unit(s) beyond the slots unloaded: %d loaded of %d slot(s), %.1f MiB of "
                 "streamed units held (%.1f before)", k, res.loaded, res.slots,
                 (double)res.held_bytes / 1048576.0, (double)held / 1048576.0);
}

/* Makes unit u resident for a call on `stream` (the lock held). */
static void load_unit_ranged(int u, cudaStream_t stream, int keep);

void load_unit(int u, cudaStream_t stream, int keep)
{
    mover_settle(1);
    if (res.units[u].loaded)
        return;
    own_range_push(stream == res.side ? "load" : "miss", u);
    load_unit_ranged(u, stream, keep);
    own_range_pop();
}

static void load_body(int u, cudaStream_t stream);
static void load_copies(int u, cudaStream_t stream, uint64_t t2);

/* The room a load of u needs (ft_res_make_room), `keep` running: its victims in
 * *victims (victims_array), *n of them. Without memory for the view, no unit is a
 * victim. */
static ft_res_room_t room_for(int u, int keep, int **victims, int *n)
{
    *n = 0;
    const ft_res_unit_t *view = res_view(u, keep);
    *victims = victims_array();
    return ft_res_make_room(view, view != NULL && *victims != NULL ? res.n_units : 0, res.loaded, res.slots,
                            keep >= 0, *victims, n);
}

static void load_unit_ranged(int u, cudaStream_t stream, int keep)
{
    int n_victims, *victims;
    ft_res_room_t room = room_for(u, keep, &victims, &n_victims);
    if (room == FT_RES_SKIP)
        return;
    /* Over the slots already (a call went over them, and no prefetch has brought them
     * back since), the victims are one for this load and one for each unit beyond. */
    for (int i = 0; i < n_victims; i++)
        evict_loaded(victims[i]);
    res.shed += (uint64_t)(n_victims - (room == FT_RES_EVICT));
    res.over_loads += (uint64_t)(room == FT_RES_OVER);
    load_body(u, stream);
}

int res_move_one(int u, int keep)
{
    /* The unit that left its slot in the last hand-over, its tail left: made now. */
    if (res.units[u].moving)
        mover_settle_unit(u);
    if (res.units[u].loaded || res.units[u].moving)
        return 0;
    int n_victims, *victims;
    ft_res_room_t room = room_for(u, keep, &victims, &n_victims);
    if (room == FT_RES_SKIP)
        return 0;
    /* keep >= 0: a prefetch, never over the slots (OVER), nor without memory */
    if (room == FT_RES_OVER || victims == NULL || mover_begin(u, victims, n_victims) != 0)
        return -1;
    return 1;
}

/* --- a hand-over: the leaver's physical memory to the unit coming in, in stream order --
 *
 * An eviction with a host wait (evict_loaded) ends the leaver's last kernels, its
 * checksum and its unmapping before the next unit's copy is issued: about 1 ms of host
 * time a load, all of it between the leaver's end on the device and the copy's start,
 * while the copy engine idles. A hand-over issues the copy first: the leaver's physical
 * allocations are mapped at the incoming unit's addresses as well (one allocation can
 * be mapped at two ranges at once), and on the side stream, behind the leaver's last
 * calls, its checksum, its copy back when the checksum shows it changed
 * (FT_COPY_BACK_KERNEL, into its host store), then the incoming unit's copies. The
 * host waits afterwards, off the device's path: for the checksum, then it unmaps the
 * leaver's addresses (res_move_tail). Until then the leaver stays `moving`, so that a
 * call touching it waits; the incoming unit is usable as soon as its copies are issued.
 *
 * Taken when the leaver's regions give the incoming unit's their sizes (the layers of a
 * model: the same shapes; the pieces of one allocation: one granule each, a unit's
 * count varying with where its layer's tensors start and end), its host store is its
 * own, pinned and mapped, and its checksum can be made; else the eviction waits on the
 * host, as before. */
/* For each region k of u, the index in v's regions of the one whose physical
 * allocation it takes (pair[k]; -1: a freed region; PAIR_NEW: none left of its size, it
 * gets memory of its own; PAIR_PIECE: a piece, mapped from src). Whole regions pair by
 * size; u's pieces take v's pieces' allocations that fit them whole (src[0 .. *n_src),
 * in v's order, those that were not in phys.c's table put there, held by v's piece;
 * map_pieces chooses) and new ones past them. 0 when the two fit: every live region and
 * every allocation of v taken (u may have more, mapped anew), or every region of u
 * served from v's (v may have more, released by its tail). Never both at once: for a
 * moment u's new memory and v's left-over memory would be held together, over the
 * slot. */
#define PAIR_NEW (-2)
#define PAIR_PIECE (-3)
static int handover_pairs(res_unit_t *un, const res_unit_t *vn, int *pair, phys_src_t *src, int *n_src)
{
    unsigned char taken[MOVE_REGIONS] = { 0 };
    int live_v = 0, matched = 0, fresh = 0, leftover = 0;
    *n_src = 0;
    if (un->n > MOVE_REGIONS || vn->n > MOVE_REGIONS)
        return -1;
    for (int j = 0; j < vn->n; j++) {
        const res_region_t *q = &res.regions[vn->first + j];
        vmm_t *x = piece_of(q);
        if (x == NULL) {
            live_v += q->size != 0;
            continue;
        }
        taken[j] = 1; /* a piece: no whole region pairs with it */
        int i = 0;
        while (i < *n_src && src[i].h != x->handle)
            i++;
        if (i < *n_src)
            continue;
        size_t size = phys_size(x->handle);
        if (size == 0 && phys_adopt(x->handle, size = q->len, 1) != 0)
            return -1;
        src[(*n_src)++] = (phys_src_t){ x->handle, size };
    }
    for (int k = 0; k < un->n; k++) {
        const res_region_t *r = &res.regions[un->first + k];
        pair[k] = -1;
        if (r->size == 0)
            continue;
        if (piece_of(r) != NULL) {
            pair[k] = PAIR_PIECE;
            continue;
        }
        for (int j = 0; j < vn->n && pair[k] < 0; j++) {
            const res_region_t *q = &res.regions[vn->first + j];
            if (!taken[j] && q->size != 0 && q->len == r->len) {
                taken[j] = 1;
                pair[k] = j;
            }
        }
        if (pair[k] >= 0)
            matched++;
        else {
            pair[k] = PAIR_NEW;
            fresh++;
        }
    }
    leftover = matched < live_v;
    /* u's pieces: which of v's allocations they take, and how many new ones (its
     * regions are unmapped: none is `mapping`). */
    unsigned char used[MOVE_REGIONS];
    int made = 0;
    for (int k = 0; k < un->n; k++)
        res.regions[un->first + k].mapping = 0;
    map_pieces(un, 0, src, *n_src, used, 1, &made);
    fresh += made;
    for (int i = 0; i < *n_src; i++)
        leftover |= !used[i];
    return fresh == 0 || !leftover ? 0 : -1;
}

/* The hand-over of v's slot to u, up to u's copies issued (the mover, no res.lock;
 * both units its own): taken when v's checksum issued behind its last launch
 * (checksum_issue) is still valid and has its copy back behind it. 0 when made
 * (res_move_tail then finishes v); -1 when it was not begun (nothing changed: the
 * caller evicts v as before). */
static int handover(int u, int v)
{
    res_unit_t *un = &res.units[u], *vn = &res.units[v];
    int pair[MOVE_REGIONS], n_src = 0, made = 0;
    phys_src_t src[MOVE_REGIONS];
    unsigned char used[MOVE_REGIONS];
    CUdevice dev;
    /* Why not, for the exit report. */
    int why = !vn->ck_pending ? HO_NO_SUM : vn->ck_uses != vn->uses ? HO_USED_SINCE : !vn->ck_back ? HO_NO_BACK
            : handover_pairs(un, vn, pair, src, &n_src) != 0 ? HO_SIZES
            : vn->pinned || !vn->loaded || vn->partial || managed_cu_device(&dev) != 0 ? HO_OTHER : -1;
    if (why >= 0) {
        res.ho_refused[why]++;
        return -1;
    }
    uint64_t t = now_ns();
    /* u's addresses onto v's physical memory (or memory of their own: PAIR_NEW, and
     * pieces past v's), and access to them. */
    int k = 0;
    for (int i = 0; i < un->n; i++)
        res.regions[un->first + i].mapping = 0;
    for (; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (pair[k] == PAIR_NEW) {
            if (map_region(r, dev) != 0)
                break;
            r->mapping = 1;
            continue;
        }
        if (pair[k] < 0)
            continue; /* freed, or a piece (below) */
        vmm_t *q = vmm_find(res.regions[vn->first + pair[k]].va);
        res.map_calls++;
        if (q == NULL || drv.map(r->va, r->len, 0, q->handle, 0) != CUDA_SUCCESS)
            break;
        r->mapping = 1;
    }
    int ok = k == un->n && map_pieces(un, dev, src, n_src, used, 0, &made) == 0;
    res.ho_refused[HO_OTHER] += (uint64_t)!ok;
    if (ok)
        set_unit_access(un, dev, 0);
    for (int i = 0; ok && i < un->n; i++)
        ok = pair[i] == -1 || res.regions[un->first + i].mapping;
    /* The side stream waits for v's sum and its copy back (behind v's last calls). */
    if (ok)
        ok = ev.wait(res.side, vn->ck_done, 0) == cudaSuccess;
    if (!ok) {
        /* v's physical memory is still v's; what was made for u goes */
        for (int i = 0; i < un->n; i++)
            if (res.regions[un->first + i].mapping)
                undo_mapping(&res.regions[un->first + i], pair[i] == PAIR_NEW);
        return -1;
    }
    vn->ck_pending = 0;
    /* The physical allocations change hands: u's whole regions own theirs from now on;
     * v's that none took are released by its tail (which clears `handed`). u's pieces
     * hold references of their own to v's pieces' allocations; the tail drops v's. */
    for (int i = 0; i < un->n; i++) {
        res_region_t *r = &res.regions[un->first + i];
        if (pair[i] < 0)
            continue;
        vmm_t *mine = vmm_find(r->va);
        vmm_t *theirs = vmm_find(res.regions[vn->first + pair[i]].va);
        if (mine != NULL && theirs != NULL)
            mine->handle = theirs->handle;
        res.regions[vn->first + pair[i]].handed = 1;
        res.reused++;
    }
    /* v is unloaded from here on in the counts; its tail unmaps it. */
    for (int j = 0; j < vn->n; j++)
        if (res.regions[vn->first + j].size != 0)
            res.held_bytes -= res.regions[vn->first + j].len;
    vn->loaded = 0;
    res.loaded--;
    res.unloads++;
    load_copies(u, res.side, t);
    res.handovers++;
    return 0;
}

int res_move_handover(int u, const int *leavers, int n)
{
    if (n > 1)
        res.ho_refused[HO_OTHER]++;
    if (n != 1)
        return 0;
    own_range_push("load", u);
    int handed = handover(u, leavers[0]) == 0;
    if (handed) {
        res.prefetches++;
        res.moves++;
    }
    own_range_pop();
    return handed;
}

void res_move_work(int u, const int *leavers, int n)
{
    res_unit_t *un = &res.units[u];
    own_range_push("load", u);
    for (int i = 0; i < n; i++)
        evict_loaded(leavers[i]);
    load_body(u, res.side);
    res.prefetches += (uint64_t)un->loaded;
    res.moves++;
    own_range_pop();
}

/* The rest of a hand-over of v's slot, once the next move has issued its copies (the
 * mover, no res.lock; v still its own, and nothing of res written but v's mappings):
 * its checksum waited for, then its addresses unmapped. res_tail_apply, under res.lock,
 * judges the sum as an eviction's. */
void res_move_tail(int v, res_tail_t *out)
{
    res_unit_t *vn = &res.units[v];
    own_range_push("unload", v);
    uint64_t t = now_ns();
    *out = (res_tail_t){ .unit = v };
    out->sum_ok = ev.sync(vn->ck_done) == cudaSuccess;
    out->ns_wait = now_ns() - t;
    out->sum = ck.host[v];
    uint64_t t1 = now_ns();
    uint64_t calls[2] = { 0, 0 };
    unsigned char ok[MOVE_REGIONS]; /* a hand-over's unit has at most MOVE_REGIONS */
    if (vn->n > MOVE_REGIONS || unmap_regions(&res.regions[vn->first], vn->n, ok, calls) != 0)
        out->unmap_failed = 1;
    out->unmap_calls = calls[0];
    out->unmapped = calls[1];
    /* Its physical memory the unit that came in did not take (it has fewer regions);
     * its pieces' references (an allocation u's pieces map stays theirs). */
    for (int j = 0; j < vn->n && j < MOVE_REGIONS; j++) {
        res_region_t *q = &res.regions[vn->first + j];
        vmm_t *x = q->size != 0 && ok[j] ? vmm_find(q->va) : NULL;
        if (x != NULL && x->piece)
            drop_piece(x);
        else if (x != NULL && !q->handed)
            drv.release(x->handle);
        q->handed = 0;
    }
    out->ns_unmap = now_ns() - t1;
    out->ns_all = now_ns() - t;
    own_range_pop();
}

/* A hand-over's tail judged (res.lock held; the mover may be making another move): as an
 * eviction would, but its copy back, when the unit changed, was made on the device
 * already (FT_COPY_BACK_KERNEL). It writes the tail's unit, the mover's no more, and
 * counts of its own. */
void res_tail_apply(const res_tail_t *tl)
{
    res_unit_t *vn = &res.units[tl->unit];
    const char *name = ft_disc_unit(disc, (size_t)tl->unit)->name;
    ft_res_unload_t verdict = ft_res_unload(tl->sum_ok, tl->sum, vn->ref_valid, vn->ref);
    if (!tl->sum_ok)
        /* The side stream failed: whether the copy back ran is not known, and the
         * device's bytes are another unit's now. Said, never hidden. */
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: the checksum of %s, handed over, failed: its host copy "
                      "may miss what the device wrote to it", name);
    if (tl->unmap_failed)
        FT_DEBUG("residency: unmapping %s after a hand-over failed", name);
    if (verdict.changed) {
        FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s changed on the device: copied back to its host store "
                      "(where, at its next unload)", name);
        if (ft_res_pin(++vn->changes)) {
            vn->pinned = 1;
            char a[32];
            FT_WARN("residency: %s changed between loads %d times: it stays on the device from its "
                    "next load on (%s over the plan)", name, FT_RES_KEEP_AFTER_CHANGES,
                    human_bytes(vn->bytes, a, sizeof a));
        }
    }
    vn->ref = tl->sum;
    vn->ref_valid = tl->sum_ok;
    /* Counts of their own: the mover may be at work on the next move meanwhile, writing
     * the loads' counts (the exit report adds them). */
    res.tail_written_back += (uint64_t)verdict.write_back;
    res.ns_tail_wait += tl->ns_wait;
    res.ns_tail_unmap += tl->ns_unmap;
    res.tail_unmap_calls += tl->unmap_calls;
    res.tail_unmapped += tl->unmapped;
    res.ns_tail += tl->ns_all;
}

/* Whether a region of un that the application holds is not mapped (load_body). */
static int regions_short(const res_unit_t *un)
{
    for (int k = 0; k < un->n; k++)
        if (res.regions[un->first + k].size != 0 && !res.regions[un->first + k].mapping)
            return 1;
    return 0;
}

/* Maps the regions of unit u that load_body could not: the device had no physical
 * memory for them (another process holds it, or the budget was exceeded past what the
 * device has). On an application's thread, res.lock held: the spare memory goes, then
 * loaded units this call does not use leave one at a time, then the device is
 * synchronised (memory freed behind work still running), until every region maps.
 * 0 when they all do. */
static int map_short(int u, CUdevice dev)
{
    res_unit_t *un = &res.units[u];
    release_spares();
    for (int synced = 0;;) {
        int fresh;
        for (int k = 0; k < un->n; k++) {
            res_region_t *r = &res.regions[un->first + k];
            if (r->size != 0 && !r->mapping && piece_of(r) == NULL)
                r->mapping = map_region(r, dev) == 0;
        }
        map_pieces(un, dev, NULL, 0, NULL, 0, &fresh);
        if (!regions_short(un))
            return 0;
        int v = -1;
        for (int i = 0; i < res.n_units && v < 0; i++) {
            const res_unit_t *c = &res.units[i];
            if (i != u && c->loaded && c->n > 0 && !c->pinned && !c->moving && !touched_by_this_call(i))
                v = i;
        }
        if (v >= 0) {
            evict_loaded(v);
            release_spares();
            res.short_evictions++;
        } else if (!synced) {
            REAL(cudaDeviceSynchronize)();
            synced = 1;
        } else {
            return -1;
        }
    }
}

/* Maps unit un's pieces (map_pieces) onto the spares of pieces that fit whole: those
 * that none fits are released first (held beside new memory, the two would go over the
 * budget); on a refusal the others stay spares. */
#define SPARE_SOURCES 64
static void map_pieces_spared(res_unit_t *un, CUdevice dev)
{
    phys_src_t src[SPARE_SOURCES];
    unsigned char taken[SPARE_SOURCES];
    int n = 0, fresh;
    for (int i = res.n_spare - 1; i >= 0 && n < SPARE_SOURCES; i--)
        if (res.spare[i].pieces) {
            src[n++] = (phys_src_t){ res.spare[i].h, res.spare[i].len };
            res.spare[i] = res.spare[--res.n_spare];
        }
    if (n == 0) {
        map_pieces(un, dev, NULL, 0, NULL, 0, &fresh);
        return;
    }
    map_pieces(un, dev, src, n, taken, 1, &fresh);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (taken[i])
            src[m++] = src[i];
        else
            phys_release(src[i].h);
    if (map_pieces(un, dev, src, m, taken, 0, &fresh) != 0)
        for (int i = 0; i < m; i++)
            res.spare[res.n_spare++] = (struct spare){ src[i].size, src[i].h, 1 };
}

/* Maps unit u's regions and copies its bytes in on `stream`; room made. When the device
 * has no physical memory for a region (map_short could not make it, or this is the
 * prefetching thread, which chooses no unit to leave), nothing is loaded: u stays out,
 * and a call that needs it loads it on its own thread. */
static void load_body(int u, cudaStream_t stream)
{
    res_unit_t *un = &res.units[u];
    uint64_t t2 = now_ns();
    release_unmatched_spares(un);
    CUdevice dev;
    int have_dev = managed_cu_device(&dev) == 0;
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        /* size 0: freed */
        r->mapping = r->size != 0 && have_dev && piece_of(r) == NULL && map_region(r, dev) == 0;
    }
    if (have_dev)
        map_pieces_spared(un, dev);
    if (have_dev && regions_short(un) && (mover_here() || map_short(u, dev) != 0)) {
        unmap_mapped(un, 1, 0);
        res.short_failed++;
        char a[32];
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: the device has no physical memory for %s (%s): %s",
                      ft_disc_unit(disc, (size_t)u)->name, human_bytes(un->bytes, a, sizeof a),
                      mover_here() ? "left for the call that needs it" : "the call that needs it will fault");
        release_spares();
        return;
    }
    if (have_dev)
        set_unit_access(un, dev, 1);
    load_copies(u, stream, t2);
    release_spares();
}

/* Unit u's copies in on `stream`, its regions mapped (r->mapping), and its state as a
 * loaded unit's; t2, when its mapping began (for ns_map). */
static void load_copies(int u, cudaStream_t stream, uint64_t t2)
{
    res_unit_t *un = &res.units[u];
    uint64_t copy0 = res.ns_copy;
    un->partial = 0;
    timing_load_begin(u, stream); /* offload timing (timing.c): off, a return */
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size == 0)
            continue;
        if (!r->mapping) {
            FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: cannot load a region of %s back; "
                          "its kernels will fault", ft_disc_unit(disc, (size_t)u)->name);
            un->partial = 1;
            continue;
        }
        r->mapping = 0;
        uint64_t t = now_ns();
        if (own_copy_async((void *)(uintptr_t)r->va, r->host, r->size, cudaMemcpyHostToDevice, stream) != cudaSuccess)
            FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: copying a region of %s in failed twice: its bytes on the "
                          "device are not the program's", ft_disc_unit(disc, (size_t)u)->name);
        res.ns_copy += now_ns() - t;
        res.held_bytes += r->len;
        res.copied_in_bytes += r->size;
        res.region_loads++;
    }
    timing_load_end(u, stream);
    res.ns_map += now_ns() - t2 - (res.ns_copy - copy0);
    ev.record(un->ready, stream);
    un->ready_recorded = 1;
    un->touched_since_load = 0;
    un->waited_valid = 0;
    un->n_used = 0;
    un->use_overflow = 0;
    if (res.held_bytes > res.peak_held_bytes)
        res.peak_held_bytes = res.held_bytes;
    un->loaded = 1;
    un->stamp = ++res.clock;
    res.loaded += !un->pinned; /* a pinned unit holds no slot */
    res.loads++;
}

/* By address, for cudaFree (the region has left the table by then); the guard looks
 * regions up by id. */
static res_region_t *res_find(uint64_t addr)
{
    for (int i = 0; i < res.n_regions; i++)
        if (addr >= res.regions[i].va && addr < res.regions[i].va + res.regions[i].size)
            return &res.regions[i];
    return NULL;
}

/* Region k of unit u, as the engine sees it: its base, size and allocation, and whether
 * it streams (ft_res_region says why not). evict_unit and the shared segment's layout
 * (unit_shm_desc) both take a unit's streamed regions from here, in this order. */
static ft_res_region_t region_kind(const ft_disc_unit_t *u, uint32_t k, uint64_t *base, uint64_t *size, vmm_t **v)
{
    *base = *size = 0;
    int known = ft_disc_region(disc, u->region_ids[k], base, size) == 0;
    *v = known ? vmm_find(*base) : NULL;
    return ft_res_region(known, *v != NULL, ft_disc_region_shared(disc, u->region_ids[k]),
                         ft_disc_region_indirect_only(disc, u->region_ids[k]));
}

/* Unit i as FT_SHM's segment lays it out (res.lock held, the device idle): its
 * streamed regions end to end, a hash of their sizes, and their content sum, on the
 * device (checksum.c's content_sum_*), or on the host for a region FT_SPILL holds
 * there, with the same function. sum_ok 0 when a size is not a whole number of words
 * or the sum fails: such a unit is never shared. */
static void unit_shm_desc(size_t i, shm_unit_desc_t *d)
{
    const ft_disc_unit_t *u = ft_disc_unit(disc, i);
    uint64_t layout = FT_SHMSEG_FP_START, host_sum = 0, dev_sum = 0, words = 0;
    int ok = content_sum_begin() == 0;
    *d = (shm_unit_desc_t){ 0 };
    for (uint32_t k = 0; k < u->n_regions; k++) {
        uint64_t base, size;
        vmm_t *v;
        if (region_kind(u, k, &base, &size, &v) != FT_RES_REGION_STREAMS)
            continue;
        layout = ft_shmseg_fp_add(layout, size);
        d->bytes += size;
        if (size % 8 != 0)
            ok = 0;
        else if (ok && v->spilled)
            host_sum += ft_checksum_host_parallel((const char *)v->host + (base - v->va), size / 8, words);
        else if (ok && content_sum_add(base, size / 8, words) != 0)
            ok = 0;
        words += size / 8;
    }
    d->layout = layout;
    d->sum_ok = ok && d->bytes > 0 && content_sum_end(&dev_sum) == 0;
    d->sum = dev_sum + host_sum;
}

/* Every unit's layout and content sum, made at the switch for the segment's
 * fingerprint and used by the evictions that follow it at once (nothing runs between);
 * a unit made to stream later (demote_for) is summed again then. */
static shm_unit_desc_t *switch_descs;

/* Where unit i's host copy lives, its regions res.regions[first .. first + n) (res.lock
 * held): hoststore.c decides between the shared segment and private copies; a private
 * one is host_store_alloc's, or FT_SPILL's copy of a region it holds. HOST_SHARED,
 * HOST_FILL or HOST_PRIVATE (every r->host set), or -1: no host memory (none set; a
 * spilled region's copy is still its allocation's). */
static int unit_host(size_t i)
{
    res_unit_t *un = &res.units[i];
    res_region_t *rg = &res.regions[un->first];
    if (host_store_sharing()) {
        shm_unit_desc_t d;
        if (switch_descs != NULL)
            d = switch_descs[i];
        else
            unit_shm_desc(i, &d);
        int how = host_store_unit((int)i, ft_disc_unit(disc, i)->name, &d, rg, un->n);
        if (how != HOST_PRIVATE)
            return how;
    }
    /* FT_SPILL's host copy of an allocation is taken over (once the unit is sure to
     * stream): that of a spilled one holds its bytes; that of one faulted back in since
     * is a buffer of the right size, which would otherwise stay pinned beside the new. */
    for (int k = 0; k < un->n; k++) {
        vmm_t *v = vmm_find(rg[k].va);
        if (v != NULL && v->host != NULL && v->va == rg[k].va)
            continue;
        if ((rg[k].host = host_store_alloc(rg[k].size)) == NULL) {
            for (int j = 0; j < k; j++) {
                host_store_free(rg[j].host);
                rg[j].host = NULL;
            }
            return -1;
        }
    }
    for (int k = 0; k < un->n; k++) {
        vmm_t *v = vmm_find(rg[k].va);
        if (v != NULL && v->host != NULL && v->va == rg[k].va) {
            rg[k].host = v->host;
            v->host = NULL;
        }
    }
    return HOST_PRIVATE;
}

/* Unit u's host copy leaves the shared segment for private copies (copy: with the
 * shared bytes; else the caller writes all of them, an eviction's copy back); why goes
 * to the log. Weights this process changes are never written where other processes
 * read them. 0, or -1 when the memory cannot be had (the unit is left as it was).
 * res.lock held. */
static int unit_go_private(int u, int copy, const char *why)
{
    res_unit_t *un = &res.units[u];
    res_region_t *rg = &res.regions[un->first];
    void **mine = calloc((size_t)un->n, sizeof *mine);
    int ok = mine != NULL;
    for (int k = 0; ok && k < un->n; k++)
        if (rg[k].size != 0 && (mine[k] = host_store_alloc(rg[k].size)) == NULL)
            ok = 0;
    if (!ok) {
        for (int k = 0; mine != NULL && k < un->n; k++)
            host_store_free(mine[k]);
        free(mine);
        return -1;
    }
    for (int k = 0; k < un->n; k++) {
        if (rg[k].size != 0 && copy)
            memcpy(mine[k], rg[k].host, rg[k].size);
        rg[k].host = mine[k];
    }
    free(mine);
    un->shared = 0;
    host_store_unit_leave(u);
    FT_INFO("shm: %s keeps a private host copy from now on (%s)", ft_disc_unit(disc, (size_t)u)->name, why);
    return 0;
}

/* The host sum of unit u as the device checksum would give it at its addresses (ref),
 * from its host copy: for a shared unit that FT_SPILL held partly in host memory,
 * whose bytes were never all on the device to be summed there. */
static uint64_t unit_host_ref(const res_unit_t *un)
{
    uint64_t sum = 0;
    for (int k = 0; k < un->n; k++) {
        const res_region_t *r = &res.regions[un->first + k];
        sum += ft_checksum_host_parallel(r->host, r->size / 8, r->va / 8);
    }
    return sum;
}

/* Makes unit i stream (res.lock held, its calls done): its regions backed by virtual
 * memory, other than shared ones, get a host store (or keep FT_SPILL's) and are copied
 * out and unmapped. The host store is the shared segment's where FT_SHM_ENABLED has
 * one for the unit: already holding its bytes (checked; nothing is copied), or filled
 * here. 0 on success; -1 when it stays resident (nothing evictable, no host memory).
 * *moved and *shared add up bytes for the report. */
static int by_va(const void *a, const void *b)
{
    uint64_t x = ((const res_region_t *)a)->va, y = ((const res_region_t *)b)->va;
    return x < y ? -1 : x > y;
}

/* Unit un's pieces in address order, in the places its pieces hold in res.regions (its
 * whole regions stay where they are): a layer's tensors lie in the allocation in the
 * checkpoint's order, not the pass's, and a run of adjacent pieces is one run to map
 * (map_pieces), to set access to and to unmap. In the pass's order the units of
 * pretrained_device_map on the H100 were five runs each. Without memory for it, the
 * order stays (more calls, nothing wrong). */
static void sort_pieces(res_unit_t *un)
{
    int *at = malloc((size_t)un->n * sizeof *at), m = 0;
    res_region_t *p = malloc((size_t)un->n * sizeof *p);
    for (int k = 0; at != NULL && p != NULL && k < un->n; k++)
        if (piece_of(&res.regions[un->first + k]) != NULL) {
            at[m] = un->first + k;
            p[m++] = res.regions[un->first + k];
        }
    if (m > 1) {
        qsort(p, (size_t)m, sizeof *p, by_va);
        for (int j = 0; j < m; j++) {
            res.regions[at[j]] = p[j];
            res.by_id[p[j].id] = at[j];
        }
    }
    free(at);
    free(p);
}

int evict_unit(size_t i, uint64_t *moved, uint64_t *shared_resident)
{
    const ft_disc_unit_t *u = ft_disc_unit(disc, i);
    int first = res.n_regions, spilled_in_unit = 0;
    res_unit_t *un = &res.units[i];
    un->first = first;
    un->bytes = 0;
    for (uint32_t k = 0; k < u->n_regions; k++) {
        uint64_t base = 0, size = 0;
        vmm_t *v;
        /* The rest of the unit streams without the regions that stay (ft_res_region says
         * why); shared and indirect ones count in the report. */
        ft_res_region_t kind = region_kind(u, k, &base, &size, &v);
        if (kind == FT_RES_REGION_SHARED || kind == FT_RES_REGION_INDIRECT)
            *shared_resident += size;
        if (kind != FT_RES_REGION_STREAMS)
            continue;
        res_region_t *r = &res.regions[res.n_regions++];
        /* A region split before (res_split_tail) streams the part before its tail. */
        uint64_t len = v->tail_off != 0 ? v->tail_off : v->size;
        *r = (res_region_t){ base, size < len ? size : len, len, NULL, (int)i, u->region_ids[k], 0, 0, NULL, 0, 0 };
        if (ft_disc_region_off_max(disc, r->id, &r->seen) != 0)
            r->seen = len; /* never split */
        un->bytes += len;
        res.by_id[r->id] = res.n_regions - 1;
        spilled_in_unit |= v->spilled; /* FT_SPILL: its host copy becomes the unit's */
    }
    un->n = res.n_regions - first;
    sort_pieces(un);
    int how = un->n > 0 ? unit_host(i) : -1;
    if (how < 0) {
        FT_WARN("residency: %s stays resident (%s)", u->name,
                un->n > 0 ? "no host memory for it" : "none of its regions is backed by virtual memory");
        for (int k = first; k < res.n_regions; k++)
            res.by_id[res.regions[k].id] = -1;
        res.n_regions = first;
        un->n = 0;
        return -1;
    }
    un->shared = how != HOST_PRIVATE;
    /* A unit with a spilled region has no device copy to sum: its first eviction
     * copies it back and takes the reference then (a shared one takes it from its
     * host copy below). */
    un->ref_valid = !spilled_in_unit && unit_checksum((int)i, &un->ref) == 0;
    int filled = 1;
    for (int k = first; k < res.n_regions; k++) {
        res_region_t *r = &res.regions[k];
        vmm_t *v = vmm_find(r->va);
        if (v != NULL && v->spilled) {
            if (how == HOST_FILL)
                memcpy(r->host, v->host, r->size);
            if (how != HOST_PRIVATE) { /* its bytes are the segment's now */
                host_store_free(v->host);
                v->host = NULL;
            }
            v->spilled = 0; /* the engine's from now on */
            spill_bytes -= v->size;
        } else {
            if (how != HOST_SHARED && copy_back_regions(r, 1) != cudaSuccess)
                filled = 0;
            release_regions(r, 1, 0);
        }
        *moved += r->size;
    }
    /* A fill that failed is given back for another process to make; this process
     * keeps what its copy brought (as a private unit's failed copy back does). */
    if (how == HOST_FILL && !filled && unit_go_private((int)i, 1, "its copy into the shared segment failed") != 0)
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "shm: no host memory to keep %s private: other processes may refill "
                      "its shared copy under it", u->name);
    if (how == HOST_FILL)
        host_store_unit_filled((int)i, filled);
    if (un->shared && spilled_in_unit) {
        un->ref = unit_host_ref(un);
        un->ref_valid = 1;
    }
    un->loaded = 0;
    return 0;
}

/* The units' layout in FT_SHM's segment, and the segment attached, at the switch
 * (res.lock held, the device idle): every unit, resident ones too (the fingerprint is
 * the model's, and demote_for may make a resident unit stream later). */
static void share_units(size_t n)
{
    switch_descs = calloc(n > 0 ? n : 1, sizeof *switch_descs);
    if (switch_descs == NULL) {
        FT_WARN("shm: out of memory: the streamed units keep private host copies");
        return;
    }
    for (size_t i = 0; i < n; i++)
        unit_shm_desc(i, &switch_descs[i]);
    host_store_share(switch_descs, (uint32_t)n);
}

/* The engine could not be set up at the switch (the exit report's verdict says so). */
int res_start_failed;

/* The pieces whose last tensor runs on into another unit's pieces (n units planned):
 * res.follow, for the guard (guard.c's follow_pieces); NULL when there are none. -1
 * when there is no memory for it: the engine cannot start (without it, a kernel given
 * such a tensor would read the other unit's pieces unmapped). */
static int follow_pieces_setup(size_t n)
{
    res.follow = NULL;
    for (size_t i = 0; i < n; i++) {
        const ft_disc_unit_t *u = ft_disc_unit(disc, i);
        for (uint32_t k = 0; k < u->n_regions; k++) {
            uint32_t id = u->region_ids[k], next;
            uint64_t off, base, size, at, asize;
            if (!ft_disc_region_follow(disc, id, &off, &next) || ft_disc_region(disc, id, &base, &size) != 0 ||
                ft_disc_region(disc, next, &at, &asize) != 0 || id >= res.n_ids)
                continue;
            if (res.follow == NULL && (res.follow = calloc(res.n_ids, sizeof *res.follow)) == NULL)
                return -1;
            res.follow[id] = (res_follow_t){ next, base + off, at };
        }
    }
    return 0;
}

/* The switch, res.lock held, the phase STREAMING (engine.c: calls already past their
 * guard have finished enqueueing): the device drains, then the streamed units are
 * evicted. -1 when the engine cannot start (nothing to stream, no memory or events):
 * engine.c then turns it off. */
int activate_locked(void)
{
    uint64_t t_switch = now_ns();
    int slots = plan.out.slots;
    size_t n = plan.in.n;
    int total = 0, streamed = 0;
    res.strict = cfgp->strict_guard;
    res.pass_len = (long)ft_disc_pass_length(disc);
    res.pass_start = (long)ft_disc_track_start(disc);
    /* Room for every unit's regions: a resident unit may be made to stream later
     * (demote_for), when the application allocates past the budget. */
    for (size_t i = 0; i < n; i++) {
        const ft_disc_unit_t *u = ft_disc_unit(disc, i);
        total += (int)u->n_regions;
        streamed += plan.out.resident[i] ? 0 : (int)u->n_regions;
        for (uint32_t k = 0; k < u->n_regions; k++)
            if (u->region_ids[k] >= res.n_ids)
                res.n_ids = u->region_ids[k] + 1;
    }
    if (streamed == 0 || slots <= 0)
        return -1;
    /* Everything that can fail comes before the first eviction: afterwards the engine
     * must run, or evicted units would fault. */
    res.regions = calloc((size_t)total, sizeof *res.regions);
    res.spare = calloc((size_t)total, sizeof *res.spare);
    res.cap_spare = res.spare != NULL ? total : 0;
    res.units = calloc(n, sizeof *res.units);
    res.by_id = malloc(res.n_ids * sizeof *res.by_id);
    int ok = res.regions != NULL && res.units != NULL && res.by_id != NULL;
    /* A plan made again (reload.c) may have more units than the sums have room for. */
    checksum_room(n);
    for (size_t i = 0; ok && i < n; i++)
        for (int k = 0; ok && k < USE_STREAMS; k++)
            ok = ev.create(&res.units[i].used[k], cudaEventDisableTiming) == cudaSuccess;
    for (size_t i = 0; ok && i < n; i++)
        ok = ev.create(&res.units[i].ready, cudaEventDisableTiming) == cudaSuccess &&
             (!ck.units || ev.create(&res.units[i].ck_done, cudaEventDisableTiming) == cudaSuccess);
    ok = ok && follow_pieces_setup(n) == 0;
    if (!ok) {
        FT_WARN("residency: out of memory or events; nothing offloaded");
        res_start_failed = 1;
        return -1;
    }
    for (uint32_t k = 0; k < res.n_ids; k++)
        res.by_id[k] = -1;
    for (int i = 0; i < STEP_RING; i++)
        if (ev.create(&res.pass_ev[i], cudaEventDefault) != cudaSuccess) {
            res.pass_ev[0] = NULL; /* no measured step; the engine runs all the same */
            break;
        }
    /* Kept from the first plan's engine when the plan is made again (res_drop_all). */
    if (res.side == NULL && own_stream(&res.side) != cudaSuccess)
        res.side = NULL; /* the legacy stream: correct, slower */
    REAL(cudaDeviceSynchronize)();
    if (plan.room_bytes != 0 && !capture_under_way()) {
        uint64_t pieces = 0, room = vmm_room_to_host(res_room_used, 0, &pieces);
        char a[32], b[32];
        FT_INFO("residency: %s of the program's own pools that no call had used (%llu piece(s)) moved to "
                "host memory the device reaches over the link: it counts in no device memory, and stays "
                "the program's to use, more slowly (%s expected)", human_bytes(room, a, sizeof a),
                (unsigned long long)pieces, human_bytes(plan.room_bytes, b, sizeof b));
    }
    if (!cfgp->pinned_memory)
        FT_WARN("residency: FT_PINNED_MEMORY=false: streamed weights live in pageable host "
                "memory; every copy in is staged and synchronous, several times slower");
    uint64_t moved = 0, shared_resident = 0;
    int evicted_units = 0;
    for (size_t i = 0; i < n; i++) {
        const ft_disc_unit_t *u = ft_disc_unit(disc, i);
        res.units[i].first_launch = u->first_launch;
        res.units[i].last_launch = u->last_launch;
        res.units[i].loaded = 1; /* resident units, and streamed ones we cannot evict */
    }
    if (cfgp->shm_enabled)
        share_units(n);
    for (size_t i = 0; i < n; i++) {
        if (plan.out.resident[i])
            continue;
        if (evict_unit(i, &moved, &shared_resident) == 0)
            evicted_units++;
    }
    free(switch_descs);
    switch_descs = NULL;
    res.n_units = (int)n;
    res.slots = slots;
    res.switches++;
    FT_INFO("residency: %d unit(s), %.1f MiB, moved to %s; copied in ahead of use (on demand "
            "after a miss), at most %d at once", evicted_units, (double)moved / 1048576.0,
            host_store_kind(), slots);
    if (shared_resident > 0)
        FT_INFO("residency: %.1f MiB of weights used by several units, or reached only through "
                "pointer arrays, stay resident",
                (double)shared_resident / 1048576.0);
    /* Pieces that were in host memory before the plan and stay (resident units, and
     * other memory the program used) come to the device, the streamed units having
     * left; the room stays in host memory. */
    if (host_room_bytes != 0 && !capture_under_way()) {
        uint64_t pieces = 0, back = vmm_used_to_device(res_room_used, 0, &pieces);
        if (pieces > 0) {
            char a[32];
            FT_INFO("residency: %s in host memory since before the plan (%llu piece(s)) brought to the device",
                    human_bytes(back, a, sizeof a), (unsigned long long)pieces);
        }
    }
    /* FT_SPILL: what the plan keeps on the device comes back to it; the budget now
     * has room for it, the streamed units having left. */
    spill_end_locked();
    host_store_switched();
    FT_INFO("residency: the switch to the plan took %.1f ms", (double)(now_ns() - t_switch) / 1e6);
    mover_start();
    return 0;
}

/* --- copies and sets served on a host store ------------------------------------------ */

/* Where the host store holds [dev, dev + n) of a streamed unit that is not loaded, once
 * the stream's earlier work is done; NULL when it does not (the call then loads the
 * unit as usual). res.lock held. */
static char *host_store_at(uint64_t dev, size_t n, cudaStream_t s, res_unit_t **unit)
{
    ft_region_t reg;
    if (engine_phase() != PHASE_STREAMING || n == 0 || !ft_regions_find(regions, dev, &reg) ||
        reg.id >= res.n_ids || res.by_id[reg.id] < 0)
        return NULL;
    res_region_t *r = &res.regions[res.by_id[reg.id]];
    res_unit_t *un = &res.units[r->unit];
    /* A unit the prefetching thread moves is its until the move ends: its host store
     * is being copied in, or copied back into (engine_enter_copy waits for no move);
     * one it is about to load, it loads now (mover_catch), as for a launch's touch: the
     * copy then goes to the device, as it did when copies waited for every move. */
    if (un->moving)
        mover_settle_unit(r->unit);
    else if (!un->loaded)
        mover_catch(r->unit);
    if (un->loaded || r->host == NULL || dev < r->va || dev + n > r->va + r->size)
        return NULL;
    if (REAL(cudaStreamSynchronize)(s) != cudaSuccess)
        return NULL;
    *unit = un;
    return (char *)r->host + (dev - r->va);
}

/* A copy between host memory and a streamed unit that is not loaded is served from
 * the unit's host store, after the stream's earlier work, instead of loading the unit
 * (res.lock held by the caller, engine_enter). A write makes the unit's checksum
 * reference stale: its next eviction copies it back. 1 when served. */
int res_host_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost)
        return 0;
    res_unit_t *un;
    char *h = host_store_at((uint64_t)(uintptr_t)(kind == cudaMemcpyHostToDevice ? dst : src), n, s, &un);
    if (h == NULL)
        return 0;
    if (kind == cudaMemcpyHostToDevice && un->shared) {
        /* Never into the shared segment: the unit becomes this process's own first
         * (without memory for that, the call loads the unit as any other). */
        if (unit_go_private((int)(un - res.units), 1, "this process wrote to it") != 0)
            return 0;
        h = host_store_at((uint64_t)(uintptr_t)dst, n, s, &un);
        if (h == NULL)
            return 0;
    }
    if (kind == cudaMemcpyHostToDevice) {
        memcpy(h, src, n);
        un->ref_valid = 0;
    } else {
        memcpy(dst, h, n);
    }
    res.host_copies++;
    return 1;
}

/* A memset of count elements of `width` bytes (1 or 4) into a streamed unit that is not
 * loaded, done on its host store (the next load copies it in; the checksum reference
 * is stale, so its next eviction copies it back). 1 when served. */
int res_host_set(uint64_t dev, unsigned v, int width, size_t count, cudaStream_t s)
{
    res_unit_t *un;
    char *h = host_store_at(dev, count * (size_t)width, s, &un);
    if (h != NULL && un->shared &&
        (unit_go_private((int)(un - res.units), 1, "this process wrote to it") != 0 ||
         (h = host_store_at(dev, count * (size_t)width, s, &un)) == NULL))
        return 0;
    if (h == NULL)
        return 0;
    if (width == 1) {
        memset(h, (int)(v & 0xff), count);
    } else {
        uint32_t w = v;
        for (size_t i = 0; i < count; i++)
            memcpy(h + 4 * i, &w, 4);
    }
    un->ref_valid = 0;
    res.host_copies++;
    return 1;
}

/* --- an allocation freed ------------------------------------------------------------- */

/* vmm_free's `forget` (res_vmm_free, res_vmm_free_program pass it down; res.lock held,
 * the mover settled): the device synchronised, what FT_SPILL and the residency engine
 * kept of v goes -- its host copy and spilled bytes, and a streamed region, which
 * leaves the engine for good. 1 when physical memory is mapped behind v (a streamed
 * region is unmapped while its unit is not loaded). */
static int forget(vmm_t *v)
{
    /* Work a settled move enqueued may still run after vmm_free's device
     * synchronisation: a leaving unit's copy back reads its addresses on the side
     * stream, and v is unmapped once this returns. On the simulator, 1 run in 30 of
     * residency.sh's strict run faulted there when the program's last copy no longer
     * waited for the move. */
    if (mover_running())
        REAL(cudaDeviceSynchronize)();
    int mapped = !v->spilled;
    if (v->spilled)
        spill_bytes -= v->size;
    if (v->host != NULL) { /* a streamed unit's host copy is its region's by now */
        host_store_free(v->host);
        v->host = NULL;
    }
    res_region_t *r = engine_phase() == PHASE_STREAMING ? res_find(v->va) : NULL;
    if (r != NULL) {
        mapped = res.units[r->unit].loaded;
        if (mapped)
            res.held_bytes -= r->len;
        r->va = r->size = 0;
        host_store_free(r->host);
        r->host = NULL;
    }
    return mapped;
}

/* The program frees a virtual-memory allocation (vmm_free), or unmaps some of its own
 * mappings that FlexTensor serves (vmm_free_program): under res.lock, the mover
 * settled first, so that no move maps, looks up or copies into their pieces while they
 * leave vmm.c's table (a program unmapping its pool at exit while the mover loaded the
 * next pass's unit: the mover found a piece gone and crashed, on the simulator), and
 * FT_SPILL, which picks allocations to move out under res.lock, picks none of them. 1
 * when they were such memory (now released). */
int res_vmm_free(void *p)
{
    if (p == NULL || vmm_find((uint64_t)(uintptr_t)p) == NULL)
        return 0; /* not one (a piece past the first included: vmm_free says no) */
    res_lock();
    int was = vmm_free(p, forget);
    pthread_mutex_unlock(&res.lock);
    return was;
}

int res_vmm_free_program(uint64_t va, uint64_t len)
{
    res_lock();
    int was = vmm_free_program(va, len, forget);
    pthread_mutex_unlock(&res.lock);
    return was;
}

/* --- the plan changed at run time (control.c) ---------------------------------------- */

/* ft_release: every loaded streamed unit leaves the device, pinned ones too, and the
 * physical memory kept for the next load goes (res.lock held). Each eviction waits for
 * the unit's calls first, as any does. */
void res_unload_all(void)
{
    for (int u = 0; u < res.n_units; u++)
        if (res.units[u].loaded && res.units[u].n > 0)
            evict_loaded(u);
    release_spares();
}

/* Takes unit un's regions out of res.regions (their host stores freed already): the
 * later entries move down, and by_id and the units' `first` follow them. So the array
 * never holds more than every unit's regions once, the size activate_locked gave it: a
 * unit made to stream again appends its regions anew (evict_unit). */
static void drop_unit_regions(res_unit_t *un)
{
    int first = un->first, n = un->n;
    memmove(&res.regions[first], &res.regions[first + n],
            (size_t)(res.n_regions - first - n) * sizeof *res.regions);
    res.n_regions -= n;
    for (int k = first; k < res.n_regions; k++)
        res.by_id[res.regions[k].id] = k;
    for (int i = 0; i < res.n_units; i++)
        if (res.units[i].n > 0 && res.units[i].first > first)
            res.units[i].first -= n;
    un->first = 0;
    un->n = 0;
}

/* Streamed unit u stays on the device from now on, as the plan's resident units do (a
 * new plan keeps it, or ft_resume brings it back): loaded if it is not, its copy
 * waited for, then its host stores freed (or its shared copy left) and its regions left
 * out of the guard.
 * res.lock held, the device synchronised. 0, or -1 when it cannot be loaded whole: it
 * streams on, since its host stores hold what did not load. */
int res_make_resident(int u)
{
    res_unit_t *un = &res.units[u];
    if (un->n == 0)
        return 0;
    if (!un->loaded) {
        /* It will hold no slot, so none is given up for it: load_unit makes room within
         * res.slots, and with no bound on them it makes none. */
        int slots = res.slots;
        res.slots = 1 << 30;
        load_unit(u, res.side, -1);
        res.slots = slots;
    }
    if (!un->loaded || un->partial || (un->ready_recorded && ev.sync(un->ready) != cudaSuccess))
        return -1;
    res.loaded -= !un->pinned;
    for (int k = 0; k < un->n; k++) {
        res_region_t *r = &res.regions[un->first + k];
        if (r->size != 0)
            res.held_bytes -= r->len;
        host_store_free(r->host);
        r->host = NULL;
        res.by_id[r->id] = -1;
    }
    /* FT_SHM: its copy in the shared segment is not this process's any more (the
     * segment stays the others'; host_store_free left it alone above). */
    if (un->shared) {
        un->shared = 0;
        host_store_unit_leave(u);
    }
    drop_unit_regions(un);
    un->pinned = un->demoted = un->stale_misses = un->pin_refused = 0;
    un->ref_valid = 0;
    un->changes = 0;
    return 0;
}

/* --- a region split (guard.c) -------------------------------------------------------- */

/* Splits region r at head (a granule boundary past its start): from head to its end
 * the region gets physical memory of its own, mapped for good and holding what the
 * region held there, and its unit streams the part before. The unit is unloaded first
 * (the device synchronised), so that its bytes are all in its host store. 1 when split,
 * 0 when not (nothing changed). res.lock held; the caller has checked the rest. */
static int split_at(res_region_t *r, uint64_t head)
{
    res_unit_t *un = &res.units[r->unit];
    vmm_t *v = vmm_find(r->va);
    CUdevice dev;
    if (v == NULL || managed_cu_device(&dev) != 0)
        return 0;
    REAL(cudaDeviceSynchronize)();
    if (un->loaded)
        evict_loaded(r->unit);
    if (un->loaded)
        return 0;
    CUmemGenericAllocationHandle t = 0;
    if (map_physical(dev, r->va + head, r->len - head, &t, 0, NULL, 0) != CUDA_SUCCESS)
        return 0;
    if (own_copy_sync((void *)(uintptr_t)(r->va + head), (char *)r->host + head, r->size - head,
                         cudaMemcpyHostToDevice) != cudaSuccess) {
        drv.unmap(r->va + head, r->len - head);
        drv.release(t);
        return 0;
    }
    v->tail_at[v->n_tails] = head;
    v->tail_h[v->n_tails++] = t;
    v->tail_off = head;
    un->bytes -= r->len - head;
    r->len = r->size = head;
    un->ref_valid = 0; /* the reference summed the whole region: the next unload copies back */
    /* The tail is resident now: once this call is enqueued (making a resident unit
     * stream here could take one this call reads), resident units stream until the
     * budget holds (guard.c, res_call_done). */
    res.split_hold = 1;
    return 1;
}

/* Whether region r may be split at all now: a streamed region backed by virtual
 * memory, whose split (if any) is its head's end, with room for another tail; not for
 * a unit shared through FT_SHM (its host layout is other processes' too) or pinned, one
 * this call touched already, or under a capture (the device is synchronised). */
static int splittable(const res_region_t *r, uint64_t ptr)
{
    const res_unit_t *un = &res.units[r->unit];
    const vmm_t *v = vmm_find(r->va);
    return vmm_gran() != 0 && v != NULL && !(v->n_tails > 0 && r->len != v->tail_off) && v->n_tails < TAILS &&
           !un->shared && !un->pinned && r->size != 0 && r->host != NULL && ptr >= r->va &&
           ptr < r->va + r->size && !capture_under_way() && !touched_by_this_call(r->unit);
}

/* Region r of a streamed unit is touched at ptr, alone of the call's pointers into it,
 * in a granule past every pointer discovery saw into it (ft_disc_region_off_max): a
 * caching allocator's segment holds the unit's weights and the free room after them,
 * which the program's other data took (on the H200, likely prefill's activations in a
 * 20 MiB segment holding two 8 MiB parameters). From the granule below ptr to its
 * end, the region stays on the device (split_at). Any split is safe: what stays mapped
 * is never wrong, and a touch before the split loads the unit as before. What it
 * saves: the unit loaded for such touches, copied back as changed, and at last kept on
 * the device whole (model --room-from). Done when the tail is at most half the region
 * and the region is splittable. res.lock held. 1 when split: the touch needs no load. */
int res_split_tail(res_region_t *r, uint64_t ptr)
{
    mover_settle(1); /* the spares and the unit's slot may be in a move */
    if (!splittable(r, ptr))
        return 0;
    size_t g = vmm_gran();
    const vmm_t *v = vmm_find(r->va);
    /* The head ends past every weight's start discovery saw (its bytes may run into the
     * tail, which keeps them on the device: never wrong), and the tail is at most half
     * the region. Split already: other data found below the tail moves it down (a
     * caching allocator hands out the lower blocks of the room later: on the H100,
     * tied's unit.2 split at 18 MiB was then written at 16 MiB, found changed three
     * times and kept on the device), with an allocation of its own for the part it
     * adds. */
    uint64_t head = (ptr - r->va) / g * g, size = v->size, len = r->len;
    int moved_down = v->n_tails > 0;
    if (head <= r->seen || 2 * (size - head) > size || !split_at(r, head))
        return 0;
    res.splits += !moved_down; /* a region once, however often its split moves down */
    res.split_bytes += len - head;
    char a[32], b[32], c[32], d[32];
    const char *name = ft_disc_unit(disc, (size_t)r->unit)->name;
    human_bytes(size, a, sizeof a);
    human_bytes(ptr - r->va, b, sizeof b);
    human_bytes(size - head, c, sizeof c);
    human_bytes(head, d, sizeof d);
    if (!moved_down)
        FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s: region %u (%s) holds other data at %s, past its weights: "
                      "the %s from %s on stay on the device, the unit streams the rest", name, r->id, a, b, c, d);
    else
        FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s: region %u (%s) holds other data at %s too, below its split: "
                      "the split moves down, the %s from %s on stay on the device", name, r->id, a, b, c, d);
    return 1;
}

/* Unit un was loaded STALE_MISSES_PIN times for touches judged stale, all in region r
 * at ptr or past it, past its first granule (guard.c's pin_stale_unit): rather than
 * the whole unit, the region's part from the granule below ptr stays on the device,
 * weights and all, when that is less than the unit and the budget has room for it
 * (resident units made to stream for it). On the H100, an nvjet GEMM kernel carried an
 * address 2 MiB into a 22 MiB region of one 106 MiB unit in every layer; keeping the
 * unit made another 106 MiB unit stream. Touches at that address or past it then need
 * no load. res.lock held, the call enqueued. 1 when split. */
int res_split_stale(res_region_t *r, uint64_t ptr)
{
    mover_settle(1);
    if (!splittable(r, ptr))
        return 0;
    res_unit_t *un = &res.units[r->unit];
    size_t g = vmm_gran();
    const vmm_t *v = vmm_find(r->va);
    uint64_t head = (ptr - r->va) / g * g, size = v->size, tail = r->len > head ? r->len - head : 0;
    if (head < g || tail == 0 || tail >= un->bytes)
        return 0;
    const char *name = ft_disc_unit(disc, (size_t)r->unit)->name;
    char cause[160], a[32], b[32], c[32], d[32];
    snprintf(cause, sizeof cause, "keeping %s of %s's region %u on the device", human_bytes(tail, a, sizeof a), name,
             r->id);
    if (budget_room_locked(tail, cause) != 0 || !split_at(r, head))
        return 0;
    res.stale_splits++;
    res.stale_split_bytes += tail;
    FT_WARN("residency: %s was loaded %d times for argument words %s into its region %u (%s), outside its part "
            "of the pass (stale addresses the guard must honour): the region's %s from %s on stay on the device, "
            "the unit streams the rest", name, un->stale_misses, human_bytes(ptr - r->va, a, sizeof a), r->id,
            human_bytes(size, b, sizeof b), human_bytes(size - head, c, sizeof c), human_bytes(head, d, sizeof d));
    return 1;
}

/* --- the plan's weights freed (reload.c) --------------------------------------------- */

/* The program freed the plan's weights, and discovery starts again: every streamed
 * unit comes back to the device as a resident one does (res_make_resident: its regions
 * the program still holds loaded, its host stores freed), then the engine's own memory
 * and events go, so that a new plan's switch (activate_locked) starts from nothing.
 * res.lock held, the device synchronised, no capture under way. 0; -1 when a unit
 * could not be loaded whole: nothing more is dropped, and the engine runs on with the
 * units it has (the others are resident now). The counters stay for the exit report. */
int res_drop_all(void)
{
    int failed = 0;
    for (int u = 0; u < res.n_units; u++)
        if (res.units[u].n > 0 && res_make_resident(u) != 0)
            failed++;
    if (failed > 0)
        return -1;
    release_spares();
    for (int u = 0; u < res.n_units; u++) {
        res_unit_t *un = &res.units[u];
        for (int k = 0; k < USE_STREAMS; k++)
            own_event_destroy(un->used[k]);
        own_event_destroy(un->ready);
        own_event_destroy(un->ck_done);
    }
    for (int i = 0; i < STEP_RING; i++) {
        own_event_destroy(res.pass_ev[i]);
        res.pass_ev[i] = NULL;
    }
    free(res.regions);
    free(res.spare);
    free(res.units);
    free(res.by_id);
    free(res.follow);
    res.follow = NULL;
    res.regions = NULL;
    res.spare = NULL;
    res.units = NULL;
    res.by_id = NULL;
    res.n_regions = res.n_units = res.slots = res.loaded = 0;
    res.n_spare = res.cap_spare = 0;
    res.n_ids = 0;
    res.held_bytes = 0;
    /* The measured step is the new plan's: its passes, its ring. */
    res.passes = res.harvested = 0;
    res.n_steps = 0;
    /* FT_SHM: the segment held the first model; the next plan's switch attaches the
     * segment of the model it finds (its fingerprint is that model's). */
    if (cfgp->shm_enabled)
        host_store_detach();
    return 0;
}

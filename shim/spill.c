/* spill.c - FT_SPILL, the budget before the plan.
 *
 * With FT_SPILL and a budget, the budget holds from the first allocation. A
 * virtual-memory allocation that the budget cannot hold starts in host memory: its
 * addresses are reserved, nothing is mapped. A launch, copy or set that touches it
 * faults it in first: it is mapped and its bytes copied in on the caller's stream,
 * after the least recently touched mapped allocations are copied out to host memory
 * and unmapped, until the budget holds it. While anything is spilled, launches,
 * copies and sets hold res.lock from this guard until they are enqueued, as the
 * residency engine's do. At the switch to the plan, spilled allocations of streamed
 * units stay in host memory (their host copy becomes the unit's), the others are
 * faulted in.
 *
 * Owns: the spill counters and `moves` (under res.lock), spill_limit, and whether FT_SPILL
 * is engaged: it decides, and engine.c keeps the answer in the phase word
 * (ENGINE_SPILL, engine_spill), read by every call's entry. It reads the phase (FT_SPILL
 * holds the budget until the plan streams: spill_wanted). It reaches the allocations
 * through vmm.c's table (vmm_each) and changes their spilled state under res.lock;
 * vmm_alloc asks it, through spill_placement, whether a new one starts in host memory. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include <unistd.h>

/* Device time of FT_SPILL's moves in and out (ns): their bytes at the measured copy
 * bandwidth, for the exit report. Profiling keeps them in the units' times: on the
 * H200 they made the passes of a 13.5 GB model 650 ms and its plan pessimistic
 * (docs/residency.md). */
uint64_t spill_ns;

/* Bytes of allocations now in host memory (res.lock). */
uint64_t spill_bytes;

static uint64_t spill_restore_all(const char *why, int pieces);
static void drop_hosts(void);

/* Whether FT_SPILL may hold an allocation of len bytes in host memory: at most a
 * quarter of the host's physical memory (FT_TEST_HOST_MEM, bytes, stands in for it in
 * tests). Pinned, a larger one would leave the host too little. */
static int host_can_hold(uint64_t len)
{
    static uint64_t host; /* atomic: any allocating thread may read it first */
    uint64_t h = __atomic_load_n(&host, __ATOMIC_RELAXED);
    if (h == 0) {
        const char *t = getenv("FT_TEST_HOST_MEM");
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        h = t != NULL && *t ? strtoull(t, NULL, 10)
                            : pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
        __atomic_store_n(&host, h, __ATOMIC_RELAXED);
    }
    return len <= h / 4;
}

/* FT_SPILL's allocations back on the device when FlexTensor will stream nothing (`why`
 * goes in the warning about what the device cannot take back). 1 when some stay in
 * host memory: they are faulted in on use, so the engine stays on for them. */
static int bring_back(const char *why, int pieces)
{
    if (!state_spill(engine_state()) && __atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED) == 0)
        return 0;
    if (!engine_held)
        res_lock();
    int keep = spill_restore_all(why, pieces) > 0;
    drop_hosts();
    if (!keep)
        engine_spill(0);
    if (!engine_held)
        pthread_mutex_unlock(&res.lock);
    return keep;
}

int spill_bring_back(const char *why)
{
    return bring_back(why, 1);
}

static uint64_t spill_clock;
uint64_t spill_faults, spill_evictions;
uint64_t spill_limit;  /* the budget, once known; atomic: any allocating thread may learn it */

/* FT_SPILL holds the budget: before the plan (none made yet, or none to come), and,
 * once the residency engine is off, while some of its allocations stay in host memory
 * (the device could not take them back). */
static int stopped; /* spill_stop: FT_SPILL holds nothing more in this run (atomic) */

static int spill_wanted(void)
{
    unsigned s = engine_state();
    return cfgp->spill && !__atomic_load_n(&stopped, __ATOMIC_ACQUIRE) && state_phase(s) != PHASE_PLANNED &&
           state_phase(s) != PHASE_STREAMING && !state_quiet(s);
}

/* FT_SPILL stops for the rest of the run: what it holds in host memory unmapped comes
 * back (`why` in its warning) and no allocation starts in host memory or moves there
 * any more; the budget gives way until the plan. A stream capture needs this
 * (capture.c): captured calls cannot reach an address with nothing mapped, and its
 * allocations come while it is under way. Pieces in host-located memory stay there:
 * they are mapped, and the device reaches them over the link, in a graph too; the
 * switch or a stand-down brings back what stays. (Brought back here, XLA's pool, whose
 * first command buffer comes before any plan, would put the device 3 GiB past a 1 GiB
 * budget until the switch.) */
int spill_stop(const char *why)
{
    __atomic_store_n(&stopped, 1, __ATOMIC_RELEASE);
    return bring_back(why, 0);
}

uint64_t spill_budget(void)
{
    uint64_t limit = __atomic_load_n(&spill_limit, __ATOMIC_RELAXED);
    if (limit == 0) {
        size_t free_b = 0, total_b = 0;
        if (REAL(cudaMemGetInfo) != NULL && REAL(cudaMemGetInfo)(&free_b, &total_b) == cudaSuccess) {
            limit = configured_budget(total_b);
            __atomic_store_n(&spill_limit, limit, __ATOMIC_RELAXED);
        }
    }
    return limit;
}

/* Device bytes held through the shim now. */
uint64_t spill_held(void)
{
    uint64_t tracked = device_bytes() + admitting + __atomic_load_n(&bw_device_bytes, __ATOMIC_RELAXED) +
                       __atomic_load_n(&releasing, __ATOMIC_RELAXED);
    return tracked > spill_bytes ? tracked - spill_bytes : 0;
}

static int map_fresh(uint64_t va, size_t len, CUmemGenericAllocationHandle *h)
{
    CUdevice dev;
    if (managed_cu_device(&dev) != 0)
        return -1;
    return map_physical(dev, va, len, h, 0, NULL, 0) == CUDA_SUCCESS ? 0 : -1;
}

/* The device time of a copy of `bytes` at `gbps` (bytes per ns; 25 when unmeasured). */
static uint64_t copy_ns(uint64_t bytes, double gbps)
{
    return (uint64_t)((double)bytes / (gbps > 0 ? gbps : 25.0));
}

/* The moves of one guarded call or allocation, charged together (res.lock held) as
 * the gap they leave in the stream's timeline: an event before them and one after,
 * the time between. The stream waits for them (spill_out synchronises the device, the
 * copies are synchronous), and not only for their copies: pinning a host store,
 * mapping, setting access, releasing take host time too. Charged at the copies' time
 * at the measured bandwidth alone, the 13.5 GB plan saw a 94 ms all-resident step
 * against a real 17.9 (H200, seventh session); the simulator shows it with
 * FTSIM_VMM_ACCESS_NS (spill.sh). Outside profiling, nothing is recorded. */
static struct {
    int armed; /* 1: `before` recorded; -1: charge `copies`; 0: not profiling */
    cudaEvent_t before, after;
    cudaStream_t stream;
    uint64_t copies; /* their time at the measured bandwidth, when the events fail */
} moves;

static void moves_begin(cudaStream_t stream)
{
    moves.armed = 0;
    moves.copies = 0;
    if (!profile_charging())
        return;
    if (moves.before == NULL && (ev.create(&moves.before, cudaEventDefault) != cudaSuccess ||
                                 ev.create(&moves.after, cudaEventDefault) != cudaSuccess)) {
        moves.before = NULL;
        moves.armed = -1; /* the copies' time, then */
        return;
    }
    moves.stream = stream;
    moves.armed = ev.record(moves.before, stream) == cudaSuccess ? 1 : -1;
}

static void moves_end(int moved)
{
    if (moves.armed == 0 || !moved)
        return;
    float ms = 0;
    if (moves.armed == 1 && ev.record(moves.after, moves.stream) == cudaSuccess &&
        ev.sync(moves.after) == cudaSuccess && ev.elapsed(&ms, moves.before, moves.after) == cudaSuccess)
        profile_charge_move((uint64_t)((double)ms * 1e6));
    else
        profile_charge_move(moves.copies);
}

/* Copies v out to host memory and unmaps it (res.lock held). 0 on success. */
static int spill_out(vmm_t *v)
{
    if (v->host == NULL && (v->host = host_store_alloc(v->size)) == NULL)
        return -1;
    sync_reaching_devices();
    /* Discovery hashes its candidates' content at every snapshot: v's is summed now,
     * while its bytes are on the device (checksum.c). */
    v->sum_ok = 0;
    if (engine_phase() == PHASE_DISCOVERY) {
        int prev = managed_device_enter();
        spill_sum(v);
        managed_device_leave(prev);
    }
    if (own_copy_sync(v->host, (void *)(uintptr_t)v->va, v->size, cudaMemcpyDeviceToHost) != cudaSuccess)
        return -1;
    if (drv.unmap(v->va, v->size) != CUDA_SUCCESS)
        return -1;
    vmm_left_host(v); /* room moved to host-located memory comes back as device memory */
    drv.release(v->handle);
    v->spilled = 1;
    spill_bytes += v->size;
    spill_evictions++;
    __atomic_fetch_add(&spill_ns, copy_ns(v->size, bw.d2h), __ATOMIC_RELAXED);
    moves.copies += copy_ns(v->size, bw.d2h);
    return 0;
}

/* The latest touch of v's allocation: its pieces' latest (v is no piece, or the first;
 * in a vmm_each callback). */
static uint64_t group_stamp(const vmm_t *v)
{
    uint64_t s = v->stamp;
    for (uint32_t k = 1; v->piece && k < v->pieces; k++) {
        vmm_t *x = vmm_find_held(v->va + (uint64_t)k * v->size);
        if (x != NULL && x->stamp > s)
            s = x->stamp;
    }
    return s;
}

/* Piece k of the allocation whose first piece is `first`. */
static vmm_t *piece_k(vmm_t *first, uint32_t k)
{
    return k == 0 ? first : vmm_find(first->va + (uint64_t)k * first->size);
}

/* spill_out of every piece of v's allocation (v the first, or no piece): a kernel given
 * a tensor's start reads on past its piece, so the pieces move together. 0 when all
 * went (a piece left on the device comes back with the others: spill_touch). */
static int spill_out_all(vmm_t *v)
{
    if (!v->piece)
        return spill_out(v);
    int rc = 0;
    for (uint32_t k = 0; k < v->pieces && rc == 0; k++) {
        vmm_t *x = piece_k(v, k);
        if (x != NULL && !x->spilled)
            rc = spill_out(x);
    }
    return rc;
}

/* The allocation that leaves the device, as ft_spill_prefer chooses, for the call
 * touching at `stamp`. */
struct lru_pick {
    vmm_t *lru;
    uint64_t stamp;
    uint64_t budget;            /* spill_budget() */
    uint64_t movable;           /* the bytes of every allocation that could leave */
};

/* Whether every piece of v's allocation (v the first) is mapped alone, as vmm.c made
 * it: once the residency engine has mapped them from allocations that back several
 * (phys.c), spill_out, which unmaps and releases one piece at a time, cannot (in a
 * vmm_each callback). */
static int pieces_apart(const vmm_t *v)
{
    for (uint32_t k = 0; v->piece && k < v->pieces; k++) {
        const vmm_t *x = k == 0 ? v : vmm_find_held(v->va + (uint64_t)k * v->size);
        if (x != NULL && (x->map_n != 1 || phys_size(x->handle) != 0))
            return 0;
    }
    return 1;
}

/* Whether x's allocation may leave the device at all (x its first piece, or no piece;
 * in a vmm_each callback). */
static int may_leave(const vmm_t *x, uint64_t budget)
{
    uint64_t bytes = vmm_bytes(x);
    /* One too large for host memory stays (place_over); a split one (res_split_tail) is
     * mapped in two parts, which spill_out does not know. An allocation served in pieces
     * moves whole (spill_out_all); one larger than the budget stays: its next touch
     * would bring it back whole, over the budget, and move everything else out for it
     * (on the H100, transformers' 2.84 GiB allocation of every weight at a 970 MiB
     * budget moved 470846 allocations in and out before the plan, and the program ran
     * out of time in profiling). */
    if (!host_can_hold(bytes) || x->tail_off != 0 || !pieces_apart(x))
        return 0;
    if (budget != 0 && bytes > budget) {
        char a[32], b[32];
        FT_LOG_CAPPED(FT_LOG_INFO, 1, "FT_SPILL: an allocation of %s, larger than the budget (%s), stays on the device until "
                      "the plan (moved out, its next touch would bring it back whole)",
                      human_bytes(bytes, a, sizeof a), human_bytes(budget, b, sizeof b));
        return 0;
    }
    return 1;
}

static void lru_pick(vmm_t *x, void *ctx)
{
    struct lru_pick *p = ctx;
    if (x->piece && x->pieces == 0)
        return; /* its allocation is judged at its first piece */
    if (!may_leave(x, p->budget))
        return;
    ft_spill_alloc_t a = { group_stamp(x), x->spilled }, best;
    if (!a.spilled && a.stamp != p->stamp)
        p->movable += vmm_bytes(x);
    if (p->lru != NULL)
        best = (ft_spill_alloc_t){ group_stamp(p->lru), p->lru->spilled };
    if (ft_spill_prefer(&a, p->lru != NULL ? &best : NULL, p->stamp))
        p->lru = x;
}

/* Before the plan, the process past the budget (res.lock): FT_SPILL had nothing more to
 * move out for an allocation or a fault, which go ahead all the same. Read at exit by
 * the verdict (spill_over). */
static ft_budget_over_t over;

const ft_budget_over_t *spill_over(void)
{
    return &over;
}

/* Room under the budget for `size` more bytes (res.lock held): the least recently
 * touched allocations are copied out, never one touched at `stamp`. -1, said once,
 * when nothing more can leave the device: the caller goes on past the budget. */
static int spill_make_room(uint64_t size, uint64_t stamp)
{
    uint64_t budget = spill_budget();
    uint64_t held;
    for (int first = 1; !ft_budget_fits(held = spill_held(), size, budget); first = 0) {
        struct lru_pick p = { NULL, stamp, budget, 0 };
        vmm_each(lru_pick, &p);
        vmm_t *lru = p.lru;
        /* When all that could leave would still not make room, nothing leaves: the
         * call goes past the budget either way, and what left would only come back at
         * its next touch, moving others out in turn. */
        int futile = first && !ft_budget_fits(held - (p.movable < held ? p.movable : held), size, budget);
        if (lru == NULL || futile || spill_out_all(lru) != 0) {
            /* Pieces of an allocation already partly in host-located memory can follow
             * it there (it stays valid where it is: no fault brings it back). */
            uint64_t need = held + size - budget;
            if (vmm_pieces_to_host(need) >= need)
                continue;
            ft_budget_over(&over, held, size, budget, 0);
            FT_WARN_CAPPED(1, "FT_SPILL: nothing more can leave the device; the budget is exceeded "
                           "while a call needs more than it holds (the exit report's verdict gives "
                           "the most it went past)");
            return -1;
        }
    }
    return 0;
}

/* Maps v back and copies its bytes in, first making room under the budget (never
 * moving out an allocation touched at `stamp`, the call being guarded). Over the
 * budget when nothing else can go. */
static void spill_in(vmm_t *v, cudaStream_t stream, uint64_t stamp)
{
    spill_make_room(v->size, stamp);
    CUmemGenericAllocationHandle h;
    int rc;
    /* The device refused the memory (another process holds it, or the budget is above
     * what the device has): the least recently touched allocations leave, as for the
     * budget, until it maps. */
    while ((rc = map_fresh(v->va, v->size, &h)) != 0) {
        struct lru_pick p = { NULL, stamp, 0, 0 };
        vmm_each(lru_pick, &p);
        if (p.lru == NULL || spill_out_all(p.lru) != 0)
            break;
        spill_refused++;
    }
    if (rc != 0) {
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "FT_SPILL: the device has no physical memory to map %zu bytes back, "
                      "and nothing more can leave it; the call will fault", v->size);
        return;
    }
    v->handle = h;
    v->spilled = 0;
    spill_bytes -= v->size;
    spill_faults++;
    /* Synchronous: other threads' streams may touch it as soon as it is mapped. A copy
     * that fails leaves the device's bytes other than the program's: said, and its
     * error left for the program's next check to raise rather than taken back. */
    cudaError_t err = own_copy_sync((void *)(uintptr_t)v->va, v->host, v->size, cudaMemcpyHostToDevice);
    if (err != cudaSuccess)
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "FT_SPILL: copying an allocation of %zu bytes back to the device failed "
                      "(cudaError %d): its bytes there are not the program's; the error is left for the "
                      "program to see", v->size, (int)err);
    __atomic_fetch_add(&spill_ns, copy_ns(v->size, bw.h2d), __ATOMIC_RELAXED);
    moves.copies += copy_ns(v->size, bw.h2d);
}

/* Allocations moved out because the device refused the memory of one moving in. */
uint64_t spill_refused;

/* Copies into allocations in host memory served there (res.lock). */
uint64_t spill_host_copies, spill_host_copied;
/* Allocations placed in host memory because the saved profile's plan streams them. */
uint64_t spill_hinted;

/* Before the plan, a one-dimensional copy from host memory into an allocation FT_SPILL
 * holds in host memory lands in its host copy, after the stream's earlier work, instead
 * of faulting the allocation in (which would move the least recently used ones out to
 * make room, only for the next weight copied in to move them again: loading a model
 * larger than the budget with `.to("cuda")` made each copy a move in and a move out).
 * Its device checksum, taken as it left the device, no longer holds. 1 when served
 * (res.lock held by the caller, engine_enter). */
int spill_host_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s)
{
    if (kind != cudaMemcpyHostToDevice || n == 0 || src == NULL)
        return 0;
    unsigned st = engine_state();
    if (!state_spill(st) || state_phase(st) == PHASE_STREAMING)
        return 0;
    uint64_t d = (uint64_t)(uintptr_t)dst;
    vmm_t *v = spilled_vmm(d);
    if (v == NULL || v->host == NULL || d < v->va || d + n > v->va + v->asked)
        return 0;
    if (REAL(cudaStreamSynchronize)(s) != cudaSuccess)
        return 0;
    host_store_copy((char *)v->host + (d - v->va), src, n);
    v->sum_ok = 0;
    spill_host_copies++;
    spill_host_copied += n;
    return 1;
}

/* Stamps every allocation (spill_touch's `all`). */
static void stamp_one(vmm_t *x, void *ctx)
{
    x->stamp = *(const uint64_t *)ctx;
}

/* The first spilled allocation, for spill_touch's `all` (vmm_each holds vmm_lock, which
 * spill_in takes again: one is found, then faulted in, and so on). */
static void first_spilled(vmm_t *x, void *ctx)
{
    vmm_t **found = ctx;
    if (*found == NULL && x->spilled)
        *found = x;
}

/* The guard before the plan (res.lock held): the allocations behind `ptrs` are
 * stamped, and the spilled ones faulted in. All are stamped before any is faulted in,
 * so that making room for one never moves out another this call touches; the list is
 * walked twice rather than copied, as a launch can reach any number of allocations (a
 * cat of a hundred inputs). `all`: the call may touch more than `ptrs` (its scan set
 * could not grow, out of memory): every allocation is stamped and faulted in, over the
 * budget if it must be, never left for the kernel to fault on. */
/* v's allocation, all its pieces when it has some, touched at stamp: 1 when some of it
 * is in host memory. */
static int stamp_whole(vmm_t *v, uint64_t stamp)
{
    v->stamp = stamp;
    if (!v->piece)
        return v->spilled;
    vmm_t *first = vmm_piece_first(v);
    int spilled = 0;
    for (uint32_t k = 0; first != NULL && k < first->pieces; k++) {
        vmm_t *x = piece_k(first, k);
        if (x != NULL) {
            x->stamp = stamp;
            spilled |= x->spilled;
        }
    }
    return spilled;
}

void spill_touch(const uint64_t *ptrs, size_t n, int all, cudaStream_t stream)
{
    uint64_t stamp = ++spill_clock;
    int moving = 0;
    if (all) {
        FT_WARN_CAPPED(1, "FT_SPILL: a launch may reach allocations that were not recorded (arguments whose "
                      "layout the driver does not give, or out of memory): every allocation in host memory is "
                      "brought in for it");
        vmm_each(stamp_one, &stamp);
        for (vmm_t *v = NULL;; v = NULL) {
            vmm_each(first_spilled, &v);
            if (v == NULL)
                break;
            if (!moving++)
                moves_begin(stream);
            spill_in(v, stream, stamp);
            if (v->spilled) /* it could not be mapped back (said): the others still come */
                break;
        }
    }
    int spilled = 0;
    for (size_t i = 0; i < n; i++) {
        ft_region_t r;
        vmm_t *v;
        if (ptrs[i] != 0 && ft_regions_find(regions, ptrs[i], &r) && (v = vmm_find(r.base)) != NULL)
            spilled |= stamp_whole(v, stamp);
    }
    /* Most launches touch nothing in host memory: one walk. An allocation served in
     * pieces comes in whole, as it went (spill_out_all). */
    for (size_t i = 0; spilled && i < n; i++) {
        ft_region_t r;
        vmm_t *v;
        if (ptrs[i] == 0 || !ft_regions_find(regions, ptrs[i], &r) || (v = vmm_piece_first(vmm_find(r.base))) == NULL)
            continue;
        for (uint32_t k = 0; k < (v->piece ? v->pieces : 1); k++) {
            vmm_t *x = piece_k(v, k);
            if (x == NULL || !x->spilled)
                continue;
            if (!moving++)
                moves_begin(stream);
            spill_in(x, stream, stamp);
        }
    }
    if (moving)
        moves_end(1);
}

/* FT_SPILL holds allocations in host memory from now on (res.lock held): every launch,
 * copy and set is guarded, so that none can touch an allocation while it moves, and
 * those already past an unguarded entry finish first. */
static void spill_engage_locked(void)
{
    engine_spill(1);
}

/* Before the plan, an allocation the shim does not serve from virtual memory (the
 * driver's cuMemAlloc, as cuBLAS makes its workspace; cudaMallocAsync; one below
 * FT_VMM_MIN_SIZE) cannot start in host memory: room is made for it under FT_SPILL's
 * budget by moving others out. The H200 pair went 42 MiB over the budget in its first
 * forward without this. When nothing more can move out, it is served past the budget
 * all the same: the device can serve it, and refusing it would end a program that runs
 * without FlexTensor. Its bytes are counted in `admitting` until admit_done; returns
 * them (0: nothing to hold). */
uint64_t spill_admit(uint64_t size)
{
    if (!spill_wanted() || spill_budget() == 0)
        return 0;
    res_lock();
    if (!spill_wanted()) {
        pthread_mutex_unlock(&res.lock);
        return 0;
    }
    if (!state_spill(engine_state()) && !ft_budget_fits(spill_held(), size, spill_budget())) {
        char a[32];
        FT_INFO("FT_SPILL: an allocation the budget (%s) cannot hold besides the rest: the least "
                "recently used move to host memory", human_bytes(spill_budget(), a, sizeof a));
        spill_engage_locked();
    }
    uint64_t out0 = spill_evictions;
    moves_begin(NULL); /* the legacy stream: it waits for the blocking streams' work */
    spill_make_room(size, UINT64_MAX); /* no call's allocations to keep */
    moves_end(spill_evictions != out0);
    admitting += size;
    pthread_mutex_unlock(&res.lock);
    return size;
}

/* addr's allocation while it is spilled (FT_SPILL); else NULL. */
vmm_t *spilled_vmm(uint64_t addr)
{
    if (!state_spill(engine_state()))
        return NULL;
    ft_region_t r;
    vmm_t *v;
    if (!ft_regions_find(regions, addr, &r) || (v = vmm_find(r.base)) == NULL || !v->spilled)
        return NULL;
    return v;
}

/* The allocation that begins at base while it is spilled; else NULL. Discovery's
 * content hashes ask this way (hash_regions's ctx), by vmm.c's table alone: a region
 * another thread frees leaves the region table first, then waits for discovery's lock
 * (untrack) before vmm_free, so while a hash runs its allocation is still in vmm.c's
 * table, its bytes where they were. Asked through the region table, as spilled_vmm
 * does, such a region was found nowhere, and the device checksum of an allocation in
 * host memory faulted (spill.sh's race, in about one run of several hundred). */
vmm_t *spilled_at(uint64_t base)
{
    if (!state_spill(engine_state()))
        return NULL;
    vmm_t *v = vmm_find(base);
    return v != NULL && v->spilled ? v : NULL;
}

/* Where addr's bytes are while its allocation is spilled; else NULL. */
static const void *spilled_host(uint64_t addr)
{
    vmm_t *v = spilled_vmm(addr);
    return v != NULL ? (const char *)v->host + (addr - v->va) : NULL;
}

int spilled_read(void *dst, uint64_t addr, size_t len)
{
    const void *h = spilled_host(addr);
    if (h != NULL)
        memcpy(dst, h, len);
    return h != NULL;
}

/* Brings x back when it is spilled: its bytes added to bytes[0], or to bytes[1] when
 * the device has no room. */
static void restore_one(vmm_t *x, void *ctx)
{
    uint64_t *bytes = ctx;
    CUmemGenericAllocationHandle h;
    if (!x->spilled)
        return;
    if (map_fresh(x->va, x->size, &h) != 0) {
        bytes[1] += x->size;
        return;
    }
    x->handle = h;
    x->spilled = 0;
    spill_bytes -= x->size;
    bytes[0] += x->size;
    own_copy_sync((void *)(uintptr_t)x->va, x->host, x->size, cudaMemcpyHostToDevice);
}

/* Every spilled allocation back on the device (res.lock held): the plan will not
 * stream, so the budget cannot hold. */
static int all_used(uint64_t va)
{
    (void)va;
    return 1;
}

static uint64_t spill_restore_all(const char *why, int pieces)
{
    /* Planning nothing or standing down (`why`, `pieces`): the pieces in host-located
     * memory come back too, room and all (at the switch, activate_locked brings back
     * what stays). */
    uint64_t n = 0;
    int hosts = why != NULL && pieces;
    uint64_t hosted = hosts && __atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED) != 0 && !capture_under_way()
                    ? vmm_used_to_device(all_used, 0, &n) : 0;
    uint64_t bytes[2] = { 0, 0 };
    if (state_spill(engine_state()))
        vmm_each(restore_one, bytes);
    uint64_t stay = why != NULL && !pieces ? __atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED) : 0;
    uint64_t back = bytes[0] + hosted,
             left = bytes[1] + (hosts ? __atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED) : 0);
    if (stay > 0)
        FT_INFO("FT_SPILL: %s: %.1f MiB in host-located memory stay there until the plan (the device reads "
                "them over the link)", why, (double)stay / 1048576.0);
    if (back > 0 && why != NULL)
        FT_WARN("FT_SPILL: %s: %.1f MiB brought back to the device, over the budget",
                why, (double)back / 1048576.0);
    else if (back > 0)
        FT_INFO("FT_SPILL: %.1f MiB that the plan keeps resident brought back to the device",
                (double)back / 1048576.0);
    if (left > 0)
        FT_LOG(why != NULL ? FT_LOG_WARN : FT_LOG_ERROR,
               "FT_SPILL: the device has no room for %.1f MiB more%s", (double)left / 1048576.0,
               why != NULL ? ": it stays in host memory and is brought in on use, one "
                             "allocation at a time (slow), or read there over the link"
                           : "; kernels touching it will fault");
    return left;
}

/* The host copy of an allocation back on the device, which FT_SPILL kept for its next
 * move out: released (its bytes added to *ctx). */
static void drop_host(vmm_t *x, void *ctx)
{
    if (x->spilled || x->host == NULL)
        return;
    host_store_free(x->host);
    x->host = NULL;
    *(uint64_t *)ctx += x->size;
}

/* FT_SPILL moves nothing more (res.lock held): the host copies it kept of allocations
 * on the device are released. On the H200, three processes of a 13 GB model held 17 GB
 * of pinned memory each for 9 GB of streamed units without this. */
static void drop_hosts(void)
{
    uint64_t bytes = 0;
    vmm_each(drop_host, &bytes);
    if (bytes > 0)
        FT_INFO("FT_SPILL: %.1f MiB of host copies of allocations back on the device released",
                (double)bytes / 1048576.0);
}

/* The switch (res.lock held): what the plan keeps on the device comes back to it, and
 * FT_SPILL holds nothing from now on (the residency engine keeps the budget; what the
 * device cannot take back is said, and faults). */
void spill_end_locked(void)
{
    if (!state_spill(engine_state()))
        return;
    spill_restore_all(NULL, 0);
    drop_hosts();
    engine_spill(0);
}

/* --- what vmm_alloc asks of FT_SPILL (spill_placement, passed down by the hook) ------- */

/* len bytes are about to be mapped: 1 when the budget cannot hold them besides the
 * rest, and they start in host memory instead; else they count as held from this
 * decision on (admitting, *admitted). */
static int place_over(size_t len, uint64_t *admitted)
{
    if (!spill_wanted() || spill_budget() == 0)
        return 0;
    /* Too large for host memory (XLA preallocates 75% of the device as one allocation,
     * which pinned would starve the host): served on the device, past the budget if it
     * must, as spill_admit serves what virtual memory does not (the others moved out
     * first, said once, the excess in the verdict). */
    if (!host_can_hold(len)) {
        *admitted = spill_admit(len);
        return 0;
    }
    /* A weight the saved profile's plan streams starts in host memory at once. */
    int streams = savedprof_streams();
    res_lock();
    int over = streams || !ft_budget_fits(spill_held(), len, spill_budget());
    spill_hinted += streams;
    if (!over) {
        admitting += len;
        *admitted = len;
    }
    pthread_mutex_unlock(&res.lock);
    return over;
}

/* v is in vmm.c's table, its granule padding counted: mapped, what was admitted comes
 * down to its asked-for size (the padding counts the rest now); in host memory, its
 * bytes count as spilled, and FT_SPILL engages. Where v started is in_host, not
 * v->spilled: another thread's spill_make_room may be moving v out already (under
 * res.lock, which it holds), and then counts it itself. */
static void place_done(vmm_t *v, int in_host, uint64_t *admitted)
{
    if (!in_host && *admitted == 0)
        return;
    res_lock();
    if (!in_host) {
        admitting -= v->size - v->asked;
        *admitted = v->asked;
        pthread_mutex_unlock(&res.lock);
        return;
    }
    spill_bytes += v->size;
    /* Until the caller tracks the region, its size is counted here: the pad and the
     * spilled bytes are counted already, so held would be `size` short meanwhile. */
    admitting += v->asked;
    *admitted = v->asked;
    if (!state_spill(engine_state())) {
        char a[32];
        FT_INFO("FT_SPILL: allocations past the budget (%s) start in host memory",
                human_bytes(spill_budget(), a, sizeof a));
        spill_engage_locked();
    }
    pthread_mutex_unlock(&res.lock);
}

/* By how much len bytes more would take what is held past the budget (FT_SPILL on),
 * else 0. */
static uint64_t place_excess(size_t len)
{
    if (!spill_wanted() || spill_budget() == 0)
        return 0;
    res_lock();
    uint64_t held = spill_held() + len, budget = spill_budget();
    /* Pinned host memory too: never more than host_can_hold allows (then served on the
     * device past the budget, as an allocation too large to spill is). */
    uint64_t excess = held > budget && host_can_hold(held - budget) ? held - budget : 0;
    /* Memory in host-located pieces stays valid, but FlexTensor moves it (more of it
     * there when room is needed, back to the device at the switch or a stand-down):
     * from now on calls are guarded, so that no launch runs on a piece as it moves. */
    if (excess > 0 && !state_spill(engine_state())) {
        char a[32];
        FT_INFO("FT_SPILL: an allocation the budget (%s) cannot hold besides the rest: what it cannot hold "
                "goes to host memory", human_bytes(budget, a, sizeof a));
        spill_engage_locked();
    }
    pthread_mutex_unlock(&res.lock);
    return excess;
}

static void place_admit_host(uint64_t bytes)
{
    res_lock();
    admitting += bytes;
    pthread_mutex_unlock(&res.lock);
}

const vmm_place_t spill_placement = { place_over, place_done, spill_admit, place_excess, place_admit_host };

/* budget.c - the memory budget after the plan: what the process holds through the
 * shim (usage_locked), with every slot counted full; the allocation guard
 * (budget_admit, admit_done) that makes resident units stream when an allocation would
 * not fit (demote_for), and serves it past the budget, loudly, when even that cannot
 * make room; and the budget as cudaMemGetInfo reports it. Whether an allocation fits,
 * which unit is made to stream, what is kept of an allocation past the budget and what
 * cudaMemGetInfo shows are core/budget.c's decisions; this file counts their inputs
 * and carries them out.
 *
 * Owns: admitting and `over` (under res.lock), releasing (atomic: the frees under way,
 * budget_free_begin and budget_free_end), `past` (thread-local). Everything here runs
 * under res.lock unless it takes it itself (budget_admit, admit_done, usage_now). It
 * reads the phase (the budget after the plan holds from PHASE_STREAMING on), touches
 * res and plan.out.resident under res.lock, and calls residency.c (evict_unit),
 * spill.c (spill_admit) and vmm.c. */
#define _GNU_SOURCE
#include "shim/engine.h"

/* Physical memory of unloaded units kept for the next load to reuse (res.lock held). */
static uint64_t spare_bytes_locked(void)
{
    uint64_t sum = 0;
    for (int i = 0; i < res.n_spare; i++)
        sum += res.spare[i].len;
    return sum;
}

/* Without the spares: they are a slot's memory, counted full by committed_locked. */
static uint64_t held_locked(void)
{
    ft_gpu_memory_usage_t u;
    usage_locked(&u);
    return u.total_bytes - spare_bytes_locked();
}

/* Bytes admitted whose allocation is not tracked yet (res.lock): by budget_admit after
 * the plan, by vmm_alloc under FT_SPILL before it. Two threads admitted one after the
 * other would each see room for itself alone; and an allocation FT_SPILL places in host
 * memory has its spilled bytes counted before its region, so held would be short. With
 * four threads allocating at once, the simulator's peak went 2-4 MiB over a 30 MiB
 * budget (spill.sh, --race-alloc). */
uint64_t admitting;
/* Bytes of frees under way (budget_free_begin, budget_free_end): their regions have left
 * the table, but cudaFree (which synchronises the device first) has not given their
 * memory back yet. */
uint64_t releasing;

/* The bytes of un's regions the application still holds (a freed one has size 0). */
static uint64_t unit_len(const res_unit_t *un)
{
    uint64_t len = 0;
    for (int k = 0; k < un->n; k++)
        len += res.regions[un->first + k].size != 0 ? res.regions[un->first + k].len : 0;
    return len;
}

/* The units as core/budget.h's decisions see them (res.lock held), in an array kept
 * for the next allocation; NULL when it cannot be had. */
static const ft_budget_unit_t *budget_view_locked(void)
{
    static ft_budget_unit_t *view;
    static int cap;
    ft_budget_unit_t *grown = unit_array(view, &cap, sizeof *view);
    if (grown == NULL) {
        FT_LOG_CAPPED(FT_LOG_ERROR, 3, "residency: out of memory: an allocation is served "
                      "without checking the budget");
        return NULL;
    }
    view = grown;
    for (int i = 0; i < res.n_units; i++) {
        const res_unit_t *un = &res.units[i];
        const ft_disc_unit_t *d = ft_disc_unit(disc, (size_t)i);
        uint64_t len = un->pinned ? 0 : unit_len(un);
        view[i] = (ft_budget_unit_t){ len, d->bytes,
                                      plan.out.resident[i] && un->n == 0 && !un->unstreamable && d->offload };
    }
    return view;
}

/* Device bytes the process holds through the shim with every slot full (res.lock
 * held), by ft_budget_committed. */
static uint64_t committed_locked(const ft_budget_unit_t *view)
{
    uint64_t held = held_locked() + admitting + __atomic_load_n(&releasing, __ATOMIC_RELAXED);
    /* A pinned unit, once loaded, stays: its bytes are held for good, not a slot's. */
    uint64_t pinned = 0;
    for (int i = 0; i < res.n_units; i++)
        if (res.units[i].pinned && res.units[i].loaded)
            pinned += unit_len(&res.units[i]);
    return ft_budget_committed(held, res.held_bytes - pinned, ft_budget_slots_full(view, res.n_units, res.slots, -1));
}

/* After the plan, an allocation of `size` would take the process past the budget (the
 * plan made room for the non-weight memory profiling saw; a prefill after decode steps
 * needs more): resident units are made to stream until it fits (res.lock held), one at
 * a time, as ft_budget_demote_pick chooses. 0 when it fits; -1 when nothing more can
 * leave the device, or nothing that leaves makes room, with what the process holds
 * with every slot full in *committed and the weights of it (resident, and the full
 * slots) in *weights; -2 when the units' view cannot be had (out of memory). */
static int demote_for(uint64_t size, const char *cause, uint64_t *committed, uint64_t *weights)
{
    uint64_t budget = plan.in.budget_bytes;
    int synced = 0;
    const ft_budget_unit_t *view;
    while ((view = budget_view_locked()) != NULL &&
           !ft_budget_fits(*committed = committed_locked(view), size, budget)) {
        int best = ft_budget_demote_pick(view, res.n_units, res.slots);
        /* Making a unit stream synchronises the device, which a stream capture under
         * way forbids: the allocation is served past the budget instead. */
        if (best < 0 || capture_under_way()) {
            ft_gpu_memory_usage_t u;
            usage_locked(&u);
            *weights = u.resident_bytes + ft_budget_slots_full(view, res.n_units, res.slots, -1);
            return -1;
        }
        if (!synced) { /* a resident unit's calls leave no events behind */
            REAL(cudaDeviceSynchronize)();
            synced = 1;
        }
        uint64_t moved = 0, shared = 0;
        plan.out.resident[best] = 0;
        char a[32], b[32], c[32], d[32];
        if (evict_unit((size_t)best, &moved, &shared) != 0) {
            plan.out.resident[best] = 1;
            res.units[best].unstreamable = 1; /* never tried again */
            continue;
        }
        res.units[best].demoted = 1;
        char what[96];
        if (cause == NULL)
            snprintf(what, sizeof what, "allocating %s", human_bytes(size, a, sizeof a));
        FT_WARN("residency: %s would exceed the budget (%s, %s held with the slots "
                "full): %s (%s) streams "
                "from now on", cause != NULL ? cause : what, human_bytes(budget, b, sizeof b),
                human_bytes(*committed, c, sizeof c), ft_disc_unit(disc, (size_t)best)->name,
                human_bytes(moved, d, sizeof d));
        if (log_diagnostics) {
            ft_gpu_memory_usage_t u;
            usage_locked(&u);
            FT_INFO("residency: held before that: %.1f MiB = tracked %.1f + granule padding %.1f - "
                    "streamed not loaded %.1f - FT_SPILL host %.1f + the unit's %.1f; %d unit(s) "
                    "loaded of %d slot(s), %.1f MiB of them", (double)(u.total_bytes + moved) / 1048576.0,
                    (double)ft_regions_bytes(regions) / 1048576.0,
                    (double)__atomic_load_n(&vmm_pad, __ATOMIC_RELAXED) / 1048576.0,
                    (double)(u.unmapped_bytes - spill_bytes) / 1048576.0, (double)spill_bytes / 1048576.0,
                    (double)moved / 1048576.0, res.loaded, res.slots, (double)res.held_bytes / 1048576.0);
        }
    }
    return view != NULL ? 0 : -2;
}

/* The budget given up after the plan (res.lock), read by the exit report's verdict:
 * the allocations served past it (budget_over), and what FlexTensor itself kept on the
 * device past it (budget_kept_over: split regions' tails). */
static ft_budget_over_t over, kept;

const ft_budget_over_t *budget_over(void)
{
    return &over;
}

const ft_budget_over_t *budget_kept_over(void)
{
    return &kept;
}

/* The process holds more than before (a unit kept on the device, pin_stale_unit; a
 * split region's tail): resident units are made to stream until the budget holds again
 * (res.lock held, never inside a stream capture: making a unit stream synchronises the
 * device). 0 when it holds; -1 when nothing more can leave the device. With `record`,
 * what the process then holds past the budget is kept for the verdict, and said once
 * (the caller keeps what it added: a split region's tail, which the guard needs on the
 * device). */
int budget_hold_locked(const char *cause, int record)
{
    uint64_t committed = 0, weights = 0;
    int rc = demote_for(0, cause, &committed, &weights);
    if (rc == -1 && record && ft_budget_over(&kept, committed, 0, plan.in.budget_bytes, weights)) {
        char a[32], b[32], c[32];
        FT_WARN("the memory budget (%s: FT_GPU_MEM_LIMIT or FT_MAX_GPU_MEM_FRACTION) cannot hold %s even "
                "with every weight that can leave the device streamed: the process now exceeds it by %s "
                "(%s held with the slots full). FlexTensor keeps streaming; for the budget to hold, give %s "
                "or more (ft-run --gpu-mem, FT_GPU_MEM_LIMIT). Said once: the exit report's verdict gives the "
                "most it went past", human_bytes(plan.in.budget_bytes, a, sizeof a), cause,
                human_bytes(kept.most, b, sizeof b), human_bytes(kept.need, c, sizeof c), c);
    }
    return rc == 0 ? 0 : -1;
}

/* Room for `size` more bytes on the device, within the budget, before they are taken
 * (res_split_stale): resident units are made to stream until they fit (res.lock held,
 * never inside a stream capture). 0 when they fit; -1 when they cannot (the units made
 * to stream on the way stream on). */
int budget_room_locked(uint64_t size, const char *cause)
{
    uint64_t committed = 0, weights = 0;
    return demote_for(size, cause, &committed, &weights) == 0 ? 0 : -1;
}

/* The bytes the budget has left with every slot full (res.lock held): 0 when none, or
 * when the units' view cannot be had; UINT64_MAX with no budget. */
uint64_t budget_left_locked(void)
{
    const ft_budget_unit_t *view = budget_view_locked();
    if (plan.in.budget_bytes == 0)
        return UINT64_MAX;
    uint64_t committed = view != NULL ? committed_locked(view) : UINT64_MAX;
    return committed < plan.in.budget_bytes ? plan.in.budget_bytes - committed : 0;
}

/* What budget_admit found for an allocation past the budget, kept for admit_done on
 * the same thread (the hook calls both, the real allocation between): the excess
 * counts only once the device has served it. A device failure is no excess, and the
 * warning must not say an allocation was served that the device refused. */
static __thread struct {
    uint64_t committed, weights, budget;
} past;

/* The allocation guard: whether `size` bytes fit the budget (after the plan, resident
 * units made to stream if needed; before it, under FT_SPILL, an allocation that will
 * not be served from virtual memory -- `passthrough` -- gets room by spill_admit).
 * 1 when they are reserved until admit_done; 2 the same, past the budget; 0 when there
 * is no budget to keep yet. Never a refusal: an allocation that does not fit even with
 * every unit streaming goes to the device past the budget. Not even one refusal for
 * PyTorch's caching allocator, which would free its cached blocks and retry: a program
 * that stops at its first failed allocation cannot be told apart from it, and breaking
 * a program that runs without FlexTensor is the one thing FlexTensor must not do
 * (docs/residency.md, "The budget after the plan"). */
int budget_admit(uint64_t size, int passthrough)
{
    /* The program freed the plan's weights: the plan goes before the next model's
     * allocations, which FT_SPILL then holds within the budget as it held the first
     * model's (reload.c). */
    if (__atomic_load_n(&reload_wanted, __ATOMIC_RELAXED))
        reload_now();
    if (engine_phase() != PHASE_STREAMING)
        return passthrough && spill_admit(size) > 0 ? 1 : 0;
    if (plan.in.budget_bytes == 0)
        return 0;
    uint64_t committed = 0, weights = 0;
    res_lock();
    int rc = demote_for(size, NULL, &committed, &weights);
    admitting += size;
    pthread_mutex_unlock(&res.lock);
    if (rc != -1)
        return 1;
    past.committed = committed;
    past.weights = weights;
    past.budget = plan.in.budget_bytes;
    return 2;
}

/* After the allocation budget_admit let through (adm its answer), once the caller has
 * tracked it (served: the device gave it): the reservation goes; one past the budget
 * is kept for the verdict, and the first is said. */
void admit_done(int adm, uint64_t size, int served)
{
    if (adm < 1)
        return;
    res_lock();
    admitting -= size;
    int first = adm == 2 && served && ft_budget_over(&over, past.committed, size, past.budget, past.weights);
    ft_budget_over_t now = over; /* the first: this allocation's */
    pthread_mutex_unlock(&res.lock);
    if (first) {
        char a[32], b[32], c[32], d[32], e[32];
        FT_WARN("the memory budget (%s: FT_GPU_MEM_LIMIT or FT_MAX_GPU_MEM_FRACTION) cannot hold an "
                "allocation of %s even with every weight that can leave the device streamed: it is "
                "served past the budget, which the process now exceeds by %s (%s held with the slots "
                "full, %s of it non-weight memory). FlexTensor keeps streaming; for the budget to "
                "hold, give %s or more (ft-run --gpu-mem, FT_GPU_MEM_LIMIT). Said once: the exit "
                "report's verdict gives the most it went past",
                human_bytes(past.budget, a, sizeof a), human_bytes(size, b, sizeof b),
                human_bytes(now.most, c, sizeof c), human_bytes(now.need, d, sizeof d),
                human_bytes(now.other, e, sizeof e), d);
    }
}

/* What the process holds on the device now (budget_bytes left 0). Before the plan
 * every byte counts as `other`. */
/* The breakdown, res.lock held. */
void usage_locked(ft_gpu_memory_usage_t *out)
{
    mover_settle(1); /* a move's held bytes are the prefetching thread's meanwhile */
    memset(out, 0, sizeof *out);
    uint64_t weights = 0, streamed = 0;
    if (__atomic_load_n(&plan.made, __ATOMIC_ACQUIRE) && plan.rc == 0)
        weights = plan.weight_bytes;
    if (engine_phase() == PHASE_STREAMING)
        for (int i = 0; i < res.n_regions; i++) {
            const res_region_t *r = &res.regions[i];
            uint64_t len = r->size != 0 ? r->len : 0; /* size 0: freed */
            streamed += len;
            if (res.units[r->unit].loaded)
                out->slots_bytes += len;
            else
                out->unmapped_bytes += len;
        }
    uint64_t tracked = device_bytes();
    /* Before the plan (FT_SPILL), allocations may wait in host memory too. */
    out->unmapped_bytes += __atomic_load_n(&spill_bytes, __ATOMIC_RELAXED);
    uint64_t held = tracked > out->unmapped_bytes ? tracked - out->unmapped_bytes : 0;
    /* A slot's physical memory between an unload and the load that reuses it: held,
     * though no region maps it (the H200 pair's 5 ms samples found 392 MiB more in use
     * than counted, two slots' worth). */
    uint64_t spare = spare_bytes_locked();
    out->slots_bytes += spare;
    held += spare;
    /* The bandwidth measurement's buffer, while the plan is made: other bytes. */
    held += __atomic_load_n(&bw_device_bytes, __ATOMIC_RELAXED);
    uint64_t resident = weights > streamed ? weights - streamed : 0;
    if (out->slots_bytes > held)
        out->slots_bytes = held;
    /* Weights freed since the plan: no longer held. */
    if (resident + out->slots_bytes > held)
        resident = held - out->slots_bytes;
    out->resident_bytes = resident;
    out->other_bytes = held - resident - out->slots_bytes;
    out->total_bytes = held;
}

void usage_now(ft_gpu_memory_usage_t *out)
{
    res_lock();
    usage_locked(out);
    pthread_mutex_unlock(&res.lock);
}

/* With a budget, what the application sees of the device once a plan streams: the
 * budget as total, what is left of it (never more than the device has free) as free --
 * so that frameworks that size caches from it stay within it. Before that (discovery,
 * profiling; no plan; stood down) the device's own answer: FlexTensor does not hold the
 * budget yet (FT_SPILL serves what does not fit, and no allocation is refused), and a
 * program's start-up must see what it sees without FlexTensor. transformers sizes its
 * allocator warm-up at from_pretrained(device_map=...) as free less 1.2 GiB, without a
 * floor: the budget's free, under 1.2 GiB, made that a negative tensor size (H200). */
void budget_view(size_t *free_b, size_t *total_b)
{
    int phase = engine_phase();
    if ((phase != PHASE_PLANNED && phase != PHASE_STREAMING) ||
        !__atomic_load_n(&plan.made, __ATOMIC_ACQUIRE) || plan.rc != 0)
        return;
    uint64_t budget = plan.in.budget_bytes;
    if (!ft_budget_shown(budget, *total_b) || regions == NULL)
        return;
    ft_gpu_memory_usage_t u;
    usage_now(&u);
    ft_budget_view(budget, u.total_bytes, free_b, total_b);
}

/* --- frees under way ---------------------------------------------------------------- */

/* A free begins (the free hooks): what it will give back counts as held until
 * budget_free_end (the budget's admissions meanwhile, on other threads, must not take it
 * as room). */
/* Whether frees under way are counted. Only budget_admit and FT_SPILL (spill_held)
 * read them: nothing to count while everything is admitted. Before the plan, FT_SPILL's
 * faults took a free under way for room: four threads freeing while others faulted
 * weights in went 2-4 MiB over a 30 MiB budget on the simulator (spill.sh,
 * --race-alloc). */
static int frees_counted(void)
{
    unsigned s = engine_state();
    return (state_phase(s) == PHASE_STREAMING && plan.in.budget_bytes != 0) || state_spill(s);
}

uint64_t budget_free_begin(const void *p)
{
    ft_region_t r;
    if (p == NULL || !frees_counted() || !ft_regions_find(regions, (uint64_t)(uintptr_t)p, &r))
        return 0;
    vmm_t *v = vmm_find(r.base);
    uint64_t bytes = v != NULL ? vmm_bytes(v) : r.size;
    __atomic_add_fetch(&releasing, bytes, __ATOMIC_RELAXED);
    return bytes;
}

/* budget_free_begin for `bytes` of the program's own mappings (progmap.c), which may be
 * part of an allocation's pieces. */
uint64_t budget_free_begin_bytes(uint64_t bytes)
{
    if (!frees_counted())
        return 0;
    __atomic_add_fetch(&releasing, bytes, __ATOMIC_RELAXED);
    return bytes;
}

void budget_free_end(uint64_t bytes)
{
    __atomic_sub_fetch(&releasing, bytes, __ATOMIC_RELAXED);
}

/* profiling.c - profiled passes and the plan: the copy bandwidth measured on the
 * host stores' kind of memory, each unit's compute time per pass (CUPTI activity
 * records or CUDA events), FT_SPILL's moves taken out of those times, then the plan's
 * inputs (the budget, the non-weight memory) and the plan itself (core/plan.c).
 *
 * Owns: prof (prof.lock: one lane's launches write it, the exit report and the control
 * API read it), plan (written once by the thread that ends profiling, under prof.lock;
 * plan.made is stored with release order, and readers load it with acquire before the
 * rest), bw (written before the move to PHASE_PROFILING, read after), peak_tracked and
 * bw_device_bytes (atomic), and the suspensions asked for early. The phase is engine.c's:
 * this file moves it into profiling (setup_passes), out of it (finish_profiling) and
 * out of planning (start_residency), through engine_to. */
#define _GNU_SOURCE
#include "shim/engine.h"

plan_state_t plan;

/* The most bytes the region table held at once, from discovery's end to the plan:
 * the plan leaves room for the peak of non-weight memory, not only what is allocated
 * when it is made. */
static uint64_t peak_tracked;
prof_state_t prof = { .lock = PTHREAD_MUTEX_INITIALIZER };
/* Suspensions asked for before profiling began (warm-up passes during discovery). */
static int early_suspends;
bw_t bw;

/* The measurement's device buffer while it lives, held outside the region table:
 * FT_SPILL counts it (spill_held), or other threads' allocations and faults filled the
 * room it was sized to and the simulator's peak went a granule over the budget. */
uint64_t bw_device_bytes;

/* Measured on memory from host_store_alloc: the kind the engine's host stores will be
 * (FT_PINNED_MEMORY, FT_PINNED_MEMORY_MODE), so the plan gets their bandwidth. */
static void measure_bandwidth(void)
{
    typedef cudaError_t (*stream_destroy_fn)(cudaStream_t);
    stream_destroy_fn stream_destroy = (stream_destroy_fn)own_rt("cudaStreamDestroy");
    if (!stream_destroy)
        return;
    enum { MIN_BYTES = 256 << 10 };
    size_t bytes = 64u << 20;
    /* The device buffer is twice that. Where the process is within its budget (FT_SPILL
     * holds it from the first allocation), it stays within: copies as large as the room
     * left allows, down to 256 KiB (the per-copy latency is taken out below); past it
     * already, 256 KiB. On the simulator, 2 x 64 MiB on top of a full budget was the
     * run's peak (and on top of one 2 MiB over it: 200 MiB for 70). */
    uint64_t budget = spill_budget(), held = spill_held();
    while (budget > 0 && bytes > MIN_BYTES && (held > budget || 2 * (uint64_t)bytes > budget - held))
        bytes /= 2;
    void *host = NULL, *dev = NULL;
    cudaStream_t s1 = NULL, s2 = NULL;
    cudaEvent_t e[6];
    /* Smaller again where the device has no room for the buffer. */
    int ok = (host = host_store_alloc(2 * bytes)) != NULL;
    while (ok && own_malloc(&dev, 2 * bytes) != cudaSuccess) {
        dev = NULL;
        ok = bytes > MIN_BYTES;
        bytes = bytes / 8 > MIN_BYTES ? bytes / 8 : MIN_BYTES;
    }
    if (dev != NULL)
        __atomic_store_n(&bw_device_bytes, 2 * (uint64_t)bytes, __ATOMIC_RELAXED);
    ok = ok && own_stream(&s1) == cudaSuccess && own_stream(&s2) == cudaSuccess;
    for (int i = 0; ok && i < 6; i++)
        ok = ev.create(&e[i], cudaEventDefault) == cudaSuccess;
    cudaMemcpyAsync_fn_t copy = REAL(cudaMemcpyAsync);
    char *h = host, *d = dev;
    float ms[4] = { 0, 0, 0, 0 };
    if (ok) {
        /* alone: H2D on s1, then D2H on s1; the best of 3 after one untimed round (the
         * first copies from fresh pinned pages were slow: under FT_SPILL, 4 MiB copies
         * measured 42.9 GB/s where 1 GiB ones gave 54.8, two-H200 machine) */
        for (int round = 0; round < 4; round++) {
            float t[2] = { 0, 0 };
            ev.record(e[0], s1);
            copy(d, h, bytes, cudaMemcpyHostToDevice, s1);
            ev.record(e[1], s1);
            copy(h, d, bytes, cudaMemcpyDeviceToHost, s1);
            ev.record(e[2], s1);
            ev.sync(e[2]);
            ev.elapsed(&t[0], e[0], e[1]);
            ev.elapsed(&t[1], e[1], e[2]);
            for (int i = 0; round > 0 && i < 2; i++)
                if (t[i] > 0 && (ms[i] == 0 || t[i] < ms[i]))
                    ms[i] = t[i];
        }
        /* both at once: s2 waits for nothing, s1 copies the other way */
        ev.record(e[3], s1);
        copy(d, h, bytes, cudaMemcpyHostToDevice, s1);
        ev.record(e[4], s1);
        copy(h + bytes, d + bytes, bytes, cudaMemcpyDeviceToHost, s2);
        ev.record(e[5], s2);
        ev.sync(e[4]);
        ev.sync(e[5]);
        ev.elapsed(&ms[2], e[3], e[4]);
        ev.elapsed(&ms[3], e[3], e[5]);
        /* The fixed cost of a copy: 16 small ones back to back. A copy of n bytes
         * takes latency + n / bandwidth: the large and the small copies give both, so
         * that copies made small by a budget with little room left still give the
         * link's bandwidth. */
        enum { SMALL = 4096, N_SMALL = 16 };
        float small_ms = 0;
        ev.record(e[0], s1);
        for (int i = 0; i < N_SMALL; i++)
            copy(d + (size_t)i * SMALL, h + (size_t)i * SMALL, SMALL, cudaMemcpyHostToDevice, s1);
        ev.record(e[1], s1);
        double small_us = 0, lat_us = 0;
        if (ev.sync(e[1]) == cudaSuccess && ev.elapsed(&small_ms, e[0], e[1]) == cudaSuccess)
            small_us = (double)small_ms * 1000.0 / N_SMALL;
        double big_us = (double)ms[0] * 1000.0;
        if (small_us > 0 && big_us > small_us) {
            double bytes_per_us = (double)(bytes - SMALL) / (big_us - small_us);
            lat_us = small_us - SMALL / bytes_per_us;
            lat_us = lat_us > 0 ? lat_us : 0;
        }
        bw.latency_us = lat_us;
        bw.bytes = bytes;
        double *out[4] = { &bw.h2d, &bw.d2h, &bw.h2d_both, &bw.d2h_both };
        for (int i = 0; i < 4; i++) {
            double us = (double)ms[i] * 1000.0 - lat_us;
            *out[i] = us > 0 ? (double)bytes / (us * 1000.0) : 0;
        }
        FT_INFO("copy bandwidth (%s, %.4g MiB): host to device %.1f GB/s, device to host %.1f GB/s; "
                "both at once %.1f and %.1f GB/s; %.1f us per copy", host_store_kind(), (double)bytes / 1048576.0,
                bw.h2d, bw.d2h, bw.h2d_both, bw.d2h_both, bw.latency_us);
    } else {
        FT_WARN("copy bandwidth not measured (could not set up host buffers and streams)");
    }
    if (s1)
        stream_destroy(s1);
    if (s2)
        stream_destroy(s2);
    if (dev)
        REAL(cudaFree)(dev);
    __atomic_store_n(&bw_device_bytes, 0, __ATOMIC_RELAXED);
    if (host)
        host_store_free(host);
}

/* A region was tracked (track, hooks_alloc.c): while profiling, the table's peak is
 * raised to what it holds now. */
void profile_note_tracked(void)
{
    if (engine_phase() != PHASE_PROFILING)
        return;
    uint64_t now = device_bytes(), was = __atomic_load_n(&peak_tracked, __ATOMIC_RELAXED);
    while (now > was &&
           !__atomic_compare_exchange_n(&peak_tracked, &was, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* Discovery is done: set up the events for the units it found. */
static void setup_passes(void)
{
    size_t n = ft_disc_unit_count(disc);
    __atomic_store_n(&peak_tracked, device_bytes(), __ATOMIC_RELAXED);
    events_resolve();
    prof.prof = ft_prof_new(n, cfgp->profiling_iters);
    prof.first = calloc(n ? n : 1, sizeof *prof.first);
    prof.ev = calloc(n + 1, sizeof *prof.ev);
    prof.seen = calloc(n ? n : 1, sizeof *prof.seen);
    prof.moves_ns = calloc(n ? n : 1, sizeof *prof.moves_ns);
    /* Without units or events there is nothing to plan: the engine goes off (FT_SPILL's
     * allocations come back to the device, calls pass through), rather than staying in
     * planning with FT_SPILL on for good (the H100's jax_fraction: no units, XLA's arena
     * read over the link from host memory until the process timed out). */
    if (n == 0 || !ev.create || !ev.record || !ev.sync || !ev.elapsed || !prof.prof ||
        !prof.first || !prof.ev || !prof.seen || !prof.moves_ns) {
        FT_WARN("profiling skipped: %s", n == 0 ? "no units" : "cannot set up CUDA events");
        engine_to(PHASE_PLANNING, PHASE_OFF, n == 0 ? "discovery found no weights" : "profiling could not start");
        return;
    }
    for (size_t i = 0; i <= n; i++) {
        if (ev.create(&prof.ev[i], cudaEventDefault) != cudaSuccess) {
            FT_WARN("profiling skipped: cudaEventCreate failed");
            engine_to(PHASE_PLANNING, PHASE_OFF, "profiling could not start");
            return;
        }
    }
    for (size_t i = 0; i < n; i++)
        prof.first[i] = ft_disc_unit(disc, i)->first_launch;
    for (int i = __atomic_load_n(&early_suspends, __ATOMIC_RELAXED); i > 0; i--)
        ft_prof_suspend(prof.prof);
    prof.n = n;
    measure_bandwidth();
    /* After the bandwidth: a thread that sees PROFILING sees bw (spill_out reads it). */
    if (engine_to(PHASE_PLANNING, PHASE_PROFILING, NULL))
        FT_INFO("profiling: %zu units over %d pass(es)", n,
                cfgp->profiling_iters < 1 ? 1 : cfgp->profiling_iters);
}

/* Discovery is done (the one thread that ended it): profiling starts. CUPTI is
 * attached again if FT_CUPTI_CONFIRM detached it, stays for profiling when its activity
 * API can time the kernels, and is released afterwards (a profiler started later can
 * subscribe then); otherwise it is released now. */
void start_profiling(void)
{
    setup_passes();
    int on = engine_phase() == PHASE_PROFILING;
    if (cupti_detached_after_first_pass() && on) {
        char why[256] = "";
        if (ft_cupti_start(why, sizeof why) != FT_CUPTI_STATUS_ACTIVE)
            FT_INFO("CUPTI not attached again for profiling: %s; kernels timed with CUDA events", why);
    }
    prof.cupti_timing = on && ft_cupti_timing_start() == 0;
    if (!prof.cupti_timing)
        ft_cupti_stop();
    else if ((prof.kern = malloc((prof.kern_cap = 1u << 16) * sizeof *prof.kern)) == NULL)
        prof.cupti_timing = 0;
}

/* Standing down: CUPTI's activity timing stops, if profiling used it. */
void stop_profile_timing(void)
{
    if (prof.cupti_timing) {
        prof.cupti_timing = 0;
        ft_cupti_timing_stop();
    }
}

/* A pass ended (the next one starts at this launch): read its events. */
/* The units' times in the pass just ended from CUPTI's kernel records: from a unit's
 * first kernel's start to the next unit's, the last unit to its last kernel's end.
 * 1 when every unit had kernels (us[] replaced), 0 otherwise (us[] untouched). */
static int cupti_unit_times(double *us)
{
    size_t n = ft_cupti_timing_collect(prof.kern, prof.kern_cap);
    uint64_t first[prof.n], last_end = 0;
    for (size_t i = 0; i < prof.n; i++)
        first[i] = UINT64_MAX;
    for (size_t k = 0; k < n; k++) {
        const ft_cupti_kernel_t *r = &prof.kern[k];
        uint64_t unit = (r->tag & 0xfffff) - 1;
        if (r->tag >> 20 != prof.pass_seq || unit >= prof.n)
            continue;
        if (r->start < first[unit])
            first[unit] = r->start;
        if (unit == prof.n - 1 && r->end > last_end)
            last_end = r->end;
    }
    for (size_t i = 0; i < prof.n; i++)
        if (first[i] == UINT64_MAX || (i > 0 && first[i] < first[i - 1]))
            return 0;
    for (size_t i = 0; i < prof.n; i++) {
        uint64_t end = i + 1 < prof.n ? first[i + 1] : last_end;
        if (end < first[i])
            return 0;
        us[i] = (double)(end - first[i]) / 1000.0;
    }
    return 1;
}

/* This thread pushed a CUPTI tag for its launch: popped once the launch is enqueued. */
__thread int tag_pushed;

/* Profiling gives up waiting for passes that follow the recorded one after this many
 * in a row that do not, and plans from the passes it has (at least one). */
#define PROFILE_MAX_OFF_RECORD 8

/* 1: the pass was timed; 0: dropped (suspended, an error); -1: dropped because it did
 * not run every unit where discovery saw them (the program's passes changed). */
static int end_profiled_pass(void)
{
    double us[prof.n];
    cudaError_t pending = own_pending();
    cudaError_t err = own_call(ev.sync(prof.ev[prof.n]), pending);
    if (err != cudaSuccess) {
        FT_DEBUG("profiling: pass dropped, waiting for its end failed (cudaError %d)", (int)err);
        return 0;
    }
    /* Every unit before any is timed: a unit's time ends at the next unit's event, and
     * the event of a unit no pass has reached yet was never recorded. Timing it failed
     * with cudaErrorInvalidResourceHandle, left for the program's next
     * cudaGetLastError (model --skip-last-from 4, its first profiled pass without its
     * last layer). */
    for (size_t i = 0; i < prof.n; i++) {
        if (!prof.seen[i]) {
            FT_DEBUG("profiling: pass dropped, %s not seen at launch %u", ft_disc_unit(disc, i)->name,
                     prof.first[i]);
            return -1; /* the pass did not run every unit where discovery saw them */
        }
    }
    for (size_t i = 0; i < prof.n; i++) {
        float ms = 0;
        err = own_call(ev.elapsed(&ms, prof.ev[i], i + 1 < prof.n ? prof.ev[i + 1] : prof.ev[prof.n]), pending);
        if (err != cudaSuccess) {
            FT_DEBUG("profiling: pass dropped, timing %s failed (cudaError %d)", ft_disc_unit(disc, i)->name,
                     (int)err);
            return 0;
        }
        us[i] = (double)ms * 1000.0;
    }
    if (prof.cupti_timing && cupti_unit_times(us))
        prof.cupti_passes++;
    if (prof.epoch != ft_prof_epoch(prof.prof)) {
        FT_DEBUG("profiling: pass dropped, profiling was suspended during it");
        return 0;
    }
    for (size_t i = 0; i < prof.n; i++) {
        double moved = (double)__atomic_load_n(&prof.moves_ns[i], __ATOMIC_RELAXED) / 1e3;
        double kept = us[i] - moved > 1.0 ? us[i] - moved : 1.0;
        if (us[i] > kept) /* a unit timed under 1 us (its graph timed whole) is raised to 1 */
            prof.moves_out_ns += (uint64_t)((us[i] - kept) * 1e3);
        us[i] = kept;
    }
    ft_prof_add_pass(prof.prof, us);
    outside_sample("profiling", ft_prof_passes(prof.prof), engine_held);
    FT_DEBUG("profiling: pass %d of %d timed", ft_prof_passes(prof.prof), cfgp->profiling_iters);
    return 1;
}

/* The memory budget: FT_GPU_MEM_LIMIT and FT_MAX_GPU_MEM_FRACTION x total (the smaller
 * when both), capped by what the device has free plus what this process already holds
 * through the shim. 0 = latency mode. */
/* The budget the configuration asks for (FT_GPU_MEM_LIMIT, FT_MAX_GPU_MEM_FRACTION of
 * total_b), 0 for none. */
uint64_t configured_budget(size_t total_b)
{
    uint64_t limit = cfgp->gpu_mem_limit;
    control_limit(&limit); /* ft_set_gpu_mem_limit's, when the program set one */
    return ft_budget_configured(limit, cfgp->max_gpu_mem_fraction, total_b);
}

static uint64_t memory_budget(void)
{
    size_t free_b = 0, total_b = 0;
    if (REAL(cudaMemGetInfo) == NULL || REAL(cudaMemGetInfo)(&free_b, &total_b) != cudaSuccess)
        free_b = total_b = 0;
    uint64_t budget = configured_budget(total_b);
    uint64_t can = (uint64_t)free_b + device_bytes();
    uint64_t capped = ft_budget_capped(budget, total_b, can);
    if (capped != budget) {
        char a[32], b[32];
        FT_INFO("plan: budget %s capped to %s (free device memory plus what this process holds)",
                human_bytes(budget, a, sizeof a), human_bytes(capped, b, sizeof b));
    }
    return capped;
}

/* The options that keep units out of streaming, for messages: FT_INCLUDE_PATTERNS
 * (units it does not match), FT_EXCLUDE_PATTERNS (units it matches), or both. */
const char *kept_by(void)
{
    int inc = cfgp->include_patterns.n > 0, exc = cfgp->exclude_patterns.n > 0;
    return inc && exc ? "FT_INCLUDE_PATTERNS and FT_EXCLUDE_PATTERNS"
         : inc        ? "FT_INCLUDE_PATTERNS" : "FT_EXCLUDE_PATTERNS";
}

/* The non-weight memory of the run whose profile was saved (plan_saved), else 0. */
static uint64_t saved_other_bytes;

/* Planning is done: the next guarded call switches the engine on when the plan
 * streams; otherwise the engine is off for good (engine.c: entering OFF brings
 * FT_SPILL's allocations back to the device). */
static void start_residency(void)
{
    if (plan.rc == 0 && plan.out.slots > 0)
        engine_to(PHASE_PLANNING, PHASE_PLANNED, NULL);
    else
        engine_to(PHASE_PLANNING, PHASE_OFF, "the plan streams nothing");
}

int plan_choose(const ft_plan_input_t *in, ft_plan_t *out, uint64_t *min_budget, uint64_t *pipelined,
                int *one_slot)
{
    uint64_t unused_p;
    int unused_o;
    pipelined = pipelined != NULL ? pipelined : &unused_p;
    one_slot = one_slot != NULL ? one_slot : &unused_o;
    *pipelined = 0;
    *one_slot = 0;
    int rc = ft_plan_choose(in, out, min_budget);
    if (rc != -ENOSPC || in->budget_bytes == 0 || in->min_slots <= 1)
        return rc;
    ft_plan_input_t one = *in;
    uint64_t least = 0;
    one.min_slots = one.max_slots = 1;
    int rc1 = ft_plan_choose(&one, out, &least);
    if (rc1 != 0 && rc1 != -ENOSPC)
        return rc; /* no memory: the first answer stands */
    *one_slot = 1;
    if (rc1 == 0)
        *pipelined = *min_budget;
    else
        *min_budget = least;
    return rc1;
}

/* Profiling is done: choose the plan (FT_STRATEGY) and say what it is. */
static void make_plan(void)
{
    size_t n = prof.n;
    ft_plan_unit_t *units = calloc(n, sizeof *units);
    plan.out.resident = calloc(n, sizeof *plan.out.resident);
    plan.out.slot = calloc(n, sizeof *plan.out.slot);
    plan.out.unit_stall_us = calloc(n, sizeof *plan.out.unit_stall_us);
    if (units == NULL || !plan.out.resident || !plan.out.slot || !plan.out.unit_stall_us) {
        FT_WARN("plan: out of memory");
        free(units);
        plan.rc = -ENOMEM;
        start_residency();
        return;
    }
    uint64_t weights = 0; /* what the units occupy on the device */
    uint64_t kept_bytes = 0;
    size_t kept = 0;
    plan.weight_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const ft_disc_unit_t *u = ft_disc_unit(disc, i);
        /* What the unit occupies on the device: regions backed by virtual memory are
         * mapped in whole granules. */
        uint64_t bytes = 0, copied = 0;
        for (uint32_t k = 0; k < u->n_regions; k++) {
            uint64_t base, size;
            if (ft_disc_region(disc, u->region_ids[k], &base, &size) != 0)
                continue;
            vmm_t *v = vmm_find(base);
            uint64_t held = v != NULL ? v->size : size;
            plan.weight_bytes += held;
            /* A weight other units use too stays resident (activate_locked): the plan
             * counts it with the rest of the resident memory. */
            if (ft_disc_region_shared(disc, u->region_ids[k]) ||
                ft_disc_region_indirect_only(disc, u->region_ids[k]))
                continue;
            bytes += held;
            copied += size;
        }
        /* The unit selection (FT_INCLUDE_PATTERNS, FT_EXCLUDE_PATTERNS): a unit it
         * leaves out stays resident whatever the budget. */
        units[i] = (ft_plan_unit_t){ u->name, bytes, ft_prof_stat(prof.prof, i).median, copied, !u->offload };
        weights += bytes;
        kept += !u->offload;
        kept_bytes += u->offload ? 0 : bytes;
    }
    /* The room of the program's own pools (XLA's, PyTorch's expandable segments) goes
     * to host memory at the switch: no device memory the budget must hold. */
    uint64_t room_pieces = 0, back_pieces = 0;
    plan.room_bytes = memory_budget() != 0 ? vmm_room_to_host(res_room_used, 1, &room_pieces) : 0;
    /* ... and what is in host memory but not room (an allocation served in pieces past
     * the budget before the plan) comes to the device, or streams: counted as there. */
    uint64_t back = vmm_used_to_device(res_room_used, 1, &back_pieces);
    uint64_t tracked = device_bytes() + back;
    FT_DEBUG("plan: %.1f MiB tracked on the device, %.1f MiB of pools' room to host memory (%llu pieces), %.1f MiB "
             "in host memory to come back (%llu pieces), peak while profiling %.1f MiB",
             (double)device_bytes() / 1048576.0, (double)plan.room_bytes / 1048576.0,
             (unsigned long long)room_pieces, (double)back / 1048576.0, (unsigned long long)back_pieces,
             (double)__atomic_load_n(&peak_tracked, __ATOMIC_RELAXED) / 1048576.0);
    ft_plan_input_t *in = &plan.in;
    in->units = units;
    in->n = n;
    /* GB/s is bytes per ns: x 1000 for bytes per us. */
    in->h2d_bytes_per_us = bw.h2d > 0 ? bw.h2d * 1000.0 : 25000.0;
    in->copy_latency_us = bw.latency_us;
    /* Without the device checksum, the engine writes every unloaded unit back before
     * the next copy in: the model counts that copy too. With it, units are taken to
     * be unchanged (weights are). */
    in->d2h_bytes_per_us = checksum_available() ? 0 : bw.d2h > 0 ? bw.d2h * 1000.0 : 25000.0;
    in->budget_bytes = memory_budget();
    /* Non-weight memory: its peak while profiling (activations freed before the plan
     * come back in the next pass). */
    uint64_t peak = __atomic_load_n(&peak_tracked, __ATOMIC_RELAXED) + back;
    if (peak > tracked)
        tracked = peak;
    tracked = tracked > plan.room_bytes ? tracked - plan.room_bytes : 0;
    /* Both in whole granules where virtual memory backs them. */
    in->other_bytes = tracked > weights ? tracked - weights : 0;
    /* A plan from a saved profile comes before this run's activations: the saved run's
     * figure, measured over its profiled passes, is the floor. */
    if (in->other_bytes < saved_other_bytes)
        in->other_bytes = saved_other_bytes;
    in->time_budget_factor = cfgp->time_budget_factor;
    in->min_slots = cfgp->min_blocks;
    in->max_slots = cfgp->num_blocks;
    in->strategy = cfgp->strategy == FT_STRATEGY_GREEDY ? FT_PLAN_GREEDY
                 : cfgp->strategy == FT_STRATEGY_GLOBAL ? FT_PLAN_GLOBAL : FT_PLAN_KNAPSACK;
    uint64_t pipelined = 0;
    int one_slot = 0;
    plan.rc = plan_choose(in, &plan.out, &plan.min_budget, &pipelined, &one_slot);
    __atomic_store_n(&plan.made, 1, __ATOMIC_RELEASE); /* ft_get_gpu_memory_usage reads */
    char a[32], b[32], c[32], d[32], e[160] = "";
    if (kept > 0)
        snprintf(e, sizeof e, "the %zu unit(s) kept resident by %s (%s)", kept, kept_by(),
                 human_bytes(kept_bytes, d, sizeof d));
    if (plan.rc == -ENOSPC) {
        FT_ERROR("plan: the memory budget %s cannot hold this model's non-weight memory (%s)%s%s "
                 "and %d slot(s); the smallest budget that works is %s (FT_GPU_MEM_LIMIT or "
                 "FT_MAX_GPU_MEM_FRACTION%s%s); nothing will be offloaded",
                 human_bytes(in->budget_bytes, a, sizeof a), human_bytes(in->other_bytes, b, sizeof b),
                 kept ? ", " : "", e, one_slot ? 1 : in->min_slots, human_bytes(plan.min_budget, c, sizeof c),
                 kept ? ", or fewer units kept by " : "", kept ? kept_by() : "");
        start_residency(); /* it will not start: FT_SPILL's moves are undone */
        return;
    }
    if (plan.rc != 0) {
        FT_WARN("plan: not made (error %d)", plan.rc);
        start_residency();
        return;
    }
    size_t streamed = 0;
    for (size_t i = 0; i < n; i++)
        streamed += !plan.out.resident[i];
    FT_INFO("plan (%s mode, %s): %zu of %zu units streamed through %d slot(s) of %s; device "
            "memory %s; predicted step %.1f us against %.1f us all resident%s%s",
            in->budget_bytes ? "memory" : "latency", ft_config_word_name(cfgp->strategy), streamed,
            n, plan.out.slots, human_bytes(plan.out.slot_bytes, a, sizeof a),
            human_bytes(plan.out.device_bytes, b, sizeof b), plan.out.step_us,
            plan.out.all_resident_us, kept ? "; " : "", e);
    if (pipelined > 0)
        FT_WARN("plan: one slot: the budget %s is below the smallest that pipelines the copies with %d slots "
                "(%s), so each streamed unit is copied in once the one before has left, after the kernels "
                "before it, none of its copy overlapped with compute",
                human_bytes(in->budget_bytes, a, sizeof a), cfgp->min_blocks, human_bytes(pipelined, c, sizeof c));
    if (log_diagnostics) {
        size_t need = ft_plan_format(in, &plan.out, NULL, 0) + 1;
        char *table = malloc(need);
        if (table != NULL) {
            ft_plan_format(in, &plan.out, table, need);
            for (char *line = strtok(table, "\n"); line != NULL; line = strtok(NULL, "\n"))
                FT_INFO("%s", line);
            free(table);
        }
    }
    savedprof_save();
    start_residency();
}

/* Profiling's findings said at most this many lines. */
#define FINDINGS_SAID 4

static void finish_profiling(void)
{
    if (!engine_to(PHASE_PROFILING, PHASE_PLANNING, NULL))
        return; /* stood down meanwhile: no plan */
    if (prof.cupti_timing) {
        prof.cupti_timing = 0;
        ft_cupti_timing_stop();
        ft_cupti_stop();
        FT_INFO("profiling: %u of %d pass(es) timed from CUPTI activity records (GPU timestamps), "
                "the others from CUDA events", prof.cupti_passes, ft_prof_passes(prof.prof));
    }
    const char *names[prof.n];
    for (size_t i = 0; i < prof.n; i++)
        names[i] = ft_disc_unit(disc, i)->name;
    char report[2048];
    int findings = ft_prof_quality(prof.prof, names, 0.25, report, sizeof report);
    FT_INFO("profiling: done, %d pass(es), %d finding(s)", ft_prof_passes(prof.prof), findings);
    if (prof.moves_out_ns > 0)
        FT_INFO("profiling: %.1f ms of FT_SPILL moves taken out of the units' times (the gaps "
                "they left in the profiled stream)", (double)prof.moves_out_ns / 1e6);
    /* At most FINDINGS_SAID lines: a graph timed whole spreads every unit's time. */
    int said = 0;
    for (char *line = strtok(report, "\n"); line != NULL; line = strtok(NULL, "\n"))
        if (said++ < FINDINGS_SAID)
            FT_WARN("profiling: %s", line);
    if (findings > FINDINGS_SAID)
        FT_WARN("profiling: %d more finding(s) like these (FT_LOG_DIAGNOSTICS=true lists every unit's times)",
                findings - FINDINGS_SAID);
    make_plan();
    if (log_diagnostics) {
        FT_INFO("%-24s %12s %10s %10s %10s %4s", "unit", "bytes", "median us", "min us", "max us", "n");
        for (size_t i = 0; i < prof.n; i++) {
            const ft_disc_unit_t *u = ft_disc_unit(disc, i);
            ft_prof_stat_t st = ft_prof_stat(prof.prof, i);
            FT_INFO("%-24s %12llu %10.1f %10.1f %10.1f %4d", u->name, (unsigned long long)u->bytes,
                    st.median, st.min, st.max, st.n);
        }
    }
}

/* Profiling has seen `launches` launches (FT_OBSERVE_MAX_LAUNCHES): with a pass timed
 * it plans from the passes it has; 1 then, or when profiling is over anyway. 0: no pass
 * was timed, and the caller stands down. */
int profile_overdue(uint64_t launches)
{
    pthread_mutex_lock(&prof.lock);
    int passes = ft_prof_passes(prof.prof);
    if (engine_phase() == PHASE_PROFILING && passes > 0) {
        FT_WARN("profiling: %llu launches (FT_OBSERVE_MAX_LAUNCHES) and %d of the passes wanted "
                "timed; planning from those", (unsigned long long)launches, passes);
        prof.in_pass = 0;
        finish_profiling();
    }
    int over = engine_phase() != PHASE_PROFILING;
    pthread_mutex_unlock(&prof.lock);
    return over;
}

/* Profiling, for a launch at position pos of its lane's pass. One lane's pass is timed
 * at a time; another lane is adopted at a pass start when none is under way, or when
 * the timed lane went quiet while another began three passes (its thread finished). */
void profile_launch(uint64_t lane, long pos, cudaStream_t stream)
{
    pthread_mutex_lock(&prof.lock);
    /* The phase again, under the lock finish_profiling leaves it under: a launch that
     * saw PROFILING before another thread's pass ended it times nothing more. */
    if (engine_phase() != PHASE_PROFILING) {
        pthread_mutex_unlock(&prof.lock);
        return;
    }
    if (prof.in_pass && lane != prof.lane) {
        if (pos != 0 || !ft_prof_quiet_start(&prof.quiet, lane)) {
            pthread_mutex_unlock(&prof.lock);
            return;
        }
        prof.in_pass = 0; /* abandon the quiet lane's pass */
    }
    if (!prof.in_pass && pos != 0) {
        pthread_mutex_unlock(&prof.lock);
        return;
    }
    if (pos == 0) {
        if (prof.in_pass) {
            ev.record(prof.ev[prof.n], stream);
            int kept = end_profiled_pass();
            prof.off_record = kept < 0 ? prof.off_record + 1 : kept > 0 ? 0 : prof.off_record;
            int give_up = prof.off_record >= PROFILE_MAX_OFF_RECORD;
            if (give_up && prof.off_record == PROFILE_MAX_OFF_RECORD)
                FT_WARN("profiling: the last %d passes did not follow the one discovery recorded (the "
                        "program's passes changed after it); %s", PROFILE_MAX_OFF_RECORD,
                        ft_prof_passes(prof.prof) > 0 ? "planning from the passes timed so far"
                        : "nothing is planned until one does");
            if (ft_prof_done(prof.prof) || (give_up && ft_prof_passes(prof.prof) > 0)) {
                finish_profiling();
                pthread_mutex_unlock(&prof.lock);
                return;
            }
        }
        prof.in_pass = 1;
        prof.pass_seq++;
        __atomic_store_n(&prof.cur_unit, -1, __ATOMIC_RELAXED);
        for (size_t i = 0; i < prof.n; i++)
            __atomic_store_n(&prof.moves_ns[i], 0, __ATOMIC_RELAXED);
        prof.lane = lane;
        ft_prof_quiet_reset(&prof.quiet);
        prof.epoch = ft_prof_epoch(prof.prof);
        memset(prof.seen, 0, prof.n * sizeof *prof.seen);
    }
    if (prof.in_pass && pos >= 0) {
        for (size_t i = 0; i < prof.n; i++) {
            if (prof.first[i] == (uint32_t)pos && !prof.seen[i]) {
                __atomic_store_n(&prof.cur_unit, (int)i, __ATOMIC_RELAXED);
                ev.record(prof.ev[i], stream);
                prof.seen[i] = 1;
            }
        }
        if (prof.cupti_timing && prof.cur_unit >= 0 && lane == prof.lane) {
            tag_pushed = ft_cupti_tag_push(prof.pass_seq << 20 | (uint64_t)(prof.cur_unit + 1));
        }
    }
    pthread_mutex_unlock(&prof.lock);
}

/* 1 when a profiled pass's timing changes units at position pos: a unit's first launch,
 * or a pass's start (prof.first and prof.n are set before PROFILING). */
int profile_cut_at(long pos)
{
    if (pos == 0)
        return 1;
    for (size_t i = 0; i < prof.n; i++)
        if (prof.first[i] == (uint32_t)pos)
            return 1;
    return 0;
}

/* This thread runs a profiled pass of the profiled lane: FT_SPILL's moves are charged. */
int profile_charging(void)
{
    return engine_phase() == PHASE_PROFILING && prof.moves_ns != NULL &&
           lane_id() == __atomic_load_n(&prof.lane, __ATOMIC_RELAXED);
}

/* An FT_SPILL move of `ns` (device time) during a profiled pass of the profiled lane:
 * charged to the unit under way, whose time it is taken out of. */
void profile_charge_move(uint64_t ns)
{
    if (!profile_charging())
        return;
    int u = __atomic_load_n(&prof.cur_unit, __ATOMIC_RELAXED);
    if (u >= 0 && (size_t)u < prof.n)
        __atomic_fetch_add(&prof.moves_ns[u], ns, __ATOMIC_RELAXED);
}

/* --- the control API: passes left out of profiling ----------------------------------- */

/* Reference counted: warm-up or evaluation passes bracketed by these calls are not
 * profiled. Before profiling begins the count is kept and applied when it does. */
FT_EXPORT void ft_profiling_suspend(void)
{
    if (!ft_shim_active)
        return;
    pthread_mutex_lock(&prof.lock);
    if (prof.prof != NULL)
        ft_prof_suspend(prof.prof);
    else
        __atomic_add_fetch(&early_suspends, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&prof.lock);
}

FT_EXPORT int ft_profiling_resume(void)
{
    if (!ft_shim_active)
        return -1;
    int rc = -1;
    pthread_mutex_lock(&prof.lock);
    if (prof.prof != NULL)
        rc = ft_prof_resume(prof.prof);
    else if (__atomic_load_n(&early_suspends, __ATOMIC_RELAXED) > 0)
        rc = (__atomic_sub_fetch(&early_suspends, 1, __ATOMIC_RELAXED), 0);
    pthread_mutex_unlock(&prof.lock);
    if (rc != 0)
        FT_LOG_CAPPED(FT_LOG_WARN, 3, "ft_profiling_resume without a matching ft_profiling_suspend");
    return rc;
}

/* --- the plan's weights freed (reload.c) --------------------------------------------- */

/* The program freed the plan's weights: the profile and the plan go (res.lock held, the
 * residency engine's state gone already), so that the next discovery's end profiles
 * and plans from nothing, as the first did. plan.made is cleared first: budget_view
 * and the control API read it without res.lock before the rest. */
void profile_forget(void)
{
    __atomic_store_n(&plan.made, 0, __ATOMIC_RELEASE);
    pthread_mutex_lock(&prof.lock);
    stop_profile_timing();
    for (size_t i = 0; prof.ev != NULL && i <= prof.n; i++)
        own_event_destroy(prof.ev[i]);
    ft_prof_free(prof.prof);
    free(prof.first);
    free(prof.ev);
    free(prof.seen);
    free(prof.moves_ns);
    free(prof.kern);
    prof.prof = NULL;
    prof.first = NULL;
    prof.ev = NULL;
    prof.seen = NULL;
    prof.moves_ns = NULL;
    prof.kern = NULL;
    prof.kern_cap = 0;
    prof.n = 0;
    prof.in_pass = 0;
    prof.cupti_passes = 0;
    prof.moves_out_ns = 0;
    prof.off_record = 0;
    prof.cur_unit = -1;
    pthread_mutex_unlock(&prof.lock);
    free((void *)plan.in.units);
    free(plan.out.resident);
    free(plan.out.slot);
    free(plan.out.unit_stall_us);
    memset(&plan, 0, sizeof plan);
    __atomic_store_n(&peak_tracked, 0, __ATOMIC_RELAXED);
    saved_other_bytes = 0; /* the saved run's floor was the first model's */
}

/* --- a plan from a saved profile (savedprof.c) ---------------------------------------- */

/* Discovery took a saved profile (PHASE_PLANNING, the one thread that moved there): the
 * plan is made from the saved units' times, the saved link and the saved run's
 * non-weight memory, without profiling or measuring the link. */
void plan_saved(const double *median_us, size_t n, const bw_t *link, uint64_t other_bytes)
{
    pthread_mutex_lock(&prof.lock);
    events_resolve(); /* the residency engine's events */
    ft_cupti_stop();  /* discovery's end releases CUPTI; no profiling will want it */
    bw = *link;
    saved_other_bytes = other_bytes;
    prof.prof = ft_prof_new(n, 1);
    if (prof.prof == NULL || n != ft_disc_unit_count(disc)) {
        FT_WARN("plan: not made from the saved profile (%s)", prof.prof == NULL ? "out of memory" : "units disagree");
        engine_to(PHASE_PLANNING, PHASE_OFF, "no plan");
        pthread_mutex_unlock(&prof.lock);
        return;
    }
    ft_prof_add_pass(prof.prof, median_us);
    prof.n = n;
    make_plan();
    pthread_mutex_unlock(&prof.lock);
}

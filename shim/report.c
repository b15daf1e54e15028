/* report.c - the exit report, the trace's engine records and the verdict; the
 * control API (ft_iteration_mark, ft_get_gpu_memory_usage) and the NVTX ranges that
 * libflextensor-nvtx.so passes in; the samples of device memory outside FlexTensor's
 * count.
 *
 * Owns: `outside` (outside.lock). It reads the other files' state for the report (the
 * phase through engine_state, why FlexTensor stood down through stood_down_why); at
 * exit, without CUDA calls. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include "cupti/audit.h"

/* --- NVTX ranges name the units (libflextensor-nvtx.so, shim/nvtx.c, calls these) --- */

FT_EXPORT void ft_nvtx_range_push(const char *name)
{
    static int told;
    if (ft_shim_active && engine_phase() == PHASE_DISCOVERY) {
        if (name != NULL && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
            FT_INFO("discovery: NVTX ranges arrive (first: \"%.60s\"); units whose weights are used "
                    "inside one are named after it", name);
        ft_disc_range_push(disc, lane_id(), name); /* NULL: a range without a readable name */
    }
}

FT_EXPORT void ft_nvtx_range_pop(void)
{
    if (ft_shim_active && engine_phase() == PHASE_DISCOVERY)
        ft_disc_range_pop(disc, lane_id());
}

FT_EXPORT void ft_iteration_mark(void)
{
    if (ft_shim_active && disc != NULL)
        ft_disc_mark(disc, lane_id());
}

/* Device memory outside FlexTensor's count: the device's memory in use (the real
 * cudaMemGetInfo, device-wide, as nvidia-smi sees it) less what FlexTensor holds. The
 * context, library code, NCCL's buffers and anything else allocated around the shim
 * lie there; the budget does not hold them. Sampled at the first allocation, at each
 * profiled pass and at inference passes (the first 64, then one in 64), reported at
 * exit: where it grows shows what the budget cannot see (the two-H200 run found 490
 * MiB more there during profiling than at the end, sampled from outside). */
static struct {
    pthread_mutex_t lock;
    int n;
    uint64_t first, last, max, labelled;
    char max_at[48]; /* where it last grew by 1 MiB or more */
} outside = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* held: the caller holds res.lock. Otherwise the sample is skipped when res.lock is
 * busy: its holder may be waiting for this very call to finish (activate_locked and
 * spill_admit wait for the calls past an unguarded entry, which a profiled launch is). */
void outside_sample(const char *phase, long pass, int held)
{
    size_t free_b = 0, total_b = 0;
    if (REAL(cudaMemGetInfo) == NULL || REAL(cudaMemGetInfo)(&free_b, &total_b) != cudaSuccess || total_b < free_b)
        return;
    ft_gpu_memory_usage_t u;
    if (held) {
        usage_locked(&u);
    } else {
        if (pthread_mutex_trylock(&res.lock) != 0)
            return;
        usage_locked(&u);
        pthread_mutex_unlock(&res.lock);
    }
    uint64_t used = (uint64_t)(total_b - free_b), out = used > u.total_bytes ? used - u.total_bytes : 0;
    pthread_mutex_lock(&outside.lock);
    if (outside.n++ == 0)
        outside.first = out;
    outside.last = out;
    /* Where it grew by a MiB or more, not where a few KiB more came (the checksum's
     * buffers at the plan, say). */
    if (out > outside.max)
        outside.max = out;
    if (outside.n == 1 || out >= outside.labelled + (1u << 20)) {
        outside.labelled = out;
        if (pass >= 0)
            snprintf(outside.max_at, sizeof outside.max_at, "%s pass %ld", phase, pass);
        else
            snprintf(outside.max_at, sizeof outside.max_at, "%s", phase);
    }
    pthread_mutex_unlock(&outside.lock);
}

FT_EXPORT int ft_get_gpu_memory_usage(ft_gpu_memory_usage_t *out)
{
    if (!ft_shim_active || out == NULL || disc == NULL)
        return -1;
    int made = __atomic_load_n(&plan.made, __ATOMIC_ACQUIRE);
    if (made && plan.rc != 0)
        return -1;
    usage_now(out);
    /* Before the plan no byte is known to be a weight: all of it is other_bytes, and
     * the budget is FT_SPILL's once it holds one. */
    out->budget_bytes = made ? plan.in.budget_bytes : __atomic_load_n(&spill_limit, __ATOMIC_RELAXED);
    return made ? 0 : 1;
}

void ft_hooks_trace(void *trace_writer)
{
    ft_trace_writer_t *w = trace_writer;
    if (disc != NULL)
        ft_disc_trace(disc, w);
    pthread_mutex_lock(&prof.lock);
    if (prof.prof != NULL && prof.n > 0) {
        ft_trace_begin(w, FT_TRACE_PROFILE);
        ft_trace_put_u32(w, (uint32_t)ft_prof_passes(prof.prof));
        ft_trace_put_u32(w, (uint32_t)prof.n);
        for (size_t i = 0; i < prof.n; i++) {
            ft_prof_stat_t st = ft_prof_stat(prof.prof, i);
            ft_trace_put_str(w, ft_disc_unit(disc, i)->name);
            ft_trace_put_u32(w, (uint32_t)st.n);
            ft_trace_put_u64(w, (uint64_t)(st.min * 1000.0 + 0.5));
            ft_trace_put_u64(w, (uint64_t)(st.median * 1000.0 + 0.5));
            ft_trace_put_u64(w, (uint64_t)(st.max * 1000.0 + 0.5));
        }
        ft_trace_end(w);
    }
    if (plan.made && plan.rc == 0) {
        ft_trace_begin(w, FT_TRACE_PLAN);
        ft_trace_put_u32(w, plan.in.budget_bytes ? 1 : 0);
        ft_trace_put_u64(w, plan.in.budget_bytes);
        ft_trace_put_u64(w, plan.in.other_bytes);
        ft_trace_put_u32(w, (uint32_t)plan.out.slots);
        ft_trace_put_u64(w, plan.out.slot_bytes);
        ft_trace_put_u64(w, plan.out.device_bytes);
        ft_trace_put_u64(w, (uint64_t)(plan.out.step_us * 1000.0 + 0.5));
        ft_trace_put_u64(w, (uint64_t)(plan.out.all_resident_us * 1000.0 + 0.5));
        ft_trace_put_u32(w, (uint32_t)plan.in.n);
        /* The plan as made: units made to stream later (demote_for) are counted in the
         * RESIDENCY record. */
        for (size_t i = 0; i < plan.in.n; i++) {
            int demoted = res.units != NULL && (int)i < res.n_units && res.units[i].demoted;
            ft_trace_put_u32(w, (uint32_t)(plan.out.resident[i] || demoted));
            ft_trace_put_u32(w, (uint32_t)plan.out.slot[i]);
            ft_trace_put_u64(w, (uint64_t)(plan.out.unit_stall_us[i] * 1000.0 + 0.5));
        }
        ft_trace_end(w);
    }
    if (engine_phase() == PHASE_STREAMING) {
        uint64_t n;
        double us = step_median_us(&n);
        ft_trace_begin(w, FT_TRACE_RESIDENCY);
        ft_trace_put_u64(w, res.loads);
        ft_trace_put_u64(w, res.prefetches);
        ft_trace_put_u64(w, res.misses);
        ft_trace_put_u64(w, res.copied_in_bytes);
        ft_trace_put_u64(w, res.unloads);
        ft_trace_put_u64(w, res.peak_held_bytes);
        ft_trace_put_u64(w, n);
        ft_trace_put_u64(w, (uint64_t)(us * 1000.0 + 0.5));
        ft_trace_put_u64(w, (uint64_t)(plan.out.step_us * 1000.0 + 0.5));
        ft_trace_put_u64(w, res.written_back + res.tail_written_back);
        ft_trace_put_u64(w, res.unsure_skipped);
        ft_trace_put_u64(w, res.host_copies);
        uint64_t demoted = 0;
        for (int i = 0; i < res.n_units; i++)
            demoted += (uint64_t)res.units[i].demoted;
        ft_trace_put_u64(w, demoted);
        ft_trace_put_u64(w, spill_faults);
        ft_trace_put_u64(w, spill_evictions);
        pthread_mutex_lock(&outside.lock);
        ft_trace_put_u64(w, outside.first);
        ft_trace_put_u64(w, outside.max);
        ft_trace_put_u64(w, outside.last);
        ft_trace_put_u64(w, (uint64_t)outside.n);
        pthread_mutex_unlock(&outside.lock);
        ft_trace_end(w);
        ft_trace_begin(w, FT_TRACE_MISSES);
        ft_trace_put_u32(w, (uint32_t)res.n_miss_log);
        for (int i = 0; i < res.n_miss_log; i++) {
            const struct miss *m = &res.miss_log[i];
            ft_trace_put_u32(w, (uint32_t)m->unit);
            ft_trace_put_u64(w, m->pass);
            ft_trace_put_u64(w, m->pos >= 0 ? (uint64_t)m->pos + 1 : 0);
            ft_trace_put_u32(w, (uint32_t)m->off_script);
            ft_trace_put_str(w, m->kernel);
        }
        ft_trace_end(w);
    }
    timing_trace(w);
    if (bw.bytes > 0) {
        ft_trace_begin(w, FT_TRACE_BANDWIDTH);
        ft_trace_put_u64(w, bw.bytes);
        ft_trace_put_u64(w, (uint64_t)(bw.h2d * 1e6));
        ft_trace_put_u64(w, (uint64_t)(bw.d2h * 1e6));
        ft_trace_put_u64(w, (uint64_t)(bw.h2d_both * 1e6));
        ft_trace_put_u64(w, (uint64_t)(bw.d2h_both * 1e6));
        ft_trace_end(w);
    }
    pthread_mutex_unlock(&prof.lock);
}

void ft_hooks_report(void)
{
    if (disc == NULL)
        return;
    int streaming = engine_phase() == PHASE_STREAMING;
    report_launch_self();
    capture_report();
    pthread_mutex_lock(&outside.lock);
    if (outside.n > 0)
        FT_INFO("device memory outside FlexTensor's count (in use on the device, less what "
                "FlexTensor holds): %.2f MiB at the first sample, at most %.2f MiB (from %s on), %.2f MiB "
                "at the last of %d", (double)outside.first / 1048576.0, (double)outside.max / 1048576.0,
                outside.max_at, (double)outside.last / 1048576.0, outside.n);
    pthread_mutex_unlock(&outside.lock);
    if (streaming)
        FT_INFO("residency: %llu load(s), %llu of them prefetched and %llu on demand (misses), "
                "%.1f MiB copied in; %llu unload(s), %llu of them copied back (changed, or "
                "not proven unchanged by the device checksum); at most %.1f MiB of streamed "
                "units held at once",
                (unsigned long long)res.loads, (unsigned long long)res.prefetches,
                (unsigned long long)res.misses, (double)res.copied_in_bytes / 1048576.0,
                (unsigned long long)res.unloads, (unsigned long long)(res.written_back + res.tail_written_back),
                (double)res.peak_held_bytes / 1048576.0);
    if (streaming && res.moves > 0)
        FT_INFO("residency: %llu of the prefetches made on FlexTensor's prefetching thread, off the "
                "application's (FT_PREFETCH_THREAD); %llu of them handed the leaving unit's memory over in "
                "stream order, its copy issued before the leaving unit's end (%.1f us a hand-over after, "
                "off the device's path)", (unsigned long long)res.moves, (unsigned long long)res.handovers,
                res.handovers > 0 ? (double)res.ns_tail / 1e3 / (double)res.handovers : 0.0);
    if (streaming && res.moves > 0)
        FT_INFO("residency: the application's threads waited for the prefetching thread: %.1f ms for units in a "
                "move (%llu time(s)), %.1f ms for units it was about to load (%llu), %.1f ms in other calls "
                "(allocations, graph launches; %llu), %.1f ms for hand-overs' tails (%llu)",
                (double)res.ns_mover_wait[MOVER_WAIT_UNIT] / 1e6, (unsigned long long)res.mover_waits[MOVER_WAIT_UNIT],
                (double)res.ns_mover_wait[MOVER_WAIT_CATCH] / 1e6, (unsigned long long)res.mover_waits[MOVER_WAIT_CATCH],
                (double)res.ns_mover_wait[MOVER_WAIT_ALL] / 1e6, (unsigned long long)res.mover_waits[MOVER_WAIT_ALL],
                (double)res.ns_mover_wait[MOVER_WAIT_TAIL] / 1e6, (unsigned long long)res.mover_waits[MOVER_WAIT_TAIL]);
    if (streaming && res.moves > res.handovers)
        FT_INFO("residency: of the prefetching thread's moves that evicted with a host wait instead, %llu had no "
                "checksum issued behind the leaving unit's last launch, %llu one its later calls made stale, %llu "
                "no copy back behind it (no reference sum, a unit changed before, a host store not pinned), "
                "%llu regions of other sizes than the unit coming in, %llu other reasons",
                (unsigned long long)res.ho_refused[HO_NO_SUM], (unsigned long long)res.ho_refused[HO_USED_SINCE],
                (unsigned long long)res.ho_refused[HO_NO_BACK], (unsigned long long)res.ho_refused[HO_SIZES],
                (unsigned long long)res.ho_refused[HO_OTHER]);
    if (streaming && (res.short_evictions > 0 || res.short_failed > 0))
        FT_WARN("residency: the device had no physical memory for some loads (another process holds it, or "
                "the budget is above what the device has): %llu loaded unit(s) made to leave for them, %llu "
                "load(s) given up", (unsigned long long)res.short_evictions, (unsigned long long)res.short_failed);
    if (streaming && res.over_calls > 0)
        FT_INFO("residency: %llu call(s) read more streamed units than the %d slot(s) hold (at most %d "
                "beyond); %llu unload(s) brought the units held back within the slots after them",
                (unsigned long long)res.over_calls, res.slots, res.over_most, (unsigned long long)res.shed);
    if (streaming && res.stale_pins > 0)
        FT_INFO("residency: %llu unit(s) kept on the device after %d loads each for stale argument words "
                "(resident units made to stream instead, to hold the budget)",
                (unsigned long long)res.stale_pins, STALE_MISSES_PIN);
    if (streaming && res.graph_pins > 0)
        FT_INFO("residency: %llu unit(s) kept on the device because a CUDA graph reads them in many places apart "
                "(resident units made to stream instead, to hold the budget)", (unsigned long long)res.graph_pins);
    if (streaming && res.stale_splits > 0)
        FT_INFO("residency: %llu region(s) split where their units' stale argument words fell, rather than "
                "the units kept on the device: the regions' parts from there, %.1f MiB in all, stay on it",
                (unsigned long long)res.stale_splits, (double)res.stale_split_bytes / 1048576.0);
    if (streaming && res.off_record > 0)
        FT_INFO("residency: passes left the record %llu time(s) (a launch other than the recorded pass's at "
                "its position; until the pass's end, or a launch's weight puts it back, prefetch goes by "
                "the units touched, not by position; FT_LOG_LEVEL=debug says where)",
                (unsigned long long)res.off_record);
    if (streaming && res.skipped_ends > 0)
        FT_INFO("residency: %llu time(s) a launch's weight put its pass past a unit's last launch (fewer "
                "launches between two weights than the recorded pass had): the unit's checksum was issued there",
                (unsigned long long)res.skipped_ends);
    if (streaming && res.splits > 0)
        FT_INFO("residency: %llu region(s) split: other data past their weights, %.1f MiB in all, stays on the "
                "device; their units stream the rest", (unsigned long long)res.splits,
                (double)res.split_bytes / 1048576.0);
    if (res.room_in_bytes > 0)
        FT_INFO("residency: %.1f MiB of the program's pools' room, left in host-located memory at the switch, "
                "brought to the device after it for calls that point into it", (double)res.room_in_bytes / 1048576.0);
    if (res.host_copies > 0)
        FT_INFO("residency: %llu copy(ies) or set(s) to or from units in host memory served there, "
                "without loading them", (unsigned long long)res.host_copies);
    timing_report();
    host_store_report();
    handover_report();
    progmap_report();
    ft_cupti_audit_report();
    if (spill_hinted > 0)
        FT_INFO("FT_SPILL: %llu allocation(s) started in host memory because the saved profile's plan "
                "streams them", (unsigned long long)spill_hinted);
    if (spill_host_copies > 0)
        FT_INFO("FT_SPILL: before the plan, %llu copy(ies) from host memory (%.1f MiB) into allocations in "
                "host memory served there", (unsigned long long)spill_host_copies,
                (double)spill_host_copied / 1048576.0);
    if (spill_refused > 0)
        FT_WARN("FT_SPILL: before the plan, the device refused the memory of an allocation moving back in; "
                "%llu other(s) moved out for it (another process holds memory, or the budget is above what "
                "the device has)", (unsigned long long)spill_refused);
    if (spill_faults > 0 || spill_evictions > 0)
        FT_INFO("FT_SPILL: before the plan, %llu allocation(s) moved in and %llu out "
                "(%.1f ms of copies at the measured bandwidth)",
                (unsigned long long)spill_faults, (unsigned long long)spill_evictions,
                (double)__atomic_load_n(&spill_ns, __ATOMIC_RELAXED) / 1e6);
    if (streaming && res.loads > 0)
        FT_INFO("residency: host time per load: %.1f us waiting for the evicted unit, %.1f us "
                "unloading it (checksum wait included), %.1f us mapping, %.1f us issuing copies; "
                "%llu of %llu regions mapped onto the physical memory of the unit unloaded before",
                (double)res.ns_wait / 1e3 / (double)res.loads, (double)res.ns_unmap / 1e3 / (double)res.loads,
                (double)res.ns_map / 1e3 / (double)res.loads, (double)res.ns_copy / 1e3 / (double)res.loads,
                (unsigned long long)res.reused, (unsigned long long)res.region_loads);
    if (streaming && res.loads > 0)
        FT_INFO("residency: of the unloading per load, %.1f us waiting for the checksum, %.1f us copying back, "
                "%.1f us in cuMemUnmap (%llu call(s) for %llu region(s))",
                (double)(res.ns_ck_wait + res.ns_tail_wait) / 1e3 / (double)res.loads,
                (double)res.ns_back / 1e3 / (double)res.loads,
                (double)(res.ns_unmap_call + res.ns_tail_unmap) / 1e3 / (double)res.loads,
                (unsigned long long)(res.unmap_calls + res.tail_unmap_calls),
                (unsigned long long)(res.unmapped + res.tail_unmapped));
    if (streaming && res.loads > 0)
        FT_INFO("residency: of the mapping per load, %.1f us in cuMemMap (%llu call(s)), %.1f us in "
                "cuMemSetAccess (%llu call(s) for %llu region(s)), %.1f us creating physical "
                "memory (for %llu region(s) in all, no "
                "unloaded one matching their size), %.1f us releasing what was not reused",
                (double)res.ns_map_call / 1e3 / (double)res.loads, (unsigned long long)res.map_calls,
                (double)res.ns_access / 1e3 / (double)res.loads,
                (unsigned long long)res.access_calls, (unsigned long long)res.region_loads,
                (double)res.ns_create / 1e3 / (double)res.loads,
                (unsigned long long)(res.region_loads - res.reused),
                (double)res.ns_release / 1e3 / (double)res.loads);
    if (streaming && res.unsure_skipped > 0)
        FT_INFO("residency: %llu touch(es) of units not loaded were taken for stale pointers and "
                "loaded nothing: %llu found only at argument words that held garbage, or never a "
                "device address, in discovery; %llu from a kernel that touched no weight in the "
                "recorded pass or at a position outside their unit's range; %llu touched by the "
                "same kernel every few launches (FT_STRICT_GUARD=1 loads them)",
                (unsigned long long)res.unsure_skipped,
                (unsigned long long)(res.unsure_skipped - res.unexpected_skipped - res.repeat_skipped),
                (unsigned long long)res.unexpected_skipped, (unsigned long long)res.repeat_skipped);
    if (streaming) {
        uint64_t n;
        double us = step_median_us(&n);
        if (n > 0)
            FT_INFO("residency: measured step %.1f us (median of %llu, first launch of a pass to "
                    "the next, idle time between passes included); the plan predicted %.1f us, "
                    "%.1f us all resident", us, (unsigned long long)n, plan.out.step_us,
                    plan.out.all_resident_us);
        else
            FT_INFO("residency: no step measured (fewer than two passes completed since the "
                    "engine started); the plan predicted %.1f us", plan.out.step_us);
    }
    static const char *const state[] = { "waiting for the first launch", "observing", "done" };
    FT_INFO("discovery: %s, %d iteration(s), %zu units, %.1f MiB of weights",
            state[ft_disc_state(disc)], ft_disc_iterations(disc), ft_disc_unit_count(disc),
            (double)ft_disc_weight_bytes(disc) / 1048576.0);
    ft_disc_status_t st;
    ft_disc_status(disc, &st);
    char moves[192] = "";
    if (st.track_resyncs > 0)
        snprintf(moves, sizeof moves, "; %llu time(s) a launch's weight moved its pass to where the recorded "
                 "pass read it (launches added or left out since shift positions)",
                 (unsigned long long)st.track_resyncs);
    if (st.track_starts > 0)
        FT_INFO("discovery: %llu pass(es) followed since%s", (unsigned long long)st.track_starts, moves);
}

/* Why the plan streams nothing, into buf (plan.rc == 0). */
static void verdict_all_resident(char *buf, size_t len)
{
    size_t n = plan.in.n, kept = 0;
    for (size_t i = 0; i < n; i++)
        kept += plan.in.units[i].keep_resident != 0;
    char a[32], b[32];
    if (kept == n)
        snprintf(buf, len, "all %zu units stay resident: %s keeps every one", n, kept_by());
    else if (plan.in.budget_bytes > 0)
        /* the least step of all: chosen whenever it fits */
        snprintf(buf, len, "all %zu units stay resident: the budget %s holds the whole model (%s "
                 "planned)", n, human_bytes(plan.in.budget_bytes, a, sizeof a),
                 human_bytes(plan.out.device_bytes, b, sizeof b));
    else
        snprintf(buf, len, "all %zu units stay resident: latency mode (no FT_GPU_MEM_LIMIT or "
                 "FT_MAX_GPU_MEM_FRACTION), and no plan that streams saves memory within "
                 "FT_TIME_BUDGET_FACTOR of the all-resident step", n);
}

/* Why no plan was made, into buf: the phase the process ended in. */
static void verdict_no_plan(char *buf, size_t len)
{
    ft_disc_status_t st;
    ft_disc_status(disc, &st);
    char marker[160] = "";
    if (cfgp->iteration_marker[0] && st.marker_hits == 0)
        snprintf(marker, sizeof marker, "; FT_ITERATION_MARKER '%s' matched no kernel", cfgp->iteration_marker);
    if (cfgp->skip_discovery) {
        snprintf(buf, len, "FT_SKIP_DISCOVERY skipped discovery and no saved profile was loaded");
    } else if (st.launches == 0) {
        snprintf(buf, len, "no kernel was launched%s",
                 managed_device() >= 0 ? " on the managed device" : "");
    } else if (ft_disc_state(disc) != FT_DISC_DONE) {
        if (st.restarts > 0)
            snprintf(buf, len, "discovery found no weights: the passes it found touched none "
                     "(%d restart(s)), and the program ended before another pass completed (%llu "
                     "launches)%s", st.restarts, (unsigned long long)st.launches, marker);
        else
            snprintf(buf, len, "the program ended during discovery, after %d of %d iteration(s) "
                     "(%llu launches)%s", st.iterations, st.iters_wanted,
                     (unsigned long long)st.launches, marker);
    } else if (ft_disc_unit_count(disc) == 0) {
        snprintf(buf, len, "discovery found no weights (%d iteration(s), %d restart(s))",
                 st.iterations, st.restarts);
    } else if (prof.prof != NULL && prof.n > 0) {
        snprintf(buf, len, "the program ended during profiling, after %d of %d pass(es) timed",
                 ft_prof_passes(prof.prof), cfgp->profiling_iters < 1 ? 1 : cfgp->profiling_iters);
    } else {
        snprintf(buf, len, "profiling could not start (no CUDA events)");
    }
    /* A program whose work runs as CUDA graph replays before any plan: discovery never
     * sees those kernels (graphs captured early, torch.compile's reduce-overhead). */
    uint64_t g = capture_unobserved();
    size_t at = strlen(buf);
    if (g > 0 && at < len)
        snprintf(buf + at, len - at, "; %llu CUDA graph launch(es) before the plan, whose kernels discovery "
                 "does not observe", (unsigned long long)g);
}

void ft_hooks_verdict(void)
{
    if (disc == NULL)
        return;
    char why[640], a[32], b[32];
    const char *kind = "no plan";
    const char *stood_down = stood_down_why();
    if (stood_down != NULL) {
        kind = "stood down";
        snprintf(why, sizeof why, "%s", stood_down);
    } else if (!__atomic_load_n(&plan.made, __ATOMIC_ACQUIRE)) {
        if (plan.rc == -ENOMEM) /* make_plan's arrays */
            snprintf(why, sizeof why, "planning ran out of memory");
        else
            verdict_no_plan(why, sizeof why);
        uint64_t own = __atomic_load_n(&program_mapped_peak, __ATOMIC_RELAXED);
        size_t at = strlen(why);
        if (own > 0 && at < sizeof why)
            snprintf(why + at, sizeof why - at, "; the program mapped up to %s of device memory itself (cuMemMap of "
                     "handles FlexTensor does not stand in for), which FlexTensor neither searches nor moves",
                     human_bytes(own, a, sizeof a));
    } else if (plan.rc == -ENOSPC) {
        size_t kept = 0;
        for (size_t i = 0; i < plan.in.n; i++)
            kept += plan.in.units[i].keep_resident != 0;
        char k[96] = "";
        if (kept > 0)
            snprintf(k, sizeof k, "; %zu unit(s) kept resident by %s", kept, kept_by());
        snprintf(why, sizeof why, "the budget %s is below the smallest that works, %s (FT_GPU_MEM_LIMIT "
                 "or FT_MAX_GPU_MEM_FRACTION%s)", human_bytes(plan.in.budget_bytes, a, sizeof a),
                 human_bytes(plan.min_budget, b, sizeof b), k);
    } else if (plan.rc != 0) {
        snprintf(why, sizeof why, "planning failed (error %d)", plan.rc);
    } else if (plan.out.slots == 0) {
        verdict_all_resident(why, sizeof why);
    } else if (res_start_failed) {
        snprintf(why, sizeof why, "the residency engine could not be set up (out of memory or CUDA events)");
    } else if (engine_phase() != PHASE_STREAMING) {
        snprintf(why, sizeof why, "the program ended right after planning, before the first unit streamed");
    } else {
        int streaming = 0, demoted = 0, pinned = 0;
        size_t kept = 0;
        for (int i = 0; i < res.n_units; i++) {
            streaming += res.units[i].n > 0 && !res.units[i].pinned;
            pinned += res.units[i].n > 0 && res.units[i].pinned;
            demoted += res.units[i].demoted;
            kept += plan.in.units[i].keep_resident != 0;
        }
        char extra[224] = "";
        size_t at = 0;
        if (kept > 0)
            at += (size_t)snprintf(extra + at, sizeof extra - at, "; %zu kept resident by %s", kept, kept_by());
        if (pinned > 0 && at < sizeof extra)
            at += (size_t)snprintf(extra + at, sizeof extra - at, "; %d kept on the device after the plan (stale "
                                   "argument words, or a CUDA graph reading it all over)", pinned);
        if (demoted > 0 && at < sizeof extra)
            snprintf(extra + at, sizeof extra - at, "; %d made to stream past the plan to hold the budget",
                     demoted);
        kind = "offloaded";
        if (plan.in.budget_bytes > 0)
            snprintf(why, sizeof why, "%d of %d units stream (memory mode, budget %s, %s planned%s)",
                     streaming, res.n_units, human_bytes(plan.in.budget_bytes, a, sizeof a),
                     human_bytes(plan.out.device_bytes, b, sizeof b), extra);
        else
            snprintf(why, sizeof why, "%d of %d units stream (latency mode, no budget, %s planned%s)",
                     streaming, res.n_units, human_bytes(plan.out.device_bytes, b, sizeof b), extra);
    }
    size_t at = strlen(why);
    const ft_budget_over_t *o = budget_over(), *so = spill_over();
    if (o->count > 0 && at < sizeof why) {
        char c[32], d[32];
        at += (size_t)snprintf(why + at, sizeof why - at, "; budget exceeded by up to %s after the plan "
                               "(%llu allocation(s) served past it; non-weight memory alone needed %s; "
                               "a budget of %s would have held it)", human_bytes(o->most, a, sizeof a),
                               (unsigned long long)o->count, human_bytes(o->other, c, sizeof c),
                               human_bytes(o->need, d, sizeof d));
    }
    const ft_budget_over_t *ko = budget_kept_over();
    if (ko->count > 0 && at < sizeof why) {
        char d[32];
        at += (size_t)snprintf(why + at, sizeof why - at, "; budget exceeded by up to %s after the plan by the "
                               "tails of split regions FlexTensor keeps on the device (a budget of %s would have "
                               "held them)", human_bytes(ko->most, a, sizeof a), human_bytes(ko->need, d, sizeof d));
    }
    if (so->count > 0 && at < sizeof why)
        at += (size_t)snprintf(why + at, sizeof why - at, "; budget exceeded by up to %s before the plan "
                               "(FT_SPILL could move nothing more out for %llu call(s))",
                               human_bytes(so->most, a, sizeof a), (unsigned long long)so->count);
    char note[160], cap[160];
    if (at < sizeof why)
        at += (size_t)snprintf(why + at, sizeof why - at, "%s", capture_spill_note(cap, sizeof cap));
    if (at < sizeof why)
        at += (size_t)snprintf(why + at, sizeof why - at, "%s", control_note(cap, sizeof cap));
    if (at < sizeof why)
        at += (size_t)snprintf(why + at, sizeof why - at, "%s", reload_note(cap, sizeof cap));
    if (at < sizeof why)
        snprintf(why + at, sizeof why - at, "%s", handover_note(note, sizeof note));
    FT_INFO("verdict: %s: %s", kind, why);
}

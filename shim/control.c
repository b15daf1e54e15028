/* control.c - the runtime control API (docs/control.md): ft_set_gpu_mem_limit,
 * ft_request_replan, ft_release and ft_resume.
 *
 * A new limit is checked at the call (a plan must fit it, with the non-weight memory
 * the process has shown) and carried out at the next pass boundary: the plan is made
 * again for it and the units move, the resident ones that now stream first, then those
 * that now stay. A re-profile times the next FT_PROFILING_ITERS passes as they stream,
 * each unit from its first launch (after the waits for its weights) to the next unit's
 * (before them), so that the stalls of streaming stay out of the compute times; then it
 * plans again. A release moves every weight it can to host memory at the call, and a
 * resume brings the plan back at the call: the program is between requests then, as
 * vLLM's sleep mode is. What a pass boundary does with the requests waiting, and which
 * units move between two plans, are core/control.c's decisions; the moves are the
 * residency engine's own (evict_unit, res_make_resident, res_unload_all, res_shed).
 *
 * Owns: ctl (the requests), rp (the re-profile), the units resident before a release,
 * the counts for the exit report, control_waiting: all under res.lock, which the API
 * calls take as a guarded call does, and which the guard holds when it calls
 * control_launch. The limit set at run time (limit_set, limit_bytes) is atomic:
 * configured_budget reads it from any thread. It moves the phase out of OFF, where a
 * plan that streamed nothing gives way to one that streams, and through the switch, as
 * engine_enter does. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include "core/control.h"

static ft_ctl_t ctl;
int control_waiting;

/* The units on the device for good before ft_release (1 each), and the slots then: what
 * ft_resume brings back. */
static int *kept;
static int kept_slots;

/* For the exit report's verdict. */
static unsigned n_limits, n_replans, n_releases;

/* --- the limit set at run time ------------------------------------------------------- */

static int limit_set;
static uint64_t limit_bytes;

int control_limit(uint64_t *limit)
{
    if (!__atomic_load_n(&limit_set, __ATOMIC_ACQUIRE))
        return 0;
    *limit = __atomic_load_n(&limit_bytes, __ATOMIC_RELAXED);
    return 1;
}

static void limit_store(uint64_t bytes)
{
    __atomic_store_n(&limit_bytes, bytes, __ATOMIC_RELAXED);
    __atomic_store_n(&limit_set, 1, __ATOMIC_RELEASE);
}

/* The limit in force: ft_set_gpu_mem_limit's, else FT_GPU_MEM_LIMIT. */
static uint64_t limit_now(void)
{
    uint64_t limit = cfgp->gpu_mem_limit;
    control_limit(&limit);
    return limit;
}

static const char *limit_text(uint64_t limit, char *buf, size_t len)
{
    return limit == 0 ? "none" : human_bytes(limit, buf, len);
}

/* --- a plan made again --------------------------------------------------------------- */

typedef struct {
    ft_plan_input_t in;
    ft_plan_t out;
    uint64_t min_budget;
    int rc;
} cand_t;

static void cand_free(cand_t *c)
{
    free((void *)c->in.units);
    free(c->out.resident);
    free(c->out.slot);
    free(c->out.unit_stall_us);
    memset(c, 0, sizeof *c);
}

/* Unit i cannot stream now, whatever a plan says (res.lock held): demote_for or a
 * release found it cannot; it changed too often or was loaded too often for stale
 * addresses, and stays on the device once loaded (pinned); or the switch could not make
 * it stream (planned streamed, no region moved). A new plan keeps it resident, so that
 * its memory is counted where it is. */
static int stays(size_t i)
{
    if (res.units == NULL || (int)i >= res.n_units)
        return 0;
    const res_unit_t *un = &res.units[i];
    return un->unstreamable || un->pinned || (!plan.out.resident[i] && un->n == 0);
}

/* The budget FT_MAX_GPU_MEM_FRACTION and `limit` give, capped by what the device has
 * free plus what the process holds through the shim, as the first plan's was
 * (res.lock held). */
static uint64_t budget_for(uint64_t limit)
{
    size_t free_b = 0, total_b = 0;
    cudaError_t pending = own_pending();
    if (REAL(cudaMemGetInfo) == NULL || own_call(REAL(cudaMemGetInfo)(&free_b, &total_b), pending) != cudaSuccess)
        free_b = total_b = 0;
    ft_gpu_memory_usage_t u;
    usage_locked(&u);
    uint64_t budget = ft_budget_configured(limit, cfgp->max_gpu_mem_fraction, total_b);
    return ft_budget_capped(budget, total_b, (uint64_t)free_b + u.total_bytes);
}

/* The non-weight memory a new plan leaves room for (res.lock held): the plan's figure,
 * the peak profiling saw, or what the process holds now when that is more (a KV cache
 * grown since). Never less: a pass as large as the largest seen may come again. Weights
 * several units share stay resident and count here, as make_plan counts them. */
static uint64_t other_now(void)
{
    if (plan.rc != 0)
        return plan.in.other_bytes;
    ft_gpu_memory_usage_t u;
    usage_locked(&u);
    uint64_t units = 0;
    for (size_t i = 0; i < plan.in.n; i++)
        units += plan.in.units[i].bytes;
    uint64_t other = u.other_bytes + (plan.weight_bytes > units ? plan.weight_bytes - units : 0);
    return other > plan.in.other_bytes ? other : plan.in.other_bytes;
}

/* A plan for `limit` (res.lock held): plan.in's units, their compute times from `times`
 * where it has them (a re-profile; NULL: the plan's), the units that cannot stream now
 * kept resident, the non-weight memory of other_now. Returns ft_plan_choose's answer,
 * also in c->rc; -ENOSPC when the budget is below the smallest that works
 * (c->min_budget). c is the caller's to cand_free. */
static int cand_make(cand_t *c, uint64_t limit, const ft_prof_t *times)
{
    size_t n = plan.in.n;
    memset(c, 0, sizeof *c);
    ft_plan_unit_t *units = calloc(n ? n : 1, sizeof *units);
    c->in.units = units;
    c->out.resident = calloc(n ? n : 1, sizeof *c->out.resident);
    c->out.slot = calloc(n ? n : 1, sizeof *c->out.slot);
    c->out.unit_stall_us = calloc(n ? n : 1, sizeof *c->out.unit_stall_us);
    if (units == NULL || !c->out.resident || !c->out.slot || !c->out.unit_stall_us)
        return c->rc = -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        units[i] = plan.in.units[i];
        if (times != NULL && ft_prof_stat(times, i).n > 0)
            units[i].compute_us = ft_prof_stat(times, i).median;
        units[i].keep_resident |= stays(i);
    }
    c->in = plan.in;
    c->in.units = units;
    c->in.budget_bytes = budget_for(limit);
    c->in.other_bytes = other_now();
    return c->rc = plan_choose(&c->in, &c->out, &c->min_budget, NULL, NULL);
}

/* The plan becomes c's (res.lock held): its numbers, its slots, the units' compute
 * times. The resident set (plan.out.resident) is the caller's: where the engine runs,
 * move_units writes what it could carry out. */
static void cand_install(const cand_t *c)
{
    ft_plan_unit_t *units = (ft_plan_unit_t *)plan.in.units; /* make_plan's, ours to change */
    size_t n = plan.in.n;
    for (size_t i = 0; i < n; i++)
        units[i].compute_us = c->in.units[i].compute_us;
    /* budget_admit and budget_view read it without res.lock */
    __atomic_store_n(&plan.in.budget_bytes, c->in.budget_bytes, __ATOMIC_RELAXED);
    plan.in.other_bytes = c->in.other_bytes;
    memcpy(plan.out.slot, c->out.slot, n * sizeof *plan.out.slot);
    memcpy(plan.out.unit_stall_us, c->out.unit_stall_us, n * sizeof *plan.out.unit_stall_us);
    plan.out.slots = c->out.slots;
    plan.out.slot_bytes = c->out.slot_bytes;
    plan.out.device_bytes = c->out.device_bytes;
    plan.out.step_us = c->out.step_us;
    plan.out.all_resident_us = c->out.all_resident_us;
    plan.out.stall_us = c->out.stall_us;
    plan.min_budget = c->min_budget;
    plan.rc = 0;
}

/* The smallest budget a plan can have, said when a limit is refused. */
static void say_too_small(const char *what, uint64_t limit, const cand_t *c)
{
    char a[32], b[32], d[32], e[32];
    FT_ERROR("control: %s refused: the budget %s (FT_GPU_MEM_LIMIT %s) is below the smallest that works "
             "now, %s, with %s of non-weight memory; nothing changes", what,
             human_bytes(c->in.budget_bytes, a, sizeof a), limit_text(limit, d, sizeof d),
             human_bytes(c->min_budget, b, sizeof b), human_bytes(c->in.other_bytes, e, sizeof e));
}

/* --- the engine carries a new plan out ----------------------------------------------- */

/* The units move from the resident set in force (the units with no streamed region) to
 * now[] with `slots` slots (res.lock held, the engine on, no capture under way). The
 * device is drained first: a resident unit's calls leave no events behind. Resident
 * units that now stream leave first (evict_unit), so that their memory is there for the
 * others; then the loaded units that now stay are kept (no copy), the slots change
 * (those beyond them unloaded, res_shed), and the others that now stay are loaded.
 * plan.out.resident says what was carried out: a unit that cannot move stays as it
 * was. Counts in *made_stream, *made_resident and *failed. */
static void move_units(const int *now, int slots, int *made_stream, int *made_resident, int *failed)
{
    int n = res.n_units;
    int *was = calloc((size_t)(n ? n : 1), 3 * sizeof *was);
    *made_stream = *made_resident = *failed = 0;
    if (was == NULL) {
        FT_ERROR("control: out of memory: the units stay where they are");
        *failed = n;
        return;
    }
    int *demote = was + n, *promote = was + 2 * n, nd, np;
    for (int i = 0; i < n; i++)
        was[i] = res.units[i].n == 0;
    ft_ctl_moves(was, now, n, demote, &nd, promote, &np);
    if (nd + np > 0)
        REAL(cudaDeviceSynchronize)();
    for (int k = 0; k < nd; k++) {
        int i = demote[k];
        uint64_t moved = 0, shared = 0;
        plan.out.resident[i] = 0;
        if (evict_unit((size_t)i, &moved, &shared) != 0) {
            plan.out.resident[i] = 1;
            res.units[i].unstreamable = 1; /* never tried again (evict_unit said why) */
            ++*failed;
        } else {
            ++*made_stream;
        }
    }
    /* Loaded ones first (no copy), so that res_shed does not unload what stays; then
     * the others (a unit still loaded then was tried already). */
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < np; k++) {
            int i = promote[k];
            if (res.units[i].n == 0 || res.units[i].loaded != (pass == 0))
                continue;
            if (res_make_resident(i) == 0) {
                plan.out.resident[i] = 1;
                ++*made_resident;
            } else {
                FT_WARN("control: %s could not be loaded whole: it streams on",
                        ft_disc_unit(disc, (size_t)i)->name);
                ++*failed;
            }
        }
        if (pass == 0) {
            res.slots = slots;
            res_shed(-1, NULL, 0);
        }
    }
    /* Units that stream with no slot to stream through (every plan unit resident, one
     * could not be loaded): loads go over the slots rather than fault, but give them
     * the fewest a plan has. */
    for (int i = 0; i < n && res.slots == 0; i++)
        if (res.units[i].n > 0)
            res.slots = cfgp->min_blocks;
    free(was);
}

/* c becomes the plan, and the engine carries it out (res.lock held, the engine on, no
 * capture under way); `why` and what moved are said. */
static void replan_engine(cand_t *c, const char *why)
{
    int stream, resident, failed;
    cand_install(c);
    move_units(c->out.resident, c->out.slots, &stream, &resident, &failed);
    int streaming = 0;
    for (int i = 0; i < res.n_units; i++)
        streaming += res.units[i].n > 0;
    char a[32], b[32];
    FT_INFO("control: %s: %d of %d units stream through %d slot(s) of %s (budget %s); %d made to stream, %d "
            "made resident%s; predicted step %.1f us against %.1f us all resident", why, streaming, res.n_units,
            res.slots, human_bytes(plan.out.slot_bytes, a, sizeof a),
            plan.in.budget_bytes ? human_bytes(plan.in.budget_bytes, b, sizeof b) : "none (latency mode)",
            stream, resident, failed ? ", some could not move (said above)" : "",
            plan.out.step_us, plan.out.all_resident_us);
    /* The new plan's budget holds from now on, as after the first plan: an allocation
     * made meanwhile may need resident units to stream (demote_for). */
    if (plan.in.budget_bytes > 0 && !capture_under_way())
        budget_hold_locked("the new plan", 0);
}

/* --- a run whose plan streamed nothing (OFF) ----------------------------------------- */

/* The engine never started, and can now: a plan was made (its inputs kept), nothing
 * failed at a switch, and FT_SPILL holds nothing in host memory. `why` says otherwise
 * (res.lock held). */
static int restartable(const char **why)
{
    if (!plan.made || plan.in.units == NULL || plan.out.resident == NULL || plan.out.slot == NULL ||
        plan.out.unit_stall_us == NULL) {
        *why = "no plan was made in this run";
        return 0;
    }
    if (res_start_failed || res.units != NULL) {
        *why = "the residency engine could not be set up";
        return 0;
    }
    if (state_spill(engine_state())) {
        *why = "FT_SPILL still holds allocations in host memory";
        return 0;
    }
    return 1;
}

/* The engine starts now with plan.out as it is (res.lock held): OFF -> PLANNED ->
 * STREAMING and the switch, as engine_enter makes it at the first guarded call. The
 * calls of other threads under way were not counted in OFF (engine_enter's one load):
 * docs/control.md asks the program to make these calls between its own. 0, or -1 when
 * the engine cannot start (then OFF again, for good). */
static int start_engine_locked(void)
{
    if (!engine_to(PHASE_OFF, PHASE_PLANNED, NULL) || !engine_to(PHASE_PLANNED, PHASE_STREAMING, NULL))
        return -1;
    if (activate_locked() != 0) {
        engine_to(PHASE_STREAMING, PHASE_OFF, "the residency engine did not start");
        return -1;
    }
    return 0;
}

/* In OFF: c becomes the plan; the engine starts when it streams (res.lock held). */
static int replan_off(cand_t *c, const char *why)
{
    cand_install(c);
    memcpy(plan.out.resident, c->out.resident, plan.in.n * sizeof *plan.out.resident);
    if (c->out.slots == 0) {
        char a[32];
        FT_INFO("control: %s: every unit stays resident (budget %s)", why,
                plan.in.budget_bytes ? human_bytes(plan.in.budget_bytes, a, sizeof a) : "none");
        return 0;
    }
    if (start_engine_locked() != 0)
        return -1;
    int streaming = 0;
    for (int i = 0; i < res.n_units; i++)
        streaming += res.units[i].n > 0;
    char a[32];
    FT_INFO("control: %s: the residency engine starts; %d of %d units stream through %d slot(s) (budget "
            "%s); predicted step %.1f us against %.1f us all resident", why, streaming, res.n_units, res.slots,
            plan.in.budget_bytes ? human_bytes(plan.in.budget_bytes, a, sizeof a) : "none",
            plan.out.step_us, plan.out.all_resident_us);
    return 0;
}

/* --- the re-profile ------------------------------------------------------------------ */

/* Passes in a row that do not run every unit where discovery saw them, after which the
 * re-profile plans from the passes it has timed (as profiling does). */
#define RP_MAX_OFF_RECORD 8

static struct {
    int n;                  /* units; 0: not set up */
    ft_prof_t *prof;
    cudaEvent_t *in, *out;  /* per unit: its first launch after the waits for its
                             * weights; where its time ends (the next unit's first launch
                             * before them, the next pass's first launch for the last) */
    int *seen;              /* in[] recorded in this pass */
    ft_res_range_t *ranges; /* the units' launch positions (ft_res_unit_at) */
    uint64_t lane;          /* the thread whose passes are timed */
    int in_pass, dropped;
    unsigned epoch;         /* ft_profiling_suspend's, at the pass's start */
} rp;

static unsigned suspend_epoch(void)
{
    pthread_mutex_lock(&prof.lock);
    unsigned e = prof.prof == NULL ? 0 : ft_prof_epoch(prof.prof) + (unsigned)ft_prof_suspended(prof.prof);
    pthread_mutex_unlock(&prof.lock);
    return e;
}

/* Its arrays and events, once (res.lock held). 0, or -1 when they cannot be had. */
static int rp_setup(void)
{
    int n = res.n_units;
    if (rp.n == n && n > 0)
        return 0;
    if (n <= 0 || rp.n != 0)
        return -1;
    rp.in = calloc((size_t)n, sizeof *rp.in);
    rp.out = calloc((size_t)n, sizeof *rp.out);
    rp.seen = calloc((size_t)n, sizeof *rp.seen);
    rp.ranges = calloc((size_t)n, sizeof *rp.ranges);
    int ok = rp.in && rp.out && rp.seen && rp.ranges && ev.create != NULL && ev.elapsed != NULL;
    for (int i = 0; ok && i < n; i++)
        ok = ev.create(&rp.in[i], cudaEventDefault) == cudaSuccess &&
             ev.create(&rp.out[i], cudaEventDefault) == cudaSuccess;
    if (!ok)
        return -1; /* what was made is kept: the next try fails the same way, cheaply */
    for (int i = 0; i < n; i++)
        rp.ranges[i] = (ft_res_range_t){ res.units[i].first_launch, res.units[i].last_launch };
    rp.n = n;
    return 0;
}

static void rp_new_pass(void)
{
    memset(rp.seen, 0, (size_t)rp.n * sizeof *rp.seen);
    rp.epoch = suspend_epoch();
    rp.in_pass = 1;
}

static void plan_again(const ft_prof_t *times, const char *why);

/* The re-profile begins on `lane`'s pass starting now. */
static void rp_start(uint64_t lane)
{
    if (rp_setup() != 0) {
        FT_WARN("control: the re-profile cannot set up its CUDA events: planning again from the times "
                "measured before");
        ft_ctl_profiled(&ctl);
        plan_again(NULL, "planned again (not re-profiled)");
        return;
    }
    ft_prof_free(rp.prof);
    rp.prof = ft_prof_new((size_t)rp.n, cfgp->profiling_iters);
    rp.lane = lane;
    rp.dropped = 0;
    rp_new_pass();
    FT_INFO("control: re-profiling %d unit(s) over %d pass(es) as they stream", rp.n,
            cfgp->profiling_iters < 1 ? 1 : cfgp->profiling_iters);
}

/* The timed pass ends at this launch on `stream`: 1 when timed, 0 when dropped
 * (suspended, an error), -1 when it did not run every unit where discovery saw them. */
static int rp_end_pass(cudaStream_t stream)
{
    int n = rp.n;
    if (rp.prof == NULL || ev.record(rp.out[n - 1], stream) != cudaSuccess)
        return 0;
    for (int i = 0; i < n; i++)
        if (!rp.seen[i])
            return -1;
    cudaError_t pending = own_pending();
    if (own_call(ev.sync(rp.out[n - 1]), pending) != cudaSuccess)
        return 0;
    double us[n];
    for (int i = 0; i < n; i++) {
        float ms = 0;
        if (own_call(ev.elapsed(&ms, rp.in[i], rp.out[i]), pending) != cudaSuccess)
            return 0;
        us[i] = ms > 0 ? (double)ms * 1000.0 : 1.0;
    }
    if (suspend_epoch() != rp.epoch)
        return 0; /* ft_profiling_suspend: not a pass to plan from */
    ft_prof_add_pass(rp.prof, us);
    return 1;
}

static void rp_pass(cudaStream_t stream)
{
    int kept = rp_end_pass(stream);
    rp.dropped = kept < 0 ? rp.dropped + 1 : kept > 0 ? 0 : rp.dropped;
    if (!ft_prof_done(rp.prof) && rp.dropped < RP_MAX_OFF_RECORD) {
        rp_new_pass();
        return;
    }
    rp.in_pass = 0;
    int passes = ft_prof_passes(rp.prof);
    if (passes == 0)
        FT_WARN("control: the last %d passes did not follow the one discovery recorded: planning again "
                "from the times measured before", RP_MAX_OFF_RECORD);
    double before = 0, after = 0;
    for (int i = 0; i < rp.n; i++) {
        before += plan.in.units[i].compute_us;
        after += passes > 0 ? ft_prof_stat(rp.prof, (size_t)i).median : plan.in.units[i].compute_us;
    }
    if (passes > 0)
        FT_INFO("control: re-profiled over %d pass(es): the units' compute %.1f us a pass (%.1f us before)",
                passes, after, before);
    plan_again(passes > 0 ? rp.prof : NULL, passes > 0 ? "re-planned" : "planned again (not re-profiled)");
}

/* The re-profile is over: the plan is made again from `times` for the limit waiting,
 * or the one in force (res.lock held, the engine on). */
static void plan_again(const ft_prof_t *times, const char *why)
{
    int waiting = ft_ctl_profiled(&ctl);
    uint64_t limit = waiting ? ctl.limit : limit_now();
    cand_t c;
    if (cand_make(&c, limit, times) == -ENOSPC) {
        say_too_small("the new plan", limit, &c);
    } else if (c.rc != 0) {
        FT_WARN("control: the new plan was not made (error %d); the plan in force stays", c.rc);
    } else {
        if (waiting)
            limit_store(limit);
        replan_engine(&c, why);
    }
    cand_free(&c);
}

/* --- at a pass boundary, and the re-profile's marks ---------------------------------- */

static void boundary(uint64_t lane, cudaStream_t stream)
{
    int capture = capture_under_way();
    if (capture && rp.in_pass && lane == rp.lane)
        rp_new_pass(); /* no pass is timed across a boundary it could not end */
    switch (ft_ctl_boundary(&ctl, capture)) {
    case FT_CTL_APPLY: {
        cand_t c;
        char a[32], why[96];
        snprintf(why, sizeof why, "new budget (FT_GPU_MEM_LIMIT %s)", limit_text(ctl.limit, a, sizeof a));
        if (cand_make(&c, ctl.limit, NULL) == -ENOSPC) {
            say_too_small("ft_set_gpu_mem_limit, at the pass boundary,", ctl.limit, &c);
        } else if (c.rc != 0) {
            FT_WARN("control: the plan for the new budget was not made (error %d); the plan in force stays", c.rc);
        } else {
            limit_store(ctl.limit);
            replan_engine(&c, why);
        }
        cand_free(&c);
        break;
    }
    case FT_CTL_PROFILE_START:
        rp_start(lane);
        break;
    case FT_CTL_PROFILE_PASS:
        if (lane == rp.lane)
            rp_pass(stream);
        break;
    default:
        break;
    }
}

/* The guard's launch, at pass position `tracked` (0: a pass begins; -1: none) and `pos`
 * (the position it is judged by, -1 off the record), before its touches (after 0) and
 * after them (after 1); res.lock held, the engine on, control_waiting set. */
void control_launch(long tracked, long pos, cudaStream_t stream, int after)
{
    uint64_t lane = lane_id();
    if (!after && tracked == 0)
        boundary(lane, stream);
    if (rp.in_pass && lane == rp.lane && pos >= 0) {
        int u = ft_res_unit_at(rp.ranges, rp.n, (uint32_t)pos, 0);
        if (u > 0 && !after)
            ev.record(rp.out[u - 1], stream);
        else if (u >= 0 && after && !rp.seen[u]) {
            ev.record(rp.in[u], stream);
            rp.seen[u] = 1;
        }
    }
    control_waiting = ctl.limit_waiting || ctl.replan_waiting || ctl.profiling;
}

/* --- the control API ----------------------------------------------------------------- */

/* Where the process is, for a request (res.lock held). */
enum { AT_REFUSED, AT_BEFORE_PLAN, AT_ENGINE, AT_OFF };

static int where(const char **why)
{
    switch (engine_phase()) {
    case PHASE_DISCOVERY:
    case PHASE_PROFILING:
    case PHASE_PLANNING:
        *why = "before the plan";
        return AT_BEFORE_PLAN;
    case PHASE_PLANNED:
    case PHASE_STREAMING:
        return AT_ENGINE;
    case PHASE_OFF:
        return restartable(why) ? AT_OFF : AT_REFUSED;
    case PHASE_STOOD_DOWN:
        *why = "FlexTensor stood down (the verdict says why)";
        return AT_REFUSED;
    default:
        *why = "FlexTensor has not started";
        return AT_REFUSED;
    }
}

/* The API's calls hold res.lock as a guarded call does: no launch, copy or set runs
 * meanwhile, and none is between its guard and its enqueue. Their own CUDA calls are
 * FlexTensor's, as a hook's are (ft_intercept_depth raised): the runtime's
 * cudaMemGetInfo calls the driver's, whose hook would take res.lock again. */
static int api_enter(void)
{
    if (!ft_shim_active || disc == NULL || cfgp == NULL)
        return -1;
    ft_intercept_depth++;
    res_lock();
    return 0;
}

static void api_leave(void)
{
    control_waiting = ctl.limit_waiting || ctl.replan_waiting || ctl.profiling;
    pthread_mutex_unlock(&res.lock);
    ft_intercept_depth--;
}

/* PLANNED: the switch is made now, as the next guarded call would (res.lock held). */
static int switch_now(void)
{
    if (engine_phase() != PHASE_PLANNED)
        return 0;
    if (engine_to(PHASE_PLANNED, PHASE_STREAMING, NULL) && activate_locked() != 0) {
        engine_to(PHASE_STREAMING, PHASE_OFF, "the residency engine did not start");
        return -1;
    }
    return 0;
}

FT_EXPORT int ft_set_gpu_mem_limit(unsigned long long bytes)
{
    if (api_enter() != 0)
        return -1;
    const char *why = NULL;
    char a[32], b[32], what[80];
    snprintf(what, sizeof what, "ft_set_gpu_mem_limit(%s)", limit_text(bytes, a, sizeof a));
    int rc = 0, at = where(&why);
    cand_t c = { 0 };
    if (at == AT_REFUSED) {
        FT_WARN("control: %s refused: %s", what, why);
        rc = -1;
    } else if (at == AT_BEFORE_PLAN) {
        limit_store(bytes);
        n_limits++;
        FT_INFO("control: FT_GPU_MEM_LIMIT is %s from now on (was %s): the plan to come is made for it; "
                "FT_SPILL keeps the budget it holds until then", limit_text(bytes, a, sizeof a),
                limit_text(cfgp->gpu_mem_limit, b, sizeof b));
    } else if (cand_make(&c, bytes, NULL) == -ENOSPC) {
        say_too_small(what, bytes, &c);
        rc = -2;
    } else if (c.rc != 0) {
        FT_WARN("control: %s refused: no plan could be made (error %d)", what, c.rc);
        rc = -1;
    } else if (at == AT_ENGINE) {
        ft_ctl_limit(&ctl, bytes);
        n_limits++;
        FT_INFO("control: %s: the plan is made again and the units move %s", what,
                ctl.released ? "at ft_resume" : "at the next pass boundary");
    } else {
        limit_store(bytes);
        n_limits++;
        rc = replan_off(&c, what);
    }
    cand_free(&c);
    api_leave();
    return rc;
}

FT_EXPORT int ft_request_replan(void)
{
    if (api_enter() != 0)
        return -1;
    const char *why = NULL;
    int rc = 0, at = where(&why);
    cand_t c = { 0 };
    if (at == AT_REFUSED) {
        FT_WARN("control: ft_request_replan refused: %s", why);
        rc = -1;
    } else if (at == AT_BEFORE_PLAN) {
        FT_INFO("control: ft_request_replan: the plan is not made yet; it comes from this run's profiling");
    } else if (at == AT_ENGINE) {
        n_replans++;
        if (ft_ctl_replan(&ctl) == 0)
            FT_INFO("control: ft_request_replan: the units are profiled again from %s, then the plan is made "
                    "again", ctl.released ? "the first pass boundary after ft_resume" : "the next pass boundary");
    } else if (cand_make(&c, limit_now(), NULL) == -ENOSPC) {
        say_too_small("ft_request_replan", limit_now(), &c);
        rc = -2;
    } else if (c.rc != 0) {
        rc = -1;
    } else {
        /* No pass is followed while the engine is off: planned again from the times
         * profiling measured, with the memory the process holds now. */
        n_replans++;
        rc = replan_off(&c, "ft_request_replan (not re-profiled: the engine was off)");
    }
    cand_free(&c);
    api_leave();
    return rc;
}

/* Every weight that can leave the device does (res.lock held, the engine on, no
 * capture): the resident units are made to stream (kept[] remembers them), then every
 * loaded streamed unit is unloaded. */
static void release_locked(void)
{
    int n = res.n_units, moved_units = 0, stayed = 0;
    uint64_t moved = 0, shared = 0; /* evict_unit's counts; the usage below says it all */
    REAL(cudaDeviceSynchronize)();
    for (int i = 0; i < n; i++) {
        if (!kept[i] || res.units[i].n > 0 || res.units[i].unstreamable)
            continue;
        plan.out.resident[i] = 0;
        if (evict_unit((size_t)i, &moved, &shared) != 0) {
            plan.out.resident[i] = 1;
            res.units[i].unstreamable = 1;
            stayed++;
        }
    }
    res_unload_all();
    int out = 0;
    for (int i = 0; i < n; i++) {
        out += res.units[i].n > 0;
        moved_units += kept[i] && res.units[i].n > 0; /* here, or by the switch from OFF */
    }
    ft_gpu_memory_usage_t u;
    usage_locked(&u);
    char a[32], b[32], d[32];
    FT_INFO("control: ft_release: %d of %d units (%s) in %s now, %d of them resident until now; %s of weights "
            "stay on the device%s; %s held through FlexTensor", out, n, human_bytes(u.unmapped_bytes, a, sizeof a),
            host_store_kind(), moved_units, human_bytes(u.resident_bytes, b, sizeof b),
            stayed ? " (units that cannot stream, said above)" : "", human_bytes(u.total_bytes, d, sizeof d));
}

FT_EXPORT int ft_release(int keep_weights)
{
    if (api_enter() != 0)
        return -1;
    const char *why = NULL;
    int rc = -1, at = where(&why), n = (int)plan.in.n;
    if (!keep_weights) {
        FT_WARN("control: ft_release(0) refused: not supported (FlexTensor cannot know which weights the "
                "program will write again, and keeps every weight's bytes); ft_release(1) frees the same "
                "device memory and keeps a host copy");
    } else if (at == AT_REFUSED || at == AT_BEFORE_PLAN) {
        FT_WARN("control: ft_release refused: %s%s", why,
                at == AT_BEFORE_PLAN ? " (the weights are not known yet)" : "");
    } else if (ctl.released) {
        FT_WARN("control: ft_release refused: released already (ft_resume first)");
    } else if (capture_under_way()) {
        FT_WARN("control: ft_release refused: a stream capture is under way");
    } else if (at == AT_OFF && plan.rc != 0) {
        FT_WARN("control: ft_release refused: the run has no plan (its budget was below the smallest that "
                "works); ft_set_gpu_mem_limit can give it one");
    } else if (kept == NULL && (kept = calloc((size_t)(n ? n : 1), sizeof *kept)) == NULL) {
        FT_ERROR("control: ft_release refused: out of memory");
    } else if (at == AT_OFF) {
        /* The plan kept every unit resident: the engine starts with every unit
         * streaming, which is the release; the resume brings the plan back. */
        for (int i = 0; i < n; i++)
            kept[i] = 1;
        kept_slots = plan.out.slots;
        for (int i = 0; i < n; i++)
            plan.out.resident[i] = 0;
        plan.out.slots = cfgp->min_blocks;
        if (start_engine_locked() == 0) {
            rp.in_pass = 0;
            ft_ctl_release(&ctl);
            n_releases++;
            release_locked();
            rc = 0;
        } else {
            FT_WARN("control: ft_release: the residency engine could not start");
        }
    } else if (switch_now() != 0) {
        FT_WARN("control: ft_release: the residency engine could not start");
    } else {
        for (int i = 0; i < n; i++)
            kept[i] = res.units[i].n == 0;
        kept_slots = res.slots;
        rp.in_pass = 0; /* a re-profile under way starts again after the resume */
        ft_ctl_release(&ctl);
        n_releases++;
        release_locked();
        rc = 0;
    }
    api_leave();
    return rc;
}

FT_EXPORT int ft_resume(void)
{
    if (api_enter() != 0)
        return -1;
    int rc = -1;
    if (!ctl.released || engine_phase() != PHASE_STREAMING) {
        FT_WARN("control: ft_resume refused: nothing was released (ft_release)");
    } else if (capture_under_way()) {
        FT_WARN("control: ft_resume refused: a stream capture is under way");
    } else {
        rc = 0;
        cand_t c = { 0 };
        if (ft_ctl_resume(&ctl) == 1) {
            /* A limit set while released: the plan made for it comes instead. */
            if (cand_make(&c, ctl.limit, NULL) == -ENOSPC)
                say_too_small("ft_set_gpu_mem_limit, at ft_resume,", ctl.limit, &c);
            else if (c.rc == 0)
                limit_store(ctl.limit);
        }
        if (c.rc == 0 && c.in.units != NULL) {
            replan_engine(&c, "ft_resume, for the budget set while released");
        } else {
            int stream, resident, failed;
            move_units(kept, kept_slots, &stream, &resident, &failed);
            plan.out.slots = res.slots;
            ft_gpu_memory_usage_t u;
            usage_locked(&u);
            char a[32];
            FT_INFO("control: ft_resume: %d unit(s) resident again%s; the streamed ones come back as the passes "
                    "need them; %s held through FlexTensor now", resident,
                    failed ? " (some could not be loaded whole: they stream on)" : "",
                    human_bytes(u.total_bytes, a, sizeof a));
        }
        cand_free(&c);
    }
    api_leave();
    return rc;
}

/* The verdict's note: what the program asked at run time, or "". */
const char *control_note(char *buf, size_t len)
{
    buf[0] = '\0';
    if (n_limits + n_replans + n_releases > 0)
        snprintf(buf, len, "; at run time: %u new budget(s), %u re-plan(s), %u release(s)%s", n_limits, n_replans,
                 n_releases, ctl.released ? ", released at exit" : "");
    return buf;
}

/* The program freed the plan's weights (reload.c, res.lock held): requests waiting, a
 * re-profile under way and what a release kept refer to the first plan's units, and
 * go. A limit set at run time stays: the next plan is made for it. */
void control_forget(void)
{
    for (int i = 0; i < rp.n; i++) {
        own_event_destroy(rp.in[i]);
        own_event_destroy(rp.out[i]);
    }
    free(rp.in);
    free(rp.out);
    free(rp.seen);
    free(rp.ranges);
    ft_prof_free(rp.prof);
    memset(&rp, 0, sizeof rp);
    free(kept);
    kept = NULL;
    kept_slots = 0;
    memset(&ctl, 0, sizeof ctl);
    control_waiting = 0;
}

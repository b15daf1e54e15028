/* engine.c - the engine's phase and its entry: set-up (ft_hooks_init), the one phase
 * value and its transitions (engine_to, which also does what entering a phase takes),
 * standing down, and engine_enter / engine_leave, between which every launch, copy and
 * set runs.
 *
 * The phases (docs/architecture.md, "Phases") and the only moves engine_to makes; any
 * other is refused there:
 *
 *   START      -> DISCOVERY     ft_hooks_init
 *   DISCOVERY  -> PLANNING      observe_launch, at the launch that completes discovery, or
 *                               at the one that matched a saved profile (savedprof.c)
 *   PLANNING   -> PROFILING     setup_passes, once the units' events are made
 *   PROFILING  -> PLANNING      finish_profiling, before the plan is made
 *   PLANNING   -> PLANNED       start_residency (profiling.c): the plan streams
 *   PLANNING   -> OFF           start_residency: no plan, or one that streams nothing
 *   PLANNED    -> STREAMING     engine_enter, at the first call after the plan (the switch)
 *   STREAMING  -> OFF           engine_enter, when the switch could not be made
 *   OFF        -> PLANNED       control.c, when a plan that streamed nothing gives way to
 *                               one that streams (a smaller budget, ft_release); only
 *                               where the engine never started (control.c says when)
 *   PLANNED, STREAMING -> DISCOVERY   reload.c, once the program has freed the plan's
 *                               weights and the engine has let go of them: discovery
 *                               starts again for the model loaded next
 *   DISCOVERY, PROFILING, PLANNING, OFF -> STOOD_DOWN     stand_down
 *
 * STOOD_DOWN is final. After the plan (PLANNED, STREAMING) FlexTensor cannot stand
 * down: streamed units live in host memory by then (back in DISCOVERY after reload.c
 * has brought them back, it can again).
 *
 * Owns: the phase word (written only by engine_to and engine_spill, read through
 * engine_state), the reason for standing down, the region table and the discovery
 * engine (made once in ft_hooks_init, before any hook runs), the configuration pointer,
 * the count of unguarded calls under way (`unlocked`, atomic) and the calling thread's
 * engine_held and `counted`. engine_enter takes res.lock (residency.c) once calls are
 * guarded; the switch's work (activate_locked) is residency.c's. */
#define _GNU_SOURCE
#include "shim/engine.h"

ft_regions_t *regions;
ft_disc_t *disc;
static char **include_items, **exclude_items;
int log_diagnostics;
const struct ft_config *cfgp; /* the process's configuration, alive forever */

/* --- the phase --------------------------------------------------------------------------
 *
 * One word: the phase (ENGINE_PHASE_MASK) and FT_SPILL's engagement (ENGINE_SPILL).
 * FT_SPILL is not a phase of its own: it holds allocations in host memory during
 * discovery, profiling and planning, and, where the device could not take them all
 * back, in OFF and STOOD_DOWN too; what it changes is only that every call is guarded.
 * It shares the word so that a call's entry answers "guarded?" with one load.
 *
 * Loaded with acquire order (engine_state, engine.h); changed with sequentially
 * consistent read-modify-writes, for engine_enter's count of unguarded calls (below). */
unsigned engine_state_word = PHASE_START;

static const char *const phase_names[PHASE_COUNT] = {
    "start", "discovery", "profiling", "planning", "planned", "streaming", "off", "stood down",
};

const char *engine_phase_name(int phase)
{
    return phase >= 0 && phase < PHASE_COUNT ? phase_names[phase] : "?";
}

#define TO(p) (1u << (p))
static const unsigned allowed[PHASE_COUNT] = {
    [PHASE_START] = TO(PHASE_DISCOVERY),
    [PHASE_DISCOVERY] = TO(PHASE_PLANNING) | TO(PHASE_STOOD_DOWN),
    [PHASE_PROFILING] = TO(PHASE_PLANNING) | TO(PHASE_STOOD_DOWN),
    [PHASE_PLANNING] = TO(PHASE_PROFILING) | TO(PHASE_PLANNED) | TO(PHASE_OFF) | TO(PHASE_STOOD_DOWN),
    [PHASE_PLANNED] = TO(PHASE_STREAMING) | TO(PHASE_DISCOVERY),
    [PHASE_STREAMING] = TO(PHASE_OFF) | TO(PHASE_DISCOVERY),
    [PHASE_OFF] = TO(PHASE_STOOD_DOWN) | TO(PHASE_PLANNED),
    [PHASE_STOOD_DOWN] = 0,
};
#undef TO

/* What `why` said when FlexTensor stood down (the exit report's verdict). Written once,
 * by the thread whose move to STOOD_DOWN succeeded. */
static char why_stood_down[640];

const char *stood_down_why(void)
{
    return engine_phase() == PHASE_STOOD_DOWN ? why_stood_down : NULL;
}

/* Launches, copies and sets run between engine_enter and engine_leave. Once the engine
 * is on (or about to be), they hold res.lock from the guard to the moment the real call
 * has been enqueued: an unload (device synchronised, then memory released) can then
 * never fall between another thread's guard and its launch. Before that, they only
 * count themselves in `unlocked`, so that a move that makes calls guarded can wait for
 * them to finish.
 *
 * The count and the phase form a pair that needs sequential consistency: a call adds
 * itself, then loads the word; a move changes the word, then loads the count. With
 * weaker orders both could read the old values (the call unguarded, the move seeing
 * no call under way). Every one of the four is seq_cst: the fetch_add, the call's second
 * load, engine_to's and engine_spill's read-modify-writes, and wait_unguarded_calls's
 * load. */
static _Atomic int unlocked;
/* This thread's call counted itself in `unlocked`: engine_leave takes it off. */
static __thread int counted;

/* After a move that makes every call guarded (res.lock held): the calls already past an
 * unguarded entry finish enqueueing first. They never take res.lock meanwhile. */
static void wait_unguarded_calls(void)
{
    while (atomic_load(&unlocked) > 0)
        sched_yield();
}

/* What entering `to` takes, once the move is made. why: for OFF and STOOD_DOWN, what
 * made it (said in the warnings). */
static void entered(int to, const char *why)
{
    switch (to) {
    case PHASE_STREAMING:
        /* The switch: calls past an unguarded entry finish before anything is evicted. */
        wait_unguarded_calls();
        break;
    case PHASE_OFF:
        /* FT_SPILL's allocations come back to the device; what the device cannot take
         * back stays in host memory, and calls stay guarded for it (spill_bring_back
         * lets go of ENGINE_SPILL only when nothing is left). */
        spill_bring_back(why);
        break;
    case PHASE_STOOD_DOWN:
        snprintf(why_stood_down, sizeof why_stood_down, "%s", why);
        stop_profile_timing();
        ft_cupti_stop();
        FT_WARN("%s, so FlexTensor stands down (nothing is offloaded; calls pass through)", why);
        spill_bring_back("FlexTensor stands down");
        break;
    default:
        break;
    }
}

/* Moves the phase from `from` (PHASE_ANY: whatever it is) to `to`, then does what
 * entering `to` takes. 1 when moved; 0 when the phase was not `from` (another thread
 * moved it first: one thread wins each move) or the table refuses the move. A refused
 * move from a named phase is a bug, said as an error; from PHASE_ANY it is an answer
 * (stand_down after the plan). */
int engine_to(int from, int to, const char *why)
{
    unsigned s = __atomic_load_n(&engine_state_word, __ATOMIC_RELAXED);
    int now;
    for (;;) {
        now = state_phase(s);
        if (from != PHASE_ANY && now != from)
            return 0;
        if (!(allowed[now] & (1u << to))) {
            if (from != PHASE_ANY)
                FT_ERROR("engine: the move from %s to %s is not allowed", phase_names[now], phase_names[to]);
            return 0;
        }
        /* Fails when ENGINE_SPILL or the phase changed meanwhile: looked at again. */
        unsigned next = (s & ENGINE_SPILL) | (unsigned)to;
        if (__atomic_compare_exchange_n(&engine_state_word, &s, next, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            break;
    }
    FT_DEBUG("engine: %s -> %s", phase_names[now], phase_names[to]);
    entered(to, why);
    return 1;
}

/* FT_SPILL engages (on: it holds allocations in host memory from now on; res.lock held)
 * or lets go (off: nothing it holds is in host memory any more, or the residency engine
 * keeps the budget). Engaging makes every call guarded: those already past an unguarded
 * entry finish first. spill.c decides; the bit lives here for engine_enter's one load. */
void engine_spill(int on)
{
    if (!on) {
        __atomic_fetch_and(&engine_state_word, ~ENGINE_SPILL, __ATOMIC_SEQ_CST);
        return;
    }
    if (!(__atomic_fetch_or(&engine_state_word, ENGINE_SPILL, __ATOMIC_SEQ_CST) & ENGINE_SPILL))
        wait_unguarded_calls();
}

/* --- set-up -------------------------------------------------------------------------- */

static char **copy_list(const ft_config_list_t *l)
{
    char **v = calloc(l->n + 1, sizeof *v);
    for (size_t i = 0; v != NULL && i < l->n; i++)
        v[i] = strdup(l->items[i]);
    return v;
}

static int stand_down(const char *why);

/* Where discovery's content hashes (checksum.c) find the bytes of an allocation FT_SPILL
 * holds in host memory: hash_regions's ctx. */
static const hash_source_t hash_source = { spilled_at };

int ft_hooks_init(const struct ft_config *cfg)
{
    regions = ft_regions_new();
    if (regions == NULL)
        return -1;
    vmm_setup(cfg->vmm_min_size, cfg->vmm_reserve);
    device_setup(stand_down);
    cfgp = cfg;
    log_diagnostics = cfg->log_diagnostics;
    include_items = copy_list(&cfg->include_patterns);
    exclude_items = copy_list(&cfg->exclude_patterns);
    ft_disc_params_t p = {
        .iters = cfg->discovery_iters,
        .marker_glob = cfg->iteration_marker[0] ? strdup(cfg->iteration_marker) : NULL,
        .hash = hash_regions,
        .hash_ctx = (void *)&hash_source,
        .include = include_items,
        .n_include = include_items ? cfg->include_patterns.n : 0,
        .exclude = exclude_items,
        .n_exclude = exclude_items ? cfg->exclude_patterns.n : 0,
        .piece_span = vmm_piece_span,
    };
    disc = ft_disc_new(regions, &p);
    if (disc == NULL)
        return -1;
    engine_to(PHASE_START, PHASE_DISCOVERY, NULL);
    own_ranges_setup(); /* NVTX ranges of FlexTensor's own work, for a profiler */
    /* FT_PROFILE_DIR: the saved profile, checked as the model appears (FT_SKIP_DISCOVERY
     * without one stands down). */
    savedprof_setup(stand_down);
    return 0;
}

void ft_hooks_exit(void)
{
    if (cfgp == NULL || !cfgp->shm_enabled)
        return;
    /* Bounded: a thread that hangs holding res.lock must not keep the process from
     * ending. The kernel lets the segment's locks go at exit all the same; only its
     * removal is missed, and the next run replaces a segment nobody is attached to. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    if (pthread_mutex_timedlock(&res.lock, &until) != 0)
        return;
    host_store_detach();
    pthread_mutex_unlock(&res.lock);
}

/* --- the entry --------------------------------------------------------------------------- */

/* This thread's call holds res.lock (engine_enter returned 1). A call that entered
 * before the switch is not guarded even if it sees the engine on: the switch waits for
 * it to be enqueued, then drains the device, before anything is evicted. */
__thread int engine_held;

/* The switch (res.lock held, engine_held set): the first guarded call after the plan
 * turns the residency engine on; when it cannot start, the engine is off for good. */
static void switch_locked(void)
{
    if (engine_to(PHASE_PLANNED, PHASE_STREAMING, NULL) && activate_locked() != 0)
        engine_to(PHASE_STREAMING, PHASE_OFF, "the residency engine did not start");
}

static int enter(int launch);

int engine_enter(void)
{
    return enter(0);
}

/* A kernel launch's entry: a move of the prefetching thread under way is waited for
 * only when the launch touches a unit it moves (guard.c), or needs the engine
 * otherwise (mover.c). */
int engine_enter_launch(void)
{
    return enter(1);
}

/* A copy's or a set's entry: as a launch's. The guard waits for a unit the prefetching
 * thread moves when the copy touches it (res_touch), and so does a copy or set served
 * on a unit's host store (residency.c, host_store_at); the rest of their work settles
 * the move itself where it needs the engine's counts (a load, a split, the budget).
 * Waiting for every move here had MoE's decode wait 2.4 ms at each of its index copies
 * and sets on the H100 (644 ms in 266 waits at half the weights). */
int engine_enter_copy(void)
{
    return enter(1);
}

static int enter(int launch)
{
    /* Once nothing will ever be guarded again, calls pay one load. Relaxed: a stale
     * word only sends the call down the longer path, which loads it again. */
    unsigned s = __atomic_load_n(&engine_state_word, __ATOMIC_RELAXED);
    if (state_quiet(s))
        return 0;
    atomic_fetch_add(&unlocked, 1);
    s = __atomic_load_n(&engine_state_word, __ATOMIC_SEQ_CST);
    if (!state_guarded(s)) {
        counted = 1;
        return 0;
    }
    atomic_fetch_sub(&unlocked, 1);
    pthread_mutex_lock(&res.lock);
    engine_held = 1;
    int reload = __atomic_load_n(&reload_wanted, __ATOMIC_RELAXED);
    mover_settle(!launch || reload);
    /* The program freed the plan's weights: the plan goes before this call (which then
     * runs in discovery, held as FT_SPILL's calls are). */
    if (reload)
        reload_now_locked();
    if (engine_phase() == PHASE_PLANNED)
        switch_locked();
    return 1;
}

void engine_leave(int held)
{
    if (capture_pending)
        capture_call_done();
    if (tag_pushed) {
        tag_pushed = 0;
        ft_cupti_tag_pop();
    }
    if (held) {
        /* Its prefetch and checksum are FlexTensor's own work (capture.c). */
        int relaxed = capture_relax();
        res_call_done();
        capture_restore(relaxed);
        engine_held = 0;
        pthread_mutex_unlock(&res.lock);
    } else if (counted) {
        counted = 0;
        atomic_fetch_sub(&unlocked, 1);
    }
}

/* --- standing down ------------------------------------------------------------------------ */

/* FlexTensor cannot keep its view of the process: one process on several GPUs, which is
 * not supported yet (docs/architecture.md, "Standing down"; on the H200 pair profiling
 * failed in that case, and on the simulator a device used after the plan made the
 * streamed model's results wrong), or FT_GPU_DEVICE names a device the process does not
 * have; device.c says which (`why`, kept for the exit report's verdict). It stands
 * down: discovery and profiling stop, no plan is made, CUPTI is released, FT_SPILL's
 * allocations come back to the device (what the device cannot take back stays in host
 * memory, faulted in on use), and calls pass through from then on. 1 when it stood
 * down now; 0 when it had already; -1 when it cannot any more (after the plan). Passed
 * down to device.c by ft_hooks_init: the device is found out there, the engine
 * decides. */
static int stand_down(const char *why)
{
    if (engine_to(PHASE_ANY, PHASE_STOOD_DOWN, why))
        return 1;
    return engine_phase() == PHASE_STOOD_DOWN ? 0 : -1;
}

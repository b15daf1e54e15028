/* engine.c - the engine's phases and its entry: set-up (ft_hooks_init), the phase
 * flags (discovering, profiling, engine_off, stood_down) and their transitions out of
 * discovery's and planning's ends (start_residency, stand_down), and engine_enter /
 * engine_leave, between which every launch, copy and set runs.
 *
 * Owns: the region table and the discovery engine (made once in ft_hooks_init, before
 * any hook runs), the configuration pointer, the phase flags (atomic loads and stores:
 * read on every call, written once each), the count of unguarded calls under way
 * (`unlocked`, atomic) and the thread's engine_held. engine_enter takes res.lock
 * (residency.c) once the engine is on; the switch itself (activate_locked) is
 * residency.c's. */
#define _GNU_SOURCE
#include "shim/engine.h"

ft_regions_t *regions;
ft_disc_t *disc;
int discovering;       /* relaxed: cleared once discovery is done */
/* The residency engine will never start (nothing streamed, or no plan to come): the
 * calls it would guard then skip even its entry count. */
int engine_off;
int profiling;         /* relaxed: set when discovery is done, cleared after */
static char **include_items, **exclude_items;
int log_diagnostics;
const struct ft_config *cfgp; /* the process's configuration, alive forever */

static char **copy_list(const ft_config_list_t *l)
{
    char **v = calloc(l->n + 1, sizeof *v);
    for (size_t i = 0; v != NULL && i < l->n; i++)
        v[i] = strdup(l->items[i]);
    return v;
}

int ft_hooks_init(const struct ft_config *cfg)
{
    regions = ft_regions_new();
    if (regions == NULL)
        return -1;
    vmm_min_bytes = cfg->vmm_min_size;
    va_chunk = cfg->vmm_reserve;
    profiling_iters = cfg->profiling_iters;
    cfgp = cfg;
    log_diagnostics = cfg->log_diagnostics;
    include_items = copy_list(&cfg->include_patterns);
    exclude_items = copy_list(&cfg->exclude_patterns);
    ft_disc_params_t p = {
        .iters = cfg->discovery_iters,
        .marker_glob = cfg->iteration_marker[0] ? strdup(cfg->iteration_marker) : NULL,
        .hash = hash_regions,
        .include = include_items,
        .n_include = include_items ? cfg->include_patterns.n : 0,
        .exclude = exclude_items,
        .n_exclude = exclude_items ? cfg->exclude_patterns.n : 0,
    };
    disc = ft_disc_new(regions, &p);
    if (disc == NULL)
        return -1;
    __atomic_store_n(&discovering, !cfg->skip_discovery, __ATOMIC_RELAXED);
    /* Without discovery there is no plan, so no engine. */
    __atomic_store_n(&engine_off, cfg->skip_discovery, __ATOMIC_RELAXED);
    return 0;
}

/* This thread's call holds res.lock (engine_enter returned 1). A call that entered
 * before the switch is not guarded even if it sees the engine on: the switch waits for
 * it to be enqueued, then drains the device, before anything is evicted. */
__thread int engine_held;

char *human_bytes(uint64_t b, char *buf, size_t len)
{
    if (b >= (1ull << 30))
        snprintf(buf, len, "%.2f GiB", (double)b / (1 << 30));
    else
        snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
    return buf;
}

/* Launches, copies and sets run between engine_enter and engine_leave. Once the engine
 * is on (or about to be), they hold res.lock from the guard to the moment the real call
 * has been enqueued: an unload (device synchronised, then memory released) can then
 * never fall between another thread's guard and its launch. Before that, they only
 * count themselves in `unlocked`, so that the switch can wait for them to finish. */
static _Atomic int unlocked;

/* After a switch that makes every call guarded (res.lock held): the calls already past
 * an unguarded entry finish enqueueing first. They never take res.lock meanwhile. */
void wait_unguarded_calls(void)
{
    while (atomic_load(&unlocked) > 0)
        sched_yield();
}

int engine_enter(void)
{
    /* Once it is known that the engine never starts, calls pay one load. */
    if (__atomic_load_n(&engine_off, __ATOMIC_RELAXED))
        return 0;
    atomic_fetch_add(&unlocked, 1);
    if (!__atomic_load_n(&res.active, __ATOMIC_ACQUIRE) && !__atomic_load_n(&res.pending, __ATOMIC_ACQUIRE) &&
        !__atomic_load_n(&spill_engaged, __ATOMIC_ACQUIRE))
        return 0;
    atomic_fetch_sub(&unlocked, 1);
    pthread_mutex_lock(&res.lock);
    if (res.pending && !res.active)
        activate_locked();
    engine_held = 1;
    return 1;
}

void engine_leave(int held)
{
    if (tag_pushed) {
        tag_pushed = 0;
        ft_cupti_tag_pop();
    }
    if (held) {
        res_call_done();
        engine_held = 0;
        pthread_mutex_unlock(&res.lock);
    }
    else if (!__atomic_load_n(&engine_off, __ATOMIC_RELAXED))
        atomic_fetch_sub(&unlocked, 1);
}

/* Planning is done: the next guarded call switches the engine on. */
void start_residency(void)
{
    if (plan.rc == 0 && plan.out.slots > 0) {
        __atomic_store_n(&res.pending, 1, __ATOMIC_RELEASE);
    } else if (!spill_bring_back("the plan streams nothing")) {
        __atomic_store_n(&engine_off, 1, __ATOMIC_RELEASE);
    }
}

/* An allocation on another device than the managed one before the plan: one process
 * on several GPUs is not supported yet (docs/architecture.md, "Standing down"; on the H200 pair profiling failed in
 * that case, and on the simulator a device used after the plan made the streamed
 * model's results wrong); or FT_GPU_DEVICE names a device the process does not have.
 * FlexTensor stands down: discovery and profiling stop, no plan is made, CUPTI is
 * released, FT_SPILL's allocations come back to the device (what the device cannot
 * take back stays in host memory, faulted in on use), and calls pass through from
 * then on. `why` (kept for the exit report's verdict) says what happened. */
int stood_down;
char stood_down_why[192];

void stand_down_because(const char *why)
{
    if (__atomic_exchange_n(&stood_down, 1, __ATOMIC_ACQ_REL))
        return;
    snprintf(stood_down_why, sizeof stood_down_why, "%s", why);
    __atomic_store_n(&discovering, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&profiling, 0, __ATOMIC_RELEASE);
    stop_profile_timing();
    ft_cupti_stop();
    FT_WARN("%s, so FlexTensor stands down (nothing is offloaded; calls pass through)", why);
    if (!spill_bring_back("FlexTensor stands down"))
        __atomic_store_n(&engine_off, 1, __ATOMIC_RELEASE);
}

void stand_down(int other)
{
    char why[192];
    snprintf(why, sizeof why, "an allocation on device %d while FlexTensor manages device %d: one "
             "process on several GPUs is not supported yet", other,
             __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE));
    stand_down_because(why);
}

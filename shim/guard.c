/* guard.c - the residency engine's guard: before every launch, copy and set once the
 * engine is on, the streamed units the call touches are loaded (or found loaded) and
 * waited for; stale addresses are told apart (docs/residency.md, "Stale addresses");
 * the learned order of the pass starts prefetches; and the measured step.
 *
 * Owns: the per-call thread-locals (what this thread's call touched and where its pass
 * is; the checksum and prefetch to issue once the call is enqueued): a call is guarded
 * and completed on its own thread, between engine_enter and engine_leave, so they need
 * no lock. The repeat rule's table and res's counters and step ring are written under
 * res.lock, which every guarded call holds. It guards only in PHASE_STREAMING, with
 * res.lock held (guarding). Loads and unloads are residency.c's. */
#define _GNU_SOURCE
#include "shim/engine.h"

/* This call is guarded: it holds res.lock and the residency engine is on. */
static inline int guarding(void)
{
    return engine_held && engine_phase() == PHASE_STREAMING;
}

/* Per application thread, as positions are (each thread's passes are followed on
 * their own): the tracked position of its last guarded launch (-1: none), and whether its pass
 * under way has left the recorded launch sequence (prefetches then follow first touches
 * only, not positions, and no touch is judged by its position, until its next pass). */
static __thread long lane_last_pos = -1;
static __thread int lane_off_script;

/* The units this thread's call touched, to record their `used` events behind it; until
 * then (the call is not enqueued yet), nothing may evict them. */
static __thread int touched[8], n_touched;

int touched_by_this_call(int u)
{
    for (int k = 0; k < n_touched; k++)
        if (touched[k] == u)
            return 1;
    return 0;
}

/* The stream of this thread's call, for the use events recorded behind it. */
static __thread cudaStream_t touched_stream;
/* A unit's first launch: the prefetch to run once the launch is enqueued (-1: none). */
static __thread int prefetch_after = -1;
/* A unit's last launch: the unit whose checksum to issue once it is enqueued. */
static __thread int checksum_after = -1;

/* The kernel of the launch being guarded, for messages ("?" for copies and sets). */
static __thread const char *res_kernel_name = "?";

/* The repeat rule: a streamed region's last touch by one kernel on one lane, at the
 * lane's launch count `at`, and how many touches in a row came within a quarter of a
 * pass of the one before (`run`). Weights are grouped into units so that each is read
 * in one range of the pass: a kernel that keeps touching the same streamed weight every
 * few launches is carrying a stale address (PyTorch's cat kernels that discovery never
 * saw, in the prefill, held one weight's address in an unused metadata slot in every
 * layer). The third such touch in a row and those after it are stale; two reads half a
 * pass apart (a layer reading a far layer's weight) are not. Kept under res.lock. */
typedef struct {
    struct repeat_key {
        uint64_t kernel;
        uint64_t region;
    } key;
    uint64_t lane, at;
    uint32_t run;
    UT_hash_handle hh;
} repeat_t;
static repeat_t *repeats;
static __thread uint64_t lane_launches; /* this thread's guarded launches */

/* 1 when this touch of region id by kernel is stale by the repeat rule. Records it. */
static int repeat_touch(uint64_t kernel, uint32_t id)
{
    struct repeat_key key;
    memset(&key, 0, sizeof key);
    key.kernel = kernel;
    key.region = id;
    repeat_t *e;
    HASH_FIND(hh, repeats, &key, sizeof key, e);
    if (e == NULL) {
        if ((e = calloc(1, sizeof *e)) == NULL)
            return 0;
        e->key = key;
        e->lane = lane_id();
        e->at = lane_launches;
        e->run = 1;
        HASH_ADD(hh, repeats, key, sizeof key, e);
        return 0;
    }
    if (e->lane == lane_id() && e->at == lane_launches)
        return e->run >= 3; /* the same launch again */
    uint64_t window = res.pass_len / 4 > 4 ? (uint64_t)res.pass_len / 4 : 4; /* a quarter pass */
    int close = e->lane == lane_id() && lane_launches - e->at < window;
    e->run = close ? e->run + 1 : 1;
    e->lane = lane_id();
    e->at = lane_launches;
    return e->run >= 3;
}

/* Whether pass position `at` (ft_disc_track's; -1: unknown) is more than half a pass
 * from unit un's range of positions, counted in the order of a pass (positions wrap at
 * the pass length when passes begin past the record's first launch). */
static int far_from_range(long at, const res_unit_t *un)
{
    long len = res.pass_len, half = len / 2, s = res.pass_start;
    if (at < 0 || len <= 0)
        return 0;
    /* In pass order: positions before the start come after the wrap. A pass longer
     * than the recorded one counts on past the length. */
#define PASS_ORDER(x) ((x) >= s ? (x) - s : (x) + len - s)
    long a = PASS_ORDER(at), f = PASS_ORDER((long)un->first_launch), l = PASS_ORDER((long)un->last_launch);
#undef PASS_ORDER
    if (f > l)
        return 0; /* the range spans the wrap: no order to compare */
    return a + half < f || a > l + half;
}

/* ids: the regions a call touches (region table ids); unsure (NULL: none) flags those
 * found only at argument words that held garbage in discovery. The touch is stale
 * too when pos (the launch's position in a pass that follows the recorded one, else
 * -1) is outside the unit's range of positions: no launch of the recorded pass touched
 * it there (a weight touched outside its unit's range in discovery stays resident);
 * or when the kernel ran in the recorded pass touching no weight (weightless). Both
 * are garbage that looks like a pointer, in a word that held NULL or an activation's
 * address in discovery. So is one the repeat rule finds (kernel: the launch's kernel;
 * 0 for copies and sets, which it spares). An unsure or stale touch of a unit that is
 * not loaded loads nothing (FT_STRICT_GUARD=1: it does); of a loaded unit, it is a
 * touch like any other (a wait costs nothing there). at: launches since the lane's
 * pass began, also off the recorded sequence (-1: unknown); a touch more than half a
 * pass away from its unit's range says nothing of where the pass is, so it loads what
 * it needs but starts no prefetch (generate's reduce kernel on the H200 read a far
 * layer's weight through a stale address at each step's third launch, and the
 * prefetch that followed evicted the next layer: two misses a step). */
static void res_touch(const uint32_t *ids, const uint8_t *unsure, size_t n, cudaStream_t stream, long pos,
                      int weightless, uint64_t kernel, long at)
{
    if (!guarding())
        return;
    /* res.lock is held: engine_enter took it for this call. */
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= res.n_ids || res.by_id[ids[i]] < 0)
            continue;
        res_region_t *r = &res.regions[res.by_id[ids[i]]];
        res_unit_t *un = &res.units[r->unit];
        int unexpected = weightless ||
                           (pos >= 0 && ((uint32_t)pos < un->first_launch || (uint32_t)pos > un->last_launch));
        int again = kernel != 0 && repeat_touch(kernel, ids[i]);
        int stale = (unsure != NULL && unsure[i]) || unexpected || again;
        if (!un->loaded && stale && !res.strict) {
            res.unsure_skipped++;
            res.unexpected_skipped += (uint64_t)(unexpected && !(unsure != NULL && unsure[i]));
            res.repeat_skipped += (uint64_t)(again && !unexpected && !(unsure != NULL && unsure[i]));
            FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s: a stale address of %s (region %u%s) loads nothing",
                          res_kernel_name, ft_disc_unit(disc, (size_t)r->unit)->name, ids[i],
                          weightless ? ", from a kernel that touched no weight in the recorded pass"
                          : unexpected ? ", outside its unit's range of the pass"
                          : again ? ", touched by this kernel every few launches" : "");
            continue;
        }
        if (!un->loaded) {
            res.misses++;
            if (res.n_miss_log < MISS_LOG) {
                struct miss *m = &res.miss_log[res.n_miss_log++];
                snprintf(m->kernel, sizeof m->kernel, "%s", res_kernel_name);
                m->unit = r->unit;
                m->off_script = lane_off_script;
                m->pass = res.passes;
                m->pos = lane_last_pos;
            }
            FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s: miss on %s (region %u)", res_kernel_name,
                          ft_disc_unit(disc, (size_t)r->unit)->name, ids[i]);
            load_unit(r->unit, stream, -1);
        }
        /* A prefetch copied it on the side stream: this call waits for that copy (once
         * per stream and load: later work on the stream is ordered behind the wait). */
        /* The first touch of a unit after its load: what follows it in the learned
         * order is loaded next, whatever the launch's position in the pass. A stale
         * address (unsure) says nothing of where the pass is. */
        if (!un->touched_since_load && !stale && !far_from_range(at, un)) {
            un->touched_since_load = 1;
            if (prefetch_after < 0)
                prefetch_after = r->unit;
        }
        if (un->ready_recorded && !(un->waited_valid && un->waited == stream_key(stream))) {
            ev.wait(stream, un->ready, 0);
            un->waited = stream_key(stream);
            un->waited_valid = 1;
        }
        int seen = 0;
        for (int k = 0; k < n_touched; k++)
            seen |= touched[k] == r->unit;
        if (!seen && n_touched < 8)
            touched[n_touched++] = r->unit;
    }
    touched_stream = stream;
}

/* The unit whose range starts (end 0) or ends (end 1) at pass position pos, or -1: a
 * binary search, the units being in pass order (their ranges do not overlap). */
static int unit_bound_at(uint32_t pos, int end)
{
    int lo = 0, hi = res.n_units;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if ((end ? res.units[mid].last_launch : res.units[mid].first_launch) < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == res.n_units)
        return -1;
    return (end ? res.units[lo].last_launch : res.units[lo].first_launch) == pos ? lo : -1;
}

/* Prefetch: the pass has reached unit u's first launch; load the streamed units that
 * follow it, as many as the other slots hold, on the side stream. */
static void res_prefetch(int u, cudaStream_t stream)
{
    int ahead = res.slots - 1, n = res.n_units;
    for (int step = 1; step < n && ahead > 0; step++) {
        int w = (u + step) % n;
        if (res.units[w].n == 0)
            continue; /* resident */
        ahead--;
        if (!res.units[w].loaded) {
            load_unit(w, res.side, u);
            if (res.units[w].loaded)
                res.prefetches++;
        }
    }
}

/* Reads the step times whose closing event has completed, oldest first. */
static void step_harvest(void)
{
    while (res.harvested + 1 < res.passes) {
        cudaEvent_t a = res.pass_ev[res.harvested % STEP_RING];
        cudaEvent_t b = res.pass_ev[(res.harvested + 1) % STEP_RING];
        float ms;
        if (drv.event_query == NULL || drv.event_query((CUevent)b) != CUDA_SUCCESS)
            return;
        if (ev.elapsed(&ms, a, b) == cudaSuccess)
            res.step_ms[res.n_steps++ % STEP_SAMPLES] = ms;
        res.harvested++;
    }
}

/* A pass begins on `stream` (res.lock held). */
static void step_mark(cudaStream_t stream)
{
    if (res.pass_ev[0] == NULL)
        return;
    step_harvest();
    /* The ring is full of pending events: the oldest interval is given up. */
    if (res.passes - res.harvested >= STEP_RING)
        res.harvested = res.passes - STEP_RING + 1;
    if (ev.record(res.pass_ev[res.passes % STEP_RING], stream) == cudaSuccess)
        res.passes++;
    if (res.passes <= 64 || res.passes % 64 == 0)
        outside_sample("inference", (long)res.passes, 1);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The median measured step in us, of *n samples (0: none), from the intervals read at
 * pass starts. For the exit report: no CUDA call (the runtime's own exit handler has
 * run by then and the events may be gone), and no wait for the lock (a thread stopped
 * inside a guarded call may hold it; none counted then). */
double step_median_us(uint64_t *n)
{
    *n = 0;
    if (pthread_mutex_trylock(&res.lock) != 0)
        return 0;
    uint64_t k = res.n_steps < STEP_SAMPLES ? res.n_steps : STEP_SAMPLES;
    float s[STEP_SAMPLES];
    memcpy(s, res.step_ms, k * sizeof *s);
    pthread_mutex_unlock(&res.lock);
    if (k == 0)
        return 0;
    qsort(s, k, sizeof *s, cmp_float);
    *n = k;
    return s[k / 2] * 1000.0;
}

/* The guard of a launch of kernel `key` (`name`, for messages) whose arguments hold the
 * regions of `set` (res.lock held): pass tracking sees the touches the kernel is sure
 * to make; the guard all. */
void res_guard_launch(uint64_t key, const char *name, const ft_scan_set_t *set, cudaStream_t stream)
{
    int expected, weightless;
    long pos = ft_disc_track(disc, lane_id(), key, set, &expected, &weightless), tracked = pos;
    if (pos == 0) {
        step_mark(stream);
        lane_off_script = 0;
    }
    if (pos >= 0 && !lane_off_script && !expected)
        lane_off_script = 1;
    if (lane_off_script)
        pos = -1;
    res_kernel_name = name;
    lane_launches++;
    res_touch(set->id, set->unsure, set->n, stream, pos, weightless, key, tracked);
    res_kernel_name = "?";
    lane_last_pos = tracked; /* a miss above was after the launch before */
    /* After this launch is enqueued (res_call_done): an eviction waits on the host for
     * the evicted unit's last use and its copy back, and the device should have this
     * unit's first kernel to run meanwhile. */
    if (pos >= 0) {
        int at = unit_bound_at((uint32_t)pos, 0);
        if (at >= 0)
            prefetch_after = at;
        checksum_after = unit_bound_at((uint32_t)pos, 1);
    }
}

/* The guard for copies and sets: their device source and destination. */
void res_guard_copy(const void *dst, const void *src, cudaStream_t stream)
{
    if (!guarding())
        return;
    const void *p[2] = { dst, src };
    uint32_t ids[2];
    size_t n = 0;
    ft_region_t r;
    for (int i = 0; i < 2; i++)
        if (p[i] != NULL && ft_regions_find(regions, (uint64_t)(uintptr_t)p[i], &r))
            ids[n++] = r.id;
    res_touch(ids, NULL, n, stream, -1, 0, 0, -1);
}

/* A guarded call is enqueued (res.lock held; the caller, engine_leave, releases it): the
 * units it touched record their use behind it, then the checksum and the prefetch it
 * asked for are issued. */
void res_call_done(void)
{
    for (int k = 0; k < n_touched; k++) {
        unit_record_use(&res.units[touched[k]], touched_stream);
        res.units[touched[k]].uses++;
    }
    n_touched = 0;
    /* A streamed unit's last launch of the pass is enqueued: its checksum follows
     * it at once, ready by the time the unit is evicted. */
    if (checksum_after >= 0) {
        if (res.units[checksum_after].loaded && res.units[checksum_after].n > 0)
            checksum_issue(checksum_after);
        checksum_after = -1;
    }
    if (prefetch_after >= 0) {
        res_prefetch(prefetch_after, touched_stream);
        prefetch_after = -1;
    }
}

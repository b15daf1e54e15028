/* guard.c - the residency engine's guard: before every launch, copy and set once the
 * engine is on, the streamed units the call touches are loaded (or found loaded) and
 * waited for; stale addresses are told apart (docs/residency.md, "Stale addresses");
 * the learned order of the pass starts prefetches; and the measured step. What each
 * touch is, where a unit's range begins and ends, and which units a prefetch loads are
 * core/residency.c's decisions; this file gathers their inputs and carries them out.
 *
 * Owns: the per-call thread-locals (what this thread's call touched and where its pass
 * is; the checksum and prefetch to issue once the call is enqueued): a call is guarded
 * and completed on its own thread, between engine_enter and engine_leave, so they need
 * no lock. The repeat rule's table, the count of guarded calls that stamps the units a
 * call touches, the ranges' copy and res's counters and step ring are written under
 * res.lock, which every guarded call holds. It guards only in
 * PHASE_STREAMING, with res.lock held (guarding). Loads and unloads are residency.c's. */
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
/* The most positions a weight's jump walks for units ended among them (res_guard_launch). */
#define SKIP_WALK 4096
/* The position the guard placed this thread's last launch at (-1: none). */
static __thread long lane_prev_pos = -1;
static __thread int lane_off_script;
/* The unit this thread's pass last placed (its first touch after a load said where the
 * pass is, or its first launch was reached by position; -1: none): a touch of the next
 * streamed unit places the pass too (ft_res_touch_t.follows). */
static __thread int lane_placed = -1;

/* The units this thread's call touched, to record their `used` events behind it; until
 * then (the call is not enqueued yet), nothing may evict them. Each is stamped with the
 * call's number (res_unit_t.touched_in), which touched_by_this_call reads: res.lock is
 * held from a call's guard to its enqueue, so one guarded call at a time has a number,
 * and guard_call moves on when it is done. The first TOUCHED_LIST units are also listed,
 * so that recording the uses walks them only; a call touching more (a cat of every
 * layer's weights) walks the units for the stamp instead: every unit it touched gets
 * its use event, else one could be evicted under its kernel. */
#define TOUCHED_LIST 64
static __thread int touched[TOUCHED_LIST], n_touched, touched_more;
static uint64_t guard_call = 1; /* res.lock; units start at 0, touched by no call */

int touched_by_this_call(int u)
{
    return res.units[u].touched_in == guard_call;
}

static void mark_touched(int u)
{
    if (res.units[u].touched_in == guard_call)
        return;
    res.units[u].touched_in = guard_call;
    if (n_touched < TOUCHED_LIST)
        touched[n_touched++] = u;
    else
        touched_more = 1;
}

/* The stream of this thread's call, for the use events recorded behind it. */
static __thread cudaStream_t touched_stream;
/* A unit's first launch: the prefetch to run once the launch is enqueued (-1: none). */
static __thread int prefetch_after = -1;
/* A unit's last launch: the unit whose checksum to issue once it is enqueued. */
static __thread int checksum_after = -1;
/* The unit placed before the one whose first touch this call is: its launches are over
 * (but for a pass's launches out of order, which its use count tells), its checksum is
 * issued once the call is enqueued if none is yet, so that its slot can be handed over
 * in stream order (residency.c, handover). Positions alone miss it when the pass's
 * launches drift from the recorded ones. */
static __thread int checksum_prev = -1;
/* Offload timing (timing.c): the unit whose last launch this is, its end event
 * recorded once the launch is enqueued, and the launch's stream. */
static __thread int timing_after = -1;
static __thread cudaStream_t timing_stream;

/* The kernel of the launch being guarded, for messages ("?" for copies and sets). */
static __thread const char *res_kernel_name = "?";

/* The repeat rule's table (core/residency.h), under res.lock. */
static ft_res_repeat_t *repeats;

static int pin_pending = -1; /* res.lock: the unit to pin once the call is enqueued */
static __thread uint64_t lane_launches; /* this thread's guarded launches */

/* The call being guarded uses loaded unit u on `stream` (res.lock held): a prefetch
 * copied it on the side stream, so the call waits for that copy (once per stream and
 * load: later work on the stream is ordered behind the wait); and it is marked touched,
 * for its use event and so that nothing evicts it before the call is enqueued. */
static void unit_use(int u, cudaStream_t stream)
{
    res_unit_t *un = &res.units[u];
    if (un->ready_recorded && !(un->waited_valid && un->waited == stream_key(stream))) {
        ev.wait(stream, un->ready, 0);
        un->waited = stream_key(stream);
        un->waited_valid = 1;
    }
    mark_touched(u);
}

/* The loaded streamed units among the regions ids are the call's (unit_use): no load
 * for the call evicts them. A touch of a loaded unit is a use whatever ft_res_classify
 * finds, so this only makes the uses that res_touch would come to sooner. */
static void keep_loaded(const uint32_t *ids, size_t n, cudaStream_t stream)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < res.n_ids && res.by_id[ids[i]] >= 0) {
            int u = res.regions[res.by_id[ids[i]]].unit;
            if (!res.units[u].moving && res.units[u].loaded) /* a moving one is the mover's: res_touch waits */
                unit_use(u, stream);
        }
}

/* The streamed unit after u in pass order (wrapping to the first), as ft_res_prefetch
 * walks them; u when it is the only one. */
static int next_streamed(int u)
{
    for (int step = 1; step < res.n_units; step++) {
        int w = (u + step) % res.n_units;
        /* A pinned unit on the device is never loaded again, so it is never placed:
         * the unit after it follows the one before (else the pass went unplaced from
         * there, off the record: every unit after it a miss, as prefill on the H100). */
        if (res.units[w].n > 0 && !(res.units[w].pinned && res.units[w].loaded))
            return w;
    }
    return u;
}

/* ptr lies in a granule of r that begins past every pointer discovery saw into it. */
static inline int past_seen(const res_region_t *r, uint64_t ptr)
{
    size_t g = vmm_gran();
    return g != 0 && ptr >= r->va && ptr < r->va + r->len && (ptr - r->va) / g * g > r->seen;
}

/* ", <size>, at <offset>" of a touch at ptr into streamed region r, for the messages
 * (empty without a pointer), in out: a touch far past where the pass used the region
 * (a caching allocator's segment holds weights and free room that activations may
 * take) reads there. An argument of the capped log calls, so made only when written. */
static const char *touch_where(const res_region_t *r, uint64_t ptr, char *out, size_t cap)
{
    char a[32], b[32];
    out[0] = '\0';
    if (ptr >= r->va && ptr < r->va + r->size)
        snprintf(out, cap, ", %s, at %s", human_bytes(r->size, a, sizeof a), human_bytes(ptr - r->va, b, sizeof b));
    return out;
}

/* ids: the regions a call touches (region table ids); lo (NULL: none) the lowest
 * pointer found into each (core/scan.c: the kernel reaches nothing of the region below
 * it); unsure (NULL: none) flags those found only at argument words that held garbage
 * in discovery; pos, at and weightless as ft_res_touch_t takes them, kernel as
 * ft_res_repeat_touch (0 for copies and sets).
 * Each touch of a streamed unit is judged by ft_res_classify (core/residency.h, which
 * says why each rule) and carried out here: a miss loads the unit on the caller's
 * stream, a stale touch of a unit that is not loaded loads nothing and is counted, and
 * the call waits for the unit's copy and records its use. */
/* Where unit un's stale touch fell: region id (starting at base) at pointer p (0: not
 * known), by the call's kernel (res_kernel_name). */
static void stale_where(res_unit_t *un, uint32_t id, uint64_t base, uint64_t p)
{
    if (un->stale_misses == 0) {
        un->stale_region = id;
        un->stale_lo = p;
        un->stale_spread = p == 0;
        un->stale_n_ids = un->stale_unknown = 0;
        un->stale_first_off = p != 0 && p >= base ? p - base : 0;
        snprintf(un->stale_kernel, sizeof un->stale_kernel, "%s", res_kernel_name);
    } else if (id != un->stale_region || p == 0) {
        un->stale_spread = 1;
    } else if (p < un->stale_lo) {
        un->stale_lo = p;
    }
    un->stale_unknown += p == 0;
    int seen = 0;
    for (int k = 0; k < un->stale_n_ids && k < 4; k++)
        seen |= un->stale_ids[k] == id;
    if (!seen) {
        if (un->stale_n_ids < 4)
            un->stale_ids[un->stale_n_ids] = id;
        un->stale_n_ids++;
    }
}

/* Where unit un's stale touches fell, for the warnings that keep it or not. */
static const char *stale_text(const res_unit_t *un, char *out, size_t len)
{
    char a[32];
    int n = snprintf(out, len, "in %d region(s), the first region %u, %s into it, by %s", un->stale_n_ids,
                     un->stale_ids[0], human_bytes(un->stale_first_off, a, sizeof a), un->stale_kernel);
    if (un->stale_unknown > 0 && n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, "; %d at no known pointer", un->stale_unknown);
    return out;
}

static void touch_each(const uint32_t *ids, const uint64_t *lo, const uint8_t *unsure, size_t n,
                       cudaStream_t stream, long pos, int weightless, uint64_t kernel, long at);

uint32_t res_follow_of(uint32_t id, uint64_t lo)
{
    return res.follow != NULL && id < res.n_ids && res.follow[id].next != 0 &&
                   (lo == 0 || lo >= res.follow[id].from)
               ? res.follow[id].next
               : 0;
}

/* res_touch's ids with the pieces touches reach on into (res.follow): a pointer at or
 * past the start of a piece's last tensor reaches the pieces of that tensor's body,
 * which another unit may hold (lo NULL: no pointers known, every touch of such a piece). In *xid, *xlo and *xunsure (malloc'd; the caller frees
 * them) and their count returned; 0 when no touch reaches on (or no memory: then
 * every streamed unit is loaded instead, *all set). */
static size_t follow_pieces(const uint32_t *ids, const uint64_t *lo, const uint8_t *unsure, size_t n,
                            uint32_t **xid, uint64_t **xlo, uint8_t **xunsure, int *all)
{
    size_t extra = 0;
    *all = 0;
    for (size_t i = 0; i < n; i++)
        if (res_follow_of(ids[i], lo != NULL ? lo[i] : 0) != 0)
            extra++;
    if (extra == 0)
        return 0;
    *xid = malloc((n + extra) * sizeof **xid);
    *xlo = malloc((n + extra) * sizeof **xlo);
    *xunsure = calloc(n + extra, sizeof **xunsure);
    if (*xid == NULL || *xlo == NULL || *xunsure == NULL) {
        free(*xid);
        free(*xlo);
        free(*xunsure);
        *all = 1;
        return 0;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        (*xid)[m] = ids[i];
        (*xlo)[m] = lo != NULL ? lo[i] : 0;
        (*xunsure)[m++] = unsure != NULL ? unsure[i] : 0;
        if (res_follow_of(ids[i], lo != NULL ? lo[i] : 0) != 0) {
            (*xid)[m] = res.follow[ids[i]].next;
            (*xlo)[m] = res.follow[ids[i]].at;
            (*xunsure)[m++] = unsure != NULL ? unsure[i] : 0;
        }
    }
    return m;
}

static void touch_every_unit(const char *name, size_t lost, cudaStream_t stream);

static void res_touch(const uint32_t *ids, const uint64_t *lo, const uint8_t *unsure, size_t n,
                      cudaStream_t stream, long pos, int weightless, uint64_t kernel, long at)
{
    if (!guarding())
        return;
    if (res.follow != NULL) {
        uint32_t *xid;
        uint64_t *xlo;
        uint8_t *xunsure;
        int all;
        size_t m = follow_pieces(ids, lo, unsure, n, &xid, &xlo, &xunsure, &all);
        if (all)
            touch_every_unit(res_kernel_name, 0, stream);
        if (m > 0) {
            touch_each(xid, xlo, xunsure, m, stream, pos, weightless, kernel, at);
            free(xid);
            free(xlo);
            free(xunsure);
            return;
        }
    }
    touch_each(ids, lo, unsure, n, stream, pos, weightless, kernel, at);
}

static void touch_each(const uint32_t *ids, const uint64_t *lo, const uint8_t *unsure, size_t n,
                       cudaStream_t stream, long pos, int weightless, uint64_t kernel, long at)
{
    /* res.lock is held: engine_enter took it for this call. */
    const ft_res_pass_t pass = { res.pass_len, res.pass_start };
    int kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= res.n_ids || res.by_id[ids[i]] < 0)
            continue;
        res_region_t *r = &res.regions[res.by_id[ids[i]]];
        res_unit_t *un = &res.units[r->unit];
        /* In a move of the prefetching thread: the call waits for it (the unit is loaded
         * then, or has left its slot). */
        if (un->moving)
            mover_settle_unit(r->unit);
        uint64_t p = lo != NULL ? lo[i] : 0;
        /* Reached only past a split region's head: its tail, which stays on the device
         * (res_split_tail). */
        if (p != 0 && p >= r->va + r->len)
            continue;
        /* ... or only past every pointer discovery saw into it, by a granule: other data
         * in the room after its weights, which the region's tail keeps from now on. */
        if (p != 0 && !(unsure != NULL && unsure[i]) && past_seen(r, p) && res_split_tail(r, p))
            continue;
        /* follows: asked at a unit's first touch after its load, the one whose placing
         * counts (below). */
        ft_res_touch_t t = { unsure != NULL && unsure[i], weightless, pos, at,
                             ft_res_repeat_touch(&repeats, kernel, ids[i], lane_id(), lane_launches, res.pass_len),
                             !un->touched_since_load && lane_placed >= 0 && next_streamed(lane_placed) == r->unit };
        ft_res_verdict_t v = ft_res_classify(&t, (ft_res_range_t){ un->first_launch, un->last_launch }, un->loaded,
                                             &pass, res.strict);
        if (v.act == FT_RES_LEAVE) {
            unsigned unexpected = v.stale & (FT_RES_STALE_WEIGHTLESS | FT_RES_STALE_OUTSIDE);
            res.unsure_skipped++;
            res.unexpected_skipped += (uint64_t)(unexpected && !t.unsure);
            res.repeat_skipped += (uint64_t)(t.repeat && !unexpected && !t.unsure);
            char where[96];
            FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s: a stale address of %s (region %u%s%s) loads nothing",
                          res_kernel_name, ft_disc_unit(disc, (size_t)r->unit)->name, ids[i],
                          touch_where(r, p, where, sizeof where),
                          weightless ? ", from a kernel that touched no weight in the recorded pass"
                          : unexpected ? ", outside its unit's range of the pass"
                          : t.repeat ? ", touched by this kernel every few launches" : "");
            continue;
        }
        /* The loaded units the call touches further on are its own before any load makes
         * room: evicted now, each would be a miss of its own further on. */
        if (v.act == FT_RES_MISS && !kept) {
            kept = 1;
            keep_loaded(ids + i + 1, n - i - 1, stream);
        }
        /* A unit the prefetching thread is about to load (its last move still under way,
         * the launches ahead of the device): waited for, not loaded here. */
        if (v.act == FT_RES_MISS && mover_catch(r->unit))
            v.act = FT_RES_USE;
        if (v.act == FT_RES_MISS) {
            res.misses++;
            if (v.stale != 0 && !un->pinned && !un->pin_refused) {
                stale_where(un, ids[i], r->va, p);
                if (++un->stale_misses >= STALE_MISSES_PIN && pin_pending < 0)
                    pin_pending = r->unit;
            }
            if (res.n_miss_log < MISS_LOG) {
                struct miss *m = &res.miss_log[res.n_miss_log++];
                snprintf(m->kernel, sizeof m->kernel, "%s", res_kernel_name);
                m->unit = r->unit;
                m->off_script = lane_off_script;
                m->pass = res.passes;
                m->pos = lane_last_pos;
            }
            char where[96];
            touch_where(r, p, where, sizeof where);
            FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s: miss on %s (region %u%s)%s", res_kernel_name,
                          ft_disc_unit(disc, (size_t)r->unit)->name, ids[i], where,
                          v.stale != 0 ? ", outside its part of the pass" : "");
            /* Every one at debug level (the capped line above stops at 8): with the
             * pass and the launch, to tell where a run of misses starts. */
            FT_DEBUG("residency: miss %llu: %s on %s (region %u%s)%s, pass %llu, launch %ld of it%s",
                     (unsigned long long)res.misses, res_kernel_name, ft_disc_unit(disc, (size_t)r->unit)->name,
                     ids[i], where, v.stale != 0 ? ", outside its part of the pass" : "",
                     (unsigned long long)res.passes, lane_off_script ? at : pos,
                     lane_off_script ? " (off the record)" : "");
            load_unit(r->unit, stream, -1);
        }
        /* The first touch of a unit after its load: what follows it in the learned
         * order is loaded next, whatever the launch's position in the pass. A stale
         * address (unsure) says nothing of where the pass is. */
        if (!un->touched_since_load && v.placing) {
            un->touched_since_load = 1;
            if (lane_placed >= 0 && lane_placed != r->unit && checksum_prev < 0)
                checksum_prev = lane_placed;
            lane_placed = r->unit;
            if (prefetch_after < 0)
                prefetch_after = r->unit;
        }
        unit_use(r->unit, stream);
    }
    touched_stream = stream;
}

/* A launch whose regions could not all be recorded (arguments whose layout the driver
 * does not give, observe.c; its scan set could not grow: out of memory, core/scan.h):
 * any streamed unit may be among them, so every one is loaded
 * (a miss when it was not) and waited for, over the slots if it must be. Slow, never a
 * fault. res.lock held. */
static void touch_every_unit(const char *name, size_t lost, cudaStream_t stream)
{
    mover_settle(1);
    FT_WARN_CAPPED(1, "residency: %s may reach regions that were not recorded (%zu: arguments whose layout "
                  "the driver does not give, or out of memory): every streamed unit is loaded for it", name, lost);
    /* The units loaded now are the call's first, so that no load below evicts them. */
    for (int u = 0; u < res.n_units; u++)
        if (res.units[u].n > 0 && res.units[u].loaded)
            unit_use(u, stream);
    for (int u = 0; u < res.n_units; u++) {
        if (res.units[u].n == 0) /* resident: nothing streamed */
            continue;
        if (!res.units[u].loaded) {
            res.misses++;
            load_unit(u, stream, -1);
        }
        unit_use(u, stream);
    }
    touched_stream = stream;
}

/* The units' ranges of positions in pass order, for ft_res_unit_at, and room for the
 * units a prefetch loads (res.lock held). The ranges are set at the switch and fixed
 * from then on, so they are copied once, at the first guarded call that needs them.
 * 0, or -1 when they cannot be had: then no unit is found at a position and nothing is
 * prefetched, and every unit a call touches is still loaded. */
static ft_res_range_t *ranges;
static int *ahead;

static int guard_arrays(void)
{
    if (ranges != NULL)
        return 0;
    if (res.n_units <= 0)
        return -1;
    ranges = malloc((size_t)res.n_units * sizeof *ranges);
    ahead = malloc((size_t)res.n_units * sizeof *ahead);
    if (ranges == NULL || ahead == NULL) {
        free(ranges);
        free(ahead);
        ranges = NULL;
        ahead = NULL;
        FT_LOG_CAPPED(FT_LOG_ERROR, 1, "residency: out of memory: no prefetch until it can be had");
        return -1;
    }
    for (int i = 0; i < res.n_units; i++)
        ranges[i] = (ft_res_range_t){ res.units[i].first_launch, res.units[i].last_launch };
    return 0;
}

static int unit_bound_at(uint32_t pos, int end)
{
    return guard_arrays() == 0 ? ft_res_unit_at(ranges, res.n_units, pos, end) : -1;
}

/* Prefetch: the pass has reached unit u's first launch; the units ft_res_prefetch
 * names are loaded on the side stream, those not loaded already: by the prefetching
 * thread when it takes the request (mover.c), else here. */
static void res_prefetch_now(int u);

static void res_prefetch(int u)
{
    if (!mover_request(u))
        res_prefetch_now(u);
}

/* The units the prefetch after u loads, in `ahead`, and how many; after a call that
 * went over the slots, the units beyond them leave first, other than those. */
static int prefetch_list(int u)
{
    const ft_res_unit_t *view = guard_arrays() == 0 ? res_view(-1, u) : NULL;
    int n = view != NULL ? ft_res_prefetch(view, res.n_units, u, res.slots, ahead) : 0;
    if (view != NULL)
        res_shed(u, ahead, n);
    return n;
}

static void res_prefetch_now(int u)
{
    int n = prefetch_list(u);
    for (int k = 0; k < n; k++) {
        int w = ahead[k];
        if (!res.units[w].loaded) {
            load_unit(w, res.side, u);
            if (res.units[w].loaded)
                res.prefetches++;
        }
    }
}

int res_prefetch_next(int u)
{
    int n = prefetch_list(u);
    for (int k = 0; k < n; k++)
        if (!res.units[ahead[k]].loaded)
            return res_move_one(ahead[k], u) >= 0;
    return 0;
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
    timing_pass_start(stream);
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

/* What the process holds through FlexTensor now (res.lock held). */
static uint64_t held_now(void)
{
    ft_gpu_memory_usage_t usage;
    usage_locked(&usage);
    return usage.total_bytes;
}

/* The call being guarded had units loaded over the slots for it (load_unit's
 * FT_RES_OVER, since over_loads was over0): counted for the exit report, and said
 * once. It reads more streamed units than the slots hold, so the engine holds them all
 * until it has run, over the slots and, when the budget has no room for them, over the
 * budget: the budget gives way rather than the kernel faulting. res_shed brings them
 * back within the slots at the next prefetch. res.lock held. */
static void note_over(const char *what, uint64_t over0)
{
    if (res.over_loads == over0)
        return;
    int beyond = res.loaded - res.slots, reads = n_touched;
    if (touched_more) {
        reads = 0;
        for (int u = 0; u < res.n_units; u++)
            reads += touched_by_this_call(u);
    }
    res.over_calls++;
    if (beyond > res.over_most)
        res.over_most = beyond;
    char a[32], b[32], c[32];
    FT_WARN_CAPPED(1, "residency: %s reads %d streamed unit(s), %d beyond the %d slot(s): they are "
                   "loaded over the slots for it (%s of streamed units held; %s through FlexTensor, "
                   "budget %s) and unloaded again at the next prefetch; later calls like it are "
                   "counted in the exit report", what, reads, beyond, res.slots,
                   human_bytes(res.held_bytes, a, sizeof a), human_bytes(held_now(), b, sizeof b),
                   plan.in.budget_bytes > 0 ? human_bytes(plan.in.budget_bytes, c, sizeof c) : "none");
}

/* FT_LOG_LEVEL=trace's clock of the first passes (the application thread's): the pass's
 * start, the traced launch's entry into the guard, and its hook's time to the end of
 * res_call_done. */
static __thread uint64_t trace_pass_t0, trace_hook_t0, trace_hook_ns;

/* The lane's pass has left the record at this launch of kernel `name`, at position
 * tracked (res.lock held): counted for the exit report, and said at debug level with
 * what the record has there (the first 16 times). */
static void left_record(const char *name, long tracked)
{
    res.off_record++;
    if (res.off_record > 16 || !FT_LOG_ENABLED(FT_LOG_DEBUG))
        return;
    const char *rec = ft_disc_pass_kernel(disc, tracked);
    FT_DEBUG("residency: pass %llu leaves the record at launch %ld: %s, where the recorded pass has %s",
             (unsigned long long)res.passes, tracked, name, rec != NULL ? rec : "no launch (it ended before)");
}

/* A streamed unit loaded and still, whose checksum since its last use is not issued yet:
 * one issued now follows its last use. */
static int checksum_due(const res_unit_t *un)
{
    return !un->moving && un->loaded && un->n > 0 && !checksum_current(un);
}

/* --- the room of the program's pools in host-located memory, reached after the plan --- */

/* The plan (res.switches) for which room could not all come to the device: eager
 * launches stop asking until the next plan (each ask walks every piece). */
static uint64_t room_refused_plan = UINT64_MAX;

int res_in_room(uint64_t ptr)
{
    ft_region_t r;
    vmm_t *v;
    return ft_regions_find(regions, ptr, &r) && (v = vmm_find(r.base)) != NULL && v->on_host;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

uint64_t res_room_in(uint64_t *ptr, size_t n, const char *what, int eager)
{
    if (n == 0 || (eager && room_refused_plan == res.switches))
        return 0;
    qsort(ptr, n, sizeof *ptr, cmp_u64);
    uint64_t pieces = 0, bytes = vmm_reached_to_device(ptr, n, !eager, 1, UINT64_MAX, &pieces);
    if (bytes == 0)
        return 0;
    char a[32], b[32], cause[128];
    uint64_t moved = 0, got = 0;
    snprintf(cause, sizeof cause, "bringing %s of room that %s point into to the device",
             human_bytes(bytes, a, sizeof a), what);
    mover_settle(1);
    int capturing = capture_under_way();
    if (!capturing) {
        /* For a graph's, units are made to stream as for an allocation, until it fits or
         * none is left; what that makes is used either way (the room a graph runs on
         * over the link costs it more than a unit streamed in each step). */
        if (!eager)
            budget_room_locked(bytes, cause);
        moved = vmm_reached_to_device(ptr, n, !eager, 0, budget_left_locked(), &got);
    }
    res.room_in_bytes += moved;
    if (moved == bytes) {
        FT_LOG_CAPPED(FT_LOG_INFO, 8, "residency: %s point into the program's pools in host-located memory (room "
                      "no call had used before the plan): %s (%llu piece(s)) brought to the device", what,
                      human_bytes(bytes, a, sizeof a), (unsigned long long)pieces);
        return moved;
    }
    if (!capturing)
        room_refused_plan = res.switches;
    if (!capturing || !eager)
        FT_WARN_CAPPED(4, "residency: %s point into %s of the program's pools in host-located memory (%llu "
                       "piece(s), room no call had used before the plan); %s brought to the device, the rest "
                       "stays there (%s), and the device reads it over the link, more slowly", what,
                       human_bytes(bytes, a, sizeof a), (unsigned long long)pieces, human_bytes(moved, b, sizeof b),
                       capturing ? "a stream capture is under way"
                       : eager   ? "the budget has no more room left, and no unit streams for an eager launch's"
                                 : "the budget cannot hold it even with every weight that can leave the device "
                                   "streamed");
    return moved;
}

/* An eager launch's pointers into the room (res_room_in). */
static void launch_room_in(const char *name, const ft_scan_set_t *set)
{
    if (__atomic_load_n(&host_room_bytes, __ATOMIC_RELAXED) == 0 || room_refused_plan == res.switches)
        return;
    uint64_t ptr[16];
    size_t n = 0;
    for (size_t i = 0; i < set->n && n < sizeof ptr / sizeof *ptr; i++)
        if (!set->unsure[i] && res_in_room(set->lo[i]))
            ptr[n++] = set->lo[i];
    if (n > 0) {
        char what[300];
        snprintf(what, sizeof what, "the arguments of %s", name);
        res_room_in(ptr, n, what, 1);
    }
}

/* The guard of a launch of kernel `key` (`name`, for messages) whose arguments hold the
 * regions of `set` (res.lock held): pass tracking sees the touches the kernel is sure
 * to make; the guard all. */
void res_guard_launch(uint64_t key, const char *name, const ft_scan_set_t *set, cudaStream_t stream)
{
    uint64_t guard_t0 = res.passes <= 4 && FT_LOG_ENABLED(FT_LOG_TRACE) ? now_ns() : 0;
    int expected, weightless;
    launch_room_in(name, set);
    long tracked = ft_disc_track(disc, lane_id(), key, set, &expected, &weightless);
    if (tracked == 0)
        step_mark(stream);
    int was_off = lane_off_script;
    long pos = ft_res_lane_pos(&lane_off_script, tracked, expected);
    if (lane_off_script && !was_off)
        left_record(name, tracked);
    /* A weight that put the pass forward (expected 2) skipped the positions between:
     * the units whose last launch lay there are done with, and their checksums follow
     * at once, as after their last launch (a prefill's passes launch fewer kernels
     * between their weights than the recorded decode's: without it, each such unit
     * leaves with a host wait). SKIP_WALK bounds one launch's host work: a longer jump
     * walks nothing (its units leave with host waits, as before). */
    if (pos >= 0 && expected == 2 && lane_prev_pos >= 0 && pos > lane_prev_pos + 1 && pos - lane_prev_pos < SKIP_WALK)
        for (long q = lane_prev_pos + 1; q < pos; q++) {
            int u = unit_bound_at((uint32_t)q, 1);
            if (u >= 0 && checksum_due(&res.units[u]) && checksum_issue(u) == 0)
                res.skipped_ends++;
        }
    lane_prev_pos = pos;
    res_kernel_name = name;
    lane_launches++;
    uint64_t over0 = res.over_loads;
    /* The runtime control's work at a pass boundary, and a re-profile's marks on either
     * side of the waits for the units this launch touches (control.c). */
    if (control_waiting) {
        mover_settle(1);
        control_launch(tracked, pos, stream, 0);
    }
    /* Offload timing: the unit that begins here, its stall timed across the waits. */
    int begins = timing_on() && pos >= 0 ? unit_bound_at((uint32_t)pos, 0) : -1;
    /* FT_LOG_LEVEL=trace: each launch of the first four passes after the switch, as the
     * guard places it, with the host clock since the pass began and what the launch
     * before took in FlexTensor and the real call (a host that stalls shows here). */
    if (guard_t0 != 0 && res.passes <= 4) {
        uint64_t t = now_ns();
        if (tracked == 0)
            trace_pass_t0 = t;
        FT_TRACE("residency: pass %llu, launch %ld (%s), %s: position %ld, unit %d begins, unit %d ends; "
                 "+%.0f us, the launch before %.0f us in the hook",
                 (unsigned long long)res.passes, tracked,
                 expected == 2 ? "sure by its weight" : expected ? "as recorded" : "not as recorded", name, pos,
                 pos >= 0 ? unit_bound_at((uint32_t)pos, 0) : -1, pos >= 0 ? unit_bound_at((uint32_t)pos, 1) : -1,
                 (double)(t - trace_pass_t0) / 1e3, (double)trace_hook_ns / 1e3);
        trace_hook_t0 = guard_t0;
    }
    if (begins >= 0)
        timing_unit_wait(begins, stream);
    res_touch(set->id, set->lo, set->unsure, set->n, stream, pos, weightless, key, tracked);
    if (set->dropped > 0 && guarding())
        touch_every_unit(name, set->dropped, stream);
    if (begins >= 0)
        timing_unit_begin(begins, stream);
    if (control_waiting)
        control_launch(tracked, pos, stream, 1);
    note_over(name, over0);
    res_kernel_name = "?";
    lane_last_pos = tracked; /* a miss above was after the launch before */
    /* After this launch is enqueued (res_call_done): an eviction waits on the host for
     * the evicted unit's last use and its copy back, and the device should have this
     * unit's first kernel to run meanwhile. */
    if (pos >= 0) {
        int at = unit_bound_at((uint32_t)pos, 0);
        if (at >= 0)
            prefetch_after = lane_placed = at;
        checksum_after = unit_bound_at((uint32_t)pos, 1);
        timing_after = timing_on() ? checksum_after : -1;
        timing_stream = stream;
    }
}

/* The guard for copies and sets: their device source and destination. */
/* The pieces after r's that a copy at p of span bytes reaches (r a piece of an
 * allocation served in pieces; span 0: not known, to the allocation's end), written to
 * ids and ptrs when they are not NULL; how many. */
static size_t copy_pieces(uint64_t p, size_t span, ft_region_t r, uint32_t *ids, uint64_t *ptrs)
{
    uint64_t end = span != 0 ? p + span : UINT64_MAX;
    size_t n = 0;
    ft_region_t q;
    for (; r.base + r.size < end && piece_after(&r, &q); r = q, n++)
        if (ids != NULL) {
            ids[n] = q.id;
            ptrs[n] = q.base;
        }
    return n;
}

void res_guard_copy(const void *dst, const void *src, size_t dspan, size_t sspan, cudaStream_t stream)
{
    if (!guarding())
        return;
    const void *p[2] = { dst, src };
    size_t span[2] = { dspan, sspan }, more[2] = { 0, 0 };
    ft_region_t r[2];
    int found[2] = { 0, 0 };
    for (int i = 0; i < 2; i++)
        if (p[i] != NULL && (found[i] = ft_regions_find(regions, (uint64_t)(uintptr_t)p[i], &r[i])))
            more[i] = copy_pieces((uint64_t)(uintptr_t)p[i], span[i], r[i], NULL, NULL);
    /* The pieces of one allocation (vmm_alloc's) the copy reaches on into come after. */
    uint32_t ids2[2], *ids = ids2;
    uint64_t ptrs2[2], *ptrs = ptrs2;
    size_t n = 0, total = 2 + more[0] + more[1];
    if (total > 2) {
        ids = malloc(total * sizeof *ids);
        ptrs = malloc(total * sizeof *ptrs);
        if (ids == NULL || ptrs == NULL) {
            free(ids);
            free(ptrs);
            ids = NULL; /* no memory: every streamed unit is loaded instead */
            ptrs = ptrs2;
        }
    }
    for (int i = 0; ids != NULL && i < 2; i++)
        if (found[i]) {
            /* A copy within one region: two entries, each judged at its own pointer. */
            ptrs[n] = (uint64_t)(uintptr_t)p[i];
            ids[n++] = r[i].id;
        }
    for (int i = 0; ids != NULL && i < 2; i++)
        if (more[i] > 0)
            n += copy_pieces((uint64_t)(uintptr_t)p[i], span[i], r[i], ids + n, ptrs + n);
    uint64_t over0 = res.over_loads;
    res_kernel_name = "a copy or set";
    if (ids == NULL)
        touch_every_unit(res_kernel_name, 0, stream);
    else
        res_touch(ids, ptrs, NULL, n, stream, -1, 0, 0, -1);
    note_over(res_kernel_name, over0);
    res_kernel_name = "?";
    if (ids != ids2)
        free(ids);
    if (ptrs != ptrs2)
        free(ptrs);
}

/* The guard of a graph launch (res.lock held): every streamed unit among the regions
 * `ids` (every streamed unit with `all`: a graph whose captured calls are not all
 * known) is loaded before the graph on `stream`, over the slots when they do not fit,
 * and waited for; res_call_done records their use behind the graph, so that no unload
 * takes one before the graph has run. The graph's kernels do not pass through the
 * wrappers when it runs: this is the only guard they get (capture.c). A graph that
 * reads more than the slots hold is loaded over them at each launch, said once with
 * its bytes. Returns the units loaded for it. */
int res_guard_graph(const char *name, const uint32_t *ids, const uint64_t *lo, size_t n, int all,
                    cudaStream_t stream)
{
    if (!guarding())
        return 0;
    int loads = 0, reads = 0;
    uint64_t over0 = res.over_loads, bytes = 0;
    /* The pieces a captured touch reaches on into (res.follow): where its pointers are
     * not known (lo NULL or 0: a whole graph's touches keep none; a cut segment's do),
     * every touch of such a piece counts. */
    uint32_t *xid = NULL;
    uint64_t *xlo = NULL;
    uint8_t *xunsure = NULL;
    if (!all && res.follow != NULL) {
        int none; /* no memory: every streamed unit, never one missing */
        size_t m = follow_pieces(ids, lo, NULL, n, &xid, &xlo, &xunsure, &none);
        all |= none;
        if (m > 0) {
            ids = xid;
            n = m;
        }
    }
    /* The loaded ones first, so that no load below evicts them. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < (all ? (size_t)res.n_units : n); i++) {
            int u;
            if (all)
                u = (int)i;
            else if (ids[i] < res.n_ids && res.by_id[ids[i]] >= 0)
                u = res.regions[res.by_id[ids[i]]].unit;
            else
                continue;
            res_unit_t *un = &res.units[u];
            if (un->n == 0 || touched_by_this_call(u) || (pass == 0 && !un->loaded))
                continue;
            if (!un->loaded) {
                res.misses++;
                FT_DEBUG("residency: %s: miss on %s", name, ft_disc_unit(disc, (size_t)u)->name);
                load_unit(u, stream, -1);
                loads++;
            }
            unit_use(u, stream);
            reads++;
            bytes += un->bytes;
        }
    }
    touched_stream = stream;
    if (res.over_loads != over0) {
        char a[32];
        FT_WARN_CAPPED(1, "residency: %s reads %d streamed unit(s), %s, more than the %d slot(s) hold: they "
                       "are loaded over the slots before each of its launches (a graph cannot load "
                       "them as it runs)", name, reads, human_bytes(bytes, a, sizeof a), res.slots);
        res.over_calls++;
    }
    if (xid != NULL && ids == xid) {
        free(xid);
        free(xlo);
        free(xunsure);
    }
    return loads;
}

int res_unit_of(uint32_t id)
{
    if (id >= res.n_ids || res.by_id[id] < 0)
        return -1;
    int u = res.regions[res.by_id[id]].unit;
    const res_unit_t *un = &res.units[u];
    return un->n > 0 && !(un->pinned && un->loaded) ? u : -1;
}

int res_guard_segment(const char *name, const uint32_t *ids, const uint64_t *lo, size_t n, int first, int begins,
                      int ends, cudaStream_t stream)
{
    if (!guarding())
        return 0;
    if (first)
        step_mark(stream);
    /* A unit the prefetching thread is moving is its until the move ends; one it is
     * about to load, it loads now (mover_catch), as for an eager launch's touch. */
    for (size_t i = 0; i < 2 * n; i++) {
        /* ... the units of its regions, then of the pieces they reach on into */
        uint32_t id = i < n ? ids[i] : res_follow_of(ids[i - n], lo != NULL ? lo[i - n] : 0);
        int u = id != 0 || i < n ? res_unit_of(id) : -1;
        if (u >= 0 && res.units[u].moving)
            mover_settle_unit(u);
        else if (u >= 0 && !res.units[u].loaded)
            mover_catch(u);
    }
    int loads = res_guard_graph(name, ids, lo, n, 0, stream);
    /* The eager lane's placement (lane_placed) is left as it is: a graph's segments do
     * not tell where the thread's eager passes are. */
    if (begins >= 0)
        prefetch_after = begins;
    checksum_after = ends;
    return loads;
}

/* The call just enqueued used unit u: its use is recorded behind the call. */
static void call_used(int u)
{
    unit_record_use(&res.units[u], touched_stream);
    res.units[u].uses++;
}

/* Unit u is kept on the device (no slot: it leaves the slots' count if loaded), and
 * resident units are made to stream until the budget holds (budget_hold_locked). 0;
 * -1 when none is left to: the budget is kept, u streams on as planned, and is not tried
 * again (each try synchronises the device). res.lock held, no capture under way. */
static int pin_within_budget(int u)
{
    res_unit_t *un = &res.units[u];
    char cause[160];
    un->pinned = 1;
    if (un->loaded)
        res.loaded--;
    snprintf(cause, sizeof cause, "keeping %s on the device", ft_disc_unit(disc, (size_t)u)->name);
    if (budget_hold_locked(cause, 0) == 0)
        return 0;
    un->pinned = 0;
    un->pin_refused = 1;
    if (un->loaded)
        res.loaded++;
    return -1;
}

/* Unit u was loaded STALE_MISSES_PIN times for stale touches: it stays on the device
 * (no slot: it leaves the slots' count if loaded), and resident units are made to
 * stream until the budget holds (budget_hold_locked); when none is left to, u streams
 * on and the budget holds, so that pins never add up past it over a long run. Done
 * after the call that loaded it last is enqueued: making a unit stream synchronises
 * the device first, so no unit leaves under a kernel that uses it. Not while a stream
 * capture is under way (the synchronisation would break it): then later. res.lock
 * held. */
static void pin_stale_unit(int u)
{
    mover_settle(1);
    res_unit_t *un = &res.units[u];
    if (un->pinned || capture_under_way())
        return;
    /* All in one region past its first granule: that region's part from there stays,
     * rather than the unit (res_split_stale), once; its touches there need no load. */
    if (!un->stale_spread && !un->stale_split_tried && un->stale_region < res.n_ids &&
        res.by_id[un->stale_region] >= 0) {
        un->stale_split_tried = 1;
        if (res_split_stale(&res.regions[res.by_id[un->stale_region]], un->stale_lo)) {
            un->stale_misses = 0;
            return;
        }
    }
    char a[32], where[256];
    const char *name = ft_disc_unit(disc, (size_t)u)->name;
    if (pin_within_budget(u) != 0) {
        /* Its stale loads cost time, never memory. */
        FT_WARN("residency: %s was loaded %d times for argument words outside its part of the pass (%s; "
                "stale addresses the guard must honour); no resident unit is left to stream instead of it, so "
                "it streams on, within the budget", name, un->stale_misses, stale_text(un, where, sizeof where));
        return;
    }
    FT_WARN("residency: %s was loaded %d times for argument words outside its part of the pass (%s; stale "
            "addresses the guard must honour): it stays on the device from now on (%s)",
            name, un->stale_misses, stale_text(un, where, sizeof where), human_bytes(un->bytes, a, sizeof a));
    res.stale_pins++;
}

/* Unit u stays on the device from now on, as pin_stale_unit keeps one, for `why` (a
 * CUDA graph reads it in many places apart: capture.c). 0 when it does (or did
 * already); -1 when it cannot: a capture is under way (making a unit stream
 * synchronises the device), or no resident unit is left to stream instead of it (the
 * budget is kept: u streams on, and is not tried again). res.lock held. */
int res_pin_unit(int u, const char *why)
{
    mover_settle(1);
    res_unit_t *un = &res.units[u];
    if (un->pinned)
        return 0;
    if (un->pin_refused || capture_under_way())
        return -1;
    char a[32];
    const char *name = ft_disc_unit(disc, (size_t)u)->name;
    if (pin_within_budget(u) != 0) {
        FT_INFO("residency: %s: %s; no resident unit is left to stream instead of it, so it streams on, within "
                "the budget", name, why);
        return -1;
    }
    FT_INFO("residency: %s: %s: it stays on the device from now on (%s)", name, why,
            human_bytes(un->bytes, a, sizeof a));
    res.graph_pins++;
    return 0;
}

/* A guarded call is enqueued (res.lock held; the caller, engine_leave, releases it): the
 * units it touched record their use behind it, then the checksum and the prefetch it
 * asked for are issued. */
void res_call_done(void)
{
    if (touched_more) { /* past the list: the units stamped with this call */
        for (int u = 0; u < res.n_units; u++)
            if (res.units[u].touched_in == guard_call)
                call_used(u);
    } else {
        for (int k = 0; k < n_touched; k++)
            call_used(touched[k]);
    }
    n_touched = 0;
    touched_more = 0;
    guard_call++;
    if (pin_pending >= 0 && !capture_under_way()) {
        pin_stale_unit(pin_pending);
        pin_pending = -1;
    }
    if (res.split_hold && !capture_under_way()) {
        res.split_hold = 0;
        budget_hold_locked("the tail of a split region (other data past its weights, kept on the device)", 1);
    }
    /* A streamed unit's last launch of the pass is enqueued: its checksum follows
     * it at once, ready by the time the unit is evicted. */
    if (checksum_after >= 0) {
        if (!res.units[checksum_after].moving && res.units[checksum_after].loaded && res.units[checksum_after].n > 0)
            checksum_issue(checksum_after);
        checksum_after = -1;
    }
    if (checksum_prev >= 0) {
        if (checksum_due(&res.units[checksum_prev]))
            checksum_issue(checksum_prev);
        checksum_prev = -1;
    }
    if (timing_after >= 0) {
        timing_unit_end(timing_after, timing_stream);
        timing_after = -1;
    }
    if (prefetch_after >= 0) {
        res_prefetch(prefetch_after);
        prefetch_after = -1;
    } else {
        mover_pump(); /* the next move of a prefetch under way, once the last is over */
    }
    if (trace_hook_t0 != 0) {
        trace_hook_ns = now_ns() - trace_hook_t0;
        trace_hook_t0 = 0;
    }
}

/* The plan's weights freed (reload.c, res.lock held, no guarded call under way): what
 * the guard kept of the first plan's units goes; the next plan's switch sets it up
 * again. */
void guard_forget(void)
{
    free(ranges);
    free(ahead);
    ranges = NULL;
    ahead = NULL;
    ft_res_repeat_free(&repeats);
    pin_pending = -1;
}

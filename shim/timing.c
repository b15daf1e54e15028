/* timing.c - offload timing (FT_OFFLOAD_TIMING, ft_offload_timing_collect): per
 * streamed unit, the bytes moved, the time of its copies, the compute they overlapped,
 * the stall its compute waited and its hits and misses; per pass, the measured step
 * against the plan's; and the events of the last TM_KEEP_PASSES passes, for the
 * trace's TIMELINE record (ft-trace --chrome, --timeline). docs/trace-format.md.
 *
 * How it measures: CUDA events (with timing), recorded where the residency engine
 * already acts, never waited for. Copies: one before and one after a load's copies, on
 * the stream that carries them (the side stream for a prefetch, the caller's for a
 * miss); unloads: one before and one after, on the side stream (an unload is host
 * work: its span is where the side stream stood then). Compute, on the timed lane's
 * stream: before the guard's waits at a unit's first launch of the pass (e0), after
 * them (e1), and after its last launch (e2): e1 - e0 is the stall (the stream waiting
 * for the unit's copy, or a miss's copy on the stream itself), e2 - e1 the compute.
 * A pass's events are read at later pass starts, at the program's synchronisations and
 * at ft_offload_timing_collect, with cuEventQuery: a pass whose events are not all
 * complete is left for later, and one still pending when its slot is needed again is
 * given up (counted as lost). Nothing is recorded while a stream capture is under way
 * (an event recorded into a captured stream would become part of the graph).
 *
 * Counts (loads, hits, misses, bytes) are taken on the host at each load and unload,
 * exactly; times only for the passes read. A hit is a load issued ahead of use on the
 * side stream (a prefetch); a miss, a load the call that needed it made on its own
 * stream. hits + misses = loads. (Told apart by the stream: where the side stream
 * could not be created and the program runs on the legacy stream too, misses count as
 * hits.)
 *
 * Owns: tm, under res.lock (every hook is called with it held: the guard's and the
 * residency engine's callers; the control API and the synchronisations take it);
 * timing_enabled is written under it and read without it (a stale 0 only skips a
 * hook: relaxed). Off (FT_OFFLOAD_TIMING=off and no collect call), every hook is one
 * load and a return, and nothing is recorded or allocated. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include <stddef.h>

int timing_enabled;

/* Pass slots whose events may be in flight: a pass's events are read once its
 * closing event has completed, usually one or two passes later. */
#define TM_RING 4

enum { TM_SPAN_EVENTS = 3 };

typedef struct {
    uint8_t kind, lane;       /* FT_TIMING_* of core/trace.h; 0 the program's stream, 1 side */
    uint8_t n_ev, recorded;   /* events it uses; a bit per event recorded */
    int unit;
    cudaEvent_t ev[TM_SPAN_EVENTS];
} tm_span_t;

typedef struct {
    int state;                /* SLOT_FREE, SLOT_OPEN (the pass under way), SLOT_CLOSED */
    uint64_t pass;            /* its index among the timed lane's passes */
    uint64_t host_start;      /* now_ns at its start: places it after lost passes */
    cudaEvent_t start, end;
    tm_span_t *span;
    int n, cap;               /* spans recorded; their events created so far */
    int truncated;            /* more spans than TM_SPANS_MAX: the later ones left out */
} tm_slot_t;
enum { SLOT_FREE, SLOT_OPEN, SLOT_CLOSED };

typedef struct {
    uint64_t pass, start_ns, step_ns, stall_ns;
    uint32_t n, truncated;
    ft_timing_event_t *ev;    /* absolute ns from the first timed pass's start */
} tm_kept_t;

static struct {
    int configured;           /* FT_OFFLOAD_TIMING read */
    int set_up, failed;
    int stopped;              /* the plan timed was dropped (timing_forget): off for good */
    uint64_t lane;            /* the thread whose passes are timed (the first to start one) */
    int have_lane;
    int n_units;
    ft_timing_unit_t *unit;   /* per unit, res.units' order */
    tm_slot_t slot[TM_RING];
    int cur;                  /* the open slot, -1: none */
    uint64_t passes_started, passes, lost, step_ns_total, last_step_ns;
    uint64_t stall_ns_total;
    int *open;                /* per unit: its compute span in the open slot, -1: none */
    /* Where each kept pass starts on one clock: the previous pass read, when it came
     * just before, plus its step; after a gap, the host clock. */
    uint64_t prev_pass, prev_start_ns, prev_step_ns, host0;
    int have_prev;
    tm_kept_t kept[FT_TIMING_KEEP_PASSES]; /* the last passes read, oldest overwritten */
    uint64_t n_kept;
    /* A load under way (load_unit's begin and end): its span, and the bytes before it. */
    int load_span;
    uint64_t load_bytes0;
    int unload_span;
    uint64_t unload_wb0;
} tm = { .cur = -1, .load_span = -1, .unload_span = -1 };

/* Spans per pass at most: each unit's compute, its load and unload, and room for
 * misses and loads over the slots. */
static int spans_max(void)
{
    return 4 * tm.n_units + 64;
}

/* The arrays, at the first pass timed (res.lock held, the engine on). -1: no memory,
 * said once; timing then stays off. */
static int set_up(void)
{
    if (tm.set_up)
        return tm.failed ? -1 : 0;
    if (capture_under_way())
        return -1; /* no event is created inside a capture; the next hook tries again */
    tm.set_up = 1;
    tm.n_units = res.n_units;
    tm.unit = calloc((size_t)(tm.n_units > 0 ? tm.n_units : 1), sizeof *tm.unit);
    tm.open = malloc((size_t)(tm.n_units > 0 ? tm.n_units : 1) * sizeof *tm.open);
    int ok = tm.unit != NULL && tm.open != NULL && ev.create != NULL && drv.event_query != NULL;
    for (int i = 0; ok && i < TM_RING; i++)
        ok = (tm.slot[i].span = calloc((size_t)spans_max(), sizeof(tm_span_t))) != NULL &&
             ev.create(&tm.slot[i].start, cudaEventDefault) == cudaSuccess &&
             ev.create(&tm.slot[i].end, cudaEventDefault) == cudaSuccess;
    if (!ok) {
        tm.failed = 1;
        FT_WARN("offload timing: out of memory or CUDA events; nothing is timed");
        return -1;
    }
    for (int i = 0; i < tm.n_units; i++)
        tm.open[i] = -1;
    tm.host0 = now_ns();
    return 0;
}

/* A new span in the open slot, its events created on first use; NULL when there is no
 * open slot, a capture is under way, or the slot is full. */
static tm_span_t *span_new(int kind, int lane, int unit, int n_ev)
{
    if (tm.cur < 0 || capture_under_way())
        return NULL;
    tm_slot_t *s = &tm.slot[tm.cur];
    if (s->n == spans_max()) {
        s->truncated = 1;
        return NULL;
    }
    tm_span_t *sp = &s->span[s->n];
    for (int k = 0; k < TM_SPAN_EVENTS; k++)
        if (sp->ev[k] == NULL && ev.create(&sp->ev[k], cudaEventDefault) != cudaSuccess)
            return NULL;
    sp->kind = (uint8_t)kind;
    sp->lane = (uint8_t)lane;
    sp->unit = unit;
    sp->n_ev = (uint8_t)n_ev;
    sp->recorded = 0;
    s->n++;
    return sp;
}

static void span_mark(tm_span_t *sp, int k, cudaStream_t stream)
{
    if (ev.record(sp->ev[k], stream) == cudaSuccess)
        sp->recorded |= (uint8_t)(1u << k);
}

/* The span at index i of the open slot (an index kept between two hooks), or NULL
 * when the slot has changed since. */
static tm_span_t *span_at(int i)
{
    return tm.cur >= 0 && i >= 0 && i < tm.slot[tm.cur].n ? &tm.slot[tm.cur].span[i] : NULL;
}

/* --- reading a pass ------------------------------------------------------------------ */

static int done(cudaEvent_t e)
{
    return drv.event_query((CUevent)e) == CUDA_SUCCESS;
}

/* ns from the slot's start to e (negative when e came first: a copy issued in the pass
 * before may start there). */
static int64_t at_ns(const tm_slot_t *s, cudaEvent_t e, int *ok)
{
    float ms = 0;
    if (ev.elapsed(&ms, s->start, e) != cudaSuccess) {
        *ok = 0;
        return 0;
    }
    return (int64_t)((double)ms * 1e6);
}

static int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1)
{
    int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

/* Reads closed slot s when every event it recorded has completed: 1 read (the slot is
 * free again), 0 not yet. */
static int read_slot(tm_slot_t *s)
{
    if (!done(s->end) || !done(s->start))
        return 0;
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < s->span[i].n_ev; k++)
            if ((s->span[i].recorded >> k & 1) && !done(s->span[i].ev[k]))
                return 0;
    int ok = 1;
    int64_t step = at_ns(s, s->end, &ok);
    /* Each span's times, relative to the pass's start; a span missing an event (its
     * record failed) is left out. */
    int64_t t[s->n > 0 ? s->n : 1][TM_SPAN_EVENTS];
    uint8_t whole[s->n > 0 ? s->n : 1];
    for (int i = 0; i < s->n; i++) {
        const tm_span_t *sp = &s->span[i];
        whole[i] = sp->recorded == (1u << sp->n_ev) - 1;
        for (int k = 0; whole[i] && k < sp->n_ev; k++) {
            int one = 1;
            t[i][k] = at_ns(s, sp->ev[k], &one);
            whole[i] = (uint8_t)one;
        }
    }
    s->state = SLOT_FREE;
    if (!ok || step < 0)
        return 1;
    uint64_t pass_stall = 0;
    for (int i = 0; i < s->n; i++) {
        const tm_span_t *sp = &s->span[i];
        if (!whole[i] || sp->unit < 0 || sp->unit >= tm.n_units)
            continue;
        ft_timing_unit_t *u = &tm.unit[sp->unit];
        if (sp->kind == FT_TIMING_COMPUTE) {
            uint64_t stall = t[i][1] > t[i][0] ? (uint64_t)(t[i][1] - t[i][0]) : 0;
            u->compute_passes++;
            u->compute_ns += t[i][2] > t[i][1] ? (uint64_t)(t[i][2] - t[i][1]) : 0;
            u->stall_ns += stall;
            pass_stall += stall;
        } else if (sp->kind == FT_TIMING_COPY || sp->kind == FT_TIMING_MISS) {
            u->copies_timed++;
            u->transfer_ns += t[i][1] > t[i][0] ? (uint64_t)(t[i][1] - t[i][0]) : 0;
            /* The compute it overlapped: the pass's compute spans during the copy. */
            for (int j = 0; j < s->n; j++)
                if (whole[j] && s->span[j].kind == FT_TIMING_COMPUTE)
                    u->overlap_ns += (uint64_t)overlap(t[i][0], t[i][1], t[j][1], t[j][2]);
        }
    }
    tm.passes++;
    tm.step_ns_total += (uint64_t)step;
    tm.last_step_ns = (uint64_t)step;
    tm.stall_ns_total += pass_stall;
    /* The pass kept for the timeline, on one clock with the passes kept before it. */
    uint64_t start = tm.have_prev && s->pass == tm.prev_pass + 1 ? tm.prev_start_ns + tm.prev_step_ns
                     : s->host_start - tm.host0;
    tm.have_prev = 1;
    tm.prev_pass = s->pass;
    tm.prev_start_ns = start;
    tm.prev_step_ns = (uint64_t)step;
    tm_kept_t *k = &tm.kept[tm.n_kept++ % FT_TIMING_KEEP_PASSES];
    ft_timing_event_t *e = realloc(k->ev, (size_t)(s->n > 0 ? s->n : 1) * sizeof *e);
    if (e == NULL)
        return 1; /* the pass is counted; its events are not kept */
    *k = (tm_kept_t){ s->pass, start, (uint64_t)step, pass_stall, 0, (uint32_t)s->truncated, e };
    for (int i = 0; i < s->n; i++) {
        const tm_span_t *sp = &s->span[i];
        if (!whole[i])
            continue;
        int a = sp->kind == FT_TIMING_COMPUTE ? 1 : 0, b = sp->n_ev - 1;
        int64_t t0 = (int64_t)start + t[i][a], t1 = (int64_t)start + t[i][b];
        int64_t w = sp->kind == FT_TIMING_COMPUTE ? t[i][0] : 0; /* the stall begins here */
        /* Clamped at the first kept pass's start, and never ending before they begin. */
        uint64_t s0 = t0 > 0 ? (uint64_t)t0 : 0, s1 = t1 > (int64_t)s0 ? (uint64_t)t1 : s0;
        uint64_t sw = sp->kind == FT_TIMING_COMPUTE && (int64_t)start + w > 0 ? (uint64_t)((int64_t)start + w) : s0;
        e[k->n++] = (ft_timing_event_t){ sp->kind, sp->lane, (uint32_t)sp->unit, sw < s0 ? sw : s0, s0, s1 };
    }
    return 1;
}

/* Reads the closed slots whose events are all complete, oldest first. Not while a
 * stream capture is under way: cuEventQuery is among the calls a capture in global
 * mode forbids (it would invalidate the program's capture). */
static void poll_locked(void)
{
    if (capture_under_way())
        return;
    for (int round = 0; round < TM_RING; round++) {
        tm_slot_t *oldest = NULL;
        for (int i = 0; i < TM_RING; i++)
            if (tm.slot[i].state == SLOT_CLOSED && (oldest == NULL || tm.slot[i].pass < oldest->pass))
                oldest = &tm.slot[i];
        if (oldest == NULL || !read_slot(oldest))
            return;
    }
}

/* --- hooks (res.lock held) ----------------------------------------------------------- */

/* FT_OFFLOAD_TIMING, read at the engine's first load or pass start (nothing is timed
 * before the engine runs); the arrays then, so that the switch's pass is counted. */
static void configure(void)
{
    if (tm.configured)
        return;
    tm.configured = 1;
    if (cfgp->offload_timing != FT_OFFLOAD_TIMING_OFF)
        __atomic_store_n(&timing_enabled, 1, __ATOMIC_RELAXED);
}

void timing_pass_start(cudaStream_t stream)
{
    configure();
    if (!timing_enabled || engine_phase() != PHASE_STREAMING)
        return;
    if (!tm.have_lane) {
        tm.lane = lane_id();
        tm.have_lane = 1;
    }
    if (tm.lane != lane_id() || set_up() != 0)
        return;
    int capturing = capture_under_way();
    if (tm.cur >= 0) {
        tm_slot_t *s = &tm.slot[tm.cur];
        s->state = !capturing && ev.record(s->end, stream) == cudaSuccess ? SLOT_CLOSED : SLOT_FREE;
        if (s->state == SLOT_FREE)
            tm.lost++;
        tm.cur = -1;
    }
    for (int i = 0; i < tm.n_units; i++)
        tm.open[i] = -1;
    poll_locked();
    if (capturing)
        return; /* no pass is timed while a capture is under way */
    int next = (int)(tm.passes_started % TM_RING);
    tm_slot_t *s = &tm.slot[next];
    if (s->state == SLOT_CLOSED)
        tm.lost++; /* its events still pending after TM_RING passes: given up */
    if (ev.record(s->start, stream) != cudaSuccess) {
        s->state = SLOT_FREE;
        return;
    }
    s->state = SLOT_OPEN;
    s->pass = tm.passes_started++;
    s->host_start = now_ns();
    s->n = 0;
    s->truncated = 0;
    tm.cur = next;
}

/* Whether unit u's compute is timed now: timing on, a pass open, and this the thread
 * whose passes are timed. */
static int unit_timed(int u)
{
    return timing_enabled && tm.cur >= 0 && u >= 0 && u < tm.n_units && lane_id() == tm.lane;
}

void timing_unit_wait(int u, cudaStream_t stream)
{
    if (!unit_timed(u))
        return;
    tm_span_t *sp = span_new(FT_TIMING_COMPUTE, 0, u, 3);
    if (sp == NULL)
        return;
    span_mark(sp, 0, stream);
    tm.open[u] = tm.slot[tm.cur].n - 1;
}

void timing_unit_begin(int u, cudaStream_t stream)
{
    if (!unit_timed(u))
        return;
    tm_span_t *sp = span_at(tm.open[u]);
    if (sp != NULL && !capture_under_way())
        span_mark(sp, 1, stream);
}

void timing_unit_end(int u, cudaStream_t stream)
{
    if (!unit_timed(u))
        return;
    tm_span_t *sp = span_at(tm.open[u]);
    if (sp != NULL && !capture_under_way())
        span_mark(sp, 2, stream);
    tm.open[u] = -1;
}

void timing_load_begin(int u, cudaStream_t stream)
{
    tm.load_span = -1;
    configure();
    if (!timing_enabled || set_up() != 0 || u < 0 || u >= tm.n_units)
        return;
    tm.load_bytes0 = res.copied_in_bytes;
    int miss = stream != res.side;
    tm_span_t *sp = span_new(miss ? FT_TIMING_MISS : FT_TIMING_COPY, miss ? 0 : 1, u, 2);
    if (sp != NULL) {
        span_mark(sp, 0, stream);
        tm.load_span = tm.slot[tm.cur].n - 1;
    }
}

void timing_load_end(int u, cudaStream_t stream)
{
    if (!timing_enabled || !tm.set_up || tm.failed || u < 0 || u >= tm.n_units)
        return;
    ft_timing_unit_t *un = &tm.unit[u];
    un->loads++;
    if (stream != res.side)
        un->misses++;
    else
        un->hits++;
    un->load_bytes = res.copied_in_bytes - tm.load_bytes0;
    un->bytes_in += un->load_bytes;
    tm_span_t *sp = span_at(tm.load_span);
    if (sp != NULL && !capture_under_way())
        span_mark(sp, 1, stream);
    tm.load_span = -1;
}

void timing_unload_begin(int u)
{
    tm.unload_span = -1;
    configure();
    if (!timing_enabled || set_up() != 0 || u < 0 || u >= tm.n_units)
        return;
    tm.unload_wb0 = res.written_back;
    tm_span_t *sp = span_new(FT_TIMING_UNLOAD, 1, u, 2);
    if (sp != NULL) {
        span_mark(sp, 0, res.side);
        tm.unload_span = tm.slot[tm.cur].n - 1;
    }
}

void timing_unload_end(int u)
{
    if (!timing_enabled || !tm.set_up || tm.failed || u < 0 || u >= tm.n_units)
        return;
    ft_timing_unit_t *un = &tm.unit[u];
    un->unloads++;
    if (res.written_back != tm.unload_wb0) {
        const res_unit_t *ru = &res.units[u];
        for (int k = 0; k < ru->n; k++)
            un->bytes_out += res.regions[ru->first + k].size;
    }
    tm_span_t *sp = span_at(tm.unload_span);
    if (sp != NULL && !capture_under_way())
        span_mark(sp, 1, res.side);
    tm.unload_span = -1;
}

/* A synchronisation of the program's (hooks_copy.c): what completed is read, unless
 * another thread holds the lock (never waited for). */
void timing_poll(void)
{
    if (!__atomic_load_n(&timing_enabled, __ATOMIC_RELAXED) || engine_held)
        return;
    if (pthread_mutex_trylock(&res.lock) != 0)
        return;
    if (tm.set_up && !tm.failed)
        poll_locked();
    pthread_mutex_unlock(&res.lock);
}

/* --- the control API ----------------------------------------------------------------- */

/* The version-1 layouts: the least a caller may pass. */
#define V1_SIZE (offsetof(ft_offload_timing_t, stall_ns) + sizeof(unsigned long long))
#define V1_UNIT_SIZE (offsetof(ft_offload_timing_unit_t, stall_ns) + sizeof(unsigned long long))

/* The program freed the plan's weights and the plan is dropped (reload.c; res.lock held,
 * the device drained): what was measured is read and kept, and nothing more is timed.
 * The arrays follow the first plan's units; another plan's would land in the wrong rows. */
void timing_forget(void)
{
    if (tm.set_up && !tm.failed)
        poll_locked();
    if (timing_enabled)
        FT_INFO("offload timing: stopped with the plan it timed (the program freed its weights); "
                "the figures are that plan's");
    tm.stopped = 1;
    tm.configured = 1;
    __atomic_store_n(&timing_enabled, 0, __ATOMIC_RELAXED);
}

FT_EXPORT int ft_offload_timing_collect(ft_offload_timing_t *r)
{
    if (!ft_shim_active || disc == NULL || r == NULL || r->size < V1_SIZE ||
        (r->units_cap > 0 && (r->units == NULL || r->unit_size < V1_UNIT_SIZE)))
        return -1;
    res_lock();
    int was_on = timing_enabled;
    if (!was_on && !tm.stopped) {
        __atomic_store_n(&timing_enabled, 1, __ATOMIC_RELAXED);
        FT_INFO("offload timing: on from the next pass (ft_offload_timing_collect)");
    }
    if (tm.set_up && !tm.failed)
        poll_locked();
    ft_offload_timing_t out;
    memset(&out, 0, sizeof out);
    out.size = r->size < sizeof out ? r->size : (unsigned)sizeof out;
    out.version = FT_OFFLOAD_TIMING_VERSION;
    out.unit_size = r->unit_size;
    out.units_cap = r->units_cap;
    out.units = r->units;
    out.n_units = (unsigned long long)(res.units != NULL ? res.n_units : (int)ft_disc_unit_count(disc));
    out.passes = tm.passes;
    out.passes_lost = tm.lost;
    out.step_ns_total = tm.step_ns_total;
    out.last_step_ns = tm.last_step_ns;
    out.predicted_step_ns = __atomic_load_n(&plan.made, __ATOMIC_ACQUIRE) && plan.rc == 0
                            ? (unsigned long long)(plan.out.step_us * 1000.0 + 0.5) : 0;
    out.stall_ns = tm.stall_ns_total;
    for (unsigned i = 0; i < out.n_units && i < r->units_cap; i++) {
        ft_offload_timing_unit_t u;
        memset(&u, 0, sizeof u);
        snprintf(u.name, sizeof u.name, "%s", ft_disc_unit(disc, i)->name);
        u.streamed = res.units != NULL && res.units[i].n > 0;
        u.streamed_bytes = tm.unit != NULL && (int)i < tm.n_units ? tm.unit[i].load_bytes : 0;
        if (tm.unit != NULL && (int)i < tm.n_units) {
            const ft_timing_unit_t *t = &tm.unit[i];
            u.loads = t->loads;
            u.hits = t->hits;
            u.misses = t->misses;
            u.bytes_in = t->bytes_in;
            u.bytes_out = t->bytes_out;
            u.unloads = t->unloads;
            u.copies_timed = t->copies_timed;
            u.transfer_ns = t->transfer_ns;
            u.overlap_ns = t->overlap_ns;
            u.compute_passes = t->compute_passes;
            u.compute_ns = t->compute_ns;
            u.stall_ns = t->stall_ns;
        }
        memcpy((char *)r->units + (size_t)i * r->unit_size, &u,
               r->unit_size < sizeof u ? r->unit_size : sizeof u);
    }
    pthread_mutex_unlock(&res.lock);
    memcpy(r, &out, out.size);
    return was_on ? 0 : 1;
}

FT_EXPORT void ft_offload_timing_reset(void)
{
    if (!ft_shim_active)
        return;
    res_lock();
    if (tm.unit != NULL)
        memset(tm.unit, 0, (size_t)tm.n_units * sizeof *tm.unit);
    tm.passes = tm.lost = tm.step_ns_total = tm.last_step_ns = tm.stall_ns_total = 0;
    for (int i = 0; i < FT_TIMING_KEEP_PASSES; i++)
        tm.kept[i].n = 0;
    tm.n_kept = 0;
    tm.have_prev = 0;
    pthread_mutex_unlock(&res.lock);
}

/* --- set-up, report and trace -------------------------------------------------------- */

/* The exit report's table (no CUDA call: what was read by then; no wait for the lock). */
void timing_report(void)
{
    if (!timing_enabled || pthread_mutex_trylock(&res.lock) != 0)
        return;
    if (tm.unit == NULL) {
        pthread_mutex_unlock(&res.lock);
        FT_INFO("offload timing: no pass timed");
        return;
    }
    FT_INFO("offload timing: %llu pass(es) timed (%llu lost), mean step %.1f us against %.1f us "
            "predicted; per unit (times are sums over the passes timed):", (unsigned long long)tm.passes,
            (unsigned long long)tm.lost, tm.passes ? (double)tm.step_ns_total / 1e3 / (double)tm.passes : 0.0,
            plan.out.step_us);
    /* Where a pass's time went: waiting for copies, and the side stream's busy time
     * (a step much longer than both: the host or the program's own kernels set it). */
    if (tm.passes > 0 && tm.step_ns_total > 0) {
        uint64_t copied = 0;
        for (int i = 0; i < tm.n_units; i++)
            copied += tm.unit[i].transfer_ns;
        double step = (double)tm.step_ns_total, n = (double)tm.passes;
        FT_INFO("offload timing: a pass: the program's stream waited %.1f us for copies (%.0f%% of its step), "
                "the side stream copied for %.1f us (%.0f%%)", (double)tm.stall_ns_total / 1e3 / n,
                100.0 * (double)tm.stall_ns_total / step, (double)copied / 1e3 / n, 100.0 * (double)copied / step);
    }
    FT_INFO("  %-20s %6s %6s %6s %12s %8s %12s %12s %12s %12s", "unit", "loads", "hits", "misses", "bytes in",
            "copies", "transfer us", "overlap us", "compute us", "stall us");
    for (int i = 0; i < tm.n_units; i++) {
        const ft_timing_unit_t *t = &tm.unit[i];
        if (t->loads == 0 && t->compute_passes == 0)
            continue;
        FT_INFO("  %-20.20s %6llu %6llu %6llu %12llu %8llu %12.1f %12.1f %12.1f %12.1f",
                ft_disc_unit(disc, (size_t)i)->name, (unsigned long long)t->loads,
                (unsigned long long)t->hits, (unsigned long long)t->misses, (unsigned long long)t->bytes_in,
                (unsigned long long)t->copies_timed, (double)t->transfer_ns / 1e3, (double)t->overlap_ns / 1e3,
                (double)t->compute_ns / 1e3, (double)t->stall_ns / 1e3);
    }
    pthread_mutex_unlock(&res.lock);
}

/* The TIMING and TIMELINE records (report.c's ft_hooks_trace; at exit, no CUDA call). */
void timing_trace(ft_trace_writer_t *w)
{
    if (!timing_enabled || pthread_mutex_trylock(&res.lock) != 0)
        return;
    ft_trace_begin(w, FT_TRACE_TIMING);
    ft_trace_put_u64(w, tm.passes);
    ft_trace_put_u64(w, tm.lost);
    ft_trace_put_u64(w, tm.step_ns_total);
    ft_trace_put_u64(w, (uint64_t)(plan.out.step_us * 1000.0 + 0.5));
    ft_trace_put_u64(w, tm.stall_ns_total);
    ft_trace_put_u32(w, tm.unit != NULL ? (uint32_t)tm.n_units : 0);
    for (int i = 0; tm.unit != NULL && i < tm.n_units; i++) {
        const ft_timing_unit_t *t = &tm.unit[i];
        ft_trace_put_u32(w, res.units != NULL && res.units[i].n > 0);
        ft_trace_put_u64(w, t->load_bytes);
        const uint64_t v[] = { t->loads, t->hits, t->misses, t->bytes_in, t->bytes_out, t->unloads,
                               t->copies_timed, t->transfer_ns, t->overlap_ns, t->compute_passes,
                               t->compute_ns, t->stall_ns };
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            ft_trace_put_u64(w, v[k]);
    }
    ft_trace_end(w);
    uint64_t kept = tm.n_kept < FT_TIMING_KEEP_PASSES ? tm.n_kept : FT_TIMING_KEEP_PASSES;
    ft_trace_begin(w, FT_TRACE_TIMELINE);
    ft_trace_put_u32(w, (uint32_t)kept);
    for (uint64_t j = tm.n_kept - kept; j < tm.n_kept; j++) {
        const tm_kept_t *k = &tm.kept[j % FT_TIMING_KEEP_PASSES];
        ft_trace_put_u64(w, k->pass);
        ft_trace_put_u64(w, k->start_ns);
        ft_trace_put_u64(w, k->step_ns);
        ft_trace_put_u64(w, k->stall_ns);
        ft_trace_put_u32(w, k->truncated);
        ft_trace_put_u32(w, k->n);
        for (uint32_t i = 0; i < k->n; i++) {
            const ft_timing_event_t *e = &k->ev[i];
            ft_trace_put_u32(w, e->kind);
            ft_trace_put_u32(w, e->lane);
            ft_trace_put_u32(w, e->unit);
            ft_trace_put_u64(w, e->wait_ns);
            ft_trace_put_u64(w, e->start_ns);
            ft_trace_put_u64(w, e->end_ns);
        }
    }
    ft_trace_end(w);
    pthread_mutex_unlock(&res.lock);
}

/* mover.c - the prefetching thread: a prefetch's evictions and loads, off the
 * application's thread.
 *
 * A load's host time is mostly waiting and driver calls: for the unit leaving its slot
 * (its last kernels, its checksum), cuMemUnmap, cuMemMap and cuMemSetAccess, about 1 ms
 * a load on an H200, on the thread that launches. There the decode of a PyTorch model
 * is host-bound already (bench/RESULTS.md, nineteenth session), and the step grew by
 * every load's time. Another thread's mapping calls do not hold launches up (median
 * 4.3 us a launch beside them, against 4.2 alone: bench/map_cost.c), so the prefetch
 * the guard asks for after a unit's first launch is handed to this thread
 * (mover_request), and the application's thread goes on launching.
 *
 * A move: the call that asks for a prefetch, under res.lock, picks the unit to load and
 * the one leaving its slot as the prefetch would (guard.c res_prefetch_next,
 * residency.c res_move_one), flags them moving and queues the move; the thread makes
 * it without res.lock (the waits, the unload, the mapping, the copies on the side
 * stream), then marks it done. Whoever holds res.lock next ends it (mover_settle: the
 * flags cleared), and the first call after that queues the prefetch's next unit
 * (mover_pump). The thread never takes res.lock: an application thread that must wait
 * for a move waits holding it, so a guarded call never lets res.lock go between its
 * guard and its launch (another call's loads could otherwise take its units).
 *
 * While a move is under way, the thread owns the units it moves and what loads and
 * unloads change beside them (the spares, res.loaded, res.held_bytes, the load
 * counters, the side stream): every other user of res ends the move first (res_lock,
 * engine_enter, load_unit, usage_locked ...); a launch does only when it touches a
 * moving unit or needs a load of its own (guard.c), a pointer query only when it asks
 * of a moving unit or needs a mapped allocation as its witness (ptrattr.c).
 *
 * Not used (the prefetch runs on the application's thread, as with
 * FT_PREFETCH_THREAD=false): under a stream capture (a wait or a synchronous copy of
 * the mover's would invalidate it: mover_hold holds moves off from before a capture
 * begins), with FT_SHM_ENABLED (a changed unit's private copy), with offload timing.
 *
 * Owns: mover (its state, the stop and the move's units under mover.lock; the request
 * and the hold under res.lock). Calls residency.c and guard.c. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include <signal.h>

enum { MOVER_IDLE, MOVER_QUEUED, MOVER_WORKING, MOVER_DONE };

#define MOVE_UNITS 16 /* a load and its leavers (one, but after a call over the slots) */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;          /* mover.lock: a move queued, begun or over; a stop */
    int state;                  /* mover.lock */
    int stop;                   /* mover.lock */
    int units[MOVE_UNITS], n;   /* the move: its unit, then its leavers (set under res.lock
                                 * while IDLE, read by the mover while QUEUED/WORKING) */
    int want;                   /* res.lock: the unit whose followers to load, -1: none */
    int hold;                   /* res.lock: captures starting */
    int started;                /* atomic: set once, at the switch */
    pthread_t thread;
} mover = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .want = -1 };

static __thread int on_mover;

static int started(void)
{
    return __atomic_load_n(&mover.started, __ATOMIC_ACQUIRE);
}

/* The state, written under mover.lock, read without it where a stale value is safe:
 * IDLE is only left under res.lock (mover_begin), which the reader holds. */
static int state_now(void)
{
    return __atomic_load_n(&mover.state, __ATOMIC_ACQUIRE);
}

static void state_set(int st)
{
    __atomic_store_n(&mover.state, st, __ATOMIC_RELEASE);
}

/* Ends the move when its work is over: its units' flags cleared. wait: a move queued
 * or at work is waited for first (res.lock held all along: the work never takes it).
 * res.lock held. 1 when no move is under way after it (the common case, every launch:
 * one load, no lock). */
int mover_settle(int wait)
{
    if (!started() || on_mover)
        return 1;
    if (state_now() == MOVER_IDLE)
        return 1;
    pthread_mutex_lock(&mover.lock);
    while (wait && (mover.state == MOVER_QUEUED || mover.state == MOVER_WORKING))
        pthread_cond_wait(&mover.cv, &mover.lock);
    if (mover.state == MOVER_DONE) {
        for (int i = 0; i < mover.n; i++)
            if (mover.units[i] < res.n_units)
                res.units[mover.units[i]].moving = 0;
        mover.n = 0;
        state_set(MOVER_IDLE);
    }
    int idle = mover.state == MOVER_IDLE;
    pthread_mutex_unlock(&mover.lock);
    return idle;
}

void res_steady(uint32_t id)
{
    if (!started() || id >= res.n_ids || res.by_id[id] < 0)
        return;
    if (res.units[res.regions[res.by_id[id]].unit].moving)
        mover_settle(1);
}

void res_lock(void)
{
    pthread_mutex_lock(&res.lock);
    mover_settle(1);
}

int mover_may_move(void)
{
    return started() && mover.hold == 0 && !capture_under_way() && engine_phase() == PHASE_STREAMING &&
           res.n_units > 0 && !timing_on();
}

int mover_begin(int u, const int *leavers, int n)
{
    if (n + 1 > MOVE_UNITS)
        return -1;
    pthread_mutex_lock(&mover.lock);
    if (mover.state != MOVER_IDLE || mover.stop) {
        pthread_mutex_unlock(&mover.lock);
        return -1;
    }
    mover.n = 0;
    mover.units[mover.n++] = u;
    for (int i = 0; i < n; i++)
        mover.units[mover.n++] = leavers[i];
    for (int i = 0; i < mover.n; i++)
        res.units[mover.units[i]].moving = 1;
    state_set(MOVER_QUEUED);
    pthread_cond_broadcast(&mover.cv);
    pthread_mutex_unlock(&mover.lock);
    return 0;
}

static void *mover_main(void *arg)
{
    (void)arg;
    on_mover = 1;
    /* All its CUDA calls are FlexTensor's own: the wrappers they reach (the runtime's
     * own driver calls come back through them) forward without looking. */
    ft_intercept_depth = 1;
    managed_device_bind();
    pthread_mutex_lock(&mover.lock);
    for (;;) {
        while (!mover.stop && mover.state != MOVER_QUEUED)
            pthread_cond_wait(&mover.cv, &mover.lock);
        if (mover.state != MOVER_QUEUED)
            break; /* stopped, with no move left to make */
        state_set(MOVER_WORKING);
        int units[MOVE_UNITS], n = mover.n;
        memcpy(units, mover.units, (size_t)n * sizeof *units);
        pthread_mutex_unlock(&mover.lock);
        res_move_work(units[0], units + 1, n - 1);
        pthread_mutex_lock(&mover.lock);
        state_set(MOVER_DONE);
        pthread_cond_broadcast(&mover.cv);
    }
    pthread_mutex_unlock(&mover.lock);
    return NULL;
}

/* At exit, before the CUDA runtime's own handler (registered earlier, so run later):
 * the mover makes the move it has queued and stops, making no CUDA call past here. */
static void mover_stop_at_exit(void)
{
    if (!started())
        return; /* a child of fork: the thread is its parent's */
    pthread_mutex_lock(&mover.lock);
    mover.stop = 1;
    pthread_cond_broadcast(&mover.cv);
    pthread_mutex_unlock(&mover.lock);
    pthread_join(mover.thread, NULL);
}

/* A child of fork has no prefetching thread: its prefetches run on its own threads
 * (and a move its parent had under way is never ended there). */
static void mover_forked(void)
{
    __atomic_store_n(&mover.started, 0, __ATOMIC_RELEASE);
}

void mover_start(void)
{
    if (started() || !cfgp->prefetch_thread || cfgp->shm_enabled)
        return;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 1u << 20);
    /* Signals go to the application's threads, never to this one. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&mover.thread, &a, mover_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    if (rc != 0) {
        FT_INFO("residency: no prefetching thread (pthread_create: %d): prefetches run on the application's "
                "threads", rc);
        return;
    }
    __atomic_store_n(&mover.started, 1, __ATOMIC_RELEASE);
    atexit(mover_stop_at_exit);
    pthread_atfork(NULL, NULL, mover_forked);
}

int mover_request(int u)
{
    if (!mover_may_move())
        return 0;
    mover.want = u; /* the latest: an older one's units are behind the pass by now */
    mover_pump();
    return 1;
}

void mover_pump(void)
{
    /* One move at a time; the next is queued by the first call after it is over. */
    if (mover.want >= 0 && mover_may_move() && mover_settle(0) && mover.want < res.n_units &&
        !res_prefetch_next(mover.want))
        mover.want = -1; /* nothing left to load for it */
}

void mover_hold(void)
{
    if (!started())
        return;
    pthread_mutex_lock(&res.lock);
    mover.hold++;
    mover_settle(1);
    pthread_mutex_unlock(&res.lock);
}

void mover_release(void)
{
    if (!started())
        return;
    pthread_mutex_lock(&res.lock);
    mover.hold--;
    pthread_mutex_unlock(&res.lock);
}

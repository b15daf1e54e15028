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
 * it without res.lock, then marks it done. Whoever holds res.lock next ends it
 * (mover_settle: the flags cleared), and the first call after that queues the
 * prefetch's next unit (mover_pump).
 *
 * Most moves are hand-overs (residency.c, handover): the leaving unit's physical memory
 * is mapped at the incoming unit's addresses too, and the side stream waits on the
 * device for the leaving unit's checksum and copy back before the copies in; no host
 * wait. The incoming unit is usable then (LOADED); the leaving unit stays moving until
 * its tail (its sum read, its addresses unmapped) is made, after the next move's copies
 * (TAIL_IDLE_NS below). Other moves evict with host waits (the leaving unit's last
 * calls, its checksum, cuMemUnmap), then map and copy. The thread never takes res.lock: an application thread that must wait
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

#include <errno.h>
#include <signal.h>
#include <time.h>

/* LOADED: the move's unit is usable (a hand-over has issued its copies), and the
 * mover finishes the tail of the hand-over before (finish_tail). */
enum { MOVER_IDLE, MOVER_QUEUED, MOVER_WORKING, MOVER_LOADED, MOVER_DONE };

/* A hand-over's tail (residency.c, res_move_tail: the leaving unit's checksum waited
 * for, its addresses unmapped) is left until the next move has issued its copies, when
 * the leaving unit's last kernels have long run, or until TAIL_IDLE_NS pass without
 * one, or a call needs it (mover_settle, mover_settle_unit): so that the mover's wait
 * for them never stands between a move and the next. Meanwhile the leaving unit stays
 * `moving`. */
#define TAIL_IDLE_NS 2000000

#define MOVE_UNITS 16 /* a load and its leavers (one, but after a call over the slots) */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;          /* mover.lock: a move queued, begun or over; a stop */
    int state;                  /* mover.lock */
    int stop;                   /* mover.lock */
    int units[MOVE_UNITS], n;   /* the move: its unit, then its leavers (set under res.lock
                                 * while IDLE, read by the mover while QUEUED/WORKING) */
    int tail;                   /* mover.lock: the leaving unit of a hand-over whose tail is
                                 * left, -1: none */
    int tail_now;               /* mover.lock: a call waits for that tail */
    int tail_over;              /* atomic: a unit whose tail is over, to apply and clear, -1 */
    res_tail_t tail_res;        /* its result (written before tail_over, read after it) */
    int want;                   /* res.lock: the unit whose followers to load, -1: none */
    int hold;                   /* res.lock: captures starting */
    int started;                /* atomic: set once, at the switch */
    pthread_t thread;
} mover = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .want = -1, .tail = -1,
            .tail_over = -1 };

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

enum { SETTLE_NONE = -4, SETTLE_MOVE = -3, SETTLE_ALL = -2 };

/* A tail the mover has finished: its result applied, its unit's flag cleared (res.lock
 * and mover.lock held). The mover waits for this before its next tail. */
static void take_tail(void)
{
    int over = __atomic_exchange_n(&mover.tail_over, -1, __ATOMIC_ACQ_REL);
    if (over < 0)
        return;
    if (over < res.n_units) {
        res_tail_apply(&mover.tail_res);
        res.units[over].moving = 0;
    }
    pthread_cond_broadcast(&mover.cv);
}

/* The application's waits for the mover, by what waited (the exit report's). */
static void count_wait(int why, uint64_t t)
{
    res.ns_mover_wait[why] += now_ns() - t;
    res.mover_waits[why]++;
}

/* Which count a settle's wait goes to: a call touching a unit in a move, one that
 * would have missed a unit the mover was about to load (mover_catch), any other. */
static int wait_kind(int wait_for)
{
    return wait_for >= 0 ? MOVER_WAIT_UNIT : wait_for == SETTLE_MOVE ? MOVER_WAIT_CATCH : MOVER_WAIT_ALL;
}

/* The wait for a move (mover.lock held, let go meanwhile), counted as the application's
 * time waiting for the mover. */
static void await_move(int (*pending)(int, int), int unit, int why)
{
    if (!pending(mover.state, unit))
        return;
    uint64_t t = now_ns();
    while (pending(mover.state, unit)) {
        pthread_cond_wait(&mover.cv, &mover.lock);
        take_tail();
    }
    count_wait(why, t);
}

/* A move not over: for the whole of it (move_pending), for unit `unit` in it
 * (unit_pending: the unit coming in is usable once LOADED). */
static int move_pending(int st, int unit)
{
    (void)unit;
    return st == MOVER_QUEUED || st == MOVER_WORKING || st == MOVER_LOADED;
}

static int unit_pending(int st, int unit)
{
    return st == MOVER_QUEUED || st == MOVER_WORKING || (st == MOVER_LOADED && unit != mover.units[0]);
}

/* The settling of mover_settle and mover_settle_unit (res.lock held): wait_for is
 * SETTLE_NONE (no wait), SETTLE_MOVE (the move under way), SETTLE_ALL (it and the tail
 * left), or a unit: that unit out of either. A finished move's flags are cleared, but
 * that of the unit whose tail is left. 1 when no move is under way after it. */
static int settle(int wait_for)
{
    if (!started() || on_mover)
        return 1;
    if (state_now() == MOVER_IDLE && __atomic_load_n(&mover.tail_over, __ATOMIC_ACQUIRE) < 0 &&
        (wait_for == SETTLE_NONE || wait_for == SETTLE_MOVE || (wait_for >= 0 && !res.units[wait_for].moving)))
        return 1;
    pthread_mutex_lock(&mover.lock);
    int in_move = 0;
    for (int i = 0; i < mover.n && wait_for >= 0; i++)
        in_move |= mover.units[i] == wait_for;
    take_tail();
    if (wait_for >= 0 && in_move)
        await_move(unit_pending, wait_for, MOVER_WAIT_UNIT);
    else if (wait_for != SETTLE_NONE)
        await_move(move_pending, -1, wait_kind(wait_for));
    if ((mover.state == MOVER_LOADED || mover.state == MOVER_DONE) && mover.n > 0 && mover.units[0] < res.n_units)
        res.units[mover.units[0]].moving = 0; /* usable: its copies are issued */
    if (mover.state == MOVER_DONE) {
        for (int i = 0; i < mover.n; i++)
            if (mover.units[i] < res.n_units && mover.units[i] != mover.tail)
                res.units[mover.units[i]].moving = 0;
        mover.n = 0;
        state_set(MOVER_IDLE);
    }
    in_move = 0; /* the leaving unit of the move waited for may be the tail now */
    for (int i = 0; i < mover.n && wait_for >= 0; i++)
        in_move |= mover.units[i] == wait_for;
    if (mover.tail >= 0 && (wait_for == SETTLE_ALL || (wait_for >= 0 && wait_for == mover.tail && !in_move))) {
        mover.tail_now = 1;
        pthread_cond_broadcast(&mover.cv);
        uint64_t t = now_ns();
        while (mover.tail >= 0) {
            pthread_cond_wait(&mover.cv, &mover.lock);
            take_tail();
        }
        count_wait(MOVER_WAIT_TAIL, t);
    }
    take_tail();
    int idle = mover.state == MOVER_IDLE;
    pthread_mutex_unlock(&mover.lock);
    return idle;
}

/* Ends the move when its work is over: its units' flags cleared. wait: a move queued
 * or at work, and a hand-over's tail left, are waited for first (res.lock held all
 * along: the work never takes it). res.lock held. 1 when no move is under way after
 * it (the common case, every launch: two loads, no lock). */
int mover_settle(int wait)
{
    return settle(wait ? SETTLE_ALL : SETTLE_NONE);
}

/* The move under way ended, a hand-over's tail left as it is. res.lock held. */
void mover_settle_move(void)
{
    settle(SETTLE_MOVE);
}

/* A call touches unit u, moving: it waits until u is out of the move (loaded, or its
 * hand-over's tail over). res.lock held. */
void mover_settle_unit(int u)
{
    settle(u);
}

void res_steady(uint32_t id)
{
    if (!started() || id >= res.n_ids || res.by_id[id] < 0)
        return;
    if (res.units[res.regions[res.by_id[id]].unit].moving)
        mover_settle_unit(res.regions[res.by_id[id]].unit);
}

void res_lock(void)
{
    pthread_mutex_lock(&res.lock);
    mover_settle(1);
}

int mover_running(void)
{
    return started();
}

int mover_here(void)
{
    return on_mover;
}

int mover_catch(int u)
{
    if (!mover_may_move() || (state_now() == MOVER_IDLE && mover.want < 0))
        return 0;
    settle(SETTLE_MOVE);
    mover_pump();
    if (res.units[u].moving)
        settle(u);
    return res.units[u].loaded;
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

/* The tail of the hand-over before, if one is left (mover.lock held, let go meanwhile),
 * once the last tail's result has been taken (take_tail). */
static void finish_tail(void)
{
    int v = mover.tail;
    if (v < 0)
        return;
    while (__atomic_load_n(&mover.tail_over, __ATOMIC_ACQUIRE) >= 0 && !mover.stop)
        pthread_cond_wait(&mover.cv, &mover.lock);
    pthread_mutex_unlock(&mover.lock);
    res_tail_t out;
    res_move_tail(v, &out);
    pthread_mutex_lock(&mover.lock);
    mover.tail_res = out;
    mover.tail = -1;
    mover.tail_now = 0;
    __atomic_store_n(&mover.tail_over, v, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&mover.cv);
}

/* Waits for a move, a call that wants the tail left, a stop, or TAIL_IDLE_NS with a
 * tail left and none of them (mover.lock held). */
static void await_work(void)
{
    while (!mover.stop && mover.state != MOVER_QUEUED && !(mover.tail >= 0 && mover.tail_now)) {
        if (mover.tail < 0 || __atomic_load_n(&mover.tail_over, __ATOMIC_ACQUIRE) >= 0) {
            pthread_cond_wait(&mover.cv, &mover.lock);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += TAIL_IDLE_NS;
        until.tv_sec += until.tv_nsec / 1000000000;
        until.tv_nsec %= 1000000000;
        if (pthread_cond_timedwait(&mover.cv, &mover.lock, &until) == ETIMEDOUT)
            return;
    }
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
        await_work();
        if (mover.state == MOVER_QUEUED) {
            state_set(MOVER_WORKING);
            int units[MOVE_UNITS], n = mover.n;
            memcpy(units, mover.units, (size_t)n * sizeof *units);
            pthread_mutex_unlock(&mover.lock);
            /* A hand-over's copies first, then the tail of the one before; a move that
             * evicts with a host wait, after that tail. */
            int handed = res_move_handover(units[0], units + 1, n - 1);
            pthread_mutex_lock(&mover.lock);
            if (!handed) {
                finish_tail();
                pthread_mutex_unlock(&mover.lock);
                res_move_work(units[0], units + 1, n - 1);
                pthread_mutex_lock(&mover.lock);
            }
            state_set(MOVER_LOADED);
            pthread_cond_broadcast(&mover.cv);
            finish_tail();
            if (handed)
                mover.tail = units[1];
            state_set(MOVER_DONE);
            pthread_cond_broadcast(&mover.cv);
        } else if (mover.tail >= 0) {
            finish_tail();
        } else if (mover.stop) {
            break; /* no move or tail left to make */
        }
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
    /* The last tail's result, for the exit report's counts; not when another thread
     * holds res.lock at exit (it may never let it go). */
    if (pthread_mutex_trylock(&res.lock) == 0) {
        pthread_mutex_lock(&mover.lock);
        take_tail();
        pthread_mutex_unlock(&mover.lock);
        pthread_mutex_unlock(&res.lock);
    }
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

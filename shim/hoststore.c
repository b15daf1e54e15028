/* hoststore.c - the host memory that streamed regions and FT_SPILL's allocations live
 * in while not on the device: FT_PINNED_MEMORY (pinned or pageable) and
 * FT_PINNED_MEMORY_MODE (cudaHostAlloc, or page-aligned memory registered in place);
 * and the one place that says where a streamed unit's host copy lives: in
 * FT_SHM_ENABLED's shared segment (shmstore.c), or private (host_store_alloc).
 *
 * Owns no state (the shared segment's is shmstore.c's). Of units it knows only the
 * regions residency.c hands it, to place them in the segment: copies and sets served
 * on a unit's host store are residency.c's (res_host_copy, res_host_set). It calls
 * shmstore.c and cuda.c only; res.lock is held for every call about units. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include <signal.h>
#include <sys/mman.h>

typedef cudaError_t (*host_free_fn)(void *);

const char *host_store_kind(void)
{
    if (!cfgp->pinned_memory)
        return "pageable host memory (FT_PINNED_MEMORY=false)";
    return cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_HOST_REGISTER
         ? "pinned host memory (registered in place)" : "pinned host memory";
}

/* The host stores now held, for the exit report's count and for how each is freed
 * (held_lock). */
enum { STORE_PAGEABLE, STORE_HOST_ALLOC, STORE_REGISTERED };
typedef struct {
    void *p;
    size_t size;
    int how; /* STORE_* */
    UT_hash_handle hh;
} held_t;
static held_t *held;
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t held_bytes, held_peak, held_switch;
static int switched;

/* The plan's switch is done (activate_locked): what is held now is what streaming
 * needs, which the exit report gives. */
void host_store_switched(void)
{
    pthread_mutex_lock(&held_lock);
    held_switch = held_bytes;
    switched = 1;
    pthread_mutex_unlock(&held_lock);
}

static void *held_add(void *p, size_t size, int how)
{
    held_t *h = p != NULL ? malloc(sizeof *h) : NULL;
    pthread_mutex_lock(&held_lock);
    if (h != NULL) {
        h->p = p;
        h->size = size;
        h->how = how;
        HASH_ADD_PTR(held, p, h);
    }
    if (p != NULL) {
        held_bytes += size;
        if (held_bytes > held_peak)
            held_peak = held_bytes;
    }
    pthread_mutex_unlock(&held_lock);
    return p;
}

/* How p was made (STORE_*), as the configuration says where it is not known. */
static int held_remove(void *p)
{
    held_t *h;
    int how = !cfgp->pinned_memory ? STORE_PAGEABLE
            : cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC ? STORE_HOST_ALLOC : STORE_REGISTERED;
    pthread_mutex_lock(&held_lock);
    HASH_FIND_PTR(held, &p, h);
    if (h != NULL) {
        HASH_DEL(held, h);
        held_bytes -= h->size;
        how = h->how;
    }
    pthread_mutex_unlock(&held_lock);
    free(h);
    return how;
}

/* Page-aligned memory registered in place; from 2 MiB on, 2 MiB aligned and advised
 * to the kernel's huge pages. `fault`: its pages are touched first, outside the driver
 * (the threads that make stores ahead). On the H100's host, 57 MiB stores: cudaHostAlloc
 * 1.68 GB/s; faulting 4 KiB pages 1.78 GB/s, then registering them 23 GB/s; faulting
 * huge pages 4.65 GB/s, registering them 41 GB/s (bench/pin_cost.c). */
static void *store_register(size_t size, int fault)
{
    typedef cudaError_t (*host_register_fn)(void *, size_t, unsigned int);
    size_t align = size >= (2u << 20) ? (2u << 20) : 4096, len = (size + align - 1) / align * align;
    void *p = NULL;
    if (posix_memalign(&p, align, len) != 0)
        return NULL;
    if (align > 4096)
        madvise(p, len, MADV_HUGEPAGE);
    for (size_t off = 0; fault && off < len; off += 4096)
        ((volatile char *)p)[off] = 0;
    host_register_fn reg = (host_register_fn)own_rt("cudaHostRegister");
    cudaError_t pending = own_pending();
    if (reg == NULL || own_call(reg(p, size, cudaHostRegisterDefault), pending) != cudaSuccess) {
        free(p);
        return NULL;
    }
    return held_add(p, size, STORE_REGISTERED);
}

/* A host store made now, as FT_PINNED_MEMORY and FT_PINNED_MEMORY_MODE say. */
static void *store_make(size_t size)
{
    void *p = NULL;
    if (!cfgp->pinned_memory) {
        if (posix_memalign(&p, 4096, (size + 4095) / 4096 * 4096) != 0)
            return NULL;
        return held_add(p, size, STORE_PAGEABLE);
    }
    if (cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC)
        return held_add(own_host_alloc(&p, size) == cudaSuccess ? p : NULL, size, STORE_HOST_ALLOC);
    return store_register(size, 0);
}

/* --- host stores made ahead ------------------------------------------------------
 * While a saved profile waits to be checked, each weight its plan streams starts in
 * host memory (spill.c's placement), in a host store made when the program allocates
 * the weight. Pinning is the slow part: on the H100, a second start's loading of a
 * 13 GB model took 2.35 s longer than all resident, most of it cudaHostAlloc of 9.1 GB
 * (1.7 GB/s, as fast as faulting the pages in). Threads make those stores ahead, in the
 * order the program will allocate the weights (savedprof.c gives the sizes, from the
 * program's first allocation on, while it still loads its data), in huge pages they
 * fault in themselves before registering them (store_register; with
 * FT_PINNED_MEMORY_MODE=alloc, by cudaHostAlloc as asked); host_store_alloc takes
 * a ready one of its size, waits for one being made, or makes its own. (Made with
 * cudaHostAlloc by the threads, the loading itself was no longer slow, but the
 * program's set-up of its CUDA context beside them took 3.9 s longer.) What is left
 * when the profile is adopted or refused is freed (host_store_ahead_end). ahead.lock
 * is a leaf: the threads take no other lock of FlexTensor's but held_lock, so a caller
 * holding res.lock may wait on them. */
enum { AHEAD_WAITING, AHEAD_MAKING, AHEAD_READY, AHEAD_DONE }; /* DONE: taken, or failed */
#define AHEAD_THREADS 3
static struct {
    pthread_mutex_t lock;
    pthread_cond_t made;
    struct {
        size_t size;
        void *p;
        int state;
    } *e;
    uint32_t n, take_from, make_from; /* before take_from: every entry DONE; make_from: the threads' next */
    int stop, active;                 /* active: atomic */
    pthread_t tid[AHEAD_THREADS];
    int started[AHEAD_THREADS];
    uint64_t bytes_made, bytes_used, wait_ns;
    uint32_t n_made, n_used;
} ahead = { .lock = PTHREAD_MUTEX_INITIALIZER, .made = PTHREAD_COND_INITIALIZER };

static void *ahead_main(void *arg)
{
    (void)arg;
    managed_device_bind();
    pthread_mutex_lock(&ahead.lock);
    for (;;) {
        while (ahead.make_from < ahead.n && ahead.e[ahead.make_from].state != AHEAD_WAITING)
            ahead.make_from++;
        if (ahead.stop || ahead.make_from >= ahead.n)
            break;
        uint32_t i = ahead.make_from++;
        ahead.e[i].state = AHEAD_MAKING;
        pthread_mutex_unlock(&ahead.lock);
        void *p = cfgp->pinned_memory_mode == FT_PINNED_MEMORY_MODE_ALLOC ? store_make(ahead.e[i].size)
                                                                         : store_register(ahead.e[i].size, 1);
        pthread_mutex_lock(&ahead.lock);
        ahead.e[i].p = p;
        ahead.e[i].state = p != NULL ? AHEAD_READY : AHEAD_DONE;
        if (p != NULL) {
            ahead.n_made++;
            ahead.bytes_made += ahead.e[i].size;
        } else
            ahead.stop = 1; /* no more pinned memory: the program's own allocations say so */
        pthread_cond_broadcast(&ahead.made);
    }
    pthread_mutex_unlock(&ahead.lock);
    return NULL;
}

/* A ready store of exactly size bytes (made ahead), or NULL: the caller makes its own. */
static void *ahead_take(size_t size)
{
    if (!__atomic_load_n(&ahead.active, __ATOMIC_ACQUIRE))
        return NULL;
    void *p = NULL;
    pthread_mutex_lock(&ahead.lock);
    uint32_t i = ahead.take_from;
    while (i < ahead.n && (ahead.e[i].state == AHEAD_DONE || ahead.e[i].size != size))
        i++;
    if (i < ahead.n) {
        if (ahead.e[i].state == AHEAD_MAKING) {
            uint64_t t0 = now_ns();
            while (ahead.e[i].state == AHEAD_MAKING)
                pthread_cond_wait(&ahead.made, &ahead.lock);
            ahead.wait_ns += now_ns() - t0;
        }
        if (ahead.e[i].state == AHEAD_READY) {
            p = ahead.e[i].p;
            ahead.n_used++;
            ahead.bytes_used += size;
        }
        ahead.e[i].state = AHEAD_DONE; /* a WAITING one: the caller makes it */
    }
    while (ahead.take_from < ahead.n && ahead.e[ahead.take_from].state == AHEAD_DONE)
        ahead.take_from++;
    pthread_mutex_unlock(&ahead.lock);
    return p;
}

/* The threads stop (a store being made is finished) and are joined. */
static void ahead_stop(void)
{
    pthread_mutex_lock(&ahead.lock);
    ahead.stop = 1;
    __atomic_store_n(&ahead.active, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ahead.lock);
    for (int t = 0; t < AHEAD_THREADS; t++)
        if (ahead.started[t]) {
            pthread_join(ahead.tid[t], NULL);
            ahead.started[t] = 0;
        }
}

/* A child of fork has none of the threads, and no pinned memory of its parent's. */
static void ahead_forked(void)
{
    __atomic_store_n(&ahead.active, 0, __ATOMIC_RELEASE);
    for (int t = 0; t < AHEAD_THREADS; t++)
        ahead.started[t] = 0;
}

void host_store_ahead(const size_t *sizes, uint32_t n)
{
    if (n == 0 || !cfgp->pinned_memory || cfgp->shm_enabled || __atomic_load_n(&ahead.active, __ATOMIC_ACQUIRE) ||
        ahead.e != NULL || (ahead.e = calloc(n, sizeof *ahead.e)) == NULL)
        return;
    for (uint32_t i = 0; i < n; i++)
        ahead.e[i].size = sizes[i];
    ahead.n = n;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 1u << 20);
    sigset_t all, old;
    sigfillset(&all); /* signals go to the application's threads */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int any = 0;
    for (int t = 0; t < AHEAD_THREADS; t++)
        any |= ahead.started[t] = pthread_create(&ahead.tid[t], &a, ahead_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    if (!any) {
        free(ahead.e);
        ahead.e = NULL;
        ahead.n = 0;
        return;
    }
    __atomic_store_n(&ahead.active, 1, __ATOMIC_RELEASE);
    atexit(ahead_stop); /* no thread pinning while the runtime tears down */
    pthread_atfork(NULL, NULL, ahead_forked);
}

void host_store_ahead_end(const char *why)
{
    if (!__atomic_load_n(&ahead.active, __ATOMIC_ACQUIRE))
        return;
    ahead_stop();
    /* A caller of ahead_take past its test of `active` finds no entry. */
    pthread_mutex_lock(&ahead.lock);
    uint64_t left = 0;
    for (uint32_t i = 0; i < ahead.n; i++)
        if (ahead.e[i].state == AHEAD_READY) {
            left += ahead.e[i].size;
            host_store_free(ahead.e[i].p);
        }
    free(ahead.e);
    ahead.e = NULL;
    ahead.n = ahead.take_from = ahead.make_from = 0;
    pthread_mutex_unlock(&ahead.lock);
    FT_INFO("saved profile: %u host store(s), %.1f MiB, made ahead of the weights that the saved plan streams; "
            "%u (%.1f MiB) taken as the program allocated them, after %.1f ms of waits for ones being made; "
            "%.1f MiB unused and freed (%s)", ahead.n_made, (double)ahead.bytes_made / 1048576.0, ahead.n_used,
            (double)ahead.bytes_used / 1048576.0, (double)ahead.wait_ns / 1e6, (double)left / 1048576.0, why);
}

void *host_store_alloc(size_t size)
{
    void *p = ahead_take(size);
    return p != NULL ? p : store_make(size);
}

/* host_store_copy's parts: a thread each but the caller's (the first). */
#define COPY_THREADS 4
#define COPY_PART_MIN (8u << 20)
struct copy_part {
    char *dst;
    const char *src;
    size_t n;
};

static void *copy_main(void *arg)
{
    struct copy_part *c = arg;
    memcpy(c->dst, c->src, c->n);
    return NULL;
}

void host_store_copy(void *dst, const void *src, size_t n)
{
    size_t parts = n / COPY_PART_MIN;
    if (parts > COPY_THREADS)
        parts = COPY_THREADS;
    if (parts < 2) {
        memcpy(dst, src, n);
        return;
    }
    struct copy_part c[COPY_THREADS];
    pthread_t tid[COPY_THREADS];
    int started[COPY_THREADS] = { 0 };
    size_t each = (n / parts + 4095) / 4096 * 4096; /* whole pages a part, the last takes the rest */
    for (size_t i = 0; i < parts; i++) {
        size_t off = i * each < n ? i * each : n;
        c[i] = (struct copy_part){ (char *)dst + off, (const char *)src + off,
                                   i + 1 < parts ? (off + each < n ? each : n - off) : n - off };
        if (i > 0)
            started[i] = pthread_create(&tid[i], NULL, copy_main, &c[i]) == 0;
    }
    for (size_t i = 0; i < parts; i++)
        if (i == 0 || !started[i])
            copy_main(&c[i]);
    for (size_t i = 1; i < parts; i++)
        if (started[i])
            pthread_join(tid[i], NULL);
}

void host_store_free(void *p)
{
    if (p == NULL || shm_store_owns(p))
        return;
    int how = held_remove(p);
    if (how == STORE_HOST_ALLOC) {
        host_free_fn f = (host_free_fn)own_rt("cudaFreeHost");
        if (f != NULL)
            f(p);
        return;
    }
    if (how == STORE_REGISTERED) {
        host_free_fn unreg = (host_free_fn)own_rt("cudaHostUnregister");
        if (unreg != NULL)
            unreg(p);
    }
    free(p);
}

/* --- FT_SHM_ENABLED: a unit's host copy, shared or private ------------------------- */

int host_store_sharing(void)
{
    return shm_store_attached();
}

/* At the switch: the model's units as the segment lays them out (every unit, resident
 * ones too: the fingerprint is the whole model's, and a unit made to stream later
 * shares as well). */
void host_store_share(const shm_unit_desc_t *d, uint32_t n)
{
    if (cfgp->shm_enabled)
        shm_store_attach(d, n);
}

/* Where unit u's host copy lives (d: the unit now, r: its n streamed regions, in the
 * order d was made from). Shared: each r[k].host is set to its place in the segment,
 * the regions end to end; HOST_SHARED when the bytes there are this unit's already
 * (checked against d->sum), HOST_FILL when the caller copies them in and then calls
 * host_store_unit_filled. HOST_PRIVATE: r is untouched, and the caller makes private
 * copies with host_store_alloc. */
int host_store_unit(int u, const char *name, const shm_unit_desc_t *d, res_region_t *r, int n)
{
    char *base = NULL;
    int how = shm_store_unit((uint32_t)u, name, d, &base);
    if (how == HOST_PRIVATE)
        return how;
    uint64_t off = 0;
    for (int k = 0; k < n; k++) {
        r[k].host = base + off;
        off += r[k].size;
    }
    return how;
}

void host_store_unit_filled(int u, int ok)
{
    shm_store_filled((uint32_t)u, ok);
}

/* Unit u's host copy is no longer the shared one (the caller has given its regions
 * private copies). */
void host_store_unit_leave(int u)
{
    shm_store_leave((uint32_t)u);
}

void host_store_report(void)
{
    pthread_mutex_lock(&held_lock);
    uint64_t at_switch = held_switch, now = held_bytes, peak = held_peak;
    int sw = switched;
    pthread_mutex_unlock(&held_lock);
    /* "at exit" also counts the units made to stream past the plan: what the process
     * holds for its streamed units in the end. */
    if (sw)
        FT_INFO("host memory: %.1f MiB of %s held by FlexTensor after the switch to the plan, %.1f MiB "
                "at exit, at most %.1f MiB (FT_SHM's shared segments not counted)",
                (double)at_switch / 1048576.0, host_store_kind(), (double)now / 1048576.0,
                (double)peak / 1048576.0);
    else if (peak > 0)
        FT_INFO("host memory: at most %.1f MiB of %s held by FlexTensor (FT_SHM's shared segments not "
                "counted)", (double)peak / 1048576.0, host_store_kind());
    shm_store_report();
}

void host_store_detach(void)
{
    shm_store_detach();
}

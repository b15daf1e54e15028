/* observe.c - what one launch, copy or set touches: the kernel metadata cache (name
 * and parameter layout per kernel handle), the scan of a launch's argument bytes for
 * region addresses (core/scan.c), pointer-array peeks one level down, and what the
 * launch feeds to the discovery engine, to pass tracking, to FT_SPILL's faults and to
 * the residency guard. Discovery's end happens here, at the launch that completes it:
 * it moves the phase from DISCOVERY to PLANNING (engine_to; one thread wins) and starts
 * profiling.
 *
 * Owns: the kinfo table (kinfo_lock, a reader-writer lock: looked up on every launch,
 * added to at a kernel's first one; kinfos are never freed, so each thread keeps the
 * last ones it used in a small thread-local cache without the lock) and the CUPTI
 * first-pass check (cupti_confirm, one atomic value). A launch reads the phase word
 * once. It calls down into guard.c, spill.c and profiling.c with res.lock held when
 * engine_enter took it. */
#define _GNU_SOURCE
#include "shim/engine.h"

/* Pointer arrays: regions this small (or a caching allocator's small-pool segment)
 * are read, PTR_PEEK_BYTES at the pointer, for device pointers one level down. */
#define PTR_PEEK_REGION_MAX (4u << 20)
#define PTR_PEEK_BYTES 512
#define MAX_PARAMS 256
#define PEEK_LAUNCHES 2

/* Kernel metadata, per handle (CUkernel, CUfunction, or a runtime stub address). */
typedef struct {
    uint64_t key;
    char name[256];
    /* Pointer arrays are looked for in a kernel's first PEEK_LAUNCHES launches, and
     * further only while they keep finding some (a sync and a copy each time). */
    int peeks_left;
    unsigned launches;        /* counted only when tracing */
    unsigned nodes;           /* graph nodes made of it: counted only when tracing */
    int nparams;              /* -1: unknown, the kernelParams cannot be scanned */
    uint32_t size[MAX_PARAMS];
    /* Argument words that held garbage at some launch in discovery (core/scan.h): a
     * region address found only there does not make the guard load a unit. */
    ft_scan_junk_t junk;
    UT_hash_handle hh;
} kinfo_t;
static pthread_rwlock_t kinfo_lock = PTHREAD_RWLOCK_INITIALIZER;
static kinfo_t *kinfos;

/* --- kernel metadata ---------------------------------------------------------------- */

/* Metadata for a driver handle: a CUkernel (what nvcc-built code and cuBLAS pass) or a
 * CUfunction (cuModuleGetFunction). The measured H200 driver answers the cuFunc*
 * calls with 400 for a CUkernel, so the cuKernel* calls go first.
 * A kernel whose first parameter the driver does not describe has no layout known
 * (nparams -1): the driver answers so for a kernel without parameters and for one it
 * has no layout for alike (XLA's kernels on the H100: CUDA_ERROR_INVALID_VALUE at index
 * 0 for kernels that take pointers), so its launches are taken to reach anything
 * (observe_launch), never nothing. A function partly loaded (lazy loading) is loaded
 * first, in case the layout comes with it. */
static void fill_kinfo(kinfo_t *k, uint64_t handle)
{
    const char *name = NULL;
    size_t off, size;
    k->nparams = -1;
    if (drv.kernel_param_info != NULL &&
        drv.kernel_param_info((CUkernel)(uintptr_t)handle, 0, &off, &size) != CUDA_ERROR_INVALID_HANDLE) {
        int n = 0;
        while (n < MAX_PARAMS &&
               drv.kernel_param_info((CUkernel)(uintptr_t)handle, (size_t)n, &off, &size) == CUDA_SUCCESS)
            k->size[n++] = (uint32_t)size;
        k->nparams = n > 0 ? n : -1;
        if (drv.kernel_name != NULL)
            drv.kernel_name(&name, (CUkernel)(uintptr_t)handle);
    } else if (drv.func_param_info != NULL) {
        CUfunction f = (CUfunction)(uintptr_t)handle;
        CUfunctionLoadingState st;
        if (drv.func_param_info(f, 0, &off, &size) != CUDA_SUCCESS && drv.func_is_loaded != NULL &&
            drv.func_load != NULL && drv.func_is_loaded(&st, f) == CUDA_SUCCESS &&
            st != CU_FUNCTION_LOADING_STATE_LOADED)
            drv.func_load(f);
        int n = 0;
        while (n < MAX_PARAMS &&
               drv.func_param_info(f, (size_t)n, &off, &size) == CUDA_SUCCESS)
            k->size[n++] = (uint32_t)size;
        k->nparams = n > 0 ? n : -1;
        if (drv.func_name != NULL)
            drv.func_name(&name, f);
    }
    snprintf(k->name, sizeof k->name, "%s", name ? name : "?");
    if (k->nparams < 0)
        FT_LOG_CAPPED(FT_LOG_INFO, 8, "the driver gives no parameter layout for kernel %s: a launch of it with "
                      "arguments is taken to reach any memory (every streamed unit loaded for it; before the plan, "
                      "everything FT_SPILL holds in host memory brought back)", k->name);
}

/* A kinfo is never freed: each thread keeps the ones it used last in a small
 * direct-mapped cache, which spares a launch the table's lock and lookup. */
#define KINFO_CACHE 16
static __thread struct {
    uint64_t key;
    kinfo_t *k;
} kinfo_cache[KINFO_CACHE];

/* key: the handle, or the runtime stub (then resolved through cudaGetKernel). */
static kinfo_t *kinfo_get(uint64_t key, int is_stub)
{
    unsigned slot = ft_hash_mix64(key) % KINFO_CACHE;
    if (kinfo_cache[slot].key == key && kinfo_cache[slot].k != NULL)
        return kinfo_cache[slot].k;
    kinfo_t *k;
    pthread_rwlock_rdlock(&kinfo_lock);
    HASH_FIND(hh, kinfos, &key, sizeof key, k);
    pthread_rwlock_unlock(&kinfo_lock);
    if (k != NULL) {
        kinfo_cache[slot].key = key;
        kinfo_cache[slot].k = k;
        return k;
    }
    uint64_t t0 = now_ns();
    resolve_driver();
    k = calloc(1, sizeof *k);
    if (k == NULL)
        return NULL;
    k->key = key;
    k->peeks_left = PEEK_LAUNCHES;
    uint64_t handle = key;
    if (is_stub) {
        cudaKernel_t kern = NULL;
        if (drv.get_kernel == NULL || drv.get_kernel(&kern, (const void *)(uintptr_t)key) != cudaSuccess)
            kern = NULL;
        handle = (uint64_t)(uintptr_t)kern;
    }
    if (handle != 0)
        fill_kinfo(k, handle);
    else
        k->nparams = -1, snprintf(k->name, sizeof k->name, "?");
    pthread_rwlock_wrlock(&kinfo_lock);
    kinfo_t *other;
    HASH_FIND(hh, kinfos, &key, sizeof key, other);
    if (other == NULL) {
        HASH_ADD(hh, kinfos, key, sizeof k->key, k);
        if (k->hh.tbl == NULL)
            other = NULL;
    }
    pthread_rwlock_unlock(&kinfo_lock);
    ft_disc_bind_kernel(disc, key, k->name); /* a saved profile's kernel, by name */
    once_charge(ONCE_KERNEL, t0);
    if (other != NULL) {
        free(k);
        return other;
    }
    return k;
}

/* --- discovery of one launch ---------------------------------------------------------- */

/* Reads PTR_PEEK_BYTES at each small region's pointer, after the stream's earlier work,
 * and adds the regions those words point into: grouped GEMM and cat pass arrays of
 * device pointers. Discovery only. */
static void peek_pointer_arrays(kinfo_t *k, ft_scan_set_t *set, cudaStream_t stream)
{
    size_t direct = set->n;
    if (__atomic_load_n(&k->peeks_left, __ATOMIC_RELAXED) <= 0)
        return;
    int synced = 0;
    uint64_t t0 = 0;
    for (size_t i = 0; i < direct; i++) {
        ft_region_t r;
        if (!ft_regions_find(regions, set->ptr[i], &r) || r.size > PTR_PEEK_REGION_MAX)
            continue;
        if (!synced) {
            t0 = now_ns();
            if (REAL(cudaStreamSynchronize)(stream) != cudaSuccess)
                return;
            synced = 1;
        }
        unsigned char buf[PTR_PEEK_BYTES];
        uint64_t end = r.base + r.size;
        size_t len = end - set->ptr[i] < sizeof buf ? (size_t)(end - set->ptr[i]) : sizeof buf;
        /* A table FT_SPILL holds in host memory is read there. */
        if (!spilled_read(buf, set->ptr[i], len) &&
            own_copy_sync(buf, (void *)(uintptr_t)set->ptr[i], len, cudaMemcpyDeviceToHost) != cudaSuccess)
            continue;
        ft_scan_indirect(regions, buf, len, set);
    }
    if (synced && set->n == direct)
        __atomic_fetch_sub(&k->peeks_left, 1, __ATOMIC_RELAXED);
    if (synced)
        once_charge(ONCE_PEEK, t0);
}

static void trace_arg_words(const kinfo_t *k, const char *what, const void *p, size_t len);

static void scan_extra(void **extra, kinfo_t *k, int scan_flags, ft_scan_set_t *set, int trace)
{
    void *buf = NULL;
    size_t size = 0;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != NULL)
            size = *(size_t *)extra[i + 1];
        else if (extra[i] != CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i] != CU_LAUNCH_PARAM_BUFFER_SIZE)
            break; /* an option we do not know: its value's shape is unknown too */
    }
    if (buf != NULL && size > 0)
        ft_scan_bytes_junk(regions, buf, size, &k->junk, scan_flags, set);
    if (trace)
        trace_arg_words(k, buf ? "extra buffer" : "extra without a buffer", buf, buf ? size : 0);
}

/* FT_LOG_LEVEL=trace: the words of a kernel's first launch that look like device
 * addresses, and whether each falls in a region -- to see how a library passes its
 * pointers (plain, in a TMA descriptor, one level down). */
static void trace_arg_words(const kinfo_t *k, const char *what, const void *p, size_t len)
{
    const unsigned char *b = p;
    int shown = 0;
    FT_TRACE("launch args of %s: %s, %zu bytes", k->name, what, len);
    for (size_t off = 0; off + 8 <= len && shown < 48; off += 8) {
        uint64_t v;
        memcpy(&v, b + off, 8);
        if ((v >> 32) == 0 || (v >> 47) != 0)
            continue;
        ft_region_t r;
        int in = ft_regions_find(regions, v, &r);
        FT_TRACE("  +%-5zu %#018llx %s", off, (unsigned long long)v, in ? "in a region" : "");
        shown++;
    }
}

/* FT_CUPTI_CONFIRM=first-pass: at the end of discovery's first pass, CUPTI is
 * detached (its callbacks, and its attachment, cost every launch: about 1.7 us on an
 * H200) when every driver call so far went through the wrappers; profiling attaches
 * it again to time kernels. A bypass keeps it for the rest of discovery. One value
 * (atomic): the first pass's end is checked once, by the thread that moves it from
 * CONFIRM_WAITING; CONFIRM_DETACHED is stored (release) after CUPTI is stopped, for the
 * thread that ends discovery (start_profiling). */
enum { CONFIRM_WAITING, CONFIRM_CHECKED, CONFIRM_DETACHED };
static int cupti_confirm = CONFIRM_WAITING;

/* 1 when FT_CUPTI_CONFIRM=first-pass detached CUPTI after discovery's first pass. */
int cupti_detached_after_first_pass(void)
{
    return __atomic_load_n(&cupti_confirm, __ATOMIC_ACQUIRE) == CONFIRM_DETACHED;
}

static void cupti_after_first_pass(void)
{
    ft_cupti_stats_t s;
    ft_cupti_get_stats(&s);
    if (s.status != FT_CUPTI_STATUS_ACTIVE)
        return;
    uint64_t unseen = s.unseen_launches + s.unseen_copies + s.unseen_sets;
    if (unseen > 0) {
        FT_INFO("CUPTI: %llu driver call(s) of the first pass bypassed the wrappers (first: %s); it "
                "stays attached for the rest of discovery", (unsigned long long)unseen, s.first_unseen);
        return;
    }
    ft_cupti_stop();
    __atomic_store_n(&cupti_confirm, CONFIRM_DETACHED, __ATOMIC_RELEASE);
    FT_INFO("CUPTI: the first pass's %llu launches, %llu copies and %llu sets in the driver all went "
            "through the wrappers; detached until profiling (FT_CUPTI_CONFIRM=first-pass)",
            (unsigned long long)s.launches, (unsigned long long)s.copies, (unsigned long long)s.sets);
}

/* Discovery and profiling are bounded (FT_OBSERVE_MAX_LAUNCHES launches each): a
 * program whose passes are not found in that many launches (a model built on the GPU
 * whose weights discovery does not tell apart, generate() with a growing cache) would
 * otherwise pay observation, CUPTI and FT_SPILL's moves for the whole run, for nothing.
 * FlexTensor stands down instead; profiling with a pass timed plans from what it has.
 * One counter a phase, counted by every thread; the launch that reaches the bound
 * acts, once. 1 when it acted (the phase moved on). */
static uint64_t disc_launches, prof_launches;

/* Discovery looks, every OWN_MAPPED_EVERY launches, for a program whose own mappings
 * (cuMemMap of handles FlexTensor did not stand in for: exported, another device's,
 * progmap.c) alone exceed the budget while what FlexTensor allocated for it fits: the weights are in memory FlexTensor cannot move,
 * so there is nothing to gain, and it stands down at once instead of paying
 * observation until the bound (model --own-vmm). */
#define OWN_MAPPED_EVERY 256

#define WHY_LEN 640

static int own_memory_only(char why[WHY_LEN])
{
    uint64_t own = __atomic_load_n(&program_mapped, __ATOMIC_RELAXED), budget = own > 0 ? spill_budget() : 0;
    uint64_t held = device_bytes();
    if (budget == 0 || own <= budget || held > budget)
        return 0;
    char a[32], b[32], c[32], kept[256];
    progmap_why_kept(kept, sizeof kept);
    snprintf(why, WHY_LEN, "the program maps its device memory itself (cuMemMap, %s: %s), more than the budget "
             "%s, and FlexTensor's allocations (%s) fit it: nothing it can move would help",
             human_bytes(own, a, sizeof a), kept, human_bytes(budget, b, sizeof b), human_bytes(held, c, sizeof c));
    return 1;
}

static int observe_bound(int ph)
{
    uint64_t max = (uint64_t)cfgp->observe_max_launches;
    uint64_t *count = ph == PHASE_DISCOVERY ? &disc_launches : &prof_launches;
    uint64_t n = __atomic_add_fetch(count, 1, __ATOMIC_RELAXED);
    static char why[WHY_LEN];
    if (ph == PHASE_DISCOVERY && n % OWN_MAPPED_EVERY == 0 && own_memory_only(why)) {
        launch_did_once = 1;
        engine_to(PHASE_DISCOVERY, PHASE_STOOD_DOWN, why);
        return 1;
    }
    if (max == 0 || n != max)
        return 0;
    /* The stand-down (FT_SPILL's allocations copied back) or the plan is this launch's
     * one-time work, not a launch's cost (the report's per-launch time leaves it out). */
    launch_did_once = 1;
    if (ph == PHASE_DISCOVERY) {
        snprintf(why, sizeof why, "discovery did not find the program's passes in %llu launches "
                 "(FT_OBSERVE_MAX_LAUNCHES)", (unsigned long long)max);
        engine_to(PHASE_DISCOVERY, PHASE_STOOD_DOWN, why);
    } else if (!profile_overdue(max)) {
        snprintf(why, sizeof why, "profiling timed no pass in %llu launches (FT_OBSERVE_MAX_LAUNCHES)",
                 (unsigned long long)max);
        engine_to(PHASE_PROFILING, PHASE_STOOD_DOWN, why);
    }
    return 1;
}

/* The program freed the plan's weights (reload.c): the discovery and the profiling to
 * come are bounded as the first ones were, each from its own first launch. */
void observe_forget(void)
{
    __atomic_store_n(&disc_launches, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&prof_launches, 0, __ATOMIC_RELAXED);
}

static void discovery_launch(uint64_t key, const char *name, ft_scan_set_t *set);

/* What the launch of kernel k (key) whose arguments hold the regions of `set` feeds to
 * FT_SPILL's faults, the guard, profiling and discovery: those that are on (as
 * observe_launch found them). */
static void observe_scanned(kinfo_t *k, uint64_t key, ft_scan_set_t *set, cudaStream_t stream, int disc_on,
                            int prof_on, int res_on, int spill_on)
{
    if (spill_on) {
        /* What pointer arrays reach is faulted in with the rest, in one call (a second
         * call could move the first one's allocations out again). */
        if (set->n > 0)
            peek_pointer_arrays(k, set, stream);
        spill_touch(set->ptr, set->n, set->dropped > 0, stream);
    }
    if (res_on) {
        res_guard_launch(key, k->name, set, stream);
        return;
    }
    /* Discovery and pass tracking see the touches the kernel is sure to make. */
    ft_scan_set_drop_unsure(set);
    if (!disc_on) {
        if (!prof_on)
            return; /* only FT_SPILL's faults were wanted */
        long pos = ft_disc_track(disc, lane_id(), key, set, NULL, NULL);
        if (pos >= 0)
            profile_launch(lane_id(), pos, stream);
        return;
    }
    if (set->n > 0 && !spill_on) /* under FT_SPILL, peeked above */
        peek_pointer_arrays(k, set, stream);
    discovery_launch(key, k->name, set);
}

/* A launch of kernel key (named name) seen by discovery, touching the sure regions of set. */
static void discovery_launch(uint64_t key, const char *name, ft_scan_set_t *set)
{
    /* The first launch of a pass that matches a saved profile: discovery took it, and
     * this launch is the pass's first for the tracking too. */
    if (savedprof_launch(name, set)) {
        ft_disc_bind_kernel(disc, key, name);
        ft_disc_track(disc, lane_id(), key, set, NULL, NULL);
        if (engine_to(PHASE_DISCOVERY, PHASE_PLANNING, NULL))
            savedprof_plan();
        return;
    }
    int seen = ft_disc_launch(disc, lane_id(), key, name, set);
    if (seen & FT_DISC_PASS_WORK)
        launch_did_once = 1; /* a pass's cost, reported apart (ft_disc_pass_work) */
    int waiting = CONFIRM_WAITING;
    if ((seen & FT_DISC_NEW_PASS) && cfgp->cupti_confirm == FT_CUPTI_CONFIRM_FIRST_PASS &&
        __atomic_compare_exchange_n(&cupti_confirm, &waiting, CONFIRM_CHECKED, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
        cupti_after_first_pass();
    /* One thread wins the move, however many see discovery done at once. */
    if (ft_disc_state(disc) == FT_DISC_DONE && engine_to(PHASE_DISCOVERY, PHASE_PLANNING, NULL)) {
        if (savedprof_discovery_done()) /* another thread's launch matched a saved profile */
            savedprof_plan();
        else if (engine_phase() == PHASE_PLANNING) /* FT_SKIP_DISCOVERY stood down */
            start_profiling();
    }
}

void observe_launch(uint64_t key, int is_stub, void **params, void **extra, cudaStream_t stream)
{
    /* One load of the phase for the whole launch: a move meanwhile is seen by the
     * launch after (profile_launch checks again, under prof.lock). */
    unsigned s = engine_state();
    int ph = state_phase(s);
    int disc_on = ph == PHASE_DISCOVERY, prof_on = ph == PHASE_PROFILING;
    int res_on = engine_held && ph == PHASE_STREAMING;
    /* FT_SPILL's faults go on whatever discovery found (nothing, after its restarts). */
    int spill_on = !res_on && engine_held && state_spill(s);
    if (!disc_on && !res_on && !spill_on && !prof_on)
        return;
    /* A stream capture under way: a captured launch does not run now, and nothing may
     * synchronise or query its stream; what it touches is recorded for its graph's
     * launches. Launches outside it run: the guard serves them (FlexTensor's own work in
     * relaxed capture mode), while discovery, profiling and FT_SPILL's synchronous
     * moves stand still until the capture ends (capture.c). */
    uint64_t cap = 0;
    int relaxed = 0, learn = disc_on;
    if (capture_under_way()) {
        cap = capture_of(stream);
        if (cap == 0 && spill_on)
            FT_WARN_CAPPED(1, "FT_SPILL: a launch outside a stream capture, while it is under way, is not "
                           "given its allocations in host memory (moving them would break the capture)");
        disc_on = prof_on = spill_on = 0;
        res_on = res_on && cap == 0;
        if (cap == 0 && !res_on)
            return;
        relaxed = cap == 0 ? capture_relax() : 0;
    }
    if ((disc_on || prof_on) && observe_bound(ph)) {
        if (!spill_on)
            return;
        disc_on = prof_on = 0; /* FT_SPILL's faults still go on, for what stays in host memory */
    }
    kinfo_t *k = kinfo_get(key, is_stub);
    if (k == NULL)
        return;
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    int first = FT_LOG_ENABLED(FT_LOG_TRACE) && __atomic_fetch_add(&k->launches, 1, __ATOMIC_RELAXED) == 0;
    /* Only the residency guard and FT_SPILL's faults act on unsure ids; discovery and
     * pass tracking drop them (below), and a scan that does not learn can then read
     * only the words that held region addresses in discovery. */
    /* A captured launch in discovery learns too: discovery sees it at its graph's
     * launches (capture.c). */
    int scan = (disc_on || (cap != 0 && learn) ? FT_SCAN_LEARN : 0) |
               (!res_on && !spill_on && cap == 0 ? FT_SCAN_SURE : 0);
    if (params != NULL && k->nparams > 0) {
        ft_scan_params_junk(regions, params, k->size, (size_t)k->nparams, &k->junk, scan, &set);
        for (int i = 0; first && i < k->nparams; i++)
            if (params[i] != NULL)
                trace_arg_words(k, "kernelParams", params[i], k->size[i]);
    } else if (extra != NULL) {
        scan_extra(extra, k, scan, &set, first);
    } else if (params != NULL) {
        /* Arguments whose layout is not known: they may reach anything. */
        set.dropped++;
        if (first)
            FT_TRACE("launch args of %s: none readable (%d params known)", k->name, k->nparams);
    }
    if (cap != 0) {
        /* Every region it may reach, unsure words included: its graph's launches load
         * them (a word that held garbage in discovery may be a pointer now). */
        capture_note(cap, stream, &set, key, k->name, 0);
        ft_scan_set_free(&set);
        return;
    }
    observe_scanned(k, key, &set, stream, disc_on, prof_on, res_on, spill_on);
    capture_restore(relaxed);
    /* A launch reaching more regions than the set holds in itself grew it (a cat of
     * many inputs): every user needs them all (core/scan.h). */
    ft_scan_set_free(&set);
}

void observe_node_args(uint64_t key, int is_stub, void **params, void **extra, ft_scan_set_t *set,
                       const char **name)
{
    kinfo_t *k = key != 0 ? kinfo_get(key, is_stub) : NULL;
    *name = k != NULL ? k->name : "?";
    /* As a captured launch's scan: every region the words may reach, unsure ones
     * included; in discovery, words that hold garbage are learned. */
    int scan = engine_phase() == PHASE_DISCOVERY ? FT_SCAN_LEARN : 0;
    /* FT_LOG_LEVEL=trace: a kernel's first node, as a launch's first words are said
     * (observe_launch): the words of a kernel seen only in graphs. */
    int first = k != NULL && FT_LOG_ENABLED(FT_LOG_TRACE) &&
                __atomic_fetch_add(&k->nodes, 1, __ATOMIC_RELAXED) == 0;
    if (k != NULL && params != NULL && k->nparams > 0) {
        ft_scan_params_junk(regions, params, k->size, (size_t)k->nparams, &k->junk, scan, set);
        for (int i = 0; first && i < k->nparams; i++)
            if (params[i] != NULL)
                trace_arg_words(k, "a graph node's kernelParams", params[i], k->size[i]);
    } else if (k != NULL && extra != NULL)
        scan_extra(extra, k, scan, set, first);
    else if (k == NULL || params != NULL)
        set->dropped++; /* arguments not readable: it may touch anything */
}

long observe_replayed(int ph, uint64_t key, const char *name, ft_scan_set_t *set, size_t written)
{
    if (engine_phase() != ph)
        return -2;
    if (key == 0) { /* a copy or set: what it writes is no weight */
        if (ph == PHASE_DISCOVERY && written > 0) {
            set->n = written < set->n ? written : set->n;
            ft_disc_write(disc, set);
        }
        return -1;
    }
    if (observe_bound(ph))
        return -2;
    if (ph == PHASE_PROFILING)
        return ft_disc_track(disc, lane_id(), key, set, NULL, NULL);
    discovery_launch(key, name, set);
    return -1;
}

/* A copy or set wrote [dst, dst+n): during discovery, the region is not a weight. */
void observe_write(const void *dst)
{
    if (engine_phase() != PHASE_DISCOVERY || dst == NULL)
        return;
    ft_region_t r;
    if (!ft_regions_find(regions, (uint64_t)(uintptr_t)dst, &r))
        return;
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    ft_scan_set_add(&set, r.id, (uint64_t)(uintptr_t)dst);
    ft_disc_write(disc, &set);
}

/* --- synchronisation: where the host waits is a hint of where a pass ends ------------ */

void observe_sync(void)
{
    if (engine_phase() == PHASE_DISCOVERY)
        ft_disc_sync(disc, lane_id());
}

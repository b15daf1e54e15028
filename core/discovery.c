/* discovery.c - the discovery phase (see discovery.h for the rules it applies). */
#define _GNU_SOURCE
#include "core/discovery.h"

#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* uthash (HASH_NONFATAL_OOM: a library inside someone else's process never exits on a
 * failed allocation; the entry is simply not added). */
#include "core/hash.h"

#include "core/checksum.h"
#include "core/log.h"
#include "core/size.h"

typedef struct {
    uint32_t id;
    uint64_t base, size;
    uint32_t flags;           /* FT_REGION_* from the table */
    int candidate;            /* alive at the first launch */
    int written;              /* copy/memset target since the first launch */
    int changed;              /* hash differed between two iteration boundaries */
    int changed_early;        /* hash differed between the first launch and the first
                                 boundary: init kernels may still have been running,
                                 so this counts only when one boundary is all we have */
    int freed;
    int hashed;
    int compared;             /* its hash was compared with an earlier one at least once */
    uint64_t hash;
    int unit;                 /* index in units, -1 none */
    int shared;               /* touched by launches outside its unit's range */
    int direct;               /* touched through a launch's own arguments in the pass */
    int touched;              /* touched by a launch discovery observed (since the last
                                 restart, which forgets it but for activations):
                                 ft_disc_region_touched */
    int kernel_born;          /* allocated after the first launch and first touched by
                                 a launch, not a copy: an activation (a caching
                                 allocator's segment), never a weight, also after a
                                 restart (its content can repeat pass after pass) --
                                 unless the kernel that first touched it does not run
                                 in the passes (init_made) */
    uint32_t born_kernel;     /* kernel_born: the kernel of its first touch */
    int init_made;            /* kernel_born by a kernel that no launch of the recorded
                                 pass runs, and touched in that pass: made by the
                                 program's initialisation on the device (a model built
                                 under `with torch.device("cuda")`); a candidate again
                                 at the next restart */
    int varies;               /* its content moved at two of the detector's snapshots
                                 (detector_snapshot): an activation segment, left out
                                 of the detector's keys */
    int dmoves;               /* detector snapshots at which its content had moved */
    int dhashed;              /* dhash holds its hash at the last detector snapshot */
    int unreadable;           /* a hash of it failed: not hashed again by the detector */
    uint64_t dhash;
    int fold_touched;         /* fold_repeated_pass: touched in the pass */
    int fold_odd;             /* and at a launch where another copy does not touch it */
    int gone;                 /* a unit's weight the program freed after DONE (counted in
                                 weight_gone) */
    uint32_t stale_in_pass;   /* touches off DISC_PTR_ALIGN since discovery (re)started */
    uint64_t off_max;         /* the furthest offset into it a sure pointer of the
                                 recorded pass touched (ft_disc_region_off_max) */
    /* A piece of an allocation served in pieces (FT_REGION_PIECE), in build_units: the
     * lowest and highest offsets sure pointers of the pass touched (pc_min UINT64_MAX:
     * none), the first launch at the highest, a touch without a sure pointer, and what
     * may run into it from the pieces before (pieces_follow_tensors). */
    uint64_t pc_min, pc_max;
    int64_t pc_pos, pc_prev;
    int pc_unsure;
    uint32_t pc_from;         /* a tensor's body: the piece its start is in */
    uint32_t pc_next;         /* the first piece of the body of the tensor starting last
                                 in it, when another piece holds it: pointers at or past
                                 pc_max reach that piece's unit (ft_disc_region_follow) */
    UT_hash_handle hh;
} rinfo_t;

typedef struct {
    uint64_t key;
    uint32_t idx;
    char *name;
    uint64_t launches;
    int in_pass;              /* launched in the recorded pass (set when DONE) */
    int weighted;             /* and touched a weight there, through its own arguments */
    uint64_t births, foreign; /* regions its launches touched first (kernel_born by it);
                                 touches of regions another kernel made: an initialiser
                                 makes many and touches few others' (initialiser) */
    UT_hash_handle hh;
} kinfo_t;

typedef struct {
    uint32_t kernel;          /* kinfo_t.idx */
    uint32_t first_id;        /* offset into the record's ids */
    uint32_t n_ids;
    uint32_t range;           /* the NVTX range stack it ran in (interned), 0 none */
} launch_t;

/* The launches of one iteration and the region ids each touched, with the pointer that
 * led to each (0: an unsure one), for ft_disc_region_off_max. */
typedef struct {
    launch_t *l;
    size_t n, cap;
    uint32_t *ids;
    uint64_t *ptrs;           /* beside ids, the same room */
    int no_ptrs;              /* some launch came without its pointers (a saved pass) */
    uint64_t gen;             /* changed at every push: ft_disc_region_off_max's cache key */
    size_t n_ids, cap_ids;
} record_t;

#define FT_DISC_RANGE_DEPTH 32
#define FT_DISC_RANGE_PATH 1024
#define RANGE_SEP '\x1f'

/* A (kernel, first candidate region) pair, and where in the lane's pair sequence it
 * last occurred; kept until the lane's period is confirmed. */
typedef struct {
    uint64_t key;
    size_t last;
    UT_hash_handle hh;
} pair_t;

/* A period being verified: the pair at sequence index `start` recurred `period`
 * pairs after its previous occurrence; confirmed after MATCHES_NEEDED further pairs
 * repeat the sequence one period earlier. */
typedef struct {
    size_t start, period, matched;
} period_cand_t;

#define MAX_PERIOD_CANDS 8
#define MATCHES_NEEDED 16

/* A tensor starts at a multiple of this into its allocation (PyTorch's caching
 * allocator places blocks at 512 bytes; views of weights cut whole rows). A touch at
 * any other offset is a stale value in a kernel's argument padding (on the H200,
 * PyTorch's elementwise, index and cutlass kernels carried words 1 to 6 bytes past
 * 38 MiB into one 86 MiB weight, launch after launch): discovery leaves it out of the period
 * detector's keys and of the recorded passes, so it neither makes a period nor places
 * the weight. The residency guard still sees it and loads the unit when it must. */
#define DISC_PTR_ALIGN 16

/* One lane of launches: an application thread. Each thread's forward is a clean
 * sequence even when several threads run forwards at once, so iterations are
 * detected per lane; the first lane to complete the iterations defines the units. */
typedef struct {
    uint64_t lane;
    record_t cur;
    /* Until the period is confirmed: every launch touching a candidate region, as
     * its pair key and its position in cur. */
    uint64_t *seq;
    uint32_t *seq_pos;
    uint32_t *seq_minid;      /* lowest candidate region id the launch touched */
    uint8_t *seq_synced;      /* the host synchronised just before the launch */
    int sync_pending;
    /* The NVTX range stack, as a path "outer\x1finner" interned in d->ranges. */
    char path[FT_DISC_RANGE_PATH];
    size_t path_len[FT_DISC_RANGE_DEPTH];
    int depth;                /* pushes, also beyond FT_DISC_RANGE_DEPTH */
    uint32_t range;
    int skip_boundary;        /* the pass under way does not count (confirm_period) */
    long track_pos;           /* after DONE: position in the pass under way, -1 before */
    uint64_t since_start;     /* after DONE: launches since the last pass start */
    int track_mark;           /* after DONE, with explicit marks: a mark is pending */
    size_t n_seq, cap_seq;
    period_cand_t cands[MAX_PERIOD_CANDS];
    size_t n_cands;
    pair_t *pairs;
    uint64_t anchor;          /* the anchor pair's key, once anchored */
    int anchored;
    int mark_pending;
    int iterations;
    UT_hash_handle hh;
} lane_t;

/* An interned range path. */
typedef struct {
    char *path;
    uint32_t id;
    UT_hash_handle hh;
} range_t;

/* The units a pass start's launch may touch (choose_track_start): a launch touching
 * more is not taken for the start. */
#define TRACK_UNITS 64

/* A weight's touch in the recorded pass, by kernel and pointer (resync_find). */
struct resync_key {
    uint64_t kernel;          /* kinfo_t.idx */
    uint64_t where;           /* the pointer; without one, the region id | 1 << 63 */
};
struct resync {
    struct resync_key key;
    long pos;                 /* its position in the recorded pass; -1: more than one */
    UT_hash_handle hh;
};

struct ft_disc {
    pthread_mutex_t lock;     /* launches arrive from every application thread */
    ft_regions_t *regions;
    ft_disc_params_t p;

    ft_disc_state_t state;
    uint64_t serial;          /* from disc_serial: tells detectors apart for lane_recent */
    rinfo_t *rmap;
    rinfo_t **rvec;           /* rmap by region id (ids are dense, from 1): one lookup */
    size_t n_rvec;
    kinfo_t *kmap;
    kinfo_t **kv;             /* by idx */
    size_t n_kernels, cap_kernels;

    lane_t *lanes;
    range_t *ranges;          /* by path */
    range_t **range_v;        /* by id - 1 */
    size_t n_ranges, cap_ranges;
    record_t last;            /* the last complete iteration of the deciding lane */
    uint64_t off_gen;         /* the gen of `last` the regions' off_max were found from */
    uint64_t deciding_lane;   /* the lane whose iterations decided (once DONE) */
    int explicit_marks;       /* boundaries come from marks, not the detector */
    int iterations;           /* most complete iterations seen by one lane */
    int boundary_source;      /* 0 detector, 1 ft_iteration_mark, 2 marker kernel */
    uint64_t launches_total;
    uint64_t pass_work_n, pass_work_ns; /* FT_DISC_PASS_WORK: count and host time */
    uint64_t launches_unattributed; /* launches touching no region at all */
    uint64_t misaligned;            /* touches left out: pointer off DISC_PTR_ALIGN */

    ft_disc_unit_t *units;
    size_t n_units;
    uint32_t *unit_ids;       /* region ids of all units, back to back */
    uint64_t weight_bytes;
    int restart_pending;      /* the passes found hold no weight: start over */
    /* Weights copied in after the first launch (a framework's warm-up kernels ran
     * first): when no launch has touched a candidate for KEYLESS_LAUNCHES launches in a
     * row and such copies came since the (re)start, discovery starts over with them. */
    uint64_t keyless_run;     /* launches in a row without a key, no lane anchored */
    uint64_t copied_bytes;    /* regions first met as a copy's or set's target since the (re)start */
    int keyless_restarts;
    int restarts;
    /* Passes too small for the memory beside them (idle_weight_bytes): a compiler
     * timing one kernel before the program's loop (torch.compile on the H200: one
     * launch on one 2 MiB region). Starting over for them does not count in restarts;
     * SHORT_RESTARTS_MAX bounds them. */
    int short_restarts;
    int restart_uncounted;
    /* After such a restart, launches before this count are not observed: the set-up
     * work gets SHORT_QUIET launches, twice as many at each restart, to end. */
    uint64_t quiet_until, quiet_len;
    /* After DONE: the units' weight bytes the program has freed since, and whether
     * ft_disc_weight_freed has answered that most of them went (once a discovery). */
    uint64_t weight_gone;
    int gone_said;
    int reloads;              /* ft_disc_reload's discoveries from scratch */
    /* The detector's snapshots (detector_snapshot), taken at a launch after a host
     * synchronisation until a lane is anchored: the launch count at the last one (or
     * at the first launch), the launches to wait for before the next, whether the host
     * synchronised since. */
    uint64_t dsnap_at, dsnap_gap;
    int dsnap_sync;
    int any_anchored;         /* a lane is anchored: the keys' regions are settled */
    uint64_t marker_hits;     /* launches whose kernel matched the marker glob */
    /* Once DONE (without explicit marks), every lane's passes are followed from the
     * first launch of the recorded pass that touches a weight of the unit it runs in
     * that no other launch touches (a kernel not in the pass touching it starts one
     * too), or failing that, whose kernel touches it nowhere else in the pass: that
     * kernel and region, and the launch's position. A launch's other regions can
     * differ from pass to pass: the caching-allocator segment holding the input, a
     * stale address in an unused argument word (seen on the GPU in PyTorch's embedding
     * kernel, pointing at a later layer's weight during discovery only). track_set 0:
     * the lanes' own anchors (the detector's pair key). */
    int track_set, track_any_kernel;
    uint32_t track_kernel, track_region, track_start;
    /* The units whose weights the start's launch touched (shared ones aside): a launch
     * touching another unit's weight is not a start (a launch added after discovery
     * that reads the start's weight and another layer's). */
    int track_units[TRACK_UNITS];
    size_t n_track_units;
    int track_lost_warned;    /* the pass start has not recurred: said once */
    uint64_t track_starts;    /* passes started after DONE, all lanes */
    /* After DONE: the recorded pass's touches of weights by (kernel, pointer), each with
     * its position, or -1 where the pair recurs in the pass (resync_find). Built from
     * `last` whose gen is resync_gen, at the first launch that needs it. */
    struct resync *resync;
    uint64_t resync_gen;
    int resync_built;
    uint64_t track_resyncs;   /* launches whose weight moved their lane's position */
    unsigned track_misses;    /* launches of the start's kernel that did not start a pass */
    int adopted;              /* DONE by ft_disc_adopt (a saved profile): kernels not seen
                                 yet wait in kmap under SAVED_KEY keys for their handles */
};

/* Passes found among launches that touch no weight (a framework's warm-up kernels,
 * a communicator's first all-reduce, before the model is loaded) make discovery start
 * over, at most this many times, from the regions alive then. */
#define MAX_RESTARTS 4
/* Launches in a row that touch no candidate before discovery looks again at regions
 * loaded by copies since it started (d->copied_bytes); at most MAX_RESTARTS times. A
 * model's forward touches its weights every few launches; a program's initialisation
 * on the device touches only what it allocates then, which is kernel_born, not copied. */
#define KEYLESS_LAUNCHES 256
/* And at least this much copied: token ids and small tables copied in during a GPU-built
 * model's initialisation are no weights (on the H200 such a start-over, "0.0 MiB were
 * copied", cost gpu_built one of its MAX_RESTARTS). */
#define KEYLESS_COPIED_MIN (1ull << 20)

static uint64_t rec_gen; /* atomic builtins: every record's pushes numbered */

/* ptrs (NULL: not known) beside ids. */
static int rec_push_launch(record_t *r, uint32_t kernel, uint32_t range, const uint32_t *ids, const uint64_t *ptrs,
                           size_t n)
{
    if (r->n == 0)
        r->no_ptrs = 0;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        launch_t *nl = realloc(r->l, cap * sizeof *nl);
        if (nl == NULL)
            return -ENOMEM;
        r->l = nl;
        r->cap = cap;
    }
    if (r->n_ids + n > r->cap_ids) {
        size_t cap = r->cap_ids ? r->cap_ids : 1024;
        while (cap < r->n_ids + n)
            cap *= 2;
        uint32_t *ni = realloc(r->ids, cap * sizeof *ni);
        if (ni == NULL)
            return -ENOMEM;
        r->ids = ni;
        uint64_t *np = realloc(r->ptrs, cap * sizeof *np);
        if (np == NULL)
            return -ENOMEM; /* ids grown alone: cap_ids still bounds both */
        r->ptrs = np;
        r->cap_ids = cap;
    }
    r->l[r->n++] = (launch_t){ kernel, (uint32_t)r->n_ids, (uint32_t)n, range };
    if (n > 0) { /* ids may be NULL then, which memcpy may not be given */
        memcpy(r->ids + r->n_ids, ids, n * sizeof *ids);
        if (ptrs != NULL)
            memcpy(r->ptrs + r->n_ids, ptrs, n * sizeof *ptrs);
        else
            memset(r->ptrs + r->n_ids, 0, n * sizeof *ptrs);
    }
    r->no_ptrs |= ptrs == NULL && n > 0;
    r->n_ids += n;
    r->gen = __atomic_add_fetch(&rec_gen, 1, __ATOMIC_RELAXED);
    return 0;
}

static void rec_free(record_t *r)
{
    free(r->l);
    free(r->ids);
    free(r->ptrs);
    memset(r, 0, sizeof *r);
}

/* Reallocates the array at *p (any element type) to n elements of size bytes: 0, or -1
 * with *p unchanged. */
static int resize(void *p, size_t n, size_t size)
{
    void *q = realloc(*(void **)p, n * size);
    if (q == NULL)
        return -1;
    *(void **)p = q;
    return 0;
}

/* The period detector's working state of a lane (launch pairs, sequence): dropped once
 * the lane is anchored, when discovery restarts, and with the lane. */
static void drop_pairs(lane_t *ln)
{
    FT_HASH_RELEASE_ALL(ln->pairs, free);
    free(ln->seq);
    free(ln->seq_pos);
    free(ln->seq_minid);
    free(ln->seq_synced);
    ln->seq = NULL;
    ln->seq_pos = NULL;
    ln->seq_minid = NULL;
    ln->seq_synced = NULL;
    ln->n_seq = ln->cap_seq = 0;
    ln->n_cands = 0;
}

static void lane_free(lane_t *ln)
{
    drop_pairs(ln);
    rec_free(&ln->cur);
    free(ln);
}

static void kinfo_free(kinfo_t *k)
{
    free(k->name);
    free(k);
}

static void range_free(range_t *rg)
{
    free(rg->path);
    free(rg);
}

/* A thread's last lane: a lane lives as long as its detector, and a thread launches
 * as one lane, so a launch skips the lanes' lookup. The serial tells a detector from
 * one made later at the same address. */
static __thread struct {
    uint64_t serial, lane;
    lane_t *ln;
} lane_recent;

static lane_t *lane_get(ft_disc_t *d, uint64_t lane)
{
    if (lane_recent.serial == d->serial && lane_recent.lane == lane)
        return lane_recent.ln;
    lane_t *ln;
    HASH_FIND(hh, d->lanes, &lane, sizeof lane, ln);
    if (ln != NULL) {
        lane_recent.serial = d->serial;
        lane_recent.lane = lane;
        lane_recent.ln = ln;
        return ln;
    }
    ln = calloc(1, sizeof *ln);
    if (ln == NULL)
        return NULL;
    ln->lane = lane;
    ln->track_pos = -1;
    HASH_ADD(hh, d->lanes, lane, sizeof ln->lane, ln);
    if (ln->hh.tbl == NULL) {
        free(ln);
        return NULL;
    }
    return ln;
}

/* dst = launches [from, to) of src. 0 or -ENOMEM. */
static int rec_slice(const record_t *src, size_t from, size_t to, record_t *dst)
{
    dst->n = 0;
    dst->n_ids = 0;
    for (size_t i = from; i < to; i++)
        if (rec_push_launch(dst, src->l[i].kernel, src->l[i].range, src->ids + src->l[i].first_id,
                            src->no_ptrs ? NULL : src->ptrs + src->l[i].first_id, src->l[i].n_ids) != 0)
            return -ENOMEM;
    return 0;
}

static uint64_t disc_serial; /* atomic builtins */

ft_disc_t *ft_disc_new(ft_regions_t *regions, const ft_disc_params_t *params)
{
    ft_disc_t *d = calloc(1, sizeof *d);
    if (d == NULL)
        return NULL;
    d->serial = __atomic_add_fetch(&disc_serial, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&d->lock, NULL);
    d->regions = regions;
    d->p = *params;
    if (d->p.iters < 1)
        d->p.iters = 1;
    return d;
}

void ft_disc_free(ft_disc_t *d)
{
    if (d == NULL)
        return;
    FT_HASH_RELEASE_ALL(d->rmap, free);
    free(d->rvec);
    FT_HASH_RELEASE_ALL(d->kmap, kinfo_free);
    FT_HASH_RELEASE_ALL(d->lanes, lane_free);
    free(d->kv);
    FT_HASH_RELEASE_ALL(d->ranges, range_free);
    free(d->range_v);
    rec_free(&d->last);
    FT_HASH_RELEASE_ALL(d->resync, free);
    free(d->units);
    free(d->unit_ids);
    pthread_mutex_destroy(&d->lock);
    free(d);
}

/* Region ids in launch records carry this bit when they were found one level down,
 * in a pointer array: they count as touched, but a pass's order is read from the
 * arguments themselves (data read from the device can mislead). */
#define ID_INDIRECT 0x80000000u

static rinfo_t *rinfo_get(ft_disc_t *d, uint32_t id)
{
    id &= ~ID_INDIRECT;
    return id < d->n_rvec ? d->rvec[id] : NULL;
}

static rinfo_t *rinfo_add(ft_disc_t *d, const ft_region_t *reg, int candidate)
{
    rinfo_t *r = rinfo_get(d, reg->id);
    if (r != NULL)
        return r;
    r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->id = reg->id;
    r->base = reg->base;
    r->size = reg->size;
    r->flags = reg->flags;
    r->candidate = candidate;
    r->unit = -1;
    if (r->id >= d->n_rvec) {
        size_t n = d->n_rvec ? d->n_rvec : 1024;
        while (n <= r->id)
            n *= 2;
        rinfo_t **nv = realloc(d->rvec, n * sizeof *nv);
        if (nv == NULL) {
            free(r);
            return NULL;
        }
        memset(nv + d->n_rvec, 0, (n - d->n_rvec) * sizeof *nv);
        d->rvec = nv;
        d->n_rvec = n;
    }
    HASH_ADD(hh, d->rmap, id, sizeof r->id, r);
    if (r->hh.tbl == NULL) { /* uthash ran out of memory (HASH_NONFATAL_OOM) */
        free(r);
        return NULL;
    }
    d->rvec[r->id] = r;
    return r;
}

static kinfo_t *kinfo_get(ft_disc_t *d, uint64_t key, const char *name)
{
    kinfo_t *k;
    HASH_FIND(hh, d->kmap, &key, sizeof key, k);
    if (k != NULL)
        return k;
    if (d->n_kernels == d->cap_kernels) {
        size_t cap = d->cap_kernels ? d->cap_kernels * 2 : 64;
        kinfo_t **nv = realloc(d->kv, cap * sizeof *nv);
        if (nv == NULL)
            return NULL;
        d->kv = nv;
        d->cap_kernels = cap;
    }
    k = calloc(1, sizeof *k);
    if (k == NULL)
        return NULL;
    k->key = key;
    k->idx = (uint32_t)d->n_kernels;
    k->name = strdup(name ? name : "?");
    HASH_ADD(hh, d->kmap, key, sizeof k->key, k);
    if (k->name == NULL || k->hh.tbl == NULL) {
        free(k->name);
        free(k);
        return NULL;
    }
    d->kv[d->n_kernels++] = k;
    return k;
}

/* Hashes every candidate still alive; a region whose hash moved is not a weight.
 * Snapshots: at the first launch, at every boundary, and half-way through every
 * iteration after the first -- an activation buffer can hold the same bytes at every
 * boundary (the same input each pass), never half-way. A change seen by the first
 * boundary's snapshot is "early": kernels that initialise weights may run before the
 * first pass, so it counts only when one iteration is all discovery observes. */
/* One hash answered for r; see snapshot_hashes. */
static void hash_seen(rinfo_t *r, const ft_disc_hash_req_t *q, int early)
{
    if (q->failed) {
        r->changed = 1;
        r->unreadable = 1;
        return;
    }
    /* Only the first comparison (with the snapshot at the first launch) can be early:
     * with several threads, every lane's first boundary asks for an early snapshot,
     * and a change between two of those is a change within the passes. */
    if (r->hashed && q->hash != r->hash) {
        if (early && !r->compared)
            r->changed_early = 1;
        else
            r->changed = 1;
    }
    r->compared = r->hashed;
    r->hash = q->hash;
    r->hashed = 1;
}

/* Hashes the n regions of q (of: their records) in one call. */
static void hash_batch(ft_disc_t *d, ft_disc_hash_req_t *q, rinfo_t **of, size_t n, int early)
{
    if (n > 0)
        d->p.hash(d->p.hash_ctx, q, n);
    for (size_t i = 0; i < n; i++)
        hash_seen(of[i], &q[i], early);
}

static void snapshot_hashes(ft_disc_t *d, int early)
{
    if (d->p.hash == NULL)
        return;
    /* A batch at a time: the shim answers it behind one sync (a copy and a sync for each
     * sampled chunk of each region took 5 ms a snapshot for 40 regions on the H200). */
    ft_disc_hash_req_t q[FT_DISC_HASH_BATCH];
    rinfo_t *of[FT_DISC_HASH_BATCH];
    size_t n = 0;
    rinfo_t *r, *rt;
    HASH_ITER(hh, d->rmap, r, rt) {
        if (!r->candidate || r->freed || r->written || r->changed)
            continue;
        q[n] = (ft_disc_hash_req_t){ .base = r->base, .size = r->size };
        of[n++] = r;
        if (n == FT_DISC_HASH_BATCH) {
            hash_batch(d, q, of, n, early);
            n = 0;
        }
    }
    hash_batch(d, q, of, n, early);
}

/* The detector's snapshots: at least this many launches apart, twice as many after
 * each one that saw no content move (a program that synchronises every few launches
 * pays for a handful), back to this after one that did. */
#define DSNAP_GAP_MIN 32
#define DSNAP_GAP_MAX (1u << 20)
/* Without a host synchronisation since the last snapshot: half the gap, so that an
 * activation seen by the detector from the first launch moves at two snapshots within
 * 32 launches, before two periods of a layer's launches can repeat (MATCHES_NEEDED). */
#define DSNAP_FORCED_GAP(d) ((d)->dsnap_gap / 2)

/* A region's hash at a detector snapshot: 1 when its content moved since the previous
 * one. The second time, the region varies. A hash that failed tells nothing. */
static int dhash_seen(rinfo_t *r, const ft_disc_hash_req_t *q)
{
    if (q->failed) {
        r->unreadable = 1;
        return 0;
    }
    int moved = r->dhashed && q->hash != r->dhash;
    r->dhash = q->hash;
    r->dhashed = 1;
    if (moved && ++r->dmoves >= 2)
        r->varies = 1;
    return moved;
}

/* Before any lane has found its period, keys may carry pointers into activation
 * segments that existed at the first launch: a caching allocator serves later tensors
 * from their free space (PyTorch's small pool holds the norm weights and the token ids
 * copied before the first launch, then the activations and a KV cache of every decode
 * step). Those pointers move from one forward to the next as the cache grows, so keys
 * never recur and no period is found. Such a region's content changes from one host
 * synchronisation to the next; a weight's never does. The detector's snapshot hashes
 * every candidate not yet known to vary; one whose hash has moved at two snapshots
 * (the first launch's counts as the first snapshot) leaves the keys. Once is not
 * enough: kernels may initialise weights after the first launch, once. Its own hashes:
 * the weight rule's are left as they are. How many regions moved (*moved) and began to
 * vary (returned), and the latter's bytes (*bytes). */
static size_t detector_snapshot_of(ft_disc_t *d, int unhashed_only, size_t *moved, uint64_t *bytes);

static size_t detector_snapshot(ft_disc_t *d, size_t *moved, uint64_t *bytes)
{
    return detector_snapshot_of(d, 0, moved, bytes);
}

/* detector_snapshot, of the candidates the detector has no hash of yet only when
 * unhashed_only is set. */
static size_t detector_snapshot_of(ft_disc_t *d, int unhashed_only, size_t *moved, uint64_t *bytes)
{
    ft_disc_hash_req_t q[FT_DISC_HASH_BATCH];
    rinfo_t *of[FT_DISC_HASH_BATCH];
    size_t n = 0, began = 0;
    *bytes = 0;
    *moved = 0;
    rinfo_t *r, *rt;
    HASH_ITER(hh, d->rmap, r, rt) {
        int last = r->hh.next == NULL;
        if (r->candidate && !r->freed && !r->varies && !r->unreadable && !(unhashed_only && r->dhashed)) {
            q[n] = (ft_disc_hash_req_t){ .base = r->base, .size = r->size };
            of[n++] = r;
        }
        if (n == FT_DISC_HASH_BATCH || (last && n > 0)) {
            d->p.hash(d->p.hash_ctx, q, n);
            for (size_t i = 0; i < n; i++) {
                int was = of[i]->varies;
                *moved += (size_t)dhash_seen(of[i], &q[i]);
                if (of[i]->varies && !was) {
                    began++;
                    *bytes += of[i]->size;
                }
            }
            n = 0;
        }
    }
    return began;
}

/* Whether this launch takes a detector snapshot: no lane is anchored yet and enough
 * launches have gone by since the last one. After a host synchronisation the snapshot
 * costs nothing more than its hashing; without one it drains the device first, once
 * every dsnap_gap launches at most, and only until a lane is anchored. It cannot wait
 * for the program's synchronisations: on the H200, transformers' Mixtral decode
 * (grouped experts) synchronised nowhere in its forward, its small-pool activations
 * carried the same offsets in every decoder layer, and the detector took one layer
 * for the pass before any snapshot could see them move (model --act-kernels). Tested
 * at every launch of discovery: no call, no clock. */
static inline int detector_snapshot_due(const ft_disc_t *d)
{
    return !d->any_anchored && !d->explicit_marks && d->p.hash != NULL &&
           d->launches_total - d->dsnap_at >= (d->dsnap_sync ? d->dsnap_gap : DSNAP_FORCED_GAP(d));
}

/* The detector snapshot of a launch (detector_snapshot_due). When regions began to
 * vary, every lane's detector starts again from this launch (its keys so far held
 * them). */
static void take_detector_snapshot(ft_disc_t *d)
{
    uint64_t bytes;
    size_t moved, began = detector_snapshot(d, &moved, &bytes);
    d->dsnap_at = d->launches_total;
    d->dsnap_sync = 0;
    if (moved > 0)
        d->dsnap_gap = DSNAP_GAP_MIN;
    else if (d->dsnap_gap < DSNAP_GAP_MAX)
        d->dsnap_gap *= 2;
    if (began > 0) {
        lane_t *ln, *lt;
        HASH_ITER(hh, d->lanes, ln, lt) drop_pairs(ln);
        FT_DEBUG("discovery: %zu region(s) alive at the first launch (%.1f MiB) changed at two host "
                 "synchronisations, the last before launch %llu: activations, left out of the "
                 "detector's keys; the period is looked for again", began, (double)bytes / 1048576.0,
                 (unsigned long long)d->launches_total);
    }
}

static void start_observing(ft_disc_t *d)
{
    ft_region_t *v;
    long n = ft_regions_snapshot(d->regions, &v);
    if (n < 0) {
        FT_WARN("discovery: out of memory reading the region table");
        n = 0;
        v = NULL;
    }
    for (long i = 0; i < n; i++)
        rinfo_add(d, &v[i], 1);
    free(v);
    snapshot_hashes(d, 1);
    /* The snapshot at the first launch is the detector's first too. */
    rinfo_t *r, *rt;
    HASH_ITER(hh, d->rmap, r, rt) {
        r->dhash = r->hash;
        r->dhashed = r->hashed;
    }
    /* The weight rule's snapshot leaves out regions already written by a copy (the
     * input copied in before the first launch): without their hash now, the detector
     * would see them move at its third snapshot only, and in the simulated model their
     * launches alone made a period of one launch before that. */
    size_t moved;
    uint64_t bytes;
    detector_snapshot_of(d, 1, &moved, &bytes);
    d->dsnap_at = d->launches_total;
    d->dsnap_gap = DSNAP_GAP_MIN;
    d->dsnap_sync = 0;
    __atomic_store_n(&d->state, FT_DISC_OBSERVING, __ATOMIC_RELEASE);
}

static int is_weight(const ft_disc_t *d, const rinfo_t *r)
{
    return r != NULL && r->candidate && !r->written && !r->changed && !r->freed &&
           !(d->iterations < 2 && r->changed_early);
}

/* --- units ---------------------------------------------------------------------- */

typedef struct {
    uint32_t pos;             /* launch position of the first touch */
    uint32_t id;
    uint32_t order;           /* order found, to keep argument order within a launch */
    uint64_t sig;
} touch_t;

/* The period p and start s of the longest run where v[i] == v[i+p]; run is its
 * length, and must span at least one whole period. Ties go to the smallest period. */
static void find_period(const uint64_t *v, size_t m, size_t *p_out, size_t *s_out, size_t *run_out)
{
    size_t best_p = 0, best_s = 0, best_run = 0;
    for (size_t p = 1; p <= m / 2; p++) {
        size_t run = 0;
        for (size_t i = 0; i + p < m; i++) {
            if (v[i] == v[i + p]) {
                run++;
                if (run > best_run && run >= p) {
                    best_run = run;
                    best_p = p;
                    best_s = i + 1 - run;
                }
            } else {
                run = 0;
            }
        }
    }
    *p_out = best_p;
    *s_out = best_s;
    *run_out = best_run;
}

int ft_disc_pattern_match(const char *pattern, const char *unit_name,
                          const char *const *kernel_names, size_t n_kernels, uint64_t bytes)
{
    if (strncmp(pattern, "kernel:", 7) == 0) {
        for (size_t i = 0; i < n_kernels; i++)
            if (fnmatch(pattern + 7, kernel_names[i], 0) == 0)
                return 1;
        return 0;
    }
    if (strncmp(pattern, "size:", 5) == 0) {
        const char *op = pattern + 5;
        int ge = 1;
        if (op[0] == '>' && op[1] == '=')
            op += 2;
        else if (op[0] == '<')
            op += 1, ge = 0;
        else
            return 0;
        uint64_t n;
        if (ft_size_parse(op, &n) != 0)
            return 0; /* not a size: the pattern matches no unit, and is warned about */
        return ge ? bytes >= n : bytes < n;
    }
    if (strncmp(pattern, "name:", 5) == 0)
        pattern += 5;
    return fnmatch(pattern, unit_name, 0) == 0;
}

static int unit_matches_any(ft_disc_t *d, const ft_disc_unit_t *u, char *const *pats, size_t n)
{
    if (n == 0)
        return 0;
    /* The distinct kernel names of the unit's launch range. */
    size_t cnt = u->last_launch - u->first_launch + 1;
    const char **names = calloc(cnt, sizeof *names);
    if (names == NULL)
        return 0;
    size_t nn = 0;
    for (uint32_t i = u->first_launch; i <= u->last_launch && i < d->last.n; i++)
        names[nn++] = d->kv[d->last.l[i].kernel]->name;
    int hit = 0;
    for (size_t i = 0; i < n && !hit; i++)
        hit = ft_disc_pattern_match(pats[i], u->name, names, nn, u->bytes);
    free(names);
    return hit;
}

/* 1 when launch l of r touches one of the unit's own regions. */
static int touches_unit(const record_t *r, const launch_t *l, const ft_disc_unit_t *u)
{
    for (uint32_t k = 0; k < l->n_ids; k++) {
        uint32_t id = r->ids[l->first_id + k] & ~ID_INDIRECT;
        for (uint32_t q = 0; q < u->n_regions; q++)
            if (u->region_ids[q] == id)
                return 1;
    }
    return 0;
}

/* The unit's name: the innermost NVTX range enclosing the launches that touch its
 * weights, when the application emits ranges ("model.layers.3"), else unit.N. Its
 * other launches do not count: a unit's launch range runs from its first weight's
 * touch to the next unit's, and so takes in the head of the next layer's range (a
 * norm whose weight lies in a segment the layers share). Ranges without a readable
 * name are transparent (empty components). A name another unit already has gets "#N"
 * appended. */
static void name_unit(ft_disc_t *d, const record_t *r, ft_disc_unit_t *u, size_t j)
{
    char common[FT_DISC_RANGE_PATH] = "";
    int first = 1, own = 0;
    for (uint32_t i = u->first_launch; i <= u->last_launch && i < r->n && !own; i++)
        own = touches_unit(r, &r->l[i], u);
    for (uint32_t i = u->first_launch; i <= u->last_launch && i < r->n; i++) {
        if (own && !touches_unit(r, &r->l[i], u))
            continue;
        const char *path = r->l[i].range ? d->range_v[r->l[i].range - 1]->path : "";
        if (first) {
            snprintf(common, sizeof common, "%s", path);
            first = 0;
            continue;
        }
        /* Keep the longest common prefix made of whole components. */
        size_t k = 0;
        while (common[k] && common[k] == path[k])
            k++;
        int at_boundary = (common[k] == '\0' || common[k] == RANGE_SEP) &&
                          (path[k] == '\0' || path[k] == RANGE_SEP);
        if (!at_boundary)
            while (k > 0 && common[k] != RANGE_SEP)
                k--;
        common[k] = '\0';
    }
    /* Unnamed innermost ranges are transparent. */
    for (size_t k = strlen(common); k > 0 && common[k - 1] == RANGE_SEP; k--)
        common[k - 1] = '\0';
    const char *leaf = strrchr(common, RANGE_SEP);
    leaf = leaf ? leaf + 1 : common;
    if (leaf[0] == '\0') {
        snprintf(u->name, sizeof u->name, "unit.%zu", j);
        return;
    }
    snprintf(u->name, sizeof u->name, "%.63s", leaf);
    for (int dup = 2;; dup++) {
        int clash = 0;
        for (size_t q = 0; q < j && !clash; q++)
            clash = strcmp(d->units[q].name, u->name) == 0;
        if (!clash)
            return;
        snprintf(u->name, sizeof u->name, "%.50s#%d", leaf, dup);
    }
}

/* By launch position, then in the order found (qsort is not stable). */
static int cmp_touch(const void *a, const void *b)
{
    const touch_t *x = a, *y = b;
    if (x->pos != y->pos)
        return x->pos < y->pos ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Repetitions found inside what precedes or follows the pass's longest one: at least
 * this period (launches) and this many levels down. */
#define SPAN_PERIOD_MIN 4
#define SPAN_DEPTH_MAX 4

static void push_cut(size_t *lcut, size_t *nl, size_t c)
{
    if (*nl == 0 || c > lcut[*nl - 1])
        lcut[(*nl)++] = c;
}

static void cut_span(const uint64_t *ks, size_t lo, size_t hi, const touch_t *t, size_t m, size_t *lcut,
                     size_t *nl, int depth);

/* The cuts of one repetition of period p, its run starting at s (absolute launch
 * positions within [lo, hi)): phased so that each period begins at a weight's first
 * touch; what precedes it in [lo, hi) and what follows it are cut the same way, each
 * for its own longest repetition (cut_span). */
/* The parts a period of the repetition falls into, each as long as the others (h
 * launches), when its weights' first touches repeat inside it: q parts whose touches
 * have the same sizes in the same order, each touch h launches after its twin in the
 * part before (the layers of a period that repeats every two of them: torch.compile's
 * kernels alternate so between layers with Inductor's buffers, seen on the H100, and
 * units of two layers made the smallest plan twice as large). The same parts in every
 * whole period of the run; 1 when none (h = p). */
static size_t period_parts(const touch_t *t, size_t m, size_t f, size_t p, size_t end, size_t *h_out)
{
    *h_out = p;
    size_t best = 1;
    for (size_t c = f; c + p <= end; c += p) {
        size_t a = 0, b;
        while (a < m && t[a].pos < c)
            a++;
        for (b = a; b < m && t[b].pos < c + p; b++)
            ;
        size_t w = b - a, q_found = 1;
        for (size_t q = 2; q <= w && q <= p; q++) {
            if (w % q != 0 || p % q != 0)
                continue;
            size_t h = p / q, n = w / q, ok = t[a].pos == c;
            for (size_t j = a; ok && j + n < b; j++)
                ok = t[j + n].sig == t[j].sig && t[j + n].pos == t[j].pos + h;
            if (ok) {
                q_found = q;
                break;
            }
        }
        if (c == f)
            best = q_found;
        else if (q_found != best)
            return 1; /* the periods differ: whole periods */
    }
    *h_out = p / best;
    return best;
}

static void cut_repetition(const uint64_t *ks, size_t hi, size_t lo, size_t p, size_t s, size_t run,
                           const touch_t *t, size_t m, size_t *lcut, size_t *nl, int depth)
{
    size_t end = s + run + p, f = s;
    for (size_t k = 0; k < m; k++) {
        if (t[k].pos >= s) {
            if (t[k].pos < s + p)
                f = t[k].pos;
            break;
        }
    }
    cut_span(ks, lo, f, t, m, lcut, nl, depth + 1);
    size_t c = f, h;
    size_t q = period_parts(t, m, f, p, end, &h);
    for (; c + p <= end; c += p)
        for (size_t k = 0; k < q; k++)
            if (c + k * h > 0)
                push_cut(lcut, nl, c + k * h);
    if (c < hi)
        cut_span(ks, c, hi, t, m, lcut, nl, depth + 1);
}

/* [lo, hi) of the pass outside its longest repetition (the embeddings and the head;
 * or, when the pass runs two models in turn, or blocks of two kinds, the other
 * model's layers): one unit, unless it holds a repetition of its own, cut as the
 * first. Seen on the H200 with two Llamas of other widths decoded in turn: the first
 * model's 14 layers (1.8 GiB) were one unit, and the slots for it did not fit. */
static void cut_span(const uint64_t *ks, size_t lo, size_t hi, const touch_t *t, size_t m, size_t *lcut,
                     size_t *nl, int depth)
{
    if (hi <= lo)
        return;
    push_cut(lcut, nl, lo);
    if (depth > SPAN_DEPTH_MAX || hi - lo < 2 * SPAN_PERIOD_MIN)
        return;
    size_t p, s, run;
    find_period(ks + lo, hi - lo, &p, &s, &run);
    if (p < SPAN_PERIOD_MIN)
        return;
    cut_repetition(ks, hi, lo, p, lo + s, run, t, m, lcut, nl, depth);
}

/* --- an allocation served in pieces ----------------------------------------------
 *
 * The shim serves an allocation larger than half the budget in pieces of one mapping
 * granule, each a region (FT_REGION_PIECE), so that units can hold parts of it: one
 * caching-allocator segment may hold every weight of a model. A kernel is given a
 * tensor's start and reads on from there, so a piece no pointer reaches holds the body
 * of the tensor whose start came last before it, and a piece can be run into by that
 * tensor as well as touched by its own. Tensors of an allocator's segment do not
 * overlap: of the tensors starting before a piece, only the last can run into it.
 *
 * PC_NONE: nothing before the piece in its allocation can run into it; PC_UNKNOWN: a
 * tensor may, whose unit is not known (no sure pointer, or not a weight); else the
 * launch position of the tensor's first touch. */
#define PC_NONE (-1)
#define PC_UNKNOWN (-2)

static int cmp_base(const void *a, const void *b)
{
    const rinfo_t *x = *(rinfo_t *const *)a, *y = *(rinfo_t *const *)b;
    return x->base < y->base ? -1 : x->base > y->base;
}

/* The live pieces, sorted by address, their offsets worked out from the pass r (NULL:
 * left as they are); NULL (and *n 0) when there are none or no memory. */
static rinfo_t **pieces_sorted(ft_disc_t *d, const record_t *r, size_t *n)
{
    rinfo_t *x, *xt;
    size_t k = 0;
    *n = 0;
    HASH_ITER(hh, d->rmap, x, xt)
        if ((x->flags & FT_REGION_PIECE) && !x->freed)
            k++;
    rinfo_t **v = k > 0 ? malloc(k * sizeof *v) : NULL;
    if (v == NULL && k > 0) {
        /* Without the walk, what runs into a piece is not known: every piece stays. */
        FT_WARN_CAPPED(1, "discovery: out of memory sorting an allocation's pieces: every piece stays on the device");
        HASH_ITER(hh, d->rmap, x, xt)
            if (x->flags & FT_REGION_PIECE)
                x->shared = 1;
    }
    if (v == NULL)
        return NULL;
    HASH_ITER(hh, d->rmap, x, xt)
        if ((x->flags & FT_REGION_PIECE) && !x->freed && r == NULL)
            v[(*n)++] = x;
        else if ((x->flags & FT_REGION_PIECE) && !x->freed) {
            x->pc_min = UINT64_MAX;
            x->pc_max = 0;
            x->pc_pos = -1;
            x->pc_unsure = 0;
            x->pc_prev = PC_NONE;
            x->pc_from = x->pc_next = 0;
            v[(*n)++] = x;
        }
    qsort(v, *n, sizeof *v, cmp_base);
    for (size_t i = 0; r != NULL && i < r->n; i++)
        for (uint32_t j = 0; j < r->l[i].n_ids; j++) {
            size_t at = r->l[i].first_id + j;
            uint32_t raw = r->ids[at];
            x = rinfo_get(d, raw);
            if (x == NULL || !(x->flags & FT_REGION_PIECE) || x->freed)
                continue;
            uint64_t p = r->no_ptrs ? 0 : r->ptrs[at];
            if ((raw & ID_INDIRECT) || p < x->base || p >= x->base + x->size) {
                x->pc_unsure = 1;
                continue;
            }
            uint64_t off = p - x->base;
            if (off < x->pc_min)
                x->pc_min = off;
            if (x->pc_pos < 0 || off > x->pc_max) {
                x->pc_max = off;
                x->pc_pos = (int64_t)i;
            }
        }
    return v;
}

/* Whether no sure pointer of the pass reached piece x, nor one that may (pieces_sorted). */
static int untouched(const rinfo_t *x)
{
    return x->pc_min == UINT64_MAX && !x->pc_unsure;
}

/* Whether piece x may be asked whether it is all zeros (pieces_follow_tensors): the
 * program's, untouched, its content hashed, no copy known to have begun in it. */
static int zeros_candidate(const ft_disc_t *d, const rinfo_t *x)
{
    return (x->flags & FT_REGION_PROGRAM) && x->hashed && x->size % 8 == 0 && untouched(x) && x->unit == -2 &&
           (d->p.piece_span == NULL || d->p.piece_span(x->base) == 0);
}

/* For each of the n pieces v that zeros_candidate takes, into zh[i]: the content hash
 * (the shim's: core/checksum.h, salted by address) that its bytes would have if all
 * zeros, as a piece of fresh memory no one has written has. The sums cost a word's mix
 * each (about 1 ns): for XLA's 4 GiB pool, half a second on one core; summed on
 * several at once (ft_checksum_host_many), over one buffer of zeros. 0, or -ENOMEM
 * (*zh NULL: no piece counts as zeros). */
static int zeros_hashes(const ft_disc_t *d, rinfo_t *const *v, size_t n, uint64_t **zh)
{
    size_t k = 0;
    uint64_t most = 0;
    *zh = NULL;
    for (size_t i = 0; i < n; i++)
        if (zeros_candidate(d, v[i])) {
            k++;
            most = v[i]->size > most ? v[i]->size : most;
        }
    if (k == 0)
        return 0;
    uint64_t *sums = calloc(n, sizeof *sums), *ks = malloc(k * sizeof *ks);
    ft_checksum_buf_t *b = malloc(k * sizeof *b);
    void *zeros = calloc(1, most); /* fresh pages: reading them allocates nothing */
    int rc = sums != NULL && ks != NULL && b != NULL && zeros != NULL ? 0 : -ENOMEM;
    for (size_t i = 0, j = 0; rc == 0 && i < n; i++)
        if (zeros_candidate(d, v[i]))
            b[j++] = (ft_checksum_buf_t){ zeros, v[i]->size / 8, v[i]->base / 8 };
    if (rc == 0 && ft_checksum_host_many(b, k, ks) != 0)
        rc = -ENOMEM;
    for (size_t i = 0, j = 0; rc == 0 && i < n; i++)
        if (zeros_candidate(d, v[i]))
            sums[i] = ks[j++];
    free(zeros);
    free(b);
    free(ks);
    if (rc != 0)
        free(sums);
    else
        *zh = sums;
    return rc;
}

/* In build_units, after the walk that gave each touched weight its touch in t (m of
 * cap): each piece no launch touched, a weight by its content, is given the touch of
 * the tensor whose start came last before it in its allocation, and joins that
 * tensor's unit, unless a piece left out of it lies between (room, or memory whose
 * content changed): a tensor is one run of bytes, so what lies past such a piece is
 * not that tensor's body. What may run into each touched piece is kept for
 * pieces_overrun. */
static int pieces_follow_tensors(ft_disc_t *d, const record_t *r, touch_t **t, size_t *m, size_t *cap)
{
    size_t n;
    rinfo_t **v = pieces_sorted(d, r, &n);
    uint64_t *zh = NULL; /* each piece's sum if all zeros (no memory: none taken for room) */
    if (v != NULL)
        zeros_hashes(d, v, n, &zh);
    int64_t carry = PC_NONE;
    rinfo_t *start = NULL; /* the piece the carried tensor starts in */
    uint64_t filled = 0;   /* the furthest end of the copies begun from `start` on (0: none known) */
    int gap = 0;           /* a piece since `start` was left out of the carried tensor's unit */
    for (size_t i = 0; i < n; i++) {
        rinfo_t *x = v[i];
        int fresh = (x->flags & FT_REGION_PIECE_FIRST) || i == 0 || v[i - 1]->base + v[i - 1]->size != x->base;
        if (fresh)
            carry = PC_NONE; /* another allocation */
        x->pc_prev = carry;
        uint64_t span = d->p.piece_span != NULL ? d->p.piece_span(x->base) : 0;
        if (!untouched(x) || x->unit != -2) {
            /* The piece before stays on the device, outside every unit: room the
             * allocator may carve a temporary from later, which may run on into this
             * piece's bytes before its first tensor (a caching allocator's segment
             * filled from its end down keeps its free block at the start; model
             * --seg-down). Who runs into the piece is then not known. */
            if (!fresh && untouched(v[i - 1]) && v[i - 1]->unit == -2 && (x->pc_min != 0 || x->pc_unsure))
                x->pc_prev = PC_UNKNOWN;
            /* Touched by tensors of its own, not from its first byte: the tensor that
             * starts last in the piece before may run into it. A pointer at or past
             * that start reaches this piece's unit too, which the piece before, kept
             * on the device for a tensor running into it in turn, does not load (a
             * launch read this piece unloaded: model --own-vmm-pool 2 --segments 2
             * --alt-odd --skip-last-from 7, an illegal address on the simulator). */
            if (carry != PC_NONE && start != NULL && start->pc_next == 0 && (x->pc_min != 0 || x->pc_unsure))
                start->pc_next = x->id;
            carry = x->pc_unsure || x->pc_pos < 0 || !is_weight(d, x) ? PC_UNKNOWN : x->pc_pos;
            start = x;
            filled = span;
            gap = 0;
            continue;
        }
        if (span > filled)
            filled = span;
        if (carry < 0)
            continue; /* resident: nothing known runs into it */
        if (!is_weight(d, x) || gap) {
            /* Not the carried tensor's body: its content changed, or a piece before it
             * was left out of the unit. XLA's pool past the last weight held a piece
             * of zeros, then one its initialisers' temporaries had written: that one
             * joined the last weight's unit, and the prefill's temporaries, carved
             * from the piece of zeros on, ran into it unmapped (an illegal address
             * on the H100; model --second-reuse). It stays on the device. */
            gap = 1;
            continue;
        }
        /* The program's own pool past where the copies begun from the carried tensor's
         * piece on ended, or, where no copy filled the tensor (weights a kernel made, as
         * JAX's jitted initialisers do), a piece all zeros, as fresh memory is: room its
         * allocator has not used, whose content never changed (XLA's last chunk holds
         * the weights' end, then room: the last weight's unit took 1 GiB of it, and the
         * smallest budget that works was 1.42 GiB for 3 GB of weights on the H100). It
         * stays out of the unit, as room (the plan moves it to host memory). A tensor
         * that does run on into it (a weight of zeros) finds it mapped, on the device or
         * in host memory. */
        if ((x->flags & FT_REGION_PROGRAM) &&
            ((filled != 0 && filled <= x->base) ||
             (filled == 0 && zh != NULL && zeros_candidate(d, x) && x->hash == zh[i]))) {
            gap = 1;
            continue;
        }
        if (*m == *cap) {
            touch_t *nt = realloc(*t, 2 * *cap * sizeof *nt);
            if (nt == NULL) {
                free(v);
                free(zh);
                return -ENOMEM;
            }
            *t = nt;
            *cap *= 2;
        }
        x->unit = (int)*m;
        x->direct = 1; /* reached as its tensor is, through a launch's own arguments */
        x->pc_from = start->id;
        if (start->pc_next == 0)
            start->pc_next = x->id;
        (*t)[*m] = (touch_t){ (uint32_t)carry, x->id, (uint32_t)*m, x->size };
        (*m)++;
    }
    free(v);
    free(zh);
    return 0;
}

static int unit_at(const ft_disc_t *d, size_t pos);

/* Once the units are made: the storages the program's copies filled (piece_span) are
 * the tensors' extents where they are known. One that spans pieces of two units (a
 * tensor reaching past the next tensor start discovery saw, as a stacked weight of
 * several layers would) breaks the rule the units were cut by: every piece it spans
 * stays on the device. */
static void pieces_spans(ft_disc_t *d)
{
    if (d->p.piece_span == NULL)
        return;
    size_t n;
    rinfo_t **v = pieces_sorted(d, NULL, &n);
    for (size_t i = 0; i < n; i++) {
        uint64_t end = d->p.piece_span(v[i]->base);
        int unit = -1, mixed = 0;
        size_t j;
        for (j = i; j < n && v[j]->base < end; j++) {
            if (j > i && ((v[j]->flags & FT_REGION_PIECE_FIRST) || v[j - 1]->base + v[j - 1]->size != v[j]->base))
                break;
            /* A piece the copy ends in before any pointer of the pass into it holds no
             * view of the copied storage, only its tail (a tensor running into the
             * piece where another unit's tensors start, which pieces_overrun keeps on
             * the device): not a sign of storage stacked over units. A segment filled
             * from its end down ends each copy so (model --seg-down: every piece was
             * kept on the device). */
            int tail_only = j > i && !v[j]->pc_unsure && v[j]->pc_min != UINT64_MAX &&
                            end - v[j]->base <= v[j]->pc_min;
            if (v[j]->unit >= 0 && !v[j]->shared && !tail_only) {
                mixed |= unit >= 0 && v[j]->unit != unit;
                unit = v[j]->unit;
            }
        }
        if (!mixed)
            continue;
        FT_DEBUG("discovery: a copy filled %llu bytes from piece region %u on, over pieces of several units: "
                 "they stay resident", (unsigned long long)(end - v[i]->base), v[i]->id);
        for (size_t k = i; k < j; k++)
            v[k]->shared = 1;
    }
    free(v);
}

/* Once the units are made: a piece touched by its own tensors, into which a tensor of
 * another unit may run (it starts before the piece's first pointer, or where it ends
 * is not known), is needed by both, and stays on the device. Streamed with its own
 * unit, the other's kernels would read it unmapped. */
static void pieces_overrun(ft_disc_t *d)
{
    rinfo_t *x, *xt;
    pieces_spans(d);
    HASH_ITER(hh, d->rmap, x, xt) {
        if (!(x->flags & FT_REGION_PIECE) || x->freed || x->unit < 0 || x->shared || x->pc_prev == PC_NONE)
            continue;
        if (untouched(x))
            continue; /* a tensor's body, in that tensor's unit (pieces_follow_tensors) */
        if (x->pc_min == 0 && !x->pc_unsure)
            continue; /* a tensor starts at its first byte: the one before ends there */
        if (x->pc_prev == PC_UNKNOWN || unit_at(d, (size_t)x->pc_prev) != x->unit) {
            x->shared = 1;
            FT_DEBUG("discovery: piece region %u (unit.%d) stays resident: a tensor before it, %s, may "
                     "run into it", x->id, x->unit,
                     x->pc_prev == PC_UNKNOWN ? "of no known unit" : "of another unit");
        }
    }
}

int ft_disc_region_follow(ft_disc_t *d, uint32_t id, uint64_t *off, uint32_t *next)
{
    pthread_mutex_lock(&d->lock);
    rinfo_t *x = rinfo_get(d, id), *y = x != NULL && x->pc_next != 0 ? rinfo_get(d, x->pc_next) : NULL;
    int follows = d->state == FT_DISC_DONE && y != NULL && y->unit >= 0 && !y->freed;
    if (follows) {
        *off = x->pc_max;
        *next = x->pc_next;
    }
    pthread_mutex_unlock(&d->lock);
    return follows;
}

static int build_units(ft_disc_t *d)
{
    record_t *r = &d->last;
    size_t m = 0, cap = 64;
    touch_t *t = malloc(cap * sizeof *t);
    if (t == NULL)
        return -ENOMEM;
    /* Where each weight belongs: its most specific touch -- through the arguments,
     * the launch touching the fewest weights, the earliest of those. A GEMM touches
     * its one weight; a launch whose argument padding holds stale pointers (left on
     * the stack by the previous call) touches several. Weights reached only through
     * pointer arrays are placed the same way among those touches (a launch reading a
     * table from its own entry on sees the entries of later layers too). */
    uint32_t *wc = calloc(2 * (r->n ? r->n : 1), sizeof *wc); /* [0, n) direct, [n, 2n) indirect */
    if (wc == NULL) {
        free(t);
        return -ENOMEM;
    }
    for (size_t i = 0; i < r->n; i++)
        for (uint32_t k = 0; k < r->l[i].n_ids; k++) {
            uint32_t id = r->ids[r->l[i].first_id + k];
            if (is_weight(d, rinfo_get(d, id)))
                wc[(id & ID_INDIRECT) ? r->n + i : i]++;
        }
    /* The period of the launch sequence (the layers), found before the walk: a touch
     * inside the repetition beats one outside it (in the embeddings' or the head's
     * range), whatever their specificity. A layer weight's own GEMM runs inside; a
     * stale copy of its address, left in the padding of a once-per-pass kernel before
     * or after the layers, is outside -- and may come in a launch touching fewer
     * weights than the GEMM, whose own padding can hold stale addresses too. */
    uint64_t *ks = malloc((r->n ? r->n : 1) * sizeof *ks);
    if (ks == NULL) {
        free(t);
        free(wc);
        return -ENOMEM;
    }
    for (size_t i = 0; i < r->n; i++)
        ks[i] = r->l[i].kernel;
    size_t p, s, run, nl = 0;
    find_period(ks, r->n, &p, &s, &run);
#define IN_PERIOD(i) (p > 0 && (i) >= s && (i) < s + run + p)
    rinfo_t *ri, *rt;
    HASH_ITER(hh, d->rmap, ri, rt) ri->unit = -2; /* -2: not yet seen in this walk */
    /* seen_direct[pass]: the first touch index that this pass added; a weight added
     * by the direct pass is not moved by the indirect one. */
    size_t seen_direct[2] = { 0, 0 };
    for (int pass = 0; pass < 2; pass++) {
    seen_direct[pass] = m;
    for (size_t i = 0; i < r->n; i++) {
        const launch_t *l = &r->l[i];
        for (uint32_t k = 0; k < l->n_ids; k++) {
            uint32_t id = r->ids[l->first_id + k];
            if (((id & ID_INDIRECT) != 0) != (pass == 1))
                continue;
            rinfo_t *x = rinfo_get(d, id);
            if (!is_weight(d, x))
                continue;
            if (x->unit >= 0) {          /* seen: keep the more specific touch */
                touch_t *prev = &t[x->unit];
                size_t base = pass == 0 ? 0 : r->n;
                int in = IN_PERIOD(i), prev_in = IN_PERIOD(prev->pos);
                if (prev->order >= seen_direct[pass] &&
                    ((in && !prev_in) || (in == prev_in && wc[base + i] < wc[base + prev->pos])))
                    prev->pos = (uint32_t)i;
                continue;
            }
            if (x->unit != -2)
                continue;
            if (m == cap) {
                cap *= 2;
                touch_t *nt = realloc(t, cap * sizeof *nt);
                if (nt == NULL) {
                    free(t);
                    free(wc);
                    return -ENOMEM;
                }
                t = nt;
            }
            x->unit = (int)m;          /* index into t while walking */
            t[m] = (touch_t){ (uint32_t)i, x->id, (uint32_t)m, x->size };
            m++;
        }
    }
    }
    free(wc);
    if (pieces_follow_tensors(d, r, &t, &m, &cap) != 0) {
        free(t);
        free(ks);
        return -ENOMEM;
    }
    HASH_ITER(hh, d->rmap, ri, rt) ri->unit = -1; /* set again per unit below */
    qsort(t, m, sizeof *t, cmp_touch);

    /* Units follow the layers: the launch sequence of a pass (kernel names, which
     * stray pointers in argument padding do not disturb) is searched for the period
     * at which it repeats; the repetition is cut into periods, phased so that each
     * begins at a weight's first touch. What precedes the repetition (embeddings) and
     * what follows it (final norm, head) are units of their own. Each weight joins
     * the unit whose launch range holds its first touch. Without a repetition, each
     * weight is its own unit. Cuts are launch positions: unit j is [lcut[j], lcut[j+1]). */
#undef IN_PERIOD
    size_t *lcut = malloc((r->n + 2) * sizeof *lcut);
    if (lcut == NULL) {
        free(t);
        free(ks);
        return -ENOMEM;
    }
    if (p > 0 && m > 0) {
        lcut[nl++] = 0;
        cut_repetition(ks, r->n, 0, p, s, run, t, m, lcut, &nl, 0);
    } else {
        /* No repetition: each weight's range runs from its first touch to the next's. */
        for (size_t k = 0; k < m; k++)
            if (nl == 0 || t[k].pos > lcut[nl - 1])
                lcut[nl++] = k == 0 ? 0 : t[k].pos;
    }
    free(ks);
    lcut[nl] = r->n;

    /* Weight index boundaries (t is sorted by first touch); empty ranges are merged
     * into the unit before them (or after, for a leading one). */
    size_t *cut = malloc((nl + 2) * sizeof *cut);
    uint32_t *ufirst = malloc((nl + 2) * sizeof *ufirst);
    uint32_t *ulast = malloc((nl + 2) * sizeof *ulast);
    if (cut == NULL || ufirst == NULL || ulast == NULL) {
        free(t);
        free(lcut);
        free(cut);
        free(ufirst);
        free(ulast);
        return -ENOMEM;
    }
    size_t nc = 0, k = 0;
    for (size_t j = 0; j < nl; j++) {
        size_t k0 = k;
        while (k < m && t[k].pos < lcut[j + 1])
            k++;
        uint32_t lo = (uint32_t)lcut[j], hi = (uint32_t)(lcut[j + 1] - 1);
        if (k == k0) {             /* no weight first touched in this range */
            if (nc > 0)
                ulast[nc - 1] = hi;
            else if (j + 1 < nl)
                lcut[j + 1] = lcut[j]; /* fold into the next range */
            continue;
        }
        cut[nc] = k0;
        ufirst[nc] = lo;
        ulast[nc] = hi;
        nc++;
    }
    cut[nc] = m;
    free(lcut);

    d->units = calloc(nc ? nc : 1, sizeof *d->units);
    d->unit_ids = malloc((m ? m : 1) * sizeof *d->unit_ids);
    if (d->units == NULL || d->unit_ids == NULL) {
        free(t);
        free(cut);
        free(ufirst);
        free(ulast);
        return -ENOMEM;
    }
    d->n_units = nc;
    d->weight_bytes = 0;
    for (size_t j = 0; j < nc; j++) {
        ft_disc_unit_t *u = &d->units[j];

        u->region_ids = d->unit_ids + cut[j];
        u->n_regions = (uint32_t)(cut[j + 1] - cut[j]);
        u->first_launch = ufirst[j];
        u->last_launch = ulast[j];
        for (size_t k = cut[j]; k < cut[j + 1]; k++) {
            rinfo_t *x = rinfo_get(d, t[k].id);
            d->unit_ids[k] = t[k].id;
            u->bytes += x->size;
            x->unit = (int)j;
        }
        name_unit(d, r, u, j); /* after its regions are listed */
        d->weight_bytes += u->bytes;
    }
    /* A weight that launches outside its unit's range touch too (rotary tables, a
     * caching-allocator segment holding every layer's norm weights) is needed by more
     * than one unit: streaming it would load its unit once per user. */
    for (size_t i = 0; i < r->n; i++)
        for (uint32_t k = 0; k < r->l[i].n_ids; k++) {
            uint32_t raw = r->ids[r->l[i].first_id + k];
            rinfo_t *x = rinfo_get(d, raw & ~ID_INDIRECT);
            if (x != NULL && !(raw & ID_INDIRECT))
                x->direct = 1;
            if (x != NULL && x->unit >= 0 &&
                (i < d->units[x->unit].first_launch || i > d->units[x->unit].last_launch))
                x->shared = 1;
        }
    /* So is a weight whose address stale words carried more than once since discovery
     * (re)started: left out of the record (DISC_PTR_ALIGN), they still reach the guard,
     * which loads its unit at each (the 16-layer Llama's RoPE launches, in every
     * layer). Resident, the weight costs its own bytes; streamed, its whole unit ended
     * on the device after 8 loads. */
    pieces_overrun(d);
    HASH_ITER(hh, d->rmap, ri, rt)
        if (ri->unit >= 0 && ri->stale_in_pass >= 2) {
            ri->shared = 1;
            FT_DEBUG("discovery: region %u (unit.%d) stays resident: %u stale touches", ri->id, ri->unit,
                     ri->stale_in_pass);
        }
    for (size_t j = 0; j < nc; j++) {
        ft_disc_unit_t *u = &d->units[j];
        u->offload = (d->p.n_include == 0 ||
                      unit_matches_any(d, u, d->p.include, d->p.n_include)) &&
                     !unit_matches_any(d, u, d->p.exclude, d->p.n_exclude);
    }
    free(t);
    free(cut);
    free(ufirst);
    free(ulast);
    return 0;
}

/* The unit whose launch range holds pass position pos, or -1. */
static int unit_at(const ft_disc_t *d, size_t pos)
{
    for (size_t j = 0; j < d->n_units; j++)
        if (pos >= d->units[j].first_launch && pos <= d->units[j].last_launch)
            return (int)j;
    return -1;
}

/* The region of unit u that launch i of record r touches first through its own
 * arguments, or UINT32_MAX. */
static uint32_t own_weight(ft_disc_t *d, const record_t *r, size_t i, int u)
{
    for (uint32_t k = 0; k < r->l[i].n_ids; k++) {
        uint32_t raw = r->ids[r->l[i].first_id + k];
        rinfo_t *x = (raw & ID_INDIRECT) ? NULL : rinfo_get(d, raw);
        if (x != NULL && x->unit == u)
            return raw;
    }
    return UINT32_MAX;
}

static int touches(const record_t *r, size_t i, uint32_t id)
{
    for (uint32_t k = 0; k < r->l[i].n_ids; k++)
        if (r->ids[r->l[i].first_id + k] == id)
            return 1;
    return 0;
}

/* Discovery is done: which kernels ran in the recorded pass and which touched weights
 * there (kinfo_t in_pass, weighted), and where passes start from now on (track_*).
 * Best, a launch whose
 * own weight no other launch of the pass touches: then a kernel that did not run in
 * the recorded pass also starts one by touching it (a prefill's embedding kernel is
 * not a decode step's; a kernel of the pass touching it elsewhere carries a stale
 * address). Else one whose own weight and kernel meet nowhere else in the pass.
 * Without either, the lanes' anchors stay. */
static void choose_track_start(ft_disc_t *d)
{
    const record_t *r = &d->last;
    d->track_set = 0;
    for (size_t i = 0; i < r->n; i++) {
        kinfo_t *k = d->kv[r->l[i].kernel];
        k->in_pass = 1;
        for (uint32_t j = 0; j < r->l[i].n_ids && !k->weighted; j++) {
            uint32_t raw = r->ids[r->l[i].first_id + j];
            rinfo_t *x = (raw & ID_INDIRECT) ? NULL : rinfo_get(d, raw);
            k->weighted = x != NULL && x->unit >= 0;
        }
    }
    if (d->explicit_marks)
        return;
    for (int any_kernel = 1; any_kernel >= 0; any_kernel--) {
        for (size_t i = 0; i < r->n; i++) {
            int u = unit_at(d, i);
            uint32_t w = u >= 0 ? own_weight(d, r, i, u) : UINT32_MAX;
            if (w == UINT32_MAX)
                continue;
            int unique = 1;
            for (size_t j = 0; j < r->n && unique; j++)
                unique = j == i || (!any_kernel && r->l[j].kernel != r->l[i].kernel) || !touches(r, j, w);
            if (!unique)
                continue;
            /* Its units, each once; a launch touching more than TRACK_UNITS (a cat of
             * every layer's weights) is no start: the units it touched would be lost. */
            size_t nu = 0;
            int fits = 1;
            for (uint32_t k = 0; k < r->l[i].n_ids && fits; k++) {
                uint32_t raw = r->ids[r->l[i].first_id + k];
                rinfo_t *x = (raw & ID_INDIRECT) ? NULL : rinfo_get(d, raw);
                if (x == NULL || x->unit < 0 || x->shared)
                    continue;
                int known = 0;
                for (size_t j = 0; j < nu && !known; j++)
                    known = d->track_units[j] == x->unit;
                if (!known && nu == TRACK_UNITS)
                    fits = 0;
                else if (!known)
                    d->track_units[nu++] = x->unit;
            }
            if (!fits)
                continue;
            d->track_set = 1;
            d->track_any_kernel = any_kernel;
            d->n_track_units = nu;
            d->track_kernel = r->l[i].kernel;
            d->track_region = w;
            d->track_start = (uint32_t)i;
            FT_DEBUG("discovery: passes are followed from launch %zu of %zu: %s on region %u (%s)%s", i,
                     r->n, d->kv[r->l[i].kernel]->name, w, d->units[u].name,
                     any_kernel ? ", or a kernel not in the pass touching that region" : "");
            return;
        }
    }
}

/* --- events ---------------------------------------------------------------------- */

/* The weights launch i of r touches (direct and through pointer arrays), sorted, in
 * out (room for the launch's ids); their count. */
static size_t weights_of(ft_disc_t *d, const record_t *r, size_t i, uint32_t *out)
{
    size_t m = 0;
    for (uint32_t k = 0; k < r->l[i].n_ids; k++) {
        uint32_t id = r->ids[r->l[i].first_id + k];
        if (!is_weight(d, rinfo_get(d, id & ~ID_INDIRECT)))
            continue;
        size_t at = m++;
        while (at > 0 && out[at - 1] > id) { /* insertion: a handful of ids, rarely 100 */
            out[at] = out[at - 1];
            at--;
        }
        out[at] = id;
    }
    return m;
}

/* Marks the weights of two launches' sorted lists touched, and those in one list
 * only odd. */
static void mark_fold(ft_disc_t *d, const uint32_t *a, size_t na, const uint32_t *b, size_t nb)
{
    size_t i = 0, j = 0;
    while (i < na || j < nb) {
        int only_a = j == nb || (i < na && a[i] < b[j]), only_b = !only_a && (i == na || b[j] < a[i]);
        rinfo_t *x = rinfo_get(d, (only_b ? b[j] : a[i]) & ~ID_INDIRECT);
        x->fold_touched = 1;
        x->fold_odd |= only_a || only_b;
        i += !only_b;
        j += !only_a;
    }
}

/* A recorded pass that is k >= 2 copies of a shorter one -- the same kernels in the
 * same order, nearly all of their weights the same -- is one copy. The detector's keys
 * carry each pointer's offset into its region, and a program that keeps its last
 * output alive through the next forward can have its small activations placed one way
 * in odd forwards and another in even ones (PyTorch's 2 MiB segments, which also hold
 * the input and the norm weights, so are candidates): the keys then repeat every two
 * forwards. Such buffers can pass for weights too, their content being the same at
 * every boundary two forwards apart; a region a copy touches where another does not is
 * one of them, and is no weight. The copies must agree on at least 90% of the weight
 * bytes: passes of different weights (layers, models taken in turn) never fold. A
 * model whose weights all lie in one region and that has nothing but identical layers
 * folds to one layer, which changes nothing: that region is one unit either way. */
static int fold_pass(ft_disc_t *d, record_t *r, uint32_t *a, uint32_t *b);

static int fold_repeated_pass(ft_disc_t *d)
{
    record_t *r = &d->last;
    size_t n = r->n, most = 1;
    for (size_t i = 0; i < n; i++)
        most = r->l[i].n_ids > most ? r->l[i].n_ids : most;
    /* Room for the launch touching the most regions (a cat can touch a hundred). */
    uint32_t *a = malloc(most * sizeof *a), *b = malloc(most * sizeof *b);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return -ENOMEM;
    }
    int rc = fold_pass(d, r, a, b);
    free(a);
    free(b);
    return rc;
}

/* fold_repeated_pass's search, with a and b room for any launch's ids. */
static int fold_pass(ft_disc_t *d, record_t *r, uint32_t *a, uint32_t *b)
{
    size_t n = r->n;
    rinfo_t *x, *xt;
    for (size_t len = 1; len <= n / 2; len++) {
        int same = n % len == 0;
        for (size_t i = 0; i + len < n && same; i++)
            same = r->l[i].kernel == r->l[i + len].kernel;
        if (!same)
            continue;
        HASH_ITER(hh, d->rmap, x, xt) x->fold_touched = x->fold_odd = 0;
        for (size_t i = 0; i + len < n; i++) {
            size_t na = weights_of(d, r, i, a), nb = weights_of(d, r, i + len, b);
            mark_fold(d, a, na, b, nb);
        }
        uint64_t all = 0, odd = 0;
        HASH_ITER(hh, d->rmap, x, xt) {
            all += x->fold_touched ? x->size : 0;
            odd += x->fold_odd ? x->size : 0;
        }
        if (all == 0 || odd * 10 > all)
            continue;
        record_t one = { 0 };
        if (rec_slice(r, 0, len, &one) != 0) {
            rec_free(&one);
            return -ENOMEM;
        }
        size_t n_odd = 0;
        HASH_ITER(hh, d->rmap, x, xt) {
            if (x->fold_odd) {
                x->changed = 1; /* used differently from one copy to the next */
                n_odd++;
            }
        }
        FT_INFO("discovery: the pass found is %zu copies of one of %zu launches (the same kernels on "
                "the same weights): passes are that long%s", n / len, len,
                n_odd ? "; regions used in some copies only are not weights" : "");
        rec_free(r);
        *r = one;
        return 0;
    }
    return 0;
}

/* The end of discovery: a pattern of the unit selection that matches no unit, or an
 * iteration marker no launched kernel matched, did nothing -- most likely a typo or a
 * name the program does not use. Each gets a warning naming its option. */
static void warn_unmatched(ft_disc_t *d)
{
    char names[192] = "no units";
    if (d->n_units == 1)
        snprintf(names, sizeof names, "the only unit, %s", d->units[0].name);
    else if (d->n_units > 1)
        snprintf(names, sizeof names, "the %zu units, %s .. %s", d->n_units, d->units[0].name,
                 d->units[d->n_units - 1].name);
    for (int ex = 0; ex < 2; ex++) {
        char *const *pats = ex ? d->p.exclude : d->p.include;
        size_t np = ex ? d->p.n_exclude : d->p.n_include, unmatched = 0;
        for (size_t i = 0; i < np; i++) {
            int hit = 0;
            for (size_t j = 0; j < d->n_units && !hit; j++)
                hit = unit_matches_any(d, &d->units[j], &pats[i], 1);
            if (hit)
                continue;
            unmatched++;
            FT_WARN("FT_%s_PATTERNS: '%s' matches none of %s%s", ex ? "EXCLUDE" : "INCLUDE", pats[i],
                    names, d->n_units > 0 && !ex && unmatched == np ? "; no pattern matches, so "
                    "every unit stays resident" : "");
        }
    }
    if (d->p.marker_glob && d->p.marker_glob[0] && d->marker_hits == 0)
        FT_WARN("FT_ITERATION_MARKER: '%s' matches none of the %zu kernels launched during "
                "discovery; iterations were found %s", d->p.marker_glob, d->n_kernels,
                d->boundary_source == 1 ? "from ft_iteration_mark()" : "by the automatic detector");
}

/* A kernel whose launches first touched (made) at least INIT_BIRTHS_MIN regions and
 * nearly all the regions they touched: a weight initialiser (PyTorch's normal_ and
 * fill_ under `with torch.device("cuda")`), even when it runs in the pass found. That
 * pass can be the initialisation itself: on the H200, transformers wrote a GPU-built
 * model's embedding (the one region alive at the first launch) twice with normal_, and
 * the pass from one write to the next held every other weight's initialiser, which
 * then "ran in the pass" and made no weight (model --init-twice: 7 of 12 layers found
 * after four restarts). A forward's kernels touch each other's activations: regions
 * another kernel made. An initialiser's touches of what it made itself, or of what was
 * alive at the first launch, do not count against it: on the H200, PyTorch's caching
 * allocator put two parameters in each 20 MiB segment, and the program ran uniform_ on
 * every parameter a second time (a seeded fill after the constructor's), so uniform_
 * made 141 regions in 395 touches, no initialiser by a share of all its touches (model
 * --init-kernel --segments 10 --init-refill --init-other). */
#define INIT_BIRTHS_MIN 4
static int initialiser(const kinfo_t *k)
{
    return k->births >= INIT_BIRTHS_MIN && 3 * k->foreign <= k->births;
}

/* The bytes of live regions an initialiser made that are not candidates yet; with
 * mark, they are marked init_made (candidates again at the restart). No pass needed:
 * for a run of launches that touched no candidate at all (a GPU-built model whose one
 * region alive at the first launch varies: model --init-kernel --init-other), there is
 * none. */
static uint64_t initialiser_made(ft_disc_t *d, int mark)
{
    uint64_t bytes = 0;
    rinfo_t *x, *xt;
    HASH_ITER(hh, d->rmap, x, xt) {
        if (!x->kernel_born || x->freed || x->init_made || x->born_kernel >= d->n_kernels ||
            !initialiser(d->kv[x->born_kernel]))
            continue;
        bytes += x->size;
        if (mark)
            x->init_made = 1;
    }
    return bytes;
}

/* Regions made by the program's initialisation on the device: kernel_born by a kernel
 * no launch of the recorded pass runs, or by an initialiser, yet touched by that pass. A model built under
 * `with torch.device("cuda")` allocates each parameter and fills it with a kernel
 * (normal_, uniform_, fill_) before its first forward, so every weight is kernel_born;
 * an activation segment is first written by the forward's own kernels, which the pass
 * runs. Marks them init_made and returns their bytes. */
static uint64_t mark_init_made(ft_disc_t *d)
{
    const record_t *rec = &d->last;
    uint8_t *ran = calloc(d->n_kernels ? d->n_kernels : 1, 1);
    if (ran == NULL)
        return 0;
    for (size_t i = 0; i < rec->n; i++)
        ran[rec->l[i].kernel] = 1;
    uint64_t bytes = 0;
    for (size_t i = 0; i < rec->n; i++)
        for (uint32_t j = 0; j < rec->l[i].n_ids; j++) {
            uint32_t raw = rec->ids[rec->l[i].first_id + j];
            rinfo_t *x = (raw & ID_INDIRECT) ? NULL : rinfo_get(d, raw);
            if (x == NULL || !x->kernel_born || x->freed || x->init_made || x->born_kernel >= d->n_kernels ||
                (ran[x->born_kernel] && !initialiser(d->kv[x->born_kernel])))
                continue;
            x->init_made = 1;
            bytes += x->size;
        }
    free(ran);
    return bytes;
}

/* Memory alive at the (re)start that looks like weights (its content never moved, no
 * copy or set wrote it) but that no unit holds: what the pass found leaves unused. */
static uint64_t idle_weight_bytes(ft_disc_t *d)
{
    uint64_t bytes = 0;
    rinfo_t *r, *rt;
    HASH_ITER(hh, d->rmap, r, rt) {
        /* A piece of the program's own pool no copy filled: room its allocator has not
         * used yet, not weights a set-up pass left aside. */
        if ((r->flags & FT_REGION_PROGRAM) &&
            (d->p.piece_span == NULL || d->p.piece_span(r->base) == 0))
            continue;
        if (r->candidate && !r->freed && !r->varies && !r->written && !r->changed && !r->kernel_born &&
            r->unit < 0)
            bytes += r->size;
    }
    return bytes;
}

/* A pass whose units hold less than a fifth of the weight-like memory beside them
 * (idle_weight_bytes) is taken for set-up work, not the program's loop: discovery
 * starts over after SHORT_QUIET launches unobserved, twice as many each time, at most
 * SHORT_RESTARTS_MAX times (about 16000 launches in all); then such a pass stands. */
#define SHORT_RESTARTS_MAX 10
#define SHORT_QUIET 16
#define IDLE_RATIO 4
/* A pass of at most this many launches that touches no weight is set-up work too (an
 * autotuner timing kernels on buffers it set anew each time, in XLA's arena): starting
 * over at the next launch, such passes spent MAX_RESTARTS in 25 launches. */
#define SETUP_PASS_MAX 8

/* Set-up work, not the program's loop: discovery starts over after a quiet window,
 * twice as long as the last. 1 when this restart is to be said (the first and the
 * last such). */
static int restart_after_quiet(ft_disc_t *d)
{
    d->short_restarts++;
    d->quiet_len = d->quiet_len ? 2 * d->quiet_len : SHORT_QUIET;
    d->quiet_until = d->launches_total + d->quiet_len;
    d->restart_uncounted = 1;
    d->restart_pending = 1;
    return d->short_restarts == 1 || d->short_restarts == SHORT_RESTARTS_MAX;
}

static void end_iteration(ft_disc_t *d, lane_t *ln)
{
    ln->iterations++;
    if (ln->iterations > d->iterations)
        d->iterations = ln->iterations;
    snapshot_hashes(d, ln->iterations == 1);
    record_t tmp = d->last;
    d->last = ln->cur;
    ln->cur = tmp;
    ln->cur.n = 0;
    ln->cur.n_ids = 0;
    if (ln->iterations >= d->p.iters) {
        d->deciding_lane = ln->lane;
        lane_t *l, *lt;
        HASH_ITER(hh, d->lanes, l, lt) l->track_pos = -1;
        if (fold_repeated_pass(d) != 0 || build_units(d) != 0)
            FT_WARN("discovery: out of memory building units; nothing will be offloaded");
        uint64_t init_bytes = d->restarts < MAX_RESTARTS ? mark_init_made(d) : 0;
        /* Passes the program marks (ft_iteration_mark, FT_ITERATION_MARKER) are its own
         * word: never taken for set-up work. */
        int marked = d->boundary_source != 0;
        if (d->n_units == 0 && d->last.n <= SETUP_PASS_MAX && d->short_restarts < SHORT_RESTARTS_MAX && !marked) {
            if (restart_after_quiet(d))
                FT_INFO("discovery: %d iteration(s) of %zu launches touch no weight: set-up work (a "
                        "compiler timing kernels on its own buffers), not the program's loop; starting "
                        "over after %llu launches (%d of at most %d such)", ln->iterations, d->last.n,
                        (unsigned long long)d->quiet_len, d->short_restarts, SHORT_RESTARTS_MAX);
            return;
        }
        if (d->n_units == 0 && d->restarts < MAX_RESTARTS) {
            FT_INFO("discovery: %d iteration(s) of %zu launches touch no weight (regions "
                    "allocated after the first launch are not weights, unless kernels that do "
                    "not run in the passes made them: %.1f MiB); starting over at the next launch, "
                    "with the regions alive then (%d of %d)", ln->iterations, d->last.n,
                    (double)init_bytes / 1048576.0, d->restarts + 1, MAX_RESTARTS);
            d->restart_pending = 1;
            return;
        }
        uint64_t idle = d->short_restarts < SHORT_RESTARTS_MAX && !marked ? idle_weight_bytes(d) : 0;
        if (d->n_units > 0 && idle > IDLE_RATIO * d->weight_bytes && init_bytes <= d->weight_bytes) {
            if (restart_after_quiet(d))
                FT_INFO("discovery: %d iteration(s) of %zu launches use %.1f MiB of weights, while %.1f MiB "
                        "that no launch changed lies unused beside them: set-up work (a compiler timing a "
                        "kernel), not the program's loop; starting over after %llu launches (%d of at "
                        "most %d such)", ln->iterations, d->last.n, (double)d->weight_bytes / 1048576.0,
                        (double)idle / 1048576.0, (unsigned long long)d->quiet_len, d->short_restarts,
                        SHORT_RESTARTS_MAX);
            return;
        }
        if (init_bytes > d->weight_bytes && d->restarts < MAX_RESTARTS) {
            FT_INFO("discovery: %d iteration(s) of %zu launches touch %.1f MiB made by kernels that "
                    "do not run in the passes (weights initialised on the device), more than the "
                    "%.1f MiB of weights found; starting over at the next launch with them as "
                    "candidates (%d of %d)", ln->iterations, d->last.n, (double)init_bytes / 1048576.0,
                    (double)d->weight_bytes / 1048576.0, d->restarts + 1, MAX_RESTARTS);
            d->restart_pending = 1;
            return;
        }
        __atomic_store_n(&d->state, FT_DISC_DONE, __ATOMIC_RELEASE);
        choose_track_start(d);
        FT_INFO("discovery: %d iteration(s) of %zu launches, %zu units, %.1f MiB of weights, "
                "after %llu launches", ln->iterations, d->last.n, d->n_units,
                (double)d->weight_bytes / 1048576.0, (unsigned long long)d->launches_total);
        if (d->misaligned > 0)
            FT_DEBUG("discovery: %llu touch(es) at pointers not %d-byte aligned into their region left out "
                     "(stale words in kernels' argument padding)", (unsigned long long)d->misaligned,
                     DISC_PTR_ALIGN);
        warn_unmatched(d);
    }
}

/* A launch as the detector sees it: its kernel and every region alive at the first
 * launch that it touches, in argument order (a buffer preallocated for activations
 * is the same in every layer; the weights beside it are not), each with the offset
 * into it of the pointer the kernel was given (ptrs[i]; 0 when ptrs is NULL or
 * ptrs[i] is 0): a caching allocator's segment holds several layers' weights, and
 * only the offset tells their layers apart (PyTorch with hidden 1024: 20 MiB segments
 * of 2-5 MiB tensors; by region alone, a pass looked two layers long). 0: no such
 * region. */
static uint64_t pair_key(ft_disc_t *d, uint32_t kernel, const uint32_t *ids, const uint64_t *ptrs,
                         size_t n, uint32_t *minid)
{
    uint64_t h = 1469598103934665603ull;
    int any = 0;
    *minid = UINT32_MAX;
    for (size_t i = 0; i < n; i++) {
        rinfo_t *r = (ids[i] & ID_INDIRECT) ? NULL : rinfo_get(d, ids[i]);
        if (r == NULL || !r->candidate || r->varies)
            continue;
        any = 1;
        h = (h ^ r->id) * 1099511628211ull;
        if (ptrs != NULL && ptrs[i] >= r->base && ptrs[i] - r->base < r->size)
            h = (h ^ (ptrs[i] - r->base)) * 1099511628211ull;
        if (r->id < *minid)
            *minid = r->id;
    }
    if (!any)
        return 0;
    h = (h ^ kernel) * 1099511628211ull;
    return h ? h : 1;
}

/* The period is known; where does a pass begin? The sequence repeats, so any launch
 * in it could start one. A pass begins where the program's own work does: at the
 * launch touching the earliest-allocated region (models load their weights in order,
 * the embedding first), among the launches that occur once per pass; ties go to one
 * that follows a host synchronisation (the previous pass's result was read), then
 * to the earliest. The anchor is that launch's pair; the launches before its latest
 * occurrence are dropped, and iteration 1 ends at its next one, watched live. */
static void confirm_period(ft_disc_t *d, lane_t *ln, const period_cand_t *c)
{
    size_t from = c->start - c->period, best = from;
    for (size_t a = from; a < c->start; a++) {
        int unique = 1;
        for (size_t b = from; b < c->start && unique; b++)
            unique = b == a || ln->seq[b] != ln->seq[a];
        if (!unique)
            continue;
        if (best == from && !(ln->seq_minid[from] <= ln->seq_minid[a]))
            best = a;
        else if (ln->seq_minid[a] < ln->seq_minid[best] ||
                 (ln->seq_minid[a] == ln->seq_minid[best] && ln->seq_synced[a] && !ln->seq_synced[best]))
            best = a;
    }
    /* One pass from that launch to its next occurrence may already be recorded: it is
     * iteration 1 (the "early" one, whose snapshots only count when it is the only
     * one). Otherwise iteration 1 is under way from that launch. */
    record_t first = { 0 }, rest = { 0 };
    int whole = best + c->period < ln->n_seq;
    size_t from_pos = ln->seq_pos[best];
    size_t to_pos = whole ? ln->seq_pos[best + c->period] : from_pos;
    if ((whole && rec_slice(&ln->cur, from_pos, to_pos, &first) != 0) ||
        rec_slice(&ln->cur, to_pos, ln->cur.n, &rest) != 0) {
        rec_free(&first);
        rec_free(&rest);
        FT_WARN_CAPPED(1, "discovery: out of memory aligning the first iteration");
        return;
    }
    ln->anchor = ln->seq[best];
    ln->anchored = 1;
    d->any_anchored = 1;
    FT_DEBUG("discovery: lane %#llx repeats every %zu weight-touching launches; passes begin "
             "at the launch touching region %u", (unsigned long long)ln->lane, c->period,
             ln->seq_minid[best]);
    drop_pairs(ln);
    rec_free(&ln->cur);
    if (whole) {
        ln->cur = first;
        end_iteration(d, ln); /* last = iteration 1 */
        rec_free(&ln->cur);
    }
    ln->cur = rest;
    /* Iteration 2 began before the period was known: if its half-way point is already
     * behind, it was not watched there, so it does not count (a snapshot taken now,
     * late in the pass, can miss a buffer written only early in it). */
    if (whole && ln->cur.n > d->last.n / 2)
        ln->skip_boundary = 1;
}

/* The detector, before the lane's period is known: each launch touching a candidate
 * region is reduced to a pair key (see pair_key). When a pair recurs, the
 * distance to its last occurrence is a candidate period, confirmed when the next
 * MATCHES_NEEDED pairs (or a whole period, if shorter) repeat the sequence one period
 * earlier: a weight recurs once per pass, while a pair that recurs within a pass (a
 * norm kernel on a shared small segment, layer after layer) is followed by different
 * weights and is dropped. The confirmed pair is the anchor: it starts every pass. */
static void detect_period(ft_disc_t *d, lane_t *ln, uint64_t key, uint32_t minid)
{
    if (ln->n_seq == ln->cap_seq) {
        size_t cap = ln->cap_seq ? ln->cap_seq * 2 : 256;
        /* Each array keeps what it got: cap_seq grows only when all four did. */
        int failed = resize(&ln->seq, cap, sizeof *ln->seq) |
                     resize(&ln->seq_pos, cap, sizeof *ln->seq_pos) |
                     resize(&ln->seq_minid, cap, sizeof *ln->seq_minid) |
                     resize(&ln->seq_synced, cap, sizeof *ln->seq_synced);
        if (failed)
            return;
        ln->cap_seq = cap;
    }
    size_t j = ln->n_seq++;
    ln->seq[j] = key;
    ln->seq_pos[j] = (uint32_t)ln->cur.n; /* this launch is pushed at cur.n */
    ln->seq_minid[j] = minid;
    ln->seq_synced[j] = (uint8_t)ln->sync_pending;
    ln->sync_pending = 0;

    for (size_t c = 0; c < ln->n_cands;) {
        period_cand_t *pc = &ln->cands[c];
        if (ln->seq[j] == ln->seq[j - pc->period]) {
            size_t need = pc->period < MATCHES_NEEDED ? pc->period : MATCHES_NEEDED;
            if (++pc->matched >= need) {
                period_cand_t won = *pc;
                confirm_period(d, ln, &won);
                return;
            }
            c++;
        } else {
            ln->cands[c] = ln->cands[--ln->n_cands];
        }
    }

    pair_t *pr;
    HASH_FIND(hh, ln->pairs, &key, sizeof key, pr);
    if (pr == NULL) {
        pr = calloc(1, sizeof *pr);
        if (pr == NULL)
            return;
        pr->key = key;
        HASH_ADD(hh, ln->pairs, key, sizeof pr->key, pr);
        if (pr->hh.tbl == NULL) {
            free(pr);
            return;
        }
    } else if (ln->n_cands < MAX_PERIOD_CANDS && ln->seq_pos[j] - ln->seq_pos[pr->last] != 1) {
        /* A pass of one launch is none worth finding: what that launch reaches must be
         * on the device at once, so no plan could stream anything. One launch repeated
         * back to back is a compiler or autotuner timing a kernel (XLA's, before its
         * loop). (A period of one weight-touching launch among others stays: the first
         * pass of a GPU-built model, whose one candidate is the first region.) */
        ln->cands[ln->n_cands++] = (period_cand_t){ j, j - pr->last, 0 };
    }
    pr->last = j;
}

/* FT_LOG_LEVEL=trace: what the period detector gets, launch by launch, until the lane
 * is anchored: position, kernel, both keys, and each region touched (id, whether it is
 * a candidate (c) and varies (v: out of the keys), size, offset of the pointer), to
 * replay a real program's pattern. */
static void trace_detector_input(ft_disc_t *d, const lane_t *ln, const kinfo_t *k, const uint32_t *ids,
                                 const uint64_t *ptrs, size_t n)
{
    char buf[512];
    size_t len = 0;
    uint32_t minid;
    for (size_t i = 0; i < n && len < sizeof buf - 48; i++) {
        rinfo_t *r = rinfo_get(d, ids[i] & ~ID_INDIRECT);
        uint64_t off = r != NULL && ptrs[i] >= r->base ? ptrs[i] - r->base : UINT64_MAX;
        len += (size_t)snprintf(buf + len, sizeof buf - len, " %u%s%s%s:%lluK@%lld", ids[i] & ~ID_INDIRECT,
                                (ids[i] & ID_INDIRECT) ? "i" : "", r != NULL && r->candidate ? "c" : "",
                                r != NULL && r->varies ? "v" : "",
                                r != NULL ? (unsigned long long)(r->size >> 10) : 0ull,
                                off == UINT64_MAX ? -1ll : (long long)off);
    }
    buf[len] = '\0';
    FT_TRACE("discovery: detector lane %#llx pos %zu kernel %u %.40s key %016llx, without offsets %016llx, ids%s",
             (unsigned long long)ln->lane, ln->cur.n, k->idx, k->name,
             (unsigned long long)pair_key(d, k->idx, ids, ptrs, n, &minid),
             (unsigned long long)pair_key(d, k->idx, ids, NULL, n, &minid), buf);
}

/* Discovery from scratch (restart_pending): what was learned about passes and units
 * goes, and so does what was learned about regions, except which ones were born as
 * activations (kernel_born: they stay out of the candidates); kernels, NVTX ranges and
 * the counts stay. */
static void restart(ft_disc_t *d)
{
    rinfo_t *r, *rt;
    HASH_ITER(hh, d->rmap, r, rt) {
        if (r->kernel_born && !r->freed && !r->init_made) { /* stays out of the candidates */
            *r = (rinfo_t){ .id = r->id, .base = r->base, .size = r->size, .flags = r->flags,
                            .unit = -1, .kernel_born = 1, .born_kernel = r->born_kernel, .touched = 1,
                            .hh = r->hh };
            continue;
        }
        d->rvec[r->id] = NULL;
        HASH_DEL(d->rmap, r);
        free(r);
    }
    lane_t *ln, *lt;
    HASH_ITER(hh, d->lanes, ln, lt) {
        drop_pairs(ln);
        rec_free(&ln->cur);
        ln->sync_pending = ln->skip_boundary = ln->anchored = ln->mark_pending = 0;
        ln->iterations = 0;
        ln->anchor = 0;
        ln->track_pos = -1;
        ln->track_mark = 0;
    }
    rec_free(&d->last);
    free(d->units);
    free(d->unit_ids);
    d->units = NULL;
    d->unit_ids = NULL;
    d->n_units = 0;
    d->weight_bytes = 0;
    d->iterations = 0;
    d->deciding_lane = 0;
    d->restart_pending = 0;
    d->keyless_run = 0;
    d->copied_bytes = 0;
    d->track_set = 0;
    d->any_anchored = 0;
    if (!d->restart_uncounted)
        d->restarts++;
    d->restart_uncounted = 0;
    __atomic_store_n(&d->state, FT_DISC_WAITING, __ATOMIC_RELEASE);
}

static uint64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A launch's ids as discovery records them (ID_INDIRECT marked) and their pointers:
 * in the struct for the common launch, on the heap for one that reaches more regions
 * (a cat of many inputs), so that none is lost. */
typedef struct {
    uint32_t *ids;
    uint64_t *ptrs;
    uint32_t ids_in[FT_SCAN_INLINE_IDS];
    uint64_t ptrs_in[FT_SCAN_INLINE_IDS];
} launch_ids_t;

/* Room for n ids; the count it has room for (fewer than n only when out of memory). */
static size_t launch_ids_room(launch_ids_t *l, size_t n)
{
    l->ids = l->ids_in;
    l->ptrs = l->ptrs_in;
    if (n <= FT_SCAN_INLINE_IDS)
        return n;
    uint32_t *ids = malloc(n * sizeof *ids);
    uint64_t *ptrs = malloc(n * sizeof *ptrs);
    if (ids == NULL || ptrs == NULL) {
        free(ids);
        free(ptrs);
        return FT_SCAN_INLINE_IDS;
    }
    l->ids = ids;
    l->ptrs = ptrs;
    return n;
}

static void launch_ids_free(launch_ids_t *l)
{
    if (l->ids != l->ids_in) {
        free(l->ids);
        free(l->ptrs);
    }
}

/* A launch of kernel `name` whose regions could not all be recorded (out of memory:
 * the scan set or launch_ids could not grow), `lost` of them: a weight it touched
 * outside its unit's range may be taken for one no other range reads, and stream.
 * The guard still loads it when touched, unless FT_STRICT_GUARD=0 takes the touch for
 * a stale address. Said once. */
static void warn_lost(size_t lost, const char *name)
{
    if (lost > 0)
        FT_WARN_CAPPED(1, "discovery: a launch of %s may reach %zu region(s) not recorded (arguments whose "
                       "layout the driver does not give, or out of memory): a weight among them is not seen "
                       "as read by it, and the guard loads every streamed unit for its launches", name, lost);
}

/* The end of a pass's work begun at t0 (FT_DISC_PASS_WORK), under d->lock. */
static int pass_work_done(ft_disc_t *d, uint64_t t0)
{
    d->pass_work_n++;
    d->pass_work_ns += clock_ns() - t0;
    return FT_DISC_PASS_WORK;
}

int ft_disc_launch(ft_disc_t *d, uint64_t lane, uint64_t kernel, const char *name,
                   const ft_scan_set_t *set)
{
    int work = 0;
    pthread_mutex_lock(&d->lock);
    if (d->state == FT_DISC_DONE) {
        pthread_mutex_unlock(&d->lock);
        return 0;
    }
    if (d->restart_pending)
        restart(d);
    if (d->state == FT_DISC_WAITING && d->launches_total < d->quiet_until) {
        d->launches_total++; /* set-up work, after a pass too small for the model */
        pthread_mutex_unlock(&d->lock);
        return 0;
    }
    if (d->state == FT_DISC_WAITING) {
        uint64_t t0 = clock_ns();
        start_observing(d);
        work = pass_work_done(d, t0);
    }
    kinfo_t *k = kinfo_get(d, kernel, name);
    lane_t *ln = lane_get(d, lane);
    if (k == NULL || ln == NULL) {
        pthread_mutex_unlock(&d->lock);
        return 0;
    }
    k->launches++;
    d->launches_total++;
    if (detector_snapshot_due(d)) {
        uint64_t t0 = clock_ns();
        take_detector_snapshot(d);
        work = pass_work_done(d, t0);
    }
    launch_ids_t li; /* ptrs for the detector: an unsure pointer's offset is noise */
    size_t n = launch_ids_room(&li, set->n);
    warn_lost(set->dropped + (set->n - n), k->name);
    uint32_t *ids = li.ids;
    uint64_t *ptrs = li.ptrs;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        ft_region_t reg;
        rinfo_t *x = rinfo_get(d, set->id[i]);
        int found = x != NULL || ft_regions_find(d->regions, set->ptr[i], &reg);
        uint64_t base = x != NULL ? x->base : found ? reg.base : set->ptr[i];
        /* Not at a tensor's alignment: left out of discovery's view (below). */
        if (!set->indirect[i] && found && (set->ptr[i] - base) % DISC_PTR_ALIGN != 0) {
            d->misaligned++;
            if (x != NULL)
                x->stale_in_pass++;
            continue;
        }
        ids[kept] = set->id[i] | (set->indirect[i] ? ID_INDIRECT : 0);
        ptrs[kept] = set->unsure[i] ? 0 : set->ptr[i];
        /* Allocated after the first launch: observed, never a weight. */
        if (x == NULL && found && (x = rinfo_add(d, &reg, 0)) != NULL) {
            x->kernel_born = 1;
            x->born_kernel = k->idx;
            k->births++;
        } else if (x != NULL && x->kernel_born && x->born_kernel != k->idx) {
            k->foreign++;
        }
        if (x != NULL)
            x->touched = 1;
        kept++;
    }
    n = kept;
    if (set->n == 0)
        d->launches_unattributed++;

    int marker = d->p.marker_glob && d->p.marker_glob[0] && fnmatch(d->p.marker_glob, k->name, 0) == 0;
    d->marker_hits += (uint64_t)marker;
    if (marker && !d->explicit_marks) {
        d->explicit_marks = 1;
        d->boundary_source = 2;
    }
    int boundary = 0;
    if (FT_LOG_ENABLED(FT_LOG_TRACE) && !d->explicit_marks && !ln->anchored)
        trace_detector_input(d, ln, k, ids, ptrs, n);
    if (d->explicit_marks) {
        if (marker || ln->mark_pending) {
            ln->mark_pending = 0;
            if (!ln->anchored) {
                /* The first mark begins iteration 1; what ran before is a prologue. */
                ln->anchored = 1;
                ln->cur.n = 0;
                ln->cur.n_ids = 0;
            } else {
                boundary = 1;
            }
        }
    } else {
        uint32_t minid;
        uint64_t key = pair_key(d, k->idx, ids, ptrs, n, &minid);
        d->keyless_run = key != 0 || d->any_anchored ? 0 : d->keyless_run + 1;
        uint64_t made = 0;
        if (d->keyless_run >= KEYLESS_LAUNCHES && d->keyless_run % KEYLESS_LAUNCHES == 0 &&
            d->keyless_restarts < MAX_RESTARTS && d->copied_bytes < KEYLESS_COPIED_MIN)
            made = initialiser_made(d, 0); /* a walk of the regions: every 256 keyless launches */
        if (d->keyless_run >= KEYLESS_LAUNCHES && d->keyless_restarts < MAX_RESTARTS &&
            d->copied_bytes >= KEYLESS_COPIED_MIN) {
            d->keyless_restarts++;
            FT_INFO("discovery: %llu launches in a row touched no region alive at its start, while %.1f MiB "
                    "were copied into new regions (weights loaded after other kernels ran); starting over "
                    "at the next launch, with the regions alive then (%d of %d)",
                    (unsigned long long)d->keyless_run, (double)d->copied_bytes / 1048576.0,
                    d->keyless_restarts, MAX_RESTARTS);
            d->restart_pending = 1;
        } else if (made >= KEYLESS_COPIED_MIN) {
            d->keyless_restarts++;
            initialiser_made(d, 1);
            FT_INFO("discovery: %llu launches in a row touched no region alive at its start, while "
                    "initialising kernels made %.1f MiB (weights initialised on the device); starting over "
                    "at the next launch with them as candidates (%d of %d)",
                    (unsigned long long)d->keyless_run, (double)made / 1048576.0, d->keyless_restarts,
                    MAX_RESTARTS);
            d->restart_pending = 1;
        }
        if (key != 0 && ln->anchored)
            boundary = key == ln->anchor;
        else if (key != 0) {
            detect_period(d, ln, key, minid);
            if (ln->anchored && key == ln->anchor) {
                /* This launch is the anchor's latest occurrence: a pass starts here. */
                ln->cur.n = 0;
                ln->cur.n_ids = 0;
            }
        }
    }
    if (boundary && ln->skip_boundary) {
        ln->skip_boundary = 0;
        ln->cur.n = 0;
        ln->cur.n_ids = 0;
    } else if (boundary) {
        uint64_t t0 = clock_ns();
        end_iteration(d, ln);
        work = pass_work_done(d, t0);
    } else if (ln->iterations >= 1 && d->last.n > 1 && ln->cur.n == d->last.n / 2) {
        uint64_t t0 = clock_ns();
        snapshot_hashes(d, 0); /* half-way through a pass */
        work = pass_work_done(d, t0);
    }
    if (d->state != FT_DISC_DONE && rec_push_launch(&ln->cur, k->idx, ln->range, ids, ptrs, n) != 0)
        FT_WARN_CAPPED(1, "discovery: out of memory recording launches");
    launch_ids_free(&li);
    pthread_mutex_unlock(&d->lock);
    return (boundary ? FT_DISC_NEW_PASS : 0) | work;
}

void ft_disc_pass_work(ft_disc_t *d, uint64_t *count, uint64_t *ns)
{
    pthread_mutex_lock(&d->lock);
    *count = d->pass_work_n;
    *ns = d->pass_work_ns;
    pthread_mutex_unlock(&d->lock);
}

void ft_disc_write(ft_disc_t *d, const ft_scan_set_t *set)
{
    pthread_mutex_lock(&d->lock);
    if (d->state == FT_DISC_OBSERVING) {
        for (size_t i = 0; i < set->n; i++) {
            rinfo_t *r = rinfo_get(d, set->id[i]);
            ft_region_t reg;
            /* Allocated after the first launch and loaded by a copy (a weight loaded
             * after warm-up kernels): not a weight in this round; a restart can make
             * it one. */
            if (r == NULL && ft_regions_find(d->regions, set->ptr[i], &reg) &&
                (r = rinfo_add(d, &reg, 0)) != NULL)
                d->copied_bytes += reg.size;
            if (r != NULL)
                r->written = 1;
        }
    }
    pthread_mutex_unlock(&d->lock);
}

/* The id of a range path, interning it; 0 for the empty path or on failure. */
static uint32_t range_intern(ft_disc_t *d, const char *path)
{
    if (path[0] == '\0')
        return 0;
    range_t *rg;
    HASH_FIND_STR(d->ranges, path, rg);
    if (rg != NULL)
        return rg->id;
    if (d->n_ranges == d->cap_ranges) {
        size_t cap = d->cap_ranges ? d->cap_ranges * 2 : 64;
        range_t **nv = realloc(d->range_v, cap * sizeof *nv);
        if (nv == NULL)
            return 0;
        d->range_v = nv;
        d->cap_ranges = cap;
    }
    rg = calloc(1, sizeof *rg);
    if (rg == NULL || (rg->path = strdup(path)) == NULL) {
        free(rg);
        return 0;
    }
    rg->id = (uint32_t)d->n_ranges + 1;
    HASH_ADD_KEYPTR(hh, d->ranges, rg->path, strlen(rg->path), rg);
    if (rg->hh.tbl == NULL) {
        free(rg->path);
        free(rg);
        return 0;
    }
    d->range_v[d->n_ranges++] = rg;
    return rg->id;
}

/* Every region's off_max, worked out once for the pass recorded now from its launches
 * (d->lock held). */
static void off_max_update(ft_disc_t *d)
{
    const record_t *rec = &d->last;
    if (rec->no_ptrs || rec->gen == d->off_gen)
        return;
    rinfo_t *x, *xt;
    HASH_ITER(hh, d->rmap, x, xt) x->off_max = 0;
    for (size_t i = 0; i < rec->n_ids; i++) {
        x = (rec->ids[i] & ID_INDIRECT) ? NULL : rinfo_get(d, rec->ids[i]);
        uint64_t p = rec->ptrs[i];
        if (x != NULL && p >= x->base && p < x->base + x->size && p - x->base > x->off_max)
            x->off_max = p - x->base;
    }
    d->off_gen = rec->gen;
}

/* Every weight the launch touches (shared ones aside) is of a unit the start's launch
 * touched in the recorded pass. A touch past every weight's start in another unit's
 * region (off_max: the room a caching allocator's segment has left past its weights,
 * where it put the launch's output) is no weight's: a prefill's embedding writing
 * there still starts its pass (on the H100, gpu_built's prefills started none, and
 * "no pass has started" was said in every run; model --start-room). */
static int touches_only_start_units(ft_disc_t *d, const uint32_t *ids, const uint64_t *ptrs, size_t n)
{
    off_max_update(d);
    for (size_t i = 0; i < n; i++) {
        rinfo_t *x = (ids[i] & ID_INDIRECT) ? NULL : rinfo_get(d, ids[i]);
        if (x == NULL || x->unit < 0 || x->shared)
            continue;
        if (!d->last.no_ptrs && ptrs != NULL && ptrs[i] >= x->base && ptrs[i] < x->base + x->size &&
            ptrs[i] - x->base > x->off_max)
            continue;
        int known = 0;
        for (size_t j = 0; j < d->n_track_units && !known; j++)
            known = d->track_units[j] == x->unit;
        if (!known)
            return 0;
    }
    return 1;
}

/* " 12 34w 56i": region ids, w a weight, i reached through a pointer array. */
static void format_ids(ft_disc_t *d, const uint32_t *ids, size_t n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && at < len; i++) {
        rinfo_t *r = rinfo_get(d, ids[i] & ~ID_INDIRECT);
        at += (size_t)snprintf(buf + at, len - at, " %u%s%s", ids[i] & ~ID_INDIRECT,
                               (ids[i] & ID_INDIRECT) ? "i" : "", r != NULL && r->unit >= 0 ? "w" : "");
    }
}

/* FT_LOG_LEVEL=debug: a launch of the pass start's kernel that did not start a pass,
 * its regions against the start's. */
static void debug_start_miss(ft_disc_t *d, const uint32_t *ids, size_t n)
{
    if (!FT_LOG_ENABLED(FT_LOG_DEBUG))
        return;
    const launch_t *l = &d->last.l[d->track_start];
    char now[256], then[256];
    format_ids(d, ids, n, now, sizeof now);
    format_ids(d, d->last.ids + l->first_id, l->n_ids, then, sizeof then);
    FT_DEBUG("discovery: %s did not start a pass: regions%s, at the start%s (w: weight, i: through "
             "a pointer array)", d->kv[l->kernel]->name, n ? now : " none", l->n_ids ? then : " none");
}

/* A launch off the record (another kernel at its position: a launch added or left out
 * since discovery, a kernel chosen by shape) is put back on it at the next launch that
 * touches a weight as only one launch of the recorded pass did: that kernel at that
 * pointer (at that region when the record has no pointers: a saved profile's). Weights
 * are read once a pass, each by its own launch, so such a touch says where the pass
 * is; positions then follow the record again (the guard's prefetch, checksums and
 * offload timing go by them). A region alone would seldom do: a caching allocator's
 * segment holds a layer's several weights, read by one GEMM kernel each. */
static struct resync_key resync_key(const ft_disc_t *d, uint32_t kernel, uint32_t id, uint64_t ptr)
{
    struct resync_key key;
    memset(&key, 0, sizeof key); /* hashed as bytes */
    key.kernel = kernel;
    key.where = !d->last.no_ptrs && ptr != 0 ? ptr : (uint64_t)(id & ~ID_INDIRECT) | 1ull << 63;
    return key;
}

/* The table for `last`, (re)built when `last` changed since (d->lock held, DONE). Out of
 * memory, the table stays partial: a pair missing only puts no launch back on the
 * record. Positions 0 and the track start are left out: a pass begins only there, by
 * the start's own rule. */
static void resync_build(ft_disc_t *d)
{
    if (d->resync_built && d->resync_gen == d->last.gen)
        return;
    FT_HASH_RELEASE_ALL(d->resync, free);
    d->resync_gen = d->last.gen;
    d->resync_built = 1;
    for (size_t p = 1; p < d->last.n; p++) {
        const launch_t *l = &d->last.l[p];
        if (d->track_set && p == d->track_start)
            continue;
        for (uint32_t i = 0; i < l->n_ids; i++) {
            uint32_t id = d->last.ids[l->first_id + i];
            rinfo_t *r = rinfo_get(d, id);
            if ((id & ID_INDIRECT) || r == NULL || r->unit < 0)
                continue;
            struct resync_key key = resync_key(d, l->kernel, id, d->last.no_ptrs ? 0 : d->last.ptrs[l->first_id + i]);
            struct resync *e;
            HASH_FIND(hh, d->resync, &key, sizeof key, e);
            if (e != NULL) {
                e->pos = e->pos == (long)p ? e->pos : -1;
                continue;
            }
            if ((e = malloc(sizeof *e)) == NULL)
                return;
            e->key = key;
            e->pos = (long)p;
            HASH_ADD(hh, d->resync, key, sizeof key, e);
        }
    }
}

/* What the recorded pass says of a launch of kernel k touching ids (at ptrs; n, sure
 * touches): RESYNC_AT (*pos set) where one of its launches, and only one, touched one of
 * those weights so; RESYNC_UNSAID otherwise (no weight touched, a weight the record
 * never had read so, or one it read so more than once). */
enum { RESYNC_AT, RESYNC_UNSAID };
static int resync_find(ft_disc_t *d, const kinfo_t *k, const uint32_t *ids, const uint64_t *ptrs, size_t n,
                       long *pos)
{
    resync_build(d);
    for (size_t i = 0; i < n; i++) {
        rinfo_t *r = rinfo_get(d, ids[i]);
        if ((ids[i] & ID_INDIRECT) || r == NULL || r->unit < 0)
            continue;
        struct resync_key key = resync_key(d, k->idx, ids[i], ptrs[i]);
        struct resync *e;
        HASH_FIND(hh, d->resync, &key, sizeof key, e);
        if (e != NULL && e->pos >= 0) {
            *pos = e->pos;
            return RESYNC_AT;
        }
    }
    return RESYNC_UNSAID;
}

long ft_disc_track(ft_disc_t *d, uint64_t lane, uint64_t kernel, const ft_scan_set_t *set,
                   int *expected, int *weightless)
{
    pthread_mutex_lock(&d->lock);
    long pos = -1;
    if (expected != NULL)
        *expected = 0;
    lane_t *ln = d->state == FT_DISC_DONE ? lane_get(d, lane) : NULL;
    kinfo_t *k = NULL;
    if (d->state == FT_DISC_DONE)
        HASH_FIND(hh, d->kmap, &kernel, sizeof kernel, k);
    if (weightless != NULL)
        *weightless = k != NULL && k->in_pass && !k->weighted;
    /* Every lane that found its passes is followed: the lane that decided may stop
     * launching (a thread that finished its work) while others go on. */
    if (ln != NULL && (ln->anchored || d->explicit_marks || d->track_set)) {
        /* The touches the kernel is sure to make (unsure ones are stale addresses).
         * Out of memory, those past the room are left out: they only tell where a
         * pass starts, and the guard has the whole set. */
        launch_ids_t li;
        size_t room = launch_ids_room(&li, set->n), n = 0;
        uint32_t *ids = li.ids, minid;
        uint64_t *ptrs = li.ptrs;
        for (size_t i = 0; i < set->n && n < room; i++)
            if (!set->unsure[i]) {
                ptrs[n] = set->ptr[i];
                ids[n++] = set->id[i] | (set->indirect[i] ? ID_INDIRECT : 0);
            }
        int start;
        if (d->explicit_marks) {
            start = ln->track_mark || (k != NULL && d->p.marker_glob && d->p.marker_glob[0] &&
                                       fnmatch(d->p.marker_glob, k->name, 0) == 0);
        } else if (d->track_set) {
            start = 0;
            int kernel_ok = k != NULL && k->idx == d->track_kernel;
            kernel_ok |= d->track_any_kernel && (k == NULL || !k->in_pass);
            for (size_t i = 0; kernel_ok && i < n && !start; i++)
                start = ids[i] == d->track_region;
            start = start && touches_only_start_units(d, ids, ptrs, n);
        } else {
            uint64_t key = k != NULL ? pair_key(d, k->idx, ids, ptrs, n, &minid) : 0;
            start = key != 0 && key == ln->anchor;
        }
        /* A start's kernel touching its weight again within half a pass of the last
         * start (a launch added after discovery, reading the same weight) does not
         * start a pass: positions would restart in the middle of one. */
        if (start && d->track_set && ln->track_pos >= 0 && ln->since_start + 1 < (d->last.n + 1) / 2)
            start = 0;
        if (start) {
            ln->track_pos = d->track_set ? (long)d->track_start : 0;
            ln->since_start = 0;
            d->track_starts++;
        } else {
            /* The launches before a start other than the pass's first come after the
             * previous pass's last. */
            if (ln->track_pos >= 0 && ++ln->track_pos == (long)d->last.n && d->track_set &&
                d->track_start > 0)
                ln->track_pos = 0;
            if (d->track_set && k != NULL && k->idx == d->track_kernel && d->track_misses++ < 3)
                debug_start_miss(d, ids, n);
            if (++ln->since_start == 4 * (uint64_t)d->last.n + 4 && ln->anchored && !d->track_lost_warned) {
                d->track_lost_warned = 1;
                FT_WARN("discovery: no pass has started in the last %llu launches (thread %#llx); "
                        "profiling and prefetching by position wait for a pass start "
                        "(FT_ITERATION_MARKER or ft_iteration_mark() mark passes explicitly)",
                        (unsigned long long)ln->since_start, (unsigned long long)ln->lane);
            }
        }
        ln->track_mark = 0;
        pos = ln->track_pos;
        int on = pos >= 0 && (size_t)pos < d->last.n && k != NULL && d->last.l[pos].kernel == k->idx;
        /* Within a pass, the position this launch's weight says. Where it is the count's,
         * the position is sure; where the record has another kernel at the count, the
         * lane moves to it (a launch added or left out before); where the record has
         * this kernel at the count but the weight says another position, the count
         * stands: the same kernel on another slice of one weight (an expert the router
         * picked instead of the record's, in a fused experts tensor) is no shift. */
        long at = -1;
        int said = !start && pos >= 0 && k != NULL && n > 0 ? resync_find(d, k, ids, ptrs, n, &at) : RESYNC_UNSAID;
        int sure = said == RESYNC_AT && (at == pos || !on);
        if (sure && at != pos) {
            ln->track_pos = pos = at;
            d->track_resyncs++;
        }
        if (expected != NULL)
            *expected = sure ? 2 : on;
        launch_ids_free(&li);
    }
    pthread_mutex_unlock(&d->lock);
    return pos;
}

int ft_disc_region_shared(ft_disc_t *d, uint32_t id)
{
    pthread_mutex_lock(&d->lock);
    rinfo_t *x = rinfo_get(d, id);
    int shared = x != NULL && x->shared;
    pthread_mutex_unlock(&d->lock);
    return shared;
}

int ft_disc_region_touched(ft_disc_t *d, uint32_t id)
{
    pthread_mutex_lock(&d->lock);
    rinfo_t *x = rinfo_get(d, id);
    int touched = x != NULL && (x->touched || x->kernel_born || x->written || x->unit >= 0);
    pthread_mutex_unlock(&d->lock);
    return touched;
}

int ft_disc_region_indirect_only(ft_disc_t *d, uint32_t id)
{
    pthread_mutex_lock(&d->lock);
    rinfo_t *x = rinfo_get(d, id);
    int only = x != NULL && x->unit >= 0 && !x->direct;
    pthread_mutex_unlock(&d->lock);
    return only;
}

int ft_disc_region(ft_disc_t *d, uint32_t id, uint64_t *base, uint64_t *size)
{
    pthread_mutex_lock(&d->lock);
    rinfo_t *r = rinfo_get(d, id);
    if (r != NULL) {
        *base = r->base;
        *size = r->size;
    }
    pthread_mutex_unlock(&d->lock);
    return r != NULL ? 0 : -1;
}

int ft_disc_region_off_max(ft_disc_t *d, uint32_t id, uint64_t *off)
{
    pthread_mutex_lock(&d->lock);
    const record_t *rec = &d->last;
    off_max_update(d);
    rinfo_t *r = rec->no_ptrs || rec->n == 0 ? NULL : rinfo_get(d, id);
    if (r != NULL)
        *off = r->off_max;
    pthread_mutex_unlock(&d->lock);
    return r != NULL ? 0 : -1;
}

size_t ft_disc_pass_length(ft_disc_t *d)
{
    return d->last.n;
}

const char *ft_disc_pass_kernel(ft_disc_t *d, long pos)
{
    pthread_mutex_lock(&d->lock);
    const char *name = d->state == FT_DISC_DONE && pos >= 0 && (size_t)pos < d->last.n
                       ? d->kv[d->last.l[pos].kernel]->name : NULL;
    pthread_mutex_unlock(&d->lock);
    return name;
}

uint32_t ft_disc_track_start(ft_disc_t *d)
{
    pthread_mutex_lock(&d->lock);
    uint32_t s = d->state == FT_DISC_DONE && d->track_set ? d->track_start : 0;
    pthread_mutex_unlock(&d->lock);
    return s;
}

void ft_disc_range_push(ft_disc_t *d, uint64_t lane, const char *name)
{
    pthread_mutex_lock(&d->lock);
    lane_t *ln = d->state != FT_DISC_DONE ? lane_get(d, lane) : NULL;
    if (ln != NULL) {
        if (ln->depth < FT_DISC_RANGE_DEPTH) {
            size_t len = strlen(ln->path);
            ln->path_len[ln->depth] = len;
            /* An unnamed range (NULL) is an empty component: transparent. */
            snprintf(ln->path + len, sizeof ln->path - len, "%s%s", len ? "\x1f" : "",
                     name ? name : "");
            ln->range = range_intern(d, ln->path);
        }
        ln->depth++;
    }
    pthread_mutex_unlock(&d->lock);
}

void ft_disc_range_pop(ft_disc_t *d, uint64_t lane)
{
    pthread_mutex_lock(&d->lock);
    lane_t *ln = d->state != FT_DISC_DONE ? lane_get(d, lane) : NULL;
    if (ln != NULL && ln->depth > 0) {
        ln->depth--;
        if (ln->depth < FT_DISC_RANGE_DEPTH) {
            ln->path[ln->path_len[ln->depth]] = '\0';
            ln->range = range_intern(d, ln->path);

        }
    }
    pthread_mutex_unlock(&d->lock);
}

void ft_disc_sync(ft_disc_t *d, uint64_t lane)
{
    pthread_mutex_lock(&d->lock);
    lane_t *ln = d->state == FT_DISC_OBSERVING ? lane_get(d, lane) : NULL;
    if (ln != NULL)
        ln->sync_pending = 1;
    if (d->state == FT_DISC_OBSERVING)
        d->dsnap_sync = 1;
    pthread_mutex_unlock(&d->lock);
}

void ft_disc_mark(ft_disc_t *d, uint64_t lane)
{
    pthread_mutex_lock(&d->lock);
    if (!d->explicit_marks) {
        d->explicit_marks = 1;
        d->boundary_source = 1;
    }
    lane_t *ln = lane_get(d, lane);
    if (ln != NULL) {
        ln->mark_pending = 1;
        if (d->state == FT_DISC_DONE)
            ln->track_mark = 1;
    }
    pthread_mutex_unlock(&d->lock);
}

void ft_disc_region_freed(ft_disc_t *d, uint32_t id)
{
    pthread_mutex_lock(&d->lock);
    rinfo_t *r = rinfo_get(d, id);
    if (r != NULL && d->state != FT_DISC_DONE)
        r->freed = 1;
    pthread_mutex_unlock(&d->lock);
}

/* Read on every launch in discovery: an atomic load, not the lock (the state is
 * stored, under the lock, with release order: what was learned before it is seen). */
int ft_disc_weight_freed(ft_disc_t *d, uint32_t id, uint64_t *gone, uint64_t *total)
{
    int crossed = 0;
    pthread_mutex_lock(&d->lock);
    rinfo_t *r = d->state == FT_DISC_DONE ? rinfo_get(d, id) : NULL;
    if (r != NULL && r->unit >= 0 && !r->gone) {
        r->gone = 1;
        d->weight_gone += r->size;
        /* Most of them, not all: a program deleting its model may keep a tied or shared
         * tensor alive, and a share of the weights left behind streams no more. */
        crossed = !d->gone_said && d->weight_bytes > 0 &&
                  d->weight_gone * 100 >= d->weight_bytes * (uint64_t)FT_DISC_GONE_PERCENT;
        d->gone_said |= crossed;
    }
    *gone = d->weight_gone;
    *total = d->weight_bytes;
    pthread_mutex_unlock(&d->lock);
    return crossed;
}

void ft_disc_reload(ft_disc_t *d)
{
    pthread_mutex_lock(&d->lock);
    /* The freed weights go with the rest of what restart forgets; it keeps the regions
     * born as activations that are still alive. */
    rinfo_t *r, *rt;
    HASH_ITER(hh, d->rmap, r, rt) {
        if (r->gone)
            r->freed = 1;
    }
    restart(d);
    /* A discovery of its own: the first one's restarts do not count against it. */
    d->restarts = 0;
    d->keyless_restarts = 0;
    d->weight_gone = 0;
    d->gone_said = 0;
    d->reloads++;
    pthread_mutex_unlock(&d->lock);
}

ft_disc_state_t ft_disc_state(ft_disc_t *d)
{
    return __atomic_load_n(&d->state, __ATOMIC_ACQUIRE);
}

int ft_disc_iterations(ft_disc_t *d)
{
    pthread_mutex_lock(&d->lock);
    int n = d->iterations;
    pthread_mutex_unlock(&d->lock);
    return n;
}

void ft_disc_status(ft_disc_t *d, ft_disc_status_t *out)
{
    pthread_mutex_lock(&d->lock);
    out->iterations = d->iterations;
    out->iters_wanted = d->p.iters;
    out->restarts = d->restarts;
    out->reloads = d->reloads;
    out->launches = d->launches_total;
    out->marker_hits = d->marker_hits;
    out->track_starts = d->track_starts;
    out->track_resyncs = d->track_resyncs;
    pthread_mutex_unlock(&d->lock);
}

size_t ft_disc_unit_count(ft_disc_t *d) { return d->n_units; }

const ft_disc_unit_t *ft_disc_unit(ft_disc_t *d, size_t i)
{
    return i < d->n_units ? &d->units[i] : NULL;
}

uint64_t ft_disc_weight_bytes(ft_disc_t *d) { return d->weight_bytes; }

/* --- trace ----------------------------------------------------------------------- */

static int cmp_rinfo(const void *a, const void *b)
{
    const rinfo_t *x = *(rinfo_t *const *)a, *y = *(rinfo_t *const *)b;
    return x->id < y->id ? -1 : x->id > y->id;
}

void ft_disc_trace(ft_disc_t *d, ft_trace_writer_t *w)
{
    pthread_mutex_lock(&d->lock);
    ft_trace_begin(w, FT_TRACE_DISCOVERY);
    ft_trace_put_u32(w, (uint32_t)d->state);
    ft_trace_put_u32(w, (uint32_t)d->iterations);
    ft_trace_put_u32(w, (uint32_t)d->boundary_source);
    ft_trace_put_u64(w, d->launches_total);
    ft_trace_put_u64(w, d->launches_unattributed);
    ft_trace_end(w);

    size_t nr = HASH_COUNT(d->rmap);
    rinfo_t **rv = malloc((nr ? nr : 1) * sizeof *rv);
    if (rv != NULL) {
        size_t i = 0;
        rinfo_t *r, *rt;
        HASH_ITER(hh, d->rmap, r, rt) rv[i++] = r;
        qsort(rv, nr, sizeof *rv, cmp_rinfo);
        ft_trace_begin(w, FT_TRACE_REGIONS);
        ft_trace_put_u32(w, (uint32_t)nr);
        for (i = 0; i < nr; i++) {
            r = rv[i];
            uint32_t f = ((r->flags & FT_REGION_VMM) ? FT_TRACE_RF_VMM : 0) | (r->candidate ? FT_TRACE_RF_CANDIDATE : 0) |
                         (d->state == FT_DISC_DONE && r->unit >= 0 ? FT_TRACE_RF_WEIGHT : 0) |
                         (r->written ? FT_TRACE_RF_WRITTEN : 0) |
                         (r->changed || (d->iterations < 2 && r->changed_early) ? FT_TRACE_RF_CHANGED : 0) |
                         (r->freed ? FT_TRACE_RF_FREED : 0);
            ft_trace_put_u32(w, r->id);
            ft_trace_put_u64(w, r->base);
            ft_trace_put_u64(w, r->size);
            ft_trace_put_u32(w, f);
            ft_trace_put_u32(w, (uint32_t)(r->unit >= 0 ? r->unit : -1));
        }
        ft_trace_end(w);
        free(rv);
    }

    ft_trace_begin(w, FT_TRACE_KERNELS);
    ft_trace_put_u32(w, (uint32_t)d->n_kernels);
    for (size_t i = 0; i < d->n_kernels; i++) {
        ft_trace_put_str(w, d->kv[i]->name);
        ft_trace_put_u64(w, d->kv[i]->launches);
    }
    ft_trace_end(w);

    const record_t *rec = &d->last;
    ft_trace_begin(w, FT_TRACE_ITERATION);
    ft_trace_put_u32(w, (uint32_t)rec->n);
    for (size_t i = 0; i < rec->n; i++) {
        ft_trace_put_u32(w, rec->l[i].kernel);
        ft_trace_put_u32(w, rec->l[i].n_ids);
        for (uint32_t k = 0; k < rec->l[i].n_ids; k++)
            ft_trace_put_u32(w, rec->ids[rec->l[i].first_id + k] & ~ID_INDIRECT);
    }
    ft_trace_end(w);

    ft_trace_begin(w, FT_TRACE_UNITS);
    ft_trace_put_u32(w, (uint32_t)d->n_units);
    for (size_t i = 0; i < d->n_units; i++) {
        const ft_disc_unit_t *u = &d->units[i];
        ft_trace_put_str(w, u->name);
        ft_trace_put_u64(w, u->bytes);
        ft_trace_put_u32(w, u->first_launch);
        ft_trace_put_u32(w, u->last_launch);
        ft_trace_put_u32(w, (uint32_t)u->offload);
        ft_trace_put_u32(w, u->n_regions);
        for (uint32_t k = 0; k < u->n_regions; k++)
            ft_trace_put_u32(w, u->region_ids[k]);
    }
    ft_trace_end(w);

    if (d->state == FT_DISC_DONE) {
        lane_t *dl;
        HASH_FIND(hh, d->lanes, &d->deciding_lane, sizeof d->deciding_lane, dl);
        ft_trace_begin(w, FT_TRACE_TRACKING);
        ft_trace_put_u32(w, d->explicit_marks ? 3u : !d->track_set ? 0u : d->track_any_kernel ? 2u : 1u);
        ft_trace_put_u32(w, d->track_set ? d->track_start : 0);
        ft_trace_put_u32(w, d->track_set ? d->track_kernel : UINT32_MAX);
        ft_trace_put_u32(w, d->track_set ? d->track_region : UINT32_MAX);
        ft_trace_put_u64(w, d->track_starts);
        ft_trace_put_u64(w, dl != NULL ? dl->since_start : 0);
        ft_trace_put_u32(w, (uint32_t)d->track_lost_warned);
        ft_trace_end(w);
    }
    pthread_mutex_unlock(&d->lock);
}

/* --- saved profiles ---------------------------------------------------------------
 *
 * ft_disc_export writes down what ft_disc_track and the plan need of a finished
 * discovery; ft_disc_adopt takes it back in a later run of the same program, whose
 * regions have the same ids (the region table numbers allocations in order). Kernel
 * handles differ from run to run: the saved kernels are known by name, and each waits
 * under a placeholder key (SAVED_KEY) until ft_disc_bind_kernel sees its handle. */
#define SAVED_KEY (1ull << 63)

void ft_disc_saved_free(ft_disc_saved_t *s)
{
    if (s == NULL)
        return;
    for (uint32_t i = 0; s->kernels != NULL && i < s->n_kernels; i++)
        free(s->kernels[i]);
    free(s->kernels);
    free(s->regions);
    free(s->launch_kernel);
    free(s->launch_first);
    free(s->launch_n);
    free(s->ids);
    free(s->units);
    free(s->unit_ids);
    memset(s, 0, sizeof *s);
}

#define SAVED_FAIL(code, ...) do { snprintf(why, len, __VA_ARGS__); rc = (code); goto out; } while (0)

int ft_disc_export(ft_disc_t *d, ft_disc_saved_t *o, char *why, size_t len)
{
    memset(o, 0, sizeof *o);
    uint32_t *kmapi = NULL;
    int rc = 0;
    pthread_mutex_lock(&d->lock);
    const record_t *r = &d->last;
    if (d->state != FT_DISC_DONE)
        SAVED_FAIL(-EINVAL, "discovery is not done");
    if (!d->explicit_marks && !d->track_set)
        SAVED_FAIL(-EINVAL, "its passes are followed by each thread's own anchor, which a later run "
                            "cannot take over");
    for (size_t id = 0; id < d->n_rvec; id++) {
        rinfo_t *x = d->rvec[id];
        if (x == NULL || x->unit < 0)
            continue;
        if (!x->hashed)
            SAVED_FAIL(-EINVAL, "weight region %u has no content hash to check it by", x->id);
        o->n_regions++;
    }
    o->regions = calloc(o->n_regions ? o->n_regions : 1, sizeof *o->regions);
    kmapi = malloc((d->n_kernels ? d->n_kernels : 1) * sizeof *kmapi);
    o->kernels = calloc(d->n_kernels ? d->n_kernels : 1, sizeof *o->kernels);
    o->launch_kernel = malloc((r->n ? r->n : 1) * sizeof *o->launch_kernel);
    o->launch_first = malloc((r->n ? r->n : 1) * sizeof *o->launch_first);
    o->launch_n = malloc((r->n ? r->n : 1) * sizeof *o->launch_n);
    o->ids = malloc((r->n_ids ? r->n_ids : 1) * sizeof *o->ids);
    o->units = calloc(d->n_units ? d->n_units : 1, sizeof *o->units);
    size_t n_uids = 0;
    for (size_t j = 0; j < d->n_units; j++)
        n_uids += d->units[j].n_regions;
    o->unit_ids = malloc((n_uids ? n_uids : 1) * sizeof *o->unit_ids);
    if (!o->regions || !kmapi || !o->kernels || !o->launch_kernel || !o->launch_first || !o->launch_n ||
        !o->ids || !o->units || !o->unit_ids)
        SAVED_FAIL(-ENOMEM, "out of memory");
    uint32_t n = 0;
    for (size_t id = 0; id < d->n_rvec; id++) {
        rinfo_t *x = d->rvec[id];
        if (x != NULL && x->unit >= 0)
            o->regions[n++] = (ft_disc_saved_region_t){ x->id, x->size, x->hash, x->unit,
                                                        (uint32_t)x->shared, (uint32_t)x->direct };
    }
    for (size_t k = 0; k < d->n_kernels; k++)
        kmapi[k] = UINT32_MAX;
    for (size_t i = 0; i < r->n; i++) {
        uint32_t k = r->l[i].kernel;
        if (kmapi[k] == UINT32_MAX) {
            for (uint32_t j = 0; j < o->n_kernels; j++)
                if (strcmp(o->kernels[j], d->kv[k]->name) == 0)
                    SAVED_FAIL(-EINVAL, "two kernels of the pass are named %s", d->kv[k]->name);
            if ((o->kernels[o->n_kernels] = strdup(d->kv[k]->name)) == NULL)
                SAVED_FAIL(-ENOMEM, "out of memory");
            kmapi[k] = o->n_kernels++;
        }
        o->launch_kernel[i] = kmapi[k];
        o->launch_first[i] = o->n_ids;
        for (uint32_t j = 0; j < r->l[i].n_ids; j++) {
            uint32_t raw = r->ids[r->l[i].first_id + j];
            rinfo_t *x = rinfo_get(d, raw);
            if (x != NULL && x->unit >= 0)
                o->ids[o->n_ids++] = raw;
        }
        o->launch_n[i] = o->n_ids - o->launch_first[i];
    }
    o->n_launches = (uint32_t)r->n;
    for (size_t j = 0; j < d->n_units; j++) {
        const ft_disc_unit_t *u = &d->units[j];
        ft_disc_saved_unit_t *su = &o->units[j];
        snprintf(su->name, sizeof su->name, "%s", u->name);
        su->bytes = u->bytes;
        su->first_launch = u->first_launch;
        su->last_launch = u->last_launch;
        su->first_id = o->n_unit_ids;
        su->n_ids = u->n_regions;
        memcpy(o->unit_ids + o->n_unit_ids, u->region_ids, u->n_regions * sizeof *u->region_ids);
        o->n_unit_ids += u->n_regions;
    }
    o->n_units = (uint32_t)d->n_units;
    o->explicit_marks = d->explicit_marks ? (uint32_t)d->boundary_source : 0;
    o->track_kernel = d->track_set ? kmapi[d->track_kernel] : UINT32_MAX;
    o->track_region = d->track_set ? d->track_region : 0;
out:
    pthread_mutex_unlock(&d->lock);
    free(kmapi);
    if (rc != 0)
        ft_disc_saved_free(o);
    return rc;
}

static const ft_region_t *snap_find(const ft_region_t *v, long n, uint32_t id)
{
    for (long i = 0; i < n; i++)
        if (v[i].id == id)
            return &v[i];
    return NULL;
}

/* A saved profile keeps no pointers: where a tensor starts in a piece that stays on the
 * device (shared) is not known, so any pointer into such a piece also reaches the
 * piece after it, when a unit holds that one (ft_disc_region_follow from offset 0).
 * Exact where a layer's first weight starts in the piece, a load one layer early where
 * only the previous layer's last tensors are there (the next one's comes soon anyway).
 * A piece that stays in a unit needs none: the piece after it is its own unit's, or
 * begins with a tensor of its own (pieces_overrun would have kept it shared else). */
static void pieces_follow_adopted(ft_disc_t *d)
{
    size_t n;
    rinfo_t **v = pieces_sorted(d, NULL, &n);
    for (size_t i = 0; i < n; i++) {
        v[i]->pc_next = 0;
        v[i]->pc_max = 0;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        rinfo_t *x = v[i], *y = v[i + 1];
        if (x->unit >= 0 && x->shared && y->unit >= 0 && !y->shared && !(y->flags & FT_REGION_PIECE_FIRST) &&
            x->base + x->size == y->base)
            x->pc_next = y->id;
    }
    free(v);
}

int ft_disc_adopt(ft_disc_t *d, const ft_disc_saved_t *s, char *why, size_t len)
{
    int rc = 0;
    ft_region_t *snap = NULL;
    ft_disc_unit_t *units = NULL;
    uint32_t *uids = NULL, *kidx = NULL;
    pthread_mutex_lock(&d->lock);
    if (d->state == FT_DISC_DONE)
        SAVED_FAIL(-EALREADY, "discovery is done already");
    long ns = ft_regions_snapshot(d->regions, &snap);
    if (ns < 0)
        SAVED_FAIL(-ENOMEM, "out of memory");
    for (uint32_t i = 0; i < s->n_regions; i++) {
        const ft_region_t *g = snap_find(snap, ns, s->regions[i].id);
        if (g == NULL)
            SAVED_FAIL(-ESTALE, "allocation %u (a weight of %llu bytes) is not alive", s->regions[i].id,
                       (unsigned long long)s->regions[i].size);
        if (g->size != s->regions[i].size)
            SAVED_FAIL(-ESTALE, "allocation %u is %llu bytes, the profile's weight there %llu", g->id,
                       (unsigned long long)g->size, (unsigned long long)s->regions[i].size);
    }
    units = calloc(s->n_units ? s->n_units : 1, sizeof *units);
    uids = malloc((s->n_unit_ids ? s->n_unit_ids : 1) * sizeof *uids);
    kidx = malloc((s->n_kernels ? s->n_kernels : 1) * sizeof *kidx);
    if (units == NULL || uids == NULL || kidx == NULL)
        SAVED_FAIL(-ENOMEM, "out of memory");
    for (uint32_t k = 0; k < s->n_kernels; k++) {
        kinfo_t *found = NULL;
        for (size_t j = 0; j < d->n_kernels && found == NULL; j++)
            if (strcmp(d->kv[j]->name, s->kernels[k]) == 0)
                found = d->kv[j];
        if (found == NULL && (found = kinfo_get(d, SAVED_KEY | k, s->kernels[k])) == NULL)
            SAVED_FAIL(-ENOMEM, "out of memory");
        kidx[k] = found->idx;
    }
    /* From here on nothing fails: discovery's own results are replaced. */
    rinfo_t *x, *xt;
    HASH_ITER(hh, d->rmap, x, xt) {
        x->unit = -1;
        x->shared = x->direct = 0;
    }
    for (uint32_t i = 0; i < s->n_regions; i++) {
        const ft_disc_saved_region_t *sr = &s->regions[i];
        x = rinfo_add(d, snap_find(snap, ns, sr->id), 1);
        if (x == NULL)
            continue; /* out of memory: the weight stays resident (no unit knows it) */
        x->unit = sr->unit;
        x->shared = (int)sr->shared;
        x->direct = (int)sr->direct;
        x->hash = sr->hash;
        x->hashed = 1;
    }
    pieces_follow_adopted(d);
    d->last.n = d->last.n_ids = 0;
    for (uint32_t i = 0; i < s->n_launches; i++)
        if (rec_push_launch(&d->last, kidx[s->launch_kernel[i]], 0, s->ids + s->launch_first[i], NULL,
                            s->launch_n[i]))
            FT_WARN_CAPPED(1, "discovery: out of memory taking the saved pass");
    memcpy(uids, s->unit_ids, s->n_unit_ids * sizeof *uids);
    free(d->units);
    free(d->unit_ids);
    d->units = units;
    d->unit_ids = uids;
    d->n_units = s->n_units;
    d->weight_bytes = 0;
    for (uint32_t j = 0; j < s->n_units; j++) {
        ft_disc_unit_t *u = &units[j];
        const ft_disc_saved_unit_t *su = &s->units[j];
        snprintf(u->name, sizeof u->name, "%s", su->name);
        u->bytes = su->bytes;
        u->first_launch = su->first_launch;
        u->last_launch = su->last_launch;
        u->n_regions = su->n_ids;
        u->region_ids = uids + su->first_id;
        d->weight_bytes += u->bytes;
    }
    for (uint32_t j = 0; j < s->n_units; j++) {
        ft_disc_unit_t *u = &units[j];
        u->offload = (d->p.n_include == 0 || unit_matches_any(d, u, d->p.include, d->p.n_include)) &&
                     !unit_matches_any(d, u, d->p.exclude, d->p.n_exclude);
    }
    units = NULL;
    uids = NULL;
    d->explicit_marks = s->explicit_marks != 0;
    d->boundary_source = (int)s->explicit_marks;
    lane_t *l, *lt;
    HASH_ITER(hh, d->lanes, l, lt) l->track_pos = -1;
    choose_track_start(d);
    __atomic_store_n(&d->adopted, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&d->state, FT_DISC_DONE, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&d->lock);
    free(snap);
    free(units);
    free(uids);
    free(kidx);
    return rc;
}

void ft_disc_bind_kernel(ft_disc_t *d, uint64_t key, const char *name)
{
    if (!__atomic_load_n(&d->adopted, __ATOMIC_ACQUIRE) || name == NULL)
        return;
    pthread_mutex_lock(&d->lock);
    kinfo_t *k;
    HASH_FIND(hh, d->kmap, &key, sizeof key, k);
    for (size_t j = 0; k == NULL && j < d->n_kernels; j++) {
        kinfo_t *c = d->kv[j];
        if ((c->key & SAVED_KEY) && strcmp(c->name, name) == 0) {
            HASH_DEL(d->kmap, c);
            c->key = key;
            HASH_ADD(hh, d->kmap, key, sizeof c->key, c);
            k = c;
        }
    }
    pthread_mutex_unlock(&d->lock);
}

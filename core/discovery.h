/* discovery.h - the discovery phase: learn, from the launches alone, where an
 * iteration begins, which regions are weights, and how they group into units.
 *
 * Owns: the per-region and per-kernel observations, the iteration boundary detector,
 * the launch record of the last complete iteration, and the units built from it.
 *
 * The shim feeds it events in program order (under one lock: discovery is allowed to
 * be slower than inference) and asks it, at each iteration boundary, to hash the
 * candidate regions through a callback (only the shim may touch CUDA).
 *
 * Iterations are detected per lane (application thread): each launch is reduced to a
 * pair (kernel, first region alive at the first launch that it touches). A pair that
 * recurs at a period that the following launches confirm is the wrap-around; the
 * pass is then aligned on the launch touching the earliest-allocated region (see
 * confirm_period), whose pair is the lane's anchor from then on. Until a lane is
 * anchored, the candidates are hashed at launches after host synchronisations (see
 * detector_snapshot): one whose content moved at two of them (an activation segment
 * a caching allocator reuses) leaves the pairs, and the detectors start again. An
 * explicit mark (ft_disc_mark, or a kernel matching the marker glob) replaces the
 * detector. The first lane to complete `iters` iterations decides.
 *
 * Weights: regions alive at the first launch, touched by a kernel in the last
 * complete iteration, never the target of a copy or memset since, and with the same
 * content hash at the first launch and at every boundary.
 *
 * Units: the launch sequence of a pass is cut into the period at which it repeats
 * (the layers), with what precedes the repetition (embeddings) and what follows it
 * (final norm, head) as units of their own; each weight joins the unit of its most
 * specific touch. Units are named after the innermost NVTX range enclosing their
 * launches, else unit.N. docs/discovery.md explains each rule.
 */
#ifndef FT_DISCOVERY_H
#define FT_DISCOVERY_H

#include <stddef.h>
#include <stdint.h>

#include "core/regions.h"
#include "core/scan.h"
#include "core/trace.h"

typedef struct ft_disc ft_disc_t;

/* One region to hash: the callback fills hash, or sets failed (the region is then
 * treated as changed). */
typedef struct {
    uint64_t base, size;
    uint64_t hash;
    int failed;
} ft_disc_hash_req_t;

/* Content hashes of n regions (at most FT_DISC_HASH_BATCH) on the device, asked for
 * together at each snapshot so that the shim can compute them behind one sync. */
#define FT_DISC_HASH_BATCH 256
typedef void (*ft_disc_hash_fn)(void *ctx, ft_disc_hash_req_t *req, size_t n);

typedef struct {
    int iters;                      /* complete iterations to observe (>= 1) */
    const char *marker_glob;        /* kernel-name glob marking a boundary; NULL/"" none */
    ft_disc_hash_fn hash;           /* NULL: no content check */
    void *hash_ctx;
    /* Unit selection (FT_INCLUDE_PATTERNS / FT_EXCLUDE_PATTERNS): "<glob>" or
     * "name:<glob>" on the unit name, "kernel:<glob>" on any kernel of its range,
     * "size:>=N" / "size:<N" on its bytes, N a byte size as core/size.h reads it
     * ("16MiB", "1G"); a size that does not parse matches no unit. */
    char *const *include;
    size_t n_include;
    char *const *exclude;
    size_t n_exclude;
    /* A piece of an allocation served in pieces (FT_REGION_PIECE) at base: the furthest
     * end of the copies and sets that began in it (the storage a copy filled, as a
     * loader fills each tensor), 0 none known. NULL: none known of any. */
    uint64_t (*piece_span)(uint64_t base);
} ft_disc_params_t;

typedef enum {
    FT_DISC_WAITING = 0,   /* no launch yet */
    FT_DISC_OBSERVING,     /* launches seen, iterations being counted */
    FT_DISC_DONE,          /* units built */
} ft_disc_state_t;

ft_disc_t *ft_disc_new(ft_regions_t *regions, const ft_disc_params_t *params);
void ft_disc_free(ft_disc_t *d);

/* What ft_disc_launch returns, as bits. */
enum {
    FT_DISC_NEW_PASS = 1,  /* the launch began a new iteration */
    FT_DISC_PASS_WORK = 2, /* it also did a pass's work (the weights' content snapshot at
                            * the first launch, a boundary or half-way through a pass):
                            * a per-pass cost, not a per-launch one */
};

/* A kernel launch by lane (the calling thread's id) that touched the regions in set
 * (from ft_scan_bytes). kernel is the handle's identity, name its name. Returns
 * FT_DISC_* bits, 0 for a launch that did neither. */
int ft_disc_launch(ft_disc_t *d, uint64_t lane, uint64_t kernel, const char *name,
                   const ft_scan_set_t *set);

/* The pass work done so far (FT_DISC_PASS_WORK): how many times, and the host time
 * it took in all (ns). */
void ft_disc_pass_work(ft_disc_t *d, uint64_t *count, uint64_t *ns);

/* A copy or memset wrote into the regions in set. */
void ft_disc_write(ft_disc_t *d, const ft_scan_set_t *set);

/* An NVTX range opened / closed on lane (nvtxRangePush / nvtxRangePop): units are
 * named after the innermost range enclosing their launches. */
void ft_disc_range_push(ft_disc_t *d, uint64_t lane, const char *name);
void ft_disc_range_pop(ft_disc_t *d, uint64_t lane);

/* The host waited for the device (a synchronize call, a synchronous copy back):
 * a hint of where a pass ends, and, until a lane is anchored, a point at which the
 * next launch may hash the candidates to find those that vary. */
void ft_disc_sync(ft_disc_t *d, uint64_t lane);

/* An explicit iteration boundary before lane's next launch (ft_iteration_mark). */
void ft_disc_mark(ft_disc_t *d, uint64_t lane);

/* A region was freed: it can no longer be a weight. */
void ft_disc_region_freed(ft_disc_t *d, uint32_t id);

/* After DONE, region id was freed: when it is a unit's weight, its bytes count as gone.
 * 1 when this free brings the units' weights gone to FT_DISC_GONE_PERCENT of their bytes
 * (once per discovery: the program has freed the model the units were found in); 0
 * otherwise. *gone and *total: the weight bytes freed since DONE, and all of them. */
#define FT_DISC_GONE_PERCENT 90
int ft_disc_weight_freed(ft_disc_t *d, uint32_t id, uint64_t *gone, uint64_t *total);

/* Discovery from scratch, for the model the program loads next (the shim calls it once
 * nothing uses the units any more): the units, passes and freed weights go, as at a
 * restart, and the restarts allowed start again; the next launch begins observing with
 * the regions alive then as candidates. Kernels and NVTX ranges stay. */
void ft_disc_reload(ft_disc_t *d);

ft_disc_state_t ft_disc_state(ft_disc_t *d);
int ft_disc_iterations(ft_disc_t *d);

/* What discovery has seen so far, for the exit report: the most complete iterations
 * of one lane (since the last restart) and how many it needs, its restarts (passes
 * that held no weight), launches, and launches whose kernel matched the marker glob. */
typedef struct {
    int iterations, iters_wanted, restarts;
    int reloads;                /* ft_disc_reload's discoveries from scratch */
    uint64_t launches, marker_hits;
    /* After DONE: passes begun, and launches off the record put back on it. */
    uint64_t track_starts, track_resyncs;
} ft_disc_status_t;
void ft_disc_status(ft_disc_t *d, ft_disc_status_t *out);

/* After DONE, following each lane's passes (profiling): where this launch of the lane
 * falls in its pass, 0 when it begins one (the lane's anchor recurred, or an explicit
 * mark preceded it); -1 before DONE, for a lane whose passes were never found, or
 * before a pass began. Positions are those of the units' first_launch / last_launch.
 * *expected (may be NULL) is set to 1 when the recorded pass launched this kernel at
 * that position: a pass whose launches differ (a prefill where discovery saw decode
 * steps) can be told from one that follows the record; to 2 when this launch touched a
 * weight as only the recorded pass's launch at the returned position did (that kernel
 * at that pointer) and either that position is the count's or the record has another
 * kernel at the count (the lane then moves there): its position is sure. Touches flagged unsure in set
 * are left out. *weightless (may be NULL) is set to 1 when the kernel ran in the
 * recorded pass and touched no weight there through its own arguments: a weight address
 * in its arguments later is a stale one (PyTorch's cat kernel in every layer, whose
 * unused metadata slots hold what the stack left). */
long ft_disc_track(ft_disc_t *d, uint64_t lane, uint64_t kernel, const ft_scan_set_t *set,
                   int *expected, int *weightless);
/* A region's address range by id (as listed in a unit). 0, or -1 when unknown. */
int ft_disc_region(ft_disc_t *d, uint32_t id, uint64_t *base, uint64_t *size);

/* The furthest offset into region id at which a launch of the recorded pass held a
 * sure pointer (the last weight's start, for a region of weights the pass uses): a
 * pointer past it found later is no weight's start. 0, or -1 when the region is
 * unknown or the pass came without its pointers (a saved profile's). */
/* Region id is a piece of an allocation served in pieces (FT_REGION_PIECE) in which
 * the last tensor starting runs on into pieces of its own: a pointer at or past *off
 * into it reaches piece *next too, and so *next's unit. 1 when so, 0 otherwise. */
int ft_disc_region_follow(ft_disc_t *d, uint32_t id, uint64_t *off, uint32_t *next);
int ft_disc_region_off_max(ft_disc_t *d, uint32_t id, uint64_t *off);


/* 1 when launches outside the range of the region's unit touch it too, in the
 * recorded pass (after DONE): the residency engine keeps such a weight resident. */
int ft_disc_region_shared(ft_disc_t *d, uint32_t id);

/* 1 when the recorded pass reached the weight only through pointer arrays (never
 * through a launch's own arguments): the residency guard, which does not read
 * pointer arrays, could not load it, so the engine keeps it resident. */
int ft_disc_region_indirect_only(ft_disc_t *d, uint32_t id);
/* Whether a launch discovery observed touched region id (since its last restart; an
 * activation's stays), a copy wrote it, or a unit holds it: 0 for a region no observed
 * call used (the room of a pool the program has not carved yet). */
int ft_disc_region_touched(ft_disc_t *d, uint32_t id);

/* Launches in the recorded pass. */
size_t ft_disc_pass_length(ft_disc_t *d);
/* After DONE: the name of the kernel the recorded pass launched at pos; NULL past it. */
const char *ft_disc_pass_kernel(ft_disc_t *d, long pos);
/* After DONE: the recorded position at which followed passes begin (ft_disc_track's
 * position 0 of a pass is this one; positions wrap at the pass length). */
uint32_t ft_disc_track_start(ft_disc_t *d);

/* Results, valid once DONE. */
typedef struct {
    char name[64];
    uint64_t bytes;
    uint32_t first_launch, last_launch; /* positions in the iteration's launch record */
    uint32_t n_regions;
    const uint32_t *region_ids;
    int offload;                        /* selected by the include/exclude patterns */
} ft_disc_unit_t;

size_t ft_disc_unit_count(ft_disc_t *d);
const ft_disc_unit_t *ft_disc_unit(ft_disc_t *d, size_t i);
uint64_t ft_disc_weight_bytes(ft_disc_t *d);

/* Appends the discovery records (DISCOVERY, REGIONS, KERNELS, ITERATION, UNITS) to a
 * trace; see docs/trace-format.md. */
void ft_disc_trace(ft_disc_t *d, ft_trace_writer_t *w);

/* Whether a unit (name, its kernels' names, bytes) is selected by the patterns; the
 * matcher behind the params' include/exclude, exposed for tests. */
int ft_disc_pattern_match(const char *pattern, const char *unit_name,
                          const char *const *kernel_names, size_t n_kernels, uint64_t bytes);

/* --- saved profiles (FT_PROFILE_DIR; shim/savedprof.c, core/savedprof.c) ---------
 *
 * What a later run of the same program needs to follow its passes without
 * discovering them: the weights (by region id, which the region table hands out in
 * allocation order, with their sizes, content hashes and flags), the recorded pass
 * (kernel names in order, the weights each launch touched), the units, and how passes
 * are followed (the pass start, or explicit marks). Activations are left out: their
 * ids tell nothing a later run can use. */
typedef struct {
    uint32_t id;
    uint64_t size, hash;
    int32_t unit;                       /* index in units */
    uint32_t shared, direct;
} ft_disc_saved_region_t;

typedef struct {
    char name[64];
    uint64_t bytes;
    uint32_t first_launch, last_launch, first_id, n_ids; /* ids: unit_ids[first_id ..] */
} ft_disc_saved_unit_t;

typedef struct {
    uint32_t n_regions;
    ft_disc_saved_region_t *regions;    /* sorted by id */
    uint32_t n_kernels;
    char **kernels;                     /* the pass's kernel names, each once */
    uint32_t n_launches;
    uint32_t *launch_kernel;            /* per launch: index in kernels */
    uint32_t *launch_first, *launch_n;  /* per launch: its weights in ids */
    uint32_t n_ids;
    uint32_t *ids;                      /* region ids; the top bit: through a pointer array */
    uint32_t n_units;
    ft_disc_saved_unit_t *units;
    uint32_t n_unit_ids;
    uint32_t *unit_ids;
    uint32_t explicit_marks;            /* passes are marked, not found (0, 1 or 2: the source) */
    uint32_t track_kernel, track_region;/* the pass start (kernel index, region id), when !explicit_marks */
} ft_disc_saved_t;

/* After DONE: what a saved profile keeps of discovery, into *out (allocated; free with
 * ft_disc_saved_free). 0; -ENOMEM; -EINVAL with a reason in why when the result cannot
 * be followed by a later run (passes followed by the lanes' own anchors, a weight
 * without a content hash, two kernels of the pass with one name). */
int ft_disc_export(ft_disc_t *d, ft_disc_saved_t *out, char *why, size_t len);
void ft_disc_saved_free(ft_disc_saved_t *s);
/* Discovery takes the saved result as its own (state DONE from now on), with the
 * regions of this run that have the saved ids: every one must be alive with the saved
 * size. The unit selection (include/exclude patterns) is this run's. 0; -ESTALE with the
 * difference in why (nothing changed); -ENOMEM; -EALREADY when DONE already. */
int ft_disc_adopt(ft_disc_t *d, const ft_disc_saved_t *s, char *why, size_t len);
/* After an adoption, a kernel handle seen for the first time (its name): the saved
 * kernel of that name is this handle from now on. Cheap when nothing was adopted. */
void ft_disc_bind_kernel(ft_disc_t *d, uint64_t key, const char *name);

#endif

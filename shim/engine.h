/* engine.h - what the engine's files share: the types of the state that crosses
 * files, and each file's functions and variables that others reach.
 *
 * The engine is the part of libflextensor.so between the interposed entry points
 * (hooks_alloc.c, hooks_launch.c, hooks_copy.c) and CUDA (cuda.c). Calls go down:
 *
 *   entry points  hooks_alloc.c hooks_launch.c hooks_copy.c
 *   engine        engine.c (the phase and its moves, enter/leave, standing down)
 *   parts         observe.c profiling.c residency.c guard.c spill.c budget.c capture.c
 *                 reload.c (the plan's weights freed: back to discovery)
 *                 timing.c (offload timing, hooked into residency.c and guard.c)
 *                 control.c (the runtime control API, entered from the program too)
 *   mechanisms    vmm.c hoststore.c checksum.c device.c, then cuda.c
 *
 * (report.c reads everything, at exit and for the control API.) A part reports the
 * end of its work by moving the phase (engine_to) and reads it (engine_state); a
 * mechanism neither calls a part nor reads the phase: what it needs from above comes
 * down as a callback (device_setup's stand-down, hash_regions's hash_source_t,
 * vmm_alloc's vmm_place_t, vmm_free's forget). Each file's first comment says what it
 * owns, what it may touch and which lock guards it.
 *
 * The variables shared between files, each declared below under its owner's name:
 *   engine.c     engine_state_word (the phase; written by engine_to, engine_spill),
 *                regions, disc, cfgp, log_diagnostics (written once, by
 *                ft_hooks_init), engine_held (the calling thread's)
 *   budget.c     admitting (also spill.c, ft_hook_rt_malloc), releasing
 *   checksum.c   ck (set up once)
 *   control.c    control_waiting (res.lock; read by guard.c)
 *   cuda.c       drv, ev (resolved once)
 *   hooks_launch.c  launch_did_once (the thread's; also observe.c)
 *   profiling.c  plan (plan.out.resident also budget.c), prof, bw, bw_device_bytes,
 *                tag_pushed (the thread's; cleared by engine_leave)
 *   residency.c  res (its counters and regions also budget.c, guard.c), res_start_failed
 *   reload.c     reload_wanted (atomic; read by engine_enter and budget_admit)
 *   timing.c     timing_enabled (res.lock to write; read relaxed)
 *   spill.c      spill_ns, spill_bytes (also residency.c), spill_faults,
 *                spill_evictions, spill_limit, spill_placement (constant)
 *   vmm.c        vmm_pad
 * Where another file writes one too, its declaration names the writer. Everything
 * else is static.
 *
 * Declared hidden (the pragma below), so that the other files reach these symbols
 * directly rather than through the GOT; the build hides them anyway
 * (-fvisibility=hidden), and tests/scenario/exports.sh checks the export list. */
#ifndef FT_SHIM_ENGINE_H
#define FT_SHIM_ENGINE_H

#include "shim/shim.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/hash.h"
#include "config/config.h"
#include "core/discovery.h"
#include "core/plan.h"
#include "core/profile.h"
#include "core/log.h"
#include "core/regions.h"
#include "core/scan.h"
#include "core/checksum.h"
#include "core/checksum_ptx.h"
#include "core/trace.h"
#include "core/vaspace.h"
#include "core/residency.h"
#include "core/budget.h"
#include "core/spill.h"
#include "shim/flextensor.h"

#pragma GCC visibility push(hidden)


typedef CUresult (*kernel_param_info_fn)(CUkernel, size_t, size_t *, size_t *);
typedef CUresult (*func_param_info_fn)(CUfunction, size_t, size_t *, size_t *);
typedef CUresult (*kernel_name_fn)(const char **, CUkernel);
typedef CUresult (*func_name_fn)(const char **, CUfunction);
typedef cudaError_t (*get_kernel_fn)(cudaKernel_t *, const void *);

typedef struct {
    kernel_param_info_fn kernel_param_info;
    func_param_info_fn func_param_info;
    /* A function handed out partly loaded (lazy loading) is loaded before its
     * parameters are asked again (observe.c). */
    CUresult (*func_is_loaded)(CUfunctionLoadingState *, CUfunction);
    CUresult (*func_load)(CUfunction);
    kernel_name_fn kernel_name;
    func_name_fn func_name;
    get_kernel_fn get_kernel;
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    /* The driver's query: the runtime's may leave cudaErrorNotReady for the
     * application's next cudaGetLastError. */
    CUresult (*event_query)(CUevent);
    CUresult (*can_access_peer)(int *, CUdevice, CUdevice);
    CUresult (*device_count)(int *);
    CUresult (*device_total_mem)(size_t *, CUdevice);
    /* Stream capture (capture.c): a stream's capture, the thread's capture mode. */
    CUresult (*capture_info)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *, const CUgraphNode **,
                             const CUgraphEdgeData **, size_t *);
    CUresult (*exchange_mode)(CUstreamCaptureMode *);
    /* Cutting a captured graph into segments (capture.c). */
    CUresult (*graph_get_nodes)(CUgraph, CUgraphNode *, size_t *);
    CUresult (*graph_clone)(CUgraph *, CUgraph);
    CUresult (*graph_find_in_clone)(CUgraphNode *, CUgraphNode, CUgraph);
    CUresult (*graph_destroy_node)(CUgraphNode);
    CUresult (*graph_destroy)(CUgraph);
    CUresult (*graph_instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*graph_exec_destroy)(CUgraphExec);
    CUresult (*graph_node_type)(CUgraphNode, CUgraphNodeType *);
    CUresult (*graph_exec_child_set)(CUgraphExec, CUgraphNode, CUgraph);
} drv_fns_t;

/* A virtual-memory backed allocation. */
typedef struct {
    uint64_t va;
    size_t size;              /* rounded to the granularity */
    size_t asked;             /* the size the application asked for */
    CUmemGenericAllocationHandle handle;
    /* FT_SPILL, before the plan: the allocation lives in host memory (`host`, no
     * physical memory mapped) while `spilled`; `stamp` orders the last touches. */
    int spilled;
    void *host;
    uint64_t stamp;
    /* Discovery: the checksum of its `asked` bytes, taken on the device as it was
     * spilled or on the host by a snapshot since (spill_host_copy, which writes into
     * `host`, clears it). */
    int sum_ok;
    uint64_t sum;
    /* A streamed region split (res_split_tail): from tail_off on, physical memory of its
     * own, mapped for good; `handle` maps the part before it, the unit's. 0: not split.
     * A split moved down later maps the part it adds with an allocation of its own:
     * tail_h[i] is mapped from tail_at[i] to tail_at[i - 1] (the region's end for i =
     * 0); tail_off is tail_at[n_tails - 1]. */
    uint64_t tail_off;
#define TAILS 4
    CUmemGenericAllocationHandle tail_h[TAILS];
    uint64_t tail_at[TAILS];
    int n_tails;
    /* One piece of an allocation served in pieces (vmm_alloc's `pieced`): `pieces` on
     * the first is how many, 0 on the others. FT_SPILL moves the allocation whole: a
     * kernel reads a tensor on past its piece. */
    int piece;
    uint32_t pieces;
    /* A piece: the furthest end of the copies into the allocation that began in it
     * (atomic; vmm_note_copy), 0 none: discovery's extents of the tensors there. */
    uint64_t copy_end;
    /* A piece: the driver mapping that begins at it covers map_n pieces, all of
     * `handle`'s allocation (phys.c: one may back a run of pieces); 0: it lies inside
     * an earlier piece's mapping, and is unmapped with it. */
    uint32_t map_n;
    /* The program reserved the address range and mapped it (progmap.c): freeing it
     * leaves the range reserved, the program's to free. */
    int external;
    /* A piece backed by host-located memory (`handle` is that memory's): the room of
     * the program's pool at the plan (vmm_room_to_host), or, before the plan, the part
     * of an allocation served in pieces that the budget could not hold (alloc_pieces).
     * host_pieced: its allocation has or had such pieces. */
    int on_host, host_pieced;
    UT_hash_handle hh;
} vmm_t;

/* What vmm_alloc asks of the caller's placement (FT_SPILL's: spill_placement): over()
 * whether len bytes start in host memory (1) or are mapped (0; counted as held from
 * then on, in *admitted); placed() counts v once it is in the table, where it started
 * (in_host) given apart: once in the table, another thread's FT_SPILL may already be
 * moving it. */
typedef struct {
    int (*over)(size_t len, uint64_t *admitted);
    void (*placed)(vmm_t *v, int in_host, uint64_t *admitted);
    /* len bytes mapped whatever the budget (an allocation served in pieces): room made
     * for them as far as it can be; the bytes counted in `admitting`. */
    uint64_t (*on_device)(size_t len);
    /* Before: by how much len bytes more would take what is held past the budget
     * (an allocation served in pieces puts that much in host-located memory, where the
     * device has it, and asks on_device for the rest only). */
    uint64_t (*over_budget)(size_t len);
    /* The bytes of such an allocation put in host-located memory, counted in
     * `admitting` with on_device's until the region is tracked (host_room_bytes takes
     * them off the device's count). */
    void (*admit_host)(uint64_t bytes);
} vmm_place_t;

/* The plan chosen at the end of profiling (planning only: the residency engine that
 * carries it out comes next). */
typedef struct {
    int made, rc;
    ft_plan_input_t in;
    ft_plan_t out;
    uint64_t min_budget;
    uint64_t weight_bytes;    /* every unit's regions, in whole granules where mapped */
    /* The room of the program's pools the switch moves to host memory (left out of the
     * plan's non-weight memory; vmm_room_to_host). */
    uint64_t room_bytes;
} plan_state_t;

/* The runtime's event calls, for FlexTensor's own timing and ordering (cuda.c's ev):
 * resolved when profiling starts (events_resolve), used by profiling, the residency
 * engine and FT_SPILL's moves from then on. */
typedef cudaError_t (*event_create_fn)(cudaEvent_t *, unsigned int);
typedef cudaError_t (*event_record_fn)(cudaEvent_t, cudaStream_t);
typedef cudaError_t (*event_sync_fn)(cudaEvent_t);
typedef cudaError_t (*event_elapsed_fn)(float *, cudaEvent_t, cudaEvent_t);
typedef cudaError_t (*stream_wait_fn)(cudaStream_t, cudaEvent_t, unsigned int);
typedef struct {
    event_create_fn create;
    event_record_fn record;
    event_sync_fn sync;
    event_elapsed_fn elapsed;
    stream_wait_fn wait;
} events_t;

/* Profiling: CUDA events recorded before each unit's first launch and at the start of
 * the next pass, on the launching stream; read when a pass ends (a synchronisation,
 * allowed in this phase). The deciding lane's passes only (ft_disc_track). */
typedef struct {
    pthread_mutex_t lock;     /* launches of the deciding lane only, but the exit
                                 report may read while a launch writes */
    ft_prof_t *prof;
    size_t n;                 /* units */
    uint32_t *first;          /* each unit's first launch position in a pass */
    cudaEvent_t *ev;          /* n + 1: the last one marks the next pass's start */
    int *seen;                /* per unit: its event was recorded in this pass */
    /* CUPTI activity timing (ft_cupti_timing_*): the kernels of a profiled pass carry
     * the tag pass_seq << 20 | (unit + 1); unit times come from their GPU timestamps
     * when every unit has some, else from the events. */
    int cupti_timing;
    uint64_t pass_seq;
    int cur_unit;
    /* Per unit, FT_SPILL's moves during the pass (their device time at the measured
     * bandwidth, ns): synchronous, they stall the pass, and are taken out of the unit's
     * time (the plan would otherwise see them as compute). */
    uint64_t *moves_ns;
    uint64_t moves_out_ns;    /* all taken out, over the passes counted */
    ft_cupti_kernel_t *kern;
    size_t kern_cap;
    unsigned cupti_passes;    /* passes timed from activity records */
    int in_pass;
    uint64_t lane;            /* the thread whose pass is being timed */
    ft_prof_quiet_t quiet;    /* other lanes' pass starts meanwhile (core/profile.h) */
    int off_record;           /* consecutive passes dropped for not following the record */
    unsigned epoch;           /* suspension epoch at the pass's start */
} prof_state_t;

/* FlexTensor's own call of a runtime entry point: the real function, or, inside a
 * driver hook once the application's profiler holds CUPTI, a stand-in of the same
 * signature made of driver calls on FlexTensor's own-call thread, where it has one
 * (cuda.c, "own calls inside a driver hook"). */
#define REAL(name) ((name##_fn_t)own_real(FT_FN_##name))
void *own_driver_flavour(ft_shim_fn_t fn);
/* A runtime entry point for FlexTensor's own call: the process's runtime's, else a
 * stand-in made of driver calls (cuda.c, "without the runtime"), else NULL. By name,
 * or by entry point. */
void *own_rt(const char *name);
void *own_rt_fn(ft_shim_fn_t fn);
int own_in_driver_hook(void);
static inline void *own_real(ft_shim_fn_t fn)
{
    if (__builtin_expect(ft_driver_hook_depth > 0, 0) && own_in_driver_hook()) {
        void *p = own_driver_flavour(fn);
        if (p != NULL)
            return p;
    }
    return own_rt_fn(fn);
}

/* The kinds of one-time work inside a launch (once_charge, hooks_launch.c). */
enum { ONCE_KERNEL, ONCE_PEEK, ONCE_COUNT };

/* Copy bandwidth the plan will get, measured on pinned host memory as the residency
 * engine will use: host-to-device and device-to-host alone, then both at once on two
 * streams. GB/s, 0 when not measured. */
typedef struct {
    double h2d, d2h, h2d_both, d2h_both;
    double latency_us;        /* of a small host-to-device copy, for the plan */
    size_t bytes;
} bw_t;

/* The residency engine's state (residency.c). */
#define STEP_RING 8
#define STEP_SAMPLES 1024     /* the latest ones, for the median */

typedef struct {
    uint64_t va, size;        /* the region */
    size_t len;               /* mapped length (granularity) */
    void *host;               /* its bytes while unloaded */
    int unit;
    uint32_t id;              /* in the region table */
    int mapping;              /* mapped by load_unit, its copy not issued yet */
    uint64_t seen;            /* the furthest offset discovery saw a pointer at
                                 (ft_disc_region_off_max): res_split_tail's bound */
    void *host_dev_of;        /* the host store host_dev was looked up for */
    uint64_t host_dev;        /* its device address (0: none; residency.c host_dev_ptr) */
    int handed;               /* a leaving unit's region whose physical memory a hand-over gave
                                 the unit coming in (the others are released by its tail) */
} res_region_t;

#define USE_STREAMS 8
#define MISS_LOG 32

typedef struct {
    int first, n;             /* its regions in res.regions */
    int loaded;
    uint64_t stamp;           /* load order, for least-recently-loaded */
    /* Recorded behind every call that touched it, one event per stream that did (an
     * event re-recorded on another stream would forget the first stream's calls);
     * past USE_STREAMS streams, use_overflow makes an eviction wait for the device. */
    cudaEvent_t used[USE_STREAMS];
    cudaStream_t used_on[USE_STREAMS];
    int n_used, use_overflow;
    cudaEvent_t ready;        /* recorded behind its load's copies */
    int ready_recorded;
    cudaStream_t waited;      /* a stream already waiting on `ready` since the load */
    int waited_valid;
    uint32_t first_launch;    /* where its range starts in a pass */
    uint32_t last_launch;     /* and ends */
    uint64_t uses;            /* `used` recordings, to tell a stale checksum */
    /* The checksum issued behind its last launch of a pass (checksum_issue), ready
     * when ck_done has completed and still valid while uses == ck_uses. */
    cudaEvent_t ck_done;
    int ck_pending;
    int ck_back;              /* its copy back, when changed, follows it (a hand-over's) */
    uint64_t ck_uses;
    int touched_since_load;   /* its first touch after a load prefetches what follows */
    /* The guarded call that last touched it (guard.c's count of calls, res.lock): no
     * load evicts it while that call is not enqueued. */
    uint64_t touched_in;
    int pinned;               /* changed too often, or loaded too often for stale
                                 addresses: never evicted once loaded again */
    int stale_misses;         /* loads (misses) for touches the guard judged stale */
    /* Where those touches fell (guard.c): one region's id and the lowest pointer into
     * it; stale_spread when they fell in several regions or at no known pointer. A
     * unit's stale touches all in one region past its first granule split that region
     * there instead of keeping the unit on the device (pin_stale_unit). */
    uint32_t stale_region;
    uint64_t stale_lo;
    int stale_spread, stale_split_tried;
    /* For the warning when it is kept: the regions they fell in (the first 4 apart), how
     * many at no known pointer, the first one's offset into its region and kernel. */
    uint32_t stale_ids[4];
    int stale_n_ids, stale_unknown;
    uint64_t stale_first_off;
    char stale_kernel[64];
    int pin_refused;          /* pinning it for them found no resident unit to stream instead */
    int unstreamable;         /* resident, and demote_for found it cannot stream */
    int partial;              /* its last load could not map every region (load_unit) */
    int demoted;              /* planned resident, made to stream by demote_for */
    uint64_t bytes;           /* mapped bytes of its regions */
    /* The device checksum of its bytes as the host store holds them (ck below);
     * ref_valid 0: not known, every eviction writes back. */
    uint64_t ref;
    int ref_valid;
    unsigned changes;         /* evictions that found it changed */
    int shared;               /* its host copy is FT_SHM's shared segment (read-only here) */
    /* In a move of the prefetching thread (mover.c), leaving its slot or coming in: set
     * and cleared under res.lock; meanwhile the mover alone reads or writes the unit,
     * and a call that touches it waits for the move (mover_settle). */
    int moving;
} res_unit_t;

/* A piece of an allocation served in pieces whose last tensor runs on into pieces of
 * another unit (ft_disc_region_follow): a pointer at or past `from` touches the piece
 * `next`, at `at`, too. next 0: none. */
typedef struct {
    uint32_t next;
    uint64_t from, at;
} res_follow_t;

typedef struct {
    pthread_mutex_t lock;     /* application threads launch concurrently */
    res_region_t *regions;
    int n_regions;
    int *by_id;               /* region id -> index in regions, -1: not streamed */
    uint32_t n_ids;
    res_follow_t *follow;     /* by region id, n_ids of them; NULL: no piece has one */
    res_unit_t *units;
    int n_units, slots, loaded;
    uint64_t switches;        /* plans switched to: a cut graph's segments are a plan's */
    uint64_t clock;
    uint64_t loads, unloads, copied_in_bytes, prefetches, misses;
    uint64_t moves;           /* prefetch loads the prefetching thread made (mover.c) */
    uint64_t handovers;       /* of those, hand-overs of the leaver's memory (residency.c) */
    uint64_t ho_refused[5];   /* moves that were not, by reason (HO_*) */
    /* The application's waits for the mover (mover.c), by MOVER_WAIT_*. */
    uint64_t ns_mover_wait[4], mover_waits[4];
    uint64_t short_evictions, short_failed; /* loads the device had no memory for: units
                                             * made to leave for them; loads given up */
    /* Going over the slots: loads a call needed with no slot to free (load_unit); the
     * guarded calls that made them, and the most units beyond the slots after one
     * (guard.c); unloads, beyond the one a load needs, that brought the count back
     * within the slots (res_shed, load_unit). */
    uint64_t over_loads, over_calls, shed;
    uint64_t stale_pins;      /* units kept on the device for their stale touches (guard.c) */
    uint64_t graph_pins;      /* units kept on the device for a graph reading them all over (capture.c) */
    uint64_t stale_splits, stale_split_bytes; /* regions split where their units' stale
                                 touches fell instead, and the bytes kept so (guard.c) */
    uint64_t off_record;      /* times a lane's pass left the record (guard.c) */
    uint64_t skipped_ends;    /* units whose last launch a weight put the pass past: checksums there (guard.c) */
    uint64_t splits, split_bytes; /* regions split, and the bytes kept on the device past
                                     their split (res_split_tail) */
    int split_hold;           /* a split since the last call was enqueued: hold the budget */
    int over_most;
    uint64_t written_back;    /* unloads that copied the unit back (changed or unproven) */
    uint64_t host_copies;     /* copies and sets served on a host store (res_host_copy) */
    /* The first misses, for the trace: what missed, and where the pass was. */
    struct miss {
        char kernel[96];
        int unit, off_script;
        uint64_t pass;
        long pos;
    } miss_log[MISS_LOG];
    int n_miss_log;
    /* Unsure touches of units not loaded, left alone (res_touch); FT_STRICT_GUARD loads
     * them as misses instead. */
    uint64_t unsure_skipped;
    uint64_t unexpected_skipped; /* of those, from a weightless kernel or outside the range */
    uint64_t repeat_skipped;     /* of those, by the repeat rule (repeat_touch) */
    long pass_len, pass_start;   /* the recorded pass's launches, and where passes begin */
    int strict;
    cudaStream_t side;        /* prefetch copies and write-backs */
    uint64_t held_bytes, peak_held_bytes; /* physical bytes of loaded streamed units */
    /* Physical allocations of the unit just unloaded, kept for the unit loaded next
     * (layers share their regions' sizes): cuMemCreate and cuMemRelease are host calls
     * that cost far more than a map. Whatever load_unit does not reuse it releases. */
    struct spare {
        size_t len;
        CUmemGenericAllocationHandle h;
        int pieces;           /* a piece's or a run of pieces' (map_pieces maps it whole) */
    } *spare;
    int n_spare, cap_spare;
    uint64_t reused, region_loads;
    /* Host time of the loads (ns): waiting for the evicted unit (its copy in, its last
     * use), unloading it (its checksum's wait included), mapping, issuing the copies. */
    uint64_t ns_wait, ns_unmap, ns_map, ns_copy;
    uint64_t ns_create, ns_release; /* parts of ns_map: new physical memory, spares let go */
    uint64_t ns_map_call, ns_access; /* parts of ns_map: cuMemMap, cuMemSetAccess */
    uint64_t ns_ck_wait, ns_back, ns_unmap_call; /* parts of ns_unmap: the checksum's wait,
                                                  * copies back, cuMemUnmap */
    uint64_t ns_tail;         /* hand-overs' tails (the mover's, off the device's path) */
    uint64_t ns_tail_wait, ns_tail_unmap, tail_written_back; /* of those: the checksum's wait,
                                                              * cuMemUnmap; copied back */
    uint64_t room_in_bytes;   /* room of the program's pools brought to the device after the
                                 plan for calls that point into it (res_room_in) */
    uint64_t access_calls;    /* cuMemSetAccess calls of loads (several regions each at best) */
    uint64_t map_calls;       /* cuMemMap calls of loads (a run of pieces each at best) */
    uint64_t unmap_calls, unmapped; /* cuMemUnmap calls of unloads, and the regions they
                                 * unmapped (several a call at best) */
    uint64_t tail_unmap_calls, tail_unmapped; /* the same, of hand-overs' tails (res_tail_apply's
                                 * own: the mover may be unloading meanwhile) */
    /* The measured step: an event at each pass's first launch; the time between two
     * consecutive ones is read once the later has completed (never waited for). */
    cudaEvent_t pass_ev[STEP_RING];
    uint64_t passes, harvested;
    float step_ms[STEP_SAMPLES];
    uint64_t n_steps;
} res_state_t;

/* The device checksum (core/checksum.h): at an eviction, it proves the unit's bytes
 * equal to the host store's, so that the unit is dropped without a copy back
 * (docs/architecture.md, "Nothing the application wrote is lost"). Loaded when the plan is made; without it (no driver JIT for the PTX,
 * an error), every eviction writes back and the plan counts that copy. */
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);
typedef struct {
    CUfunction fn;
    CUfunction back_fn;       /* FT_COPY_BACK_KERNEL; NULL: evictions wait on the host */
    launch_fn launch;
    cudaStream_t stream;      /* its own: the side stream's queued copies are not waited for */
    uint64_t *dev, *host;     /* per unit, the sum on the device and in pinned host memory */
    unsigned blocks;
    int units;                /* dev and host are there: the residency engine may use it */
    size_t n;                 /* the units dev and host have room for (checksum_room) */
} ck_state_t;

/* cuda.c: launches one of FlexTensor's own kernels (f on `blocks` blocks of 256
 * threads, on s) through `launch` (cuLaunchKernel): on the own-call thread inside a
 * driver hook once the application's profiler holds CUPTI ("own calls inside a driver
 * hook"), else here. */
CUresult own_launch(launch_fn launch, CUfunction f, unsigned blocks, CUstream s, void **args);

/* The host store of a streamed region: FT_PINNED_MEMORY (pinned or pageable) and
 * FT_PINNED_MEMORY_MODE (cudaHostAlloc, or page-aligned memory registered in place). */
typedef cudaError_t (*host_alloc_fn)(void **, size_t, unsigned int);

/* budget.c: the budget after the plan, and the bytes between an admission or a free
 * and the region table. admitting: res.lock; releasing: atomic. */
extern uint64_t admitting;  /* also spill.c (spill_admit, spill_placement) and
                             * ft_hook_rt_malloc, under res.lock */
extern uint64_t releasing;  /* read by spill_held */
int budget_admit(uint64_t size, int passthrough); /* 2, 1 or 0: never a refusal */
void admit_done(int adm, uint64_t size, int served);
uint64_t budget_free_begin(const void *p);
void budget_free_end(uint64_t bytes);
void usage_locked(ft_gpu_memory_usage_t *out);
void usage_now(ft_gpu_memory_usage_t *out);
void budget_view(size_t *free_b, size_t *total_b);
/* The allocations served past the budget after the plan (read at exit, by the verdict). */
const ft_budget_over_t *budget_over(void);
int budget_room_locked(uint64_t size, const char *cause); /* room for size: resident units stream; 0 or -1 */
uint64_t budget_left_locked(void);                 /* the budget's bytes left, every slot full */
int budget_hold_locked(const char *cause, int record); /* resident units stream until the budget
                                                        * holds (record: else, the excess kept) */
const ft_budget_over_t *budget_kept_over(void); /* what FlexTensor kept on the device past it */

/* A streamed unit loaded this many times for touches the guard judged stale (an
 * argument word outside the unit's part of the pass, unsure, or from a kernel that
 * touched no weight) stays on the device: the strict guard must load for such a word,
 * and a kernel whose padding keeps pointing at it (on the H200, PyTorch's rotary
 * kernel at the first layer's unit, in every layer of a decode step: decode 4.2x the
 * link bound) would load it again and again, evicting the units prefetched for the
 * launches that need them. Resident units stream instead, to hold the budget. */
#define STALE_MISSES_PIN 8


/* checksum.c: the device checksum. ck is set up once (pthread_once), read after. */
extern ck_state_t ck;
CUresult checksum_launch(uint64_t va, uint64_t words, uint64_t *out);
CUresult checksum_launch_salted(uint64_t va, uint64_t words, uint64_t salt, uint64_t *out);
CUresult copy_back_launch(cudaStream_t stream, uint64_t src, uint64_t words, const uint64_t *sum,
                          uint64_t expected, uint64_t dst);
/* FT_SHM's content sum of a unit (res.lock held): begin, each region, end. */
int content_sum_begin(void);
int content_sum_add(uint64_t va, uint64_t words, uint64_t first_word);
int content_sum_end(uint64_t *sum);
int checksum_available(void);
int checksum_room(size_t n); /* dev and host grown to n units (a plan made again) */
/* The allocation beginning at base while FT_SPILL holds it in host memory (NULL: on
 * the device): spill.c's spilled_at, passed down to hash_regions as its ctx. */
typedef vmm_t *(*spilled_fn)(uint64_t base);
typedef struct {
    spilled_fn spilled;
} hash_source_t;
void hash_regions(void *ctx, ft_disc_hash_req_t *q, size_t n);
void spill_sum(vmm_t *v);

/* capture.c: stream captures under way and their graphs. Its tables: its cap_lock;
 * the count of captures under way: atomic. */
int capture_under_way(void);
uint64_t capture_of(cudaStream_t s);     /* the capture s belongs to, 0: none */
void capture_note(uint64_t id, cudaStream_t stream, const ft_scan_set_t *set, uint64_t key, const char *name,
                  size_t written);
void capture_note_copy(uint64_t id, cudaStream_t stream, const void *dst, const void *src, size_t dspan,
                       size_t sspan);
size_t capture_copy_set(ft_scan_set_t *set, const void *dst, const void *src, size_t dspan, size_t sspan);
/* Graphs built node by node (graphnodes.c's hooks): an empty graph made; a node added
 * (a kernel key, or key 0: a copy or set writing set's first `written` regions); a
 * child graph added as a node; a node's parameters changed in its graph; an executable
 * graph's node set to a launch (or copy or set) or to a child graph's calls. */
void capture_graph_made(uint64_t graph);
void capture_node_added(uint64_t graph, CUgraphNode node, const ft_scan_set_t *set, uint64_t key,
                        const char *name, size_t written);
void capture_child_added(uint64_t graph, CUgraphNode node, uint64_t child);
void capture_node_changed(CUgraphNode node);
/* A node change of the application's executable graph, made again on FlexTensor's own
 * copies of its graph: on one of their executable graphs (exec_fn: the node named by
 * the graph that one was instantiated from) and on the clone they are made from
 * (graph_fn: the clone's node; NULL where CUDA has no graph-level form, as for a child
 * graph node). Each returns 0 on success. */
typedef struct {
    int (*exec_fn)(const void *ctx, CUgraphExec exec, CUgraphNode node);
    int (*graph_fn)(const void *ctx, CUgraphNode node);
    const void *ctx;
} node_redo_t;
void capture_exec_node_set(uint64_t exec, CUgraphNode node, const ft_scan_set_t *set, uint64_t key,
                           const char *name, size_t written, const node_redo_t *redo);
void capture_exec_child_set(uint64_t exec, CUgraphNode node, uint64_t child, const node_redo_t *redo);
/* observe.c: a kernel node's arguments scanned as a captured launch's (its name in
 * *name; arguments that cannot be read count as lost regions). */
void observe_node_args(uint64_t key, int is_stub, void **params, void **extra, ft_scan_set_t *set,
                       const char **name);
/* The thread's captured call just made (capture_note): its graph node is asked for. */
extern __thread int capture_pending;
void capture_call_done(void);
int capture_relax(void);                 /* the thread's own work in relaxed mode */
void capture_restore(int relaxed);
/* A graph launch's real call, for a graph cut into segments: each segment's
 * executable graph launched with the hook's real function (rt or driver, per-thread
 * stream or not, as the application called it); 0 on success, else the error. */
typedef struct {
    int (*fn)(void *real, uint64_t exec, cudaStream_t stream);
    void *real;
    int launched; /* the segments were launched instead of the graph */
    int rc;       /* their first error, 0: none */
} graph_launch_t;
int capture_graph_launch(uint64_t exec, cudaStream_t stream, int held, graph_launch_t *how);
/* The application changed an executable graph (cudaGraphExecUpdate, a node's
 * parameters): what it touches is no longer known. */
void capture_exec_changed(uint64_t exec);
/* Graph launches made in discovery or profiling whose kernels were not observed (their
 * calls not known). */
uint64_t capture_unobserved(void);
void capture_report(void);

/* cuda.c: FlexTensor's own CUDA calls. drv and ev are written once (resolve_driver,
 * events_resolve), read after. */
extern drv_fns_t drv;
extern events_t ev;         /* set by events_resolve, when profiling starts */
void events_resolve(void);
void resolve_driver(void);
cudaError_t own_pending(void);
cudaError_t own_call(cudaError_t rc, cudaError_t pending);
cudaError_t own_copy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t own_copy_sync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind);
cudaError_t own_malloc(void **p, size_t n);
cudaError_t own_host_alloc(void **p, size_t n);
cudaError_t own_stream(cudaStream_t *s);
void own_event_destroy(cudaEvent_t e);

/* device.c: the managed device and the others the process uses. Its state is its own
 * (atomic); what to do when another device appears is the engine's, passed down by
 * ft_hooks_init: stand_down(why) answers 1 (stood down now), 0 (already) or -1 (too
 * late: the plan is made). */
void device_setup(int (*stand_down)(const char *why));
int managed_device(void);       /* -2: not chosen yet */
uint32_t peer_devices(void);    /* a bit per other device that reaches the managed one */
int on_managed_device(int runtime);
int managed_cu_device(CUdevice *dev);
void managed_device_bind(void);    /* a thread of FlexTensor's own: the managed device current */
int managed_device_enter(void);
void managed_device_leave(int prev);
void sync_reaching_devices(void);

/* engine.c: the phase and the entry. regions, disc, cfgp and log_diagnostics are
 * written once by ft_hooks_init, before any hook runs; engine_held is the calling
 * thread's.
 *
 * The phase (engine.c's first comment lists the moves between phases) shares one word
 * with FT_SPILL's engagement (ENGINE_SPILL): engine_state() loads it (acquire), the
 * state_* helpers read it, engine_to and engine_spill are its only writers. */
enum {
    PHASE_START,     /* before ft_hooks_init */
    PHASE_DISCOVERY, /* discovery watches every launch (FT_DISCOVERY_ITERS passes) */
    PHASE_PROFILING, /* the units' compute times are measured (FT_PROFILING_ITERS passes) */
    /* Discovery is over and profiling is not on: it is being set up (the copy bandwidth
     * measured), or it is over and the plan is being made. A process whose profiling
     * could not start (no units, no CUDA events) stays here: no plan comes, and FT_SPILL
     * keeps holding the budget. */
    PHASE_PLANNING,
    PHASE_PLANNED,    /* the plan streams: the next launch, copy or set switches the engine on */
    PHASE_STREAMING,  /* the residency engine runs: every launch, copy and set is guarded */
    /* The residency engine never starts: FT_SKIP_DISCOVERY, no plan, a plan that streams
     * nothing, or a switch that could not be made. */
    PHASE_OFF,
    PHASE_STOOD_DOWN, /* as OFF, because FlexTensor stood down (stood_down_why says why) */
    PHASE_COUNT,
    PHASE_ANY = -1    /* engine_to's `from`: whatever the phase is */
};
#define ENGINE_PHASE_MASK 0x7u
#define ENGINE_SPILL 0x8u /* FT_SPILL holds allocations in host memory (spill.c decides) */
/* Read only through engine_state (inline: every launch reads it); written only by
 * engine_to and engine_spill. */
extern unsigned engine_state_word;
int engine_to(int from, int to, const char *why);
void engine_spill(int on);
const char *stood_down_why(void); /* NULL unless stood down */
const char *engine_phase_name(int phase); /* "discovery", "profiling", ... */

/* The phase word, with acquire order: what was written before a move (the plan before
 * PLANNED, the copy bandwidth before PROFILING) is seen by a thread that sees the phase
 * it entered, lock or no lock. */
static inline unsigned engine_state(void)
{
    return __atomic_load_n(&engine_state_word, __ATOMIC_ACQUIRE);
}

static inline int state_phase(unsigned s)
{
    return (int)(s & ENGINE_PHASE_MASK);
}

static inline int engine_phase(void)
{
    return state_phase(engine_state());
}

static inline int state_spill(unsigned s)
{
    return (s & ENGINE_SPILL) != 0;
}

/* Every launch, copy and set holds res.lock: the residency engine is on or about to be,
 * or FT_SPILL holds allocations in host memory. */
static inline int state_guarded(unsigned s)
{
    return state_spill(s) || state_phase(s) == PHASE_PLANNED || state_phase(s) == PHASE_STREAMING;
}

/* Nothing will ever be guarded again: the residency engine never starts and FT_SPILL
 * holds nothing (it cannot engage once the engine is off with nothing spilled). */
static inline int state_quiet(unsigned s)
{
    return s == PHASE_OFF || s == PHASE_STOOD_DOWN;
}

extern ft_regions_t *regions;
extern ft_disc_t *disc;
extern int log_diagnostics;
extern const struct ft_config *cfgp;
extern __thread int engine_held;
int engine_enter(void);
int engine_enter_launch(void);
int engine_enter_copy(void);
void engine_leave(int held);

/* hooks_launch.c: the launch entry points and the per-launch clock. launch_did_once
 * is the calling thread's. */
extern __thread int launch_did_once; /* also set by observe.c (the same thread's launch) */
void once_charge(int kind, uint64_t t0);
void report_launch_self(void);

/* hoststore.c: host memory for what is not on the device, and where a streamed unit's
 * host copy lives: private, or FT_SHM_ENABLED's shared segment (shmstore.c). */
const char *host_store_kind(void);
/* ownranges.c: FlexTensor's own work as NVTX ranges, for another tool's injection. */
void own_ranges_setup(void);
void own_range_push(const char *what, int unit);
void own_range_pop(void);

void *host_store_alloc(size_t size);
/* Host stores of these sizes made ahead, in this order, by threads (a saved profile's
 * streamed weights, before the program allocates them); host_store_alloc takes them.
 * _end: the threads stopped, what is left freed, the count said (why: the profile's
 * fate). */
void host_store_ahead(const size_t *sizes, uint32_t n);
void host_store_ahead_end(const char *why);
/* memcpy into a host store, a large one cut into parts copied by threads at once (a
 * model's weights loaded into FT_SPILL's allocations in host memory: 9.3 GB of a
 * second start's 13.5, copied on the program's thread). */
void host_store_copy(void *dst, const void *src, size_t n);
void host_store_switched(void);
void host_store_free(void *p); /* a pointer into the shared segment is left alone */
/* A unit as the shared segment lays it out: its streamed regions end to end, in order
 * (residency.c's unit_shm_desc, the same in every process running the model). */
typedef struct {
    uint64_t bytes;   /* its streamed regions' bytes */
    uint64_t layout;  /* a hash of their sizes, in order */
    uint64_t sum;     /* their content sum (checksum.c's content_sum_*), when sum_ok */
    int sum_ok;
} shm_unit_desc_t;
enum { HOST_PRIVATE, HOST_SHARED, HOST_FILL }; /* host_store_unit's answers */
int host_store_sharing(void);
void host_store_share(const shm_unit_desc_t *d, uint32_t n);
int host_store_unit(int u, const char *name, const shm_unit_desc_t *d, res_region_t *r, int n);
void host_store_unit_filled(int u, int ok);
void host_store_unit_leave(int u);
void host_store_report(void);
void host_store_detach(void);

/* shmstore.c: the shared segment's side of hoststore.c (its only caller), res.lock
 * held. */
int shm_store_attached(void);
int shm_store_owns(const void *p);
void shm_store_attach(const shm_unit_desc_t *d, uint32_t n);
int shm_store_unit(uint32_t u, const char *name, const shm_unit_desc_t *d, char **base);
void shm_store_filled(uint32_t u, int ok);
void shm_store_leave(uint32_t u);
void shm_store_report(void);
void shm_store_detach(void);

/* observe.c: what a call touches, fed to discovery, FT_SPILL and the guard. */
void observe_launch(uint64_t key, int is_stub, void **params, void **extra, cudaStream_t stream);
void observe_write(const void *dst);
/* A graph launch's captured call, observed as the call it was captured from (capture.c):
 * kernel `key` named `name` touching the sure regions of set, or (key 0) a copy or set
 * writing set's first `written` regions. In profiling: the kernel's position in the
 * lane's pass (-1: none); -1 in discovery; -2 once the phase `ph` is over or the
 * observation's bound is reached. */
long observe_replayed(int ph, uint64_t key, const char *name, ft_scan_set_t *set, size_t written);
void observe_sync(void);
int cupti_detached_after_first_pass(void);

/* handover.c: the application's profiler took CUPTI (ft_hook_cupti_wanted, shim.h): the
 * exit report's line about it, and the verdict's note (buf, or "" when it did not). */
void handover_report(void);
const char *handover_note(char *buf, size_t len);
/* capture.c: the verdict's note when a stream capture stopped FT_SPILL, else "". */
const char *capture_spill_note(char *buf, size_t len);

/* profiling.c: profiled passes and the plan. prof: prof.lock; plan: written once
 * under prof.lock, published by plan.made (release); bw before the move to
 * PHASE_PROFILING; bw_device_bytes: atomic; tag_pushed is the calling thread's. */
extern plan_state_t plan;    /* plan.out.resident: also demote_for (budget.c, res.lock) */
extern prof_state_t prof;    /* read by report.c, under prof.lock */
extern bw_t bw;
extern uint64_t bw_device_bytes;
void start_profiling(void);
void stop_profile_timing(void);
extern __thread int tag_pushed; /* cleared by engine_leave, on the same thread */
uint64_t configured_budget(size_t total_b);
const char *kept_by(void);
/* ft_plan_choose with in's slots (FT_MIN_BLOCKS..FT_NUM_BLOCKS); in memory mode, when no
 * such plan fits the budget, a plan of one slot, the last resort (*one_slot set): each
 * unit then comes in once the one before has left, no copy overlapped with compute.
 * *pipelined: the smallest budget with in's slots when the one-slot plan was made, else
 * 0; *min_budget, on -ENOSPC: the smallest budget that works (one slot's after a try).
 * pipelined and one_slot may be NULL. */
int plan_choose(const ft_plan_input_t *in, ft_plan_t *out, uint64_t *min_budget, uint64_t *pipelined,
                int *one_slot);
int profile_overdue(uint64_t launches);
void profile_launch(uint64_t lane, long pos, cudaStream_t stream);
int profile_cut_at(long pos); /* 1: a unit's time begins at pos (a graph is cut there) */
int profile_charging(void);
void profile_charge_move(uint64_t ns);
void profile_note_tracked(void);

/* savedprof.c: saved profiles (FT_PROFILE_DIR). Its state: its own lock. */
void savedprof_setup(int (*stand_down)(const char *why));
void savedprof_region(uint32_t id, uint64_t size);
int savedprof_streams(void);
int savedprof_launch(const char *kname, const ft_scan_set_t *set);
void savedprof_plan(void);
int savedprof_discovery_done(void);
void savedprof_save(void);
/* profiling.c: the plan from a saved profile's times and link (PHASE_PLANNING). */
void plan_saved(const double *median_us, size_t n, const bw_t *link, uint64_t other_bytes);

/* report.c: the exit report and the control API. */
void outside_sample(const char *phase, long pass, int held);

/* residency.c: the residency engine. res: res.lock. */
extern res_state_t res;      /* counters and regions: also budget.c, guard.c (res.lock) */
/* Loads, and what the guard records of a call's use (res.lock held). */
void load_unit(int u, cudaStream_t stream, int keep);
void res_shed(int running, const int *soon, int n_soon); /* back within the slots */
cudaStream_t stream_key(cudaStream_t stream);
void unit_record_use(res_unit_t *un, cudaStream_t stream);
int checksum_issue(int u);
/* A checksum issued for unit un since its last use (checksum_issue), still its sum. */
static inline int checksum_current(const res_unit_t *un)
{
    return un->ck_pending && un->ck_uses == un->uses;
}

/* mover.c: the prefetching thread (FT_PREFETCH_THREAD). While a move is under way, the
 * mover owns the units it moves and what loads and unloads change beside them (the
 * spares, the counts of loaded units and held bytes, the load counters): every other
 * user of res waits for the move first (mover_settle, res_lock), and a launch, copy or
 * set does so only when it touches a moving unit. Lock order: res.lock, then the
 * mover's. */
void mover_start(void);            /* at the switch, res.lock held */
int mover_request(int u);          /* res.lock: 1 when the mover takes the prefetch after u */
void mover_pump(void);             /* res.lock: the request's next move, when none is under way */
int mover_settle(int wait);        /* res.lock: ends a finished move (wait: an unfinished one
                                    * too); 1 when none is under way then */
void mover_settle_unit(int u);     /* res.lock: unit u out of the move under way */
void mover_settle_move(void);      /* res.lock: the move under way ended (a tail left) */
int mover_catch(int u);            /* res.lock: 1 when the mover has loaded u for a call that
                                    * would miss it (its move under way or next) */
void mover_hold(void);             /* no res.lock: no move until mover_release (a capture's start) */
void mover_release(void);
int mover_may_move(void);          /* res.lock: started; no hold, capture or timing; streaming */
int mover_running(void);           /* the prefetching thread has started */
int mover_here(void);              /* this is the prefetching thread */
int mover_begin(int u, const int *leavers, int n); /* res.lock: a move's units flagged, queued */
void res_lock(void);               /* res.lock, with the move under way ended */
void res_steady(uint32_t id);      /* res.lock: region id's unit out of any move */
/* residency.c: a move queued for the prefetch load of u, which `keep` is running (1;
 * 0: no room now; -1: none can be); the mover's work for it (no res.lock). */
int res_move_one(int u, int keep);
/* The move's work: a hand-over if it can be one (1: the leaver's physical memory
 * mapped at the unit's addresses, in stream order; its tail, res_move_tail, left to
 * make once the unit is usable), else (0) evictions with a host wait and a load, once
 * the tail of the hand-over before is over (its leaver's addresses still map physical
 * memory a load could otherwise take or let go: over the budget until then). */
int res_move_handover(int u, const int *leavers, int n);
void res_move_work(int u, const int *leavers, int n);
typedef struct {
    int unit, sum_ok, unmap_failed;
    uint64_t sum, ns_wait, ns_unmap, ns_all, unmap_calls, unmapped;
} res_tail_t;
void res_move_tail(int v, res_tail_t *out); /* the mover: the leaving unit's sum and unmapping */
void res_tail_apply(const res_tail_t *t);   /* res.lock: that sum judged */
enum { HO_NO_SUM, HO_USED_SINCE, HO_NO_BACK, HO_SIZES, HO_OTHER };
/* What waited for the prefetching thread: a call touching a unit in a move, one that
 * would have missed a unit it was about to load, any other call (not a launch: copies,
 * sets, allocations ...), a hand-over's tail a call needed. */
enum { MOVER_WAIT_UNIT, MOVER_WAIT_CATCH, MOVER_WAIT_ALL, MOVER_WAIT_TAIL };
#define MOVE_REGIONS 512 /* a hand-over's regions a unit (an allocation's pieces); more: evicted with a host wait */
/* guard.c: the next move of the prefetch after u (0: nothing left to load for it). */
int res_prefetch_next(int u);
/* The units as core/residency.h's slot decisions see them (res.lock held). */
const ft_res_unit_t *res_view(int u, int keep);
void *unit_array(void *arr, int *cap, size_t elem); /* also budget.c's view */
/* Copies and sets served on the host store of a unit not loaded (res.lock held). */
int res_host_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s);
int res_host_set(uint64_t dev, unsigned v, int width, size_t count, cudaStream_t s);
/* The program's frees of virtual-memory allocations and unmaps of its served mappings
 * (vmm_free, vmm_free_program under res.lock, the mover settled). */
int res_vmm_free(void *p);
int res_vmm_free_program(uint64_t va, uint64_t len);

/* timing.c: offload timing (FT_OFFLOAD_TIMING, ft_offload_timing_collect). Its state
 * under res.lock; timing_enabled is read without it (relaxed: a hook that misses the
 * switch on records nothing). Every hook but timing_poll is called with res.lock held
 * and returns at once while timing is off. */
typedef struct {
    uint64_t loads, hits, misses, bytes_in, bytes_out, unloads;
    uint64_t copies_timed, transfer_ns, overlap_ns, compute_passes, compute_ns, stall_ns;
    uint64_t load_bytes;      /* its last load's: the bytes of its regions that stream */
} ft_timing_unit_t;
typedef struct {
    uint32_t kind, lane, unit;  /* FT_TIMING_* (core/trace.h), 0/1, unit index */
    uint64_t wait_ns, start_ns, end_ns;
} ft_timing_event_t;
extern int timing_enabled;
static inline int timing_on(void)
{
    return __atomic_load_n(&timing_enabled, __ATOMIC_RELAXED);
}
void timing_pass_start(cudaStream_t stream);
void timing_unit_wait(int u, cudaStream_t stream);   /* before the guard's waits */
void timing_unit_begin(int u, cudaStream_t stream);  /* after them */
void timing_unit_end(int u, cudaStream_t stream);    /* after the unit's last launch */
void timing_load_begin(int u, cudaStream_t stream);  /* load_unit, around its copies */
void timing_load_end(int u, cudaStream_t stream);
void timing_unload_begin(int u);                     /* evict_loaded, around unload_unit */
void timing_unload_end(int u);
void timing_poll(void);                              /* a program's synchronisation */
void timing_forget(void);                            /* reload.c: the plan timed is dropped */
void timing_report(void);
void timing_trace(ft_trace_writer_t *w);

/* guard.c: the guard. Its state is the calling thread's call, and res's under
 * res.lock. */
int touched_by_this_call(int u);
void res_guard_launch(uint64_t key, const char *name, const ft_scan_set_t *set, cudaStream_t stream);
/* dspan, sspan: the bytes the copy reaches from dst and src (0: not known). */
void res_guard_copy(const void *dst, const void *src, size_t dspan, size_t sspan, cudaStream_t stream);
/* The piece a touch of region id whose lowest pointer there is lo (0: not known) reaches
 * on into (res.follow: the piece's last tensor runs on into another unit's), 0: none.
 * res.lock held. */
uint32_t res_follow_of(uint32_t id, uint64_t lo);
/* lo: per id, the lowest pointer there (0: not known); NULL: none known, every touch of
 * a piece reaches on into the pieces its last tensor runs into. */
int res_guard_graph(const char *name, const uint32_t *ids, const uint64_t *lo, size_t n, int all,
                    cudaStream_t stream);
/* A segment of a cut graph (capture.c), as res_guard_graph, and a pass's position: the
 * first segment begins a pass, `begins` (-1: none) is the streamed unit whose units
 * after it are prefetched once the segment is enqueued, `ends` the unit whose checksum
 * follows it. */
int res_guard_segment(const char *name, const uint32_t *ids, const uint64_t *lo, size_t n, int first, int begins,
                      int ends, cudaStream_t stream);
/* The streamed unit region id belongs to, -1: none (resident, or not a weight). */
int res_unit_of(uint32_t id);
int res_pin_unit(int u, const char *why);
void res_call_done(void);
double step_median_us(uint64_t *n);

/* residency.c: the switch. */
int evict_unit(size_t i, uint64_t *moved, uint64_t *shared_resident);
/* The engine could not be set up at the switch (the exit report's verdict says so). */
extern int res_start_failed;
int activate_locked(void);

/* residency.c: the plan changed at run time (control.c; res.lock held). */
void res_unload_all(void);
int res_make_resident(int u);
int res_split_tail(res_region_t *r, uint64_t ptr);
int res_split_stale(res_region_t *r, uint64_t ptr);
/* reload.c: the plan's weights freed; every streamed unit back on the device and the
 * engine's state gone (res.lock held, the device synchronised). 0, or -1 when a unit
 * could not be loaded whole (the engine runs on, with the units it has). */
int res_drop_all(void);

/* reload.c: the program freed the plan's weights (docs/residency.md, "A model freed,
 * another loaded"): a free of region id is counted (the free hooks); the next
 * allocation, launch, copy or set drops the plan and starts discovery again, outside
 * a stream capture. reload_wanted is atomic. */
extern int reload_wanted;
void reload_note_free(uint32_t id);
void reload_now(void);        /* from an allocation (res.lock not held) */
void reload_now_locked(void); /* from engine_enter (res.lock held) */
const char *reload_note(char *buf, size_t len); /* the verdict's note, or "" */
/* What each part lets go of when the plan goes (reload.c calls them, res.lock held). */
void guard_forget(void);
void profile_forget(void);
void control_forget(void);
void observe_forget(void);

/* control.c: the runtime control API (ft_set_gpu_mem_limit, ft_request_replan,
 * ft_release, ft_resume). control_waiting (res.lock) is set while a request waits for
 * a pass boundary or passes are being re-profiled: the guard calls control_launch,
 * before and after its touches, only then. control_limit: 1 when ft_set_gpu_mem_limit
 * replaced FT_GPU_MEM_LIMIT (the bytes in *limit; any thread, atomic). */
extern int control_waiting;
void control_launch(long tracked, long pos, cudaStream_t stream, int after);
int control_limit(uint64_t *limit);
const char *control_note(char *buf, size_t len); /* the verdict's note, or "" */

/* spill.c: FT_SPILL. Its engagement is ENGINE_SPILL in engine.c's phase word; the rest
 * under res.lock (spill_limit, once known, is read without it). */
extern uint64_t spill_ns;
extern uint64_t spill_bytes;  /* also evict_unit, res_vmm_free (residency.c, res.lock) */
int spill_bring_back(const char *why);
int spill_stop(const char *why);
extern uint64_t spill_faults, spill_evictions;
extern uint64_t spill_limit;
uint64_t spill_budget(void);
uint64_t spill_held(void);
/* all: the call may touch more than ptrs (its scan set lost ids): every allocation. */
void spill_touch(const uint64_t *ptrs, size_t n, int all, cudaStream_t stream);
uint64_t spill_admit(uint64_t size);
vmm_t *spilled_vmm(uint64_t addr);
vmm_t *spilled_at(uint64_t base);
int spilled_read(void *dst, uint64_t addr, size_t len);
extern uint64_t spill_host_copies, spill_host_copied, spill_hinted;
extern uint64_t spill_refused; /* moved out for an allocation the device refused memory to */
int spill_host_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s);
void spill_end_locked(void);
/* The process past the budget before the plan (read at exit, by the verdict). */
const ft_budget_over_t *spill_over(void);
extern const vmm_place_t spill_placement; /* vmm_alloc's placement under FT_SPILL */

/* vmm.c: virtual-memory allocations (its table is reached through vmm_find and
 * vmm_each). vmm_pad: atomic; the settings are given once, by ft_hooks_init. */
extern uint64_t vmm_pad;
/* hooks_alloc.c: device memory the program maps itself (cuMemMap), now and at most;
 * atomic. */
extern uint64_t program_mapped, program_mapped_peak; /* progmap.c's */
/* progmap.c: why the program's own mappings are not FlexTensor's to move (the
 * stand-down's reason): FT_PROGRAM_MAPPINGS=leave, a handle larger than the pieces
 * served (VMM_PIECES_MAX), or exported or another device's. */
void progmap_why_kept(char *buf, size_t n);
/* hooks_alloc.c: the program's own mapping at va served as an allocation of
 * FlexTensor's there (progmap.c), and freed. */
CUresult alloc_program_mapping(uint64_t va, size_t size);
void free_program_mapping(uint64_t va, uint64_t size);
uint64_t budget_free_begin_bytes(uint64_t bytes);
void progmap_report(void);
void vmm_setup(uint64_t min_bytes, uint64_t reserve);
int vmm_serves(size_t size);
uint64_t device_bytes(void);
vmm_t *vmm_find(uint64_t va);
vmm_t *vmm_find_held(uint64_t va); /* in a vmm_each callback */
size_t vmm_gran(void); /* the mapping granularity, 0 before the first allocation */
size_t vmm_gran_now(void); /* the same, learnt now if need be; 0: no virtual memory */
/* An allocation is served in at most this many pieces (16 GiB at 2 MiB): more would make
 * discovery's regions and a load's mappings too many. A larger one is served whole. */
#define VMM_PIECES_MAX 8192
void vmm_grant_peer(int other, unsigned *granted, unsigned *mapped);
void vmm_each(void (*fn)(vmm_t *v, void *ctx), void *ctx);
CUresult set_access(CUdevice dev, uint64_t va, size_t len);
CUmemAllocationProp vmm_prop(CUdevice dev); /* pinned memory on dev */
CUresult map_physical(CUdevice dev, uint64_t va, size_t len, CUmemGenericAllocationHandle *h, int given, uint64_t ns[3], int no_access);
cudaError_t vmm_alloc(void **out, size_t size, int pieced, const vmm_place_t *place, uint64_t *admitted);
/* vmm_alloc at an address the program reserved (at: granule-aligned; size: whole
 * granules): the program's own mapping, served (progmap.c). */
cudaError_t vmm_alloc_at(uint64_t at, size_t size, int pieced, const vmm_place_t *place, uint64_t *admitted);
vmm_t *vmm_chain_before(uint64_t va);
int vmm_free_program(uint64_t va, uint64_t len, int (*forget)(vmm_t *v));
uint64_t vmm_bytes(const vmm_t *v); /* an allocation's mapped bytes, all its pieces' */
void vmm_note_copy(const void *dst, size_t n);
vmm_t *vmm_piece_first(vmm_t *v);
int piece_after(const ft_region_t *r, ft_region_t *q);
uint64_t vmm_piece_span(uint64_t base);
int vmm_free(void *p, int (*forget)(vmm_t *v));
/* The room of the program's own pools (pieces past the last one any call used, by
 * used()'s answer, a margin apart) onto host-located memory that the device reaches
 * over the link, so that it stops counting against the budget; the device synchronised
 * first (res.lock held, every call guarded: the plan's switch). Its bytes and pieces
 * moved (`dry`: that would move, nothing done); host_room_bytes (atomic) is what is
 * there now. 0 where the device has no host-located memory. */
uint64_t vmm_room_to_host(int (*used)(uint64_t va), int dry, uint64_t *pieces);
/* The reverse, after the switch's evictions: pieces in host-located memory that are not
 * room (used, or before the room's margin) onto device memory of their own. */
uint64_t vmm_used_to_device(int (*used)(uint64_t va), int dry, uint64_t *pieces);
/* After the plan: the pieces in host-located memory that calls point into (ptrs,
 * sorted) onto device memory, at most `limit` bytes, the lowest first: with `spread`,
 * from the lowest pointer's piece to a margin past the highest in each run of pieces (a
 * graph's temporaries carved from the room after the plan), else the pieces holding a
 * pointer and the one after each. */
uint64_t vmm_reached_to_device(const uint64_t *ptrs, size_t n, int spread, int dry, uint64_t limit,
                               uint64_t *pieces);
/* guard.c: whether ptr lies in a piece in host-located memory (the room of the
 * program's pools the switch left there); and those of ptr (n, sorted here) brought to
 * the device within the budget, the rest left and said (`what` names the calls). A
 * graph's (eager 0): the room from its lowest pointer to a margin past its highest,
 * resident units made to stream for it as for an allocation, as much of it as the
 * budget then holds. An eager launch's (eager 1): the pieces its pointers lie in and the one after
 * each, within what the budget has left (no unit streams for it), and once the room
 * could not all come, no more asking until the next plan. The bytes moved. res.lock
 * held. */
int res_in_room(uint64_t ptr);
uint64_t res_room_in(uint64_t *ptr, size_t n, const char *what, int eager);
/* FT_SPILL's last resort before the plan (res.lock held): device pieces of allocations
 * partly in host memory already go there too, their last first, until `need` bytes have
 * moved. The bytes moved. */
uint64_t vmm_pieces_to_host(uint64_t need);
extern uint64_t host_room_bytes;
/* residency.c: whether any call FlexTensor observed used the piece at va (used() of
 * vmm_room_to_host). */
int res_room_used(uint64_t va);
void vmm_left_host(vmm_t *v); /* v's memory let go (freed, or moved out by FT_SPILL) */

/* phys.c: physical allocations backing several pieces, with their references. */
int phys_adopt(CUmemGenericAllocationHandle h, size_t size, int refs);
CUresult phys_make(CUdevice dev, size_t size, CUmemGenericAllocationHandle *h);
size_t phys_size(CUmemGenericAllocationHandle h);
void phys_hold(CUmemGenericAllocationHandle h);
int phys_drop(CUmemGenericAllocationHandle h);
CUresult phys_release(CUmemGenericAllocationHandle h);

/* The application thread a call comes from: discovery and profiling follow each
 * thread's passes on their own. */
static inline uint64_t lane_id(void)
{
    return (uint64_t)pthread_self();
}

/* The clock of FlexTensor's own timings (cuda.c's, inline: sampled launches read it). */
static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A byte count for messages: GiB from 1 GiB on, else MiB. */
static inline char *human_bytes(uint64_t b, char *buf, size_t len)
{
    if (b >= (1ull << 30))
        snprintf(buf, len, "%.2f GiB", (double)b / (1 << 30));
    else
        snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
    return buf;
}

#pragma GCC visibility pop

#endif

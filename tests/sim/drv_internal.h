/* drv_internal.h - state of the simulated driver (libcuda.so.1), shared by its files.
 *
 *   drv_api.c     init, options, devices, contexts, API enter/exit and CUPTI callbacks,
 *                 cuGetProcAddress, error strings, fault injection, export tables
 *   drv_mem.c     the arena, cuMemAlloc, VMM, pinned host ranges, pointer queries
 *   drv_exec.c    streams, events, operations, worker threads, virtual clock, faults
 *   drv_kernel.c  kernel registry and launches
 *   drv_graph.c   stream capture and its rules, graphs
 *
 * Locking: one mutex, g_sim.lock, guards every table, queue and clock below. It is
 * never held while user code runs (kernel bodies, host functions, CUPTI callbacks)
 * nor while a worker copies bytes, so a slow kernel blocks nobody but its stream.
 */
#ifndef SIM_DRV_INTERNAL_H
#define SIM_DRV_INTERNAL_H

/* The driver is built as NVIDIA builds theirs: cuda.h in internal mode declares every
 * versioned entry point (cuMemAlloc_v2, ..._ptds) and the legacy types that
 * generated_cuda_meta.h needs for the CUPTI params structs. Entry points are then
 * always spelled with their exported, versioned names. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cupti_driver_cbid.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <uthash.h>

#include "sim_priv.h"
#include "simcuda.h"

#define SIM_EXPORT __attribute__((visibility("default")))

#define SIM_MAGIC_CTX    0x43545853u
#define SIM_MAGIC_STREAM 0x53545253u
#define SIM_MAGIC_EVENT  0x45564e53u
#define SIM_MAGIC_KERNEL 0x4b524e53u
#define SIM_MAGIC_FUNC   0x464e4353u
#define SIM_MAGIC_GRAPH  0x48505247u
#define SIM_MAGIC_GEXEC  0x58455247u
#define SIM_MAGIC_DEAD   0xdeadbeefu

#define SIM_MAX_DEVICES 16
#define SIM_PAGE 4096u

/* ---- options (drv_api.c): one table gives the fields, defaults, parsing and docs */
#define SIM_OPTIONS(X) \
    X(DEVICE_MEM,      size,   8ull << 30,   "device memory capacity per device (bytes, or 512MiB, 4GiB ...)") \
    X(DEVICE_COUNT,    long,   1,            "number of simulated devices (1..16)") \
    X(VMM_GRANULARITY, size,   2ull << 20,   "cuMemGetAllocationGranularity (power of two >= 4KiB)") \
    X(ARENA_SIZE,      size,   1ull << 40,   "address space reserved for device addresses") \
    X(ADDR_HINT,       long,   0,            "1: cuMemAddressReserve honours its address hint where free (0: ignores it, a granule apart from the last)") \
    X(H2D_GBPS,        double, 55.0,         "host-to-device bandwidth from pinned memory, GB/s") \
    X(D2H_GBPS,        double, 55.0,         "device-to-host bandwidth to pinned memory, GB/s") \
    X(PAGEABLE_GBPS,   double, 7.7,          "bandwidth of copies from/to pageable host memory, GB/s") \
    X(D2D_GBPS,        double, 2000.0,       "device-to-device copy and memset bandwidth, GB/s") \
    X(COPY_LATENCY_NS, long,   2000,         "fixed cost of every copy and memset, ns") \
    X(VMM_ACCESS_NS,   long,   0,            "host time a cuMemSetAccess call takes, virtual ns (0: none)") \
    X(VMM_MAP_NS,      long,   0,            "host time a cuMemMap or cuMemUnmap call takes, virtual ns (0: none)") \
    X(VMM_UNMAP_ONE,   long,   0,            "1: cuMemUnmap refuses a range of several mappings (0: takes one made of whole mappings)") \
    X(VMM_CREATE_NS,   long,   0,            "host time a cuMemCreate or cuMemRelease call takes, virtual ns (0: none)") \
    X(PIN_NS_PER_MIB,  long,   0,            "host time pinning host memory takes per MiB (cuMemHostAlloc, cuMemHostRegister), virtual ns (0: none)") \
    X(TIME_SCALE,      double, 0.0,          "real ns a worker sleeps per virtual ns of an operation") \
    X(LAG_US,          long,   0,            "real us a worker waits before it runs each operation: a busy device, so that work the host forgot to wait for is still queued (0: none)") \
    X(LAG_DEVICE,      long,   -1,           "the device whose workers FTSIM_LAG_US delays (-1: every device): one device busier than another") \
    X(FAIL_ALLOC,      long,   0,            "fail the Nth device allocation (0: never)") \
    X(FAIL_HOST_ALLOC, long,   0,            "fail the Nth pinned allocation or registration") \
    X(FAIL_COPY,       long,   0,            "fail the Nth copy at enqueue") \
    X(FAIL_EVENT,      long,   0,            "fail the Nth cuEventCreate (CUDA_ERROR_OUT_OF_MEMORY)") \
    X(FAIL_PERSIST,    long,   0,            "1: every call of a FAIL_ kind from the Nth on fails") \
    X(CUPTI_HELD,      long,   0,            "1: CUPTI's subscriber slot is taken (as by Kineto/Nsight)") \
    X(CUPTI_DUP_API,   long,   0,            "N: the Nth runtime or driver API activity record is written twice, under one correlation id, as a second CPU-side record would be (tests FT_CUPTI_AUDIT; 0: never)") \
    X(LAZY_FUNCS,      long,   0,            "1: a kernel's CUfunction starts partly loaded (CUDA_MODULE_LOADING=LAZY): cuFuncGetParamInfo answers CUDA_ERROR_INVALID_VALUE until cuFuncLoad or its first launch loads it") \
    X(NO_JIT,          long,   0,            "1: cuModuleLoadData refuses PTX (a driver without its JIT compiler)") \
    X(HOST_VMM,        size,   16ull << 30,  "host memory cuMemCreate may take with a host location (CU_MEM_LOCATION_TYPE_HOST, HOST_NUMA node 0), mapped where cuMemSetAccess lets devices reach it; 0: host locations refused, as on a system without them") \
    X(PEER,            long,   1,            "1: devices can access each other's virtual-memory mappings where cuMemSetAccess grants it (0: no peer access at all)") \
    X(REPORT_PEAK,     long,   0,            "1: at exit, print each device's peak physical memory (what nvidia-smi would see)")

typedef struct {
#define SIM_OPT_FIELD_size   uint64_t
#define SIM_OPT_FIELD_long   long
#define SIM_OPT_FIELD_double double
#define X(name, type, def, doc) SIM_OPT_FIELD_##type name;
    SIM_OPTIONS(X)
#undef X
} sim_options_t;

/* ---- devices, contexts ---- */
enum { SIM_ENG_COMPUTE, SIM_ENG_H2D, SIM_ENG_D2H, SIM_ENG_COUNT, SIM_ENG_NONE = -1 };

struct CUctx_st;
struct CUstream_st;

typedef struct sim_dev {
    int ordinal;
    uint64_t capacity;
    uint64_t used;                      /* physical bytes: allocs, VMM, async */
    uint64_t peak;                      /* the most `used` has been (FTSIM_REPORT_PEAK) */
    uint64_t activity_bytes;            /* of used: CUPTI's activity buffers */
    uint64_t eng_free[SIM_ENG_COUNT];   /* virtual time each engine becomes free */
    struct CUctx_st *primary;
    int primary_refs;
    unsigned primary_flags;
} sim_dev_t;

struct CUctx_st {
    uint32_t magic;
    uint32_t id;
    sim_dev_t *dev;
    /* CUDA_SUCCESS, or the error every call returns. Atomic: a worker sets it (under
     * g_sim.lock) while API calls on other threads read it without the lock. */
    _Atomic CUresult sticky;
    struct CUstream_st *legacy;         /* the legacy default stream */
    struct CUstream_st *streams;        /* live created streams */
};

/* ---- streams, events, operations (drv_exec.c) ---- */
typedef struct { struct CUstream_st *s; uint64_t seq; } sim_dep_t;

/* SIM_OP_GRAPH is a graph's child graph node only, never enqueued: a launch runs its
 * nodes in its place. */
typedef enum { SIM_OP_KERNEL, SIM_OP_COPY, SIM_OP_MEMSET, SIM_OP_MARKER, SIM_OP_FREE,
               SIM_OP_HOSTFN, SIM_OP_GRAPH } sim_op_kind_t;

struct sim_kernel;

typedef struct sim_op {
    struct sim_op *next;
    sim_op_kind_t kind;
    uint64_t seq;
    uint64_t vstart, vend;
    uint64_t vfloor;                    /* earliest virtual start (awaited event) */
    int engine;
    int ndeps;
    sim_dep_t *deps;
    uint32_t corr;
    int report;                         /* emit an activity record when done */
    uint64_t dur;                       /* a graph node's duration (drv_graph.c) */
    const struct sim_op *orig;          /* a cloned graph's or an executable graph's node:
                                         * the node it copies */
    int disabled;                       /* an executable graph's node, turned off */
    int async;                          /* enqueued by an ...Async call */
    union {
        struct {
            struct sim_kernel *k;
            void *argbuf;
            size_t argbytes;            /* of argbuf, for a graph node's copy */
            void **args;
            simcuda_dims_t dims;
            uint64_t foreign;           /* an argument in another device's memory: faults */
            int foreign_dev;            /* that device */
        } kern;
        struct {
            void *dst;
            const void *src;
            size_t bytes;
            void *snapshot;             /* owned copy of a pageable source */
            uint8_t copy_kind, src_kind, dst_kind;
        } copy;
        struct {
            void *dst;
            unsigned value;
            unsigned elem;
            size_t count;
        } memset;
        struct {
            CUdeviceptr ptr;
        } free;
        struct {
            CUhostFn fn;
            void *user;
        } hostfn;
        struct {
            /* The graph it embeds, its own (made from a copy of the child graph, freed
             * with the node); a graph's node's is a live handle
             * (cuGraphChildGraphNodeGetGraph), changed in place. */
            struct CUgraph_st *graph;
        } child;
    } u;
} sim_op_t;

struct CUstream_st {
    uint32_t magic;
    void *key;                          /* == this struct: the live-handle hash key */
    uint32_t id;
    struct CUctx_st *ctx;
    unsigned flags;                     /* CU_STREAM_NON_BLOCKING */
    int priority;
    int legacy;
    sim_op_t *head, *tail;
    uint64_t enq_seq, done_seq;
    uint64_t vend;                      /* virtual end of the last enqueued op */
    int worker;                         /* a worker thread runs */
    int destroyed;
    /* Stream capture (drv_graph.c): the capture this stream belongs to (its origin or a
     * stream joined through an event), its nodes captured so far, and how many of them
     * a wait on an event recorded here joined back into another stream of the capture. */
    struct sim_capture *cap;
    uint64_t cap_tip, cap_joined;
    /* The capture's node the stream's next node would depend on (its last, or the one
     * an event it waited on was recorded after; NULL: none yet), as
     * cuStreamGetCaptureInfo tells it. */
    sim_op_t *cap_last;
    pthread_cond_t cv;
    struct CUstream_st *next_in_ctx;
    struct CUstream_st *next_retired;   /* g_sim.retired_streams, once destroyed */
    UT_hash_handle hh;
};

struct CUevent_st {
    uint32_t magic;
    void *key;                          /* == this struct: the live-handle hash key */
    unsigned flags;
    int recorded;
    struct CUctx_st *ctx;
    struct CUstream_st *s;
    uint64_t seq;
    uint64_t vtime;
    /* Last recorded inside a capture (drv_graph.c): the capture's id (the capture may
     * be over; the event then stays unusable for queries until recorded outside one),
     * its capture while it lasts, and the recording stream's node count then. */
    uint64_t cap_id;
    struct sim_capture *cap;
    struct CUstream_st *cap_stream;
    uint64_t cap_tip;
    sim_op_t *cap_node;                 /* the recording stream's last node then */
    UT_hash_handle hh;
};

/* ---- stream capture and graphs (drv_graph.c) ---- */
typedef struct sim_capture {
    uint64_t id;
    struct CUstream_st *origin;
    CUstreamCaptureMode mode;
    pthread_t thread;                   /* the thread that began it */
    int invalid;                        /* a rule was broken: EndCapture fails */
    struct CUgraph_st *graph;           /* what it captures into */
    /* Begun by cuStreamBeginCaptureToGraph: the graph is the caller's, its nodes from
     * before the capture end at base (NULL: it had none); an invalidated capture drops
     * only the nodes after it. */
    int into;
    sim_op_t *base;
    struct CUstream_st **streams;       /* every stream in it, origin first */
    int nstreams, capstreams;
    struct sim_capture *next;           /* g_sim.captures */
} sim_capture_t;

/* A graph is its nodes in the order they were made (captured or added): every node
 * comes after the nodes it depends on, so a replay runs them in that order on the
 * launch stream. */
struct CUgraph_st {
    uint32_t magic;
    void *key;
    sim_op_t *head, *tail;
    size_t nnodes;
    /* A child graph node's embedded graph: that node (NULL: a graph of its own, which
     * only cuGraphDestroy ends). live: in g_sim.live_graphs, a valid handle; an
     * executable graph's embedded graphs are not. */
    sim_op_t *owner;
    int live;
    UT_hash_handle hh;
};

struct CUgraphExec_st {
    uint32_t magic;
    void *key;
    sim_op_t *head, *tail;
    size_t nnodes;
    UT_hash_handle hh;
};

/* ---- kernels (drv_kernel.c) ---- */
struct sim_func { uint32_t magic; struct sim_kernel *k; };

typedef struct sim_kernel {
    uint32_t magic;
    simcuda_kernel_desc_t desc;
    char *name;
    size_t offset[SIMCUDA_MAX_PARAMS];
    size_t argsize;                     /* bytes of a packed parameter buffer */
    const void *stub;
    struct sim_func func;               /* the CUfunction view of this kernel */
    int func_loaded;                    /* FTSIM_LAZY_FUNCS: its CUfunction loaded (atomic) */
    UT_hash_handle hh_stub;
} sim_kernel_t;

/* ---- global state ---- */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;             /* broadcast whenever an op completes */
    sim_options_t opt;
    /* cuInit succeeded: set under the lock, read without it by every API call, which
     * must then see the devices cuInit set up (atomic: release, acquire). */
    _Atomic int initialized;
    int ndev;
    sim_dev_t dev[SIM_MAX_DEVICES];
    uint64_t host_now;                  /* the host's virtual time */
    uint64_t horizon;                   /* max virtual end of anything enqueued */
    uint32_t next_ctx_id, next_stream_id;
    struct CUstream_st *live_streams;   /* hash of valid stream handles */
    /* Destroyed streams are never freed (events and queued operations may still point
     * at them): this list holds them, so that a leak checker sees them kept, not lost. */
    struct CUstream_st *retired_streams;
    struct CUevent_st *live_events;     /* hash of valid event handles */
    sim_capture_t *captures;            /* stream captures under way */
    uint64_t next_capture_id;
    struct CUgraph_st *live_graphs;     /* hash of valid graph handles */
    struct CUgraphExec_st *live_execs;  /* hash of valid executable graph handles */
    /* Activity reporting, set by libcupti under the lock; emit_external reads them
     * without it on every outermost API call, hence atomic. A call racing a change may
     * still report through the sink it read, which libcupti accepts at any time. */
    _Atomic unsigned act_mask;
    _Atomic(simcu_activity_sink_t) act_sink;
} sim_state_t;

extern sim_state_t g_sim;

/* ---- drv_api.c ---- */
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sim_load_options(void);             /* once; safe before cuInit */
struct CUctx_st *sim_current_ctx(void);  /* this thread's current context or NULL */
void sim_set_current_ctx(struct CUctx_st *ctx);
uint32_t sim_current_corr(void);         /* correlation id of the outermost call, or 0 */
enum { SIM_FAULT_KIND_ALLOC, SIM_FAULT_KIND_HOST_ALLOC, SIM_FAULT_KIND_COPY, SIM_FAULT_KIND_EVENT, SIM_FAULT_KIND_N };
int sim_fault_hit(int kind);             /* 1: this call must fail (injected) */
CUresult sim_ctx_init(struct CUctx_st *ctx, sim_dev_t *dev);
int sim_ctx_valid(CUcontext ctx);        /* a live context handle */

/* ---- drv_mem.c ---- */
int sim_mem_init(void);
int sim_in_arena(const void *p, size_t n);
int sim_host_pinned(const void *p, size_t n);  /* whole range inside a pinned range */
sim_dev_t *sim_mem_device_of(const void *p);   /* device of a device address or NULL */
/* Whether dev may reach p through a virtual-memory mapping: 1 when cuMemSetAccess
 * granted it, 0 when not, -1 when p is in no mapping (lock held). */
int sim_mem_granted(const void *p, const sim_dev_t *dev);
void sim_mem_free_async_op(CUdeviceptr ptr);   /* called by a worker, lock held */

/* ---- drv_exec.c ---- */
int sim_exec_init(void);
CUresult sim_stream_resolve(CUstream h, struct CUstream_st **out);  /* lock held */
CUresult sim_stream_init_legacy(struct CUctx_st *ctx);
/* Enqueues `op` on `s` (lock held): fills seq, deps and virtual times for an op of
 * `duration` ns on `engine`, starts the worker. */
void sim_enqueue(struct CUstream_st *s, sim_op_t *op, int engine, uint64_t duration);
sim_op_t *sim_op_new(sim_op_kind_t kind);
void sim_op_free(sim_op_t *op);
/* Waits (lock held, may release it) until `s` completed everything up to `seq`. */
void sim_wait_seq(struct CUstream_st *s, uint64_t seq);
CUresult sim_ctx_sync_locked(struct CUctx_st *ctx);
void sim_advance_host(uint64_t t);
void sim_enqueue_kernel(struct CUstream_st *s, sim_op_t *op, uint64_t cost);
/* sim_enqueue, with the activity record decided now (as a GPU decides at launch). */
void sim_enqueue_reported(struct CUstream_st *s, sim_op_t *op, int engine, uint64_t dur);
uint64_t sim_copy_duration(size_t bytes, double gbps);
/* A copy operation from src to dst, its kinds set as CUPTI reports them, with the
 * engine and virtual time it takes (lock held); NULL: out of memory. */
sim_op_t *sim_copy_op_new(void *dst, const void *src, size_t bytes, int *engine, uint64_t *dur);

/* ---- drv_graph.c: stream capture rules (lock held) ---- */
/* What an enqueue on s must do: CUDA_SUCCESS (enqueue it), SIM_CAPTURED (s captures:
 * record it as a node, sim_capture_node), or the error a capture rule gives (a use of
 * the legacy stream while a blocking stream of its context captures invalidates that
 * capture: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; an invalidated capture's streams:
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). */
#define SIM_CAPTURED ((CUresult)-1)
CUresult sim_capture_enqueue_check(struct CUstream_st *s);
/* A stream-ordered allocation or free on s: refused on a capturing stream. */
CUresult sim_capture_memnode_check(struct CUstream_st *s);
/* Records op (engine, duration) as a node of s's capture; takes op. */
void sim_capture_node(struct CUstream_st *s, sim_op_t *op, int engine, uint64_t dur);
/* Frees graph g and its nodes, a live one's handle then invalid (lock held; NULL:
 * nothing). sim_op_free frees a child graph node's embedded graph with it. */
void sim_graph_free(struct CUgraph_st *g);
/* A captured copy or set's device address p has memory mapped: else the capture is
 * invalidated and the call fails (CUDA_ERROR_INVALID_VALUE). g_sim.lock held. */
CUresult sim_capture_check_mapped(struct CUstream_st *s, const void *p);
/* A synchronize or query of s: illegal while s captures, or, for the legacy stream,
 * while a blocking stream of its context does (either invalidates the capture). */
CUresult sim_capture_sync_check(struct CUstream_st *s);
/* A synchronize of the whole context (cuCtxSynchronize, cuMemFree, cuMemFreeHost):
 * illegal while any stream of it captures. */
CUresult sim_capture_ctx_check(struct CUctx_st *ctx);
/* A potentially unsafe call (allocations, VMM changes, synchronous copies) made by
 * this thread: refused, and the captures that forbid it invalidated, as
 * cuThreadExchangeStreamCaptureMode describes. */
CUresult sim_capture_unsafe_check(void);
/* Event rules: recording on a capturing stream (s->cap set), waiting (SIM_CAPTURED:
 * the capture's, nothing to enqueue; CUDA_SUCCESS: an ordinary wait), querying or
 * synchronizing an event last recorded in a capture. */
CUresult sim_capture_event_record(struct CUevent_st *e, struct CUstream_st *s);
CUresult sim_capture_event_wait(struct CUstream_st *s, struct CUevent_st *e, unsigned flags);
CUresult sim_capture_event_query_check(struct CUevent_st *e);
void sim_capture_stream_destroyed(struct CUstream_st *s);

/* ---- drv_kernel.c ---- */
sim_kernel_t *sim_kernel_from_handle(const void *h, int *is_func);  /* lock held */
/* A launch's geometry. */
typedef struct {
    unsigned grid[3], block[3];
    unsigned smem;
} sim_launch_dims_t;
/* A kernel operation of f (a CUkernel or CUfunction handle) with its arguments copied
 * from kernelParams or from extra's packed buffer, and its virtual duration, for a
 * launch or a graph's kernel node. Without the lock: the kernel's cost function is
 * user code. CUDA_ERROR_INVALID_HANDLE for an unknown f, INVALID_VALUE for bad
 * dimensions or arguments. */
CUresult sim_kernel_op_new(CUfunction f, const sim_launch_dims_t *d, void **params, void **extra, sim_op_t **op,
                           uint64_t *cost);
/* Marks a kernel operation whose arguments name another device's memory that dev may
 * not reach: it faults when it runs there (lock held). */
void sim_kernel_op_check_peer(sim_op_t *op, const sim_dev_t *dev);
int sim_register_kernel(const void *stub, const simcuda_kernel_desc_t *desc, const size_t *param_align);
CUkernel sim_kernel_by_stub(const void *stub);
const char *sim_kernel_name(const void *handle);
CUfunction sim_function_of(CUkernel kernel);

/* ---- API frame helpers (drv_api.c) ---- */
CUresult sim_api_enter(simcu_call_t *c, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                       const char *name, const void *params, const char *symbol,
                       void *retp, unsigned flags);
void sim_api_exit(simcu_call_t *c);

/* Every exported cu* function reads
 *     cuX_params p = {args}; simcu_call_t c; CUresult r;
 *     r = DRV_ENTER(&c, cuX, &p, &r, flags);
 *     if (r == CUDA_SUCCESS) r = <body>;
 *     sim_api_exit(&c); return r;
 * DRV_ENTER is an expression: it fires API_ENTER; sim_api_exit fires API_EXIT with
 * *retp. The cbid and function name come from the exported symbol's name. */
#define DRV_ENTER(c, sym, params, retp, flags)                                       \
    sim_api_enter((c), CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##sym, #sym, \
                  (params), NULL, (retp), (flags))

#endif

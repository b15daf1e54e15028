/* sim_priv.h - private interfaces between the three simulated libraries.
 *
 * The simulated libcuda.so.1 owns all state. The simulated libcudart.so.13 and
 * libcupti.so.13 reach it the way the real ones reach the real driver: dlopen, then
 * cuGetProcAddress_v2 for public entry points and cuGetExportTable (itself obtained
 * through cuGetProcAddress) with a private UUID for everything else. Nothing here is
 * part of the contract with test programs (that is simcuda.h).
 */
#ifndef SIM_PRIV_H
#define SIM_PRIV_H

#include <cuda.h>
#include <cupti_callbacks.h>
#include <stdint.h>
#include "simcuda.h"

/* UUIDs passed to cuGetExportTable. */
#define SIMCU_RT_TABLE_UUID    {{'s','i','m','c','u','d','a','-','r','u','n','t','i','m','e','1'}}
#define SIMCU_CUPTI_TABLE_UUID {{'s','i','m','c','u','d','a','-','c','u','p','t','i','-','-','1'}}

/* Flags of one API call (simcu_call_t.flags). */
enum {
    SIMCU_CALL_STICKY = 1,   /* fails with the context's sticky error, as on a GPU */
    SIMCU_CALL_SYNC   = 2,   /* a synchronize call: permitted inside a CUPTI callback */
    SIMCU_CALL_NOINIT = 4,   /* works before cuInit / without a context */
    SIMCU_CALL_QUIET  = 8,   /* fires no callbacks (error-string helpers) */
};

/* One API call in flight: filled by api_enter, consumed by api_exit. Lives on the
 * caller's stack. */
typedef struct simcu_call {
    CUpti_CallbackData cb;
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
    unsigned flags;
    int fired;          /* ENTER callback ran: EXIT must run too */
    int entered;        /* call depth was raised: api_exit lowers it */
    uint64_t corr_data;
    int api_record;     /* an API activity record is written at exit (set_activity's mask) */
    uint32_t corr;      /* the call's correlation id (shared by nested calls) */
    uint64_t t0;        /* host time at entry, for that record */
    const char *name;
} simcu_call_t;

/* What the runtime gets from cuGetExportTable(SIMCU_RT_TABLE_UUID). */
typedef struct simcu_rt_table {
    size_t size;
    int (*register_kernel)(const void *stub, const simcuda_kernel_desc_t *desc, const size_t *param_align);
    CUkernel (*kernel_by_stub)(const void *stub);
    const char *(*kernel_name)(const void *handle);   /* NULL if not a kernel/function */
    CUfunction (*function_of)(CUkernel kernel);       /* its CUfunction view, or NULL */
    /* Starts a call of the given domain. `retp` points at the caller's result (CUresult
     * or cudaError_t, both int-sized) and is read at exit. Returns CUDA_SUCCESS, or the
     * error the call must return without doing anything (not permitted inside a
     * callback, not initialised, sticky error). */
    CUresult (*api_enter)(simcu_call_t *c, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const char *name, const void *params, const char *symbol,
                          void *retp, unsigned flags);
    void (*api_exit)(simcu_call_t *c);
    /* Makes the primary context of `ordinal` current on this thread, retaining it
     * once per thread; fires no callbacks (the runtime's own bookkeeping). */
    CUresult (*use_device)(int ordinal);
    int (*device_count)(void);
    /* Sticky error of the current context, CUDA_SUCCESS if none. */
    CUresult (*sticky_error)(void);
    /* 1 when `dev` can access `peer`'s memory (FTSIM_PEER; never its own). */
    int (*peer_access)(int dev, int peer);
} simcu_rt_table_t;

/* Neutral activity record the driver hands to libcupti when a GPU operation
 * completes; libcupti lays it out as the header's CUpti_Activity* struct. */
typedef enum { SIMCU_ACT_KERNEL = 1, SIMCU_ACT_MEMCPY, SIMCU_ACT_MEMSET, SIMCU_ACT_EXTCORR, SIMCU_ACT_API } simcu_act_kind_t;

typedef struct simcu_activity {
    simcu_act_kind_t kind;
    uint64_t start, end;
    uint32_t device_id, context_id, stream_id, correlation_id;
    CUcontext context;
    /* kernel */
    const char *name;                 /* lives as long as the process */
    unsigned grid[3], block[3];
    unsigned dynamic_smem;
    /* memcpy / memset */
    uint64_t bytes;
    uint8_t copy_kind;                /* CUpti_ActivityMemcpyKind */
    uint8_t src_kind, dst_kind;       /* CUpti_ActivityMemoryKind */
    uint32_t memset_value;
    uint8_t memset_memkind;
    int async;
    /* external correlation: the id pushed on the calling thread, and its kind */
    uint64_t external_id;
    uint32_t external_kind;
    /* API call (SIMCU_ACT_API): its domain (CUpti_CallbackDomain), callback id, the
     * calling thread and the call's result; `name` is the function's name */
    uint32_t domain, cbid, thread_id, process_id, ret;
} simcu_activity_t;

/* Bits of the activity mask: which kinds the driver reports. */
enum { SIMCU_ACTMASK_KERNEL = 1, SIMCU_ACTMASK_MEMCPY = 2, SIMCU_ACTMASK_MEMSET = 4,
       SIMCU_ACTMASK_EXTCORR = 8, SIMCU_ACTMASK_RUNTIME = 16, SIMCU_ACTMASK_DRIVER = 32 };

/* External correlation kinds the simulator keeps a stack for (CUpti_ExternalCorrelationKind
 * values below this). */
#define SIMCU_EXT_KINDS 8

typedef void (*simcu_activity_sink_t)(const simcu_activity_t *rec);

/* What libcupti gets from cuGetExportTable(SIMCU_CUPTI_TABLE_UUID). */
typedef struct simcu_cupti_table {
    size_t size;
    /* 0, or -1 when a subscriber exists (or FTSIM_CUPTI_HELD=1 pretends one does). */
    int (*subscribe)(CUpti_CallbackFunc fn, void *userdata);
    void (*unsubscribe)(void);
    /* cbid == (CUpti_CallbackId)-1 means the whole domain. Returns 0 or -1 (bad id). */
    int (*enable_callback)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, int on);
    int (*callback_state)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
    void (*set_activity)(unsigned mask, simcu_activity_sink_t sink);
    uint64_t (*host_now)(void);
    uint32_t (*context_id)(CUcontext ctx);
    uint32_t (*stream_id)(CUstream stream);
    uint32_t (*device_id)(CUcontext ctx);
    /* cuptiActivityPush/PopExternalCorrelationId: a per-thread stack per kind; each API
     * call the thread then makes (outermost only) yields an EXTCORR record for the top
     * of every non-empty stack. 0, or -1 (bad kind, full or empty stack). */
    int (*push_external)(uint32_t kind, uint64_t id);
    int (*pop_external)(uint32_t kind, uint64_t *id);
    /* The device memory CUPTI's activity buffers hold on every device with a context:
     * bytes each (0 releases them). Counted as in use (cuMemGetInfo, the peak) as
     * nvidia-smi would see it. */
    void (*activity_memory)(uint64_t bytes);
} simcu_cupti_table_t;

#endif

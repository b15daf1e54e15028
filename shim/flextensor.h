/* flextensor.h - the small control API libflextensor.so exports to applications.
 *
 * Every function is safe to call whether or not the library is preloaded when looked
 * up with dlsym(RTLD_DEFAULT, ...), and from Python through ctypes:
 *     ft = ctypes.CDLL(None); ft.ft_enabled()
 * or, without writing ctypes code, through the flextensor module (python/flextensor,
 * docs/control.md).
 */
#ifndef FLEXTENSOR_H
#define FLEXTENSOR_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when FlexTensor is loaded and FT_ENABLED is on in this process, else 0. */
int ft_enabled(void);

/* An iteration (one pass over the weights, a forward) begins at the next launch on
 * this thread; replaces FlexTensor's own detection from the first call on. */
void ft_iteration_mark(void);

/* Profiling pauses (reference counted): passes under way while suspended are not
 * timed, so warm-up or evaluation passes do not pollute the samples. Resume returns 0,
 * or -1 when nothing was suspended. */
void ft_profiling_suspend(void);
int ft_profiling_resume(void);

/* Device memory the process holds through FlexTensor, in bytes as allocated (not
 * rounded to the mapping granularity); unsigned long long fields, for
 * ctypes.Structure. */
typedef struct {
    unsigned long long total_bytes;     /* all of it: the sum of the next four */
    unsigned long long resident_bytes;  /* weights of the units kept resident */
    unsigned long long slots_bytes;     /* streamed units loaded now (and a slot's
                                           memory between an unload and the next load) */
    unsigned long long other_bytes;     /* everything else: activations, caches, ... */
    unsigned long long unmapped_bytes;  /* not counted above: streamed weights held in
                                           pinned host memory now */
    unsigned long long budget_bytes;    /* the plan's budget; 0: none (least memory) */
} ft_gpu_memory_usage_t;

/* Fills *out and returns 0 once the plan is made (inference). Before it (discovery,
 * profiling) fills *out too and returns 1: every byte held is other_bytes (no byte is
 * known to be a weight yet), unmapped_bytes what FT_SPILL holds in host memory,
 * budget_bytes FT_SPILL's budget once it holds one. -1 when FlexTensor is not enabled
 * or made no plan it can keep. */
int ft_get_gpu_memory_usage(ft_gpu_memory_usage_t *out);

/* Runtime control (docs/control.md). Each returns 0 when done or accepted, -1 when
 * refused (FlexTensor not enabled, stood down, no plan that can change, a stream
 * capture under way, a call out of order; the reason is logged unless FlexTensor is
 * off), -2 when a budget is below the smallest that works (logged with that figure).
 * A refused call changes nothing. Make them between the program's own CUDA calls, from
 * one thread at a time, as vLLM's sleep mode does.
 *
 * The memory budget becomes `bytes` (as FT_GPU_MEM_LIMIT; 0: none, then
 * FT_MAX_GPU_MEM_FRACTION or latency mode). After the plan it is checked at once and
 * carried out at the next pass boundary: the plan is made again and units move
 * between the device and host memory. Before the plan, the plan to come is made for
 * it. */
int ft_set_gpu_mem_limit(unsigned long long bytes);

/* The units are profiled again over the next FT_PROFILING_ITERS passes, as they
 * stream, then the plan is made again (for the budget in force). */
int ft_request_replan(void);

/* Sleep: every weight FlexTensor can move goes to pinned host memory and its device
 * memory is freed (the resident units' too), now; the addresses stay valid. A kernel
 * that touches a released weight meanwhile gets it loaded first, as a streamed one
 * (slow, never a fault). keep_weights 0 (drop the weights, the program will write them
 * again) is not supported: refused, -1. */
int ft_release(int keep_weights);

/* Wake: the plan in force before ft_release comes back now (its resident units loaded
 * again; streamed ones as the passes need them), or the plan for a budget set while
 * released. -1 when nothing was released. */
int ft_resume(void);

/* Offload timing (docs/control.md), as FT_OFFLOAD_TIMING=on collects it: per unit, the
 * bytes moved, the copies' time, the compute they overlapped, the stall the compute
 * waited, hits (loads ahead of use) and misses (loads on demand); per pass, the step.
 * Times are sums over the passes timed (read from CUDA events once complete, never
 * waited for). The caller sets `size` (sizeof(ft_offload_timing_t)), and for the
 * per-unit entries `units` (an array of `units_cap` entries of `unit_size` bytes,
 * sizeof(ft_offload_timing_unit_t)); units_cap 0: the summary alone. The library
 * writes no more than `size` and `unit_size` bytes, and `version`: fields are only
 * ever added at the ends, so an older caller keeps working. Unsigned long long fields
 * for ctypes.Structure. */
#define FT_OFFLOAD_TIMING_VERSION 1
typedef struct {
    char name[64];                      /* the unit's name, cut to 63 bytes */
    unsigned long long streamed;        /* 1: it streams; 0: resident */
    unsigned long long streamed_bytes;  /* what one load copies in (its last load's; 0: none) */
    unsigned long long loads, hits, misses; /* hits + misses = loads */
    unsigned long long bytes_in;        /* copied in, all loads */
    unsigned long long bytes_out;       /* copied back at unloads (changed or unproven) */
    unsigned long long unloads;
    unsigned long long copies_timed;    /* loads whose copy was timed */
    unsigned long long transfer_ns;     /* those copies' time */
    unsigned long long overlap_ns;      /* compute that ran during them */
    unsigned long long compute_passes;  /* passes whose compute of the unit was timed */
    unsigned long long compute_ns;      /* its kernels' range, in those passes */
    unsigned long long stall_ns;        /* its first kernel waiting for its copy */
} ft_offload_timing_unit_t;

typedef struct {
    unsigned int size;                  /* caller: sizeof(ft_offload_timing_t) */
    unsigned int version;               /* library: FT_OFFLOAD_TIMING_VERSION */
    unsigned int unit_size;             /* caller: sizeof(ft_offload_timing_unit_t) */
    unsigned int units_cap;             /* caller: entries `units` has room for */
    ft_offload_timing_unit_t *units;    /* caller's array; the first min(n_units, units_cap) written */
    unsigned long long n_units;         /* library: the model's units */
    unsigned long long passes;          /* passes timed */
    unsigned long long passes_lost;     /* passes whose events could not be read */
    unsigned long long step_ns_total;   /* their steps' sum: mean step = total / passes */
    unsigned long long last_step_ns;
    unsigned long long predicted_step_ns; /* the plan's */
    unsigned long long stall_ns;        /* every unit's stall, all passes timed */
} ft_offload_timing_t;

/* Fills *report: 0 while timing is on; 1 when it was off (FT_OFFLOAD_TIMING=off): it
 * is on from now (the next pass is the first timed) and *report holds zeros; -1 when
 * FlexTensor is not enabled, report is NULL or a size is below version 1's. */
int ft_offload_timing_collect(ft_offload_timing_t *report);
/* The counts, times and kept passes start again from zero (timing stays on or off). */
void ft_offload_timing_reset(void);

/* A named range opens / closes on this thread: units are named after the innermost
 * range enclosing the launches that touch their weights. name NULL opens a range
 * without a name, which names nothing (ranges inside it still do).
 * libflextensor-nvtx.so (the NVTX injection library, NVTX_INJECTION64_PATH) calls
 * these for nvtxRangePush / nvtxRangePop (ranges with wide or registered strings, as
 * NCCL's, come without a name); a program without NVTX may call them itself. */
void ft_nvtx_range_push(const char *name);
void ft_nvtx_range_pop(void);

#ifdef __cplusplus
}
#endif
#endif

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

/* flextensor.h - the small control API libflextensor.so exports to applications.
 *
 * Every function is safe to call whether or not the library is preloaded when looked
 * up with dlsym(RTLD_DEFAULT, ...), and from Python through ctypes:
 *     ft = ctypes.CDLL(None); ft.ft_enabled()
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

/* simcuda.h - the simulated CUDA device's own extension API.
 *
 * The simulated device is a set of libraries with the real sonames (libcuda.so.1,
 * libcudart.so.13, libcupti.so.13) that implement, on host memory, the subset of the
 * CUDA driver, runtime and CUPTI APIs that FlexTensor and its test programs use.
 * Programs are written against the real CUDA headers; this header adds only what a
 * GPU gets from nvcc and the hardware: registering "kernels" (host functions) and
 * reading the virtual clock, plus test hooks (fault injection, memory in use).
 *
 * Device pointers are host addresses inside one reserved arena, so a kernel body
 * dereferences its pointer arguments directly; touching an unmapped or inaccessible
 * range raises cudaErrorIllegalAddress (sticky), as on a GPU.
 */
#ifndef SIMCUDA_H
#define SIMCUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SIMCUDA_MAX_PARAMS 32

typedef struct {
    unsigned grid[3];
    unsigned block[3];
    size_t shared_mem;
} simcuda_dims_t;

/* A kernel body: runs the whole grid on a stream's worker thread. args[i] points at
 * the i-th argument's bytes, as kernelParams do. */
typedef void (*simcuda_kernel_fn)(void **args, const simcuda_dims_t *dims);

/* Virtual duration of one launch in nanoseconds, computed at enqueue time. */
typedef uint64_t (*simcuda_cost_fn)(void **args, const simcuda_dims_t *dims);

typedef struct {
    const char *name;                       /* what cuKernelGetName and CUPTI report */
    simcuda_kernel_fn fn;
    simcuda_cost_fn cost;                   /* NULL: cost_ns is the duration */
    uint64_t cost_ns;
    int nparams;
    size_t param_size[SIMCUDA_MAX_PARAMS];  /* offsets follow natural alignment, as the
                                               CUDA ABI lays out a parameter buffer */
} simcuda_kernel_desc_t;

/* Registers a kernel under the host address `stub` (the role of nvcc's host stub), so
 * that cudaLaunchKernel(stub, ...), cudaGetKernel / __cudaGetKernel /
 * cudaGetFuncBySymbol and then the driver launch paths find it. Exported by the
 * simulated libcudart.so.13 (as __cudaRegisterFunction is by the real one); the desc
 * is copied. Returns 0, or a cudaError_t. */
int simcudaRegisterKernel(const void *stub, const simcuda_kernel_desc_t *desc);

/* As simcudaRegisterKernel, with explicit parameter alignments for over-aligned types
 * (a CUtensorMap is 128 bytes aligned to 64): param_align[i] is a power of two, or 0
 * for the natural alignment (the largest power of two dividing param_size[i], at most
 * 8). NULL means all natural. Exported by libcudart.so.13. */
int simcudaRegisterKernelEx(const void *stub, const simcuda_kernel_desc_t *desc,
                            const size_t param_align[SIMCUDA_MAX_PARAMS]);

/* The device's virtual clock in nanoseconds: the completion time of all work
 * enqueued so far on every stream (what a host that synchronised now would read).
 * Exported by the simulated libcuda.so.1. */
uint64_t simcudaVirtualNow(void);

/* The host's virtual time: where the host stands after its last wait (synchronize
 * calls, synchronous copies, event waits). cuptiGetTimestamp reads it. Exported by
 * the simulated libcuda.so.1. */
uint64_t simcudaHostNow(void);

/* Fault injection for in-process tests (the FTSIM_FAIL_* variables do the same at
 * init). The count of calls of that kind restarts at 0: the nth call from now fails
 * (nth >= 1), and with persist every later one too; nth == 0 disarms. Allocations fail
 * with CUDA_ERROR_OUT_OF_MEMORY (cudaErrorMemoryAllocation), copies at enqueue with
 * CUDA_ERROR_UNKNOWN (cudaErrorUnknown). Returns 0, or -1 for a bad kind. Exported by
 * the simulated libcuda.so.1. */
typedef enum {
    SIMCUDA_FAULT_ALLOC = 0,        /* cuMemAlloc*, cuMemCreate, stream-ordered allocs */
    SIMCUDA_FAULT_HOST_ALLOC = 1,   /* pinned host allocation or registration */
    SIMCUDA_FAULT_COPY = 2,         /* any memcpy, sync or async */
    SIMCUDA_FAULT_EVENT = 3         /* cuEventCreate */
} simcuda_fault_t;
int simcudaInjectFault(simcuda_fault_t kind, long nth, int persist);

/* Physical device memory in use on `device` (bytes, as counted against the capacity
 * FTSIM_DEVICE_MEM), or 0 for a bad ordinal. Exported by libcuda.so.1. */
uint64_t simcudaDeviceMemUsed(int device);

/* A driver entry point as a library reaching the driver through a private table would
 * call it ("cuLaunchKernel" only; NULL otherwise): an interposer does not see such a
 * call, CUPTI's callbacks do (FlexTensor's bypass report). */
void *simcudaUninterposed(const char *name);

/* cudaLaunchKernel as a library linking its own copy of the runtime makes it (cuBLAS):
 * the same runtime call (CUPTI's record and callbacks say cudaLaunchKernel), which an
 * interposer of the exported cudaLaunchKernel does not see; it sees the driver's
 * cuLaunchKernel, made while this call is open. Exported by libcudart.so.13. */
#if defined(CUDART_VERSION)
cudaError_t simcudaStaticLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                      cudaStream_t stream);
#endif

/* The runtime entry points nvcc's generated host code calls (declared by the CUDA
 * headers only when compiling with nvcc): a C test program that plays nvcc's part
 * includes cuda_runtime_api.h first and then calls them directly. */
#if defined(CUDART_VERSION) && !defined(__CUDACC__)
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *entryFuncAddr);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                    size_t sharedMem, cudaStream_t stream);
#endif

#ifdef __cplusplus
}
#endif
#endif

/* simcuda.h - the simulated CUDA device's own extension API.
 *
 * The simulated device is a set of libraries with the real sonames (libcuda.so.1,
 * libcudart.so.13, libcupti.so.13) that implement, on host memory, the subset of the
 * CUDA driver, runtime and CUPTI APIs that FlexTensor and its test programs use.
 * Programs are written against the real CUDA headers; this header adds only what a
 * GPU gets from nvcc and the hardware: registering "kernels" (host functions) and
 * reading the virtual clock.
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

/* The device's virtual clock in nanoseconds: the completion time of all work
 * enqueued so far on every stream (what a host that synchronised now would read).
 * Exported by the simulated libcuda.so.1. */
uint64_t simcudaVirtualNow(void);

#ifdef __cplusplus
}
#endif
#endif

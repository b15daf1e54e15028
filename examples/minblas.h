/* minblas.h - a minimal library in cuBLAS's manner: it reaches the driver by itself
 * (dlopen libcuda.so.1, cuGetProcAddress) and launches with the arguments packed in
 * `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER), bypassing the CUDA runtime. */
#ifndef MINBLAS_H
#define MINBLAS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kernel: the scale kernel's handle (a CUkernel, from cudaGetKernel). 0 or an error. */
int minblas_init(void *kernel);

/* y[i] = y[i] * (s[i] | 1) + (y[i] >> 7) on `stream` (a cudaStream_t / CUstream). */
int minblas_scale(void *stream, uint32_t *y, const uint32_t *s, int n);

#ifdef __cplusplus
}
#endif
#endif

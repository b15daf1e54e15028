/* minblas.c - see minblas.h. Works unchanged against a real libcuda and the
 * simulated one: this is the path cuBLAS's nvjet GEMMs take on the H200. */
#include "examples/minblas.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "examples/kernels.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);

static launch_ex_fn launch_ex;
static CUfunction scale_kernel;

int minblas_init(void *kernel)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "minblas: dlopen libcuda.so.1: %s\n", dlerror());
        return -1;
    }
    get_proc_fn get_proc = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
    if (get_proc == NULL) {
        fprintf(stderr, "minblas: libcuda.so.1 has no cuGetProcAddress_v2\n");
        return -1;
    }
    CUdriverProcAddressQueryResult status;
    CUresult rc = get_proc("cuLaunchKernelEx", (void **)&launch_ex, 12000,
                           CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if (rc != CUDA_SUCCESS || launch_ex == NULL) {
        fprintf(stderr, "minblas: cuGetProcAddress(cuLaunchKernelEx) failed: %d\n", (int)rc);
        return -1;
    }
    /* A CUkernel is accepted where a CUfunction is expected (context-independent
     * loading), which is how cuBLAS hands its kernels to the driver. */
    scale_kernel = (CUfunction)kernel;
    return 0;
}

int minblas_scale(void *stream, uint32_t *y, const uint32_t *s, int n)
{
    /* The parameter buffer as the CUDA ABI lays it out: two pointers, then an int. */
    unsigned char buf[24];
    size_t size = 20;
    memset(buf, 0, sizeof buf);
    memcpy(buf + 0, &y, sizeof y);
    memcpy(buf + 8, &s, sizeof s);
    memcpy(buf + 16, &n, sizeof n);
    void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                      CU_LAUNCH_PARAM_END };

    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = (unsigned)((n + MODEL_BLOCK - 1) / MODEL_BLOCK);
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = MODEL_BLOCK;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = (CUstream)stream;
    CUresult rc = launch_ex(&cfg, scale_kernel, NULL, extra);
    return rc == CUDA_SUCCESS ? 0 : (int)rc;
}

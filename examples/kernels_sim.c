/* kernels_sim.c - the example model's kernels for the simulated device (see
 * kernels.h): host functions registered with their names, parameter layouts and
 * virtual durations, as nvcc's registration code would do on a GPU. The names are
 * the mangled names nvcc gives kernels.cu's kernels, so traces read the same. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

#include "examples/kernels.h"
#include "tests/sim/simcuda.h"

/* Virtual cost model: the GEMM-like kernel reads its weight at 3 bytes per virtual ns
 * (MODEL_SIM_BYTES_PER_NS sets another speed, read once), which makes a step
 * compute-bound against the simulated link's 55 bytes per ns; the small kernels take a
 * fixed 2 us. */
#define SIM_BYTES_PER_NS 3u
#define SIM_SMALL_KERNEL_NS 2000u

static void gemv(void **args, const simcuda_dims_t *dims)
{
    const uint32_t *w = *(const uint32_t **)args[0];
    const uint32_t *x = *(const uint32_t **)args[1];
    uint32_t *y = *(uint32_t **)args[2];
    int n = *(int *)args[3];
    for (int r = 0; r < n; r++) {
        const uint32_t *row = w + (size_t)r * (size_t)n;
        uint32_t acc = 0;
        for (int c = 0; c < n; c++)
            acc += row[c] * x[c];
        y[r] = acc;
    }
}

static uint64_t gemv_cost(void **args, const simcuda_dims_t *dims)
{
    static uint64_t bpn;
    if (bpn == 0) {
        const char *e = getenv("MODEL_SIM_BYTES_PER_NS");
        bpn = e != NULL && atoi(e) > 0 ? (uint64_t)atoi(e) : SIM_BYTES_PER_NS;
    }
    uint64_t n = (uint64_t)*(int *)args[3];
    return n * n * 4 / bpn;
}

static void mix(void **args, const simcuda_dims_t *dims)
{
    uint32_t *y = *(uint32_t **)args[0];
    const uint32_t *bias = *(const uint32_t **)args[1];
    int n = *(int *)args[2];
    for (int i = 0; i < n; i++) {
        uint32_t t = y[i] + bias[i];
        y[i] = t ^ (t >> 13);
    }
}

static void scale(void **args, const simcuda_dims_t *dims)
{
    uint32_t *y = *(uint32_t **)args[0];
    const uint32_t *s = *(const uint32_t **)args[1];
    int n = *(int *)args[2];
    for (int i = 0; i < n; i++)
        y[i] = y[i] * (s[i] | 1u) + (y[i] >> 7);
}

static void mixp(void **args, const simcuda_dims_t *dims)
{
    uint32_t *y = *(uint32_t **)args[0];
    const uint32_t *const *tbl = *(const uint32_t *const **)args[1];
    int n = *(int *)args[2];
    const uint32_t *v = tbl[0];
    for (int i = 0; i < n; i++)
        y[i] += v[i] ^ 0x9e3779b9u;
}

static void bump(void **args, const simcuda_dims_t *dims)
{
    uint32_t *y = *(uint32_t **)args[0];
    const struct model_meta *m = args[1];
    for (uint32_t i = 0; i < m->n; i++)
        y[i] ^= i * 2654435761u;
}

static void gather(void **args, const simcuda_dims_t *dims)
{
    uint32_t *y = *(uint32_t **)args[0];
    const struct model_gather *g = args[1];
    for (uint32_t i = 0; i < g->len; i++) {
        uint32_t acc = 0;
        for (uint32_t k = 0; k < g->n; k++)
            acc += g->src[k][i] ^ k;
        y[i] += acc;
    }
}

static void cat(void **args, const simcuda_dims_t *dims)
{
    uint32_t *dst = *(uint32_t **)args[0];
    const uint32_t *src = *(const uint32_t **)args[1];
    const uint32_t *x = *(const uint32_t **)args[2];
    int len = *(int *)args[3], add = *(int *)args[4], row = *(int *)args[5], n = *(int *)args[6];
    size_t old = (size_t)len * (size_t)row;
    for (size_t i = 0; i < old; i++)
        dst[i] = src[i];
    for (uint32_t r = (uint32_t)len; r < (uint32_t)(len + add); r++)
        for (uint32_t j = 0; j < (uint32_t)row; j++)
            dst[(size_t)r * (size_t)row + j] = x[(j + r - (uint32_t)len) % (uint32_t)n] ^ r * 0x9e3779b9u;
}

/* Copies the old rows and writes the new ones, at about HBM speed. */
static uint64_t cat_cost(void **args, const simcuda_dims_t *dims)
{
    uint64_t rows = (uint64_t)*(int *)args[3] + (uint64_t)*(int *)args[4];
    return SIM_SMALL_KERNEL_NS + rows * (uint64_t)*(int *)args[5] * 8 / SIM_BYTES_PER_NS;
}

static void attend(void **args, const simcuda_dims_t *dims)
{
    uint32_t *y = *(uint32_t **)args[0];
    const uint32_t *k = *(const uint32_t **)args[1];
    const uint32_t *v = *(const uint32_t **)args[2];
    int len = *(int *)args[3], row = *(int *)args[4], n = *(int *)args[5];
    for (int i = 0; i < n; i++) {
        uint32_t acc = 0;
        for (int r = 0; r < len; r++)
            acc += k[(size_t)r * (size_t)row + (size_t)(i % row)] ^
                   (v[(size_t)r * (size_t)row + (size_t)((i + r) % row)] >> 1);
        y[i] += acc;
    }
}

static void fill(void **args, const simcuda_dims_t *dims)
{
    uint32_t *y = *(uint32_t **)args[0];
    uint32_t seed = *(uint32_t *)args[1];
    int n = *(int *)args[2];
    for (int i = 0; i < n; i++) {
        uint32_t h = (seed + (uint32_t)i) * 2654435761u;
        y[i] = h ^ (h >> 15);
    }
}

/* The stubs only need distinct addresses, as nvcc's host stubs do. */
static const char gemv_stub, gemv_wide_stub, mix_stub, mix_alt_stub, scale_stub, mixp_stub, bump_stub, gather_stub, cat_stub, attend_stub,
    fill_stub;

const void *model_kernel_gemv(void) { return &gemv_stub; }
const void *model_kernel_gemv_wide(void) { return &gemv_wide_stub; }
const void *model_kernel_mix(void) { return &mix_stub; }
const void *model_kernel_mix_alt(void) { return &mix_alt_stub; }
const void *model_kernel_scale(void) { return &scale_stub; }
const void *model_kernel_mixp(void) { return &mixp_stub; }
const void *model_kernel_bump(void) { return &bump_stub; }
const void *model_kernel_gather(void) { return &gather_stub; }
const void *model_kernel_cat(void) { return &cat_stub; }
const void *model_kernel_attend(void) { return &attend_stub; }
const void *model_kernel_fill(void) { return &fill_stub; }

int model_launch_uninterposed(const void *stub, unsigned grid, unsigned block, void **args, void *stream)
{
    typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             void *, void **, void **);
    /* The simulated driver's extension; the runtime this program links exports none. */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *(*uninterposed)(const char *) = drv ? (void *(*)(const char *))dlsym(drv, "simcudaUninterposed") : NULL;
    launch_fn launch = uninterposed ? (launch_fn)uninterposed("cuLaunchKernel") : NULL;
    void *f = NULL;
    if (launch == NULL || cudaGetFuncBySymbol((cudaFunction_t *)&f, stub) != cudaSuccess)
        return -1;
    return launch(f, grid, 1, 1, block, 1, 1, 0, stream, args, NULL) == 0 ? 0 : -1;
}

__attribute__((constructor)) static void register_kernels(void)
{
    static const simcuda_kernel_desc_t descs[] = {
        { "_Z10model_gemvPKjS0_Pji", gemv, gemv_cost, 0, 4, { 8, 8, 8, 4 } },
        { "_Z9model_mixPjPKji", mix, NULL, SIM_SMALL_KERNEL_NS, 3, { 8, 8, 4 } },
        { "_Z11model_scalePjPKji", scale, NULL, SIM_SMALL_KERNEL_NS, 3, { 8, 8, 4 } },
        { "_Z10model_mixpPjPKPKji", mixp, NULL, SIM_SMALL_KERNEL_NS, 3, { 8, 8, 4 } },
        { "_Z10model_bumpPj10model_meta", bump, NULL, SIM_SMALL_KERNEL_NS, 2,
          { 8, sizeof(struct model_meta) } },
        { "_Z12model_gatherPj12model_gather", gather, NULL, SIM_SMALL_KERNEL_NS, 2,
          { 8, sizeof(struct model_gather) } },
        { "_Z9model_catPjPKjS1_iiii", cat, cat_cost, 0, 7, { 8, 8, 8, 4, 4, 4, 4 } },
        { "_Z12model_attendPjPKjS1_iii", attend, NULL, SIM_SMALL_KERNEL_NS, 6, { 8, 8, 8, 4, 4, 4 } },
        { "_Z10model_fillPjji", fill, NULL, SIM_SMALL_KERNEL_NS, 3, { 8, 4, 4 } },
        { "_Z15model_gemv_widePKjS0_Pji", gemv, gemv_cost, 0, 4, { 8, 8, 8, 4 } },
        { "_Z13model_mix_altPjPKji", mix, NULL, SIM_SMALL_KERNEL_NS, 3, { 8, 8, 4 } },
    };
    simcudaRegisterKernel(&gemv_stub, &descs[0]);
    simcudaRegisterKernel(&mix_stub, &descs[1]);
    simcudaRegisterKernel(&scale_stub, &descs[2]);
    simcudaRegisterKernel(&mixp_stub, &descs[3]);
    simcudaRegisterKernel(&bump_stub, &descs[4]);
    simcudaRegisterKernel(&gather_stub, &descs[5]);
    simcudaRegisterKernel(&cat_stub, &descs[6]);
    simcudaRegisterKernel(&attend_stub, &descs[7]);
    simcudaRegisterKernel(&fill_stub, &descs[8]);
    simcudaRegisterKernel(&gemv_wide_stub, &descs[9]);
    simcudaRegisterKernel(&mix_alt_stub, &descs[10]);
}

/* sim_test.h - helpers shared by the simulator's Check suites (tests/check_sim_*.c):
 * a few registered kernels, stderr capture, environment setup. Everything is static:
 * each suite gets its own copy. Call these only inside test functions (after Check's
 * fork), never before: the simulated device must start fresh in every test. */
#ifndef SIM_TEST_H
#define SIM_TEST_H

#define _GNU_SOURCE
#include <check.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "simcuda.h"

/* Each suite uses a subset of these helpers. */
#pragma GCC diagnostic ignored "-Wunused-function"

#define RT_OK(x) ck_assert_int_eq((int)(x), (int)cudaSuccess)
#define CU_OK(x) ck_assert_int_eq((int)(x), (int)CUDA_SUCCESS)

static const dim3 ONE = {1, 1, 1};

/* ---- kernels ---------------------------------------------------------- */

/* fill(float *p, float v, size_t n): p[i] = v. Cost 1000 ns. */
static void k_fill_body(void **a, const simcuda_dims_t *d)
{
    (void)d;
    float *p = *(float **)a[0];
    float v = *(float *)a[1];
    size_t n = *(size_t *)a[2];
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}
static char k_fill;

/* touch(char *p, size_t off): p[off] = 1. Cost 100 ns. */
static void k_touch_body(void **a, const simcuda_dims_t *d)
{
    (void)d;
    char *p = *(char **)a[0];
    size_t off = *(size_t *)a[1];
    p[off] = 1;
}
static char k_touch;

/* sleepy(volatile int *flag, unsigned usec): sleeps for real, then sets *flag.
 * Virtual cost: usec * 1000 ns. flag is plain host memory. */
static void k_sleepy_body(void **a, const simcuda_dims_t *d)
{
    (void)d;
    volatile int *flag = *(volatile int **)a[0];
    unsigned usec = *(unsigned *)a[1];
    usleep(usec);
    __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
}
static uint64_t k_sleepy_cost(void **a, const simcuda_dims_t *d)
{
    (void)d;
    return (uint64_t)*(unsigned *)a[1] * 1000u;
}
static char k_sleepy;

/* readflag(volatile int *src, int *dst): *dst = *src + 1 (so 0 means "not run"). */
static void k_readflag_body(void **a, const simcuda_dims_t *d)
{
    (void)d;
    volatile int *src = *(volatile int **)a[0];
    int *dst = *(int **)a[1];
    *dst = __atomic_load_n(src, __ATOMIC_SEQ_CST) + 1;
}
static char k_readflag;

/* logk(int id): appends id to a host log, in execution order. Cost given by a
 * cost function: id * 100 ns. */
static int g_log[256];
static int g_nlog;
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static void k_log_body(void **a, const simcuda_dims_t *d)
{
    (void)d;
    pthread_mutex_lock(&g_log_lock);
    if (g_nlog < 256)
        g_log[g_nlog++] = *(int *)a[0];
    pthread_mutex_unlock(&g_log_lock);
}
static uint64_t k_log_cost(void **a, const simcuda_dims_t *d)
{
    (void)d;
    return (uint64_t)*(int *)a[0] * 100u;
}
static char k_log;

/* spin(uint64_t ns): a kernel of exactly `ns` virtual nanoseconds, no body work. */
static void k_spin_body(void **a, const simcuda_dims_t *d) { (void)a; (void)d; }
static uint64_t k_spin_cost(void **a, const simcuda_dims_t *d)
{
    (void)d;
    return *(uint64_t *)a[0];
}
static char k_spin;

static void sim_test_register(void)
{
    simcuda_kernel_desc_t fill = {.name = "fill", .fn = k_fill_body, .cost_ns = 1000, .nparams = 3,
                                  .param_size = {8, 4, 8}};
    simcuda_kernel_desc_t touch = {.name = "touch", .fn = k_touch_body, .cost_ns = 100, .nparams = 2,
                                   .param_size = {8, 8}};
    simcuda_kernel_desc_t sleepy = {.name = "sleepy", .fn = k_sleepy_body, .cost = k_sleepy_cost,
                                    .nparams = 2, .param_size = {8, 4}};
    simcuda_kernel_desc_t readflag = {.name = "readflag", .fn = k_readflag_body, .cost_ns = 10,
                                      .nparams = 2, .param_size = {8, 8}};
    simcuda_kernel_desc_t logk = {.name = "logk", .fn = k_log_body, .cost = k_log_cost, .nparams = 1,
                                  .param_size = {4}};
    simcuda_kernel_desc_t spin = {.name = "spin", .fn = k_spin_body, .cost = k_spin_cost, .nparams = 1,
                                  .param_size = {8}};
    ck_assert_int_eq(simcudaRegisterKernel(&k_fill, &fill), 0);
    ck_assert_int_eq(simcudaRegisterKernel(&k_touch, &touch), 0);
    ck_assert_int_eq(simcudaRegisterKernel(&k_sleepy, &sleepy), 0);
    ck_assert_int_eq(simcudaRegisterKernel(&k_readflag, &readflag), 0);
    ck_assert_int_eq(simcudaRegisterKernel(&k_log, &logk), 0);
    ck_assert_int_eq(simcudaRegisterKernel(&k_spin, &spin), 0);
}

static cudaError_t launch_fill(float *p, float v, size_t n, cudaStream_t s)
{
    void *args[] = {&p, &v, &n};
    return cudaLaunchKernel(&k_fill, ONE, ONE, args, 0, s);
}

static cudaError_t launch_touch(void *p, size_t off, cudaStream_t s)
{
    void *args[] = {&p, &off};
    return cudaLaunchKernel(&k_touch, ONE, ONE, args, 0, s);
}

static cudaError_t launch_sleepy(volatile int *flag, unsigned usec, cudaStream_t s)
{
    void *args[] = {&flag, &usec};
    return cudaLaunchKernel(&k_sleepy, ONE, ONE, args, 0, s);
}

static cudaError_t launch_readflag(volatile int *src, int *dst, cudaStream_t s)
{
    void *args[] = {&src, &dst};
    return cudaLaunchKernel(&k_readflag, ONE, ONE, args, 0, s);
}

static cudaError_t launch_log(int id, cudaStream_t s)
{
    void *args[] = {&id};
    return cudaLaunchKernel(&k_log, ONE, ONE, args, 0, s);
}

static cudaError_t launch_spin(uint64_t ns, cudaStream_t s)
{
    void *args[] = {&ns};
    return cudaLaunchKernel(&k_spin, ONE, ONE, args, 0, s);
}

/* ---- stderr capture ----------------------------------------------------- */

static int g_cap_fd = -1, g_saved_fd = -1;
static char g_cap_buf[16384];

static void stderr_capture_begin(void)
{
    g_cap_fd = memfd_create("stderr-capture", 0);
    ck_assert_int_ge(g_cap_fd, 0);
    g_saved_fd = dup(2);
    dup2(g_cap_fd, 2);
}

/* Restores stderr and returns what was written since begin (NUL-terminated). */
static const char *stderr_capture_end(void)
{
    dup2(g_saved_fd, 2);
    close(g_saved_fd);
    off_t n = lseek(g_cap_fd, 0, SEEK_END);
    if (n > (off_t)sizeof g_cap_buf - 1)
        n = (off_t)sizeof g_cap_buf - 1;
    ssize_t got = pread(g_cap_fd, g_cap_buf, (size_t)n, 0);
    g_cap_buf[got > 0 ? got : 0] = 0;
    close(g_cap_fd);
    /* Echo it, so a failing test still shows the simulator's messages. */
    ssize_t w = write(2, g_cap_buf, strlen(g_cap_buf));
    (void)w;
    return g_cap_buf;
}

static int count_lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* ---- misc ---------------------------------------------------------------- */

static double real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Driver API setup for tests that use it directly: cuInit + primary context. */
static CUcontext drv_setup(void)
{
    CUcontext ctx;
    CU_OK(cuInit(0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_OK(cuCtxSetCurrent(ctx));
    return ctx;
}

#endif

/* disc_cost.c - host cost of discovery's per-launch work in core/ alone (the argument
 * scan and the discovery engine), without CUDA: a model of 128 layers whose GEMMs pass
 * a 1720-byte parameter buffer with three device pointers, as cuBLAS's nvjet kernels
 * do, and elementwise kernels passing three pointers in 40 bytes. Prints ns per
 * launch. Built by `make bench-core`; a benchmark, not a test.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/discovery.h"
#include "core/log.h"
#include "core/regions.h"
#include "core/scan.h"

#define LAYERS 128
#define PER_LAYER 8

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    ft_log_set_threshold(FT_LOG_ERROR);
    ft_regions_t *t = ft_regions_new();
    uint64_t base = 0x300000000ull, w[LAYERS * PER_LAYER], act[4];
    for (int i = 0; i < LAYERS * PER_LAYER; i++, base += 64ull << 20)
        ft_regions_insert(t, w[i] = base, 32ull << 20, 1, 0);
    for (int i = 0; i < 4; i++, base += 64ull << 20)
        ft_regions_insert(t, act[i] = base, 8ull << 20, 1, 0);
    ft_disc_params_t p;
    memset(&p, 0, sizeof p);
    p.iters = 1 << 30; /* never done: every launch pays discovery's work */
    ft_disc_t *d = ft_disc_new(t, &p);

    unsigned char gemm[1720], ew[40];
    memset(gemm, 0, sizeof gemm);
    for (size_t off = 0; off < sizeof gemm; off += 8) { /* small integers, as shapes */
        uint64_t v = off * 3;
        memcpy(gemm + off, &v, 8);
    }
    long launches = 0;
    double t0 = now();
    for (int pass = 0; pass < 20; pass++) {
        for (int i = 0; i < LAYERS * PER_LAYER; i++) {
            ft_scan_set_t set;
            memcpy(gemm + 176, &w[i], 8);
            memcpy(gemm + 240, &act[0], 8);
            memcpy(gemm + 328, &act[1], 8);
            ft_scan_set_clear(&set);
            ft_scan_bytes(t, gemm, sizeof gemm, &set);
            ft_disc_launch(d, 1, 0x1000, "nvjet_gemm", &set);
            memcpy(ew, &act[1], 8);
            memcpy(ew + 8, &act[2], 8);
            memcpy(ew + 16, &act[3], 8);
            ft_scan_set_clear(&set);
            ft_scan_bytes(t, ew, sizeof ew, &set);
            ft_disc_launch(d, 1, 0x2000, "elementwise", &set);
            launches += 2;
        }
    }
    double dt = now() - t0;
    printf("{\"launches\": %ld, \"ns_per_launch\": %.1f, \"iterations\": %d}\n", launches,
           dt / (double)launches * 1e9, ft_disc_iterations(d));
    ft_disc_free(d);
    ft_regions_free(t);
    return 0;
}

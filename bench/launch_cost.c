/* launch_cost.c - host cost of one kernel launch through the CUDA runtime, for
 * comparing FlexTensor's configurations (bench/run.sh runs it interleaved). The
 * launches pick among --weights buffers of 2 MiB allocated before the first launch in
 * a pseudo-random order that never repeats a period, so discovery keeps doing its
 * per-launch work (scan, engine) and never reaches an iteration boundary, whose
 * content snapshots are a per-pass cost, not a per-launch one.
 *
 * With --repeat, the launches go over the weights in order, a pass of W launches
 * repeated: discovery finds the passes, profiling times them, and the plan (with a
 * budget above the W x 2 MiB) streams nothing; 20 passes run before the timed rounds,
 * so what is timed is FlexTensor's cost after the plan (the steady state of a model
 * that fits the budget).
 *
 *   launch_cost [--launches N] [--weights W] [--repeat]   prints {"ns_per_launch": ...}
 *
 * Built with the example model's kernels: `make gpu-bench` (GPU) or the simulator.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "examples/kernels.h"

#define CHECK(x)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (x);                                                             \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "launch_cost: %s: %s\n", #x, cudaGetErrorString(e_));        \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long launches = 20000;
    int weights = 256, repeat = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeat") == 0)
            repeat = 1;
        else if (strcmp(argv[i], "--launches") == 0 && i + 1 < argc)
            launches = atol(argv[++i]);
        else if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc)
            weights = atoi(argv[++i]);
        else
            launches = -1;
    }
    if (weights < 1 || weights > 4096 || launches < 1) {
        fprintf(stderr, "usage: launch_cost [--launches N] [--weights 1..4096] [--repeat]\n");
        return 2;
    }
    uint32_t **w = calloc((size_t)weights, sizeof *w), *y;
    for (int i = 0; i < weights; i++)
        CHECK(cudaMalloc((void **)&w[i], 2u << 20));
    CHECK(cudaMalloc((void **)&y, 4096));
    int n = 1;
    dim3 one = { 1, 1, 1 };
    const void *mix = model_kernel_mix();
    double best = 1e30;
    uint64_t lcg = 88172645463325252ull;
    for (long i = 0; repeat && i < 20L * weights; i++) {
        void *args[] = { &y, &w[i % weights], &n };
        CHECK(cudaLaunchKernel(mix, one, one, args, 0, 0));
        if (i % weights == weights - 1)
            CHECK(cudaDeviceSynchronize()); /* passes, as a model's steps */
    }
    long at = 0;
    for (int round = 0; round < 6; round++) {
        CHECK(cudaDeviceSynchronize());
        double t0 = now();
        for (long i = 0; i < launches; i++) {
            lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t k = repeat ? (uint64_t)(at++ % weights) : (lcg >> 33) % (uint64_t)weights;
            void *args[] = { &y, &w[k], &n };
            CHECK(cudaLaunchKernel(mix, one, one, args, 0, 0));
        }
        CHECK(cudaDeviceSynchronize());
        double per = (now() - t0) / (double)launches;
        if (round > 0 && per < best) /* round 0 warms up */
            best = per;
    }
    printf("{\"launches\": %ld, \"weights\": %d, \"repeat\": %d, \"ns_per_launch\": %.1f}\n", launches,
           weights, repeat, best);
    return 0;
}

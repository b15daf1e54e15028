/* scan_replay.c - the argument scan (core/scan.c) on the argument buffers a real
 * PyTorch model passed on an H200 (bench/data/h200_llama_args.txt: the first launch
 * of each kernel of a 4-layer Llama decode, nonzero words as logged at
 * FT_LOG_LEVEL=trace), without CUDA. Every word that was in a region gets one of its
 * own. Prints ns per buffer scanned, on average and for the large ones, as discovery
 * scans them (learning) and as profiling does (not learning, sure ids only).
 * Built by `make bench-core`; a benchmark, not a test.
 *
 *   scan_replay [FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/regions.h"
#include "core/scan.h"

#define MAX_BUFS 256
#define ROUNDS 20000

typedef struct {
    char name[64];
    size_t size;
    unsigned char *b;
    ft_scan_junk_t junk;
} buf_t;

static buf_t bufs[MAX_BUFS];
static size_t n_bufs;
static uint64_t ptrs[4096];
static size_t n_ptrs;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    char line[512];
    buf_t *cur = NULL;
    while (fgets(line, sizeof line, f) != NULL) {
        char name[64], kind[16], flag[4] = "";
        size_t size, off;
        unsigned long long v;
        if (line[0] == '#')
            continue;
        if (sscanf(line, "buffer %63s %15s %zu", name, kind, &size) == 3) {
            if (n_bufs == MAX_BUFS)
                break;
            cur = &bufs[n_bufs++];
            snprintf(cur->name, sizeof cur->name, "%s", name);
            cur->size = size;
            cur->b = calloc(1, size + 8);
        } else if (cur != NULL && sscanf(line, "%zu %llx %3s", &off, &v, flag) >= 2 && off + 8 <= cur->size) {
            memcpy(cur->b + off, &v, 8);
            if (strcmp(flag, "r") == 0 && n_ptrs < 4096)
                ptrs[n_ptrs++] = v;
        }
    }
    fclose(f);
    return n_bufs > 0 ? 0 : -1;
}

/* ns per buffer over ROUNDS passes of every buffer (big: only those of 512 bytes or
 * more), with flags; the junk maps learned beforehand by one pass with learning. */
static double run(ft_regions_t *t, int flags, int big)
{
    ft_scan_set_t set;
    size_t scans = 0;
    double t0 = now();
    for (int r = 0; r < ROUNDS; r++)
        for (size_t i = 0; i < n_bufs; i++) {
            if (big && bufs[i].size < 512)
                continue;
            ft_scan_set_clear(&set);
            ft_scan_bytes_junk(t, bufs[i].b, bufs[i].size, &bufs[i].junk, flags, &set);
            scans++;
        }
    return (now() - t0) / (double)scans;
}

int main(int argc, char **argv)
{
    if (load(argc > 1 ? argv[1] : "bench/data/h200_llama_args.txt") != 0)
        return 1;
    ft_regions_t *t = ft_regions_new();
    qsort(ptrs, n_ptrs, sizeof *ptrs, cmp_u64);
    for (size_t i = 0; i < n_ptrs; i++) { /* one region from each address to the next */
        if (i > 0 && ptrs[i] == ptrs[i - 1])
            continue;
        uint64_t end = i + 1 < n_ptrs ? ptrs[i + 1] : ptrs[i] + (1u << 20);
        if (end > ptrs[i])
            ft_regions_insert(t, ptrs[i], end - ptrs[i], 0, 0);
    }
    for (int k = 0; k < 400; k++) /* as many others as a small model's table holds */
        ft_regions_insert(t, 0x7f0000000000ull + (uint64_t)k * (4u << 20), 2u << 20, 0, 0);
    ft_scan_set_t set;
    for (size_t i = 0; i < n_bufs; i++) {
        ft_scan_set_clear(&set);
        ft_scan_bytes_junk(t, bufs[i].b, bufs[i].size, &bufs[i].junk, FT_SCAN_LEARN, &set);
    }
    size_t bytes = 0, big = 0;
    for (size_t i = 0; i < n_bufs; i++) {
        bytes += bufs[i].size;
        big += bufs[i].size >= 512;
    }
    printf("%zu buffers (%zu of 512 bytes or more), %zu bytes, %zu region addresses; ns per buffer scanned:\n",
           n_bufs, big, bytes, n_ptrs);
    printf("  discovery (learning):               all %.1f  large %.1f\n", run(t, FT_SCAN_LEARN | FT_SCAN_SURE, 0),
           run(t, FT_SCAN_LEARN | FT_SCAN_SURE, 1));
    printf("  profiling (sure ids only):          all %.1f  large %.1f\n", run(t, FT_SCAN_SURE, 0),
           run(t, FT_SCAN_SURE, 1));
    printf("  guard (unsure ids too, no learning): all %.1f  large %.1f\n", run(t, 0, 0), run(t, 0, 1));
    ft_regions_free(t);
    return 0;
}

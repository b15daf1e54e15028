/* checksum.c - core/checksum.h's host sum on several cores.
 *
 * The sum is one of per-word mixes, so parts summed apart add up to the whole. Large
 * buffers (a saved profile's check of the weights FT_SPILL holds in host memory, 8.5 GB
 * of a 13 GB model on the H200; FT_SHM's checks; discovery's snapshots of spilled
 * allocations) are cut into one part per thread, up to FT_CHECKSUM_THREADS: one core
 * sums about 8 GB/s. A thread that cannot be started has its part summed by the caller. */
#include "core/checksum.h"

#include <pthread.h>
#include <unistd.h>

#define FT_CHECKSUM_THREADS 8
#define PART_MIN (64ull << 20) /* bytes a thread: below two of these, one thread */

struct part {
    const unsigned char *p;
    uint64_t words, salt, sum;
};

static void *part_sum(void *arg)
{
    struct part *h = arg;
    h->sum = ft_checksum_host(h->p, h->words, h->salt);
    return NULL;
}

uint64_t ft_checksum_host_parallel(const void *p, uint64_t n_words, uint64_t salt)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t n = n_words * 8 / PART_MIN;
    if (n > FT_CHECKSUM_THREADS)
        n = FT_CHECKSUM_THREADS;
    if (cpus > 0 && n > (uint64_t)cpus)
        n = (uint64_t)cpus;
    if (n < 2)
        return ft_checksum_host(p, n_words, salt);
    struct part part[FT_CHECKSUM_THREADS];
    pthread_t tid[FT_CHECKSUM_THREADS];
    int started[FT_CHECKSUM_THREADS] = { 0 };
    uint64_t each = n_words / n, sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t first = i * each;
        part[i] = (struct part){ (const unsigned char *)p + first * 8, i + 1 < n ? each : n_words - first,
                                 salt + first, 0 };
        if (i > 0) /* part 0 is the caller's */
            started[i] = pthread_create(&tid[i], NULL, part_sum, &part[i]) == 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (i > 0 && started[i])
            pthread_join(tid[i], NULL);
        else
            part_sum(&part[i]);
        sum += part[i].sum;
    }
    return sum;
}

/* checksum.c - core/checksum.h's host sum on several cores.
 *
 * The sum is one of per-word mixes, so parts summed apart add up to the whole. Large
 * buffers (a saved profile's check of the weights FT_SPILL holds in host memory, 8.5 GB
 * of a 13 GB model on the H200; FT_SHM's checks; discovery's snapshots of spilled
 * allocations), or many at once (the saved profile's check: 162 allocations of about
 * 57 MB took 1.26 s summed one by one on one core of the H100; 0.3-0.4 s on 8), are cut
 * into parts of at most PART_MIN bytes that up to FT_CHECKSUM_THREADS threads take in
 * turn: one core sums 4-5 GB/s. The parts of a thread that cannot be started are
 * taken by the others and the caller. */
#include "core/checksum.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define FT_CHECKSUM_THREADS 16
#define PART_MIN (64ull << 20) /* bytes a part; a buffer below two of these, one thread */

/* ft_checksum_host_many's work: the buffers cut into parts of at most PART_MIN bytes,
 * taken in turn by every thread (next, atomic), each part's sum added to its buffer's. */
struct many {
    const ft_checksum_buf_t *b;
    size_t n;
    uint64_t *sums;
    uint64_t next;        /* the next part to take, over all buffers (atomic) */
    uint64_t *first_part; /* first_part[i]: the index of buffer i's first part; [n]: the total */
};

static void *many_main(void *arg)
{
    struct many *m = arg;
    const uint64_t part_words = PART_MIN / 8;
    for (;;) {
        uint64_t k = __atomic_fetch_add(&m->next, 1, __ATOMIC_RELAXED);
        if (k >= m->first_part[m->n])
            return NULL;
        size_t lo = 0, hi = m->n; /* the buffer whose parts hold k */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (m->first_part[mid] <= k)
                lo = mid;
            else
                hi = mid;
        }
        const ft_checksum_buf_t *b = &m->b[lo];
        uint64_t first = (k - m->first_part[lo]) * part_words;
        uint64_t words = b->words - first < part_words ? b->words - first : part_words;
        uint64_t sum = ft_checksum_host((const unsigned char *)b->p + first * 8, words, b->salt + first);
        __atomic_fetch_add(&m->sums[lo], sum, __ATOMIC_RELAXED);
    }
}

int ft_checksum_host_many(const ft_checksum_buf_t *b, size_t n, uint64_t *sums)
{
    struct many m = { b, n, sums, 0, malloc((n + 1) * sizeof(uint64_t)) };
    if (m.first_part == NULL)
        return -1;
    uint64_t parts = 0;
    for (size_t i = 0; i < n; i++) {
        m.first_part[i] = parts;
        parts += (b[i].words * 8 + PART_MIN - 1) / PART_MIN;
        sums[i] = 0;
    }
    m.first_part[n] = parts;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t threads = parts < FT_CHECKSUM_THREADS ? parts : FT_CHECKSUM_THREADS;
    if (cpus > 0 && threads > (uint64_t)cpus)
        threads = (uint64_t)cpus;
    pthread_t tid[FT_CHECKSUM_THREADS];
    int started[FT_CHECKSUM_THREADS] = { 0 };
    for (uint64_t i = 1; i < threads; i++) /* the caller is the first */
        started[i] = pthread_create(&tid[i], NULL, many_main, &m) == 0;
    many_main(&m);
    for (uint64_t i = 1; i < threads; i++)
        if (started[i])
            pthread_join(tid[i], NULL);
    free(m.first_part);
    return 0;
}

/* One buffer is many buffers of one: parts of PART_MIN bytes taken in turn. */
uint64_t ft_checksum_host_parallel(const void *p, uint64_t n_words, uint64_t salt)
{
    ft_checksum_buf_t b = { p, n_words, salt };
    uint64_t sum;
    if (n_words * 8 / PART_MIN < 2 || ft_checksum_host_many(&b, 1, &sum) != 0)
        return ft_checksum_host(p, n_words, salt);
    return sum;
}

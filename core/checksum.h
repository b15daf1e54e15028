/* checksum.h - the content checksum the residency engine computes on the device to
 * prove that a streamed unit is unchanged before dropping it without a write-back
 * (docs/architecture.md, "Invariants": nothing the application wrote is lost).
 *
 * Over the 8-byte words w[i] of a buffer whose first word has index `salt` (the
 * buffer's device address / 8, so that equal bytes at other addresses sum differently):
 *
 *     m = w[i] ^ ((salt + i) * 0x9e3779b97f4a7c15);  m ^= m >> 31;
 *     m *= 0xbf58476d1ce4e5b9;  m ^= m >> 29;         sum += m   (mod 2^64)
 *
 * A sum of independent per-word mixes: any order of summation gives the same value,
 * so the device computes it with one atomic add per warp, and a change of any word
 * changes the sum except with probability about 2^-64. core/checksum.cu is the
 * kernel (embedded as PTX in core/checksum_ptx.h, `make ptx` regenerates it); this
 * header is its reference, which the simulated device runs and the tests compare
 * against.
 */
#ifndef FT_CHECKSUM_H
#define FT_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The kernel's name in the PTX, and its parameters: (const uint64_t *p, uint64_t
 * n_words, uint64_t salt, uint64_t *out), adding its sum to *out. */
#define FT_CHECKSUM_KERNEL "ft_checksum"

/* The copy back of a unit found changed, in stream order (core/checksum.cu):
 * (const uint64_t *src, uint64_t n_words, const uint64_t *sum, uint64_t expected,
 * uint64_t *dst) copies the n words at src to dst when *sum != expected, else nothing. */
#define FT_COPY_BACK_KERNEL "ft_copy_back_if_changed"

static inline uint64_t ft_checksum_mix(uint64_t w, uint64_t index)
{
    uint64_t m = w ^ (index * 0x9e3779b97f4a7c15ull);
    m ^= m >> 31;
    m *= 0xbf58476d1ce4e5b9ull;
    m ^= m >> 29;
    return m;
}

/* The index's product carried from word to word by an addition, four words a turn
 * (independent mixes): about twice as fast on a core as the plain loop. */
static inline uint64_t ft_checksum_host(const void *p, uint64_t n_words, uint64_t salt)
{
    const uint64_t k = 0x9e3779b97f4a7c15ull;
    const unsigned char *b = (const unsigned char *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, x = salt * k, i = 0;
    for (; i + 4 <= n_words; i += 4, x += 4 * k) {
        uint64_t w[4];
        memcpy(w, b + i * 8, 32);
        uint64_t m0 = w[0] ^ x, m1 = w[1] ^ (x + k), m2 = w[2] ^ (x + 2 * k), m3 = w[3] ^ (x + 3 * k);
        m0 ^= m0 >> 31;
        m1 ^= m1 >> 31;
        m2 ^= m2 >> 31;
        m3 ^= m3 >> 31;
        m0 *= 0xbf58476d1ce4e5b9ull;
        m1 *= 0xbf58476d1ce4e5b9ull;
        m2 *= 0xbf58476d1ce4e5b9ull;
        m3 *= 0xbf58476d1ce4e5b9ull;
        s0 += m0 ^ (m0 >> 29);
        s1 += m1 ^ (m1 >> 29);
        s2 += m2 ^ (m2 >> 29);
        s3 += m3 ^ (m3 >> 29);
    }
    for (const unsigned char *q = b + i * 8; i < n_words; i++, q += 8) {
        uint64_t w;
        memcpy(&w, q, 8);
        s0 += ft_checksum_mix(w, salt + i);
    }
    return s0 + s1 + s2 + s3;
}

/* ft_checksum_host, a large buffer cut into parts summed by threads at once (core/
 * checksum.c): the sums add up, so the result is the same. */
uint64_t ft_checksum_host_parallel(const void *p, uint64_t n_words, uint64_t salt);

/* ft_checksum_host of each of n buffers into sums[i], the buffers' parts summed by
 * threads at once. 0, or -1 when no memory (sums untouched). */
typedef struct {
    const void *p;
    uint64_t words, salt;
} ft_checksum_buf_t;
int ft_checksum_host_many(const ft_checksum_buf_t *b, size_t n, uint64_t *sums);

#endif

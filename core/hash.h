/* hash.h - uthash, with a hash and a key compare for the fixed-size integer keys of
 * the launch path (kernel handles, region ids, lanes, launch pairs).
 *
 * uthash's default (Jenkins over the key's bytes, then memcmp per candidate) costs
 * about a hundred instructions a lookup; discovery makes several per launch. A key of
 * 4 or 8 bytes is mixed with murmur3's 64-bit finaliser instead, whose low bits (the
 * bucket index) depend on every key bit, and compared inline. Other lengths (strings)
 * keep Jenkins and memcmp. Include this instead of <uthash.h>.
 */
#ifndef FT_HASH_H
#define FT_HASH_H

#include <stdint.h>
#include <string.h>

static inline uint32_t ft_hash_mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static inline uint64_t ft_hash_load(const void *p, unsigned len)
{
    uint64_t k = 0;
    memcpy(&k, p, len);
    return k;
}

#define HASH_FUNCTION(keyptr, keylen, hashv)                                              \
    do {                                                                                  \
        if ((keylen) == 8 || (keylen) == 4)                                               \
            (hashv) = ft_hash_mix64(ft_hash_load((keyptr), (unsigned)(keylen)));          \
        else                                                                              \
            HASH_JEN(keyptr, keylen, hashv);                                              \
    } while (0)

#define HASH_KEYCMP(a, b, n)                                                              \
    (((n) == 8 || (n) == 4) ? (ft_hash_load((a), (unsigned)(n)) != ft_hash_load((b), (unsigned)(n))) \
                            : memcmp((a), (b), (n)))

/* A failed allocation leaves hh.tbl NULL instead of exiting the host process. */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

/* Empties the table at head: each entry is unlinked, then handed to release (free, or
 * a function that frees the entry and what it owns). */
#define FT_HASH_RELEASE_ALL(head, release)                                                \
    do {                                                                                  \
        __typeof__(head) ft_hash_e_, ft_hash_t_;                                          \
        HASH_ITER(hh, head, ft_hash_e_, ft_hash_t_) {                                     \
            HASH_DEL(head, ft_hash_e_);                                                   \
            release(ft_hash_e_);                                                          \
        }                                                                                 \
    } while (0)

#endif

/* scan.c - see scan.h. */
#include "core/scan.h"

#include <stdlib.h>
#include <string.h>

/* Moves the entries to heap arrays of twice the room (one block: ptr, lo, id, then the
 * flags, each array aligned for its type). Off the common path: only a launch that
 * reaches more than FT_SCAN_INLINE_IDS regions gets here. -1 when out of memory. */
static int set_grow(ft_scan_set_t *s)
{
    size_t cap = s->cap * 2;
    char *h = malloc(cap * (2 * sizeof *s->ptr + sizeof *s->id + 2));
    if (h == NULL)
        return -1;
    uint64_t *ptr = (uint64_t *)(void *)h, *lo = ptr + cap;
    uint32_t *id = (uint32_t *)(void *)(lo + cap);
    uint8_t *indirect = (uint8_t *)(id + cap), *unsure = indirect + cap;
    memcpy(ptr, s->ptr, s->n * sizeof *ptr);
    memcpy(lo, s->lo, s->n * sizeof *lo);
    memcpy(id, s->id, s->n * sizeof *id);
    memcpy(indirect, s->indirect, s->n);
    memcpy(unsure, s->unsure, s->n);
    free(s->heap);
    s->heap = h;
    s->ptr = ptr;
    s->lo = lo;
    s->id = id;
    s->indirect = indirect;
    s->unsure = unsure;
    s->cap = cap;
    return 0;
}

/* unsure: found at a garbage word. An id found at any other word is sure. lo takes
 * every pointer, garbage words' too: a kernel reads from its pointers onwards, so all
 * it reaches of the region lies at lo or past it (what the guard of a split region
 * needs to know, guard.c). The search for a duplicate is linear: a launch reaches a handful of regions, and one that
 * reaches a hundred (a cat) costs a few microseconds. */
static int set_add(ft_scan_set_t *s, uint32_t id, uint64_t ptr, int unsure)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->id[i] == id) {
            s->unsure[i] &= (uint8_t)unsure;
            if (ptr < s->lo[i])
                s->lo[i] = ptr;
            return 0;
        }
    if (s->n == s->cap && set_grow(s) != 0) {
        s->dropped++;
        return 0;
    }
    s->id[s->n] = id;
    s->ptr[s->n] = ptr;
    s->lo[s->n] = ptr;
    s->indirect[s->n] = 0;
    s->unsure[s->n] = (uint8_t)unsure;
    s->n++;
    return 1;
}

int ft_scan_set_add(ft_scan_set_t *s, uint32_t id, uint64_t ptr)
{
    return set_add(s, id, ptr, 0);
}

void ft_scan_set_drop_unsure(ft_scan_set_t *s)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->unsure[i])
            continue;
        s->id[k] = s->id[i];
        s->ptr[k] = s->ptr[i];
        s->lo[k] = s->lo[i];
        s->indirect[k] = s->indirect[i];
        s->unsure[k] = 0;
        k++;
    }
    s->n = k;
}

static inline int bit_has(const uint64_t *bits, size_t w)
{
    return w < FT_SCAN_WORDS && (__atomic_load_n(&bits[w / 64], __ATOMIC_RELAXED) >> (w % 64) & 1);
}

static inline void bit_mark(uint64_t *bits, size_t w)
{
    if (w < FT_SCAN_WORDS && !bit_has(bits, w))
        __atomic_fetch_or(&bits[w / 64], 1ull << (w % 64), __ATOMIC_RELAXED);
}

/* A region found at word w is unsure: w held garbage, or never held a region address
 * while the kernel was learned. */
static int word_unsure(const ft_scan_junk_t *j, size_t w)
{
    if (j == NULL)
        return 0;
    if (bit_has(j->bit, w))
        return 1;
    return w < FT_SCAN_WORDS && __atomic_load_n(&j->learned, __ATOMIC_RELAXED) && !bit_has(j->ptr, w);
}

/* Word w of the kernel's arguments, at b: marks it when marking, adds its region. */
static inline size_t scan_word(ft_regions_t *t, const unsigned char *b, size_t w, ft_scan_junk_t *junk,
                               int marking, ft_scan_set_t *out)
{
    uint64_t v;
    memcpy(&v, b, 8); /* parameter buffers need not be 8-byte aligned in memory */
    if (v < 4096) {   /* sizes, counts, flags, NULL: the common case */
        if (v != 0 && marking)
            bit_mark(junk->bit, w);
        return 0;
    }
    ft_region_t r;
    if (ft_regions_find_held(t, v, &r)) {
        if (marking)
            bit_mark(junk->ptr, w);
        return (size_t)set_add(out, r.id, v, word_unsure(junk, w));
    }
    if (marking) /* host addresses, other allocators' memory */
        bit_mark(junk->bit, w);
    return 0;
}

/* The scan of one buffer whose first word is word w0 of the kernel's arguments, the
 * region table's read lock held by the caller. Most words of a large parameter block
 * are 0 (a cuBLAS GEMM's 215 words hold about 40 others; an elementwise kernel's
 * offset calculator is filled up to the tensor's rank): four at a time are passed
 * over when all are. With FT_SCAN_SURE and not learning, once the kernel was learned,
 * only the words that held a region address then can give a sure id: the junk map
 * picks them, 64 words at a time. */
static size_t scan_held(ft_regions_t *t, const unsigned char *b, size_t len, size_t w0,
                        ft_scan_junk_t *junk, int flags, ft_scan_set_t *out)
{
    size_t added = 0, nw = len / 8, i = 0;
    int marking = (flags & FT_SCAN_LEARN) && junk != NULL;
    if (marking && !__atomic_load_n(&junk->learned, __ATOMIC_RELAXED))
        __atomic_store_n(&junk->learned, 1, __ATOMIC_RELAXED);
    int pointers_only = (flags & FT_SCAN_SURE) && !marking && junk != NULL &&
                        __atomic_load_n(&junk->learned, __ATOMIC_RELAXED);
    while (pointers_only && i < nw && w0 + i < FT_SCAN_WORDS) {
        size_t w = w0 + i, shift = w % 64, span = 64 - shift;
        if (span > nw - i)
            span = nw - i;
        uint64_t live = __atomic_load_n(&junk->ptr[w / 64], __ATOMIC_RELAXED) &
                        ~__atomic_load_n(&junk->bit[w / 64], __ATOMIC_RELAXED);
        live >>= shift;
        if (span < 64)
            live &= (1ull << span) - 1;
        for (; live != 0; live &= live - 1) {
            size_t k = (size_t)__builtin_ctzll(live);
            added += scan_word(t, b + (i + k) * 8, w + k, junk, marking, out);
        }
        i += span;
    }
    while (i < nw) {
        if (i + 4 <= nw) {
            uint64_t q[4];
            memcpy(q, b + i * 8, sizeof q);
            if ((q[0] | q[1] | q[2] | q[3]) == 0) {
                i += 4;
                continue;
            }
        }
        added += scan_word(t, b + i * 8, w0 + i, junk, marking, out);
        i++;
    }
    return added;
}

size_t ft_scan_bytes_junk(ft_regions_t *t, const void *p, size_t len, ft_scan_junk_t *junk,
                          int flags, ft_scan_set_t *out)
{
    /* One read lock for the whole buffer: a cuBLAS parameter buffer is 215 words. */
    ft_regions_read_begin(t);
    size_t added = scan_held(t, p, len, 0, junk, flags, out);
    ft_regions_read_end(t);
    return added;
}

size_t ft_scan_bytes(ft_regions_t *t, const void *p, size_t len, ft_scan_set_t *out)
{
    return ft_scan_bytes_junk(t, p, len, NULL, 0, out);
}

size_t ft_scan_params_junk(ft_regions_t *t, void *const *params, const uint32_t *sizes, size_t n,
                           ft_scan_junk_t *junk, int flags, ft_scan_set_t *out)
{
    size_t added = 0, w0 = 0;
    ft_regions_read_begin(t);
    for (size_t i = 0; i < n; i++) {
        if (params[i] != NULL)
            added += scan_held(t, params[i], sizes[i], w0, junk, flags, out);
        w0 += (sizes[i] + 7) / 8;
    }
    ft_regions_read_end(t);
    return added;
}

size_t ft_scan_params(ft_regions_t *t, void *const *params, const uint32_t *sizes, size_t n,
                      ft_scan_set_t *out)
{
    return ft_scan_params_junk(t, params, sizes, n, NULL, 0, out);
}

size_t ft_scan_indirect(ft_regions_t *t, const void *p, size_t len, ft_scan_set_t *out)
{
    const unsigned char *b = p;
    size_t added = 0;
    for (size_t off = 0; off + 8 <= len; off += 8) {
        uint64_t v;
        memcpy(&v, b + off, 8);
        if (v < 4096 || v % FT_SCAN_INDIRECT_ALIGN != 0)
            continue;
        ft_region_t r;
        ft_regions_read_begin(t);
        int found = ft_regions_find_held(t, v, &r);
        ft_regions_read_end(t);
        if (found && set_add(out, r.id, v, 0)) {
            out->indirect[out->n - 1] = 1;
            added++;
        }
    }
    return added;
}

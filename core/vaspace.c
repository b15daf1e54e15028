/* vaspace.c - device address ranges cut out of large reservations, in order (see
 * vaspace.h for why and the policy).
 *
 * Chunks are few (one per `chunk` bytes the process ever held at once), so they are
 * searched linearly; the free list is a sorted array, searched first-fit, which only
 * serves requests once the newest chunk is full.
 */
#include "core/vaspace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t base, size;
    uint64_t top; /* [top, base + size) has never been handed out, or came back at the top */
} chunk_t;

typedef struct {
    uint64_t base, size;
    int chunk;
} hole_t;

struct ft_vaspace {
    uint64_t chunk_bytes, align, used;
    ft_vaspace_reserve_fn reserve;
    void *ctx;
    chunk_t *chunks;
    int n_chunks, cap_chunks;
    hole_t *holes; /* sorted by base, disjoint, never two adjacent ones of one chunk */
    int n_holes, cap_holes;
};

ft_vaspace_t *ft_vaspace_new(uint64_t chunk, uint64_t align, ft_vaspace_reserve_fn reserve, void *ctx)
{
    if (reserve == NULL || align == 0 || (align & (align - 1)) != 0 || chunk < align || chunk % align != 0)
        return NULL;
    ft_vaspace_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->chunk_bytes = chunk;
    s->align = align;
    s->reserve = reserve;
    s->ctx = ctx;
    return s;
}

void ft_vaspace_free(ft_vaspace_t *s)
{
    if (s == NULL)
        return;
    free(s->chunks);
    free(s->holes);
    free(s);
}

/* arr, or where it moved, with room for one more of n elements of esz bytes (capacity
 * *cap, doubled from `first`); NULL when out of memory (arr stays as it was). */
static void *grow(void *arr, int *cap, int n, size_t esz, int first)
{
    if (n < *cap)
        return arr;
    int c = *cap ? 2 * *cap : first;
    void *p = realloc(arr, (size_t)c * esz);
    if (p != NULL)
        *cap = c;
    return p;
}

static int chunk_of(const ft_vaspace_t *s, uint64_t addr)
{
    for (int i = 0; i < s->n_chunks; i++)
        if (addr >= s->chunks[i].base && addr - s->chunks[i].base < s->chunks[i].size)
            return i;
    return -1;
}

/* Where a hole starting at base goes in the sorted array. */
static int hole_index(const ft_vaspace_t *s, uint64_t base)
{
    int lo = 0, hi = s->n_holes;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->holes[mid].base < base)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void hole_remove(ft_vaspace_t *s, int i)
{
    memmove(&s->holes[i], &s->holes[i + 1], (size_t)(s->n_holes - i - 1) * sizeof *s->holes);
    s->n_holes--;
}

/* Adds [base, base+size) of chunk c to the free list, merged with its neighbours of the
 * same chunk. 0 or -ENOMEM. */
static int hole_add(ft_vaspace_t *s, uint64_t base, uint64_t size, int c)
{
    if (size == 0)
        return 0;
    int i = hole_index(s, base);
    int merge_prev = i > 0 && s->holes[i - 1].chunk == c && s->holes[i - 1].base + s->holes[i - 1].size == base;
    int merge_next = i < s->n_holes && s->holes[i].chunk == c && base + size == s->holes[i].base;
    if (merge_prev && merge_next) {
        s->holes[i - 1].size += size + s->holes[i].size;
        hole_remove(s, i);
        return 0;
    }
    if (merge_prev) {
        s->holes[i - 1].size += size;
        return 0;
    }
    if (merge_next) {
        s->holes[i].base = base;
        s->holes[i].size += size;
        return 0;
    }
    hole_t *h = grow(s->holes, &s->cap_holes, s->n_holes, sizeof *h, 16);
    if (h == NULL)
        return -ENOMEM;
    s->holes = h;
    memmove(&s->holes[i + 1], &s->holes[i], (size_t)(s->n_holes - i) * sizeof *s->holes);
    s->holes[i] = (hole_t){ base, size, c };
    s->n_holes++;
    return 0;
}

/* A new newest chunk of at least len bytes; what the old newest never handed out
 * becomes a hole. 0 or -ENOMEM. */
static int chunk_add(ft_vaspace_t *s, uint64_t len)
{
    chunk_t *grown = grow(s->chunks, &s->cap_chunks, s->n_chunks, sizeof *grown, 4);
    if (grown == NULL)
        return -ENOMEM;
    s->chunks = grown;
    uint64_t size = len > s->chunk_bytes ? len : s->chunk_bytes, base = 0;
    uint64_t hint = s->n_chunks > 0 ? s->chunks[s->n_chunks - 1].base + s->chunks[s->n_chunks - 1].size : 0;
    if (s->reserve(&base, size, hint, s->ctx) != 0)
        return -ENOMEM;
    if (s->n_chunks > 0) {
        chunk_t *old = &s->chunks[s->n_chunks - 1];
        if (hole_add(s, old->top, old->base + old->size - old->top, s->n_chunks - 1) != 0)
            return -ENOMEM; /* the reservation stays, unused: a later call may take it */
        old->top = old->base + old->size;
    }
    s->chunks[s->n_chunks++] = (chunk_t){ base, size, base };
    return 0;
}

/* The first hole of at least len bytes: its start in *va, 0; -ENOENT when none. */
static int hole_take(ft_vaspace_t *s, uint64_t len, uint64_t *va)
{
    int i = 0;
    while (i < s->n_holes && s->holes[i].size < len)
        i++;
    if (i == s->n_holes)
        return -ENOENT;
    *va = s->holes[i].base;
    s->holes[i].base += len;
    if ((s->holes[i].size -= len) == 0)
        hole_remove(s, i);
    return 0;
}

int ft_vaspace_get(ft_vaspace_t *s, uint64_t len, uint64_t *va)
{
    if (s == NULL || va == NULL || len == 0 || len % s->align != 0)
        return -EINVAL;
    /* Once the chunks hold more than twice what is handed out (frees in the middle of
     * them), holes come first: order matters less than keeping the reservations from
     * growing under a program that allocates and frees without end. */
    uint64_t reserved = 0;
    for (int i = 0; i < s->n_chunks; i++)
        reserved += s->chunks[i].size;
    if (reserved > 2 * s->used + s->chunk_bytes && hole_take(s, len, va) == 0) {
        s->used += len;
        return 0;
    }
    chunk_t *c = s->n_chunks > 0 ? &s->chunks[s->n_chunks - 1] : NULL;
    if (c == NULL || c->base + c->size - c->top < len) {
        if (hole_take(s, len, va) == 0) {
            s->used += len;
            return 0;
        }
        if (chunk_add(s, len) != 0)
            return -ENOMEM;
        c = &s->chunks[s->n_chunks - 1];
    }
    *va = c->top;
    c->top += len;
    s->used += len;
    return 0;
}

int ft_vaspace_put(ft_vaspace_t *s, uint64_t va, uint64_t len)
{
    int i = s != NULL ? chunk_of(s, va) : -1;
    if (i < 0 || len == 0 || len > s->chunks[i].base + s->chunks[i].size - va)
        return -ENOENT;
    chunk_t *c = &s->chunks[i];
    s->used -= len;
    /* Only the newest chunk hands out from its top; an older one's free end is a hole. */
    if (i == s->n_chunks - 1 && va + len == c->top) {
        c->top = va;
        /* holes of this chunk that now end at its top go back into it */
        int h = hole_index(s, c->top);
        while (h > 0 && s->holes[h - 1].chunk == i && s->holes[h - 1].base + s->holes[h - 1].size == c->top) {
            c->top = s->holes[h - 1].base;
            hole_remove(s, --h);
        }
        return 0;
    }
    /* Out of memory for the free list: the range is lost to this process's address
     * space (it stays reserved), never handed out twice. */
    hole_add(s, va, len, i);
    return 0;
}

int ft_vaspace_owns(const ft_vaspace_t *s, uint64_t addr)
{
    return s != NULL && chunk_of(s, addr) >= 0;
}

int ft_vaspace_chunk(const ft_vaspace_t *s, int i, uint64_t *base, uint64_t *size)
{
    if (s == NULL || i < 0 || i >= s->n_chunks)
        return -ENOENT;
    *base = s->chunks[i].base;
    *size = s->chunks[i].size;
    return 0;
}

uint64_t ft_vaspace_used(const ft_vaspace_t *s)
{
    return s != NULL ? s->used : 0;
}

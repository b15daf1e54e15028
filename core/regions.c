/* regions.c - the region table (see regions.h). */
#include "core/regions.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct ft_regions {
    /* Readers (lookups on every launch) vastly outnumber writers (allocations). */
    pthread_rwlock_t lock;
    ft_region_t *v;     /* sorted by base, disjoint */
    size_t n, cap;
    uint64_t lo, hi;    /* lowest base and highest end of live regions: a fast reject */
    uint64_t bytes;
    uint32_t next_id;
};

ft_regions_t *ft_regions_new(void)
{
    ft_regions_t *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    pthread_rwlock_init(&t->lock, NULL);
    t->next_id = 1;
    t->lo = UINT64_MAX;
    return t;
}

uint32_t ft_regions_next_id(ft_regions_t *t)
{
    pthread_rwlock_rdlock(&t->lock);
    uint32_t id = t->next_id;
    pthread_rwlock_unlock(&t->lock);
    return id;
}

void ft_regions_free(ft_regions_t *t)
{
    if (t == NULL)
        return;
    pthread_rwlock_destroy(&t->lock);
    free(t->v);
    free(t);
}

/* Index of the first region whose base is > addr. */
static size_t upper_bound(const ft_regions_t *t, uint64_t addr)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->v[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void recompute_bounds(ft_regions_t *t)
{
    t->lo = t->n ? t->v[0].base : UINT64_MAX;
    t->hi = 0;
    /* Regions are disjoint and sorted, so the last one ends highest. */
    if (t->n)
        t->hi = t->v[t->n - 1].base + t->v[t->n - 1].size;
}

int64_t ft_regions_insert(ft_regions_t *t, uint64_t base, uint64_t size, uint32_t flags,
                          uint64_t birth)
{
    if (size == 0 || base + size < base)
        return -EINVAL;
    pthread_rwlock_wrlock(&t->lock);
    size_t i = upper_bound(t, base);
    if ((i > 0 && t->v[i - 1].base + t->v[i - 1].size > base) ||
        (i < t->n && t->v[i].base < base + size)) {
        pthread_rwlock_unlock(&t->lock);
        return -EEXIST;
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        ft_region_t *nv = realloc(t->v, cap * sizeof *nv);
        if (nv == NULL) {
            pthread_rwlock_unlock(&t->lock);
            return -ENOMEM;
        }
        t->v = nv;
        t->cap = cap;
    }
    memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof *t->v);
    t->v[i] = (ft_region_t){ base, size, t->next_id++, flags, birth };
    t->n++;
    t->bytes += size;
    recompute_bounds(t);
    int64_t id = t->v[i].id;
    pthread_rwlock_unlock(&t->lock);
    return id;
}

int ft_regions_remove(ft_regions_t *t, uint64_t base, ft_region_t *out)
{
    pthread_rwlock_wrlock(&t->lock);
    size_t i = upper_bound(t, base);
    if (i == 0 || t->v[i - 1].base != base) {
        pthread_rwlock_unlock(&t->lock);
        return -ENOENT;
    }
    i--;
    if (out)
        *out = t->v[i];
    t->bytes -= t->v[i].size;
    memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof *t->v);
    t->n--;
    recompute_bounds(t);
    pthread_rwlock_unlock(&t->lock);
    return 0;
}

int ft_regions_find_held(ft_regions_t *t, uint64_t addr, ft_region_t *out)
{
    if (addr < t->lo || addr >= t->hi)
        return 0;
    size_t i = upper_bound(t, addr);
    if (i == 0 || addr >= t->v[i - 1].base + t->v[i - 1].size)
        return 0;
    if (out)
        *out = t->v[i - 1];
    return 1;
}

void ft_regions_read_begin(ft_regions_t *t)
{
    pthread_rwlock_rdlock(&t->lock);
}

void ft_regions_read_end(ft_regions_t *t)
{
    pthread_rwlock_unlock(&t->lock);
}

int ft_regions_find(ft_regions_t *t, uint64_t addr, ft_region_t *out)
{
    pthread_rwlock_rdlock(&t->lock);
    int found = ft_regions_find_held(t, addr, out);
    pthread_rwlock_unlock(&t->lock);
    return found;
}

size_t ft_regions_count(ft_regions_t *t)
{
    pthread_rwlock_rdlock(&t->lock);
    size_t n = t->n;
    pthread_rwlock_unlock(&t->lock);
    return n;
}

uint64_t ft_regions_bytes(ft_regions_t *t)
{
    pthread_rwlock_rdlock(&t->lock);
    uint64_t b = t->bytes;
    pthread_rwlock_unlock(&t->lock);
    return b;
}

long ft_regions_snapshot(ft_regions_t *t, ft_region_t **out)
{
    pthread_rwlock_rdlock(&t->lock);
    size_t n = t->n;
    ft_region_t *v = malloc((n ? n : 1) * sizeof *v);
    if (v != NULL && n > 0) /* an empty table may have no array yet */
        memcpy(v, t->v, n * sizeof *v);
    pthread_rwlock_unlock(&t->lock);
    if (v == NULL)
        return -ENOMEM;
    *out = v;
    return (long)n;
}

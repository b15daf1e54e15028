/* regions.h - the region table: every live device allocation the shim knows of,
 * found from any address inside it.
 *
 * Owns: the set of regions and their ids. Lookups are O(log n) (binary search over a
 * sorted array of disjoint ranges) behind a reader-writer lock: lookups happen on
 * every launch in discovery, inserts only on allocation. A quick range test
 * (lowest base .. highest end) rejects most non-pointers without the search.
 */
#ifndef FT_REGIONS_H
#define FT_REGIONS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t base;
    uint64_t size;
    uint32_t id;        /* stable, never reused within a process, from 1 */
    uint32_t flags;     /* FT_REGION_* */
    uint64_t birth;     /* caller's sequence number at insert (e.g. iteration) */
} ft_region_t;

enum {
    FT_REGION_VMM = 1u << 0, /* served by the shim from virtual memory (evictable) */
    /* One piece of an allocation served in pieces of one mapping granule each, each
     * mapped on its own (the shim's vmm_alloc): a region of its own, so that a unit can
     * hold some of the allocation. Pieces lie end to end; the allocation's first has
     * FT_REGION_PIECE_FIRST too. */
    FT_REGION_PIECE = 1u << 1,
    FT_REGION_PIECE_FIRST = 1u << 2,
    /* A piece of memory the program mapped itself, served by the shim (its allocator's
     * pool: what it has not used yet lies there too). */
    FT_REGION_PROGRAM = 1u << 3,
};

typedef struct ft_regions ft_regions_t;

ft_regions_t *ft_regions_new(void);
void ft_regions_free(ft_regions_t *t);

/* Adds [base, base+size). Returns the new id (> 0), or -EEXIST when it overlaps a live
 * region, -EINVAL for size 0, -ENOMEM. */
int64_t ft_regions_insert(ft_regions_t *t, uint64_t base, uint64_t size, uint32_t flags,
                          uint64_t birth);

/* The id the next insert will give (another thread's insert may take it first). */
uint32_t ft_regions_next_id(ft_regions_t *t);

/* Removes the region starting exactly at base; copies it to *out when out is non-NULL.
 * 0, or -ENOENT. */
int ft_regions_remove(ft_regions_t *t, uint64_t base, ft_region_t *out);

/* Finds the region holding addr; copies it to *out. 1 when found, else 0. */
int ft_regions_find(ft_regions_t *t, uint64_t addr, ft_region_t *out);

/* Many lookups under one read lock (an argument scan): ft_regions_read_begin, then
 * ft_regions_find_held any number of times, then ft_regions_read_end. */
void ft_regions_read_begin(ft_regions_t *t);
int ft_regions_find_held(ft_regions_t *t, uint64_t addr, ft_region_t *out);
void ft_regions_read_end(ft_regions_t *t);

size_t ft_regions_count(ft_regions_t *t);

/* A copy of every live region, sorted by base, in *out (malloc'd; the caller frees).
 * Returns the count, or -ENOMEM. */
long ft_regions_snapshot(ft_regions_t *t, ft_region_t **out);
uint64_t ft_regions_bytes(ft_regions_t *t);

#endif

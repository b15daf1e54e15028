/* scan.h - finding device pointers in a launch's argument bytes.
 *
 * A pointer argument, or a pointer inside a struct passed by value (a Hopper TMA
 * descriptor holds its global base at offset 0), sits at an 8-byte aligned offset of
 * its parameter, so the scan reads one 8-byte word per aligned offset and asks the
 * region table whether it falls inside a live region. This is the discovery hot path:
 * a range test, then a binary search, nothing more.
 */
#ifndef FT_SCAN_H
#define FT_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/regions.h"

/* A set of region ids seen by one launch: small, deduplicated, in first-seen order. */
#define FT_SCAN_MAX_IDS 64

typedef struct {
    uint32_t id[FT_SCAN_MAX_IDS];
    uint64_t ptr[FT_SCAN_MAX_IDS];  /* the pointer value first seen for that region */
    uint8_t indirect[FT_SCAN_MAX_IDS]; /* found one level down, in a pointer array */
    size_t n;
    size_t dropped;                  /* ids beyond FT_SCAN_MAX_IDS, counted not kept */
} ft_scan_set_t;

static inline void ft_scan_set_clear(ft_scan_set_t *s)
{
    s->n = 0;
    s->dropped = 0;
}

/* Adds id (with the pointer that led to it) unless present. 1 when added. */
int ft_scan_set_add(ft_scan_set_t *s, uint32_t id, uint64_t ptr);

/* Pointer arrays hold allocation-aligned pointers: a word read from device data is
 * taken for a pointer only at this alignment, which keeps data that happens to look
 * like an address (1 in 256 of such words) out. */
#define FT_SCAN_INDIRECT_ALIGN 256

/* Scans device data read from a buffer a launch points to (a pointer array) and adds
 * the regions its aligned words point into, marked indirect. Returns the number of
 * new ids. */
size_t ft_scan_indirect(ft_regions_t *t, const void *p, size_t len, ft_scan_set_t *out);

/* Scans len bytes at p (any alignment of p itself) for words pointing into live
 * regions; adds their ids to out. Returns the number of new ids. */
size_t ft_scan_bytes(ft_regions_t *t, const void *p, size_t len, ft_scan_set_t *out);

/* The same over a launch's kernelParams (params[i] points at sizes[i] bytes; NULL
 * entries are skipped), under one read lock. */
size_t ft_scan_params(ft_regions_t *t, void *const *params, const uint32_t *sizes, size_t n,
                      ft_scan_set_t *out);

#endif

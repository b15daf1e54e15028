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
#include <stdlib.h>

#include "core/regions.h"

/* A set of region ids seen by one launch: deduplicated, in first-seen order, and
 * complete. A launch can reach more regions than any fixed room: PyTorch's cat kernel
 * passes up to 128 input pointers by value, a grouped GEMM's pointer arrays hold as
 * many. The set once kept 64 and only counted the rest; the residency guard then left
 * the units of the others unloaded, and the kernel read unmapped memory (an illegal
 * address in the program). So the set grows: its first FT_SCAN_INLINE_IDS entries live
 * in the set itself (on the caller's stack: the common launch allocates nothing), and
 * past them the entries move to heap arrays that double as needed. id, ptr, lo, indirect
 * and unsure point at the entries wherever they are: index them, never keep them
 * across an add. An id is lost only when the heap cannot grow (out of memory): then
 * `dropped` counts it, and each user takes the set for "any region": the guard loads
 * every streamed unit, FT_SPILL faults in every allocation it holds in host memory,
 * discovery counts the launch as incomplete. A set is never copied by value (its
 * pointers would still point into the original). */
#define FT_SCAN_INLINE_IDS 64

typedef struct {
    uint32_t *id;
    uint64_t *ptr;                   /* the pointer value first seen for that region */
    uint64_t *lo;                    /* the lowest pointer value seen for it (a split
                                        region's guard: core/scan.c set_add) */
    uint8_t *indirect;               /* found one level down, in a pointer array */
    uint8_t *unsure;                 /* found only at words that held garbage (below) */
    size_t n, cap;
    size_t dropped;                  /* ids lost: the entries could not grow (no memory),
                                        or arguments with no layout known (the shim) */
    void *heap;                      /* the entries once past the inline room; NULL: inline */
    uint32_t id_in[FT_SCAN_INLINE_IDS];
    uint64_t ptr_in[FT_SCAN_INLINE_IDS];
    uint64_t lo_in[FT_SCAN_INLINE_IDS];
    uint8_t indirect_in[FT_SCAN_INLINE_IDS];
    uint8_t unsure_in[FT_SCAN_INLINE_IDS];
} ft_scan_set_t;

/* Starts an empty set, its entries in itself. On a set that may have grown, call
 * ft_scan_set_free instead (this would leak its heap entries). */
static inline void ft_scan_set_clear(ft_scan_set_t *s)
{
    s->id = s->id_in;
    s->ptr = s->ptr_in;
    s->lo = s->lo_in;
    s->indirect = s->indirect_in;
    s->unsure = s->unsure_in;
    s->n = 0;
    s->cap = FT_SCAN_INLINE_IDS;
    s->dropped = 0;
    s->heap = NULL;
}

/* Frees what the set took from the heap (nothing unless it grew past the inline room)
 * and leaves it empty, ready for reuse. Inline: every launch ends with it. */
static inline void ft_scan_set_free(ft_scan_set_t *s)
{
    if (s->heap != NULL)
        free(s->heap);
    ft_scan_set_clear(s);
}

/* Adds id (with the pointer that led to it) unless present. 1 when added. */
int ft_scan_set_add(ft_scan_set_t *s, uint32_t id, uint64_t ptr);

/* Garbage words. A framework may pass a parameter struct whose padding or unused array
 * tail still holds what an earlier launch left on the stack (PyTorch's elementwise
 * kernels do: their offset calculators are fixed-size arrays filled up to the tensor's
 * rank), so a region address can appear in a launch's arguments that the kernel never
 * reads. A genuine pointer argument holds NULL or a region address at every launch;
 * a word that has held anything else (a small integer, a host address) is garbage for
 * that kernel. Per kernel, one bit per 8-byte word of its argument bytes (kernelParams
 * laid end to end, each rounded up to whole words, or the `extra` buffer); words past
 * FT_SCAN_WORDS are never marked. Bits are set with atomic ORs, so launches on several
 * threads may learn at once. */
#define FT_SCAN_WORDS 1024

/* Removes the unsure ids from s, keeping the others' order. */
void ft_scan_set_drop_unsure(ft_scan_set_t *s);

typedef struct {
    uint64_t bit[FT_SCAN_WORDS / 64];
    /* Words that held a region address at a launch while learning, and whether the
     * kernel was scanned while learning at all. Once it was, a region found at a word
     * that never held one is unsure too: a word that held NULL in discovery and later
     * garbage looking like a pointer (PyTorch's cat metadata: 64 input slots, two
     * used, the rest left from the stack). */
    uint64_t ptr[FT_SCAN_WORDS / 64];
    int learned;
} ft_scan_junk_t;

/* The flags of a scan with a kernel's garbage words. */
enum {
    FT_SCAN_LEARN = 1, /* mark the words that hold garbage or a region address */
    FT_SCAN_SURE = 2,  /* the caller keeps sure ids only: without FT_SCAN_LEARN, once
                        * the kernel was learned, only the words that held a region
                        * address then are read (any other would give an unsure id) */
};

/* ft_scan_bytes and ft_scan_params with a kernel's garbage words: an id found only at
 * words marked in *junk, or at words that never held a region address while the
 * kernel was learned, is flagged unsure in out (or, with FT_SCAN_SURE, may be left
 * out); with FT_SCAN_LEARN, the words that hold garbage or a region address at this
 * launch are marked first. junk may be NULL (every id sure). */
size_t ft_scan_bytes_junk(ft_regions_t *t, const void *p, size_t len, ft_scan_junk_t *junk,
                          int flags, ft_scan_set_t *out);
size_t ft_scan_params_junk(ft_regions_t *t, void *const *params, const uint32_t *sizes, size_t n,
                           ft_scan_junk_t *junk, int flags, ft_scan_set_t *out);

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

/* vaspace.h - device addresses for the shim's virtual-memory regions, cut out of a few
 * large reservations in the order they are asked for.
 *
 * Owns: the reservations (chunks) and which parts of them are free. Why: a unit's
 * regions, allocated one after another, then lie end to end, and a load sets their
 * access in one cuMemSetAccess call; each call cost 270-550 us on the two-H200 machine
 * while copies ran, and the driver, asked for one reservation per region at the end of
 * the last (a hint), put only about 30% of them there (seventh session).
 *
 * Policy: addresses go up from the last one handed out in the newest chunk; a range
 * given back at the top is taken back into it, one in the middle waits in a free list
 * (merged with its free neighbours of the same chunk) that serves requests once the
 * newest chunk is full, before a new chunk is reserved. A range never spans two chunks
 * (a mapping must lie in one reservation). The caller reserves through a callback and
 * keeps whatever lock it needs: this module has none.
 */
#ifndef FT_VASPACE_H
#define FT_VASPACE_H

#include <stdint.h>

/* Reserves `size` bytes of device address space, at `hint` if it can (0: anywhere),
 * aligned as the space was told; 0 and *base on success. */
typedef int (*ft_vaspace_reserve_fn)(uint64_t *base, uint64_t size, uint64_t hint, void *ctx);

typedef struct ft_vaspace ft_vaspace_t;

/* chunk: the size reserved at a time (a larger request gets a chunk of its own size);
 * align: every range's alignment and size granule (a power of two). NULL on a bad
 * argument or no memory. */
ft_vaspace_t *ft_vaspace_new(uint64_t chunk, uint64_t align, ft_vaspace_reserve_fn reserve, void *ctx);

/* Frees the bookkeeping; the reservations are the caller's to release (ft_vaspace_chunk
 * lists them). */
void ft_vaspace_free(ft_vaspace_t *s);

/* A range of `len` bytes (a multiple of align) in *va. 0, -EINVAL, or -ENOMEM when no
 * chunk has room and reserving another failed. */
int ft_vaspace_get(ft_vaspace_t *s, uint64_t len, uint64_t *va);

/* Gives [va, va+len) back. 0, or -ENOENT when it is not in a chunk of this space. */
int ft_vaspace_put(ft_vaspace_t *s, uint64_t va, uint64_t len);

/* 1 when addr lies in one of the space's chunks. */
int ft_vaspace_owns(const ft_vaspace_t *s, uint64_t addr);

/* The i-th chunk's base and size: 0, or -ENOENT past the last. */
int ft_vaspace_chunk(const ft_vaspace_t *s, int i, uint64_t *base, uint64_t *size);

/* Bytes handed out and not given back. */
uint64_t ft_vaspace_used(const ft_vaspace_t *s);

#endif

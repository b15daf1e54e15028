/* spill.h - FT_SPILL's one choice: which allocation leaves the device when the budget
 * before the plan needs room (docs/residency.md, "FT_SPILL: the budget before the
 * plan"). Whether room is needed is core/budget.h's ft_budget_fits.
 *
 * Owns: nothing; the answers come from the arguments. The shim (shim/spill.c) walks its
 * allocations under res.lock, asks, and moves the one chosen out (a copy to host
 * memory, an unmap).
 */
#ifndef FT_SPILL_H
#define FT_SPILL_H

#include <stddef.h>
#include <stdint.h>

/* An allocation as the choice sees it. */
typedef struct {
    uint64_t stamp; /* the guarded call that last touched it (a call's stamps are equal) */
    int spilled;    /* in host memory already */
} ft_spill_alloc_t;

/* Whether x goes out before `best` (NULL: none chosen yet), for room asked by the call
 * stamped `stamp`: the least recently touched allocation on the device goes first;
 * never one the call itself touched, which it is about to use (UINT64_MAX: an
 * allocation's room, no call's). On a tie the one seen first stays. */
int ft_spill_prefer(const ft_spill_alloc_t *x, const ft_spill_alloc_t *best, uint64_t stamp);

/* The allocation that goes out among n, by ft_spill_prefer in index order; -1: none
 * can. */
long ft_spill_victim(const ft_spill_alloc_t *allocs, size_t n, uint64_t stamp);

#endif

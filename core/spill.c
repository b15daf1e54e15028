/* spill.c - FT_SPILL's choice of the allocation that leaves the device (see spill.h).
 *
 * A comparison rather than a search over an array: the shim's allocations live in a
 * hash table that it walks with a callback (vmm_each), and a copy of them for every
 * move out would cost an allocation inside a guarded call.
 */
#include "core/spill.h"

int ft_spill_prefer(const ft_spill_alloc_t *x, const ft_spill_alloc_t *best, uint64_t stamp)
{
    return !x->spilled && x->stamp != stamp && (best == NULL || x->stamp < best->stamp);
}

long ft_spill_victim(const ft_spill_alloc_t *allocs, size_t n, uint64_t stamp)
{
    long best = -1;
    for (size_t i = 0; i < n; i++)
        if (ft_spill_prefer(&allocs[i], best < 0 ? NULL : &allocs[best], stamp))
            best = (long)i;
    return best;
}

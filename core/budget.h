/* budget.h - the memory budget's decisions: how large it is, whether an allocation
 * fits, what the slots hold once full, what the process holds with every slot counted
 * full, which resident unit to make stream when an allocation would not fit, and what
 * cudaMemGetInfo shows under a budget (docs/residency.md, "The budget after the plan"
 * and "Memory accounting").
 *
 * Owns: nothing; every function answers from its arguments. The shim (shim/budget.c
 * after the plan, shim/spill.c and shim/vmm.c for FT_SPILL before it, shim/profiling.c
 * for the plan's budget) counts what the process holds, under res.lock where it must,
 * asks, and carries the answer out: a demotion's eviction, FT_SPILL's moves, the
 * warning about an allocation served past the budget.
 */
#ifndef FT_BUDGET_H
#define FT_BUDGET_H

#include <stddef.h>
#include <stdint.h>

/* The budget the options give: FT_GPU_MEM_LIMIT (`limit`, 0: none) and
 * FT_MAX_GPU_MEM_FRACTION (`fraction` of the device's `total`, 0: none; ignored while
 * the total is unknown, 0), the smaller of the two; 0 when neither is set. */
uint64_t ft_budget_configured(uint64_t limit, double fraction, uint64_t total);

/* The plan's budget: `budget` capped to what the process can have, the device's free
 * memory plus what it holds through the shim already (`can`). Left as it is when there
 * is none (0) or the device's total is unknown (0). */
uint64_t ft_budget_capped(uint64_t budget, uint64_t total, uint64_t can);

/* Whether `size` more bytes fit beside `held` under `budget` (0: there is no budget,
 * everything fits). An exact fit fits; a sum past 2^64 does not. */
int ft_budget_fits(uint64_t held, uint64_t size, uint64_t budget);

/* A unit as the budget sees it. */
typedef struct {
    /* Bytes it takes in a slot as it streams now (its regions' mapped lengths); 0 for
     * a resident unit and for a pinned one, which holds no slot. */
    uint64_t slot_len;
    uint64_t bytes;  /* its size, were it made to stream (discovery's) */
    /* It may be made to stream: planned resident, not streaming, not refused before
     * (no host memory, no region backed by virtual memory), not kept on the device by
     * the unit selection (FT_INCLUDE_PATTERNS / FT_EXCLUDE_PATTERNS). */
    int demotable;
} ft_budget_unit_t;

/* What `slots` slots hold at most: the sum of the largest slot lengths, as many as
 * there are slots, with unit `extra` (-1: none) counted as streaming at its bytes. Not
 * slots times the largest: a tensor-parallel shard's 892 MiB embeddings made to stream
 * beside 196 MiB layers counted 3 x 892 MiB, and no allocation fitted the budget any
 * more (the H200 pair, sixth session). */
uint64_t ft_budget_slots_full(const ft_budget_unit_t *units, int n, int slots, int extra);

/* The device bytes the process holds with every slot full: `held` (everything counted
 * now, admitted and freeing bytes included) less `loaded` (the streamed units' bytes
 * on the device now) plus `slots_full`, when the slots are not full now. The loaded
 * units come and go: an allocation admitted while a slot is empty, or holds a smaller
 * unit, would take the process past the budget once the slots fill (the H200's FT_SPILL
 * run: 4706 MiB held against 4608). */
uint64_t ft_budget_committed(uint64_t held, uint64_t loaded, uint64_t slots_full);

/* The resident unit to make stream for an allocation that does not fit, or -1: the
 * demotable unit that gives back the most room for the bytes it will copy in every
 * pass -- its size less what it adds to the full slots of `slots` slots (a unit larger
 * than every streaming one raises them) -- the larger room on a tie, the lowest index
 * after that. A unit that gives back no room is never chosen. */
int ft_budget_demote_pick(const ft_budget_unit_t *units, int n, int slots);

/* The budget given up: application allocations served past it. The shim keeps one
 * (under res.lock) and the exit report's verdict reads it. */
typedef struct {
    uint64_t count; /* allocations served past the budget */
    uint64_t most;  /* the most the process went past it, every slot counted full */
    uint64_t need;  /* what it held then, that allocation included: the least budget that
                     * would have held it */
    uint64_t other; /* of `need`, memory other than weights (activations, caches,
                     * workspaces): what no streaming can make room for */
} ft_budget_over_t;

/* An application allocation of `size` that `budget` cannot hold beside `committed`
 * (what the process holds with every slot full) even with every unit that can leave
 * the device streaming, and that the device has served (the shim asks after the real
 * call: a device failure is no excess). It is served, as it would be without FlexTensor:
 * refusing it breaks a program that stops at its first failed allocation (PyTorch
 * raised OutOfMemoryError on the H200), and a framework that would free a cache and
 * retry cannot be told apart from one that will not (docs/residency.md). The excess
 * is kept in *over: the most, and what the process held then, of which `weights`
 * bytes were weights (resident, or in the full slots). Returns 1 for the first such
 * allocation (the shim warns once), else 0; 0 and nothing kept for one that fits. */
int ft_budget_over(ft_budget_over_t *over, uint64_t committed, uint64_t size, uint64_t budget,
                   uint64_t weights);

/* Whether cudaMemGetInfo shows the budget rather than the device: there is one (> 0),
 * below the device's total. */
int ft_budget_shown(uint64_t budget, uint64_t device_total);

/* What cudaMemGetInfo shows, given the device's answer in *free_b and *total_b and
 * what the process holds through the shim: the budget as the total, what is left of it
 * (never more than the device has free) as free, so that frameworks sizing caches from
 * it see the budget. Unchanged when the budget is not shown. */
void ft_budget_view(uint64_t budget, uint64_t held, size_t *free_b, size_t *total_b);

#endif

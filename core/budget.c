/* budget.c - the memory budget's decisions (see budget.h for what it decides and what
 * the shim keeps).
 *
 * The full slots are taken by distinct lengths, largest first, so that they need no
 * sorted copy of the units: the shim asks once per candidate of a demotion, under
 * res.lock, and units are few (tens to a few hundred).
 */
#include "core/budget.h"

uint64_t ft_budget_configured(uint64_t limit, double fraction, uint64_t total)
{
    uint64_t budget = limit;
    if (fraction > 0 && total > 0) {
        uint64_t f = (uint64_t)(fraction * (double)total);
        budget = budget == 0 || f < budget ? f : budget;
    }
    return budget;
}

uint64_t ft_budget_capped(uint64_t budget, uint64_t total, uint64_t can)
{
    return budget > 0 && total > 0 && budget > can ? can : budget;
}

int ft_budget_fits(uint64_t held, uint64_t size, uint64_t budget)
{
    return budget == 0 || (size <= budget && held <= budget - size);
}

/* The bytes unit i takes in a slot, with `extra` counted as streaming. */
static uint64_t slot_len(const ft_budget_unit_t *units, int i, int extra)
{
    return i == extra ? units[i].bytes : units[i].slot_len;
}

uint64_t ft_budget_slots_full(const ft_budget_unit_t *units, int n, int slots, int extra)
{
    uint64_t sum = 0, below = UINT64_MAX;
    for (int left = slots; left > 0;) {
        uint64_t top = 0;
        int count = 0;
        for (int i = 0; i < n; i++) {
            uint64_t len = slot_len(units, i, extra);
            if (len >= below || len == 0 || len < top)
                continue;
            count = len > top ? 1 : count + 1;
            top = len;
        }
        if (count == 0)
            break;
        int take = count < left ? count : left;
        sum += (uint64_t)take * top;
        left -= take;
        below = top;
    }
    return sum;
}

uint64_t ft_budget_committed(uint64_t held, uint64_t loaded, uint64_t slots_full)
{
    return loaded < slots_full ? held - loaded + slots_full : held;
}

int ft_budget_demote_pick(const ft_budget_unit_t *units, int n, int slots)
{
    int best = -1;
    uint64_t best_gain = 0, best_bytes = 1, cap = ft_budget_slots_full(units, n, slots, -1);
    for (int i = 0; i < n; i++) {
        if (!units[i].demotable)
            continue;
        uint64_t bytes = units[i].bytes, grow = ft_budget_slots_full(units, n, slots, i) - cap;
        if (bytes <= grow)
            continue;
        uint64_t gain = bytes - grow;
        /* the most room per byte, the larger room on a tie */
        double l = (double)gain / (double)bytes, r = (double)best_gain / (double)best_bytes;
        if (best < 0 || l > r || (l == r && gain > best_gain)) {
            best = i;
            best_gain = gain;
            best_bytes = bytes;
        }
    }
    return best;
}

int ft_budget_over(ft_budget_over_t *over, uint64_t committed, uint64_t size, uint64_t budget,
                   uint64_t weights)
{
    if (ft_budget_fits(committed, size, budget))
        return 0;
    /* past 2^64: as far past as can be said */
    uint64_t need = committed + size < committed ? UINT64_MAX : committed + size;
    if (need - budget > over->most) {
        over->most = need - budget;
        over->need = need;
        over->other = need > weights ? need - weights : 0;
    }
    return over->count++ == 0;
}

int ft_budget_shown(uint64_t budget, uint64_t device_total)
{
    return budget != 0 && budget < device_total;
}

void ft_budget_view(uint64_t budget, uint64_t held, size_t *free_b, size_t *total_b)
{
    if (!ft_budget_shown(budget, *total_b))
        return;
    uint64_t left = budget > held ? budget - held : 0;
    *total_b = (size_t)budget;
    if (left < *free_b)
        *free_b = (size_t)left;
}

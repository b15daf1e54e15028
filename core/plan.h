/* plan.h - the planner: which units stay resident on the GPU, which stream through a
 * pool of slots, how many slots; and the pipeline model that predicts a plan's step
 * time (docs/planning.md explains every rule at length).
 *
 * Owns: the pipeline model, the strategies (knapsack, greedy, global), the smallest
 * feasible budget, the diagnostics table. Knows nothing of CUDA or the environment:
 * the caller passes the profiled times, the measured bandwidth and the budget (already
 * capped by what the device has free, and already the smaller of
 * FT_MAX_GPU_MEM_FRACTION x total and FT_GPU_MEM_LIMIT).
 *
 * THE PIPELINE MODEL. One pass runs the units in their learned order on one compute
 * stream; the pass repeats (unit 0 follows unit n-1). Streamed units are copied on one
 * side stream (one copy engine, copies run one at a time, in order) into a pool of
 * `slots` slots, one copy per streamed unit; the j-th streamed unit of a pass is group j
 * (j = 0..G-1). slot_bytes = the largest streamed unit. Group j uses slot j mod slots,
 * the same in every pass. A group's copy time is
 * copy_latency_us + c / h2d_bytes_per_us, plus c / d2h_bytes_per_us when the write-back
 * is modelled (d2h_bytes_per_us > 0), c the group's copy_bytes (a unit's copy_bytes may
 * be below its bytes: memory is mapped in granules, copies move the regions' own
 * sizes). Event rules, all times in us:
 *   - copy of group j starts at max(end of the previous copy in issue order, end of the
 *     compute of the slot's previous occupant (the latest earlier group, this pass or
 *     the previous one, with the same slot));
 *   - compute of unit i starts at max(end of unit i-1's compute, end of its group's
 *     copy when streamed); unit i's stall is that start minus the end of unit i-1;
 *   - every streamed group is copied in every pass, even when it has a slot of its
 *     own (a runtime that skipped such copies would only be faster);
 *   - at time 0 nothing is loaded, every slot is free, both streams idle; the host is
 *     assumed to issue work ahead of the device (launch overhead is not modelled).
 * Passes are simulated until the state relative to the pass end repeats (a max-plus
 * system becomes periodic); the step time is the mean pass length over that period,
 * exactly, and sum of compute + sum of stalls of a pass = step. If no period shows
 * within FT_PLAN_MAX_PASSES passes the mean of the last 15 passes is used.
 */
#ifndef FT_PLAN_H
#define FT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define FT_PLAN_MAX_PASSES 512

typedef struct {
    const char *name;     /* for the table; NULL prints unit.<i> */
    uint64_t bytes;       /* device bytes it occupies (rounded as the runtime maps it) */
    double compute_us;    /* time of its kernel range in one pass */
    uint64_t copy_bytes;  /* bytes a load copies (the regions' own sizes); 0: bytes */
    /* 1: the unit may not stream (FT_EXCLUDE_PATTERNS, or not matched by
     * FT_INCLUDE_PATTERNS): every strategy keeps it resident, and its bytes count in
     * every plan's device memory and in the smallest budget. */
    int keep_resident;
} ft_plan_unit_t;

typedef enum { FT_PLAN_KNAPSACK, FT_PLAN_GREEDY, FT_PLAN_GLOBAL } ft_plan_strategy_t;

typedef struct {
    const ft_plan_unit_t *units;
    size_t n;                       /* in execution order; the pass repeats */
    double h2d_bytes_per_us;        /* measured copy bandwidth (> 0) */
    double copy_latency_us;         /* fixed cost of every copy (>= 0) */
    /* > 0: before each copy in, the slot's previous content is copied back (the engine's
     * write-back), modelled as the same bytes at this bandwidth; 0: no write-back. */
    double d2h_bytes_per_us;
    uint64_t budget_bytes;          /* memory mode when > 0; 0 = latency mode */
    uint64_t other_bytes;           /* peak non-weight memory, counted in the budget */
    /* Latency mode: a plan is acceptable when the model, run with every unit's compute
     * multiplied by the factor, predicts a step of at most factor x the all-resident
     * time: every copy must hide within factor x the compute that covers it. Below 1
     * that is a safety margin (0.95: copies must fit in 95% of the compute), above 1 it
     * tolerates stalls. (A literal "step <= factor x all-resident" could never hold
     * for a factor below 1.) Ignored in memory mode, as in the Python library. */
    double time_budget_factor;      /* > 0; 0 is read as 1 */
    /* FT_MIN_BLOCKS..FT_NUM_BLOCKS, 2 <= min <= max; 1..1 is the shim's last resort
     * where no two-slot plan fits the budget (no copy overlaps the unit before's
     * kernels then) */
    int min_slots, max_slots;
    ft_plan_strategy_t strategy;
} ft_plan_input_t;

typedef struct {
    int *resident;            /* caller's array of n: 1 resident, 0 streamed */
    int *slot;                /* caller's array of n: slot of a streamed unit, -1 resident */
    double *unit_stall_us;    /* caller's array of n, or NULL: predicted stall per unit */
    int slots;                /* 0 when every unit is resident */
    uint64_t slot_bytes;      /* the largest streamed unit; 0 when none */
    uint64_t device_bytes;    /* resident bytes + slots x slot_bytes + other_bytes */
    double step_us;           /* predicted step time of the plan */
    double all_resident_us;   /* sum of compute: the step with everything resident */
    double stall_us;          /* step_us - all_resident_us */
} ft_plan_t;

/* The pipeline model above: the predicted steady-state step time, in us, of the plan
 * that keeps the units with resident[i] != 0 and streams the others through `slots`
 * slots (ignored when nothing is streamed, else >= 1). unit_stall_us (NULL or n
 * entries) receives each unit's stall in the steady state (mean over the period).
 * Returns a negative value on invalid input (no units array, bandwidth <= 0, slots < 1
 * with a streamed unit). */
double ft_plan_predict(const ft_plan_input_t *in, const int *resident, int slots,
                       double *unit_stall_us);

/* The same grouping the model uses: group[i] = index of unit i's copy group within a
 * pass (-1 when resident); returns the number of groups. The slot of unit i is
 * group[i] % slots. */
int ft_plan_groups(const ft_plan_input_t *in, const int *resident, int *group);

/* The device bytes of a plan: resident + slots x largest streamed + other. */
uint64_t ft_plan_device_bytes(const ft_plan_input_t *in, const int *resident, int slots);

/* Whether a plan is acceptable in latency mode (the rule under time_budget_factor). */
int ft_plan_acceptable(const ft_plan_input_t *in, const int *resident, int slots);

/* The smallest device memory of any plan whose slot count is in range: over every
 * threshold B (each distinct size of a unit that may stream, and "nothing streamed"),
 * stream every such unit of at most B bytes with min_slots slots and keep the rest
 * resident:
 *   min over B of other + min_slots x B + bytes of the units larger than B or kept.
 * No plan uses less: a plan whose largest streamed unit is B streams at most those. */
uint64_t ft_plan_min_budget(const ft_plan_input_t *in);

/* Chooses the plan with in->strategy and fills *out (the caller's arrays included);
 * units with keep_resident are resident in every plan considered:
 *   memory mode  least predicted step with device_bytes <= budget (ties: fewer
 *                streamed bytes, then less memory);
 *   latency mode least device_bytes among acceptable plans (ties: least step).
 * Strategies (exact rules in docs/planning.md):
 *   KNAPSACK  0/1 knapsack DP per slot size, then exact local search with the model;
 *   GREEDY    for each slot count, largest units made resident first while the plan
 *             fits (memory mode) / until it is acceptable (latency mode);
 *   GLOBAL    exhaustive over every resident set and slot count when that is at most
 *             FT_PLAN_GLOBAL_EXHAUSTIVE evaluations, else the knapsack plan improved by
 *             a wider local search; never worse than KNAPSACK.
 * Returns 0; -EINVAL on invalid input; -ENOSPC when budget_bytes is below
 * ft_plan_min_budget (then *min_budget, when not NULL, receives it); -ENOMEM. */
#define FT_PLAN_GLOBAL_EXHAUSTIVE (1u << 18)
int ft_plan_choose(const ft_plan_input_t *in, ft_plan_t *out, uint64_t *min_budget);

/* The diagnostics table (FT_LOG_DIAGNOSTICS) as text into buf, always NUL-terminated
 * when len > 0: one row per unit (index, name, bytes, compute us, copy us, decision:
 * resident, streamed, or kept for a keep_resident unit; slot, predicted stall us),
 * then the totals (resident and streamed bytes, slots x slot bytes, device bytes,
 * predicted step vs all-resident). Returns the length the whole text needs, as
 * snprintf does. */
size_t ft_plan_format(const ft_plan_input_t *in, const ft_plan_t *plan, char *buf, size_t len);

#endif

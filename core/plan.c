/* plan.c - the pipeline model and the strategies (see plan.h for the contracts and
 * docs/planning.md for the reasoning). */
#include "core/plan.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most DP cells (memory steps) per knapsack; beyond it the granularity grows and unit
 * sizes are rounded up to it (docs/planning.md, "Discretisation"). */
#define DP_MAX_CELLS (1u << 16)
/* Model work (units simulated, summed over model runs) the local search may spend per
 * plan: bounds the planning time (about 0.3 s at 200 units) whatever the instance. */
#define SEARCH_WORK 3e7
/* States kept to detect the period of the pipeline (longest period detected). */
#define HIST 16
/* Frontier sets tried per slot size and count (the DP's best sets at successive
 * capacities): the model's best is often not the DP's. */
#define LAT_TRIES 16
/* The local search tries every pair of units up to this many units (n^2 model runs a
 * round), only near pairs beyond; GLOBAL up to twice as many. */
#define WIDE_MAX_UNITS 64

/* ---- the pipeline model ------------------------------------------------------ */

/* Scratch for one model run; allocated once per ft_plan_choose, since the searches
 * run the model thousands of times. */
typedef struct {
    size_t n;
    int *group;          /* per unit: group index, -1 resident */
    double *copy_us;     /* per group */
    double *end_prev;    /* per group: compute end of its unit, previous pass */
    double *end_cur;     /* same, this pass */
    double *hist;        /* HIST states of (G+1) values, relative to the pass end */
    double *stall_hist;  /* HIST passes x n stalls */
    double *pass_end;    /* FT_PLAN_MAX_PASSES + 1 */
} ws_t;

static void ws_free(ws_t *w)
{
    free(w->group);
    free(w->copy_us);
    free(w->end_prev);
    free(w->end_cur);
    free(w->hist);
    free(w->stall_hist);
    free(w->pass_end);
    memset(w, 0, sizeof *w);
}

static int ws_init(ws_t *w, size_t n)
{
    memset(w, 0, sizeof *w);
    size_t m = n ? n : 1;
    w->n = n;
    w->group = calloc(m, sizeof *w->group);
    w->copy_us = calloc(m, sizeof *w->copy_us);
    w->end_prev = calloc(m, sizeof *w->end_prev);
    w->end_cur = calloc(m, sizeof *w->end_cur);
    w->hist = calloc((size_t)HIST * (m + 1), sizeof *w->hist);
    w->stall_hist = calloc((size_t)HIST * m, sizeof *w->stall_hist);
    w->pass_end = calloc(FT_PLAN_MAX_PASSES + 1, sizeof *w->pass_end);
    if (!w->group || !w->copy_us || !w->end_prev || !w->end_cur ||
        !w->hist || !w->stall_hist || !w->pass_end) {
        ws_free(w);
        return -ENOMEM;
    }
    return 0;
}

/* Relative slack of every time comparison: the model adds and subtracts floating
 * times, and a plan that is exactly on the limit must count as within it. */
static double time_tol(double C)
{
    return 1e-9 * (C + 1.0);
}

static double copy_time(const ft_plan_input_t *in, uint64_t bytes)
{
    double t = in->copy_latency_us + (double)bytes / in->h2d_bytes_per_us;
    return in->d2h_bytes_per_us > 0 ? t + (double)bytes / in->d2h_bytes_per_us : t;
}

static uint64_t unit_copy_bytes(const ft_plan_unit_t *u)
{
    return u->copy_bytes ? u->copy_bytes : u->bytes;
}

static uint64_t largest_streamed(const ft_plan_input_t *in, const int *resident)
{
    uint64_t b = 0;
    for (size_t i = 0; i < in->n; i++)
        if (!resident[i] && in->units[i].bytes > b)
            b = in->units[i].bytes;
    return b;
}

/* Fills group[] and, when copy is not NULL, the groups' copy times; returns the number
 * of groups (plan.h: one per streamed unit, in pass order). */
static int make_groups(const ft_plan_input_t *in, const int *resident, int *group, double *copy)
{
    int g = -1;
    for (size_t i = 0; i < in->n; i++) {
        if (resident[i]) {
            group[i] = -1;
            continue;
        }
        group[i] = ++g;
        if (copy)
            copy[g] = copy_time(in, unit_copy_bytes(&in->units[i]));
    }
    return g + 1;
}

/* The model (plan.h) with every compute time multiplied by scale. */
static double simulate(const ft_plan_input_t *in, ws_t *w, const int *resident, int slots,
                       double scale, double *unit_stall)
{
    size_t n = in->n;
    int G = make_groups(in, resident, w->group, w->copy_us);
    double C = 0, T = 0;
    for (size_t i = 0; i < n; i++)
        C += in->units[i].compute_us * scale;
    if (G == 0) {
        if (unit_stall)
            memset(unit_stall, 0, n * sizeof *unit_stall);
        return C;
    }
    /* prev[j] of the slot's previous occupant: j - slots in this pass, else the last
     * group of the previous pass with the same slot. */
    double copy_free = 0, span = C;
    for (int j = 0; j < G; j++) {
        w->end_prev[j] = 0;
        span += w->copy_us[j];
    }
    double tol = time_tol(span);
    w->pass_end[0] = 0;
    int stride = G + 1;
    for (int p = 1; p <= FT_PLAN_MAX_PASSES; p++) {
        double *st = w->stall_hist + (size_t)(p % HIST) * n;
        double copy_end = 0;
        for (size_t i = 0; i < n; i++) {
            int j = w->group[i];
            double start = T;
            if (j >= 0) {
                double release;
                if (j >= slots)
                    release = w->end_cur[j - slots];
                else {
                    int q = j + ((G - 1 - j) / slots) * slots; /* last of j's slot */
                    release = w->end_prev[q];
                }
                double cs = copy_free > release ? copy_free : release;
                copy_end = cs + w->copy_us[j];
                copy_free = copy_end;
                if (copy_end > start)
                    start = copy_end;
            }
            st[i] = start - T;
            T = start + in->units[i].compute_us * scale;
            if (j >= 0)
                w->end_cur[j] = T;
        }
        w->pass_end[p] = T;
        double *hs = w->hist + (size_t)(p % HIST) * stride;
        hs[0] = copy_free - T;
        for (int j = 0; j < G; j++) {
            hs[j + 1] = w->end_cur[j] - T;
            w->end_prev[j] = w->end_cur[j];
        }
        int period = 0;
        for (int k = 1; k < HIST && k < p && !period; k++) {
            const double *ho = w->hist + (size_t)((p - k) % HIST) * stride;
            int same = 1;
            for (int x = 0; x < stride && same; x++)
                same = fabs(hs[x] - ho[x]) <= tol;
            if (same)
                period = k;
        }
        if (period || p == FT_PLAN_MAX_PASSES) {
            int k = period ? period : HIST - 1; /* no period: the mean of the last ones */
            if (k > HIST - 1)
                k = HIST - 1;
            double step = (w->pass_end[p] - w->pass_end[p - k]) / k;
            if (unit_stall) {
                for (size_t i = 0; i < n; i++) {
                    double s = 0;
                    for (int q = 0; q < k; q++)
                        s += w->stall_hist[(size_t)((p - q) % HIST) * n + i];
                    unit_stall[i] = s / k;
                }
            }
            return step;
        }
    }
    return -1; /* not reached */
}

static int input_ok(const ft_plan_input_t *in)
{
    return in && (in->units || in->n == 0) && in->h2d_bytes_per_us > 0 &&
           in->copy_latency_us >= 0 && in->d2h_bytes_per_us >= 0;
}

static int any_streamed(const ft_plan_input_t *in, const int *resident)
{
    for (size_t i = 0; i < in->n; i++)
        if (!resident[i])
            return 1;
    return 0;
}

/* The arguments of ft_plan_predict and ft_plan_acceptable. */
static int call_ok(const ft_plan_input_t *in, const int *resident, int slots)
{
    return input_ok(in) && resident && (slots >= 1 || !any_streamed(in, resident));
}

double ft_plan_predict(const ft_plan_input_t *in, const int *resident, int slots,
                       double *unit_stall_us)
{
    if (!call_ok(in, resident, slots))
        return -EINVAL;
    ws_t w;
    if (ws_init(&w, in->n) < 0)
        return -ENOMEM;
    double step = simulate(in, &w, resident, slots, 1.0, unit_stall_us);
    ws_free(&w);
    return step;
}

int ft_plan_groups(const ft_plan_input_t *in, const int *resident, int *group)
{
    return make_groups(in, resident, group, NULL);
}

uint64_t ft_plan_device_bytes(const ft_plan_input_t *in, const int *resident, int slots)
{
    uint64_t r = in->other_bytes, big = 0;
    for (size_t i = 0; i < in->n; i++) {
        if (resident[i])
            r += in->units[i].bytes;
        else if (in->units[i].bytes >= big)
            big = in->units[i].bytes;
    }
    int streamed = any_streamed(in, resident);
    return r + (streamed ? (uint64_t)slots * big : 0);
}

static double factor_of(const ft_plan_input_t *in)
{
    return in->time_budget_factor > 0 ? in->time_budget_factor : 1.0;
}

static double compute_sum(const ft_plan_input_t *in)
{
    double C = 0;
    for (size_t i = 0; i < in->n; i++)
        C += in->units[i].compute_us;
    return C;
}

static int acceptable_ws(const ft_plan_input_t *in, ws_t *w, const int *resident, int slots)
{
    double f = factor_of(in), C = compute_sum(in);
    double s = simulate(in, w, resident, slots, f, NULL);
    return s <= f * C + time_tol(f * C);
}

int ft_plan_acceptable(const ft_plan_input_t *in, const int *resident, int slots)
{
    if (!call_ok(in, resident, slots))
        return -EINVAL;
    ws_t w;
    if (ws_init(&w, in->n) < 0)
        return -ENOMEM;
    int ok = acceptable_ws(in, &w, resident, slots);
    ws_free(&w);
    return ok;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The least-memory plan (plan.h, ft_plan_min_budget): its bytes, and in *thresh the
 * largest streamed size B (UINT64_MAX when keeping everything resident is least). */
static uint64_t min_plan(const ft_plan_input_t *in, uint64_t *thresh)
{
    uint64_t total = 0;
    for (size_t i = 0; i < in->n; i++)
        total += in->units[i].bytes;
    uint64_t best = in->other_bytes + total; /* nothing streamed */
    *thresh = UINT64_MAX;
    uint64_t *s = in->n ? malloc(in->n * sizeof *s) : NULL;
    if (!s)
        return best;
    size_t m = 0; /* the units that may stream; kept ones count in total only */
    for (size_t i = 0; i < in->n; i++)
        if (!in->units[i].keep_resident)
            s[m++] = in->units[i].bytes;
    qsort(s, m, sizeof *s, cmp_u64);
    uint64_t below = 0; /* bytes of the units up to and including threshold s[i] */
    for (size_t i = 0; i < m; i++) {
        below += s[i];
        if (i + 1 < m && s[i + 1] == s[i])
            continue;
        uint64_t m = in->other_bytes + (uint64_t)in->min_slots * s[i] + (total - below);
        if (m < best) {
            best = m;
            *thresh = s[i];
        }
    }
    free(s);
    return best;
}

uint64_t ft_plan_min_budget(const ft_plan_input_t *in)
{
    uint64_t thresh;
    return min_plan(in, &thresh);
}

/* ---- the search ------------------------------------------------------------- */

typedef struct {
    int ok;            /* within the budget (memory mode) / acceptable (latency mode) */
    double viol;       /* how far from ok: bytes over the budget / us over the limit */
    double step;
    uint64_t dev;
    uint64_t streamed; /* bytes copied per pass */
} score_t;

/* Starting points kept for the local search: the best few distinct plans scored. */
#define POOL 8

typedef struct {
    int *sets;         /* POOL sets of n */
    int slots[POOL];
    score_t score[POOL];
    int len;
} pool_t;

typedef struct {
    const ft_plan_input_t *in;
    size_t n;
    int memory_mode;
    double C, tol;
    ws_t ws;
    int *best;         /* best resident set so far */
    int best_slots;
    score_t best_score;
    int have_best;
    int *tmp;
    pool_t pool[2];    /* the best plans; the leanest that miss (latency mode) */
    double work_left;  /* model work the local search may still spend, in unit-steps */
    int any_kept;      /* some unit has keep_resident */
} search_t;

static score_t score(search_t *s, const int *res, int slots)
{
    const ft_plan_input_t *in = s->in;
    score_t r = {0};
    s->work_left -= (double)s->n + 1;
    /* The searches never stream a kept unit; should one try, its plan loses to any. */
    for (size_t i = 0; s->any_kept && i < s->n; i++)
        if (!res[i] && in->units[i].keep_resident) {
            r.viol = HUGE_VAL;
            return r;
        }
    r.dev = ft_plan_device_bytes(in, res, slots);
    for (size_t i = 0; i < s->n; i++)
        if (!res[i])
            r.streamed += in->units[i].bytes;
    if (s->memory_mode) {
        r.ok = r.dev <= in->budget_bytes;
        if (!r.ok) {
            r.viol = (double)(r.dev - in->budget_bytes);
            return r; /* over the budget: the step does not matter */
        }
        r.step = simulate(in, &s->ws, res, slots, 1.0, NULL);
        return r;
    }
    double f = factor_of(in);
    r.step = simulate(in, &s->ws, res, slots, 1.0, NULL);
    double scaled = r.step;
    if (f != 1.0) {
        scaled = simulate(in, &s->ws, res, slots, f, NULL);
        s->work_left -= (double)s->n;
    }
    r.viol = scaled - f * s->C;
    r.ok = r.viol <= time_tol(f * s->C);
    if (r.ok)
        r.viol = 0;
    return r;
}

/* Whether a beats b under the mode's objective (plan.h, ft_plan_choose); between two
 * plans that both miss the constraint, the nearer one, which guides the local search
 * out of an infeasible start. */
static int better(const search_t *s, const score_t *a, const score_t *b)
{
    if (!a->ok || !b->ok) {
        if (a->ok != b->ok)
            return a->ok;
        return a->viol < b->viol;
    }
    if (s->memory_mode) {
        if (a->step < b->step - s->tol)
            return 1;
        if (a->step > b->step + s->tol)
            return 0;
        if (a->streamed != b->streamed)
            return a->streamed < b->streamed;
        return a->dev < b->dev;
    }
    if (a->dev != b->dev)
        return a->dev < b->dev;
    return a->step < b->step - s->tol;
}

/* Slot counts are meaningless without a streamed unit: such plans carry 0. */
static int norm_slots(search_t *s, const int *res, int slots)
{
    return any_streamed(s->in, res) ? slots : 0;
}

/* In latency mode, plans that miss the limit but use little memory are the starts
 * from which the local search most often reaches the least memory: they have a pool
 * of their own, ranked by memory, then by how far they miss. */
static int leaner(const score_t *a, const score_t *b)
{
    if (a->dev != b->dev)
        return a->dev < b->dev;
    return a->viol < b->viol;
}

static void pool_add(search_t *s, pool_t *pl, const int *res, int slots, const score_t *sc,
                     int lean)
{
    size_t n = s->n;
    for (int p = 0; p < pl->len; p++)
        if (pl->slots[p] == slots && !memcmp(pl->sets + (size_t)p * n, res, n * sizeof *res))
            return;
    int at = pl->len;
    if (at == POOL) {
        at = POOL - 1; /* the worst, kept last */
        if (!(lean ? leaner(sc, &pl->score[at]) : better(s, sc, &pl->score[at])))
            return;
    } else
        pl->len++;
    while (at > 0 && (lean ? leaner(sc, &pl->score[at - 1]) : better(s, sc, &pl->score[at - 1]))) {
        memcpy(pl->sets + (size_t)at * n, pl->sets + (size_t)(at - 1) * n, n * sizeof *res);
        pl->slots[at] = pl->slots[at - 1];
        pl->score[at] = pl->score[at - 1];
        at--;
    }
    memcpy(pl->sets + (size_t)at * n, res, n * sizeof *res);
    pl->slots[at] = slots;
    pl->score[at] = *sc;
}

static score_t offer(search_t *s, const int *res, int slots)
{
    slots = norm_slots(s, res, slots);
    score_t sc = score(s, res, slots);
    if (!s->have_best || better(s, &sc, &s->best_score)) {
        memcpy(s->best, res, s->n * sizeof *res);
        s->best_slots = slots;
        s->best_score = sc;
        s->have_best = 1;
    }
    if (s->pool[0].sets)
        pool_add(s, &s->pool[0], res, slots, &sc, 0);
    if (s->pool[1].sets && !sc.ok && !s->memory_mode)
        pool_add(s, &s->pool[1], res, slots, &sc, 1);
    return sc;
}

/* Exact local search from (res, slots), first improvement. Moves: flip one unit, or
 * two units together (an exchange of a resident and a streamed unit, or two streamed
 * at once: streaming one unit alone costs slots, so memory often drops only when two
 * go), each with the slot count -1, same or +1. Pairs are all pairs when `wide`, else
 * those at most PAIR_SPAN apart in the pass (the moves that shift a copy's window).
 * Stops when a sweep over every move finds no improvement or the search's budget of
 * model work is spent; the result is offered. */
#define PAIR_SPAN 3
static int try_move(search_t *s, int *res, size_t i, long j, int *slots, score_t *cur)
{
    const ft_plan_input_t *in = s->in;
    if (in->units[i].keep_resident || (j >= 0 && in->units[j].keep_resident))
        return 0; /* a kept unit never moves */
    res[i] = !res[i];
    if (j >= 0)
        res[j] = !res[j];
    for (int d = -1; d <= 1; d++) {
        int k = *slots + d;
        if (k < in->min_slots || k > in->max_slots)
            continue;
        score_t sc = score(s, res, norm_slots(s, res, k));
        if (better(s, &sc, cur)) {
            *cur = sc;
            *slots = k;
            return 1;
        }
    }
    res[i] = !res[i];
    if (j >= 0)
        res[j] = !res[j];
    return 0;
}

static void polish(search_t *s, int *res, int slots, int wide)
{
    const ft_plan_input_t *in = s->in;
    size_t n = s->n;
    if (slots < in->min_slots)
        slots = in->min_slots;
    score_t cur = score(s, res, norm_slots(s, res, slots));
    int improved = 1;
    while (improved && s->work_left > 0) {
        improved = 0;
        for (size_t i = 0; i < n && s->work_left > 0; i++) {
            improved |= try_move(s, res, i, -1, &slots, &cur);
            size_t hi = wide ? n : (i + PAIR_SPAN + 1 < n ? i + PAIR_SPAN + 1 : n);
            for (size_t j = i + 1; j < hi; j++)
                improved |= try_move(s, res, i, (long)j, &slots, &cur);
        }
    }
    offer(s, res, slots);
}

/* Polishes every plan of both pools (the best few candidates of the DP, and the
 * leanest that miss the limit). */
static int polish_pool(search_t *s, int wide)
{
    size_t n = s->n;
    int *starts = malloc((size_t)2 * POOL * n * sizeof *starts);
    if (!starts)
        return -ENOMEM;
    int slots[2 * POOL], len = 0;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < s->pool[q].len; p++, len++) {
            memcpy(starts + (size_t)len * n, s->pool[q].sets + (size_t)p * n, n * sizeof *starts);
            slots[len] = s->pool[q].slots[p];
        }
    for (int p = 0; p < len; p++)
        polish(s, starts + (size_t)p * n, slots[p], wide);
    free(starts);
    return 0;
}

static void set_all(int *res, size_t n, int v)
{
    for (size_t i = 0; i < n; i++)
        res[i] = v;
}

typedef struct {
    uint64_t bytes;
    size_t idx;
} item_t;

static int cmp_item_asc(const void *a, const void *b)
{
    const item_t *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Reconstructs the DP's set over items 0..last at capacity cell c into res of n units
 * (the items beyond last, larger than the threshold, and the kept units, which are no
 * items, resident). */
static void dp_set(const item_t *it, size_t n, const uint8_t *take, size_t width,
                   const uint32_t *w, size_t last, size_t c, int *res)
{
    set_all(res, n, 1);
    for (size_t j = 0; j <= last; j++)
        res[it[j].idx] = 0;
    for (size_t j = last + 1; j-- > 0;) {
        if (take[j * width + c / 8] & (1u << (c % 8))) {
            res[it[j].idx] = 1;
            c -= w[j];
        }
    }
}

/* KNAPSACK. The pipeline's step is at least the copies of a pass (one copy engine), so
 * the DP chooses, for every threshold B (the largest streamed unit, hence the slot
 * size), the resident set among the units of at most B bytes that saves the most copy
 * time within the memory left: a 0/1 knapsack with weight = bytes (in cells of g
 * bytes, rounded up so that every DP set truly fits) and value = copy time. One table
 * serves every B, since the units are added in size order and B's query is made once
 * its units are in. Each (B, slot count) candidate is scored with the exact model,
 * and the best is improved by local search with the model. Kept units (keep_resident)
 * are no items: their bytes are fixed memory, like those of the units above B. */
static int knapsack(search_t *s, int wide)
{
    const ft_plan_input_t *in = s->in;
    size_t units = s->n, m = units ? units : 1;
    item_t *it = malloc(m * sizeof *it);
    uint32_t *w = malloc(m * sizeof *w);
    double *val = malloc(m * sizeof *val);
    if (!it || !w || !val) {
        free(it), free(w), free(val);
        return -ENOMEM;
    }
    /* The items are the units that may stream; the kept ones are fixed memory. */
    uint64_t total = 0, kept = 0, g = 0;
    size_t n = 0;
    for (size_t i = 0; i < units; i++) {
        if (in->units[i].keep_resident) {
            kept += in->units[i].bytes;
            continue;
        }
        it[n].bytes = in->units[i].bytes;
        it[n].idx = i;
        total += it[n].bytes;
        g = gcd64(g, it[n].bytes);
        n++;
    }
    qsort(it, n, sizeof *it, cmp_item_asc);
    if (g == 0)
        g = 1;
    if (total / g > DP_MAX_CELLS)
        g = (total + DP_MAX_CELLS - 1) / DP_MAX_CELLS;
    size_t K = 0;
    for (size_t j = 0; j < n; j++) {
        w[j] = (uint32_t)((it[j].bytes + g - 1) / g);
        val[j] = copy_time(in, unit_copy_bytes(&in->units[it[j].idx]));
        K += w[j];
    }
    size_t width = K / 8 + 1;
    double *best = calloc(K + 1, sizeof *best);
    uint8_t *take = calloc((n ? n : 1) * width, 1);
    if (!best || !take) {
        free(it), free(w), free(val), free(best), free(take);
        return -ENOMEM;
    }
    double f = factor_of(in);
    uint64_t below = 0;   /* bytes of the items added */
    double tcopy = 0;     /* copy time of the items added */
    int *res = s->tmp;
    for (size_t j = 0; j < n; j++) {
        for (size_t c = K + 1; c-- > w[j];) {
            double v = best[c - w[j]] + val[j];
            if (v > best[c]) {
                best[c] = v;
                take[j * width + c / 8] |= (uint8_t)(1u << (c % 8));
            }
        }
        below += it[j].bytes;
        tcopy += val[j];
        if (j + 1 < n && it[j + 1].bytes == it[j].bytes)
            continue;
        uint64_t B = it[j].bytes, larger = total - below;
        if (s->memory_mode) {
            for (int k = in->min_slots; k <= in->max_slots; k++) {
                uint64_t fixed = in->other_bytes + (uint64_t)k * B + larger + kept;
                if (fixed > in->budget_bytes)
                    break; /* more slots only cost more */
                uint64_t cap = (in->budget_bytes - fixed) / g;
                /* The set at the full capacity saves the most copy time; smaller
                 * frontier sets leave other units resident, which may hide copies
                 * better: they seed the local search. */
                size_t c = cap > K ? K : (size_t)cap;
                double last = -1;
                for (int tries = 0; tries < LAT_TRIES; tries++) {
                    dp_set(it, units, take, width, w, j, c, res);
                    offer(s, res, k);
                    last = best[c];
                    while (c > 0 && best[c] >= last)
                        c--;
                    if (best[c] >= last)
                        break;
                }
            }
            continue;
        }
        /* Latency mode: an acceptable plan's copies fit in f x the compute, so start at
         * the least memory whose DP set passes that bound and walk up the frontier
         * while its sets could still use less memory than the best acceptable plan. */
        double need = tcopy - f * s->C;
        size_t c = 0;
        while (c < K && best[c] < need - time_tol(tcopy))
            c++;
        double last = -1;
        for (int tries = 0; c <= K && tries < LAT_TRIES; c++) {
            if (best[c] <= last)
                continue;
            last = best[c];
            tries++;
            dp_set(it, units, take, width, w, j, c, res);
            if (s->best_score.ok &&
                ft_plan_device_bytes(in, res, in->min_slots) >= s->best_score.dev)
                break;
            for (int k = in->min_slots; k <= in->max_slots; k++)
                offer(s, res, k);
        }
    }
    free(it), free(w), free(val), free(best), free(take);
    return polish_pool(s, wide);
}

static int cmp_item_desc(const void *a, const void *b)
{
    const item_t *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* GREEDY. For each slot count k: start with everything streamed but the kept units
 * and walk the others by size, largest first (ties: earlier unit first). Memory mode: a unit is made resident
 * when the plan then fits the budget, else it stays streamed and the walk goes on.
 * Latency mode: units are made resident until the plan is acceptable. The best plan
 * over k wins under the mode's objective. */
static int greedy(search_t *s)
{
    const ft_plan_input_t *in = s->in;
    size_t n = s->n;
    item_t *it = malloc(n * sizeof *it);
    if (!it)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        it[i].bytes = in->units[i].bytes;
        it[i].idx = i;
    }
    qsort(it, n, sizeof *it, cmp_item_desc);
    int *res = s->tmp;
    for (int k = in->min_slots; k <= in->max_slots; k++) {
        for (size_t i = 0; i < n; i++)
            res[i] = in->units[i].keep_resident != 0;
        if (s->memory_mode) {
            for (size_t j = 0; j < n; j++) {
                if (in->units[it[j].idx].keep_resident)
                    continue;
                res[it[j].idx] = 1;
                if (ft_plan_device_bytes(in, res, norm_slots(s, res, k)) > in->budget_bytes)
                    res[it[j].idx] = 0;
            }
        } else {
            for (size_t j = 0; j <= n; j++) {
                if (j < n && in->units[it[j].idx].keep_resident)
                    continue;
                if (score(s, res, norm_slots(s, res, k)).ok)
                    break;
                if (j < n)
                    res[it[j].idx] = 1;
            }
        }
        offer(s, res, k);
    }
    free(it);
    return 0;
}

/* GLOBAL. Every resident set (that holds the kept units) with every slot count, scored
 * by the model, when there are at most FT_PLAN_GLOBAL_EXHAUSTIVE of them; else the knapsack's plan improved by
 * the local search with pair swaps at any size. Seeded with the knapsack's plan
 * either way, so never worse. */
static int global(search_t *s)
{
    const ft_plan_input_t *in = s->in;
    size_t n = s->n;
    int rc = knapsack(s, n <= 2 * WIDE_MAX_UNITS);
    if (rc < 0)
        return rc;
    /* Every subset of the units that may stream; kept ones stay resident. */
    size_t nf = 0;
    for (size_t i = 0; i < n; i++)
        nf += !in->units[i].keep_resident;
    uint64_t ks = (uint64_t)(in->max_slots - in->min_slots + 1);
    if (nf >= 40 || ((uint64_t)1 << nf) * ks > FT_PLAN_GLOBAL_EXHAUSTIVE)
        return 0;
    int *res = s->tmp;
    for (uint64_t m = 0; m < ((uint64_t)1 << nf); m++) {
        size_t b = 0;
        for (size_t i = 0; i < n; i++)
            res[i] = in->units[i].keep_resident ? 1 : (int)((m >> b++) & 1);
        if (!any_streamed(in, res)) {
            offer(s, res, 0);
            continue;
        }
        for (int k = in->min_slots; k <= in->max_slots; k++)
            offer(s, res, k);
    }
    return 0;
}

int ft_plan_choose(const ft_plan_input_t *in, ft_plan_t *out, uint64_t *min_budget)
{
    if (!input_ok(in) || !out || !out->resident || !out->slot || in->min_slots < 1 ||
        in->max_slots < in->min_slots || in->time_budget_factor < 0)
        return -EINVAL;
    size_t n = in->n;
    search_t s = {0};
    s.in = in;
    s.n = n;
    s.memory_mode = in->budget_bytes > 0;
    s.C = compute_sum(in);
    s.tol = time_tol(s.C);
    s.work_left = SEARCH_WORK;
    for (size_t i = 0; i < n; i++)
        s.any_kept |= in->units[i].keep_resident != 0;
    if (s.memory_mode) {
        uint64_t need = ft_plan_min_budget(in);
        if (in->budget_bytes < need) {
            if (min_budget)
                *min_budget = need;
            return -ENOSPC;
        }
    }
    if (ws_init(&s.ws, n) < 0)
        return -ENOMEM;
    size_t m = n ? n : 1;
    s.best = calloc(m, sizeof *s.best);
    s.tmp = calloc(m, sizeof *s.tmp);
    s.pool[0].sets = calloc((size_t)POOL * m, sizeof *s.pool[0].sets);
    s.pool[1].sets = calloc((size_t)POOL * m, sizeof *s.pool[1].sets);
    int rc = -ENOMEM;
    if (!s.best || !s.tmp || !s.pool[0].sets || !s.pool[1].sets)
        goto done;
    /* Everything resident: the answer in latency mode when nothing else is acceptable
     * (always acceptable), and in memory mode when the budget holds everything. */
    set_all(s.tmp, n, 1);
    offer(&s, s.tmp, 0);
    switch (in->strategy) {
    case FT_PLAN_GREEDY:
        rc = greedy(&s);
        break;
    case FT_PLAN_GLOBAL:
        rc = global(&s);
        break;
    default:
        rc = knapsack(&s, n <= WIDE_MAX_UNITS);
        break;
    }
    if (rc < 0)
        goto done;
    if (!s.best_score.ok) {
        /* The budget is feasible (checked above) but the strategy's rule found nothing
         * within it (greedy can): fall back to the least-memory plan. */
        uint64_t B;
        min_plan(in, &B);
        for (size_t i = 0; i < n; i++)
            s.tmp[i] = B == UINT64_MAX || in->units[i].bytes > B || in->units[i].keep_resident;
        s.have_best = 0;
        offer(&s, s.tmp, in->min_slots);
    }
    int slots = s.best_slots;
    memcpy(out->resident, s.best, n * sizeof *s.best);
    int *group = s.tmp;
    make_groups(in, s.best, group, NULL);
    for (size_t i = 0; i < n; i++)
        out->slot[i] = group[i] < 0 ? -1 : group[i] % slots;
    out->slots = slots;
    out->slot_bytes = slots ? largest_streamed(in, s.best) : 0;
    out->device_bytes = ft_plan_device_bytes(in, s.best, slots);
    out->step_us = simulate(in, &s.ws, s.best, slots, 1.0, out->unit_stall_us);
    out->all_resident_us = s.C;
    out->stall_us = out->step_us - s.C;
    rc = 0;
done:
    free(s.best);
    free(s.tmp);
    free(s.pool[0].sets);
    free(s.pool[1].sets);
    ws_free(&s.ws);
    return rc;
}

/* ---- the diagnostics table -------------------------------------------------- */

static size_t append(char *buf, size_t len, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* snprintf at offset `at`, counting what would be written past the end, so the
 * caller can size the buffer from the return value. */
static size_t append(char *buf, size_t len, size_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *dst = at < len ? buf + at : NULL;
    size_t room = at < len ? len - at : 0;
    int k = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    return at + (k > 0 ? (size_t)k : 0);
}

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

size_t ft_plan_format(const ft_plan_input_t *in, const ft_plan_t *plan, char *buf, size_t len)
{
    size_t at = 0;
    if (len)
        buf[0] = '\0';
    at = append(buf, len, at, "%5s  %-24s %12s %12s %10s %-9s %5s %12s\n", "unit", "name",
                "MiB", "compute_us", "copy_us", "decision", "slot", "stall_us");
    uint64_t res_b = 0, str_b = 0;
    for (size_t i = 0; i < in->n; i++) {
        const ft_plan_unit_t *u = &in->units[i];
        char nm[32];
        if (u->name)
            snprintf(nm, sizeof nm, "%s", u->name);
        else
            snprintf(nm, sizeof nm, "unit.%zu", i);
        int r = plan->resident[i];
        if (r)
            res_b += u->bytes;
        else
            str_b += u->bytes;
        char slot[16];
        if (r)
            snprintf(slot, sizeof slot, "-");
        else
            snprintf(slot, sizeof slot, "%d", plan->slot[i]);
        at = append(buf, len, at, "%5zu  %-24s %12.2f %12.2f %10.2f %-9s %5s %12.2f\n", i, nm,
                    mib(u->bytes), u->compute_us, copy_time(in, unit_copy_bytes(u)),
                    !r ? "streamed" : u->keep_resident ? "kept" : "resident", slot,
                    plan->unit_stall_us ? plan->unit_stall_us[i] : 0.0);
    }
    at = append(buf, len, at,
                "resident %.2f MiB, streamed %.2f MiB through %d slots x %.2f MiB, "
                "device %.2f MiB (other %.2f MiB)\n",
                mib(res_b), mib(str_b), plan->slots, mib(plan->slot_bytes),
                mib(plan->device_bytes), mib(in->other_bytes));
    double ratio = plan->all_resident_us > 0 ? plan->step_us / plan->all_resident_us : 1.0;
    at = append(buf, len, at,
                "predicted step %.2f us vs all-resident %.2f us (x%.3f, stall %.2f us)\n",
                plan->step_us, plan->all_resident_us, ratio, plan->stall_us);
    return at;
}

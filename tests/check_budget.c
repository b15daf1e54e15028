/* check_budget.c - the budget's decisions (core/budget.c), called directly: the budget
 * the options give and its cap, whether an allocation fits (exact fit, one byte over, no budget, sums past 2^64), the full slots
 * counted by their largest units (against a sort), the count with every slot full, the
 * unit a demotion picks (the most room per byte, never one that gives back no room,
 * never one that may not stream), an allocation served past the budget (said once, the
 * most it went past kept), and what cudaMemGetInfo shows. */
#include <check.h>
#include <stdlib.h>

#include "core/budget.h"

#define MiB (1ull << 20)

START_TEST(configured_the_smaller_of_limit_and_fraction)
{
    ck_assert_uint_eq(ft_budget_configured(0, 0, 80 * MiB), 0);          /* neither: none */
    ck_assert_uint_eq(ft_budget_configured(0, -1, 80 * MiB), 0);         /* unset fraction */
    ck_assert_uint_eq(ft_budget_configured(30 * MiB, 0, 80 * MiB), 30 * MiB);
    ck_assert_uint_eq(ft_budget_configured(0, 0.5, 80 * MiB), 40 * MiB);
    ck_assert_uint_eq(ft_budget_configured(30 * MiB, 0.5, 80 * MiB), 30 * MiB);
    ck_assert_uint_eq(ft_budget_configured(50 * MiB, 0.5, 80 * MiB), 40 * MiB);
    /* the device's total not known yet: the limit alone */
    ck_assert_uint_eq(ft_budget_configured(50 * MiB, 0.5, 0), 50 * MiB);
    ck_assert_uint_eq(ft_budget_configured(0, 0.5, 0), 0);
}
END_TEST

START_TEST(capped_to_what_the_process_can_have)
{
    ck_assert_uint_eq(ft_budget_capped(40 * MiB, 80 * MiB, 30 * MiB), 30 * MiB);
    ck_assert_uint_eq(ft_budget_capped(40 * MiB, 80 * MiB, 40 * MiB), 40 * MiB);
    ck_assert_uint_eq(ft_budget_capped(40 * MiB, 80 * MiB, 50 * MiB), 40 * MiB);
    ck_assert_uint_eq(ft_budget_capped(0, 80 * MiB, 30 * MiB), 0);       /* no budget */
    ck_assert_uint_eq(ft_budget_capped(40 * MiB, 0, 30 * MiB), 40 * MiB); /* device unknown */
}
END_TEST

START_TEST(fits_edges)
{
    ck_assert(ft_budget_fits(6 * MiB, 4 * MiB, 10 * MiB));  /* exact fit */
    ck_assert(!ft_budget_fits(6 * MiB, 4 * MiB + 1, 10 * MiB));
    ck_assert(ft_budget_fits(10 * MiB, 0, 10 * MiB));        /* nothing more: fits at the brim */
    ck_assert(!ft_budget_fits(10 * MiB + 1, 0, 10 * MiB));   /* already over */
    ck_assert(!ft_budget_fits(0, 10 * MiB + 1, 10 * MiB));   /* larger than the budget alone */
    ck_assert(ft_budget_fits(0, 0, 1));
    /* no budget: everything fits */
    ck_assert(ft_budget_fits(UINT64_MAX, UINT64_MAX, 0));
    ck_assert(ft_budget_fits(0, 0, 0));
    /* a sum past 2^64 does not wrap round into a fit */
    ck_assert(!ft_budget_fits(2 * MiB, UINT64_MAX - MiB, 10 * MiB));
    ck_assert(!ft_budget_fits(UINT64_MAX - MiB, 2 * MiB, UINT64_MAX - 1));
    ck_assert(ft_budget_fits(UINT64_MAX - 2, 1, UINT64_MAX - 1));
}
END_TEST

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

/* The full slots by their definition: the `slots` largest lengths, sorted. */
static uint64_t slots_full_sorted(const ft_budget_unit_t *u, int n, int slots, int extra)
{
    uint64_t len[32];
    for (int i = 0; i < n; i++)
        len[i] = i == extra ? u[i].bytes : u[i].slot_len;
    qsort(len, (size_t)n, sizeof *len, cmp_desc);
    uint64_t sum = 0;
    for (int i = 0; i < n && i < slots; i++)
        sum += len[i];
    return sum;
}

START_TEST(slots_full_by_the_largest_units)
{
    /* 4, 4, 4 and 2 MiB streaming; a 9 MiB resident unit */
    ft_budget_unit_t u[5] = { { 4 * MiB, 4 * MiB, 0 }, { 0, 9 * MiB, 1 }, { 4 * MiB, 4 * MiB, 0 },
                              { 2 * MiB, 2 * MiB, 0 }, { 4 * MiB, 4 * MiB, 0 } };
    ck_assert_uint_eq(ft_budget_slots_full(u, 5, 2, -1), 8 * MiB);
    ck_assert_uint_eq(ft_budget_slots_full(u, 5, 3, -1), 12 * MiB);
    ck_assert_uint_eq(ft_budget_slots_full(u, 5, 4, -1), 14 * MiB);
    ck_assert_uint_eq(ft_budget_slots_full(u, 5, 6, -1), 14 * MiB); /* more slots than units */
    ck_assert_uint_eq(ft_budget_slots_full(u, 5, 0, -1), 0);
    /* the resident unit counted as streaming raises the largest slot, once: not slots
     * times the largest */
    ck_assert_uint_eq(ft_budget_slots_full(u, 5, 2, 1), 13 * MiB);
    ck_assert_uint_eq(ft_budget_slots_full(u, 5, 3, 1), 17 * MiB);
    ck_assert_uint_eq(ft_budget_slots_full(u, 0, 3, -1), 0);
}
END_TEST

START_TEST(slots_full_random_against_a_sort)
{
    srand(5);
    for (int trial = 0; trial < 3000; trial++) {
        ft_budget_unit_t u[32];
        int n = 1 + rand() % 32, slots = rand() % 8;
        for (int i = 0; i < n; i++) {
            uint64_t b = (uint64_t)(1 + rand() % 6) * MiB;
            u[i] = (ft_budget_unit_t){ rand() % 3 ? b : 0, b, rand() % 2 };
        }
        int extra = rand() % (n + 1) - 1;
        ck_assert_uint_eq(ft_budget_slots_full(u, n, slots, extra), slots_full_sorted(u, n, slots, extra));
    }
}
END_TEST

START_TEST(committed_counts_the_slots_full)
{
    /* 10 MiB held, of which 2 MiB of loaded units; the slots hold 8 MiB when full */
    ck_assert_uint_eq(ft_budget_committed(10 * MiB, 2 * MiB, 8 * MiB), 16 * MiB);
    /* the slots are full (or fuller: a pinned unit, an over-the-slots load) */
    ck_assert_uint_eq(ft_budget_committed(10 * MiB, 8 * MiB, 8 * MiB), 10 * MiB);
    ck_assert_uint_eq(ft_budget_committed(10 * MiB, 9 * MiB, 8 * MiB), 10 * MiB);
    ck_assert_uint_eq(ft_budget_committed(10 * MiB, 0, 0), 10 * MiB);
}
END_TEST

/* Layers of 1 MiB, two streaming through 2 slots; resident: a head four layers large,
 * and two layers, one of them kept by the unit selection. */
START_TEST(demote_a_layer_before_the_head)
{
    ft_budget_unit_t u[6] = {
        { 1 * MiB, 1 * MiB, 0 },  /* streaming */
        { 1 * MiB, 1 * MiB, 0 },  /* streaming */
        { 0, 1 * MiB, 0 },        /* resident, kept */
        { 0, 1 * MiB, 1 },        /* resident: gives back its 1 MiB */
        { 0, 4 * MiB, 1 },        /* the head: raises a slot to 4 MiB, gives back 1 MiB of 4 */
        { 0, 1 * MiB, 0 },        /* refused before */
    };
    ck_assert_int_eq(ft_budget_demote_pick(u, 6, 2), 3);
    /* once the layer streams, the head is all that is left */
    u[3] = (ft_budget_unit_t){ 1 * MiB, 1 * MiB, 0 };
    ck_assert_int_eq(ft_budget_demote_pick(u, 6, 2), 4);
    u[4] = (ft_budget_unit_t){ 4 * MiB, 4 * MiB, 0 };
    ck_assert_int_eq(ft_budget_demote_pick(u, 6, 2), -1);
}
END_TEST

START_TEST(demote_never_a_unit_that_gives_back_nothing)
{
    /* one streaming unit, two slots: a unit made to stream takes the empty slot, its
     * bytes still on the device */
    ft_budget_unit_t u[2] = { { 1 * MiB, 1 * MiB, 0 }, { 0, 2 * MiB, 1 } };
    ck_assert_int_eq(ft_budget_demote_pick(u, 2, 2), -1);
    /* with one slot it raises the slot by 1 MiB and gives back 1 MiB */
    ck_assert_int_eq(ft_budget_demote_pick(u, 2, 1), 1);
    /* nothing streams yet: every slot is empty */
    ft_budget_unit_t r[2] = { { 0, 1 * MiB, 1 }, { 0, 2 * MiB, 1 } };
    ck_assert_int_eq(ft_budget_demote_pick(r, 2, 2), -1);
    ck_assert_int_eq(ft_budget_demote_pick(r, 0, 2), -1);
}
END_TEST

START_TEST(demote_ties)
{
    /* two 2 MiB units fill both slots; candidates of 1 and 2 MiB both give back all
     * their bytes: the larger room wins */
    ft_budget_unit_t u[4] = { { 2 * MiB, 2 * MiB, 0 }, { 2 * MiB, 2 * MiB, 0 }, { 0, 1 * MiB, 1 },
                              { 0, 2 * MiB, 1 } };
    ck_assert_int_eq(ft_budget_demote_pick(u, 4, 2), 3);
    /* equal in every way: the first */
    u[2].bytes = 2 * MiB;
    ck_assert_int_eq(ft_budget_demote_pick(u, 4, 2), 2);
    /* the most room per byte over the most room: 3 MiB giving back 2 (a slot raised by
     * 1) against 1 MiB giving back 1 */
    ft_budget_unit_t v[4] = { { 2 * MiB, 2 * MiB, 0 }, { 2 * MiB, 2 * MiB, 0 }, { 0, 3 * MiB, 1 },
                              { 0, 1 * MiB, 1 } };
    ck_assert_int_eq(ft_budget_demote_pick(v, 4, 2), 3);
}
END_TEST

/* The pick against its definition (room per byte, then room, then index), with the
 * full slots from a sort. */
START_TEST(demote_random_against_definition)
{
    srand(9);
    for (int trial = 0; trial < 3000; trial++) {
        ft_budget_unit_t u[16];
        int n = 1 + rand() % 16, slots = 1 + rand() % 5;
        for (int i = 0; i < n; i++) {
            uint64_t b = (uint64_t)(1 + rand() % 8) * MiB;
            int streaming = rand() % 2;
            u[i] = (ft_budget_unit_t){ streaming ? b : 0, b, !streaming && rand() % 4 != 0 };
        }
        uint64_t cap = slots_full_sorted(u, n, slots, -1);
        int want = -1;
        uint64_t want_gain = 0;
        for (int i = 0; i < n; i++) {
            if (!u[i].demotable)
                continue;
            uint64_t grow = slots_full_sorted(u, n, slots, i) - cap;
            if (u[i].bytes <= grow)
                continue;
            uint64_t gain = u[i].bytes - grow;
            /* gain / bytes against the best's, exactly */
            unsigned __int128 l = (unsigned __int128)gain * (want < 0 ? 1 : u[want].bytes);
            unsigned __int128 r = (unsigned __int128)want_gain * u[i].bytes;
            if (want < 0 || l > r || (l == r && gain > want_gain)) {
                want = i;
                want_gain = gain;
            }
        }
        int got = ft_budget_demote_pick(u, n, slots);
        ck_assert_int_eq(got, want);
        if (got >= 0)
            ck_assert(u[got].demotable);
    }
}
END_TEST

/* An allocation the budget cannot hold even with every unit streaming is served: the
 * first one is said (1), later ones are not; the most the process went past the
 * budget is kept, with what it held then and the non-weight part of it. */
START_TEST(over_served_said_once_the_most_kept)
{
    ft_budget_over_t o = { 0 };
    /* one that fits is no excess: nothing kept, nothing said */
    ck_assert_int_eq(ft_budget_over(&o, 10 * MiB, 6 * MiB, 16 * MiB, 8 * MiB), 0);
    ck_assert_uint_eq(o.count, 0);
    ck_assert_uint_eq(o.most, 0);
    /* 14 MiB held with the slots full (8 of them weights), 12 more: 10 past 16 */
    ck_assert_int_eq(ft_budget_over(&o, 14 * MiB, 12 * MiB, 16 * MiB, 8 * MiB), 1);
    ck_assert_uint_eq(o.count, 1);
    ck_assert_uint_eq(o.most, 10 * MiB);
    ck_assert_uint_eq(o.need, 26 * MiB);
    ck_assert_uint_eq(o.other, 18 * MiB);
    /* a larger one: the most grows, not said again */
    ck_assert_int_eq(ft_budget_over(&o, 14 * MiB, 24 * MiB, 16 * MiB, 8 * MiB), 0);
    ck_assert_uint_eq(o.count, 2);
    ck_assert_uint_eq(o.most, 22 * MiB);
    ck_assert_uint_eq(o.need, 38 * MiB);
    ck_assert_uint_eq(o.other, 30 * MiB);
    /* a smaller one is counted, the most and what was held then stay */
    ck_assert_int_eq(ft_budget_over(&o, 14 * MiB, 3 * MiB, 16 * MiB, 8 * MiB), 0);
    ck_assert_uint_eq(o.count, 3);
    ck_assert_uint_eq(o.most, 22 * MiB);
    ck_assert_uint_eq(o.need, 38 * MiB);
    /* one byte over */
    ft_budget_over_t p = { 0 };
    ck_assert_int_eq(ft_budget_over(&p, 10 * MiB, 6 * MiB + 1, 16 * MiB, 0), 1);
    ck_assert_uint_eq(p.most, 1);
    ck_assert_uint_eq(p.other, 16 * MiB + 1);
    /* weights above what is held (they are counted full, the slots not yet): no
     * negative non-weight figure */
    ft_budget_over_t q = { 0 };
    ck_assert_int_eq(ft_budget_over(&q, 10 * MiB, 8 * MiB, 16 * MiB, 20 * MiB), 1);
    ck_assert_uint_eq(q.other, 0);
    /* no budget: nothing is ever past it */
    ft_budget_over_t r = { 0 };
    ck_assert_int_eq(ft_budget_over(&r, UINT64_MAX, UINT64_MAX, 0, 0), 0);
    ck_assert_uint_eq(r.count, 0);
    /* a sum past 2^64 does not wrap round into a small excess */
    ft_budget_over_t w = { 0 };
    ck_assert_int_eq(ft_budget_over(&w, UINT64_MAX - MiB, 2 * MiB, 16 * MiB, 0), 1);
    ck_assert_uint_eq(w.most, UINT64_MAX - 16 * MiB);
    ck_assert_uint_eq(w.need, UINT64_MAX);
}
END_TEST

START_TEST(view_shows_the_budget)
{
    size_t free_b = 60 * MiB, total_b = 80 * MiB;
    ck_assert(ft_budget_shown(40 * MiB, total_b));
    ft_budget_view(40 * MiB, 30 * MiB, &free_b, &total_b);
    ck_assert_uint_eq(total_b, 40 * MiB);
    ck_assert_uint_eq(free_b, 10 * MiB);
    /* never more free than the device has */
    free_b = 5 * MiB, total_b = 80 * MiB;
    ft_budget_view(40 * MiB, 30 * MiB, &free_b, &total_b);
    ck_assert_uint_eq(free_b, 5 * MiB);
    ck_assert_uint_eq(total_b, 40 * MiB);
    /* over the budget: nothing free */
    free_b = 60 * MiB, total_b = 80 * MiB;
    ft_budget_view(40 * MiB, 41 * MiB, &free_b, &total_b);
    ck_assert_uint_eq(free_b, 0);
    /* no budget, or one the device is below: the device's answer */
    free_b = 60 * MiB, total_b = 80 * MiB;
    ck_assert(!ft_budget_shown(0, total_b));
    ck_assert(!ft_budget_shown(80 * MiB, total_b));
    ft_budget_view(0, 30 * MiB, &free_b, &total_b);
    ft_budget_view(80 * MiB, 30 * MiB, &free_b, &total_b);
    ft_budget_view(90 * MiB, 30 * MiB, &free_b, &total_b);
    ck_assert_uint_eq(free_b, 60 * MiB);
    ck_assert_uint_eq(total_b, 80 * MiB);
}
END_TEST

Suite *budget_suite(void)
{
    Suite *s = suite_create("budget");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, configured_the_smaller_of_limit_and_fraction);
    tcase_add_test(tc, capped_to_what_the_process_can_have);
    tcase_add_test(tc, fits_edges);
    tcase_add_test(tc, slots_full_by_the_largest_units);
    tcase_add_test(tc, slots_full_random_against_a_sort);
    tcase_add_test(tc, committed_counts_the_slots_full);
    tcase_add_test(tc, demote_a_layer_before_the_head);
    tcase_add_test(tc, demote_never_a_unit_that_gives_back_nothing);
    tcase_add_test(tc, demote_ties);
    tcase_add_test(tc, demote_random_against_definition);
    tcase_add_test(tc, over_served_said_once_the_most_kept);
    tcase_add_test(tc, view_shows_the_budget);
    suite_add_tcase(s, tc);
    return s;
}

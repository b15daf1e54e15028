/* check_spill.c - FT_SPILL's choice of the allocation that leaves the device
 * (core/spill.c), called directly: the least recently touched one on the device goes
 * first, never one the asking call touched, never one already in host memory; ties go
 * to the one seen first; the order of a run of moves out. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/spill.h"

START_TEST(victim_least_recently_touched)
{
    ft_spill_alloc_t a[4] = { { 5, 0 }, { 2, 0 }, { 9, 0 }, { 3, 0 } };
    ck_assert_int_eq(ft_spill_victim(a, 4, UINT64_MAX), 1);
    /* already in host memory: not again */
    a[1].spilled = 1;
    ck_assert_int_eq(ft_spill_victim(a, 4, UINT64_MAX), 3);
    /* the asking call's own allocations (stamped 3) stay: it is about to use them */
    ck_assert_int_eq(ft_spill_victim(a, 4, 3), 0);
    /* a tie: the one seen first */
    a[2].stamp = 5;
    ck_assert_int_eq(ft_spill_victim(a, 4, 3), 0);
    a[0].spilled = a[2].spilled = 1;
    ck_assert_int_eq(ft_spill_victim(a, 4, 3), -1);
    ck_assert_int_eq(ft_spill_victim(a, 0, 3), -1);
}
END_TEST

START_TEST(prefer_as_a_walk_sees_it)
{
    ft_spill_alloc_t x = { 4, 0 }, best = { 6, 0 };
    ck_assert(ft_spill_prefer(&x, NULL, 9));
    ck_assert(ft_spill_prefer(&x, &best, 9));
    ck_assert(!ft_spill_prefer(&best, &x, 9));
    ck_assert(!ft_spill_prefer(&x, &x, 9)); /* not before an equal one */
    ck_assert(!ft_spill_prefer(&x, NULL, 4));
    x.spilled = 1;
    ck_assert(!ft_spill_prefer(&x, NULL, 9));
}
END_TEST

/* Moves out until none is left, as spill_make_room runs them: in order of their last
 * touch, the call's own last or never. */
START_TEST(moves_out_in_touch_order)
{
    ft_spill_alloc_t a[6] = { { 8, 0 }, { 3, 0 }, { 12, 0 }, { 3, 0 }, { 12, 1 }, { 1, 0 } };
    long order[6], n = 0, v;
    while ((v = ft_spill_victim(a, 6, 12)) >= 0) {
        order[n++] = v;
        a[v].spilled = 1;
    }
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(order[0], 5);
    ck_assert_int_eq(order[1], 1);
    ck_assert_int_eq(order[2], 3);
    ck_assert_int_eq(order[3], 0);
    ck_assert(!a[2].spilled); /* the call's own */
}
END_TEST

Suite *spill_suite(void)
{
    Suite *s = suite_create("spill");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, victim_least_recently_touched);
    tcase_add_test(tc, prefer_as_a_walk_sees_it);
    tcase_add_test(tc, moves_out_in_touch_order);
    suite_add_tcase(s, tc);
    return s;
}

/* check_control.c - the runtime control API's decisions (core/control.c), called
 * directly: what a pass boundary does with the requests waiting (nothing during a
 * capture or while released, a re-profile before a limit, a limit joining a re-profile
 * under way), release and resume (twice, out of order, a limit set while released, a
 * re-profile given up and started again), and the units that move between two plans
 * (against the definition, on random plans). */
#include <check.h>
#include <stdlib.h>

#include "core/control.h"

#define MiB (1ull << 20)

START_TEST(boundary_with_nothing_waiting_does_nothing)
{
    ft_ctl_t c = { 0 };
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_NONE);
    ck_assert_int_eq(ft_ctl_boundary(&c, 1), FT_CTL_NONE);
}
END_TEST

START_TEST(limit_applied_once_at_the_next_boundary)
{
    ft_ctl_t c = { 0 };
    ft_ctl_limit(&c, 16 * MiB);
    ft_ctl_limit(&c, 24 * MiB); /* the later one replaces it */
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_APPLY);
    ck_assert_uint_eq(c.limit, 24 * MiB);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_NONE);
}
END_TEST

START_TEST(capture_postpones_everything)
{
    ft_ctl_t c = { 0 };
    ft_ctl_limit(&c, 16 * MiB);
    ck_assert_int_eq(ft_ctl_replan(&c), 0);
    ck_assert_int_eq(ft_ctl_boundary(&c, 1), FT_CTL_NONE);
    ck_assert(c.limit_waiting && c.replan_waiting && !c.profiling);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_START);
    /* during the re-profile's passes too */
    ck_assert_int_eq(ft_ctl_boundary(&c, 1), FT_CTL_NONE);
    ck_assert(c.profiling);
}
END_TEST

START_TEST(replan_before_the_limit_and_the_limit_joins_it)
{
    ft_ctl_t c = { 0 };
    ft_ctl_limit(&c, 16 * MiB);
    ck_assert_int_eq(ft_ctl_replan(&c), 0);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_START);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_PASS);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_PASS);
    /* a second request while one is under way joins it */
    ck_assert_int_eq(ft_ctl_replan(&c), 1);
    ck_assert_int_eq(ft_ctl_profiled(&c), 1); /* the limit is planned for with the new times */
    ck_assert(!c.limit_waiting && !c.profiling && !c.replan_waiting);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_NONE);
    /* without a limit waiting */
    ck_assert_int_eq(ft_ctl_replan(&c), 0);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_START);
    ck_assert_int_eq(ft_ctl_profiled(&c), 0);
}
END_TEST

START_TEST(release_and_resume_pair)
{
    ft_ctl_t c = { 0 };
    ck_assert_int_eq(ft_ctl_resume(&c), -1); /* nothing released */
    ck_assert_int_eq(ft_ctl_release(&c), 0);
    ck_assert_int_eq(ft_ctl_release(&c), -1); /* twice */
    ck_assert_int_eq(ft_ctl_resume(&c), 0);   /* the plan before the release */
    ck_assert_int_eq(ft_ctl_resume(&c), -1);
    ck_assert_int_eq(ft_ctl_release(&c), 0);  /* and again */
    ck_assert_int_eq(ft_ctl_resume(&c), 0);
}
END_TEST

START_TEST(released_requests_wait_for_the_resume)
{
    ft_ctl_t c = { 0 };
    ck_assert_int_eq(ft_ctl_release(&c), 0);
    ft_ctl_limit(&c, 16 * MiB);
    ck_assert_int_eq(ft_ctl_replan(&c), 0);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_NONE);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_NONE);
    ck_assert_int_eq(ft_ctl_resume(&c), 1); /* the resume plans for the limit */
    ck_assert(!c.limit_waiting);
    ck_assert_uint_eq(c.limit, 16 * MiB);
    /* and the re-profile starts at the boundary after it */
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_START);
}
END_TEST

START_TEST(release_gives_up_a_reprofile_and_starts_it_again)
{
    ft_ctl_t c = { 0 };
    ft_ctl_replan(&c);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_START);
    ck_assert_int_eq(ft_ctl_release(&c), 0);
    ck_assert(!c.profiling && c.replan_waiting);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_NONE);
    ck_assert_int_eq(ft_ctl_resume(&c), 0);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_START);
    ck_assert_int_eq(ft_ctl_boundary(&c, 0), FT_CTL_PROFILE_PASS);
}
END_TEST

START_TEST(moves_between_two_plans)
{
    int was[6] = { 1, 1, 0, 0, 1, 0 };
    int now[6] = { 1, 0, 1, 0, 0, 1 };
    int d[6], p[6], nd = -1, np = -1;
    ft_ctl_moves(was, now, 6, d, &nd, p, &np);
    ck_assert_int_eq(nd, 2);
    ck_assert_int_eq(d[0], 1);
    ck_assert_int_eq(d[1], 4);
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(p[0], 2);
    ck_assert_int_eq(p[1], 5);
    /* the same plan: nothing moves */
    ft_ctl_moves(was, was, 6, d, &nd, p, &np);
    ck_assert_int_eq(nd + np, 0);
    ft_ctl_moves(was, now, 0, d, &nd, p, &np);
    ck_assert_int_eq(nd + np, 0);
}
END_TEST

START_TEST(moves_random_against_definition)
{
    srand(11);
    for (int round = 0; round < 500; round++) {
        int n = rand() % 40, was[40], now[40], d[40], p[40], nd, np;
        for (int i = 0; i < n; i++) {
            was[i] = rand() % 2;
            now[i] = rand() % 3 == 0 ? was[i] * 7 : rand() % 2; /* any non-zero is true */
        }
        ft_ctl_moves(was, now, n, d, &nd, p, &np);
        int kd = 0, kp = 0;
        for (int i = 0; i < n; i++) {
            if (was[i] && !now[i]) {
                ck_assert_int_lt(kd, nd);
                ck_assert_int_eq(d[kd++], i);
            } else if (!was[i] && now[i]) {
                ck_assert_int_lt(kp, np);
                ck_assert_int_eq(p[kp++], i);
            }
        }
        ck_assert_int_eq(kd, nd);
        ck_assert_int_eq(kp, np);
    }
}
END_TEST

Suite *control_suite(void)
{
    Suite *s = suite_create("control");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, boundary_with_nothing_waiting_does_nothing);
    tcase_add_test(tc, limit_applied_once_at_the_next_boundary);
    tcase_add_test(tc, capture_postpones_everything);
    tcase_add_test(tc, replan_before_the_limit_and_the_limit_joins_it);
    tcase_add_test(tc, release_and_resume_pair);
    tcase_add_test(tc, released_requests_wait_for_the_resume);
    tcase_add_test(tc, release_gives_up_a_reprofile_and_starts_it_again);
    tcase_add_test(tc, moves_between_two_plans);
    tcase_add_test(tc, moves_random_against_definition);
    suite_add_tcase(s, tc);
    return s;
}

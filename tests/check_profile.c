/* check_profile.c - profiling bookkeeping: statistics, suspension (reference counted,
 * passes under way discarded by the caller through the epoch), the quality report. */
#include <check.h>
#include <string.h>

#include "core/profile.h"

START_TEST(stats_over_passes)
{
    ft_prof_t *p = ft_prof_new(2, 3);
    double a[] = { 10, 100 }, b[] = { 14, 100 }, c[] = { 11, 100 };
    ck_assert_int_eq(ft_prof_add_pass(p, a), 1);
    ck_assert(!ft_prof_done(p));
    ft_prof_add_pass(p, b);
    ck_assert_int_eq(ft_prof_add_pass(p, c), 3);
    ck_assert(ft_prof_done(p));
    ck_assert_int_eq(ft_prof_add_pass(p, a), 3); /* beyond the passes wanted: ignored */
    ft_prof_stat_t s = ft_prof_stat(p, 0);
    ck_assert_int_eq(s.n, 3);
    ck_assert_double_eq(s.min, 10);
    ck_assert_double_eq(s.median, 11);
    ck_assert_double_eq(s.max, 14);
    ck_assert_double_eq(ft_prof_stat(p, 1).median, 100);
    ft_prof_free(p);
}
END_TEST

START_TEST(suspension_is_reference_counted)
{
    ft_prof_t *p = ft_prof_new(1, 5);
    double a[] = { 1 };
    unsigned e0 = ft_prof_epoch(p);
    ft_prof_suspend(p);
    ft_prof_suspend(p);
    ck_assert_uint_ne(ft_prof_epoch(p), e0);
    ck_assert_int_eq(ft_prof_add_pass(p, a), 0);
    ck_assert_int_eq(ft_prof_resume(p), 0);
    ck_assert(ft_prof_suspended(p));
    ck_assert_int_eq(ft_prof_add_pass(p, a), 0); /* one suspension still outstanding */
    ck_assert_int_eq(ft_prof_resume(p), 0);
    ck_assert(!ft_prof_suspended(p));
    ck_assert_int_eq(ft_prof_resume(p), -1);     /* unbalanced */
    ck_assert_int_eq(ft_prof_add_pass(p, a), 1);
    ft_prof_free(p);
}
END_TEST

START_TEST(quality_report)
{
    const char *names[] = { "unit.0", "unit.1", "unit.2" };
    ft_prof_t *p = ft_prof_new(3, 1);
    double a[] = { 5, 0, 7 };
    ft_prof_add_pass(p, a);
    char buf[1024];
    ck_assert_int_eq(ft_prof_quality(p, names, 0.2, buf, sizeof buf), 2);
    ck_assert_ptr_nonnull(strstr(buf, "only 1 profiled pass"));
    ck_assert_ptr_nonnull(strstr(buf, "unit.1: no time measured"));
    ft_prof_free(p);

    p = ft_prof_new(2, 3);
    double x[] = { 10, 5 }, y[] = { 15, 5 }, z[] = { 10, 5 };
    ft_prof_add_pass(p, x);
    ft_prof_add_pass(p, y);
    ft_prof_add_pass(p, z);
    ck_assert_int_eq(ft_prof_quality(p, names, 0.2, buf, sizeof buf), 1);
    ck_assert_ptr_nonnull(strstr(buf, "unit.0: spread 50% (min 10.0 us, median 10.0 us, max 15.0 us)"));
    ck_assert_int_eq(ft_prof_quality(p, names, 0.6, buf, sizeof buf), 0);
    ft_prof_free(p);
}
END_TEST

START_TEST(zero_passes_wanted_means_one)
{
    ft_prof_t *p = ft_prof_new(1, 0);
    double a[] = { 3 };
    ck_assert(!ft_prof_done(p));
    ft_prof_add_pass(p, a);
    ck_assert(ft_prof_done(p));
    ft_prof_free(p);
}
END_TEST

/* The timed lane goes quiet when one other lane began three passes during its pass,
 * not when several others did between them: three threads' forwards start two other
 * passes per forward of the timed one. */
START_TEST(quiet_lane_counted_per_lane)
{
    ft_prof_quiet_t q = {0};
    for (int round = 0; round < 2; round++)
        for (uint64_t lane = 2; lane <= 4; lane++)
            ck_assert_int_eq(ft_prof_quiet_start(&q, lane), 0);
    ck_assert_int_eq(ft_prof_quiet_start(&q, 3), 1);
    ft_prof_quiet_reset(&q);
    ck_assert_int_eq(ft_prof_quiet_start(&q, 3), 0);
    ck_assert_int_eq(ft_prof_quiet_start(&q, 3), 0);
    ck_assert_int_eq(ft_prof_quiet_start(&q, 3), 1);
    /* A full table: a lane past it is never counted, so never takes over. */
    ft_prof_quiet_reset(&q);
    for (uint64_t lane = 10; lane < 10 + FT_PROF_QUIET_LANES; lane++)
        ck_assert_int_eq(ft_prof_quiet_start(&q, lane), 0);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ft_prof_quiet_start(&q, 99), 0);
}
END_TEST

Suite *profile_suite(void)
{
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("bookkeeping");
    tcase_add_test(tc, stats_over_passes);
    tcase_add_test(tc, suspension_is_reference_counted);
    tcase_add_test(tc, quality_report);
    tcase_add_test(tc, zero_passes_wanted_means_one);
    tcase_add_test(tc, quiet_lane_counted_per_lane);
    suite_add_tcase(s, tc);
    return s;
}

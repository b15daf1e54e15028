/* check_regions.c - the region table: lookups from any interior address, overlaps
 * refused, removal, ids never reused, and agreement with a brute-force model. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "core/regions.h"

START_TEST(find_interior_and_edges)
{
    ft_regions_t *t = ft_regions_new();
    ck_assert_int_eq(ft_regions_insert(t, 0x1000, 0x100, 0, 0), 1);
    ck_assert_int_eq(ft_regions_insert(t, 0x3000, 0x1000, FT_REGION_VMM, 7), 2);
    ft_region_t r;
    ck_assert_int_eq(ft_regions_find(t, 0x1000, &r), 1);
    ck_assert_uint_eq(r.id, 1);
    ck_assert_int_eq(ft_regions_find(t, 0x10ff, &r), 1);
    ck_assert_int_eq(ft_regions_find(t, 0x1100, &r), 0); /* one past the end */
    ck_assert_int_eq(ft_regions_find(t, 0xfff, &r), 0);
    ck_assert_int_eq(ft_regions_find(t, 0x3800, &r), 1);
    ck_assert_uint_eq(r.id, 2);
    ck_assert_uint_eq(r.flags, FT_REGION_VMM);
    ck_assert_uint_eq(r.birth, 7);
    ck_assert_int_eq(ft_regions_find(t, 0x2000, &r), 0); /* the gap */
    ck_assert_uint_eq(ft_regions_bytes(t), 0x1100);
    ft_regions_free(t);
}
END_TEST

START_TEST(overlap_refused_and_ids_not_reused)
{
    ft_regions_t *t = ft_regions_new();
    ck_assert_int_eq(ft_regions_insert(t, 0x1000, 0x100, 0, 0), 1);
    ck_assert_int_eq(ft_regions_insert(t, 0x10ff, 0x10, 0, 0), -EEXIST);
    ck_assert_int_eq(ft_regions_insert(t, 0xf00, 0x101, 0, 0), -EEXIST);
    ck_assert_int_eq(ft_regions_insert(t, 0xf00, 0x100, 0, 0), 2); /* adjacent is fine */
    ck_assert_int_eq(ft_regions_insert(t, 0x5000, 0, 0, 0), -EINVAL);
    ft_region_t r;
    ck_assert_int_eq(ft_regions_remove(t, 0x1010, &r), -ENOENT); /* not a base */
    ck_assert_int_eq(ft_regions_remove(t, 0x1000, &r), 0);
    ck_assert_uint_eq(r.id, 1);
    ck_assert_int_eq(ft_regions_find(t, 0x1010, NULL), 0);
    ck_assert_int_eq(ft_regions_insert(t, 0x1000, 0x100, 0, 0), 3);
    ck_assert_uint_eq(ft_regions_count(t), 2);
    ft_regions_free(t);
}
END_TEST

START_TEST(random_against_model)
{
    enum { SLOTS = 512, SLOT = 4096 };
    static uint32_t model[SLOTS]; /* id of the region in each slot-sized cell, 0 = free */
    uint64_t base0 = 0x7f0000000000ull;
    ft_regions_t *t = ft_regions_new();
    srand(12345);
    for (int step = 0; step < 20000; step++) {
        int s = rand() % SLOTS;
        if (model[s] == 0) {
            int len = 1 + rand() % 4;
            if (s + len > SLOTS)
                len = SLOTS - s;
            int free_run = 1;
            for (int k = 0; k < len; k++)
                free_run &= model[s + k] == 0;
            int64_t id = ft_regions_insert(t, base0 + (uint64_t)s * SLOT, (uint64_t)len * SLOT, 0, 0);
            if (free_run) {
                ck_assert_int_gt(id, 0);
                for (int k = 0; k < len; k++)
                    model[s + k] = (uint32_t)id;
            } else {
                ck_assert_int_eq(id, -EEXIST);
            }
        } else if (s == 0 || model[s - 1] != model[s]) {
            uint32_t id = model[s];
            ck_assert_int_eq(ft_regions_remove(t, base0 + (uint64_t)s * SLOT, NULL), 0);
            for (int k = s; k < SLOTS && model[k] == id; k++)
                model[k] = 0;
        }
        uint64_t probe = base0 + (uint64_t)(rand() % (SLOTS * SLOT + 2 * SLOT)) - SLOT;
        ft_region_t r;
        int found = ft_regions_find(t, probe, &r);
        int64_t cell = ((int64_t)probe - (int64_t)base0) / SLOT;
        uint32_t want = (probe >= base0 && cell < SLOTS) ? model[cell] : 0;
        ck_assert_int_eq(found, want != 0);
        if (found)
            ck_assert_uint_eq(r.id, want);
    }
    ft_regions_free(t);
}
END_TEST

Suite *regions_suite(void)
{
    Suite *s = suite_create("regions");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, find_interior_and_edges);
    tcase_add_test(tc, overlap_refused_and_ids_not_reused);
    tcase_add_test(tc, random_against_model);
    suite_add_tcase(s, tc);
    return s;
}

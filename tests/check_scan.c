/* check_scan.c - core/scan.c's set of region ids (the garbage words are
 * check_discovery.c's). A launch can reach more regions than the set holds in itself,
 * 64: a cat's inputs passed by value, a grouped GEMM's pointer array read one level
 * down. Every one is kept, in first-seen order, with its flags; only when the heap
 * cannot grow is one lost, and then it is counted (`dropped`), for the users to load
 * everything. The unit runner is linked with -Wl,--wrap=malloc (tests/tests.mk) so
 * that the heap can be made to fail here. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/scan.h"

#define MIB (1ull << 20)
#define N_REGIONS 200

/* --- a heap that fails on demand ------------------------------------------------------ */

void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);

/* While set, every malloc of the unit runner fails. No ck_assert runs meanwhile (a
 * passing one may allocate to report its place). */
static int malloc_fails;

void *__wrap_malloc(size_t size)
{
    return malloc_fails ? NULL : __real_malloc(size);
}

/* --- fixture: N_REGIONS regions of 1 MiB, 2 MiB apart -------------------------------- */

static ft_regions_t *regions;
static uint64_t base[N_REGIONS];
static uint32_t id[N_REGIONS];

static void setup(void)
{
    regions = ft_regions_new();
    ck_assert_ptr_nonnull(regions);
    for (int i = 0; i < N_REGIONS; i++) {
        base[i] = 0x7f0000000000ull + (uint64_t)i * 2 * MIB;
        int64_t r = ft_regions_insert(regions, base[i], MIB, 0, 0);
        ck_assert_int_gt(r, 0);
        id[i] = (uint32_t)r;
    }
}

static void teardown(void)
{
    malloc_fails = 0;
    ft_regions_free(regions);
}

/* A cat's metadata passed by value: a count, then n input pointers (each at a
 * 256-byte aligned offset into its region, as an allocator hands them out), at
 * argument words 1..n. */
static void cat_args(uint64_t *args, int n, int first)
{
    args[0] = (uint64_t)n;
    for (int i = 0; i < n; i++)
        args[1 + i] = base[first + i] + 256 * (uint64_t)(i % 7);
}

/* 150 inputs by value, then the same again, then a pointer array of 50 more: every
 * region kept, in order, with its pointer and flags; the set grows twice (64 -> 128 ->
 * 256) and frees what it took. */
START_TEST(a_launch_reaching_many_regions_keeps_every_one)
{
    static uint64_t args[1 + 150];
    cat_args(args, 150, 0);
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    ck_assert_uint_eq(ft_scan_bytes(regions, args, sizeof args, &set), 150);
    ck_assert_uint_eq(set.n, 150);
    ck_assert_uint_eq(set.dropped, 0);
    for (int i = 0; i < 150; i++) {
        ck_assert_uint_eq(set.id[i], id[i]);
        ck_assert_uint_eq(set.ptr[i], args[1 + i]);
        ck_assert(!set.indirect[i] && !set.unsure[i]);
    }
    /* The same launch again: nothing new, nothing lost; every region reached at the
     * same pointer, its lowest. */
    ck_assert_uint_eq(ft_scan_bytes(regions, args, sizeof args, &set), 0);
    ck_assert_uint_eq(set.n, 150);
    for (int i = 0; i < 150; i++)
        ck_assert_uint_eq(set.lo[i], args[1 + i]);
    /* Region 6 at other pointers as well (a kernel reading what lies past a weight in
     * the same allocation and writing its start): its first pointer kept, the lowest
     * followed. */
    ck_assert_int_eq(ft_scan_set_add(&set, id[6], args[1 + 6] + 4096), 0);
    ck_assert_uint_eq(set.lo[6], args[1 + 6]);
    ck_assert_int_eq(ft_scan_set_add(&set, id[6], args[1 + 6] + 8), 0);
    ck_assert_uint_eq(set.lo[6], args[1 + 6]);
    ck_assert_int_eq(ft_scan_set_add(&set, id[8], base[8]), 0); /* args: base[8] + 256 */
    ck_assert_uint_eq(set.lo[8], base[8]);
    ck_assert_uint_eq(set.ptr[6], args[1 + 6]);
    ck_assert_uint_eq(set.ptr[8], args[1 + 8]);

    /* One level down: a table of 50 more (a grouped GEMM's), read from device data. */
    uint64_t table[50];
    for (int i = 0; i < 50; i++)
        table[i] = base[150 + i];
    ck_assert_uint_eq(ft_scan_indirect(regions, table, sizeof table, &set), 50);
    ck_assert_uint_eq(set.n, 200);
    ck_assert_uint_eq(set.dropped, 0);
    for (int i = 150; i < 200; i++) {
        ck_assert_uint_eq(set.id[i], id[i]);
        ck_assert(set.indirect[i]);
    }

    /* Unsure ids dropped past the inline room: the others keep their order and flags. */
    for (size_t i = 0; i < set.n; i++)
        set.unsure[i] = (uint8_t)(i % 3 == 1);
    ft_scan_set_drop_unsure(&set);
    size_t k = 0;
    for (int i = 0; i < 200; i++) {
        if (i % 3 == 1)
            continue;
        ck_assert_uint_eq(set.id[k], id[i]);
        ck_assert_int_eq(set.indirect[k], i >= 150);
        ck_assert_uint_eq(set.lo[k], i < 150 && i != 8 ? args[1 + i] : base[i]); /* past the grows too */
        k++;
    }
    ck_assert_uint_eq(set.n, k);

    ft_scan_set_free(&set);
    ck_assert_uint_eq(set.n, 0);
    ck_assert_ptr_null(set.heap);
    ck_assert_ptr_eq(set.id, set.id_in);
}
END_TEST

/* The common launch, 64 regions or fewer, stays in the set itself: no allocation. */
START_TEST(a_launch_within_the_inline_room_allocates_nothing)
{
    static uint64_t args[1 + FT_SCAN_INLINE_IDS];
    cat_args(args, FT_SCAN_INLINE_IDS, 0);
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    malloc_fails = 1;
    size_t added = ft_scan_bytes(regions, args, sizeof args, &set);
    malloc_fails = 0;
    ck_assert_uint_eq(added, FT_SCAN_INLINE_IDS);
    ck_assert_uint_eq(set.n, FT_SCAN_INLINE_IDS);
    ck_assert_uint_eq(set.dropped, 0);
    ck_assert_ptr_null(set.heap);
    ft_scan_set_free(&set);
}
END_TEST

/* Out of memory, the set keeps what it holds and counts every region it could not
 * keep, direct or one level down: the users then load everything. */
START_TEST(a_set_that_cannot_grow_counts_what_it_loses)
{
    static uint64_t args[1 + 100];
    cat_args(args, 100, 0);
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    uint64_t table[10];
    for (int i = 0; i < 10; i++)
        table[i] = base[100 + i];
    malloc_fails = 1;
    size_t direct = ft_scan_bytes(regions, args, sizeof args, &set), n_direct = set.n, lost = set.dropped;
    size_t indirect = ft_scan_indirect(regions, table, sizeof table, &set);
    malloc_fails = 0;
    ck_assert_uint_eq(direct, FT_SCAN_INLINE_IDS);
    ck_assert_uint_eq(n_direct, FT_SCAN_INLINE_IDS);
    ck_assert_uint_eq(lost, 100 - FT_SCAN_INLINE_IDS);
    for (int i = 0; i < FT_SCAN_INLINE_IDS; i++)
        ck_assert_uint_eq(set.id[i], id[i]);
    ck_assert_uint_eq(indirect, 0);
    ck_assert_uint_eq(set.n, FT_SCAN_INLINE_IDS);
    ck_assert_uint_eq(set.dropped, 100 - FT_SCAN_INLINE_IDS + 10);
    /* Once memory is back, the next region grows the set. */
    ck_assert_uint_eq(ft_scan_indirect(regions, table, 8, &set), 1);
    ck_assert_uint_eq(set.n, FT_SCAN_INLINE_IDS + 1);
    ck_assert_ptr_nonnull(set.heap);
    ft_scan_set_free(&set);
    ck_assert_uint_eq(set.dropped, 0);
}
END_TEST

Suite *scan_suite(void)
{
    Suite *s = suite_create("scan");
    TCase *tc = tcase_create("set");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, a_launch_reaching_many_regions_keeps_every_one);
    tcase_add_test(tc, a_launch_within_the_inline_room_allocates_nothing);
    tcase_add_test(tc, a_set_that_cannot_grow_counts_what_it_loses);
    suite_add_tcase(s, tc);
    return s;
}

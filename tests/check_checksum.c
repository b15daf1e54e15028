/* check_checksum.c - core/checksum.c: the host sum cut into parts summed by threads
 * gives ft_checksum_host's value, whatever the number of parts and a length that does
 * not divide evenly; a changed word changes it; many buffers summed at once give each
 * its own sum. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/checksum.h"

/* words of a pattern: word i is i * mul ^ (i >> shift). */
static uint64_t *patterned(uint64_t words, uint64_t mul, int shift)
{
    uint64_t *buf = malloc(words * 8);
    ck_assert_ptr_nonnull(buf);
    for (uint64_t i = 0; i < words; i++)
        buf[i] = i * mul ^ (i >> shift);
    return buf;
}

START_TEST(parallel_equals_serial)
{
    /* 200 MiB and 3 words: four parts, the last 3 words */
    uint64_t words = (200ull << 20) / 8 + 3;
    uint64_t *buf = patterned(words, 0x2545f4914f6cdd1dull, 7);
    uint64_t salt = 0x7f0000000000ull / 8;
    uint64_t serial = ft_checksum_host(buf, words, salt);
    ck_assert_uint_eq(ft_checksum_host_parallel(buf, words, salt), serial);
    ck_assert_uint_eq(ft_checksum_host_parallel(buf, 1000, salt), ft_checksum_host(buf, 1000, salt));
    buf[words - 2] ^= 1;
    ck_assert_uint_ne(ft_checksum_host_parallel(buf, words, salt), serial);
    free(buf);
}
END_TEST

/* The host sum, four words a turn with the index's product carried by additions, is
 * the reference's: the plain sum of per-word mixes, for lengths that leave 0 to 3
 * words after the turns, at a salt whose product wraps. */
START_TEST(host_equals_reference)
{
    uint64_t buf[1031];
    for (uint64_t i = 0; i < 1031; i++)
        buf[i] = i * 0xd1b54a32d192ed03ull + 17;
    for (uint64_t n = 0; n <= 1031; n += n < 12 ? 1 : 97) {
        uint64_t salt = 0xfffffffffffffff0ull + n, ref = 0;
        for (uint64_t i = 0; i < n; i++)
            ref += ft_checksum_mix(buf[i], salt + i);
        ck_assert_uint_eq(ft_checksum_host(buf, n, salt), ref);
    }
}
END_TEST

/* Several buffers at once: the empty one, one shorter than a part, one over two parts
 * (the parts of many buffers shared among threads), each with its own salt. */
START_TEST(many_equals_serial)
{
    uint64_t words = (150ull << 20) / 8 + 5;
    uint64_t *buf = patterned(words, 0x9e3779b97f4a7c15ull, 3);
    ft_checksum_buf_t b[4] = {
        { buf, 0, 5 },
        { buf + 7, 1001, 7 },
        { buf, words, 0x7f0000000000ull / 8 },
        { buf + 3, (70ull << 20) / 8, 3 },
    };
    uint64_t sums[4];
    ck_assert_int_eq(ft_checksum_host_many(b, 4, sums), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(sums[i], ft_checksum_host(b[i].p, b[i].words, b[i].salt));
    ck_assert_uint_eq(sums[0], 0);
    buf[words - 1] ^= 4;
    uint64_t again[4];
    ck_assert_int_eq(ft_checksum_host_many(b, 4, again), 0);
    ck_assert_uint_ne(again[2], sums[2]);
    ck_assert_uint_eq(again[3], sums[3]);
    free(buf);
}
END_TEST

Suite *checksum_suite(void)
{
    Suite *s = suite_create("checksum");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, host_equals_reference);
    tcase_add_test(tc, parallel_equals_serial);
    tcase_add_test(tc, many_equals_serial);
    suite_add_tcase(s, tc);
    return s;
}

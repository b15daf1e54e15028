/* check_checksum.c - core/checksum.c: the host sum cut into parts summed by threads
 * gives ft_checksum_host's value, whatever the number of parts and a length that does
 * not divide evenly; a changed word changes it. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/checksum.h"

START_TEST(parallel_equals_serial)
{
    /* 200 MiB and 3 words: three parts, the last one longer */
    uint64_t words = (200ull << 20) / 8 + 3;
    uint64_t *buf = malloc(words * 8);
    ck_assert_ptr_nonnull(buf);
    for (uint64_t i = 0; i < words; i++)
        buf[i] = i * 0x2545f4914f6cdd1dull ^ (i >> 7);
    uint64_t salt = 0x7f0000000000ull / 8;
    uint64_t serial = ft_checksum_host(buf, words, salt);
    ck_assert_uint_eq(ft_checksum_host_parallel(buf, words, salt), serial);
    ck_assert_uint_eq(ft_checksum_host_parallel(buf, 1000, salt), ft_checksum_host(buf, 1000, salt));
    buf[words - 2] ^= 1;
    ck_assert_uint_ne(ft_checksum_host_parallel(buf, words, salt), serial);
    free(buf);
}
END_TEST

Suite *checksum_suite(void)
{
    Suite *s = suite_create("checksum");
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, parallel_equals_serial);
    suite_add_tcase(s, tc);
    return s;
}

/* check_size.c - size_suite: the byte-size grammar (core/size.h) that config/'s size
 * options and discovery's "size:" patterns share: what it accepts and as how many
 * bytes, what it refuses and with which code, and that a printed size parses back. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "core/size.h"

START_TEST(accepted)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } good[] = {
        {"123B", 123},
        {"123 b", 123},
        {"0", 0},
        {"0.0", 0},
        {"0GiB", 0},
        {"1048576", 1ull << 20},
        {"8GiB", 8ull << 30},
        {"512MiB", 512ull << 20},
        {"1.5GiB", 3ull << 29},
        {"4G", 4ull << 30},
        {"4g", 4ull << 30},
        {" 4 GiB ", 4ull << 30},
        {"\t16MiB\n", 16ull << 20},
        {"1K", 1024},
        {"2kib", 2048},
        {"1T", 1ull << 40},
        {"3MB", 3000000},
        {"8GB", 8000000000ull},
        {"1KB", 1000},
        {"64B", 64},
        {"2TiB", 2ull << 40},
        {"1TB", 1000000000000ull},
        {"1tb", 1000000000000ull},
        {"1Mb", 1000000},
        {"5kB", 5000},
        {"3 mIb", 3ull << 20},
        {".5M", 1ull << 19},
        {"0.1KiB", 102},
        {"1.999999999999999999999G", (2ull << 30) - 1},
        {"18446744073709551615", UINT64_MAX},
        {"16777215.5TiB", UINT64_MAX - (1ull << 39) + 1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 1;
        ck_assert_msg(ft_size_parse(good[i].text, &v) == 0, "'%s' rejected", good[i].text);
        ck_assert_msg(v == good[i].bytes, "'%s' = %llu", good[i].text, (unsigned long long)v);
    }
}
END_TEST

/* Not sizes at all: *out is left alone. strtod's extras (an exponent, hex, a sign,
 * "inf") are not part of the grammar, nor are units other than size.h's. */
START_TEST(invalid)
{
    static const char *const bad[] = {"",       "abc",   "-1",   "+1",     "1.5",  "8XB",
                                      "G",      "1.5.5G", "4 G B", "18446744073709551616",
                                      "20000000T", "1e9", "0x10", "8 GiBs", "inf", "1Ki",
                                      "1BiB",  "16MiB,", "1 2G", ".", ".K",  "1iB",
                                      "1KiBB", "1KI",  "1bb",  "1P",    "1PiB", NULL};
    for (size_t i = 0; bad[i]; i++) {
        uint64_t v = 7;
        ck_assert_msg(ft_size_parse(bad[i], &v) == FT_SIZE_INVALID, "'%s' accepted", bad[i]);
        ck_assert_uint_eq(v, 7);
    }
    ck_assert_int_eq(ft_size_parse(NULL, NULL), FT_SIZE_INVALID);
}
END_TEST

/* A plain number below 1 MiB is a unit left out; a non-zero value below a byte is not a
 * way to write 0. Each has its own code (config/ words its message on it), and neither
 * touches *out. */
START_TEST(refused_with_a_reason)
{
    static const struct {
        const char *text;
        int rc;
    } refused[] = {
        {"8192", FT_SIZE_NEEDS_UNIT},    {"1", FT_SIZE_NEEDS_UNIT},
        {" 123 ", FT_SIZE_NEEDS_UNIT},   {"1048575", FT_SIZE_NEEDS_UNIT},
        {"0.0001k", FT_SIZE_BELOW_BYTE}, {"0.5KB", 0},
        {"0.0000000000000000000001T", FT_SIZE_BELOW_BYTE},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        uint64_t v = 7;
        int rc = ft_size_parse(refused[i].text, &v);
        ck_assert_msg(rc == refused[i].rc, "'%s': %d", refused[i].text, rc);
        ck_assert_uint_eq(v, refused[i].rc ? 7 : 500);
    }
}
END_TEST

/* Printed in the largest binary unit that divides it, else in bytes with a B, and
 * every printed size parses back to itself (a plain byte count below 1 MiB would
 * not). */
START_TEST(format_parses_back)
{
    static const struct {
        uint64_t v;
        const char *text;
    } cases[] = {
        {0, "0B"},
        {1, "1B"},
        {1000, "1000B"},
        {1024, "1KiB"},
        {3ull << 29, "1536MiB"},
        {16ull << 30, "16GiB"},
        {1ull << 40, "1TiB"},
        {(1ull << 20) + 1, "1048577B"},
        {UINT64_MAX, "18446744073709551615B"},
        {UINT64_MAX - ((1ull << 40) - 1), "16777215TiB"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[32];
        ck_assert_ptr_eq(ft_size_format(cases[i].v, buf, sizeof buf), buf);
        ck_assert_str_eq(buf, cases[i].text);
        uint64_t back = 7;
        ck_assert_msg(ft_size_parse(buf, &back) == 0, "'%s' does not parse", buf);
        ck_assert_uint_eq(back, cases[i].v);
    }
    /* A short buffer is cut, not overrun. */
    char small[4];
    memset(small, 'x', sizeof small);
    ft_size_format(16ull << 30, small, sizeof small);
    ck_assert_str_eq(small, "16G");
}
END_TEST

Suite *size_suite(void)
{
    Suite *s = suite_create("size");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, accepted);
    tcase_add_test(tc, invalid);
    tcase_add_test(tc, refused_with_a_reason);
    tcase_add_test(tc, format_parses_back);
    suite_add_tcase(s, tc);
    return s;
}

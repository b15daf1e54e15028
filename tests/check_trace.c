/* check_trace.c - the trace file format (core/trace.c): round trip, and every
 * truncation and corruption is reported, never read as a valid trace. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/trace.h"

static unsigned char *file_data;
static size_t file_size;

static void build_trace(void)
{
    char path[] = "/tmp/ft-check-trace-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ft_trace_writer_t w;
    ck_assert_int_eq(ft_trace_writer_init(&w), 0);
    ft_trace_begin(&w, FT_TRACE_PROCESS);
    ft_trace_put_u32(&w, 1234);
    ft_trace_put_u64(&w, 10);
    ft_trace_put_u64(&w, 20);
    ft_trace_put_str(&w, "/bin/model");
    ft_trace_put_str(&w, "");
    ft_trace_end(&w);
    ft_trace_begin(&w, (ft_trace_type_t)77); /* a record type from a newer writer */
    ft_trace_put_u32(&w, 5);
    ft_trace_end(&w);
    ft_trace_begin(&w, FT_TRACE_CALLS);
    ft_trace_put_u32(&w, 1);
    ft_trace_put_str(&w, "cudaMalloc");
    ft_trace_put_u64(&w, 42);
    ft_trace_end(&w);
    ck_assert_int_eq(ft_trace_write_file(&w, path), 0);
    ft_trace_writer_free(&w);

    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    file_size = (size_t)ftell(f);
    rewind(f);
    file_data = malloc(file_size);
    ck_assert_uint_eq(fread(file_data, 1, file_size, f), file_size);
    fclose(f);
    unlink(path);
}

static void free_trace(void)
{
    free(file_data);
}

typedef struct {
    int process, calls, other;
    uint32_t pid;
    uint64_t count;
    char name[32];
} seen_t;

static int visit(void *ctx, ft_trace_type_t type, ft_trace_cursor_t *c)
{
    seen_t *s = ctx;
    const char *str;
    uint32_t len, n;
    uint64_t a, b;
    if (type == FT_TRACE_PROCESS) {
        s->process++;
        ck_assert_int_eq(ft_trace_get_u32(c, &s->pid), 0);
        ck_assert_int_eq(ft_trace_get_u64(c, &a), 0);
        ck_assert_int_eq(ft_trace_get_u64(c, &b), 0);
        ck_assert(a == 10 && b == 20);
    } else if (type == FT_TRACE_CALLS) {
        s->calls++;
        ck_assert_int_eq(ft_trace_get_u32(c, &n), 0);
        ck_assert_int_eq(ft_trace_get_str(c, &str, &len), 0);
        snprintf(s->name, sizeof s->name, "%.*s", (int)len, str);
        ck_assert_int_eq(ft_trace_get_u64(c, &s->count), 0);
        /* Reading past the payload fails and stays failed. */
        ck_assert_int_eq(ft_trace_get_u32(c, &n), -1);
        ck_assert_int_eq(c->failed, 1);
    } else {
        s->other++;
    }
    return 0;
}

START_TEST(round_trip)
{
    seen_t s;
    memset(&s, 0, sizeof s);
    char err[256] = "";
    ck_assert_int_eq(ft_trace_read(file_data, file_size, visit, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.process, 1);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_int_eq(s.other, 1);
    ck_assert_uint_eq(s.pid, 1234);
    ck_assert_str_eq(s.name, "cudaMalloc");
    ck_assert_uint_eq(s.count, 42);
}
END_TEST

START_TEST(every_truncation_fails)
{
    char err[256];
    for (size_t len = 0; len < file_size; len++) {
        err[0] = '\0';
        ck_assert_msg(ft_trace_read(file_data, len, NULL, NULL, err, sizeof err) < 0,
                      "a trace cut to %zu of %zu bytes was accepted", len, file_size);
        ck_assert_msg(err[0] != '\0', "no reason given for a cut at %zu", len);
    }
}
END_TEST

START_TEST(every_flipped_byte_fails)
{
    char err[256];
    for (size_t i = 0; i < file_size; i++) {
        unsigned char *copy = malloc(file_size);
        memcpy(copy, file_data, file_size);
        copy[i] ^= 0x5a;
        ck_assert_msg(ft_trace_read(copy, file_size, NULL, NULL, err, sizeof err) < 0,
                      "a flip at byte %zu was accepted", i);
        free(copy);
    }
}
END_TEST

START_TEST(trailing_bytes_and_version)
{
    char err[256];
    unsigned char *copy = malloc(file_size + 1);
    memcpy(copy, file_data, file_size);
    copy[file_size] = 0;
    ck_assert_int_lt(ft_trace_read(copy, file_size + 1, NULL, NULL, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "after the end record"));
    copy[8] = 9; /* version */
    ck_assert_int_lt(ft_trace_read(copy, file_size, NULL, NULL, err, sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "version 9"));
    free(copy);
}
END_TEST

START_TEST(crc_known_value)
{
    /* The standard CRC-32 check value. */
    ck_assert_uint_eq(ft_crc32(0, "123456789", 9), 0xcbf43926u);
}
END_TEST

Suite *trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("format");
    tcase_add_checked_fixture(tc, build_trace, free_trace);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, every_truncation_fails);
    tcase_add_test(tc, every_flipped_byte_fails);
    tcase_add_test(tc, trailing_bytes_and_version);
    tcase_add_test(tc, crc_known_value);
    suite_add_tcase(s, tc);
    return s;
}

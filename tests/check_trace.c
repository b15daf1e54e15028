/* check_trace.c - the trace file format (core/trace.c): round trip, and every
 * truncation and corruption is reported, never read as a valid trace; writing the file
 * never follows a link planted in its folder. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* A folder others may write into (the trace's folder, say /tmp): what was planted there
 * before the trace is written. */
static char dir[64];

static void make_dir(void)
{
    strcpy(dir, "/tmp/ft-check-trace-dir-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

static int write_small_trace(const char *path)
{
    ft_trace_writer_t w;
    ck_assert_int_eq(ft_trace_writer_init(&w), 0);
    ft_trace_begin(&w, FT_TRACE_PROCESS);
    ft_trace_put_u32(&w, 1);
    ft_trace_end(&w);
    int rc = ft_trace_write_file(&w, path);
    ft_trace_writer_free(&w);
    return rc;
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void expect_file(const char *path, const char *text)
{
    char buf[64] = "";
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    ck_assert_msg(strcmp(buf, text) == 0, "%s was overwritten: \"%s\"", path, buf);
}

static void expect_valid_trace(const char *path)
{
    struct stat st;
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert_msg(S_ISREG(st.st_mode), "%s is not a regular file", path);
    unsigned char buf[256];
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char err[256] = "";
    ck_assert_msg(ft_trace_read(buf, n, NULL, NULL, err, sizeof err) == 0, "%s: %s", path, err);
}

/* Entries of the folder other than the ones named. */
static int count_others(const char *a, const char *b)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            strncmp(e->d_name, a, strlen(a)) != 0 && strcmp(e->d_name, b) != 0)
            n++;
    }
    closedir(d);
    return n;
}

/* The old writer opened PATH.tmp.<pid> with O_CREAT|O_TRUNC: a link planted at that
 * name (the pid is easy to guess) made it overwrite whatever the link points to. */
START_TEST(planted_links_not_followed)
{
    char victim[4096], path[4096], link[4200], victim2[4096];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(victim2, sizeof victim2, "%s/victim2", dir);
    snprintf(path, sizeof path, "%s/t.bin", dir);
    put_file(victim, "precious");
    put_file(victim2, "precious too");
    long pid = (long)getpid();
    for (long p = pid - 50; p <= pid + 50; p++) {
        if (p <= 0)
            continue;
        snprintf(link, sizeof link, "%s.tmp.%ld", path, p);
        ck_assert_int_eq(symlink(victim, link), 0);
    }
    /* The trace's own name is a link too: it is replaced, not written through. */
    ck_assert_int_eq(symlink(victim2, path), 0);

    ck_assert_int_eq(write_small_trace(path), 0);
    expect_file(victim, "precious");
    expect_file(victim2, "precious too");
    expect_valid_trace(path);
    /* Nothing left behind but what was planted. */
    ck_assert_int_eq(count_others("t.bin.tmp.", "t.bin"), 2);
}
END_TEST

/* The trace ends up readable by others as a file created with mode 0644 would be: the
 * umask decides, not the temporary file's private 0600. */
START_TEST(mode_follows_umask)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/t.bin", dir);
    struct stat st;
    mode_t old = umask(022);
    ck_assert_int_eq(write_small_trace(path), 0);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0644);
    umask(077);
    ck_assert_int_eq(write_small_trace(path), 0);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0600);
    umask(old);
    expect_valid_trace(path);
    ck_assert_int_eq(count_others("t.bin.tmp.", "t.bin"), 0);
}
END_TEST

/* A folder that cannot be written: an error, and nothing created. */
START_TEST(unwritable_folder_fails_cleanly)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/missing/t.bin", dir);
    ck_assert_int_eq(write_small_trace(path), -ENOENT);
    ck_assert_int_eq(count_others("t.bin.tmp.", "t.bin"), 0);
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
    TCase *file = tcase_create("file");
    tcase_add_checked_fixture(file, make_dir, remove_dir);
    tcase_add_test(file, planted_links_not_followed);
    tcase_add_test(file, mode_follows_umask);
    tcase_add_test(file, unwritable_folder_fails_cleanly);
    suite_add_tcase(s, file);
    return s;
}

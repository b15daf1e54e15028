/* check_log.c - log_suite: the logger's threshold, lazy arguments, prefixes, caps,
 * truncation, errno and recursion guard, and ft_log_write_all's loop. Each test
 * redirects the log to a pipe (fork mode: the redirection dies with the test's
 * process). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <printf.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "log_capture.h"

static int pipe_fds[2];
static char got[8192];

void log_capture_start(void)
{
    ck_assert_int_eq(pipe2(pipe_fds, O_NONBLOCK), 0);
    ft_log_set_fd(pipe_fds[1]);
    ft_log_set_threshold(FT_LOG_INFO);
}

void log_capture_stop(void)
{
    ft_log_set_fd(STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
}

/* Everything written to the log since the last call. */
const char *log_captured(void)
{
    size_t len = 0;
    for (;;) {
        ssize_t n = read(pipe_fds[0], got + len, sizeof got - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    got[len] = '\0';
    return got;
}

static int evaluations;
static int count(void)
{
    return ++evaluations;
}

START_TEST(threshold_filters_levels)
{
    ft_log_set_threshold(FT_LOG_WARN);
    FT_INFO("info %d", 1);
    FT_DEBUG("debug %d", 2);
    FT_TRACE("trace %d", 3);
    ck_assert_str_eq(log_captured(), "");
    FT_WARN("warn %d", 4);
    FT_ERROR("error %d", 5);
    ck_assert_str_eq(log_captured(), "flextensor: warning: warn 4\nflextensor: error: error 5\n");

    ck_assert_int_eq(ft_log_set_threshold(FT_LOG_TRACE), FT_LOG_WARN);
    FT_TRACE("trace %d", 6);
    ck_assert_str_eq(log_captured(), "flextensor: trace 6\n");
    ck_assert(FT_LOG_ENABLED(FT_LOG_TRACE));

    ft_log_set_threshold(FT_LOG_ERROR);
    ck_assert(!FT_LOG_ENABLED(FT_LOG_WARN));
    FT_WARN("hidden");
    ck_assert_str_eq(log_captured(), "");
}
END_TEST

START_TEST(threshold_is_clamped)
{
    ft_log_set_threshold(99);
    ck_assert_int_eq(ft_log_get_threshold(), FT_LOG_TRACE);
    ft_log_set_threshold(-5);
    ck_assert_int_eq(ft_log_get_threshold(), FT_LOG_ERROR);
}
END_TEST

START_TEST(arguments_not_evaluated_below_threshold)
{
    evaluations = 0;
    ft_log_set_threshold(FT_LOG_INFO);
    FT_DEBUG("%d", count());
    FT_TRACE("%d", count());
    FT_LOG(FT_LOG_DEBUG, "%d", count());
    ck_assert_int_eq(evaluations, 0);
    FT_INFO("%d", count());
    ck_assert_int_eq(evaluations, 1);
    ft_log_set_threshold(FT_LOG_DEBUG);
    FT_DEBUG("%d", count());
    ck_assert_int_eq(evaluations, 2);
    ck_assert_str_eq(log_captured(), "flextensor: 1\nflextensor: 2\n");
}
END_TEST

START_TEST(prefixes_and_one_newline)
{
    FT_ERROR("disk %s", "full");
    FT_WARN("odd\n");
    FT_INFO("plain");
    ck_assert_str_eq(log_captured(), "flextensor: error: disk full\n"
                                 "flextensor: warning: odd\n"
                                 "flextensor: plain\n");
}
END_TEST

START_TEST(capped_warnings)
{
    evaluations = 0;
    for (int i = 0; i < 5; i++)
        FT_WARN_CAPPED(2, "miss %d", count());
    ck_assert_int_eq(evaluations, 2);
    ck_assert_str_eq(log_captured(), "flextensor: warning: miss 1\n"
                                 "flextensor: warning: miss 2 (further messages of this kind "
                                 "suppressed)\n");
    /* Another call site has its own count. */
    FT_WARN_CAPPED(1, "other");
    ck_assert_str_eq(log_captured(),
                     "flextensor: warning: other (further messages of this kind suppressed)\n");
}
END_TEST

START_TEST(capped_respects_threshold)
{
    ft_log_set_threshold(FT_LOG_ERROR);
    evaluations = 0;
    for (int i = 0; i < 3; i++)
        FT_WARN_CAPPED(5, "x %d", count());
    ck_assert_int_eq(evaluations, 0);
    ck_assert_str_eq(log_captured(), "");
}
END_TEST

START_TEST(long_message_is_cut)
{
    char big[3000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    FT_INFO("%s", big);
    const char *out = log_captured();
    size_t n = strlen(out);
    ck_assert_uint_eq(n, FT_LOG_MAX_LINE - 1);
    ck_assert_str_eq(out + n - 4, "...\n");
    ck_assert(strncmp(out, "flextensor: aaa", 15) == 0);
}
END_TEST

START_TEST(errno_is_kept)
{
    errno = ENOENT;
    FT_ERROR("x");
    ck_assert_int_eq(errno, ENOENT);
    /* Even when the write fails. */
    ft_log_set_fd(-1);
    errno = EAGAIN;
    FT_ERROR("y");
    ck_assert_int_eq(errno, EAGAIN);
}
END_TEST

/* A printf extension that logs from inside vsnprintf: the stand-in for a hook of ours
 * reached while the logger formats. The inner message must be dropped. */
static int nested_print(FILE *stream, const struct printf_info *info, const void *const *args)
{
    FT_ERROR("nested");
    return fprintf(stream, "N");
}

static int nested_arginfo(const struct printf_info *info, size_t n, int *argtypes, int *size)
{
    return 0;
}

START_TEST(recursion_is_dropped)
{
    ck_assert_int_eq(register_printf_specifier('W', nested_print, nested_arginfo), 0);
    const char *fmt = "outer %W done"; /* not a literal: -Wformat knows no %W */
    ft_log_write(FT_LOG_ERROR, fmt);
    ck_assert_str_eq(log_captured(), "flextensor: error: outer N done\n");
    FT_ERROR("after");
    ck_assert_str_eq(log_captured(), "flextensor: error: after\n");
}
END_TEST

/* ft_log_write_all against a slow reader, its writer signalled every millisecond by a
 * handler without SA_RESTART: a blocked write() fails with EINTR (the pipe is full
 * when it starts, and the reader waits 20 ms before its first read) or is cut short
 * (a partial count), and each time the loop must go on from where it stopped. The
 * reader checks every byte, in order. */
static volatile sig_atomic_t n_signals;
static void count_signal(int sig)
{
    (void)sig;
    n_signals++;
}

typedef struct {
    int fd;
    size_t got;
    int in_order;
} slow_reader_t;

static void *slow_reader(void *arg)
{
    slow_reader_t *r = arg;
    unsigned char buf[4096];
    usleep(20000);
    for (;;) {
        ssize_t n = read(r->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != (unsigned char)((r->got + (size_t)i) % 251))
                r->in_order = 0;
        r->got += (size_t)n;
        usleep(200);
    }
    return NULL;
}

typedef struct {
    pthread_t target;
    atomic_int stop;
} signaller_t;

static void *signaller(void *arg)
{
    signaller_t *g = arg;
    while (!atomic_load(&g->stop)) {
        pthread_kill(g->target, SIGUSR1);
        usleep(1000);
    }
    return NULL;
}

START_TEST(write_all_resumes_cut_writes)
{
    size_t len = 1u << 20; /* sixteen times a pipe's default capacity */
    unsigned char *buf = malloc(len);
    ck_assert_ptr_nonnull(buf);
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i % 251);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_signal;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, &old), 0);

    /* The stream's head fills the pipe, without blocking. */
    size_t head = 0;
    ck_assert_int_eq(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
    for (ssize_t n; (n = write(fds[1], buf + head, len - head)) > 0;)
        head += (size_t)n;
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_int_eq(fcntl(fds[1], F_SETFL, 0), 0);

    slow_reader_t r = {fds[0], 0, 1};
    signaller_t g = {pthread_self(), 0};
    pthread_t rt, gt;
    ck_assert_int_eq(pthread_create(&rt, NULL, slow_reader, &r), 0);
    ck_assert_int_eq(pthread_create(&gt, NULL, signaller, &g), 0);
    int rc = ft_log_write_all(fds[1], buf + head, len - head);
    atomic_store(&g.stop, 1);
    pthread_join(gt, NULL);
    close(fds[1]);
    pthread_join(rt, NULL);
    sigaction(SIGUSR1, &old, NULL);

    ck_assert_int_eq(rc, 0);
    ck_assert_int_gt(n_signals, 0);
    ck_assert_uint_eq(r.got, len);
    ck_assert(r.in_order);
    /* Another error ends it with -errno. */
    close(fds[0]);
    ck_assert_int_eq(ft_log_write_all(fds[0], buf, 1), -EBADF);
    ck_assert_int_eq(ft_log_write_all(fds[0], buf, 0), 0);
    free(buf);
}
END_TEST

START_TEST(level_names_parse)
{
    static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
    for (int i = 0; i < FT_LOG_LEVEL_COUNT; i++) {
        int level = -1;
        ck_assert_str_eq(ft_log_level_name(i), names[i]);
        ck_assert_int_eq(ft_log_level_parse(names[i], &level), 0);
        ck_assert_int_eq(level, i);
    }
    int level = -1;
    ck_assert_int_eq(ft_log_level_parse(" DeBuG ", &level), 0);
    ck_assert_int_eq(level, FT_LOG_DEBUG);
    ck_assert_int_eq(ft_log_level_parse("WARNING", &level), 0);
    ck_assert_int_eq(level, FT_LOG_WARN);
    level = 7;
    ck_assert_int_eq(ft_log_level_parse("verbose", &level), -1);
    ck_assert_int_eq(ft_log_level_parse("", &level), -1);
    ck_assert_int_eq(ft_log_level_parse("info2", &level), -1);
    ck_assert_int_eq(ft_log_level_parse(NULL, &level), -1);
    ck_assert_int_eq(level, 7);
    ck_assert_str_eq(ft_log_level_name(9), "?");
    ck_assert_str_eq(ft_log_level_name(-1), "?");
}
END_TEST

Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("log");
    tcase_add_checked_fixture(tc, log_capture_start, log_capture_stop);
    tcase_add_test(tc, threshold_filters_levels);
    tcase_add_test(tc, threshold_is_clamped);
    tcase_add_test(tc, arguments_not_evaluated_below_threshold);
    tcase_add_test(tc, prefixes_and_one_newline);
    tcase_add_test(tc, capped_warnings);
    tcase_add_test(tc, capped_respects_threshold);
    tcase_add_test(tc, long_message_is_cut);
    tcase_add_test(tc, errno_is_kept);
    tcase_add_test(tc, recursion_is_dropped);
    tcase_add_test(tc, level_names_parse);
    tcase_add_test(tc, write_all_resumes_cut_writes);
    suite_add_tcase(s, tc);
    return s;
}

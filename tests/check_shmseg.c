/* check_shmseg.c - FT_SHM_ENABLED's segment (core/shmseg.c): names that cannot lead
 * elsewhere, one creator and attachers, a unit filled by one process at a time and
 * seen complete by the others, a filler that dies (its unit taken over), a segment
 * nobody is attached to (replaced), one of the wrong owner or mode (refused), another
 * layout under the same name while in use (refused), the wait's deadline, the last
 * to leave removing it, a forked child that does not, and ft-run --shm-clean's sweep.
 *
 * Two ft_shmseg_open calls in one process are two open file descriptions, whose OFD
 * locks conflict as two processes' would: most cases need no fork. Namespaces carry
 * the test's pid, so that runs side by side do not meet. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/shmseg.h"

static char ns[64];
static const uint64_t bytes3[3] = { 8192, 100, 4096 * 3 + 8 };

static void fresh_ns(void)
{
    static int n;
    snprintf(ns, sizeof ns, "ck-%d-%d", (int)getpid(), n++);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static ft_shmseg_t *open_ok(uint64_t fp, const uint64_t *bytes, uint32_t n, int group, ft_shmseg_info_t *info)
{
    ft_shmseg_t *s = NULL;
    int rc = ft_shmseg_open(&s, ns, fp, bytes, n, group, 0, info);
    ck_assert_msg(rc == 0, "open: %d (%s)", rc, info->why);
    ck_assert_ptr_nonnull(s);
    return s;
}

static int exists(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

START_TEST(names_cannot_lead_elsewhere)
{
    static const char *const good[] = { "a", "llama-70b", "x.y_z-1", "A9" };
    static const char *const bad[] = { "", ".", "..", "../x", "a/b", "/abs", ".hid", "a..b", "a b", "a*", "a\n" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        ck_assert_msg(ft_shmseg_namespace_ok(good[i]), "%s", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!ft_shmseg_namespace_ok(bad[i]), "%s", bad[i]);
    char longest[FT_SHMSEG_NAMESPACE_MAX + 2];
    memset(longest, 'a', sizeof longest);
    longest[FT_SHMSEG_NAMESPACE_MAX] = '\0';
    ck_assert(ft_shmseg_namespace_ok(longest));
    longest[FT_SHMSEG_NAMESPACE_MAX] = 'a';
    longest[FT_SHMSEG_NAMESPACE_MAX + 1] = '\0';
    ck_assert(!ft_shmseg_namespace_ok(longest));
    ck_assert(!ft_shmseg_namespace_ok(NULL));

    char name[FT_SHMSEG_NAME_MAX];
    ck_assert_int_eq(ft_shmseg_name(name, sizeof name, "llama", 0xabcull), 0);
    ck_assert_str_eq(name, "/ft-llama-0000000000000abc");
    ck_assert_int_eq(ft_shmseg_name(name, sizeof name, "../x", 1), -EINVAL);
    ck_assert_int_eq(ft_shmseg_name(name, 8, "llama", 1), -EINVAL);
    ft_shmseg_t *s = NULL;
    ft_shmseg_info_t info;
    ck_assert_int_eq(ft_shmseg_open(&s, "a/b", 1, bytes3, 3, 0, 0, &info), -EINVAL);
    ck_assert_ptr_null(s);
    /* The fingerprint depends on every value and on their order. */
    uint64_t a = ft_shmseg_fp_add(ft_shmseg_fp_add(FT_SHMSEG_FP_START, 1), 2);
    uint64_t b = ft_shmseg_fp_add(ft_shmseg_fp_add(FT_SHMSEG_FP_START, 2), 1);
    ck_assert_uint_ne(a, b);
}
END_TEST

START_TEST(one_creator_one_filler_and_the_last_removes)
{
    fresh_ns();
    ft_shmseg_info_t ia, ib;
    ft_shmseg_t *a = open_ok(7, bytes3, 3, 0, &ia);
    ft_shmseg_t *b = open_ok(7, bytes3, 3, 0, &ib);
    ck_assert(ia.created && !ia.replaced);
    ck_assert(!ib.created && !ib.replaced);
    ck_assert_str_eq(ft_shmseg_name_of(a), ft_shmseg_name_of(b));
    ck_assert_uint_eq(ft_shmseg_units(b), 3);
    ck_assert_uint_eq(ft_shmseg_unit_bytes(b, 2), bytes3[2]);
    ck_assert_uint_eq((uintptr_t)ft_shmseg_unit_data(b, 1) % 4096, 0);
    ck_assert_ptr_null(ft_shmseg_unit_data(b, 3));
    /* The segment's mode is 0600 whatever the umask. */
    struct stat st;
    char path[300];
    snprintf(path, sizeof path, "/dev/shm%s", ft_shmseg_name_of(a));
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0600);

    uint64_t sum = 0;
    int pid = -1;
    ck_assert_int_eq(ft_shmseg_unit_try(b, 1, &sum, &pid), FT_SHMSEG_CLAIMED);
    ck_assert_int_eq(pid, 0); /* it was empty */
    ck_assert_int_eq(ft_shmseg_unit_state(a, 1, &pid), FT_SHMSEG_FILLING);
    ck_assert_int_eq(pid, getpid());
    ck_assert_int_eq(ft_shmseg_unit_try(a, 1, &sum, &pid), FT_SHMSEG_BUSY);
    ck_assert_int_eq(ft_shmseg_unit_complete(a, 1, 5), -EPERM); /* not a's claim */
    memset(ft_shmseg_unit_data(b, 1), 0x5a, 100);
    ck_assert_int_eq(ft_shmseg_unit_complete(b, 1, 0x1234), 0);
    ck_assert_int_eq(ft_shmseg_unit_try(a, 1, &sum, &pid), FT_SHMSEG_READY);
    ck_assert_uint_eq(sum, 0x1234);
    ck_assert_uint_eq(((unsigned char *)ft_shmseg_unit_data(a, 1))[99], 0x5a);
    ck_assert(ft_shmseg_owns(a, (char *)ft_shmseg_unit_data(a, 1) + 99));
    ck_assert(!ft_shmseg_owns(a, &sum));

    /* A fill given back leaves the unit empty for the next. */
    ck_assert_int_eq(ft_shmseg_unit_try(a, 0, &sum, &pid), FT_SHMSEG_CLAIMED);
    ft_shmseg_unit_abandon(a, 0);
    ck_assert_int_eq(ft_shmseg_unit_state(b, 0, NULL), FT_SHMSEG_EMPTY);
    ck_assert_int_eq(ft_shmseg_unit_try(b, 0, &sum, &pid), FT_SHMSEG_CLAIMED);
    ck_assert_int_eq(pid, 0);

    char name[FT_SHMSEG_NAME_MAX];
    snprintf(name, sizeof name, "%s", ft_shmseg_name_of(a));
    ck_assert_int_eq(ft_shmseg_close(b, 0, 0), 0); /* a is still there */
    ck_assert(exists(name));
    ck_assert_int_eq(ft_shmseg_close(a, 0, 0), 1);
    ck_assert(!exists(name));
}
END_TEST

/* A filler that dies half-way: its lock goes with it, the unit is still "filling",
 * and the next process claims it, told whose it was. */
START_TEST(a_dead_filler_is_taken_over)
{
    fresh_ns();
    ft_shmseg_info_t info;
    ft_shmseg_t *a = open_ok(9, bytes3, 3, 0, &info);
    pid_t child = fork();
    if (child == 0) {
        ft_shmseg_t *c = NULL;
        uint64_t sum;
        int pid;
        if (ft_shmseg_open(&c, ns, 9, bytes3, 3, 0, 0, NULL) != 0 ||
            ft_shmseg_unit_try(c, 2, &sum, &pid) != FT_SHMSEG_CLAIMED)
            _exit(3);
        memset(ft_shmseg_unit_data(c, 2), 1, 4096); /* half-way */
        raise(SIGKILL);
    }
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFSIGNALED(status));
    int pid = 0;
    uint64_t sum;
    ck_assert_int_eq(ft_shmseg_unit_state(a, 2, &pid), FT_SHMSEG_FILLING);
    ck_assert_int_eq(ft_shmseg_unit_try(a, 2, &sum, &pid), FT_SHMSEG_CLAIMED);
    ck_assert_int_eq(pid, child);
    ck_assert_int_eq(ft_shmseg_unit_complete(a, 2, 77), 0);
    ck_assert_int_eq(ft_shmseg_close(a, 0, 0), 1);
}
END_TEST

/* A run whose processes all died leaves its segment with nobody attached: the next
 * open replaces it (a new, empty segment), never trusting what it held. */
START_TEST(a_stale_segment_is_replaced)
{
    fresh_ns();
    pid_t child = fork();
    if (child == 0) {
        ft_shmseg_t *c = NULL;
        uint64_t sum;
        int pid;
        if (ft_shmseg_open(&c, ns, 11, bytes3, 3, 0, 0, NULL) != 0 ||
            ft_shmseg_unit_try(c, 0, &sum, &pid) != FT_SHMSEG_CLAIMED ||
            ft_shmseg_unit_complete(c, 0, 42) != 0)
            _exit(3);
        _exit(0); /* without leaving it */
    }
    int status;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ft_shmseg_info_t info;
    ft_shmseg_t *a = open_ok(11, bytes3, 3, 0, &info);
    ck_assert(info.replaced);
    ck_assert(info.created);
    ck_assert_int_eq(ft_shmseg_unit_state(a, 0, NULL), FT_SHMSEG_EMPTY);
    ck_assert_int_eq(ft_shmseg_close(a, 0, 0), 1);
}
END_TEST

/* Makes the segment of (ns, fp) by hand with the given mode (and owner, when >= 0:
 * that uid, and the group 0 when `group0`, else the uid's number). */
static void plant_as(uint64_t fp, mode_t mode, int owner, int group0, char *name, size_t len)
{
    ck_assert_int_eq(ft_shmseg_name(name, len, ns, fp), 0);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 65536), 0);
    ck_assert_int_eq(fchmod(fd, mode), 0);
    if (owner >= 0)
        ck_assert_int_eq(fchown(fd, (uid_t)owner, group0 ? 0 : (gid_t)owner), 0);
    close(fd);
}

static void plant(uint64_t fp, mode_t mode, int owner, char *name, size_t len)
{
    plant_as(fp, mode, owner, 0, name, len);
}

START_TEST(wrong_mode_or_owner_is_refused)
{
    fresh_ns();
    char name[FT_SHMSEG_NAME_MAX];
    static const mode_t modes[] = { 0644, 0666, 0602, 0660, 0400, 04600 };
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        plant(20 + i, modes[i], -1, name, sizeof name);
        ft_shmseg_t *s = NULL;
        ft_shmseg_info_t info;
        ck_assert_int_eq(ft_shmseg_open(&s, ns, 20 + i, bytes3, 3, 0, 0, &info), -EACCES);
        ck_assert_ptr_null(s);
        ck_assert_msg(strstr(info.why, name) != NULL && strstr(info.why, "refused") != NULL, "%s", info.why);
        ck_assert(exists(name)); /* not ours to remove */
        shm_unlink(name);
    }
    /* 0660 is accepted with the group option (here: stale, so replaced). */
    plant(30, 0660, -1, name, sizeof name);
    ft_shmseg_info_t info;
    ft_shmseg_t *s = open_ok(30, bytes3, 3, 1, &info);
    ck_assert(info.replaced);
    struct stat st;
    char path[300];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq(st.st_mode & 07777, 0660);
    ft_shmseg_close(s, 0, 0);
    /* Another user's segment: only root can make one here. */
    if (geteuid() == 0) {
        plant(31, 0600, 65534, name, sizeof name);
        s = NULL;
        ck_assert_int_eq(ft_shmseg_open(&s, ns, 31, bytes3, 3, 0, 0, &info), -EACCES);
        ck_assert_msg(strstr(info.why, "owned by uid 65534") != NULL, "%s", info.why);
        shm_unlink(name);
        /* Another user's, of this process's group (root's: 0), mode 0660: only with the
         * group option. */
        plant_as(32, 0660, 65534, 1, name, sizeof name);
        ck_assert_int_eq(ft_shmseg_open(&s, ns, 32, bytes3, 3, 0, 0, &info), -EACCES);
        s = open_ok(32, bytes3, 3, 1, &info);
        ck_assert(info.replaced);
        ft_shmseg_close(s, 0, 0);
    }
}
END_TEST

/* Live processes with another layout under the same name (a fingerprint collision, or
 * a version change): refused, and left alone. */
START_TEST(another_layout_in_use_is_refused)
{
    fresh_ns();
    ft_shmseg_info_t info;
    ft_shmseg_t *a = open_ok(40, bytes3, 3, 0, &info);
    static const uint64_t other[3] = { 8192, 200, 4096 * 3 + 8 };
    ft_shmseg_t *b = NULL;
    ck_assert_int_eq(ft_shmseg_open(&b, ns, 40, other, 3, 0, 0, &info), -EPROTO);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(info.why, ft_shmseg_name_of(a)) != NULL, "%s", info.why);
    ck_assert_int_eq(ft_shmseg_open(&b, ns, 40, bytes3, 2, 0, 0, &info), -EPROTO);
    ck_assert_int_eq(ft_shmseg_close(a, 0, 0), 1);
}
END_TEST

static void *complete_later(void *seg)
{
    usleep(30000);
    return ft_shmseg_unit_complete(seg, 0, 9) == 0 ? NULL : seg;
}

START_TEST(the_wait_ends_at_its_deadline)
{
    fresh_ns();
    ft_shmseg_info_t info;
    ft_shmseg_t *a = open_ok(50, bytes3, 3, 0, &info);
    ft_shmseg_t *b = open_ok(50, bytes3, 3, 0, &info);
    uint64_t sum;
    int pid;
    ck_assert_int_eq(ft_shmseg_unit_try(a, 0, &sum, &pid), FT_SHMSEG_CLAIMED);
    uint64_t t0 = now_ns();
    ck_assert_int_eq(ft_shmseg_unit_wait(b, 0, t0 + 50000000ull, &sum, &pid), FT_SHMSEG_BUSY);
    uint64_t waited = now_ns() - t0;
    ck_assert_uint_ge(waited, 50000000ull);
    ck_assert_uint_lt(waited, 2000000000ull);
    ck_assert_int_eq(pid, getpid());
    /* ... and returns as soon as the unit is complete (a thread of this process
     * completes a's claim while b waits). */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, complete_later, a), 0);
    ck_assert_int_eq(ft_shmseg_unit_wait(b, 0, now_ns() + 5000000000ull, &sum, &pid), FT_SHMSEG_READY);
    ck_assert_uint_eq(sum, 9);
    void *rc;
    pthread_join(t, &rc);
    ck_assert_ptr_null(rc);
    ft_shmseg_close(b, 0, 0);
    ft_shmseg_close(a, 0, 0);
}
END_TEST

/* A forked child shares its parent's attachment: its exit must not remove the
 * segment under the parent. */
START_TEST(a_forked_child_does_not_remove_it)
{
    fresh_ns();
    ft_shmseg_info_t info;
    ft_shmseg_t *a = open_ok(60, bytes3, 3, 0, &info);
    char name[FT_SHMSEG_NAME_MAX];
    snprintf(name, sizeof name, "%s", ft_shmseg_name_of(a));
    pid_t child = fork();
    if (child == 0)
        _exit(ft_shmseg_close(a, 0, 0) == 0 ? 0 : 3);
    int status;
    waitpid(child, &status, 0);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert(exists(name));
    ck_assert_int_eq(ft_shmseg_close(a, 0, 1), 1);
    ck_assert(!exists(name));
}
END_TEST

static void count_cleaned(void *ctx, const char *name, int in_use, int err)
{
    int *c = ctx;
    c[0]++;
    c[1] += in_use;
    c[2] += err != 0;
    (void)name;
}

START_TEST(clean_removes_a_namespace_only)
{
    fresh_ns();
    char other[80];
    snprintf(other, sizeof other, "%s-x", ns);
    ft_shmseg_info_t info;
    ft_shmseg_t *a = open_ok(70, bytes3, 3, 0, &info);
    ft_shmseg_t *b = open_ok(71, bytes3, 3, 0, &info);
    ft_shmseg_close(b, 0, 0);
    char stale[FT_SHMSEG_NAME_MAX];
    plant(72, 0600, -1, stale, sizeof stale);
    ft_shmseg_t *o = NULL;
    ck_assert_int_eq(ft_shmseg_open(&o, other, 70, bytes3, 3, 0, 0, &info), 0);
    int c[3] = { 0, 0, 0 };
    ck_assert_int_eq(ft_shmseg_clean(ns, count_cleaned, c), 2);
    ck_assert_int_eq(c[0], 2);
    ck_assert_int_eq(c[1], 1); /* a is attached */
    ck_assert_int_eq(c[2], 0);
    ck_assert(!exists(ft_shmseg_name_of(a)));
    ck_assert(exists(ft_shmseg_name_of(o)));
    ck_assert_int_eq(ft_shmseg_clean("../etc", NULL, NULL), -EINVAL);
    /* a, removed under it, leaves without removing another's segment of that name. */
    ft_shmseg_t *n = open_ok(70, bytes3, 3, 0, &info);
    ck_assert(info.created);
    ck_assert_int_eq(ft_shmseg_close(a, 0, 0), 0);
    ck_assert(exists(ft_shmseg_name_of(n)));
    ck_assert_int_eq(ft_shmseg_close(n, 0, 0), 1);
    ck_assert_int_eq(ft_shmseg_close(o, 0, 0), 1);
}
END_TEST

Suite *shmseg_suite(void)
{
    Suite *s = suite_create("shmseg");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, names_cannot_lead_elsewhere);
    tcase_add_test(tc, one_creator_one_filler_and_the_last_removes);
    tcase_add_test(tc, a_dead_filler_is_taken_over);
    tcase_add_test(tc, a_stale_segment_is_replaced);
    tcase_add_test(tc, wrong_mode_or_owner_is_refused);
    tcase_add_test(tc, another_layout_in_use_is_refused);
    tcase_add_test(tc, the_wait_ends_at_its_deadline);
    tcase_add_test(tc, a_forked_child_does_not_remove_it);
    tcase_add_test(tc, clean_removes_a_namespace_only);
    suite_add_tcase(s, tc);
    return s;
}

/* shmseg.c - the shared segment of FT_SHM_ENABLED: its name, its header, trust, unit
 * claims, detach and clean-up (shmseg.h says what it owns and the locking rules).
 *
 * Owns: each ft_shmseg_t (no global state). No lock of its own: the caller serialises
 * its calls on one segment; between processes, the OFD locks below do. */
#define _GNU_SOURCE
#include "core/shmseg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_DIR "/dev/shm" /* where glibc's shm_open puts segments (ft_shmseg_clean) */
#define MAGIC 0x31315f4d48535446ull /* "FTSHM_11" */
#define VERSION 1u
#define PAGE 4096u
#define MAX_UNITS (1u << 20)

/* Byte offsets of the OFD locks (advisory: they need no bytes of the file there). */
#define LOCK_GATE 0
#define LOCK_ATTACH 1
#define LOCK_UNIT(u) (2 + (off_t)(u))

typedef struct {
    uint64_t offset, bytes;  /* the unit's bytes in the segment */
    uint64_t sum;            /* its filler's content sum, once complete */
    uint32_t state;          /* FT_SHMSEG_*: written under its UNIT lock, read atomically */
    int32_t pid;             /* the process filling it, or that filled it */
} seg_unit_t;

typedef struct {
    uint64_t magic;          /* written last by the creator (release) */
    uint32_t version, n_units;
    uint64_t fingerprint, size;
    int32_t creator_pid;
    uint32_t reserved;
    seg_unit_t units[];
} seg_header_t;

struct ft_shmseg {
    int fd;
    pid_t pid;               /* the process that attached: a forked child does not detach */
    seg_header_t *h;
    uint64_t size;
    char name[FT_SHMSEG_NAME_MAX];
};

int ft_shmseg_name(char *buf, size_t len, const char *ns, uint64_t fingerprint)
{
    if (!ft_shmseg_namespace_ok(ns))
        return -EINVAL;
    int n = snprintf(buf, len, "/ft-%s-%016llx", ns, (unsigned long long)fingerprint);
    return n > 0 && (size_t)n < len ? 0 : -EINVAL;
}

uint64_t ft_shmseg_fp_add(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return h;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap(unsigned *us)
{
    struct timespec ts = { 0, (long)*us * 1000 };
    nanosleep(&ts, NULL);
    if (*us < 20000)
        *us *= 2;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* --- OFD locks ------------------------------------------------------------------ */

/* One attempt: 0, or -1 (held by another description, or an error). */
static int lock_try(int fd, short type, off_t at)
{
    struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = at, .l_len = 1 };
    return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : -1;
}

/* Polled rather than F_OFD_SETLKW: a holder stopped inside its short section (a
 * debugger, SIGSTOP) must not hold the caller past its deadline. 0 or -ETIMEDOUT. */
static int lock_wait(int fd, short type, off_t at, uint64_t deadline_ns)
{
    unsigned us = 100;
    while (lock_try(fd, type, at) != 0) {
        if (errno != EAGAIN && errno != EACCES && errno != EINTR)
            return -errno;
        if (deadline_ns != 0 && now_ns() >= deadline_ns)
            return -ETIMEDOUT;
        nap(&us);
    }
    return 0;
}

static void unlock(int fd, off_t at)
{
    lock_try(fd, F_UNLCK, at);
}

/* 1 when no other description holds ATTACH: the caller, holding it shared, takes it
 * exclusive for a moment (a conversion) and gives it back shared. */
static int alone(int fd)
{
    if (lock_try(fd, F_WRLCK, LOCK_ATTACH) != 0)
        return 0;
    lock_try(fd, F_RDLCK, LOCK_ATTACH);
    return 1;
}

/* 1 when `name` still leads to the file behind fd (a process that judged it stale,
 * or left it last, may have removed it since fd was opened). */
static int same_file(const char *name, int fd)
{
    struct stat a, b;
    int fd2 = shm_open(name, O_RDONLY, 0);
    if (fd2 < 0)
        return 0;
    int same = fstat(fd, &a) == 0 && fstat(fd2, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    close(fd2);
    return same;
}

/* --- trust --------------------------------------------------------------------- */

static int in_groups(gid_t g)
{
    if (g == getegid())
        return 1;
    gid_t list[256];
    int n = getgroups(256, list);
    for (int i = 0; i < n; i++)
        if (list[i] == g)
            return 1;
    return 0;
}

/* 0 when the file behind fd may hold this process's weights: another user's file, or
 * one others may write, could hand it bytes of their choosing (the content check would
 * catch them, but a segment that is not ours is not ours to use or remove). */
static int trust(int fd, const char *name, int group, char *why, size_t len)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, len, "segment %s: fstat: %s", name, strerror(errno));
        return -errno;
    }
    unsigned mode = st.st_mode & 07777, allowed = group ? 0660u : 0600u;
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, len, "segment %s is not a regular file: refused", name);
        return -EACCES;
    }
    if ((mode & ~allowed) != 0 || (mode & 0600) != 0600) {
        snprintf(why, len, "segment %s has mode %04o, not %04o%s: refused", name, mode, allowed,
                 group ? "" : " (FT_SHM_GROUP allows 0660)");
        return -EACCES;
    }
    if (st.st_uid != geteuid() && !(group && mode == 0660 && in_groups(st.st_gid))) {
        snprintf(why, len, "segment %s is owned by uid %u (group %u), not by this process's uid %u%s: refused",
                 name, (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)geteuid(),
                 group ? " or one of its groups with mode 0660" : "");
        return -EACCES;
    }
    return 0;
}

/* --- the header ------------------------------------------------------------------ */

static uint64_t header_bytes(uint32_t n_units)
{
    return align_up(sizeof(seg_header_t) + (uint64_t)n_units * sizeof(seg_unit_t), PAGE);
}

/* The whole segment's size for this layout; 0 when it would overflow. */
static uint64_t layout_size(const uint64_t *unit_bytes, uint32_t n_units)
{
    uint64_t at = header_bytes(n_units);
    for (uint32_t u = 0; u < n_units; u++) {
        if (unit_bytes[u] > (1ull << 50) || at > (1ull << 52))
            return 0;
        at += align_up(unit_bytes[u], PAGE);
    }
    return at;
}

static void header_init(seg_header_t *h, uint64_t fingerprint, uint64_t size, const uint64_t *unit_bytes,
                        uint32_t n_units)
{
    h->version = VERSION;
    h->n_units = n_units;
    h->fingerprint = fingerprint;
    h->size = size;
    h->creator_pid = (int32_t)getpid();
    uint64_t at = header_bytes(n_units);
    for (uint32_t u = 0; u < n_units; u++) {
        h->units[u] = (seg_unit_t){ at, unit_bytes[u], 0, FT_SHMSEG_EMPTY, 0 };
        at += align_up(unit_bytes[u], PAGE);
    }
    __atomic_store_n(&h->magic, MAGIC, __ATOMIC_RELEASE);
}

/* 1 when the header is this model's: magic, version, fingerprint and every unit's
 * place (a different model whose fingerprint collided differs here, most likely). */
static int header_matches(const seg_header_t *h, uint64_t fingerprint, uint64_t size, const uint64_t *unit_bytes,
                          uint32_t n_units)
{
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != MAGIC || h->version != VERSION ||
        h->fingerprint != fingerprint || h->size != size || h->n_units != n_units)
        return 0;
    uint64_t at = header_bytes(n_units);
    for (uint32_t u = 0; u < n_units; u++) {
        if (h->units[u].offset != at || h->units[u].bytes != unit_bytes[u])
            return 0;
        at += align_up(unit_bytes[u], PAGE);
    }
    return 1;
}

/* --- open and close ---------------------------------------------------------------- */

static void drop(int fd, void *map, uint64_t size)
{
    if (map != NULL && map != MAP_FAILED)
        munmap(map, size);
    if (fd >= 0)
        close(fd); /* releases every OFD lock taken through it */
}

int ft_shmseg_open(ft_shmseg_t **out, const char *ns, uint64_t fingerprint, const uint64_t *unit_bytes,
                   uint32_t n_units, int group, uint64_t deadline_ns, ft_shmseg_info_t *info)
{
    ft_shmseg_info_t scratch;
    if (info == NULL)
        info = &scratch;
    memset(info, 0, sizeof *info);
    *out = NULL;
    char name[FT_SHMSEG_NAME_MAX];
    uint64_t size = n_units <= MAX_UNITS && unit_bytes != NULL ? layout_size(unit_bytes, n_units) : 0;
    if (ft_shmseg_name(name, sizeof name, ns, fingerprint) != 0 || size == 0) {
        snprintf(info->why, sizeof info->why, "no segment for namespace \"%s\" (%u units)", ns ? ns : "", n_units);
        return -EINVAL;
    }
    mode_t mode = group ? 0660 : 0600;
    /* Each turn opens what the name leads to; it loops only when a race removed or
     * replaced the file it opened (a stale one, a last process leaving). */
    for (int turn = 0; turn < 16; turn++) {
        int created = 0;
        int fd = shm_open(name, O_RDWR, 0);
        if (fd < 0 && errno == ENOENT) {
            fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, mode);
            if (fd < 0 && errno == EEXIST)
                continue;
            /* The umask applies to shm_open's mode: group mode must be exactly 0660. */
            created = fd >= 0 && fchmod(fd, mode) == 0;
            if (fd >= 0 && !created) {
                int err = errno;
                shm_unlink(name);
                close(fd);
                errno = err;
                fd = -1;
            }
        }
        if (fd < 0) {
            int err = errno;
            snprintf(info->why, sizeof info->why, "cannot open segment %s: %s%s", name, strerror(err),
                     err == EACCES ? " (another user's, or a mode without write access): refused" : "");
            return -err;
        }
        int rc = trust(fd, name, group, info->why, sizeof info->why);
        if (rc != 0) {
            close(fd);
            return rc;
        }
        if ((rc = lock_wait(fd, F_WRLCK, LOCK_GATE, deadline_ns)) != 0 ||
            (rc = lock_wait(fd, F_RDLCK, LOCK_ATTACH, deadline_ns)) != 0) {
            snprintf(info->why, sizeof info->why, "segment %s: another process held it past the wait: %s", name,
                     strerror(-rc));
            close(fd);
            return rc;
        }
        if (!same_file(name, fd)) {
            close(fd);
            continue;
        }
        struct stat st;
        if (fstat(fd, &st) != 0) {
            rc = -errno;
            snprintf(info->why, sizeof info->why, "segment %s: fstat: %s", name, strerror(-rc));
            close(fd);
            return rc;
        }
        if (created && ftruncate(fd, (off_t)size) != 0) {
            rc = -errno;
            snprintf(info->why, sizeof info->why, "cannot size segment %s to %llu bytes: %s", name,
                     (unsigned long long)size, strerror(-rc));
            shm_unlink(name);
            close(fd);
            return rc;
        }
        uint64_t have = created ? size : (uint64_t)st.st_size;
        void *map = have >= sizeof(seg_header_t) ? mmap(NULL, have, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                                 : NULL;
        if (map == MAP_FAILED) {
            rc = -errno;
            snprintf(info->why, sizeof info->why, "cannot map segment %s: %s", name, strerror(-rc));
            if (created)
                shm_unlink(name);
            close(fd);
            return rc;
        }
        if (created) {
            header_init(map, fingerprint, size, unit_bytes, n_units);
        } else if (alone(fd)) {
            /* Nobody attached: every process of its run ended without leaving it (a
             * normal exit removes it), maybe half-way through a fill. Whatever it
             * holds is not trusted: it is removed, and the next turn creates it anew. */
            if (shm_unlink(name) != 0) {
                rc = -errno;
                snprintf(info->why, sizeof info->why, "segment %s was left by a run that died (nobody "
                         "attached), and cannot be removed: %s", name, strerror(-rc));
                drop(fd, map, have);
                return rc;
            }
            info->replaced = 1;
            drop(fd, map, have);
            continue;
        } else if (have != size || !header_matches(map, fingerprint, size, unit_bytes, n_units)) {
            snprintf(info->why, sizeof info->why, "segment %s is in use with another layout or version "
                     "(%llu bytes, %llu expected): refused", name, (unsigned long long)have,
                     (unsigned long long)size);
            drop(fd, map, have);
            return -EPROTO;
        }
        ft_shmseg_t *s = calloc(1, sizeof *s);
        if (s == NULL) {
            snprintf(info->why, sizeof info->why, "segment %s: out of memory", name);
            if (created)
                shm_unlink(name);
            drop(fd, map, have);
            return -ENOMEM;
        }
        unlock(fd, LOCK_GATE);
        *s = (ft_shmseg_t){ fd, getpid(), map, size, "" };
        snprintf(s->name, sizeof s->name, "%s", name);
        info->created = created;
        *out = s;
        return 0;
    }
    snprintf(info->why, sizeof info->why, "segment %s: replaced or removed under this process 16 times in a row",
             name);
    return -EAGAIN;
}

int ft_shmseg_close(ft_shmseg_t *s, uint64_t deadline_ns, int keep_mapping)
{
    if (s == NULL)
        return 0;
    int rc = 0;
    if (s->pid == getpid()) {
        rc = lock_wait(s->fd, F_WRLCK, LOCK_GATE, deadline_ns);
        /* Under GATE nobody can attach between the test and the removal; one that
         * opened the name before it finds it gone once it holds GATE (same_file). */
        if (rc == 0 && alone(s->fd) && same_file(s->name, s->fd))
            rc = shm_unlink(s->name) == 0 ? 1 : -errno;
    }
    drop(s->fd, keep_mapping ? NULL : s->h, s->size);
    free(s);
    return rc;
}

const char *ft_shmseg_name_of(const ft_shmseg_t *s)
{
    return s->name;
}

const void *ft_shmseg_base(const ft_shmseg_t *s)
{
    return s->h;
}

uint64_t ft_shmseg_size(const ft_shmseg_t *s)
{
    return s->size;
}

uint32_t ft_shmseg_units(const ft_shmseg_t *s)
{
    return s->h->n_units;
}

void *ft_shmseg_unit_data(const ft_shmseg_t *s, uint32_t u)
{
    return u < s->h->n_units ? (char *)s->h + s->h->units[u].offset : NULL;
}

uint64_t ft_shmseg_unit_bytes(const ft_shmseg_t *s, uint32_t u)
{
    return u < s->h->n_units ? s->h->units[u].bytes : 0;
}

int ft_shmseg_owns(const ft_shmseg_t *s, const void *p)
{
    return s != NULL && (const char *)p >= (const char *)s->h && (const char *)p < (const char *)s->h + s->size;
}

/* --- units ------------------------------------------------------------------------ */

int ft_shmseg_unit_try(ft_shmseg_t *s, uint32_t u, uint64_t *sum, int *pid)
{
    if (u >= s->h->n_units)
        return -EINVAL;
    seg_unit_t *un = &s->h->units[u];
    *pid = 0;
    if (__atomic_load_n(&un->state, __ATOMIC_ACQUIRE) == FT_SHMSEG_COMPLETE) {
        *sum = un->sum;
        return FT_SHMSEG_READY;
    }
    if (lock_try(s->fd, F_WRLCK, LOCK_UNIT(u)) != 0) {
        *pid = __atomic_load_n(&un->pid, __ATOMIC_RELAXED);
        return FT_SHMSEG_BUSY;
    }
    uint32_t state = __atomic_load_n(&un->state, __ATOMIC_ACQUIRE);
    if (state == FT_SHMSEG_COMPLETE) { /* completed between the two looks */
        unlock(s->fd, LOCK_UNIT(u));
        *sum = un->sum;
        return FT_SHMSEG_READY;
    }
    /* Its pages are reserved now: on a full tmpfs, a store into a page that cannot be
     * had is a SIGBUS in the filler, and a failed reservation only a private copy. */
    int err = un->bytes > 0 ? posix_fallocate(s->fd, (off_t)un->offset, (off_t)un->bytes) : 0;
    if (err != 0) {
        unlock(s->fd, LOCK_UNIT(u));
        return -err;
    }
    *pid = state == FT_SHMSEG_FILLING ? un->pid : 0;
    __atomic_store_n(&un->pid, (int32_t)getpid(), __ATOMIC_RELAXED);
    __atomic_store_n(&un->state, (uint32_t)FT_SHMSEG_FILLING, __ATOMIC_RELEASE);
    return FT_SHMSEG_CLAIMED;
}

int ft_shmseg_unit_wait(ft_shmseg_t *s, uint32_t u, uint64_t deadline_ns, uint64_t *sum, int *pid)
{
    unsigned us = 200;
    for (;;) {
        int rc = ft_shmseg_unit_try(s, u, sum, pid);
        if (rc != FT_SHMSEG_BUSY || (deadline_ns != 0 && now_ns() >= deadline_ns))
            return rc;
        nap(&us);
    }
}

/* 1 when this description holds unit u's claim: F_OFD_GETLK reports no conflict for
 * our own lock, so the test is that nobody else could take it and the state is ours. */
static int claimed_here(ft_shmseg_t *s, uint32_t u)
{
    seg_unit_t *un = &s->h->units[u];
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_UNIT(u), .l_len = 1 };
    return fcntl(s->fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK &&
           __atomic_load_n(&un->state, __ATOMIC_ACQUIRE) == FT_SHMSEG_FILLING &&
           __atomic_load_n(&un->pid, __ATOMIC_RELAXED) == (int32_t)getpid();
}

int ft_shmseg_unit_complete(ft_shmseg_t *s, uint32_t u, uint64_t sum)
{
    if (u >= s->h->n_units || !claimed_here(s, u))
        return -EPERM;
    seg_unit_t *un = &s->h->units[u];
    un->sum = sum;
    __atomic_store_n(&un->state, (uint32_t)FT_SHMSEG_COMPLETE, __ATOMIC_RELEASE);
    unlock(s->fd, LOCK_UNIT(u));
    return 0;
}

void ft_shmseg_unit_abandon(ft_shmseg_t *s, uint32_t u)
{
    if (u >= s->h->n_units || !claimed_here(s, u))
        return;
    seg_unit_t *un = &s->h->units[u];
    __atomic_store_n(&un->pid, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&un->state, (uint32_t)FT_SHMSEG_EMPTY, __ATOMIC_RELEASE);
    unlock(s->fd, LOCK_UNIT(u));
}

int ft_shmseg_unit_state(const ft_shmseg_t *s, uint32_t u, int *pid)
{
    if (u >= s->h->n_units)
        return -EINVAL;
    if (pid != NULL)
        *pid = __atomic_load_n(&s->h->units[u].pid, __ATOMIC_RELAXED);
    return (int)__atomic_load_n(&s->h->units[u].state, __ATOMIC_ACQUIRE);
}

/* --- clean-up ----------------------------------------------------------------------- */

/* 1 when name (a directory entry) is "ft-<ns>-" and 16 hex digits: another
 * namespace's segments ("ft-<ns>-x-..." of namespace "<ns>-x") do not match. */
static int of_namespace(const char *entry, const char *ns)
{
    size_t n = strlen(ns);
    if (strncmp(entry, "ft-", 3) != 0 || strncmp(entry + 3, ns, n) != 0 || entry[3 + n] != '-')
        return 0;
    const char *hex = entry + 4 + n;
    if (strlen(hex) != 16)
        return 0;
    for (int i = 0; i < 16; i++)
        if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f')))
            return 0;
    return 1;
}

int ft_shmseg_clean(const char *ns, void (*report)(void *ctx, const char *name, int in_use, int err), void *ctx)
{
    if (!ft_shmseg_namespace_ok(ns))
        return -EINVAL;
    DIR *d = opendir(SHM_DIR);
    if (d == NULL)
        return errno == ENOENT ? 0 : -errno;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!of_namespace(e->d_name, ns))
            continue;
        char name[sizeof e->d_name + 1];
        snprintf(name, sizeof name, "/%s", e->d_name);
        int in_use = 0;
        int fd = shm_open(name, O_RDONLY, 0);
        if (fd >= 0) {
            struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = LOCK_ATTACH, .l_len = 1 };
            in_use = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
            close(fd);
        }
        int err = shm_unlink(name) == 0 ? 0 : errno;
        removed += err == 0;
        if (report != NULL)
            report(ctx, name, in_use, err);
    }
    closedir(d);
    return removed;
}

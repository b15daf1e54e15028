/* shmseg.h - a POSIX shared memory segment that holds the host copies of a model's
 * units for several processes at once (FT_SHM_ENABLED): its name, its header, whether
 * an existing one may be trusted, who fills each unit, and who removes it.
 *
 * Owns: the segments it opens (an ft_shmseg_t each) and the rules every process of a
 * namespace follows on them. No CUDA: what a unit's bytes are and how they are checked
 * is the caller's (shim/shmstore.c); this module hands out a unit's bytes only to one
 * filler at a time and says when they are complete.
 *
 * The segment is "/ft-<namespace>-<fingerprint as 16 hex digits>": the fingerprint
 * (the caller's hash of the model: region sizes, unit layout, content sums) keeps
 * different models of one namespace apart. Its header holds a magic, a version, the
 * fingerprint, each unit's place and state (empty, filling, complete), its content sum
 * and the pid that filled it.
 *
 * Liveness is the kernel's, through open-file-description (OFD) locks on the segment's
 * descriptor, which a process that dies releases whatever way it dies:
 *   GATE    exclusive while a process opens, judges or leaves the segment (short)
 *   ATTACH  shared by every process attached; a process that can take it exclusive is
 *           alone, so a segment found with nobody attached was left by a run that
 *           died (normal exits remove it) and is replaced, never trusted
 *   UNIT u  exclusive by the process filling unit u; a unit found "filling" with that
 *           lock free was being filled by a process that died: the next one takes over
 * A unit's state changes only under its UNIT lock; "complete" is stored with release
 * order after its bytes, so a reader that sees it (acquire) sees the bytes.
 *
 * Not thread-safe: a process uses one segment from one thread at a time (the shim
 * holds its residency lock). Linux: OFD locks, and /dev/shm for ft_shmseg_clean. */
#ifndef FT_SHMSEG_H
#define FT_SHMSEG_H

#include <stddef.h>
#include <stdint.h>

/* "/ft-" + namespace + "-" + 16 hex digits + NUL fits NAME_MAX with room to spare. */
#define FT_SHMSEG_NAMESPACE_MAX 200
#define FT_SHMSEG_NAME_MAX 256

/* 1 when ns may name segments: 1 to FT_SHMSEG_NAMESPACE_MAX characters of
 * [A-Za-z0-9._-], not starting with '.' and holding no "..". So the name it gives
 * has no '/' and cannot lead shm_open anywhere but the segment folder. Inline, so
 * that config/ checks FT_SHM_NAMESPACE with this very rule without linking core/. */
static inline int ft_shmseg_namespace_ok(const char *ns)
{
    size_t n = 0;
    if (ns == NULL || ns[0] == '\0' || ns[0] == '.')
        return 0;
    for (; ns[n] != '\0'; n++) {
        char c = ns[n];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok || n >= FT_SHMSEG_NAMESPACE_MAX || (c == '.' && ns[n + 1] == '.'))
            return 0;
    }
    return 1;
}

/* The segment name of namespace ns and a fingerprint, into buf. 0, or -EINVAL (ns not
 * ft_shmseg_namespace_ok, buf too small). */
int ft_shmseg_name(char *buf, size_t len, const char *ns, uint64_t fingerprint);

/* The fingerprint: FT_SHMSEG_FP_START, then every value mixed in, in order. */
#define FT_SHMSEG_FP_START 0x6a09e667f3bcc908ull
uint64_t ft_shmseg_fp_add(uint64_t h, uint64_t v);

typedef struct ft_shmseg ft_shmseg_t;

/* What ft_shmseg_open found. */
typedef struct {
    int created;     /* this process made the segment */
    int replaced;    /* a stale one of that name (nobody attached) was removed first */
    char why[512];   /* on failure: what was refused or failed, naming the segment */
} ft_shmseg_info_t;

/* Attaches to the segment of (ns, fingerprint) laid out for n_units units of
 * unit_bytes[u] bytes, creating it when there is none (mode 0600, or 0660 with group),
 * replacing it when nobody is attached to it. An existing segment is trusted only when
 * it is a regular file owned by this process's effective uid (with group: or by its
 * group, mode 0660), its mode has no bit beyond 0600 (with group: 0660), and its
 * header and layout are this model's. deadline_ns (CLOCK_MONOTONIC, 0: none) bounds the
 * wait for another process inside its open or close. 0 and *out on success;
 * otherwise *out NULL, info->why says why, and:
 *   -EACCES  refused: wrong owner, mode or kind (never used, never removed)
 *   -EPROTO  in use by live processes with another layout or version under that name
 *   -EINVAL  bad arguments; -ETIMEDOUT the deadline passed; other -errno from the OS */
int ft_shmseg_open(ft_shmseg_t **out, const char *ns, uint64_t fingerprint, const uint64_t *unit_bytes,
                   uint32_t n_units, int group, uint64_t deadline_ns, ft_shmseg_info_t *info);

/* Detaches; the last process attached removes the segment (when its name still
 * leads to it). A forked child of the process that attached only lets go of its
 * mapping (its parent is attached through the same description). 1 when removed, 0
 * when others remain, -errno on an error (the segment is let go of all the same).
 * deadline_ns as for ft_shmseg_open; past it, the process leaves without removing.
 * keep_mapping: the bytes stay mapped (a process about to end, whose device may still
 * be reading them), else they are unmapped with the rest. */
int ft_shmseg_close(ft_shmseg_t *s, uint64_t deadline_ns, int keep_mapping);

const char *ft_shmseg_name_of(const ft_shmseg_t *s);
/* The mapping: its first byte and its size. */
const void *ft_shmseg_base(const ft_shmseg_t *s);
uint64_t ft_shmseg_size(const ft_shmseg_t *s);
uint32_t ft_shmseg_units(const ft_shmseg_t *s);
/* Unit u's bytes in the mapping (page-aligned) and their count; NULL / 0 past the end. */
void *ft_shmseg_unit_data(const ft_shmseg_t *s, uint32_t u);
uint64_t ft_shmseg_unit_bytes(const ft_shmseg_t *s, uint32_t u);
/* 1 when p lies in the mapping. */
int ft_shmseg_owns(const ft_shmseg_t *s, const void *p);

/* A unit's states in the header, and what ft_shmseg_unit_try / _wait answer. */
enum { FT_SHMSEG_EMPTY = 0, FT_SHMSEG_FILLING = 1, FT_SHMSEG_COMPLETE = 2 };
enum {
    FT_SHMSEG_READY = 1,   /* complete: *sum is the sum its filler recorded */
    FT_SHMSEG_CLAIMED,     /* the caller holds it and fills it (ft_shmseg_unit_complete) */
    FT_SHMSEG_BUSY,        /* a live process is filling it (*pid) */
};

/* One look at unit u: READY, CLAIMED (its space reserved in the segment: *pid is the
 * filler that died while filling it, 0 when it was empty), or BUSY (*pid fills it).
 * -ENOSPC when the space for its bytes cannot be reserved (the segment folder is
 * full: the unit is left empty), -EINVAL past the end. */
int ft_shmseg_unit_try(ft_shmseg_t *s, uint32_t u, uint64_t *sum, int *pid);

/* ft_shmseg_unit_try until it is not BUSY, or until deadline_ns (CLOCK_MONOTONIC, 0:
 * none), when it answers BUSY. */
int ft_shmseg_unit_wait(ft_shmseg_t *s, uint32_t u, uint64_t deadline_ns, uint64_t *sum, int *pid);

/* The claimed unit u is filled: its state complete, its sum recorded, its claim
 * released. 0, or -EPERM when the caller did not claim it. */
int ft_shmseg_unit_complete(ft_shmseg_t *s, uint32_t u, uint64_t sum);

/* The claimed unit u could not be filled: back to empty, its claim released. */
void ft_shmseg_unit_abandon(ft_shmseg_t *s, uint32_t u);

/* The state of unit u in the header (for reports and tests); -EINVAL past the end. */
int ft_shmseg_unit_state(const ft_shmseg_t *s, uint32_t u, int *pid);

/* Removes every segment of namespace ns (any fingerprint) from the segment folder,
 * calling report(ctx, name, in_use, err) for each one found: in_use 1 when a process
 * was attached to it (it keeps its mapping; the next process creates a new segment),
 * err 0 or the errno of its removal. The count removed, or -errno (-EINVAL: ns not
 * ft_shmseg_namespace_ok). */
int ft_shmseg_clean(const char *ns, void (*report)(void *ctx, const char *name, int in_use, int err),
                    void *ctx);

#endif

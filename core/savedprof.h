/* savedprof.h - the saved profile file (FT_PROFILE_DIR): what one run learned of a
 * model, so that the next start of the same program can stream from its first pass.
 *
 * Owns the file's contents and their encoding only; the shim (shim/savedprof.c)
 * decides when to write one, and whether the model in front of it is the one a file
 * describes. The container is the trace file's (core/trace.h: magic, version, records,
 * an END record with a count and a CRC-32; written to a temporary file renamed into
 * place), with record types of its own; docs/planning.md ("Saved profiles") lists
 * them. A file that does not read back whole is refused with a one-line reason. */
#ifndef FT_SAVEDPROF_H
#define FT_SAVEDPROF_H

#include <stddef.h>
#include <stdint.h>

#include "core/discovery.h"

/* Bumped when a record's layout changes: a profile of another version is ignored. */
#define FT_SAVEDPROF_VERSION 1u

/* Record types, apart from the trace's (an ft-trace of a profile file knows them). */
enum {
    FT_SAVEDPROF_HEADER = 0x100,  /* u32 profile version, str FlexTensor version, str program,
                                     str device */
    FT_SAVEDPROF_REGIONS = 0x101, /* u32 n, n x (u32 id, u64 size, u64 hash, u32 unit, u32 shared,
                                     u32 direct) */
    FT_SAVEDPROF_KERNELS = 0x102, /* u32 n, n x str name */
    FT_SAVEDPROF_PASS = 0x103,    /* u32 n, n x (u32 kernel, u32 k, k x u32 region id) */
    FT_SAVEDPROF_UNITS = 0x104,   /* u32 n, n x (str name, u64 bytes, u32 first launch, u32 last
                                     launch, u32 k, k x u32 region id, f64 median us) */
    FT_SAVEDPROF_TRACK = 0x105,   /* u32 explicit marks (0, or the boundary source), u32 start
                                     kernel, u32 start region */
    FT_SAVEDPROF_LINK = 0x106,    /* u64 bytes per copy, then in GB/s: f64 host to device, f64
                                     device to host, f64 and f64 both at once; f64 latency us
                                     (an f64 is the u64 of its IEEE-754 bits) */
    FT_SAVEDPROF_PLAN = 0x107,    /* u64 budget, u64 other bytes, u32 slots, u64 step ns,
                                     u32 n, n x u32 resident */
};

typedef struct {
    char ft_version[32], program[256], device[256];
    ft_disc_saved_t disc;
    double *median_us;          /* per unit */
    /* The measured link (profiling.c's bw_t, in GB/s and us). */
    uint64_t link_bytes;
    double h2d, d2h, h2d_both, d2h_both, latency_us;
    /* The plan the run made from it. */
    uint64_t budget, other_bytes, step_ns;
    uint32_t slots;
    uint32_t *resident;         /* per unit */
} ft_savedprof_t;

void ft_savedprof_free(ft_savedprof_t *p);
/* Writes p to path atomically (a temporary file renamed into place). 0 or -errno. */
int ft_savedprof_write(const ft_savedprof_t *p, const char *path);
/* Reads a whole file into *p. 0; <0 with a one-line reason in err (not a profile,
 * truncated, corrupt, another profile version, records that disagree). */
int ft_savedprof_parse(const unsigned char *data, size_t size, ft_savedprof_t *p, char *err, size_t errlen);
int ft_savedprof_load(const char *path, ft_savedprof_t *p, char *err, size_t errlen);

#endif

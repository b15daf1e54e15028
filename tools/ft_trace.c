/* ft-trace - print what a FlexTensor trace file holds.
 *
 *   ft-trace [--json] [--chrome OUT.json] [--timeline OUT.svg] [--] FILE
 *   ft-trace --profile FILE      a saved profile (FT_PROFILE_DIR)
 *   ft-trace --version
 *
 * Owns: reading a trace into memory, checking that its records agree with each other,
 * and the two renderings (text tables, one JSON object) of the same report.
 *
 * Nothing is printed until everything is known to be sound: the file is validated as a
 * whole first (core/trace.c), then every record is parsed into memory and checked
 * against the others (indices in range, counts within their payload, units inside the
 * iteration). A truncated, corrupt or inconsistent file gets a one-line reason on
 * stderr and exit status 1, never a partial or wrong report.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/trace.h"
#include "core/savedprof.h"
#include "tools/ft_timeline.h"

#ifndef FT_VERSION
#error "FT_VERSION comes from the Makefile (its one source)"
#endif

#define NO_UNIT 0xffffffffu

static const char *const flag_names[] = { "vmm", "candidate", "weight", "written", "changed",
                                          "freed" };
static const char *const state_names[] = { "waiting", "observing", "done" };
static const char *const source_names[] = { "detector", "ft_iteration_mark", "marker kernel" };
static const char *const source_text[] = { "the detector", "ft_iteration_mark",
                                           "the marker kernel" };
static const char *const record_names[] = { "?", "PROCESS", "CONFIG", "CALLS", "DISCOVERY",
                                            "REGIONS", "KERNELS", "ITERATION", "UNITS",
                                            "PROFILE", "BANDWIDTH", "PLAN", "RESIDENCY",
                                            "MISSES", "TRACKING", "TIMING", "TIMELINE" };
#define N_RECORD_TYPES 17
#define NONE 0xffffffffu

typedef struct {
    const char *s;            /* into the file's bytes, not NUL-terminated */
    uint32_t n;
} str_t;

typedef struct {
    uint32_t id, flags, unit;
    uint64_t base, size;
    int touched;              /* by a launch of the recorded iteration */
    int listed;               /* by a unit */
} region_t;

typedef struct {
    str_t name;
    uint64_t launches;
    uint32_t iter_launches;   /* in the recorded iteration */
    uint32_t iter_bare;       /* of those, touching no region */
    uint32_t weight_regions;  /* distinct weights its iteration launches touch */
} kernel_t;

typedef struct {
    uint32_t kernel, n_ids;
    size_t first_id;          /* into iter_ids */
} launch_t;

typedef struct {
    str_t name;
    uint64_t bytes;
    uint32_t first, last, offload, n_ids;
    size_t first_id;          /* into unit_ids */
} unit_t;

typedef struct {
    str_t name;
    uint32_t samples;
    uint64_t min_ns, median_ns, max_ns;
} prof_unit_t;

typedef struct {
    const unsigned char *data;
    size_t rec_off;           /* the record being parsed, for messages */
    const char *rec_name;
    char err[512];
    int seen[N_RECORD_TYPES];
    size_t offset[N_RECORD_TYPES]; /* each record's byte offset, for messages */

    uint32_t pid;
    uint64_t start_ns, end_ns;
    str_t program, device;
    uint32_t n_config;
    str_t *config;            /* n_config x (name, value, source) */
    uint32_t n_calls;
    str_t *call_name;
    uint64_t *call_count;

    uint32_t state, iterations, source;
    uint64_t launches, launches_bare;
    uint32_t n_regions;
    region_t *regions;
    uint32_t n_kernels;
    kernel_t *kernels;
    uint32_t n_iter;
    launch_t *iter;
    uint32_t *iter_ids;
    uint32_t n_units;
    unit_t *units;
    uint32_t *unit_ids;
    uint32_t prof_passes, n_prof;
    prof_unit_t *prof;
    uint64_t bw_bytes, bw[4]; /* KB/s: h2d, d2h, both h2d, both d2h */
    uint32_t plan_memory_mode, plan_slots, plan_n;
    uint64_t plan_budget, plan_other, plan_slot_bytes, plan_device, plan_step_ns, plan_all_ns;
    uint32_t *plan_resident, *plan_slot;
    uint64_t *plan_stall_ns;
    /* loads, prefetched, misses, bytes in, unloads, peak held, steps, median ns,
     * predicted ns */
    uint64_t res[19];         /* 9 fields, then 6 that older traces lack, then 4 more */
    int res_ext;              /* the 6 later fields are present */
    int res_outside;          /* and the 4 after them: device memory outside FlexTensor's
                                 count at the first sample, its most, at the last; samples */
    /* TRACKING: rule, start position, kernel, region, lost warning; starts, launches
     * since the last one */
    uint32_t trk_rule, trk_start, trk_kernel, trk_region, trk_lost;
    uint64_t trk_starts, trk_since;
    uint32_t n_miss;
    struct miss_rec {
        uint32_t unit, off_script;
        uint64_t pass, pos1;
        str_t kernel;
    } *miss;

    /* TIMING: passes, lost, steps' sum, predicted, stall; per unit: streamed, then the
     * 12 counts of tm_unit_t's order (loads, hits, misses, bytes in, bytes out,
     * unloads, copies timed, transfer, overlap, compute passes, compute, stall) */
    uint64_t tm[5];
    uint32_t n_tm;
    struct tm_unit {
        uint32_t streamed;
        uint64_t bytes;       /* what one load copies in */
        uint64_t v[12];
    } *tm_unit;
    uint32_t n_tl;            /* TIMELINE: passes kept */
    ftl_pass_t *tl;
    ftl_event_t *tl_ev;       /* every pass's events, end to end */

    /* Derived once everything checks out. */
    uint64_t tracked_bytes, weight_bytes, unlisted_weight_bytes, late_bytes;
    uint64_t not_weight_bytes;
    uint32_t n_weights, n_late, n_not_weights, iter_bare, iter_unknown_ids;
    uint32_t *kernel_order;   /* kernels by launches in the iteration, descending */
    uint32_t *not_weight_order; /* candidates that are not weights, largest first */
} trace_t;

/* Records the first error (later ones are consequences) and returns -1. */
static int bad(trace_t *t, const char *fmt, ...)
{
    if (t->err[0])
        return -1;
    int n = 0;
    if (t->rec_name)
        n = snprintf(t->err, sizeof t->err, "inconsistent %s record at byte %zu: ", t->rec_name,
                     t->rec_off);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->err + n, sizeof t->err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int short_payload(trace_t *t, const char *what, uint32_t i)
{
    return bad(t, "payload ends inside %s %u", what, i);
}

/* Reads an entry count and checks that n entries of at least min_size bytes each fit
 * in what is left of the payload, before anything is allocated for them. */
static int get_count(trace_t *t, ft_trace_cursor_t *c, size_t min_size, uint32_t *n)
{
    if (ft_trace_get_u32(c, n))
        return bad(t, "payload ends before its entry count");
    if ((uint64_t)*n * min_size > c->left)
        return bad(t, "count %u overruns the payload (%zu bytes left, %zu per entry at least)",
                   *n, c->left, min_size);
    return 0;
}

static void *alloc_array(trace_t *t, size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL)
        bad(t, "out of memory");
    return p;
}

static int get_str(ft_trace_cursor_t *c, str_t *s) { return ft_trace_get_str(c, &s->s, &s->n); }

static int parse_process(trace_t *t, ft_trace_cursor_t *c)
{
    if (ft_trace_get_u32(c, &t->pid) || ft_trace_get_u64(c, &t->start_ns) ||
        ft_trace_get_u64(c, &t->end_ns) || get_str(c, &t->program) || get_str(c, &t->device))
        return bad(t, "payload ends inside the process fields");
    return 0;
}

static int parse_config(trace_t *t, ft_trace_cursor_t *c)
{
    if (get_count(t, c, 12, &t->n_config) ||
        (t->config = alloc_array(t, (size_t)t->n_config * 3, sizeof *t->config)) == NULL)
        return -1;
    for (uint32_t i = 0; i < t->n_config; i++)
        if (get_str(c, &t->config[3 * i]) || get_str(c, &t->config[3 * i + 1]) ||
            get_str(c, &t->config[3 * i + 2]))
            return short_payload(t, "option", i);
    return 0;
}

static int parse_calls(trace_t *t, ft_trace_cursor_t *c)
{
    if (get_count(t, c, 12, &t->n_calls) ||
        (t->call_name = alloc_array(t, t->n_calls, sizeof *t->call_name)) == NULL ||
        (t->call_count = alloc_array(t, t->n_calls, sizeof *t->call_count)) == NULL)
        return -1;
    for (uint32_t i = 0; i < t->n_calls; i++)
        if (get_str(c, &t->call_name[i]) || ft_trace_get_u64(c, &t->call_count[i]))
            return short_payload(t, "entry point", i);
    return 0;
}

static int parse_discovery(trace_t *t, ft_trace_cursor_t *c)
{
    if (ft_trace_get_u32(c, &t->state) || ft_trace_get_u32(c, &t->iterations) ||
        ft_trace_get_u32(c, &t->source) || ft_trace_get_u64(c, &t->launches) ||
        ft_trace_get_u64(c, &t->launches_bare))
        return bad(t, "payload ends inside the discovery fields");
    if (t->state > 2)
        return bad(t, "state %u out of range (0..2)", t->state);
    if (t->source > 2)
        return bad(t, "boundary source %u out of range (0..2)", t->source);
    if (t->launches_bare > t->launches)
        return bad(t, "%" PRIu64 " launches touching no region, of %" PRIu64 " in all",
                   t->launches_bare, t->launches);
    return 0;
}

static int parse_regions(trace_t *t, ft_trace_cursor_t *c)
{
    if (get_count(t, c, 28, &t->n_regions) ||
        (t->regions = alloc_array(t, t->n_regions, sizeof *t->regions)) == NULL)
        return -1;
    for (uint32_t i = 0; i < t->n_regions; i++) {
        region_t *r = &t->regions[i];
        if (ft_trace_get_u32(c, &r->id) || ft_trace_get_u64(c, &r->base) ||
            ft_trace_get_u64(c, &r->size) || ft_trace_get_u32(c, &r->flags) ||
            ft_trace_get_u32(c, &r->unit))
            return short_payload(t, "region", i);
        /* Sorted by id, which also makes ids unique and lookups a binary search. */
        if (i > 0 && r->id <= t->regions[i - 1].id)
            return bad(t, "entry %u has region id %u after id %u (ids must increase)", i, r->id,
                       t->regions[i - 1].id);
        if (r->flags & ~(uint32_t)FT_TRACE_RF_KNOWN)
            return bad(t, "region %u has unknown flag bits 0x%x", r->id,
                       r->flags & ~(uint32_t)FT_TRACE_RF_KNOWN);
    }
    return 0;
}

static int parse_kernels(trace_t *t, ft_trace_cursor_t *c)
{
    if (get_count(t, c, 12, &t->n_kernels) ||
        (t->kernels = alloc_array(t, t->n_kernels, sizeof *t->kernels)) == NULL)
        return -1;
    for (uint32_t i = 0; i < t->n_kernels; i++)
        if (get_str(c, &t->kernels[i].name) || ft_trace_get_u64(c, &t->kernels[i].launches))
            return short_payload(t, "kernel", i);
    return 0;
}

/* Reads the n region ids of entry i (a "launch", a "unit") into ids from *next on, and
 * sets *first to where they start. Every id takes 4 bytes of payload, so the payload
 * bounds their count; a count beyond it is refused before anything is read. */
static int get_ids(trace_t *t, ft_trace_cursor_t *c, const char *what, uint32_t i, uint32_t n,
                   uint32_t *ids, size_t *next, size_t *first)
{
    if ((uint64_t)n * 4 > c->left)
        return bad(t, "%s %u: %u region ids overrun the payload (%zu bytes left)", what, i, n,
                   c->left);
    *first = *next;
    for (uint32_t k = 0; k < n; k++)
        ft_trace_get_u32(c, &ids[(*next)++]);
    return 0;
}

/* The id arrays are sized by the payload (get_ids). */
static int parse_iteration(trace_t *t, ft_trace_cursor_t *c)
{
    if (get_count(t, c, 8, &t->n_iter) ||
        (t->iter = alloc_array(t, t->n_iter, sizeof *t->iter)) == NULL ||
        (t->iter_ids = alloc_array(t, c->left / 4, sizeof *t->iter_ids)) == NULL)
        return -1;
    size_t ids = 0;
    for (uint32_t i = 0; i < t->n_iter; i++) {
        launch_t *l = &t->iter[i];
        if (ft_trace_get_u32(c, &l->kernel) || ft_trace_get_u32(c, &l->n_ids))
            return short_payload(t, "launch", i);
        if (get_ids(t, c, "launch", i, l->n_ids, t->iter_ids, &ids, &l->first_id) != 0)
            return -1;
    }
    return 0;
}

static int parse_units(trace_t *t, ft_trace_cursor_t *c)
{
    if (get_count(t, c, 28, &t->n_units) ||
        (t->units = alloc_array(t, t->n_units, sizeof *t->units)) == NULL ||
        (t->unit_ids = alloc_array(t, c->left / 4, sizeof *t->unit_ids)) == NULL)
        return -1;
    size_t ids = 0;
    for (uint32_t i = 0; i < t->n_units; i++) {
        unit_t *u = &t->units[i];
        if (get_str(c, &u->name) || ft_trace_get_u64(c, &u->bytes) ||
            ft_trace_get_u32(c, &u->first) || ft_trace_get_u32(c, &u->last) ||
            ft_trace_get_u32(c, &u->offload) || ft_trace_get_u32(c, &u->n_ids))
            return short_payload(t, "unit", i);
        if (get_ids(t, c, "unit", i, u->n_ids, t->unit_ids, &ids, &u->first_id) != 0)
            return -1;
    }
    return 0;
}

static int parse_profile(trace_t *t, ft_trace_cursor_t *c)
{
    if (ft_trace_get_u32(c, &t->prof_passes) || get_count(t, c, 32, &t->n_prof) ||
        (t->prof = alloc_array(t, t->n_prof, sizeof *t->prof)) == NULL)
        return short_payload(t, "profile header", 0);
    for (uint32_t i = 0; i < t->n_prof; i++) {
        prof_unit_t *u = &t->prof[i];
        if (get_str(c, &u->name) || ft_trace_get_u32(c, &u->samples) ||
            ft_trace_get_u64(c, &u->min_ns) || ft_trace_get_u64(c, &u->median_ns) ||
            ft_trace_get_u64(c, &u->max_ns))
            return short_payload(t, "profiled unit", i);
        if (u->samples > t->prof_passes || u->min_ns > u->median_ns || u->median_ns > u->max_ns)
            return bad(t, "profiled unit %u: %u samples of %u passes, min %" PRIu64
                       " median %" PRIu64 " max %" PRIu64 " ns are not in order", i, u->samples,
                       t->prof_passes, u->min_ns, u->median_ns, u->max_ns);
    }
    return 0;
}

static int parse_bandwidth(trace_t *t, ft_trace_cursor_t *c)
{
    if (ft_trace_get_u64(c, &t->bw_bytes))
        return short_payload(t, "bandwidth", 0);
    for (int i = 0; i < 4; i++)
        if (ft_trace_get_u64(c, &t->bw[i]))
            return short_payload(t, "bandwidth", (uint32_t)i);
    return 0;
}

static int parse_plan(trace_t *t, ft_trace_cursor_t *c)
{
    if (ft_trace_get_u32(c, &t->plan_memory_mode) || ft_trace_get_u64(c, &t->plan_budget) ||
        ft_trace_get_u64(c, &t->plan_other) || ft_trace_get_u32(c, &t->plan_slots) ||
        ft_trace_get_u64(c, &t->plan_slot_bytes) || ft_trace_get_u64(c, &t->plan_device) ||
        ft_trace_get_u64(c, &t->plan_step_ns) || ft_trace_get_u64(c, &t->plan_all_ns) ||
        get_count(t, c, 16, &t->plan_n) ||
        (t->plan_resident = alloc_array(t, t->plan_n, sizeof *t->plan_resident)) == NULL ||
        (t->plan_slot = alloc_array(t, t->plan_n, sizeof *t->plan_slot)) == NULL ||
        (t->plan_stall_ns = alloc_array(t, t->plan_n, sizeof *t->plan_stall_ns)) == NULL)
        return short_payload(t, "plan header", 0);
    for (uint32_t i = 0; i < t->plan_n; i++) {
        if (ft_trace_get_u32(c, &t->plan_resident[i]) || ft_trace_get_u32(c, &t->plan_slot[i]) ||
            ft_trace_get_u64(c, &t->plan_stall_ns[i]))
            return short_payload(t, "planned unit", i);
        if (!t->plan_resident[i] && t->plan_slot[i] >= t->plan_slots)
            return bad(t, "planned unit %u: slot %u of %u slots", i, t->plan_slot[i], t->plan_slots);
    }
    return 0;
}

static int parse_residency(trace_t *t, ft_trace_cursor_t *c)
{
    for (uint32_t i = 0; i < 9; i++)
        if (ft_trace_get_u64(c, &t->res[i]))
            return short_payload(t, "residency field", i);
    /* The later fields come together or not at all (a trace from before them). */
    if (c->left > 0) {
        for (uint32_t i = 9; i < 15; i++)
            if (ft_trace_get_u64(c, &t->res[i]))
                return short_payload(t, "residency field", i);
        t->res_ext = 1;
        if (t->res[9] > t->res[4])
            return bad(t, "%" PRIu64 " copies back of %" PRIu64 " unloads", t->res[9], t->res[4]);
    }
    /* Then, from the seventh session's traces on, the memory outside FlexTensor's count. */
    if (c->left > 0) {
        for (uint32_t i = 15; i < 19; i++)
            if (ft_trace_get_u64(c, &t->res[i]))
                return short_payload(t, "residency field", i);
        t->res_outside = 1;
        if (t->res[18] > 0 && (t->res[16] < t->res[15] || t->res[16] < t->res[17]))
            return bad(t, "memory outside the count: at most %" PRIu64 " bytes, below its first (%" PRIu64
                       ") or last (%" PRIu64 ")", t->res[16], t->res[15], t->res[17]);
    }
    if (t->res[1] > t->res[0] || t->res[4] > t->res[0])
        return bad(t, "%" PRIu64 " prefetched and %" PRIu64 " unloads of %" PRIu64 " loads",
                   t->res[1], t->res[4], t->res[0]);
    if ((t->res[6] == 0) != (t->res[7] == 0))
        return bad(t, "%" PRIu64 " measured steps with a median of %" PRIu64 " ns", t->res[6],
                   t->res[7]);
    return 0;
}

static int parse_misses(trace_t *t, ft_trace_cursor_t *c)
{
    if (get_count(t, c, 28, &t->n_miss) || (t->miss = alloc_array(t, t->n_miss, sizeof *t->miss)) == NULL)
        return -1;
    for (uint32_t i = 0; i < t->n_miss; i++) {
        struct miss_rec *m = &t->miss[i];
        if (ft_trace_get_u32(c, &m->unit) || ft_trace_get_u64(c, &m->pass) || ft_trace_get_u64(c, &m->pos1) ||
            ft_trace_get_u32(c, &m->off_script) || get_str(c, &m->kernel))
            return short_payload(t, "miss", i);
        if (m->off_script > 1)
            return bad(t, "miss %u: off-script flag %u", i, m->off_script);
    }
    return 0;
}

static int parse_tracking(trace_t *t, ft_trace_cursor_t *c)
{
    if (ft_trace_get_u32(c, &t->trk_rule) || ft_trace_get_u32(c, &t->trk_start) ||
        ft_trace_get_u32(c, &t->trk_kernel) || ft_trace_get_u32(c, &t->trk_region) ||
        ft_trace_get_u64(c, &t->trk_starts) || ft_trace_get_u64(c, &t->trk_since) ||
        ft_trace_get_u32(c, &t->trk_lost))
        return bad(t, "payload ends inside the tracking fields");
    if (t->trk_rule > 3)
        return bad(t, "rule %u out of range (0..3)", t->trk_rule);
    if (t->trk_lost > 1)
        return bad(t, "warning flag %u is not 0 or 1", t->trk_lost);
    if ((t->trk_rule == 1 || t->trk_rule == 2) != (t->trk_kernel != NONE && t->trk_region != NONE))
        return bad(t, "rule %u with kernel %u and region %u", t->trk_rule, t->trk_kernel, t->trk_region);
    return 0;
}

static int parse_timing(trace_t *t, ft_trace_cursor_t *c)
{
    for (uint32_t i = 0; i < 5; i++)
        if (ft_trace_get_u64(c, &t->tm[i]))
            return short_payload(t, "timing field", i);
    if (get_count(t, c, 4 + 13 * 8, &t->n_tm) || (t->tm_unit = alloc_array(t, t->n_tm, sizeof *t->tm_unit)) == NULL)
        return -1;
    for (uint32_t i = 0; i < t->n_tm; i++) {
        struct tm_unit *u = &t->tm_unit[i];
        if (ft_trace_get_u32(c, &u->streamed) || ft_trace_get_u64(c, &u->bytes))
            return short_payload(t, "timed unit", i);
        for (int k = 0; k < 12; k++)
            if (ft_trace_get_u64(c, &u->v[k]))
                return short_payload(t, "timed unit", i);
        if (u->streamed > 1)
            return bad(t, "unit %u: streamed flag %u", i, u->streamed);
        if (u->v[1] + u->v[2] != u->v[0])
            return bad(t, "unit %u: %" PRIu64 " hits and %" PRIu64 " misses of %" PRIu64 " loads", i, u->v[1],
                       u->v[2], u->v[0]);
        if (u->v[6] > u->v[0])
            return bad(t, "unit %u: %" PRIu64 " copies timed of %" PRIu64 " loads", i, u->v[6], u->v[0]);
        /* Loads need not copy the same bytes (a region split after earlier loads
         * copies less from then on; `bytes` is the last load's): only none from none. */
        if (u->v[0] == 0 && (u->v[3] != 0 || u->bytes != 0))
            return bad(t, "unit %u: %" PRIu64 " bytes copied in (%" PRIu64 " a load) by no load", i, u->v[3],
                       u->bytes);
    }
    return 0;
}

static int parse_timeline(trace_t *t, ft_trace_cursor_t *c)
{
    if (get_count(t, c, 40, &t->n_tl) || (t->tl = alloc_array(t, t->n_tl, sizeof *t->tl)) == NULL)
        return -1;
    /* Every event at least 36 bytes: the payload bounds their number. */
    size_t cap = c->left / 36, used = 0;
    if ((t->tl_ev = alloc_array(t, cap, sizeof *t->tl_ev)) == NULL)
        return -1;
    for (uint32_t i = 0; i < t->n_tl; i++) {
        ftl_pass_t *p = &t->tl[i];
        uint32_t n;
        if (ft_trace_get_u64(c, &p->pass) || ft_trace_get_u64(c, &p->start_ns) || ft_trace_get_u64(c, &p->step_ns) ||
            ft_trace_get_u64(c, &p->stall_ns) || ft_trace_get_u32(c, &p->truncated) || get_count(t, c, 36, &n))
            return t->err[0] ? -1 : short_payload(t, "timeline pass", i);
        if (p->truncated > 1)
            return bad(t, "pass %" PRIu64 ": truncated flag %u", p->pass, p->truncated);
        if (i > 0 && p->pass <= t->tl[i - 1].pass)
            return bad(t, "pass %" PRIu64 " after pass %" PRIu64, p->pass, t->tl[i - 1].pass);
        p->n = n;
        p->ev = &t->tl_ev[used];
        for (uint32_t k = 0; k < n; k++, used++) {
            ftl_event_t *e = &t->tl_ev[used];
            if (ft_trace_get_u32(c, &e->kind) || ft_trace_get_u32(c, &e->lane) || ft_trace_get_u32(c, &e->unit) ||
                ft_trace_get_u64(c, &e->wait_ns) || ft_trace_get_u64(c, &e->start_ns) || ft_trace_get_u64(c, &e->end_ns))
                return short_payload(t, "timeline event", k);
            if (e->kind >= FT_TIMING_KINDS || e->lane > 1)
                return bad(t, "pass %" PRIu64 " event %u: kind %u, lane %u", p->pass, k, e->kind, e->lane);
            if (e->end_ns < e->start_ns || e->wait_ns > e->start_ns)
                return bad(t, "pass %" PRIu64 " event %u: ends before it starts", p->pass, k);
        }
    }
    return 0;
}

static int visit(void *ctx, ft_trace_type_t type, ft_trace_cursor_t *c)
{
    static int (*const parse[N_RECORD_TYPES])(trace_t *, ft_trace_cursor_t *) = {
        NULL, parse_process, parse_config, parse_calls, parse_discovery,
        parse_regions, parse_kernels, parse_iteration, parse_units, parse_profile,
        parse_bandwidth, parse_plan, parse_residency, parse_misses, parse_tracking,
        parse_timing, parse_timeline,
    };
    trace_t *t = ctx;
    /* A newer writer's record this reader does not know: skipped, as the format allows
     * (every record carries its length). */
    if ((unsigned)type == 0 || (unsigned)type >= N_RECORD_TYPES)
        return 0;
    t->rec_off = t->offset[type] = (size_t)(c->p - t->data) - 8;
    t->rec_name = record_names[type];
    if (t->seen[type]++)
        return bad(t, "a second %s record (the writer writes one)", record_names[type]);
    if (parse[type](t, c) != 0)
        return -1;
    /* A version-1 record has exactly these fields: leftover bytes mean the counts
     * and the payload disagree. */
    if (c->left != 0)
        return bad(t, "%zu bytes left over after the last field", c->left);
    t->rec_name = NULL;
    return 0;
}

static region_t *find_region(const trace_t *t, uint32_t id)
{
    size_t lo = 0, hi = t->n_regions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->regions[mid].id == id)
            return &t->regions[mid];
        if (t->regions[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static const trace_t *sort_ctx;

/* By launches in the iteration, descending; ties keep the record's order (stable). */
static int cmp_kernel(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint32_t lx = sort_ctx->kernels[x].iter_launches, ly = sort_ctx->kernels[y].iter_launches;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* By size, descending; ties by id. */
static int cmp_region_size(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint64_t sx = sort_ctx->regions[x].size, sy = sort_ctx->regions[y].size;
    if (sx != sy)
        return sx > sy ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Messages from here on name record ty. */
static void blame(trace_t *t, ft_trace_type_t ty)
{
    t->rec_name = record_names[ty];
    t->rec_off = t->offset[ty];
}

/* Cross-record checks, then the derived numbers. 0, or -1 with t->err set. */
static int analyse(trace_t *t)
{
    int disc_any = 0;
    for (int ty = FT_TRACE_REGIONS; ty <= FT_TRACE_UNITS; ty++)
        disc_any |= t->seen[ty];
    if (disc_any && !t->seen[FT_TRACE_DISCOVERY])
        return bad(t, "discovery records without the DISCOVERY record");

    blame(t, FT_TRACE_REGIONS);
    for (uint32_t i = 0; i < t->n_regions; i++) {
        region_t *r = &t->regions[i];
        if (r->unit != NO_UNIT && r->unit >= t->n_units)
            return bad(t, "region %u names unit %u, the trace has %u units", r->id, r->unit,
                       t->n_units);
        t->tracked_bytes += r->size;
        if (r->flags & FT_TRACE_RF_WEIGHT) {
            t->n_weights++;
            t->weight_bytes += r->size;
        }
    }

    blame(t, FT_TRACE_ITERATION);
    for (uint32_t i = 0; i < t->n_iter; i++) {
        launch_t *l = &t->iter[i];
        if (l->kernel >= t->n_kernels)
            return bad(t, "launch %u names kernel %u, the trace has %u kernels", i, l->kernel,
                       t->n_kernels);
        kernel_t *k = &t->kernels[l->kernel];
        k->iter_launches++;
        if (l->n_ids == 0) {
            k->iter_bare++;
            t->iter_bare++;
        }
        for (uint32_t j = 0; j < l->n_ids; j++) {
            /* An id the region table lacks is possible (a region freed while its launch
             * was being recorded): counted, not an error. */
            region_t *r = find_region(t, t->iter_ids[l->first_id + j]);
            if (r != NULL)
                r->touched = 1;
            else
                t->iter_unknown_ids++;
        }
    }

    blame(t, FT_TRACE_UNITS);
    for (uint32_t i = 0; i < t->n_units; i++) {
        unit_t *u = &t->units[i];
        if (u->first >= t->n_iter || u->last >= t->n_iter)
            return bad(t, "unit %u (%.*s) %s launch %u is beyond the iteration's %u launches",
                       i, (int)u->name.n, u->name.s, u->first >= t->n_iter ? "first" : "last",
                       u->first >= t->n_iter ? u->first : u->last, t->n_iter);
        if (u->first > u->last)
            return bad(t, "unit %u (%.*s) first launch %u after its last launch %u", i,
                       (int)u->name.n, u->name.s, u->first, u->last);
        if (u->offload > 1)
            return bad(t, "unit %u (%.*s) offload %u is not 0 or 1", i, (int)u->name.n,
                       u->name.s, u->offload);
        uint64_t bytes = 0;
        for (uint32_t j = 0; j < u->n_ids; j++) {
            uint32_t id = t->unit_ids[u->first_id + j];
            region_t *r = find_region(t, id);
            if (r == NULL)
                return bad(t, "unit %u (%.*s) lists region %u, absent from the REGIONS record",
                           i, (int)u->name.n, u->name.s, id);
            if (!(r->flags & FT_TRACE_RF_WEIGHT) || r->unit != i)
                return bad(t, "unit %u (%.*s) lists region %u, which is %s", i, (int)u->name.n,
                           u->name.s, id, !(r->flags & FT_TRACE_RF_WEIGHT) ? "not a weight"
                           : "given to another unit");
            if (r->listed++)
                return bad(t, "unit %u (%.*s) lists region %u twice", i, (int)u->name.n,
                           u->name.s, id);
            bytes += r->size;
        }
        if (bytes != u->bytes)
            return bad(t, "unit %u (%.*s) claims %" PRIu64 " bytes, its regions hold %" PRIu64,
                       i, (int)u->name.n, u->name.s, u->bytes, bytes);
    }

    if (t->seen[FT_TRACE_TRACKING]) {
        blame(t, FT_TRACE_TRACKING);
        if (!t->seen[FT_TRACE_DISCOVERY] || t->state != 2)
            return bad(t, "pass tracking without a finished discovery");
        if (t->trk_kernel != NONE && t->trk_kernel >= t->n_kernels)
            return bad(t, "kernel %u, the trace has %u kernels", t->trk_kernel, t->n_kernels);
        if (t->trk_region != NONE && find_region(t, t->trk_region) == NULL)
            return bad(t, "region %u, absent from the REGIONS record", t->trk_region);
        if (t->trk_kernel != NONE && t->trk_start >= t->n_iter)
            return bad(t, "start %u beyond the iteration's %u launches", t->trk_start, t->n_iter);
    }
    if (t->seen[FT_TRACE_TIMING] && t->seen[FT_TRACE_UNITS] && t->n_tm != 0 && t->n_tm != t->n_units) {
        blame(t, FT_TRACE_TIMING);
        return bad(t, "%u units timed, the trace has %u units", t->n_tm, t->n_units);
    }
    if (t->seen[FT_TRACE_TIMELINE]) {
        blame(t, FT_TRACE_TIMELINE);
        for (uint32_t i = 0; i < t->n_tl; i++)
            for (uint32_t k = 0; k < t->tl[i].n; k++)
                if (t->tl[i].ev[k].unit >= t->n_units)
                    return bad(t, "pass %" PRIu64 " event %u: unit %u, the trace has %u units", t->tl[i].pass, k,
                               t->tl[i].ev[k].unit, t->n_units);
    }
    t->rec_name = NULL;

    for (uint32_t i = 0; i < t->n_regions; i++) {
        region_t *r = &t->regions[i];
        if ((r->flags & FT_TRACE_RF_WEIGHT) && !r->listed)
            t->unlisted_weight_bytes += r->size;
        if (!(r->flags & FT_TRACE_RF_CANDIDATE)) {
            t->n_late++;
            t->late_bytes += r->size;
        } else if (!(r->flags & FT_TRACE_RF_WEIGHT)) {
            t->n_not_weights++;
            t->not_weight_bytes += r->size;
        }
    }

    /* Distinct weights per kernel: (kernel, region index) pairs, sorted, deduplicated. */
    size_t np = 0;
    for (uint32_t i = 0; i < t->n_iter; i++)
        np += t->iter[i].n_ids;
    uint64_t *pairs = alloc_array(t, np, sizeof *pairs);
    t->kernel_order = alloc_array(t, t->n_kernels, sizeof *t->kernel_order);
    if (pairs == NULL || t->kernel_order == NULL) {
        free(pairs);
        return -1;
    }
    np = 0;
    for (uint32_t i = 0; i < t->n_iter; i++)
        for (uint32_t j = 0; j < t->iter[i].n_ids; j++) {
            region_t *r = find_region(t, t->iter_ids[t->iter[i].first_id + j]);
            if (r != NULL && (r->flags & FT_TRACE_RF_WEIGHT))
                pairs[np++] = (uint64_t)t->iter[i].kernel << 32 | (uint64_t)(r - t->regions);
        }
    qsort(pairs, np, sizeof *pairs, cmp_u64);
    for (size_t i = 0; i < np; i++)
        if (i == 0 || pairs[i] != pairs[i - 1])
            t->kernels[pairs[i] >> 32].weight_regions++;
    free(pairs);

    for (uint32_t i = 0; i < t->n_kernels; i++)
        t->kernel_order[i] = i;
    sort_ctx = t;
    qsort(t->kernel_order, t->n_kernels, sizeof *t->kernel_order, cmp_kernel);

    t->not_weight_order = alloc_array(t, t->n_not_weights, sizeof *t->not_weight_order);
    if (t->not_weight_order == NULL)
        return -1;
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_regions; i++)
        if ((t->regions[i].flags & (FT_TRACE_RF_CANDIDATE | FT_TRACE_RF_WEIGHT)) == FT_TRACE_RF_CANDIDATE)
            t->not_weight_order[n++] = i;
    qsort(t->not_weight_order, n, sizeof *t->not_weight_order, cmp_region_size);
    return 0;
}

static void trace_free(trace_t *t)
{
    free(t->tm_unit);
    free(t->tl);
    free(t->tl_ev);
    free(t->config);
    free(t->call_name);
    free(t->call_count);
    free(t->regions);
    free(t->kernels);
    free(t->iter);
    free(t->iter_ids);
    free(t->units);
    free(t->miss);
    free(t->unit_ids);
    free(t->kernel_order);
    free(t->not_weight_order);
    free(t->prof);
    free(t->plan_resident);
    free(t->plan_slot);
    free(t->plan_stall_ns);
}

/* --- helpers for both renderings ------------------------------------------------ */

static const char *human(uint64_t b, char buf[32])
{
    static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB" };
    if (b < 1024) {
        snprintf(buf, 32, "%" PRIu64 " B", b);
        return buf;
    }
    double v = (double)b / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, 32, "%.1f %s", v, unit[u]);
    return buf;
}

static double share(uint64_t part, uint64_t whole)
{
    return whole ? (double)part / (double)whole : 0.0;
}

/* Why a candidate region is not a weight, as words (docs/trace-format.md lists
 * them); NULL-terminated. */
static int reasons(const trace_t *t, const region_t *r, const char *out[6])
{
    int n = 0;
    if (r->flags & FT_TRACE_RF_WRITTEN)
        out[n++] = "written";
    if (r->flags & FT_TRACE_RF_CHANGED)
        out[n++] = "changed";
    if (r->flags & FT_TRACE_RF_FREED)
        out[n++] = "freed";
    /* Before DONE there is no recorded iteration to have been touched in. */
    if (t->state != 2)
        out[n++] = "unfinished";
    else if (!r->touched)
        out[n++] = "untouched";
    if (n == 0)
        out[n++] = "unknown";
    out[n] = NULL;
    return n;
}

static const char *reason_text(const char *word)
{
    return strcmp(word, "written") == 0     ? "written by copy/memset"
           : strcmp(word, "changed") == 0   ? "content changed"
           : strcmp(word, "freed") == 0     ? "freed"
           : strcmp(word, "untouched") == 0 ? "not touched by a kernel in the iteration"
           : strcmp(word, "unfinished") == 0 ? "discovery did not finish"
                                             : "no recorded reason";
}

/* --- text ------------------------------------------------------------------------ */

/* s made printable (control bytes as '?') and cut to width bytes with "..." at the
 * end; a C++ mangled name's start is what tells kernels apart. */
static const char *clip(str_t s, size_t width, char *buf)
{
    size_t n = s.n;
    int cut = width >= 4 && n > width;
    if (cut)
        n = width - 3;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.s[i];
        buf[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    if (cut) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

static str_t kernel_name(const trace_t *t, uint32_t launch)
{
    return t->kernels[t->iter[launch].kernel].name;
}

#define TEXT_MAX_REGIONS 20
#define KW 44 /* kernel name column */
#define NW 16 /* unit name column */
#define LW 22 /* first/last kernel columns */

static void text_discovery(const trace_t *t)
{
    char b1[32], b2[32], buf[KW + 1], buf2[LW + 1], buf3[LW + 1];
    printf("\ndiscovery\n");
    printf("  state            %s, %u iteration%s seen, boundaries from %s\n",
           state_names[t->state], t->iterations, t->iterations == 1 ? "" : "s",
           source_text[t->source]);
    printf("  launches         %" PRIu64 " in all, %" PRIu64 " touching no region; %u in the "
           "recorded iteration\n", t->launches, t->launches_bare, t->n_iter);
    printf("  regions tracked  %u, %s\n", t->n_regions, human(t->tracked_bytes, b1));
    printf("  weights          %u regions, %s (%.1f%% of tracked bytes)\n", t->n_weights,
           human(t->weight_bytes, b2), 100.0 * share(t->weight_bytes, t->tracked_bytes));
    printf("  units            %u\n", t->n_units);
    if (t->seen[FT_TRACE_TRACKING]) {
        static const char *const rules[] = { "the detector's anchor", "", "", "explicit marks" };
        printf("  passes after     ");
        if (t->trk_rule == 1 || t->trk_rule == 2) {
            const region_t *r = find_region(t, t->trk_region);
            str_t kn = t->kernels[t->trk_kernel].name;
            printf("start at launch %u (%s) on region %u", t->trk_start, clip(kn, KW, buf), t->trk_region);
            if (r->unit != NO_UNIT)
                printf(" (%.*s)", (int)t->units[r->unit].name.n, t->units[r->unit].name.s);
            printf("%s", t->trk_rule == 2 ? ", or a kernel not in the pass touching it" : "");
        } else {
            printf("start at %s", rules[t->trk_rule]);
        }
        printf("; %" PRIu64 " start%s, the last %" PRIu64 " launches before the trace\n", t->trk_starts,
               t->trk_starts == 1 ? "" : "s", t->trk_since);
        if (t->trk_starts == 0 || t->trk_lost)
            printf("  warning          %s: profiling, the plan and prefetching by position wait for "
                   "a pass start (FT_LOG_LEVEL=debug shows why; FT_ITERATION_MARKER marks passes)\n",
                   t->trk_starts == 0 ? "no pass started after discovery" : "passes stopped starting");
    }

    printf("\nunits (%u)\n", t->n_units);
    if (t->n_units == 0) {
        printf("  (none%s)\n", t->state != 2 ? ": discovery did not finish" : "");
    } else {
        printf("  %-*s %10s  %-*s %-*s %7s %6s %7s %7s\n", NW, "name", "bytes", LW,
               "first kernel", LW, "last kernel", "kernels", "share", "offload", "regions");
        for (uint32_t i = 0; i < t->n_units; i++) {
            const unit_t *u = &t->units[i];
            printf("  %-*s %10s  %-*s %-*s %7u %5.1f%% %7s %7u\n", NW, clip(u->name, NW, buf),
                   human(u->bytes, b1), LW, clip(kernel_name(t, u->first), LW, buf2), LW,
                   clip(kernel_name(t, u->last), LW, buf3), u->last - u->first + 1,
                   100.0 * share(u->bytes, t->weight_bytes), u->offload ? "yes" : "no", u->n_ids);
        }
    }

    printf("\nkernels (%u, by launches in the iteration)\n", t->n_kernels);
    printf("  %-*s %10s %12s %14s\n", KW, "name", "launches", "in iteration", "weight regions");
    for (uint32_t i = 0; i < t->n_kernels; i++) {
        const kernel_t *k = &t->kernels[t->kernel_order[i]];
        printf("  %-*s %10" PRIu64 " %12u %14u\n", KW, clip(k->name, KW, buf), k->launches,
               k->iter_launches, k->weight_regions);
    }

    printf("\nunattributed\n");
    printf("  launches in the iteration touching no region: %u\n", t->iter_bare);
    for (uint32_t i = 0; i < t->n_kernels; i++) {
        const kernel_t *k = &t->kernels[t->kernel_order[i]];
        if (k->iter_bare)
            printf("    %-*s %u\n", KW, clip(k->name, KW, buf), k->iter_bare);
    }
    if (t->iter_unknown_ids)
        printf("  region ids in the iteration absent from the region table: %u\n",
               t->iter_unknown_ids);
    printf("  candidate regions that are not weights: %u, %s\n", t->n_not_weights,
           human(t->not_weight_bytes, b1));
    /* The largest first: what matters is where the bytes went. --json lists all. */
    for (uint32_t i = 0; i < t->n_not_weights && i < TEXT_MAX_REGIONS; i++) {
        const region_t *r = &t->regions[t->not_weight_order[i]];
        const char *why[6];
        reasons(t, r, why);
        printf("    region %-6u %10s  ", r->id, human(r->size, b1));
        for (int j = 0; why[j]; j++)
            printf("%s%s", j ? ", " : "", reason_text(why[j]));
        printf("\n");
    }
    if (t->n_not_weights > TEXT_MAX_REGIONS)
        printf("    ... and %u more (--json lists them all)\n",
               t->n_not_weights - TEXT_MAX_REGIONS);
    printf("  weight bytes in no unit: %s\n", human(t->unlisted_weight_bytes, b1));
    printf("  regions allocated after the first launch (never weights): %u, %s\n", t->n_late,
           human(t->late_bytes, b2));
}

/* FT_OFFLOAD_TIMING's table: a row per unit loaded or timed, then the passes kept. */
static void text_timing(const trace_t *t)
{
    printf("\noffload timing (%" PRIu64 " pass(es) timed, %" PRIu64 " lost; mean step %.1f us, predicted %.1f us; "
           "times are sums over the passes timed, us)\n", t->tm[0], t->tm[1],
           t->tm[0] ? (double)t->tm[2] / 1e3 / (double)t->tm[0] : 0.0, (double)t->tm[3] / 1e3);
    printf("  %-20s %6s %6s %6s %12s %12s %7s %11s %11s %11s %11s\n", "unit", "loads", "hits", "misses", "bytes in",
           "bytes out", "copies", "transfer", "overlap", "compute", "stall");
    for (uint32_t i = 0; i < t->n_tm; i++) {
        const uint64_t *v = t->tm_unit[i].v;
        if (v[0] == 0 && v[9] == 0)
            continue;
        char nb[24];
        str_t name = i < t->n_units ? t->units[i].name : (str_t){ "?", 1 };
        printf("  %-20s %6" PRIu64 " %6" PRIu64 " %6" PRIu64 " %12" PRIu64 " %12" PRIu64 " %7" PRIu64
               " %11.1f %11.1f %11.1f %11.1f\n", clip(name, 20, nb), v[0], v[1], v[2], v[3], v[4], v[6],
               (double)v[7] / 1e3, (double)v[8] / 1e3, (double)v[10] / 1e3, (double)v[11] / 1e3);
    }
    if (t->seen[FT_TRACE_TIMELINE] && t->n_tl > 0) {
        printf("  passes kept for the timeline (ft-trace --chrome, --timeline)\n  %8s %12s %12s %12s %8s\n", "pass",
               "step us", "predicted", "stall us", "events");
        for (uint32_t i = 0; i < t->n_tl; i++)
            printf("  %8" PRIu64 " %12.1f %12.1f %12.1f %8u%s\n", t->tl[i].pass, (double)t->tl[i].step_ns / 1e3,
                   (double)t->tm[3] / 1e3, (double)t->tl[i].stall_ns / 1e3, t->tl[i].n,
                   t->tl[i].truncated ? " (truncated)" : "");
    }
}

static void text_report(const trace_t *t, const char *path, size_t size)
{
    printf("trace     %s (format version %u, %zu bytes)\n", path, FT_TRACE_VERSION, size);
    if (t->seen[FT_TRACE_PROCESS]) {
        printf("process   pid %u, %.*s\n", t->pid, (int)t->program.n, t->program.s);
        printf("duration  %.3f s\n",
               t->end_ns >= t->start_ns ? (double)(t->end_ns - t->start_ns) / 1e9 : 0.0);
        if (t->device.n)
            printf("device    %.*s\n", (int)t->device.n, t->device.s);
    }
    if (t->seen[FT_TRACE_CONFIG]) {
        printf("\nconfiguration (%u options)\n", t->n_config);
        for (uint32_t i = 0; i < t->n_config; i++) {
            const str_t *o = &t->config[3 * i];
            printf("  %-26.*s %-24.*s (%.*s)\n", (int)o[0].n, o[0].s, (int)o[1].n, o[1].s,
                   (int)o[2].n, o[2].s);
        }
    }
    if (t->seen[FT_TRACE_CALLS]) {
        printf("\nintercepted calls\n  %-28s %12s\n", "entry point", "calls");
        for (uint32_t i = 0; i < t->n_calls; i++)
            printf("  %-28.*s %12" PRIu64 "\n", (int)t->call_name[i].n, t->call_name[i].s,
                   t->call_count[i]);
    }
    if (t->seen[FT_TRACE_DISCOVERY])
        text_discovery(t);
    if (t->seen[FT_TRACE_PROFILE]) {
        printf("\nprofile (%u pass%s; compute time of each unit's kernel range, us)\n",
               t->prof_passes, t->prof_passes == 1 ? "" : "es");
        printf("  %-24s %8s %10s %10s %10s\n", "unit", "samples", "min", "median", "max");
        for (uint32_t i = 0; i < t->n_prof; i++) {
            const prof_unit_t *u = &t->prof[i];
            printf("  %-24.*s %8u %10.1f %10.1f %10.1f\n", (int)u->name.n, u->name.s, u->samples,
                   (double)u->min_ns / 1e3, (double)u->median_ns / 1e3, (double)u->max_ns / 1e3);
        }
    }
    if (t->seen[FT_TRACE_PLAN]) {
        char a[32], b[32], c[32], d[32];
        printf("\nplan (%s mode)\n  budget %s, non-weight memory %s, %u slot(s) of %s, device "
               "memory %s\n  predicted step %.1f us against %.1f us all resident\n",
               t->plan_memory_mode ? "memory" : "latency", human(t->plan_budget, a),
               human(t->plan_other, b), t->plan_slots, human(t->plan_slot_bytes, c),
               human(t->plan_device, d), (double)t->plan_step_ns / 1e3, (double)t->plan_all_ns / 1e3);
        printf("  %-24s %-9s %5s %12s\n", "unit", "decision", "slot", "stall us");
        for (uint32_t i = 0; i < t->plan_n; i++) {
            str_t name = i < t->n_units ? t->units[i].name : (str_t){ "?", 1 };
            printf("  %-24.*s %-9s %5s %12.1f\n", (int)name.n, name.s,
                   t->plan_resident[i] ? "resident" : "streamed",
                   t->plan_resident[i] ? "-" : (snprintf(a, sizeof a, "%u", t->plan_slot[i]), a),
                   (double)t->plan_stall_ns[i] / 1e3);
        }
    }
    if (t->seen[FT_TRACE_RESIDENCY]) {
        char a[32], b[32];
        printf("\nresidency\n  %" PRIu64 " load(s), %" PRIu64 " prefetched, %" PRIu64 " on demand "
               "(misses), %s copied in; %" PRIu64 " unload(s); at most %s of streamed units held\n",
               t->res[0], t->res[1], t->res[2], human(t->res[3], a), t->res[4], human(t->res[5], b));
        if (t->res[6] > 0)
            printf("  measured step %.1f us (median of %" PRIu64 "), predicted %.1f us\n",
                   (double)t->res[7] / 1e3, t->res[6], (double)t->res[8] / 1e3);
        else
            printf("  no step measured, predicted %.1f us\n", (double)t->res[8] / 1e3);
        if (t->res_ext)
            printf("  %" PRIu64 " unload(s) copied back; %" PRIu64 " stale address(es) skipped; %" PRIu64
                   " copy(ies) or set(s) served from host memory; %" PRIu64 " unit(s) made to stream by "
                   "allocations; FT_SPILL moves before the plan: %" PRIu64 " in, %" PRIu64 " out\n",
                   t->res[9], t->res[10], t->res[11], t->res[12], t->res[13], t->res[14]);
        if (t->res_outside && t->res[18] > 0) {
            char c1[32], c2[32], c3[32];
            printf("  device memory outside FlexTensor's count: %s at the first sample, at most %s, %s at "
                   "the last of %" PRIu64 "\n", human(t->res[15], c1), human(t->res[16], c2),
                   human(t->res[17], c3), t->res[18]);
        }
    }
    if (t->seen[FT_TRACE_MISSES] && t->n_miss > 0) {
        printf("\nmisses (the first %u: a unit loaded on demand by the call that touched it)\n"
               "  %-20s %6s %9s %-10s %s\n", t->n_miss, "unit", "pass", "after", "sequence", "call");
        for (uint32_t i = 0; i < t->n_miss; i++) {
            const struct miss_rec *m = &t->miss[i];
            str_t name = m->unit < t->n_units ? t->units[m->unit].name : (str_t){ "?", 1 };
            char pos[24], nb[24], kb[64];
            if (m->pos1 == 0)
                snprintf(pos, sizeof pos, "-");
            else
                snprintf(pos, sizeof pos, "%" PRIu64, m->pos1 - 1);
            printf("  %-20s %6" PRIu64 " %9s %-10s %s\n", clip(name, 20, nb), m->pass, pos,
                   m->off_script ? "off" : "recorded", clip(m->kernel, 60, kb));
        }
    }
    if (t->seen[FT_TRACE_TIMING])
        text_timing(t);
    if (t->seen[FT_TRACE_BANDWIDTH])
        printf("\ncopy bandwidth (%" PRIu64 " MiB copies, host memory of the kind FT_PINNED_MEMORY asks for)\n  host to device %.1f GB/s, "
               "device to host %.1f GB/s; both at once %.1f and %.1f GB/s\n", t->bw_bytes >> 20,
               (double)t->bw[0] / 1e6, (double)t->bw[1] / 1e6, (double)t->bw[2] / 1e6,
               (double)t->bw[3] / 1e6);
}

/* --- JSON ------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (s[0] >= 0xf5 || len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    /* Overlong 3- and 4-byte forms, surrogates, and code points past U+10FFFF. */
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return len;
}

/* Names come from the traced program: any bytes. Invalid UTF-8 becomes U+FFFD so the
 * output always parses. */
static void json_str(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char ch = p[i];
        if (ch == '"' || ch == '\\') {
            printf("\\%c", ch);
            i++;
        } else if (ch < 0x20) {
            printf("\\u%04x", ch);
            i++;
        } else if (ch < 0x80) {
            putchar(ch);
            i++;
        } else {
            size_t len = utf8_len(p + i, n - i);
            if (len == 0) {
                fputs("\\ufffd", stdout);
                i++;
            } else {
                fwrite(p + i, 1, len, stdout);
                i += len;
            }
        }
    }
    putchar('"');
}

static void json_s(str_t s) { json_str(s.s, s.n); }
static void json_c(const char *s) { json_str(s, strlen(s)); }

static void json_discovery(const trace_t *t)
{
    printf(",\n  \"discovery\": {\"state\": \"%s\", \"iterations\": %u, \"boundary_source\": ",
           state_names[t->state], t->iterations);
    json_c(source_names[t->source]);
    printf(", \"launches\": %" PRIu64 ", \"launches_no_region\": %" PRIu64
           ", \"iteration_launches\": %u, \"regions\": %u, \"region_bytes\": %" PRIu64
           ", \"weight_regions\": %u, \"weight_bytes\": %" PRIu64
           ", \"weight_share\": %.6f, \"units\": %u}",
           t->launches, t->launches_bare, t->n_iter, t->n_regions, t->tracked_bytes, t->n_weights,
           t->weight_bytes, share(t->weight_bytes, t->tracked_bytes), t->n_units);
    if (t->seen[FT_TRACE_TRACKING]) {
        static const char *const rules[] = { "anchor", "start_kernel", "start_kernel_or_new_kernel",
                                             "marks" };
        printf(",\n  \"tracking\": {\"rule\": \"%s\", \"start\": %u, \"kernel\": ", rules[t->trk_rule],
               t->trk_start);
        if (t->trk_kernel == NONE)
            printf("null, \"region\": null");
        else
            printf("%u, \"region\": %u", t->trk_kernel, t->trk_region);
        printf(", \"starts\": %" PRIu64 ", \"launches_since_start\": %" PRIu64 ", \"lost_warning\": %s}",
               t->trk_starts, t->trk_since, t->trk_lost ? "true" : "false");
    }

    printf(",\n  \"regions\": [");
    for (uint32_t i = 0; i < t->n_regions; i++) {
        const region_t *r = &t->regions[i];
        /* Addresses as hex strings: a JSON number loses bits above 2^53. */
        printf("%s\n    {\"id\": %u, \"base\": \"0x%" PRIx64 "\", \"size\": %" PRIu64
               ", \"flags\": %u, \"flag_names\": [", i ? "," : "", r->id, r->base, r->size,
               r->flags);
        int first = 1;
        for (unsigned b = 0; b < sizeof flag_names / sizeof *flag_names; b++)
            if (r->flags & (1u << b)) {
                printf("%s\"%s\"", first ? "" : ", ", flag_names[b]);
                first = 0;
            }
        printf("], \"unit\": ");
        if (r->unit == NO_UNIT)
            printf("null");
        else
            printf("%u", r->unit);
        printf(", \"touched\": %s}", r->touched ? "true" : "false");
    }
    printf("%s]", t->n_regions ? "\n  " : "");

    printf(",\n  \"kernels\": [");
    for (uint32_t i = 0; i < t->n_kernels; i++) {
        uint32_t ki = t->kernel_order[i];
        const kernel_t *k = &t->kernels[ki];
        printf("%s\n    {\"index\": %u, \"name\": ", i ? "," : "", ki);
        json_s(k->name);
        printf(", \"launches\": %" PRIu64 ", \"iteration_launches\": %u, \"weight_regions\": %u}",
               k->launches, k->iter_launches, k->weight_regions);
    }
    printf("%s]", t->n_kernels ? "\n  " : "");

    printf(",\n  \"iteration\": [");
    for (uint32_t i = 0; i < t->n_iter; i++) {
        const launch_t *l = &t->iter[i];
        printf("%s\n    {\"kernel\": %u, \"regions\": [", i ? "," : "", l->kernel);
        for (uint32_t j = 0; j < l->n_ids; j++)
            printf("%s%u", j ? ", " : "", t->iter_ids[l->first_id + j]);
        printf("]}");
    }
    printf("%s]", t->n_iter ? "\n  " : "");

    printf(",\n  \"units\": [");
    for (uint32_t i = 0; i < t->n_units; i++) {
        const unit_t *u = &t->units[i];
        printf("%s\n    {\"name\": ", i ? "," : "");
        json_s(u->name);
        printf(", \"bytes\": %" PRIu64 ", \"first_launch\": %u, \"last_launch\": %u"
               ", \"first_kernel\": ", u->bytes, u->first, u->last);
        json_s(kernel_name(t, u->first));
        printf(", \"last_kernel\": ");
        json_s(kernel_name(t, u->last));
        printf(", \"kernel_count\": %u, \"weight_share\": %.6f, \"offload\": %s"
               ", \"region_count\": %u, \"regions\": [", u->last - u->first + 1,
               share(u->bytes, t->weight_bytes), u->offload ? "true" : "false", u->n_ids);
        for (uint32_t j = 0; j < u->n_ids; j++)
            printf("%s%u", j ? ", " : "", t->unit_ids[u->first_id + j]);
        printf("]}");
    }
    printf("%s]", t->n_units ? "\n  " : "");

    printf(",\n  \"unattributed\": {\"iteration_launches_no_region\": %u, \"by_kernel\": [",
           t->iter_bare);
    int first = 1;
    for (uint32_t i = 0; i < t->n_kernels; i++) {
        const kernel_t *k = &t->kernels[t->kernel_order[i]];
        if (!k->iter_bare)
            continue;
        printf("%s{\"kernel\": ", first ? "" : ", ");
        json_s(k->name);
        printf(", \"launches\": %u}", k->iter_bare);
        first = 0;
    }
    printf("], \"unknown_region_ids\": %u, \"candidates_not_weights\": [", t->iter_unknown_ids);
    first = 1;
    for (uint32_t i = 0; i < t->n_regions; i++) {
        const region_t *r = &t->regions[i];
        if (!(r->flags & FT_TRACE_RF_CANDIDATE) || (r->flags & FT_TRACE_RF_WEIGHT))
            continue;
        const char *why[6];
        reasons(t, r, why);
        printf("%s\n      {\"id\": %u, \"size\": %" PRIu64 ", \"reasons\": [", first ? "" : ",",
               r->id, r->size);
        for (int j = 0; why[j]; j++)
            printf("%s\"%s\"", j ? ", " : "", why[j]);
        printf("]}");
        first = 0;
    }
    printf("%s], \"candidates_not_weights_bytes\": %" PRIu64
           ", \"weight_bytes_outside_units\": %" PRIu64 ", \"late_regions\": %u"
           ", \"late_bytes\": %" PRIu64 "}",
           first ? "" : "\n    ", t->not_weight_bytes, t->unlisted_weight_bytes, t->n_late,
           t->late_bytes);
}

static void json_report(const trace_t *t, const char *path)
{
    printf("{\"file\": ");
    json_c(path);
    printf(", \"version\": %u", FT_TRACE_VERSION);
    if (t->seen[FT_TRACE_PROCESS]) {
        printf(",\n  \"process\": {\"pid\": %u, \"start_ns\": %" PRIu64 ", \"end_ns\": %" PRIu64
               ", \"program\": ", t->pid, t->start_ns, t->end_ns);
        json_s(t->program);
        printf(", \"device\": ");
        json_s(t->device);
        printf("}");
    }
    if (t->seen[FT_TRACE_CONFIG]) {
        printf(",\n  \"config\": [");
        for (uint32_t i = 0; i < t->n_config; i++) {
            const str_t *o = &t->config[3 * i];
            printf("%s{\"name\": ", i ? ", " : "");
            json_s(o[0]);
            printf(", \"value\": ");
            json_s(o[1]);
            printf(", \"source\": ");
            json_s(o[2]);
            printf("}");
        }
        printf("]");
    }
    if (t->seen[FT_TRACE_CALLS]) {
        printf(",\n  \"calls\": [");
        for (uint32_t i = 0; i < t->n_calls; i++) {
            printf("%s{\"name\": ", i ? ", " : "");
            json_s(t->call_name[i]);
            printf(", \"count\": %" PRIu64 "}", t->call_count[i]);
        }
        printf("]");
    }
    if (t->seen[FT_TRACE_DISCOVERY])
        json_discovery(t);
    if (t->seen[FT_TRACE_PROFILE]) {
        printf(",\n  \"profile\": {\"passes\": %u, \"units\": [", t->prof_passes);
        for (uint32_t i = 0; i < t->n_prof; i++) {
            const prof_unit_t *u = &t->prof[i];
            printf("%s{\"name\": ", i ? ", " : "");
            json_s(u->name);
            printf(", \"samples\": %u, \"min_ns\": %" PRIu64 ", \"median_ns\": %" PRIu64
                   ", \"max_ns\": %" PRIu64 "}", u->samples, u->min_ns, u->median_ns, u->max_ns);
        }
        printf("]}");
    }
    if (t->seen[FT_TRACE_PLAN]) {
        printf(",\n  \"plan\": {\"mode\": \"%s\", \"budget\": %" PRIu64 ", \"other_bytes\": %" PRIu64
               ", \"slots\": %u, \"slot_bytes\": %" PRIu64 ", \"device_bytes\": %" PRIu64
               ", \"step_ns\": %" PRIu64 ", \"all_resident_ns\": %" PRIu64 ", \"units\": [",
               t->plan_memory_mode ? "memory" : "latency", t->plan_budget, t->plan_other,
               t->plan_slots, t->plan_slot_bytes, t->plan_device, t->plan_step_ns, t->plan_all_ns);
        for (uint32_t i = 0; i < t->plan_n; i++)
            printf("%s{\"resident\": %s, \"slot\": %d, \"stall_ns\": %" PRIu64 "}", i ? ", " : "",
                   t->plan_resident[i] ? "true" : "false",
                   t->plan_resident[i] ? -1 : (int)t->plan_slot[i], t->plan_stall_ns[i]);
        printf("]}");
    }
    if (t->seen[FT_TRACE_RESIDENCY]) {
        printf(",\n  \"residency\": {\"loads\": %" PRIu64 ", \"prefetched\": %" PRIu64
               ", \"misses\": %" PRIu64 ", \"bytes_in\": %" PRIu64 ", \"unloads\": %" PRIu64
               ", \"peak_held_bytes\": %" PRIu64 ", \"measured_steps\": %" PRIu64
               ", \"measured_step_ns\": %" PRIu64 ", \"predicted_step_ns\": %" PRIu64,
               t->res[0], t->res[1], t->res[2], t->res[3], t->res[4], t->res[5], t->res[6],
               t->res[7], t->res[8]);
        if (t->res_ext)
            printf(", \"copied_back\": %" PRIu64 ", \"stale_skipped\": %" PRIu64 ", \"host_copies\": %" PRIu64
                   ", \"made_to_stream\": %" PRIu64 ", \"spill_in\": %" PRIu64 ", \"spill_out\": %" PRIu64,
                   t->res[9], t->res[10], t->res[11], t->res[12], t->res[13], t->res[14]);
        if (t->res_outside)
            printf(", \"outside_first_bytes\": %" PRIu64 ", \"outside_max_bytes\": %" PRIu64
                   ", \"outside_last_bytes\": %" PRIu64 ", \"outside_samples\": %" PRIu64,
                   t->res[15], t->res[16], t->res[17], t->res[18]);
        printf("}");
    }
    if (t->seen[FT_TRACE_MISSES]) {
        printf(",\n  \"misses\": [");
        for (uint32_t i = 0; i < t->n_miss; i++) {
            const struct miss_rec *m = &t->miss[i];
            printf("%s{\"unit\": %u, \"pass\": %" PRIu64 ", \"after_position\": ", i ? ", " : "", m->unit, m->pass);
            if (m->pos1 == 0)
                printf("null");
            else
                printf("%" PRIu64, m->pos1 - 1);
            printf(", \"off_sequence\": %s, \"call\": ", m->off_script ? "true" : "false");
            json_str(m->kernel.s, m->kernel.n);
            printf("}");
        }
        printf("]");
    }
    if (t->seen[FT_TRACE_TIMING]) {
        static const char *const keys[12] = { "loads", "hits", "misses", "bytes_in", "bytes_out", "unloads",
                                              "copies_timed", "transfer_ns", "overlap_ns", "compute_passes",
                                              "compute_ns", "stall_ns" };
        printf(",\n  \"timing\": {\"passes\": %" PRIu64 ", \"passes_lost\": %" PRIu64 ", \"step_ns_total\": %" PRIu64
               ", \"predicted_step_ns\": %" PRIu64 ", \"stall_ns\": %" PRIu64 ", \"units\": [",
               t->tm[0], t->tm[1], t->tm[2], t->tm[3], t->tm[4]);
        for (uint32_t i = 0; i < t->n_tm; i++) {
            printf("%s{\"unit\": %u, \"name\": ", i ? ", " : "", i);
            if (i < t->n_units)
                json_s(t->units[i].name);
            else
                printf("null");
            printf(", \"streamed\": %s, \"streamed_bytes\": %" PRIu64, t->tm_unit[i].streamed ? "true" : "false",
                   t->tm_unit[i].bytes);
            for (int k = 0; k < 12; k++)
                printf(", \"%s\": %" PRIu64, keys[k], t->tm_unit[i].v[k]);
            printf("}");
        }
        printf("]}");
    }
    if (t->seen[FT_TRACE_TIMELINE]) {
        static const char *const kinds[FT_TIMING_KINDS] = { "compute", "copy", "miss", "unload" };
        printf(",\n  \"timeline\": [");
        for (uint32_t i = 0; i < t->n_tl; i++) {
            const ftl_pass_t *p = &t->tl[i];
            printf("%s{\"pass\": %" PRIu64 ", \"start_ns\": %" PRIu64 ", \"step_ns\": %" PRIu64 ", \"stall_ns\": %" PRIu64
                   ", \"truncated\": %s, \"events\": [", i ? ",\n    " : "", p->pass, p->start_ns, p->step_ns,
                   p->stall_ns, p->truncated ? "true" : "false");
            for (uint32_t k = 0; k < p->n; k++)
                printf("%s{\"kind\": \"%s\", \"lane\": \"%s\", \"unit\": %u, \"wait_ns\": %" PRIu64
                       ", \"start_ns\": %" PRIu64 ", \"end_ns\": %" PRIu64 "}", k ? ", " : "", kinds[p->ev[k].kind],
                       p->ev[k].lane ? "side" : "program", p->ev[k].unit, p->ev[k].wait_ns, p->ev[k].start_ns,
                       p->ev[k].end_ns);
            printf("]}");
        }
        printf("]");
    }
    if (t->seen[FT_TRACE_BANDWIDTH])
        printf(",\n  \"bandwidth\": {\"bytes\": %" PRIu64 ", \"h2d_gbps\": %.3f, \"d2h_gbps\": %.3f, "
               "\"h2d_both_gbps\": %.3f, \"d2h_both_gbps\": %.3f}", t->bw_bytes,
               (double)t->bw[0] / 1e6, (double)t->bw[1] / 1e6, (double)t->bw[2] / 1e6,
               (double)t->bw[3] / 1e6);
    printf("\n}\n");
}

/* --- a saved profile (FT_PROFILE_DIR) ------------------------------------------------ */

/* Its summary: what wrote it, the units with their weights, times and place in the
 * plan, the link and the plan. A file that does not read back whole: one line, exit 1. */
static int profile_report(const char *path)
{
    ft_savedprof_t p;
    char err[512];
    if (ft_savedprof_load(path, &p, err, sizeof err) != 0) {
        for (char *c = err; *c; c++)
            if ((unsigned char)*c < 0x20)
                *c = '?';
        fprintf(stderr, "ft-trace: %s: %s\n", path, err);
        return 1;
    }
    const ft_disc_saved_t *s = &p.disc;
    printf("saved profile %s (format %u)\n", path, FT_SAVEDPROF_VERSION);
    printf("  written by FlexTensor %s for %s on %s\n", p.ft_version, p.program, p.device);
    printf("  pass: %u launches of %u kernels; %s\n", s->n_launches, s->n_kernels,
           s->explicit_marks ? "passes marked explicitly" : "passes start at");
    if (!s->explicit_marks)
        printf("    %s on allocation %u\n", s->kernels[s->track_kernel], s->track_region);
    printf("  weights: %u allocations, each checked by size and content sum\n", s->n_regions);
    printf("  %-24s %12s %8s %10s %10s\n", "unit", "bytes", "regions", "launches", "median us");
    for (uint32_t j = 0; j < s->n_units; j++) {
        const ft_disc_saved_unit_t *u = &s->units[j];
        printf("  %-24s %12" PRIu64 " %8u %4u-%-5u %10.1f %s\n", u->name, u->bytes, u->n_ids, u->first_launch,
               u->last_launch, p.median_us[j], p.resident[j] ? "resident" : "streamed");
    }
    printf("  link: host to device %.1f GB/s, device to host %.1f GB/s, %.1f us per copy (%" PRIu64 "-byte copies)\n",
           p.h2d, p.d2h, p.latency_us, p.link_bytes);
    printf("  plan: budget %" PRIu64 " bytes (0: latency mode), other memory %" PRIu64 " bytes, %u slot(s), "
           "predicted step %.1f us\n", p.budget, p.other_bytes, p.slots, (double)p.step_ns / 1000.0);
    ft_savedprof_free(&p);
    return fflush(stdout) != 0 || ferror(stdout) ? 1 : 0;
}

/* --- main ------------------------------------------------------------------------ */

static void usage(FILE *out)
{
    fputs("usage: ft-trace [--json] [--chrome OUT.json] [--timeline OUT.svg] [--] FILE\n"
          "       ft-trace --profile FILE\n"
          "       ft-trace --version\n"
          "Prints the summary of a FlexTensor trace (FT_TRACE_FILE): the process,\n"
          "and from discovery the units, the kernels and what was not attributed.\n"
          "  --json     the same report as one JSON object\n"
          "  --chrome OUT.json   also write the offload timeline (FT_OFFLOAD_TIMING's last\n"
          "                      passes) in the Chrome trace-event format (Perfetto)\n"
          "  --timeline OUT.svg  also draw it as SVG, one lane per stream\n"
          "  --profile  the summary of a saved profile (FT_PROFILE_DIR) instead\n"
          "  --version  print ft-trace's version\n",
          out);
}

int main(int argc, char **argv)
{
    int json = 0, options = 1, profile = 0;
    const char *path = NULL, *chrome = NULL, *svg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (options && strcmp(a, "--") == 0)
            options = 0;
        else if (options && strcmp(a, "--json") == 0)
            json = 1;
        else if (options && (strcmp(a, "--chrome") == 0 || strcmp(a, "--timeline") == 0)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ft-trace: %s needs a file name\n", a);
                return 2;
            }
            *(a[2] == 'c' ? &chrome : &svg) = argv[++i];
        }
        else if (options && strcmp(a, "--profile") == 0)
            profile = 1;
        else if (options && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            usage(stdout);
            return 0;
        } else if (options && strcmp(a, "--version") == 0) {
            puts("ft-trace " FT_VERSION);
            return 0;
        } else if (options && a[0] == '-' && a[1] != '\0') {
            /* A word with a dash is an option, never a file name ("--" ends the options). */
            fprintf(stderr, "ft-trace: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else if (path == NULL)
            path = a;
        else {
            fprintf(stderr, "ft-trace: one file at a time (got %s and %s)\n", path, a);
            return 2;
        }
    }
    if (path == NULL || (profile && (json || chrome != NULL || svg != NULL))) {
        usage(stderr);
        return 2;
    }
    if (profile)
        return profile_report(path);

    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "ft-trace: %s: %s\n", path, strerror(errno));
        return 1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ft-trace: %s: not a regular file\n", path);
        fclose(f);
        return 1;
    }
    size_t size = (size_t)st.st_size;
    unsigned char *data = malloc(size ? size : 1);
    if (data == NULL || fread(data, 1, size, f) != size) {
        fprintf(stderr, "ft-trace: %s: cannot read %zu bytes\n", path, size);
        fclose(f);
        free(data);
        return 1;
    }
    fclose(f);

    trace_t t;
    memset(&t, 0, sizeof t);
    t.data = data;
    char err[256];
    /* The structure first (bounds, count, CRC), so the visitor below only ever sees
     * records that are whole. */
    int rc = ft_trace_read(data, size, NULL, NULL, err, sizeof err);
    if (rc == 0 && ft_trace_read(data, size, visit, &t, err, sizeof err) == 0)
        rc = analyse(&t);
    else if (rc == 0)
        rc = -1;
    if (rc != 0) {
        /* Names quoted from the file may hold any byte; the reason stays one line. */
        for (char *p = t.err; *p; p++)
            if ((unsigned char)*p < 0x20)
                *p = '?';
        fprintf(stderr, "ft-trace: %s: %s\n", path, t.err[0] ? t.err : err);
        trace_free(&t);
        free(data);
        return 1;
    }

    if ((chrome != NULL || svg != NULL) && !t.seen[FT_TRACE_TIMELINE]) {
        fprintf(stderr, "ft-trace: %s: no TIMELINE record (the run had FT_OFFLOAD_TIMING off, or streamed "
                "nothing)\n", path);
        trace_free(&t);
        free(data);
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        const char *out = k == 0 ? chrome : svg;
        if (out == NULL)
            continue;
        ftl_name_t names[t.n_units > 0 ? t.n_units : 1];
        for (uint32_t i = 0; i < t.n_units; i++)
            names[i] = (ftl_name_t){ t.units[i].name.s, t.units[i].name.n };
        FILE *o = fopen(out, "w");
        int bad_write = o == NULL ||
                        (k == 0 ? ftl_write_chrome : ftl_write_svg)(o, t.tl, t.n_tl, names, t.n_units) != 0;
        if (o != NULL && fclose(o) != 0)
            bad_write = 1;
        if (bad_write) {
            fprintf(stderr, "ft-trace: writing %s: %s\n", out, strerror(errno));
            trace_free(&t);
            free(data);
            return 1;
        }
    }
    if (json)
        json_report(&t, path);
    else
        text_report(&t, path, size);
    trace_free(&t);
    free(data);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ft-trace: writing the report: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

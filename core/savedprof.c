/* savedprof.c - the saved profile file: encoding and decoding (see savedprof.h). Pure:
 * no CUDA, no environment; the only I/O is the file named by the caller. */
#define _GNU_SOURCE
#include "core/savedprof.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/trace.h"

void ft_savedprof_free(ft_savedprof_t *p)
{
    if (p == NULL)
        return;
    ft_disc_saved_free(&p->disc);
    free(p->median_us);
    free(p->resident);
    memset(p, 0, sizeof *p);
}

/* Times and rates are kept as the bits of their double: the next start plans from the
 * very numbers this one planned from, so its plan is the same. */
static uint64_t f64_bits(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static double bits_f64(uint64_t u)
{
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

int ft_savedprof_write(const ft_savedprof_t *p, const char *path)
{
    const ft_disc_saved_t *s = &p->disc;
    ft_trace_writer_t w;
    if (ft_trace_writer_init(&w) != 0)
        return -ENOMEM;
    ft_trace_begin(&w, (ft_trace_type_t)FT_SAVEDPROF_HEADER);
    ft_trace_put_u32(&w, FT_SAVEDPROF_VERSION);
    ft_trace_put_str(&w, p->ft_version);
    ft_trace_put_str(&w, p->program);
    ft_trace_put_str(&w, p->device);
    ft_trace_end(&w);
    ft_trace_begin(&w, (ft_trace_type_t)FT_SAVEDPROF_REGIONS);
    ft_trace_put_u32(&w, s->n_regions);
    for (uint32_t i = 0; i < s->n_regions; i++) {
        const ft_disc_saved_region_t *r = &s->regions[i];
        ft_trace_put_u32(&w, r->id);
        ft_trace_put_u64(&w, r->size);
        ft_trace_put_u64(&w, r->hash);
        ft_trace_put_u32(&w, (uint32_t)r->unit);
        ft_trace_put_u32(&w, r->shared);
        ft_trace_put_u32(&w, r->direct);
    }
    ft_trace_end(&w);
    ft_trace_begin(&w, (ft_trace_type_t)FT_SAVEDPROF_KERNELS);
    ft_trace_put_u32(&w, s->n_kernels);
    for (uint32_t i = 0; i < s->n_kernels; i++)
        ft_trace_put_str(&w, s->kernels[i]);
    ft_trace_end(&w);
    ft_trace_begin(&w, (ft_trace_type_t)FT_SAVEDPROF_PASS);
    ft_trace_put_u32(&w, s->n_launches);
    for (uint32_t i = 0; i < s->n_launches; i++) {
        ft_trace_put_u32(&w, s->launch_kernel[i]);
        ft_trace_put_u32(&w, s->launch_n[i]);
        for (uint32_t k = 0; k < s->launch_n[i]; k++)
            ft_trace_put_u32(&w, s->ids[s->launch_first[i] + k]);
    }
    ft_trace_end(&w);
    ft_trace_begin(&w, (ft_trace_type_t)FT_SAVEDPROF_UNITS);
    ft_trace_put_u32(&w, s->n_units);
    for (uint32_t j = 0; j < s->n_units; j++) {
        const ft_disc_saved_unit_t *u = &s->units[j];
        ft_trace_put_str(&w, u->name);
        ft_trace_put_u64(&w, u->bytes);
        ft_trace_put_u32(&w, u->first_launch);
        ft_trace_put_u32(&w, u->last_launch);
        ft_trace_put_u32(&w, u->n_ids);
        for (uint32_t k = 0; k < u->n_ids; k++)
            ft_trace_put_u32(&w, s->unit_ids[u->first_id + k]);
        ft_trace_put_u64(&w, f64_bits(p->median_us[j]));
    }
    ft_trace_end(&w);
    ft_trace_begin(&w, (ft_trace_type_t)FT_SAVEDPROF_TRACK);
    ft_trace_put_u32(&w, s->explicit_marks);
    ft_trace_put_u32(&w, s->track_kernel);
    ft_trace_put_u32(&w, s->track_region);
    ft_trace_end(&w);
    ft_trace_begin(&w, (ft_trace_type_t)FT_SAVEDPROF_LINK);
    ft_trace_put_u64(&w, p->link_bytes);
    ft_trace_put_u64(&w, f64_bits(p->h2d));
    ft_trace_put_u64(&w, f64_bits(p->d2h));
    ft_trace_put_u64(&w, f64_bits(p->h2d_both));
    ft_trace_put_u64(&w, f64_bits(p->d2h_both));
    ft_trace_put_u64(&w, f64_bits(p->latency_us));
    ft_trace_end(&w);
    ft_trace_begin(&w, (ft_trace_type_t)FT_SAVEDPROF_PLAN);
    ft_trace_put_u64(&w, p->budget);
    ft_trace_put_u64(&w, p->other_bytes);
    ft_trace_put_u32(&w, p->slots);
    ft_trace_put_u64(&w, p->step_ns);
    ft_trace_put_u32(&w, s->n_units);
    for (uint32_t j = 0; j < s->n_units; j++)
        ft_trace_put_u32(&w, p->resident ? p->resident[j] : 1);
    ft_trace_end(&w);
    int rc = ft_trace_write_file(&w, path);
    ft_trace_writer_free(&w);
    return rc;
}

/* --- reading ---------------------------------------------------------------------- */

typedef struct {
    ft_savedprof_t *p;
    unsigned seen;            /* a bit per record type (type - 0x100) */
    char *err;
    size_t errlen;
} reader_t;

#define BAD(...) do { snprintf(rd->err, rd->errlen, __VA_ARGS__); return -1; } while (0)

static int get_text(ft_trace_cursor_t *c, char *out, size_t size)
{
    const char *s;
    uint32_t n;
    if (ft_trace_get_str(c, &s, &n) != 0)
        return -1;
    if (n >= size)
        n = (uint32_t)size - 1;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

/* A count read from the file, bounded by what the payload could hold (each item at
 * least `item` bytes): a corrupt count never makes a huge allocation. */
static int get_count(ft_trace_cursor_t *c, uint32_t *n, size_t item)
{
    return ft_trace_get_u32(c, n) != 0 || (uint64_t)*n * item > c->left ? -1 : 0;
}

static int visit(void *ctx, ft_trace_type_t type, ft_trace_cursor_t *c)
{
    reader_t *rd = ctx;
    ft_savedprof_t *p = rd->p;
    ft_disc_saved_t *s = &p->disc;
    unsigned t = (unsigned)type;
    if (t < FT_SAVEDPROF_HEADER || t > FT_SAVEDPROF_PLAN)
        BAD("record type %u is not a saved profile's", t);
    unsigned bit = 1u << (t - FT_SAVEDPROF_HEADER);
    if (rd->seen & bit)
        BAD("record type %#x twice", t);
    if (t != FT_SAVEDPROF_HEADER && !(rd->seen & 1u))
        BAD("no header record first");
    rd->seen |= bit;
    uint32_t n, v;
    uint64_t q;
    switch (t) {
    case FT_SAVEDPROF_HEADER:
        if (ft_trace_get_u32(c, &v) != 0)
            break;
        if (v != FT_SAVEDPROF_VERSION)
            BAD("saved profile format version %u, this FlexTensor reads version %u", v, FT_SAVEDPROF_VERSION);
        if (get_text(c, p->ft_version, sizeof p->ft_version) || get_text(c, p->program, sizeof p->program) ||
            get_text(c, p->device, sizeof p->device))
            break;
        return 0;
    case FT_SAVEDPROF_REGIONS:
        if (get_count(c, &n, 32) != 0 || (s->regions = calloc(n ? n : 1, sizeof *s->regions)) == NULL)
            break;
        s->n_regions = n;
        for (uint32_t i = 0; i < n; i++) {
            ft_disc_saved_region_t *r = &s->regions[i];
            uint32_t unit;
            if (ft_trace_get_u32(c, &r->id) || ft_trace_get_u64(c, &r->size) || ft_trace_get_u64(c, &r->hash) ||
                ft_trace_get_u32(c, &unit) || ft_trace_get_u32(c, &r->shared) || ft_trace_get_u32(c, &r->direct))
                break;
            r->unit = (int32_t)unit;
            if (i > 0 && r->id <= s->regions[i - 1].id)
                BAD("region ids not in order at %u", r->id);
        }
        if (c->failed)
            BAD("truncated regions record");
        return 0;
    case FT_SAVEDPROF_KERNELS:
        if (get_count(c, &n, 4) != 0 || (s->kernels = calloc(n ? n : 1, sizeof *s->kernels)) == NULL)
            break;
        for (uint32_t i = 0; i < n; i++) {
            const char *str;
            uint32_t len;
            if (ft_trace_get_str(c, &str, &len) != 0 || (s->kernels[i] = strndup(str, len)) == NULL)
                break;
            s->n_kernels++;
        }
        if (s->n_kernels != n)
            BAD("truncated kernels record");
        return 0;
    case FT_SAVEDPROF_PASS: {
        if (get_count(c, &n, 8) != 0)
            break;
        size_t cap_ids = c->left / 4;
        s->launch_kernel = malloc((n ? n : 1) * sizeof *s->launch_kernel);
        s->launch_first = malloc((n ? n : 1) * sizeof *s->launch_first);
        s->launch_n = malloc((n ? n : 1) * sizeof *s->launch_n);
        s->ids = malloc((cap_ids ? cap_ids : 1) * sizeof *s->ids);
        if (!s->launch_kernel || !s->launch_first || !s->launch_n || !s->ids)
            BAD("out of memory");
        for (uint32_t i = 0; i < n; i++) {
            uint32_t k;
            if (ft_trace_get_u32(c, &s->launch_kernel[i]) || get_count(c, &k, 4))
                BAD("truncated pass record");
            s->launch_first[i] = s->n_ids;
            s->launch_n[i] = k;
            for (uint32_t j = 0; j < k; j++)
                if (ft_trace_get_u32(c, &s->ids[s->n_ids++]))
                    BAD("truncated pass record");
            s->n_launches++;
        }
        return 0;
    }
    case FT_SAVEDPROF_UNITS: {
        if (get_count(c, &n, 28) != 0)
            break;
        size_t cap_ids = c->left / 4;
        s->units = calloc(n ? n : 1, sizeof *s->units);
        s->unit_ids = malloc((cap_ids ? cap_ids : 1) * sizeof *s->unit_ids);
        p->median_us = calloc(n ? n : 1, sizeof *p->median_us);
        if (!s->units || !s->unit_ids || !p->median_us)
            BAD("out of memory");
        for (uint32_t j = 0; j < n; j++) {
            ft_disc_saved_unit_t *u = &s->units[j];
            uint32_t k;
            if (get_text(c, u->name, sizeof u->name) || ft_trace_get_u64(c, &u->bytes) ||
                ft_trace_get_u32(c, &u->first_launch) || ft_trace_get_u32(c, &u->last_launch) || get_count(c, &k, 4))
                BAD("truncated units record");
            u->first_id = s->n_unit_ids;
            u->n_ids = k;
            for (uint32_t i = 0; i < k; i++)
                if (ft_trace_get_u32(c, &s->unit_ids[s->n_unit_ids++]))
                    BAD("truncated units record");
            if (ft_trace_get_u64(c, &q))
                BAD("truncated units record");
            p->median_us[j] = bits_f64(q);
            s->n_units++;
        }
        return 0;
    }
    case FT_SAVEDPROF_TRACK:
        if (ft_trace_get_u32(c, &s->explicit_marks) || ft_trace_get_u32(c, &s->track_kernel) ||
            ft_trace_get_u32(c, &s->track_region))
            break;
        return 0;
    case FT_SAVEDPROF_LINK: {
        uint64_t x[5];
        if (ft_trace_get_u64(c, &p->link_bytes))
            break;
        for (int i = 0; i < 5; i++)
            if (ft_trace_get_u64(c, &x[i]))
                BAD("truncated link record");
        p->h2d = bits_f64(x[0]);
        p->d2h = bits_f64(x[1]);
        p->h2d_both = bits_f64(x[2]);
        p->d2h_both = bits_f64(x[3]);
        p->latency_us = bits_f64(x[4]);
        return 0;
    }
    case FT_SAVEDPROF_PLAN:
        if (ft_trace_get_u64(c, &p->budget) || ft_trace_get_u64(c, &p->other_bytes) ||
            ft_trace_get_u32(c, &p->slots) || ft_trace_get_u64(c, &p->step_ns) || get_count(c, &n, 4))
            break;
        if ((p->resident = calloc(n ? n : 1, sizeof *p->resident)) == NULL)
            BAD("out of memory");
        for (uint32_t j = 0; j < n; j++)
            if (ft_trace_get_u32(c, &p->resident[j]))
                BAD("truncated plan record");
        if (rd->seen & (1u << (FT_SAVEDPROF_UNITS - FT_SAVEDPROF_HEADER)) && n != s->n_units)
            BAD("the plan has %u units, the profile %u", n, s->n_units);
        return 0;
    }
    BAD("record type %#x is truncated", t);
}

/* The records agree with each other: every index in range. */
static int check(reader_t *rd)
{
    const ft_disc_saved_t *s = &rd->p->disc;
    if (rd->seen != (1u << (FT_SAVEDPROF_PLAN - FT_SAVEDPROF_HEADER + 1)) - 1)
        BAD("records missing (seen %#x)", rd->seen);
    for (uint32_t i = 0; i < s->n_regions; i++)
        if (s->regions[i].unit < 0 || (uint32_t)s->regions[i].unit >= s->n_units)
            BAD("region %u names unit %d of %u", s->regions[i].id, s->regions[i].unit, s->n_units);
    for (uint32_t i = 0; i < s->n_launches; i++)
        if (s->launch_kernel[i] >= s->n_kernels)
            BAD("launch %u names kernel %u of %u", i, s->launch_kernel[i], s->n_kernels);
    for (uint32_t j = 0; j < s->n_units; j++) {
        const ft_disc_saved_unit_t *u = &s->units[j];
        if (u->first_launch > u->last_launch || u->last_launch >= s->n_launches)
            BAD("unit %s spans launches %u-%u of %u", u->name, u->first_launch, u->last_launch, s->n_launches);
        for (uint32_t k = 0; k < u->n_ids; k++) {
            uint32_t id = s->unit_ids[u->first_id + k];
            int found = 0;
            for (uint32_t i = 0; i < s->n_regions && !found; i++)
                found = s->regions[i].id == id && (uint32_t)s->regions[i].unit == j;
            if (!found)
                BAD("unit %s lists region %u, not one of its weights", u->name, id);
        }
    }
    if (s->explicit_marks == 0 && s->track_kernel >= s->n_kernels)
        BAD("no pass start (kernel %u of %u)", s->track_kernel, s->n_kernels);
    return 0;
}

int ft_savedprof_parse(const unsigned char *data, size_t size, ft_savedprof_t *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    reader_t rd = { p, 0, err, errlen };
    err[0] = '\0';
    int rc = ft_trace_read(data, size, NULL, NULL, err, errlen);
    if (rc == 0)
        rc = ft_trace_read(data, size, visit, &rd, err, errlen);
    if (rc == 0)
        rc = check(&rd);
    if (rc != 0) {
        ft_savedprof_free(p);
        return rc < 0 ? rc : -EINVAL;
    }
    return 0;
}

int ft_savedprof_load(const char *path, ft_savedprof_t *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s", strerror(e));
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > (1ll << 30)) {
        snprintf(err, errlen, "not a regular file of at most 1 GiB");
        close(fd);
        return -EINVAL;
    }
    size_t size = (size_t)st.st_size, got = 0;
    unsigned char *data = malloc(size ? size : 1);
    while (data != NULL && got < size) {
        ssize_t r = read(fd, data + got, size - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    if (data == NULL || got != size) {
        snprintf(err, errlen, "cannot read %zu bytes", size);
        free(data);
        return -EIO;
    }
    int rc = ft_savedprof_parse(data, size, p, err, errlen);
    free(data);
    return rc;
}

/* scan.c - see scan.h. */
#include "core/scan.h"

#include <string.h>

int ft_scan_set_add(ft_scan_set_t *s, uint32_t id, uint64_t ptr)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->id[i] == id)
            return 0;
    if (s->n == FT_SCAN_MAX_IDS) {
        s->dropped++;
        return 0;
    }
    s->id[s->n] = id;
    s->ptr[s->n] = ptr;
    s->indirect[s->n] = 0;
    s->n++;
    return 1;
}

/* The scan of one buffer, the region table's read lock held by the caller. */
static size_t scan_held(ft_regions_t *t, const unsigned char *b, size_t len, ft_scan_set_t *out)
{
    size_t added = 0;
    for (size_t off = 0; off + 8 <= len; off += 8) {
        uint64_t v;
        memcpy(&v, b + off, 8); /* parameter buffers need not be 8-byte aligned in memory */
        if (v < 4096)           /* sizes, counts, flags, NULL: the common case */
            continue;
        ft_region_t r;
        if (ft_regions_find_held(t, v, &r))
            added += (size_t)ft_scan_set_add(out, r.id, v);
    }
    return added;
}

size_t ft_scan_bytes(ft_regions_t *t, const void *p, size_t len, ft_scan_set_t *out)
{
    /* One read lock for the whole buffer: a cuBLAS parameter buffer is 215 words. */
    ft_regions_read_begin(t);
    size_t added = scan_held(t, p, len, out);
    ft_regions_read_end(t);
    return added;
}

size_t ft_scan_params(ft_regions_t *t, void *const *params, const uint32_t *sizes, size_t n,
                      ft_scan_set_t *out)
{
    size_t added = 0;
    ft_regions_read_begin(t);
    for (size_t i = 0; i < n; i++)
        if (params[i] != NULL)
            added += scan_held(t, params[i], sizes[i], out);
    ft_regions_read_end(t);
    return added;
}

size_t ft_scan_indirect(ft_regions_t *t, const void *p, size_t len, ft_scan_set_t *out)
{
    const unsigned char *b = p;
    size_t added = 0;
    for (size_t off = 0; off + 8 <= len; off += 8) {
        uint64_t v;
        memcpy(&v, b + off, 8);
        if (v < 4096 || v % FT_SCAN_INDIRECT_ALIGN != 0)
            continue;
        ft_region_t r;
        ft_regions_read_begin(t);
        int found = ft_regions_find_held(t, v, &r);
        ft_regions_read_end(t);
        if (found && ft_scan_set_add(out, r.id, v)) {
            out->indirect[out->n - 1] = 1;
            added++;
        }
    }
    return added;
}

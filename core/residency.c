/* residency.c - the residency engine's decisions (see residency.h for what it decides
 * and what the shim keeps).
 *
 * Everything here but the repeat rule is a function of its arguments. The repeat rule's
 * table is a uthash keyed by (kernel, region): the guard asks it at every touch of a
 * streamed region by a launch, so a lookup must stay a hash probe.
 */
#include "core/residency.h"

#include <stdlib.h>
#include <string.h>

#include "core/hash.h"

/* Whether unit u may give its slot up now. */
static int may_leave(const ft_res_unit_t *u)
{
    return u->loaded && u->streamed && !u->pinned && !u->busy;
}

int ft_res_victim(const ft_res_unit_t *units, int n)
{
    int lru = -1;
    for (int i = 0; i < n; i++)
        if (may_leave(&units[i]) && (lru < 0 || units[i].stamp < units[lru].stamp))
            lru = i;
    return lru;
}

static int listed(const int *list, int n, int i)
{
    for (int k = 0; k < n; k++)
        if (list[k] == i)
            return 1;
    return 0;
}

int ft_res_victims(const ft_res_unit_t *units, int n, int loaded, int slots, int want, const int *keep, int n_keep,
                   int *out)
{
    int need = loaded + want - slots, k = 0;
    if (need <= 0)
        return 0;
    /* Every unit that may go, by load order: an insertion sort, since the candidates
     * are the loaded units, about as many as the slots except after a call that went
     * over them. Equal stamps keep index order. */
    for (int i = 0; i < n; i++) {
        if (!may_leave(&units[i]) || listed(keep, n_keep, i))
            continue;
        int j = k++;
        for (; j > 0 && units[out[j - 1]].stamp > units[i].stamp; j--)
            out[j] = out[j - 1];
        out[j] = i;
    }
    return k < need ? k : need;
}

ft_res_room_t ft_res_make_room(const ft_res_unit_t *units, int n, int loaded, int slots, int prefetch,
                               int *victims, int *n_victims)
{
    *n_victims = 0;
    if (loaded < slots)
        return FT_RES_LOAD;
    int k = ft_res_victims(units, n, loaded, slots, 1, NULL, 0, victims);
    if (k == loaded + 1 - slots) {
        *n_victims = k;
        return FT_RES_EVICT;
    }
    if (prefetch)
        return FT_RES_SKIP;
    *n_victims = k;
    return FT_RES_OVER;
}

int ft_res_prefetch(const ft_res_unit_t *units, int n, int u, int slots, int *out)
{
    int ahead = slots - 1, k = 0;
    for (int step = 1; step < n && ahead > 0; step++) {
        int w = (u + step) % n;
        /* A pinned unit on the device holds no slot and stays: no room in the window
         * (one after another unit kept for stale argument words, the unit after it was
         * missed in every pass on the H100). */
        if (!units[w].streamed || (units[w].pinned && units[w].loaded))
            continue;
        ahead--;
        out[k++] = w;
    }
    return k;
}

int ft_res_unit_at(const ft_res_range_t *ranges, int n, uint32_t pos, int end)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if ((end ? ranges[mid].last : ranges[mid].first) < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == n)
        return -1;
    return (end ? ranges[lo].last : ranges[lo].first) == pos ? lo : -1;
}

int ft_res_far(long at, ft_res_range_t range, const ft_res_pass_t *pass)
{
    long len = pass->len, half = len / 2, s = pass->start;
    if (at < 0 || len <= 0)
        return 0;
    /* In pass order: positions before the start come after the wrap. A pass longer
     * than the recorded one counts on past the length. */
#define PASS_ORDER(x) ((x) >= s ? (x) - s : (x) + len - s)
    long a = PASS_ORDER(at), f = PASS_ORDER((long)range.first), l = PASS_ORDER((long)range.last);
#undef PASS_ORDER
    if (f > l)
        return 0; /* the range spans the wrap: no order to compare */
    return a + half < f || a > l + half;
}

long ft_res_lane_pos(int *off_script, long tracked, int expected)
{
    if (tracked == 0 || expected == 2)
        *off_script = 0;
    if (tracked >= 0 && !*off_script && !expected)
        *off_script = 1;
    return *off_script ? -1 : tracked;
}

struct ft_res_repeat {
    struct repeat_key {
        uint64_t kernel;
        uint64_t region;
    } key;
    uint64_t lane, at;
    uint32_t run; /* touches in a row, each within the window of the one before */
    UT_hash_handle hh;
};

int ft_res_repeat_touch(ft_res_repeat_t **table, uint64_t kernel, uint32_t region, uint64_t lane, uint64_t at,
                        long pass_len)
{
    if (kernel == 0)
        return 0;
    struct repeat_key key;
    memset(&key, 0, sizeof key); /* the key is hashed as bytes */
    key.kernel = kernel;
    key.region = region;
    ft_res_repeat_t *e;
    HASH_FIND(hh, *table, &key, sizeof key, e);
    if (e == NULL) {
        if ((e = calloc(1, sizeof *e)) == NULL)
            return 0;
        e->key = key;
        e->lane = lane;
        e->at = at;
        e->run = 1;
        HASH_ADD(hh, *table, key, sizeof key, e);
        return 0;
    }
    if (e->lane == lane && e->at == at)
        return e->run >= 3; /* the same launch again */
    uint64_t window = pass_len / 4 > 4 ? (uint64_t)pass_len / 4 : 4; /* a quarter pass */
    int close = e->lane == lane && at - e->at < window;
    e->run = close ? e->run + 1 : 1;
    e->lane = lane;
    e->at = at;
    return e->run >= 3;
}

void ft_res_repeat_free(ft_res_repeat_t **table)
{
    ft_res_repeat_t *e, *tmp;
    HASH_ITER(hh, *table, e, tmp) {
        HASH_DEL(*table, e);
        free(e);
    }
}

ft_res_verdict_t ft_res_classify(const ft_res_touch_t *t, ft_res_range_t range, int loaded,
                                 const ft_res_pass_t *pass, int strict)
{
    ft_res_verdict_t v = { FT_RES_USE, 0, 0 };
    if (t->unsure)
        v.stale |= FT_RES_STALE_UNSURE;
    if (t->weightless)
        v.stale |= FT_RES_STALE_WEIGHTLESS;
    /* No launch of the recorded pass touched the unit there: a weight touched outside
     * its unit's range in discovery is shared, and stays resident. */
    if (t->pos >= 0 && ((uint32_t)t->pos < range.first || (uint32_t)t->pos > range.last))
        v.stale |= FT_RES_STALE_OUTSIDE;
    if (t->repeat)
        v.stale |= FT_RES_STALE_REPEAT;
    if (!loaded)
        v.act = v.stale != 0 && !strict ? FT_RES_LEAVE : FT_RES_MISS;
    /* A touch far from its unit's range loads what it needs but starts no prefetch:
     * generate's reduce kernel on the H200 read a far layer's weight through a stale
     * address at each step's third launch, and the prefetch that followed evicted the
     * next layer (two misses a step). The unit after the last one placed is where the
     * pass goes next, far or not: a pass longer than the record (launches inserted:
     * prefill's, a growing cache's) counts `at` past its units' ranges, and a touch
     * judged far there started no prefetch (every unit after a miss of its own). */
    v.placing = v.stale == 0 && (t->follows || !ft_res_far(t->at, range, pass));
    return v;
}

ft_res_region_t ft_res_region(int known, int vmm, int shared, int indirect_only)
{
    if (!known || !vmm)
        return FT_RES_REGION_UNMAPPED;
    if (shared)
        return FT_RES_REGION_SHARED;
    return indirect_only ? FT_RES_REGION_INDIRECT : FT_RES_REGION_STREAMS;
}

ft_res_unload_t ft_res_unload(int sum_ok, uint64_t sum, int ref_valid, uint64_t ref)
{
    ft_res_unload_t u = { 1, 0 };
    if (!sum_ok)
        return u; /* unproven: nothing the application wrote may be lost */
    /* Without a reference yet (a unit that came from FT_SPILL's host memory), the copy
     * back makes the host store match the sum, which becomes the reference. */
    u.changed = ref_valid && sum != ref;
    u.write_back = !ref_valid || u.changed;
    return u;
}

int ft_res_pin(unsigned changes)
{
    return changes == FT_RES_KEEP_AFTER_CHANGES;
}

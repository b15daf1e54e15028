/* check_residency.c - the residency engine's decisions (core/residency.c), called
 * directly: which loaded unit gives its slot up (never a pinned, busy, resident or
 * unloaded one; the least recently loaded), which units leave to come back within the
 * slots after a call went over them, what a load does when the slots are full,
 * which units a prefetch loads, the units at a pass position, how far a touch is from
 * its unit's range, a lane's position off the record, the repeat rule, each stale rule
 * with and without FT_STRICT_GUARD, which regions of a streamed unit stay, and what an
 * unload does with the bytes. */
#include <check.h>
#include <stdlib.h>

#include "core/residency.h"

/* A unit: loaded and streamed unless said otherwise. */
static ft_res_unit_t unit(uint64_t stamp)
{
    return (ft_res_unit_t){ .stamp = stamp, .loaded = 1, .streamed = 1 };
}

START_TEST(victim_is_the_least_recently_loaded)
{
    ft_res_unit_t u[4] = { unit(7), unit(3), unit(5), unit(9) };
    ck_assert_int_eq(ft_res_victim(u, 4), 1);
    u[1].stamp = 11;
    ck_assert_int_eq(ft_res_victim(u, 4), 2);
    /* a tie: the lowest index */
    u[0].stamp = 5;
    ck_assert_int_eq(ft_res_victim(u, 4), 0);
}
END_TEST

START_TEST(victim_never_pinned_busy_resident_or_unloaded)
{
    ft_res_unit_t u[5] = { unit(1), unit(2), unit(3), unit(4), unit(5) };
    u[0].pinned = 1;   /* stays on the device once loaded */
    u[1].busy = 1;     /* the running unit, or one the guarded call touched */
    u[2].streamed = 0; /* resident: holds no slot */
    u[3].loaded = 0;   /* has no slot to give */
    ck_assert_int_eq(ft_res_victim(u, 5), 4);
    u[4].busy = 1;
    ck_assert_int_eq(ft_res_victim(u, 5), -1);
    ck_assert_int_eq(ft_res_victim(u, 0), -1);
}
END_TEST

/* The victim against its definition, over random unit states. */
START_TEST(victim_random_against_definition)
{
    srand(11);
    for (int trial = 0; trial < 2000; trial++) {
        ft_res_unit_t u[12];
        int n = 1 + rand() % 12;
        for (int i = 0; i < n; i++)
            u[i] = (ft_res_unit_t){ (uint64_t)(rand() % 20), rand() % 4 != 0, rand() % 4 != 0, rand() % 6 == 0,
                                    rand() % 5 == 0 };
        int v = ft_res_victim(u, n);
        int want = -1;
        for (int i = 0; i < n; i++) {
            int may = u[i].loaded && u[i].streamed && !u[i].pinned && !u[i].busy;
            if (may && (want < 0 || u[i].stamp < u[want].stamp))
                want = i;
        }
        ck_assert_int_eq(v, want);
        if (v >= 0)
            ck_assert(u[v].loaded && u[v].streamed && !u[v].pinned && !u[v].busy);
    }
}
END_TEST

START_TEST(room_free_slot_evict_skip_over)
{
    ft_res_unit_t u[3] = { unit(4), unit(2), unit(6) };
    int v[3] = { 99, 99, 99 }, n = 99;
    ck_assert_int_eq(ft_res_make_room(u, 3, 1, 2, 0, v, &n), FT_RES_LOAD);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(ft_res_make_room(u, 3, 2, 2, 0, v, &n), FT_RES_EVICT);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(v[0], 1);
    ck_assert_int_eq(ft_res_make_room(u, 3, 2, 2, 1, v, &n), FT_RES_EVICT);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(v[0], 1);
    /* over the slots already (a call went over them): one out for the load and one for
     * the unit beyond, so the load leaves the count at the slots (it once took one out
     * per load, and the count never came back down) */
    ck_assert_int_eq(ft_res_make_room(u, 3, 3, 2, 0, v, &n), FT_RES_EVICT);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(v[0], 1);
    ck_assert_int_eq(v[1], 0);
    /* over by more than may go: a call's load takes out what may go and goes over by
     * the rest; a prefetch takes out nothing and waits */
    ck_assert_int_eq(ft_res_make_room(u, 3, 5, 2, 0, v, &n), FT_RES_OVER);
    ck_assert_int_eq(n, 3);
    ck_assert_int_eq(v[0], 1);
    ck_assert_int_eq(v[1], 0);
    ck_assert_int_eq(v[2], 2);
    ck_assert_int_eq(ft_res_make_room(u, 3, 5, 2, 1, v, &n), FT_RES_SKIP);
    ck_assert_int_eq(n, 0);
    for (int i = 0; i < 3; i++)
        u[i].busy = 1;
    /* every slot in use: a prefetch waits, a call's load goes over the slots */
    ck_assert_int_eq(ft_res_make_room(u, 3, 2, 2, 1, v, &n), FT_RES_SKIP);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(ft_res_make_room(u, 3, 2, 2, 0, v, &n), FT_RES_OVER);
    ck_assert_int_eq(n, 0);
    /* no units to look at (the shim's view could not be had) */
    ck_assert_int_eq(ft_res_make_room(NULL, 0, 2, 2, 0, v, &n), FT_RES_OVER);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(ft_res_make_room(NULL, 0, 2, 2, 1, v, &n), FT_RES_SKIP);
    ck_assert_int_eq(n, 0);
}
END_TEST

/* After a launch that read every streamed unit (a cat of every layer's weights): 8
 * units loaded for 2 slots. Back within the slots, the least recently loaded go first,
 * never the unit whose launch runs (busy), one the prefetch under way is about to load
 * (keep), a pinned one, or a resident one. */
START_TEST(victims_back_within_the_slots)
{
    ft_res_unit_t u[10];
    for (int i = 0; i < 10; i++)
        u[i] = unit((uint64_t)(20 + i));
    u[8].stamp = 3; /* loaded before the cat, the oldest: 8, then 9 */
    u[9].stamp = 4;
    u[0].streamed = 0; /* resident: holds no slot */
    u[1].busy = 1;     /* its launch was just enqueued */
    int keep[1] = { 2 }, out[10];
    int k = ft_res_victims(u, 10, 9, 2, 0, keep, 1, out);
    /* 9 loaded of 2 slots: 7 leave, 1 and 2 stay */
    ck_assert_int_eq(k, 7);
    const int want[7] = { 8, 9, 3, 4, 5, 6, 7 };
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(out[i], want[i]);
    /* within the slots: none leaves; before a load, one makes room */
    ck_assert_int_eq(ft_res_victims(u, 10, 2, 2, 0, keep, 1, out), 0);
    ck_assert_int_eq(ft_res_victims(u, 10, 1, 2, 1, NULL, 0, out), 0);
    ck_assert_int_eq(ft_res_victims(u, 10, 2, 2, 1, NULL, 0, out), 1);
    ck_assert_int_eq(out[0], 8);
    /* fewer may go than are beyond: as many as may (the pinned one holds no slot, and
     * the busy and kept ones stay, over the slots) */
    for (int i = 3; i < 10; i++)
        u[i].busy = 1;
    u[4].busy = 0;
    u[5].busy = 0;
    u[5].pinned = 1;
    k = ft_res_victims(u, 10, 9, 2, 0, keep, 1, out);
    ck_assert_int_eq(k, 1);
    ck_assert_int_eq(out[0], 4);
    /* equal stamps: the lowest index first */
    for (int i = 0; i < 10; i++)
        u[i] = unit(5);
    k = ft_res_victims(u, 10, 10, 7, 0, NULL, 0, out);
    ck_assert_int_eq(k, 3);
    ck_assert_int_eq(out[0], 0);
    ck_assert_int_eq(out[1], 1);
    ck_assert_int_eq(out[2], 2);
}
END_TEST

/* The victims against their definition, over random unit states: as many as the count
 * over the slots asks (plus want) or as may go, the least recently loaded of those that
 * may, in that order, none kept. */
START_TEST(victims_random_against_definition)
{
    srand(17);
    for (int trial = 0; trial < 3000; trial++) {
        ft_res_unit_t u[16];
        int n = 1 + rand() % 16, keep[4], n_keep = rand() % 5, out[16];
        for (int i = 0; i < n; i++)
            u[i] = (ft_res_unit_t){ (uint64_t)(rand() % 10), rand() % 4 != 0, rand() % 5 != 0, rand() % 8 == 0,
                                    rand() % 6 == 0 };
        for (int k = 0; k < n_keep; k++)
            keep[k] = rand() % n;
        int slots = 1 + rand() % 4, want = rand() % 2, loaded = rand() % (n + 1);
        int k = ft_res_victims(u, n, loaded, slots, want, keep, n_keep, out);
        /* the definition: repeatedly the least recently loaded (lowest index on a tie)
         * of those that may go and were not taken yet */
        int taken[16] = { 0 }, need = loaded + want - slots, w = 0;
        for (; w < need; w++) {
            int best = -1;
            for (int i = 0; i < n; i++) {
                int kept = 0;
                for (int j = 0; j < n_keep; j++)
                    kept |= keep[j] == i;
                if (u[i].loaded && u[i].streamed && !u[i].pinned && !u[i].busy && !kept && !taken[i] &&
                    (best < 0 || u[i].stamp < u[best].stamp))
                    best = i;
            }
            if (best < 0)
                break;
            taken[best] = 1;
            ck_assert_int_lt(w, k);
            ck_assert_int_eq(out[w], best);
        }
        ck_assert_int_eq(k, need > 0 ? w : 0);
    }
}
END_TEST

START_TEST(prefetch_follows_the_pass_and_wraps)
{
    /* units 0..7; 0, 3 and 4 resident */
    ft_res_unit_t u[8];
    for (int i = 0; i < 8; i++)
        u[i] = unit((uint64_t)i);
    u[0].streamed = u[3].streamed = u[4].streamed = 0;
    int out[8];
    ck_assert_int_eq(ft_res_prefetch(u, 8, 1, 3, out), 2);
    ck_assert_int_eq(out[0], 2);
    ck_assert_int_eq(out[1], 5); /* the resident ones skipped, not counted */
    ck_assert_int_eq(ft_res_prefetch(u, 8, 6, 3, out), 2);
    ck_assert_int_eq(out[0], 7);
    ck_assert_int_eq(out[1], 1); /* round the end of the pass */
    /* loaded or not, a unit in the window counts: the shim loads those that are not */
    u[7].loaded = 0;
    ck_assert_int_eq(ft_res_prefetch(u, 8, 6, 3, out), 2);
    ck_assert_int_eq(out[0], 7);
    /* from a resident unit's first launch too */
    ck_assert_int_eq(ft_res_prefetch(u, 8, 4, 2, out), 1);
    ck_assert_int_eq(out[0], 5);
    /* a pinned unit on the device holds no slot: skipped, not counted; one not loaded
     * yet is loaded as any */
    u[2].pinned = 1;
    ck_assert_int_eq(ft_res_prefetch(u, 8, 1, 3, out), 2);
    ck_assert_int_eq(out[0], 5);
    ck_assert_int_eq(out[1], 6);
    u[2].loaded = 0;
    ck_assert_int_eq(ft_res_prefetch(u, 8, 1, 3, out), 2);
    ck_assert_int_eq(out[0], 2);
    ck_assert_int_eq(out[1], 5);
    u[2].pinned = 0;
    u[2].loaded = 1;
    /* one slot: nothing ahead */
    ck_assert_int_eq(ft_res_prefetch(u, 8, 1, 1, out), 0);
    /* more slots than streamed units: each once, never u itself */
    ck_assert_int_eq(ft_res_prefetch(u, 8, 1, 8, out), 4);
    ck_assert_int_eq(out[0], 2);
    ck_assert_int_eq(out[1], 5);
    ck_assert_int_eq(out[2], 6);
    ck_assert_int_eq(out[3], 7);
}
END_TEST

START_TEST(unit_at_a_position)
{
    ft_res_range_t r[4] = { { 0, 2 }, { 3, 9 }, { 10, 10 }, { 14, 20 } };
    ck_assert_int_eq(ft_res_unit_at(r, 4, 0, 0), 0);
    ck_assert_int_eq(ft_res_unit_at(r, 4, 3, 0), 1);
    ck_assert_int_eq(ft_res_unit_at(r, 4, 9, 1), 1);
    ck_assert_int_eq(ft_res_unit_at(r, 4, 10, 0), 2);
    ck_assert_int_eq(ft_res_unit_at(r, 4, 10, 1), 2);
    ck_assert_int_eq(ft_res_unit_at(r, 4, 20, 1), 3);
    ck_assert_int_eq(ft_res_unit_at(r, 4, 4, 0), -1);  /* inside a range */
    ck_assert_int_eq(ft_res_unit_at(r, 4, 12, 0), -1); /* between ranges */
    ck_assert_int_eq(ft_res_unit_at(r, 4, 21, 1), -1); /* past the last */
    ck_assert_int_eq(ft_res_unit_at(r, 4, 3, 1), -1);  /* a start is not an end */
    ck_assert_int_eq(ft_res_unit_at(r, 0, 0, 0), -1);
}
END_TEST

START_TEST(far_from_the_range)
{
    ft_res_pass_t pass = { 100, 0 };
    ft_res_range_t r = { 40, 49 };
    ck_assert(!ft_res_far(45, r, &pass));
    ck_assert(!ft_res_far(-1, r, &pass));
    ck_assert(!ft_res_far(0, r, &pass));  /* 40 - 50 = -10: half a pass before, not more */
    ck_assert(!ft_res_far(99, r, &pass)); /* 49 + 50 */
    ck_assert(ft_res_far(100, r, &pass)); /* a longer pass than the recorded one */
    r = (ft_res_range_t){ 60, 69 };
    ck_assert(ft_res_far(9, r, &pass));
    ck_assert(!ft_res_far(10, r, &pass));
    /* passes begin at 90: position 5 comes after 95, far from 20..29 */
    pass.start = 90;
    r = (ft_res_range_t){ 20, 29 };
    ck_assert(!ft_res_far(95, r, &pass));
    ck_assert(!ft_res_far(5, r, &pass));
    ck_assert(ft_res_far(85, r, &pass));
    /* a range across the wrap has no order to compare: 50 comes 60 launches into the
     * pass, past 85..95 (5..15 in pass order) by more than half a pass were it not */
    r = (ft_res_range_t){ 85, 95 };
    ck_assert(!ft_res_far(50, r, &pass));
    r = (ft_res_range_t){ 91, 95 };
    ck_assert(ft_res_far(50, r, &pass));
    /* no pass length: nothing is far */
    pass = (ft_res_pass_t){ 0, 0 };
    ck_assert(!ft_res_far(1000, (ft_res_range_t){ 0, 1 }, &pass));
}
END_TEST

START_TEST(lane_leaves_the_record_until_its_next_pass)
{
    int off = 0;
    ck_assert_int_eq(ft_res_lane_pos(&off, 0, 1), 0);
    ck_assert_int_eq(ft_res_lane_pos(&off, 5, 1), 5);
    ck_assert_int_eq(ft_res_lane_pos(&off, -1, 1), -1); /* no position: stays on the record */
    ck_assert_int_eq(off, 0);
    ck_assert_int_eq(ft_res_lane_pos(&off, 6, 0), -1);  /* off the record */
    ck_assert_int_eq(off, 1);
    ck_assert_int_eq(ft_res_lane_pos(&off, 7, 1), -1);  /* and judged by no position */
    ck_assert_int_eq(ft_res_lane_pos(&off, 0, 1), 0);   /* until a pass begins */
    ck_assert_int_eq(off, 0);
    ck_assert_int_eq(ft_res_lane_pos(&off, 1, 1), 1);
    /* a pass that begins off the record */
    ck_assert_int_eq(ft_res_lane_pos(&off, 0, 0), -1);
    ck_assert_int_eq(off, 1);
    /* a launch whose weight makes its position sure puts the lane back on the record */
    ck_assert_int_eq(ft_res_lane_pos(&off, 9, 2), 9);
    ck_assert_int_eq(off, 0);
    ck_assert_int_eq(ft_res_lane_pos(&off, 10, 1), 10);
}
END_TEST

START_TEST(repeat_rule)
{
    ft_res_repeat_t *t = NULL;
    const long pass = 40; /* window: 10 launches */
    /* copies and sets are spared, and not recorded */
    for (uint64_t at = 0; at < 5; at++)
        ck_assert(!ft_res_repeat_touch(&t, 0, 7, 1, at, pass));
    /* the third touch in a row within the window, and those after */
    ck_assert(!ft_res_repeat_touch(&t, 0xa, 7, 1, 100, pass));
    ck_assert(!ft_res_repeat_touch(&t, 0xa, 7, 1, 105, pass));
    ck_assert(ft_res_repeat_touch(&t, 0xa, 7, 1, 114, pass));
    ck_assert(ft_res_repeat_touch(&t, 0xa, 7, 1, 120, pass));
    /* the same launch asked again (a region found twice): the same answer, no step */
    ck_assert(ft_res_repeat_touch(&t, 0xa, 7, 1, 120, pass));
    /* a touch a window away starts a new run */
    ck_assert(!ft_res_repeat_touch(&t, 0xa, 7, 1, 130, pass));
    ck_assert(!ft_res_repeat_touch(&t, 0xa, 7, 1, 131, pass));
    ck_assert(ft_res_repeat_touch(&t, 0xa, 7, 1, 132, pass));
    /* another lane's touch starts a new run too */
    ck_assert(!ft_res_repeat_touch(&t, 0xa, 7, 2, 133, pass));
    ck_assert(!ft_res_repeat_touch(&t, 0xa, 7, 2, 134, pass));
    /* runs are per kernel and per region */
    ck_assert(!ft_res_repeat_touch(&t, 0xb, 7, 2, 135, pass));
    ck_assert(!ft_res_repeat_touch(&t, 0xa, 8, 2, 135, pass));
    /* two reads half a pass apart are not stale */
    ck_assert(!ft_res_repeat_touch(&t, 0xc, 1, 1, 0, pass));
    ck_assert(!ft_res_repeat_touch(&t, 0xc, 1, 1, 20, pass));
    ck_assert(!ft_res_repeat_touch(&t, 0xc, 1, 1, 40, pass));
    /* a short pass: the window is still 4 launches */
    ck_assert(!ft_res_repeat_touch(&t, 0xd, 1, 1, 0, 3));
    ck_assert(!ft_res_repeat_touch(&t, 0xd, 1, 1, 3, 3));
    ck_assert(ft_res_repeat_touch(&t, 0xd, 1, 1, 6, 3));
    ck_assert(!ft_res_repeat_touch(&t, 0xd, 1, 1, 10, 3));
    ft_res_repeat_free(&t);
    ck_assert_ptr_null(t);
}
END_TEST

/* A touch of a unit whose range is 10..19, in a pass of 100 launches. */
static ft_res_verdict_t judge(ft_res_touch_t t, int loaded, int strict)
{
    ft_res_pass_t pass = { 100, 0 };
    return ft_res_classify(&t, (ft_res_range_t){ 10, 19 }, loaded, &pass, strict);
}

START_TEST(touch_expected_in_its_range)
{
    ft_res_touch_t t = { .pos = 12, .at = 12 };
    ft_res_verdict_t v = judge(t, 0, 0);
    ck_assert_int_eq(v.act, FT_RES_MISS);
    ck_assert_uint_eq(v.stale, 0);
    ck_assert(v.placing);
    v = judge(t, 1, 0);
    ck_assert_int_eq(v.act, FT_RES_USE);
    ck_assert(v.placing);
    /* no position (off the record, a copy or set): judged by the other rules only */
    t = (ft_res_touch_t){ .pos = -1, .at = -1 };
    v = judge(t, 0, 0);
    ck_assert_int_eq(v.act, FT_RES_MISS);
    ck_assert(v.placing);
}
END_TEST

START_TEST(touch_stale_by_each_rule)
{
    struct {
        ft_res_touch_t t;
        unsigned stale;
    } cases[] = {
        { { .unsure = 1, .pos = 12, .at = 12 }, FT_RES_STALE_UNSURE },
        { { .weightless = 1, .pos = 12, .at = 12 }, FT_RES_STALE_WEIGHTLESS },
        { { .pos = 9, .at = 9 }, FT_RES_STALE_OUTSIDE },
        { { .pos = 20, .at = 20 }, FT_RES_STALE_OUTSIDE },
        { { .repeat = 1, .pos = 12, .at = 12 }, FT_RES_STALE_REPEAT },
        { { .unsure = 1, .pos = 30, .at = 30 }, FT_RES_STALE_UNSURE | FT_RES_STALE_OUTSIDE },
        { { .unsure = 1, .weightless = 1, .repeat = 1, .pos = -1, .at = -1 },
          FT_RES_STALE_UNSURE | FT_RES_STALE_WEIGHTLESS | FT_RES_STALE_REPEAT },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        /* not loaded: nothing loaded for it */
        ft_res_verdict_t v = judge(cases[i].t, 0, 0);
        ck_assert_int_eq(v.act, FT_RES_LEAVE);
        ck_assert_uint_eq(v.stale, cases[i].stale);
        ck_assert(!v.placing);
        /* FT_STRICT_GUARD: loaded all the same, as a miss */
        v = judge(cases[i].t, 0, 1);
        ck_assert_int_eq(v.act, FT_RES_MISS);
        ck_assert_uint_eq(v.stale, cases[i].stale);
        ck_assert(!v.placing);
        /* loaded: a use, which says nothing of where the pass is */
        v = judge(cases[i].t, 1, 0);
        ck_assert_int_eq(v.act, FT_RES_USE);
        ck_assert(!v.placing);
    }
}
END_TEST

START_TEST(touch_far_from_its_range_loads_but_does_not_place)
{
    /* position unknown (off the record), but 70 launches into the pass: more than
     * half a pass after 10..19 */
    ft_res_touch_t t = { .pos = -1, .at = 70 };
    ft_res_verdict_t v = judge(t, 0, 0);
    ck_assert_int_eq(v.act, FT_RES_MISS);
    ck_assert_uint_eq(v.stale, 0);
    ck_assert(!v.placing);
    t.at = 69;
    ck_assert(judge(t, 0, 0).placing);
    /* ... unless the unit follows the one the lane placed last: a pass longer than the
     * record (launches it lacks) has drifted there */
    t = (ft_res_touch_t){ .pos = -1, .at = 70, .follows = 1 };
    v = judge(t, 0, 0);
    ck_assert_int_eq(v.act, FT_RES_MISS);
    ck_assert(v.placing);
    /* a stale touch places nothing, following or not */
    t.unsure = 1;
    ck_assert(!judge(t, 0, 0).placing);
}
END_TEST

START_TEST(regions_that_stay_with_a_streamed_unit)
{
    ck_assert_int_eq(ft_res_region(1, 1, 0, 0), FT_RES_REGION_STREAMS);
    ck_assert_int_eq(ft_res_region(1, 0, 0, 0), FT_RES_REGION_UNMAPPED);
    ck_assert_int_eq(ft_res_region(0, 1, 0, 0), FT_RES_REGION_UNMAPPED);
    ck_assert_int_eq(ft_res_region(1, 1, 1, 0), FT_RES_REGION_SHARED);
    ck_assert_int_eq(ft_res_region(1, 1, 0, 1), FT_RES_REGION_INDIRECT);
    /* the first reason counts: not mapped, then shared */
    ck_assert_int_eq(ft_res_region(1, 0, 1, 1), FT_RES_REGION_UNMAPPED);
    ck_assert_int_eq(ft_res_region(1, 1, 1, 1), FT_RES_REGION_SHARED);
}
END_TEST

START_TEST(unload_writes_back_unless_proven_unchanged)
{
    ft_res_unload_t u = ft_res_unload(1, 42, 1, 42);
    ck_assert(!u.write_back);
    ck_assert(!u.changed);
    u = ft_res_unload(1, 43, 1, 42);
    ck_assert(u.write_back);
    ck_assert(u.changed);
    /* no reference yet (a unit from FT_SPILL's host memory): copied back, not changed */
    u = ft_res_unload(1, 43, 0, 42);
    ck_assert(u.write_back);
    ck_assert(!u.changed);
    /* no checksum: copied back, whatever the reference */
    u = ft_res_unload(0, 42, 1, 42);
    ck_assert(u.write_back);
    ck_assert(!u.changed);
}
END_TEST

START_TEST(pinned_at_the_third_change_once)
{
    ck_assert(!ft_res_pin(1));
    ck_assert(!ft_res_pin(2));
    ck_assert(ft_res_pin(FT_RES_KEEP_AFTER_CHANGES));
    ck_assert_int_eq(FT_RES_KEEP_AFTER_CHANGES, 3);
    ck_assert(!ft_res_pin(4)); /* said once */
}
END_TEST

Suite *residency_suite(void)
{
    Suite *s = suite_create("residency");
    TCase *tc = tcase_create("slots");
    tcase_add_test(tc, victim_is_the_least_recently_loaded);
    tcase_add_test(tc, victim_never_pinned_busy_resident_or_unloaded);
    tcase_add_test(tc, victim_random_against_definition);
    tcase_add_test(tc, room_free_slot_evict_skip_over);
    tcase_add_test(tc, victims_back_within_the_slots);
    tcase_add_test(tc, victims_random_against_definition);
    tcase_add_test(tc, prefetch_follows_the_pass_and_wraps);
    tcase_add_test(tc, unit_at_a_position);
    suite_add_tcase(s, tc);
    tc = tcase_create("touches");
    tcase_add_test(tc, far_from_the_range);
    tcase_add_test(tc, lane_leaves_the_record_until_its_next_pass);
    tcase_add_test(tc, repeat_rule);
    tcase_add_test(tc, touch_expected_in_its_range);
    tcase_add_test(tc, touch_stale_by_each_rule);
    tcase_add_test(tc, touch_far_from_its_range_loads_but_does_not_place);
    suite_add_tcase(s, tc);
    tc = tcase_create("unloads");
    tcase_add_test(tc, regions_that_stay_with_a_streamed_unit);
    tcase_add_test(tc, unload_writes_back_unless_proven_unchanged);
    tcase_add_test(tc, pinned_at_the_third_change_once);
    suite_add_tcase(s, tc);
    return s;
}

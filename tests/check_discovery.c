/* check_discovery.c - the discovery engine on synthetic launch streams: iteration
 * boundaries (wrap-around, prologues, explicit marks, marker kernels, threads), weight
 * detection (copies, changed content, late allocations) and unit grouping (repeating
 * layers, embeddings and head, patterns). */
#define _GNU_SOURCE /* pipe2 */
#include <check.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>

#include "log_capture.h"
#include "core/discovery.h"
#include "core/log.h"

#define MIB (1ull << 20)
#define KIB (1ull << 10)

/* A fake device: regions at fixed addresses, and a version per region that the hash
 * callback reports (a kernel "writing" a region bumps its version). */
static ft_regions_t *regions;
static uint64_t next_base;
static uint64_t version[4096];
static unsigned hash_calls[4096]; /* snapshots that read each region */
static uint64_t hash_fails;       /* a region whose content cannot be read (0: none) */
static size_t hash_batch_max;     /* the most regions one hash call was given */

static uint64_t alloc_region(uint64_t size)
{
    uint64_t base = next_base;
    next_base += (size + 0xffff) & ~0xffffull;
    ck_assert_int_gt(ft_regions_insert(regions, base, size, 0, 0), 0);
    return base;
}

static uint32_t id_of(uint64_t ptr)
{
    ft_region_t r;
    ck_assert_int_eq(ft_regions_find(regions, ptr, &r), 1);
    return r.id;
}

static void fake_hash(void *ctx, ft_disc_hash_req_t *q, size_t n)
{
    (void)ctx;
    if (n > hash_batch_max)
        hash_batch_max = n;
    for (size_t i = 0; i < n; i++) {
        hash_calls[id_of(q[i].base)]++;
        q[i].hash = version[id_of(q[i].base)] * 31 + q[i].size;
        q[i].failed = q[i].base == hash_fails;
    }
}

static int lazy_layers; /* layers of the next forward that run extra one-time launches */
static int stray_touch; /* layer 0 reaches the last layer's gate through a pointer array */
static int stale_padding; /* every layer's add carries pointers to later layers' weights */
static int stale_rope;    /* RoPE's three multiplies carry a misaligned stale address */
static int alt_kernels;   /* odd layers' norms are another kernel (Inductor's alternate so) */
static int nvtx;          /* the forward emits NVTX ranges (2: the outermost has no name) */
static int alternate_small; /* the embedding and rope also use a small segment that
                               exists before the first launch, at places that alternate
                               from one forward to the next */
static int shared_norms;  /* the norm weights and the input lie in one region (PyTorch's
                             small segment), which the input's copy makes no weight */
static int stale_ends;    /* once-per-pass kernels before and after the layers carry
                             stale addresses of layer weights, and the up GEMM's
                             padding holds another layer's address */

static int input_first;   /* the input is allocated before the weights */
static int copy_in;       /* each forward starts with a launch touching the input only */
static int large_embedding; /* after discovery, the embedding is another kernel (a
                               prefill's: PyTorch picks by size) */
static int syncs;         /* the host synchronises after every forward */
static int stale_start;   /* the embedding carries a stale address of a layer's weight in
                             discovery (not after, when tracking) */
static int extra_cat;      /* when tracking: a launch the recorded pass did not have, after
                             layer 1's q projection (a launch added after discovery) */
static int packed_qkv;    /* each layer's q, k and v in one region (a caching allocator's
                             segment), read by the same GEMM kernel */
static int swap_kv;       /* when tracking: layer 1 reads v before k (the same kernel on
                             other slices, as a router picking other experts) */
/* After discovery: launches go to ft_disc_track, their positions to track_log, and
 * whether each is the recorded pass's launch there (expected) to track_exp. */
static int tracking;
static long track_log[1024];
static int track_exp[1024];
static size_t n_track;

static void setup(void)
{
    input_first = 0;
    syncs = 0;
    copy_in = 0;
    stale_start = 0;
    large_embedding = 0;
    tracking = 0;
    extra_cat = 0;
    packed_qkv = 0;
    swap_kv = 0;
    n_track = 0;
    lazy_layers = 0;
    shared_norms = 0;
    alternate_small = 0;
    stray_touch = 0;
    stale_padding = 0;
    stale_rope = 0;
    alt_kernels = 0;
    stale_ends = 0;
    nvtx = 0;
    regions = ft_regions_new();
    next_base = 0x700000000000ull;
    memset(version, 0, sizeof version);
    memset(hash_calls, 0, sizeof hash_calls);
    hash_fails = 0;
    hash_batch_max = 0;
    ft_log_set_threshold(FT_LOG_ERROR);
}

static void teardown(void)
{
    ft_regions_free(regions);
}

/* Launches kernel `name` on lane touching the given pointers; bumps the version of
 * `written` (0 = none), as a kernel writing its output would. */
static int launch(ft_disc_t *d, uint64_t lane, const char *name, uint64_t written, int n, ...)
{
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    uint64_t args[16];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        args[i] = va_arg(ap, uint64_t);
    va_end(ap);
    ft_scan_bytes(regions, args, (size_t)n * 8, &set);
    if (written)
        version[id_of(written)]++;
    /* The kernel's identity: its name's address is stable for string literals. */
    if (tracking) {
        int expected;
        long pos = ft_disc_track(d, lane, (uint64_t)(uintptr_t)name, &set, &expected, NULL);
        if (n_track < sizeof track_log / sizeof *track_log) {
            track_exp[n_track] = expected;
            track_log[n_track++] = pos;
        }
        return pos == 0;
    }
    return ft_disc_launch(d, lane, (uint64_t)(uintptr_t)name, name, &set);
}

typedef struct {
    uint64_t embed, norm, head, act, act2, input, small;
    uint64_t ln1[8], q[8], k[8], v[8], o[8], ln2[8], gate[8], up[8], down[8];
} llama_t;

static void llama_alloc(llama_t *m, int layers)
{
    if (input_first)
        m->input = alloc_region(4 * KIB);
    m->embed = alloc_region(64 * MIB);
    uint64_t norms = shared_norms ? alloc_region(2 * MIB) : 0;
    for (int l = 0; l < layers; l++) {
        m->ln1[l] = shared_norms ? norms + (uint64_t)l * 16 * KIB : alloc_region(8 * KIB);
        m->q[l] = alloc_region(packed_qkv ? 48 * MIB : 32 * MIB);
        m->k[l] = packed_qkv ? m->q[l] + 32 * MIB : alloc_region(8 * MIB);
        m->v[l] = packed_qkv ? m->q[l] + 40 * MIB : alloc_region(8 * MIB);
        m->o[l] = alloc_region(32 * MIB);
        m->ln2[l] = shared_norms ? norms + (uint64_t)l * 16 * KIB + 8 * KIB : alloc_region(8 * KIB);
        m->gate[l] = alloc_region(112 * MIB);
        m->up[l] = alloc_region(112 * MIB);
        m->down[l] = alloc_region(112 * MIB);
    }
    m->norm = shared_norms ? norms + MIB : alloc_region(8 * KIB);
    m->head = alloc_region(64 * MIB);
    m->act = alloc_region(2 * MIB);
    m->act2 = alloc_region(2 * MIB);
    m->small = alloc_region(2 * MIB);
    if (shared_norms) /* the input ids too, written each forward: no weight there */
        m->input = norms + MIB + 512 * KIB;
    else if (!input_first)
        m->input = alloc_region(4 * KIB);
}

/* One forward: an embedding lookup, layers of norm / projections / attention / MLP,
 * then the final norm and the head. */
static void llama_forward(ft_disc_t *d, uint64_t lane, llama_t *m, int layers)
{
    ft_scan_set_t in;
    ft_scan_set_clear(&in);
    ft_scan_bytes(regions, &m->input, 8, &in);
    ft_disc_write(d, &in); /* the input arrives by memcpy each forward */
    if (nvtx) {
        ft_disc_range_push(d, lane, nvtx == 2 ? NULL : "model");
        ft_disc_range_push(d, lane, "embed_tokens");
    }
    if (copy_in)
        launch(d, lane, "copy_in", m->act2, 2, m->input, m->act2);
    /* As PyTorch's caching allocator places small activations when the last forward's
     * output is still alive: one place in odd forwards, another in even ones. */
    static unsigned forwards;
    static uint64_t late; /* a segment made after the first launch: no candidate */
    int odd = alternate_small && (forwards++ & 1);
    uint64_t small = m->small + (odd ? 320 * KIB : 64 * KIB);
    if (alternate_small)
        launch(d, lane, "embedding", m->act, 4, m->embed, m->input, m->act, small);
    else
        launch(d, lane, tracking && large_embedding ? "embedding_large" : "embedding", m->act,
               stale_start && !tracking ? 4 : 3, m->embed, m->input, m->act, m->gate[layers - 1]);
    if (stale_ends)
        launch(d, lane, "cast", 0, 2, m->act, m->k[2]);
    if (nvtx)
        ft_disc_range_pop(d, lane);
    for (int l = 0; l < layers; l++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d", l);
        if (nvtx)
            ft_disc_range_push(d, lane, name);
        launch(d, lane, alt_kernels && l % 2 == 1 ? "rmsnorm_odd" : "rmsnorm", m->act2, 3, m->act, m->ln1[l],
               m->act2);
        launch(d, lane, "gemm", m->act, 3, m->act2, m->q[l], m->act);
        if (tracking && extra_cat && l == 1)
            launch(d, lane, "cat", m->act, 2, m->act2, m->act);
        int swap = tracking && swap_kv && l == 1;
        launch(d, lane, "gemm", m->act, 3, m->act2, swap ? m->v[l] : m->k[l], m->act);
        launch(d, lane, "gemm", m->act, 3, m->act2, swap ? m->k[l] : m->v[l], m->act);
        if (alternate_small)
            launch(d, lane, "rope", m->small, 2, m->act, small);
        else if (stale_rope) /* 38 MiB and 3 bytes into layer 1's gate, every time */
            for (int r = 0; r < 3; r++) /* q, k, then q again */
                launch(d, lane, "rope_mul", 0, 2, r == 1 ? m->act2 : m->act, m->gate[1] + 38 * MIB + 3);
        else
            launch(d, lane, "rope", m->act, 1, m->act);
        launch(d, lane, "attention", m->act2, 2, m->act, m->act2);
        launch(d, lane, "gemm", m->act, 3, m->act2, m->o[l], m->act);
        launch(d, lane, "rmsnorm", m->act2, 3, m->act, m->ln2[l], m->act2);
        launch(d, lane, "gemm", m->act, 3, m->act2, m->gate[l], m->act);
        if (stale_ends)
            launch(d, lane, "gemm", m->act, 4, m->act2, m->up[l], m->act, m->q[(l + 1) % layers]);
        else
            launch(d, lane, "gemm", m->act, 3, m->act2, m->up[l], m->act);
        if (alternate_small && odd) { /* its buffer then lies in the other segment */
            if (late == 0)
                late = alloc_region(2 * MIB);
            launch(d, lane, "silu_mul", late, 2, m->act, late);
        } else if (alternate_small)
            launch(d, lane, "silu_mul", m->small, 2, m->act, small);
        else
            launch(d, lane, "silu_mul", m->act, 1, m->act);
        launch(d, lane, "gemm", m->act2, 3, m->act, m->down[l], m->act2);
        if (stale_padding) /* argument padding still holding two earlier pointers */
            launch(d, lane, "add", m->act, 4, m->act2, m->act, m->q[(l + 2) % layers],
                   m->gate[(l + 3) % layers]);
        else
            launch(d, lane, "add", m->act, 2, m->act2, m->act);
        if (stray_touch) {
            /* In layer 0, a word read from a pointer array happens to point into the
             * last layer's weight: touched, but not where the pass's order comes from. */
            ft_scan_set_t set;
            ft_scan_set_clear(&set);
            ft_scan_bytes(regions, &m->act, 8, &set);
            uint64_t stray = m->gate[layers - 1];
            if (l == 0)
                ck_assert_uint_eq(ft_scan_indirect(regions, &stray, 8, &set), 1);
            ft_disc_launch(d, lane, (uint64_t)(uintptr_t)"gather", "gather", &set);
        }
        if (nvtx)
            ft_disc_range_pop(d, lane);
        if (lazy_layers > 0) { /* first-forward work: library set-up, caches */
            lazy_layers--;
            launch(d, lane, "lazy_init", 0, 2, m->act2, m->input);
        }
    }
    if (nvtx)
        ft_disc_range_push(d, lane, "lm_head");
    launch(d, lane, "rmsnorm", m->act2, 3, m->act, m->norm, m->act2);
    launch(d, lane, "gemm_head", m->act, 3, m->act2, m->head, m->act);
    if (stale_ends)
        launch(d, lane, "to_float", 0, 2, m->act, m->up[1]);
    if (nvtx) {
        ft_disc_range_pop(d, lane);
        ft_disc_range_pop(d, lane);
    }
    if (syncs)
        ft_disc_sync(d, lane);
}

static ft_disc_params_t params(int iters)
{
    ft_disc_params_t p;
    memset(&p, 0, sizeof p);
    p.iters = iters;
    p.hash = fake_hash;
    return p;
}

static void check_llama_units(ft_disc_t *d, llama_t *m, int layers)
{
    if (getenv("FT_TEST_DEBUG"))
        for (size_t i = 0; i < ft_disc_unit_count(d); i++)
            fprintf(stderr, "%s: %u regions, launches %u..%u\n", ft_disc_unit(d, i)->name,
                    ft_disc_unit(d, i)->n_regions, ft_disc_unit(d, i)->first_launch,
                    ft_disc_unit(d, i)->last_launch);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_unit_count(d), (size_t)layers + 2);
    const ft_disc_unit_t *u0 = ft_disc_unit(d, 0);
    ck_assert_str_eq(u0->name, "unit.0");
    ck_assert_uint_eq(u0->n_regions, 1);
    ck_assert_uint_eq(u0->region_ids[0], id_of(m->embed));
    ck_assert_uint_eq(u0->first_launch, 0);
    ck_assert_uint_eq(u0->last_launch, 0);
    for (int l = 0; l < layers; l++) {
        const ft_disc_unit_t *u = ft_disc_unit(d, (size_t)l + 1);
        char name[16];
        snprintf(name, sizeof name, "unit.%d", l + 1);
        ck_assert_str_eq(u->name, name);
        ck_assert_uint_eq(u->n_regions, 9);
        ck_assert_uint_eq(u->region_ids[0], id_of(m->ln1[l]));
        ck_assert_uint_eq(u->region_ids[8], id_of(m->down[l]));
        ck_assert_uint_eq(u->bytes, 2 * 8 * KIB + (32 + 8 + 8 + 32 + 3 * 112) * MIB);
        unsigned per_layer = 13u + (unsigned)stray_touch; /* the gather launch */
        ck_assert_uint_eq(u->first_launch, 1 + per_layer * (unsigned)l);
        ck_assert_uint_eq(u->last_launch, per_layer * (unsigned)(l + 1));
        ck_assert(u->offload);
    }
    const ft_disc_unit_t *h = ft_disc_unit(d, (size_t)layers + 1);
    ck_assert_uint_eq(h->n_regions, 2);
    ck_assert_uint_eq(h->region_ids[0], id_of(m->norm));
    ck_assert_uint_eq(h->region_ids[1], id_of(m->head));
    ck_assert_uint_eq(h->last_launch, (13u + (unsigned)stray_touch) * (unsigned)layers + 2);
    uint64_t layer = 2 * 8 * KIB + 416 * MIB;
    ck_assert_uint_eq(ft_disc_weight_bytes(d), 128 * MIB + 8 * KIB + (uint64_t)layers * layer);
}

START_TEST(llama_units_by_wraparound)
{
    llama_t m;
    llama_alloc(&m, 4);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    int boundaries = 0;
    for (int it = 0; it < 4; it++) {
        llama_forward(d, 1, &m, 4);
        boundaries = ft_disc_iterations(d);
    }
    ck_assert_int_eq(boundaries, 2);
    check_llama_units(d, &m, 4);
    ft_disc_free(d);
}
END_TEST

/* Kernels that alternate between layers (torch.compile's, with Inductor's buffers, on
 * the H100): the launch sequence repeats every two layers, and each period's weights
 * repeat at its half, so the units are still one a layer. */
START_TEST(kernels_alternating_between_layers_still_give_a_unit_a_layer)
{
    llama_t m;
    alt_kernels = 1;
    llama_alloc(&m, 6);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 4; it++)
        llama_forward(d, 1, &m, 6);
    check_llama_units(d, &m, 6);
    ft_disc_free(d);
}
END_TEST

/* The program frees the model the units were found in (after DONE): the free that
 * brings the units' weights gone to FT_DISC_GONE_PERCENT says so, once; frees of other
 * regions count nothing. ft_disc_reload then discovers the model loaded next from
 * scratch, with the restarts it allows counted anew. */
static uint64_t free_weight_region(ft_disc_t *d, uint64_t base, int *crossed, uint64_t *total)
{
    ft_region_t r;
    uint64_t gone = 0;
    ck_assert_int_eq(ft_regions_remove(regions, base, &r), 0);
    ft_disc_region_freed(d, r.id);
    *crossed += ft_disc_weight_freed(d, r.id, &gone, total);
    return gone;
}

START_TEST(a_model_freed_after_done_and_another_discovered)
{
    llama_t a, b;
    llama_alloc(&a, 4);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 4; it++)
        llama_forward(d, 1, &a, 4);
    check_llama_units(d, &a, 4);
    uint64_t weights = ft_disc_weight_bytes(d), total = 0, gone = 0;
    int crossed = 0;
    /* An activation freed: not a weight. */
    gone = free_weight_region(d, a.act2, &crossed, &total);
    ck_assert_uint_eq(gone, 0);
    ck_assert_uint_eq(total, weights);
    gone = free_weight_region(d, a.embed, &crossed, &total);
    ck_assert_uint_eq(gone, 64 * MIB);
    uint64_t (*w[])[8] = { &a.ln1, &a.q, &a.k, &a.v, &a.o, &a.ln2, &a.gate, &a.up, &a.down };
    int crossed_at = -1;
    for (int l = 0; l < 4; l++)
        for (size_t k = 0; k < sizeof w / sizeof *w; k++) {
            int before = crossed;
            gone = free_weight_region(d, (*w[k])[l], &crossed, &total);
            if (crossed > before) {
                crossed_at = l;
                ck_assert_uint_ge(gone * 100, weights * FT_DISC_GONE_PERCENT);
            } else if (crossed == 0) {
                ck_assert_uint_lt(gone * 100, weights * FT_DISC_GONE_PERCENT);
            }
        }
    ck_assert_int_eq(crossed, 1); /* once, however many frees follow */
    ck_assert_int_eq(crossed_at, 3);
    gone = free_weight_region(d, a.norm, &crossed, &total);
    gone = free_weight_region(d, a.head, &crossed, &total);
    ck_assert_uint_eq(gone, weights);
    ck_assert_int_eq(crossed, 1);

    ft_disc_reload(d);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_WAITING);
    ck_assert_uint_eq(ft_disc_unit_count(d), 0);
    llama_alloc(&b, 4);
    for (int it = 0; it < 4; it++)
        llama_forward(d, 1, &b, 4);
    check_llama_units(d, &b, 4);
    ft_disc_status_t st;
    ft_disc_status(d, &st);
    ck_assert_int_eq(st.reloads, 1);
    ck_assert_int_eq(st.restarts, 0);
    /* The second model's weights are counted from nothing. */
    crossed = 0;
    gone = free_weight_region(d, b.embed, &crossed, &total);
    ck_assert_uint_eq(gone, 64 * MIB);
    ck_assert_int_eq(crossed, 0);
    ft_disc_free(d);
}
END_TEST

/* The previous forward's output kept alive through the next: pointers into a small
 * segment alternate between two places, and one buffer moves to a segment made after
 * the first launch, every other forward; the keys repeat every two forwards. A pass is
 * still one forward. */
/* --- an allocation served in pieces (the shim's vmm_alloc) -------------------------
 *
 * Eight pieces of 2 MiB, one region each (FT_REGION_PIECE), holding three layers'
 * 5 MiB weights end to end from 64 KiB in, as a caching allocator carves one segment:
 * w0 covers pieces 0-2, w1 pieces 2-5, w2 pieces 5-7. */
#define PIECE (2ull << 20)
static uint64_t span_base, span_end; /* fake_span's one copy */

static uint64_t fake_span(uint64_t base)
{
    return base == span_base ? span_end : 0;
}

static void pieces_forward(ft_disc_t *d, const uint64_t *w, const uint64_t *norm, uint64_t act, uint64_t in)
{
    launch(d, 1, "embed", act, 2, in, act);
    for (int l = 0; l < 3; l++) {
        launch(d, 1, "norm", act, 2, norm[l], act);
        launch(d, 1, "gemv", act, 2, w[l], act);
    }
    launch(d, 1, "head", act, 1, act);
}

/* The units of the pieces, after discovery, the weights laid from `first` bytes in,
 * `size` bytes each; span: the loader's copies filled w0 and w1 with one copy (a
 * storage over two layers). */
static ft_disc_t *pieces_laid(uint64_t *seg, uint64_t *w, int span, uint64_t first, uint64_t size)
{
    uint64_t norm[3], in = alloc_region(4096), act = alloc_region(4096);
    for (int l = 0; l < 3; l++)
        norm[l] = alloc_region(4096);
    *seg = (next_base + PIECE - 1) & ~(PIECE - 1);
    for (int k = 0; k < 8; k++)
        ck_assert_int_gt(ft_regions_insert(regions, *seg + (uint64_t)k * PIECE, PIECE,
                                           FT_REGION_VMM | FT_REGION_PIECE | (k == 0 ? FT_REGION_PIECE_FIRST : 0), 0),
                         0);
    next_base = *seg + 8 * PIECE;
    for (int l = 0; l < 3; l++)
        w[l] = *seg + first + (uint64_t)l * size;
    span_base = *seg;
    span_end = span ? w[2] : 0;
    ft_disc_params_t p = params(2);
    p.piece_span = fake_span;
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 6 && ft_disc_state(d) != FT_DISC_DONE; it++)
        pieces_forward(d, w, norm, act, in);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    return d;
}

static ft_disc_t *pieces_discovered(uint64_t *seg, uint64_t *w, int span)
{
    return pieces_laid(seg, w, span, 64ull << 10, 5ull << 20);
}

/* The unit holding the region at a (-1: none), and whether it is shared. */
static int piece_unit(ft_disc_t *d, uint64_t a, int *shared)
{
    uint32_t id = id_of(a);
    *shared = ft_disc_region_shared(d, id);
    for (size_t u = 0; u < ft_disc_unit_count(d); u++)
        for (uint32_t k = 0; k < ft_disc_unit(d, u)->n_regions; k++)
            if (ft_disc_unit(d, u)->region_ids[k] == id)
                return (int)u;
    return -1;
}

START_TEST(pieces_join_the_unit_of_the_tensor_they_hold)
{
    uint64_t seg, w[3];
    ft_disc_t *d = pieces_discovered(&seg, w, 0);
    int unit[8], shared[8];
    for (int k = 0; k < 8; k++)
        unit[k] = piece_unit(d, seg + (uint64_t)k * PIECE, &shared[k]);
    /* A piece no pointer reaches (1, 3, 4, 6, 7) holds the body of the tensor that
     * starts last before it: that tensor's unit. */
    ck_assert_int_ge(unit[0], 0);
    ck_assert_int_eq(unit[1], unit[0]);
    ck_assert_int_ge(unit[3], 0);
    ck_assert_int_ne(unit[3], unit[0]);
    ck_assert_int_eq(unit[4], unit[3]);
    ck_assert_int_ge(unit[6], 0);
    ck_assert_int_ne(unit[6], unit[3]);
    ck_assert_int_eq(unit[7], unit[6]);
    for (int k = 0; k < 8; k++)
        ck_assert_int_eq(shared[k], k == 2 || k == 5);
    /* Where w1 and w2 start in such a shared piece, a pointer at or past their start
     * reaches the pieces of their bodies; before it (w0's end), nothing more. */
    uint64_t off;
    uint32_t next;
    ck_assert_int_eq(ft_disc_region_follow(d, id_of(seg + 2 * PIECE), &off, &next), 1);
    ck_assert_uint_eq(off, w[1] - (seg + 2 * PIECE));
    ck_assert_uint_eq(next, id_of(seg + 3 * PIECE));
    ck_assert_int_eq(ft_disc_region_follow(d, id_of(seg + 5 * PIECE), &off, &next), 1);
    ck_assert_uint_eq(next, id_of(seg + 6 * PIECE));
    ft_disc_free(d);
}
END_TEST

/* The weights from 64 KiB into piece 1, 4 MiB each (w0 over pieces 1-3, w1 3-5, w2
 * 5-7): piece 0, room no launch touched, stays on the device outside every unit. The
 * allocator may carve a temporary from it later that runs on into piece 1's first 64
 * KiB: piece 1 stays on the device too (streamed with w0's unit, such a temporary would
 * read it unmapped: model --seg-down --room-from on the simulator). */
START_TEST(a_piece_after_room_stays_resident)
{
    uint64_t seg, w[3];
    ft_disc_t *d = pieces_laid(&seg, w, 0, PIECE + (64ull << 10), 4ull << 20);
    int unit[8], shared[8];
    for (int k = 0; k < 8; k++)
        unit[k] = piece_unit(d, seg + (uint64_t)k * PIECE, &shared[k]);
    ck_assert_int_lt(unit[0], 0);
    for (int k = 1; k < 8; k++)
        ck_assert_int_ge(unit[k], 0);
    ck_assert_int_eq(unit[2], unit[1]);
    ck_assert_int_eq(unit[4], unit[3]);
    ck_assert_int_eq(unit[6], unit[5]);
    ck_assert_int_eq(unit[7], unit[6]);
    for (int k = 1; k < 8; k++)
        ck_assert_int_eq(shared[k], k == 1 || k == 3 || k == 5);
    ft_disc_free(d);
}
END_TEST

START_TEST(a_copy_over_two_units_pieces_keeps_them_resident)
{
    uint64_t seg, w[3];
    ft_disc_t *d = pieces_discovered(&seg, w, 1);
    int shared;
    /* One copy filled w0 and w1: the units cut between them would split one storage. */
    for (int k = 0; k < 5; k++) {
        piece_unit(d, seg + (uint64_t)k * PIECE, &shared);
        ck_assert_int_eq(shared, 1);
    }
    ck_assert_int_ge(piece_unit(d, seg + 6 * PIECE, &shared), 0);
    ck_assert_int_eq(shared, 0);
    ft_disc_free(d);
}
END_TEST

START_TEST(passes_are_one_forward_when_small_activations_alternate)
{
    llama_t m;
    alternate_small = 1;
    llama_alloc(&m, 4);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 6 && ft_disc_state(d) != FT_DISC_DONE; it++)
        llama_forward(d, 1, &m, 4);
    check_llama_units(d, &m, 4);
    /* After discovery, every forward is a pass, whichever way its buffers lie. */
    size_t n = ft_disc_pass_length(d);
    ck_assert_uint_eq(n, 55);
    tracking = 1;
    llama_forward(d, 1, &m, 4);
    llama_forward(d, 1, &m, 4);
    ck_assert_uint_eq(n_track, 2 * n);
    for (size_t i = 0; i < 2 * n; i++)
        ck_assert_int_eq(track_log[i], (long)(i % n));
    ft_disc_free(d);
}
END_TEST

START_TEST(passes_align_on_the_embedding_despite_a_different_first_forward)
{
    /* The first forward runs extra launches in its first layers, so the period is
     * confirmed half-way through a forward; passes must still begin at the
     * embedding (the earliest-allocated weight), not where the period was found. */
    llama_t m;
    llama_alloc(&m, 6);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    lazy_layers = 3;
    for (int it = 0; it < 5 && ft_disc_state(d) != FT_DISC_DONE; it++)
        llama_forward(d, 1, &m, 6);
    check_llama_units(d, &m, 6);
    ft_disc_free(d);
}
END_TEST

START_TEST(pointer_array_touches_do_not_reorder_the_pass)
{
    llama_t m;
    llama_alloc(&m, 4);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    stray_touch = 1;
    for (int it = 0; it < 5 && ft_disc_state(d) != FT_DISC_DONE; it++)
        llama_forward(d, 1, &m, 4);
    check_llama_units(d, &m, 4);
    /* Unaligned words read from device data are not taken for pointers. */
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    uint64_t odd = m.q[0] + 8;
    ck_assert_uint_eq(ft_scan_indirect(regions, &odd, 8, &set), 0);
    ft_disc_free(d);
}
END_TEST

START_TEST(stale_pointers_in_padding_do_not_move_weights)
{
    llama_t m;
    llama_alloc(&m, 5);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    stale_padding = 1;
    for (int it = 0; it < 5 && ft_disc_state(d) != FT_DISC_DONE; it++)
        llama_forward(d, 1, &m, 5);
    check_llama_units(d, &m, 5);
    ft_disc_free(d);
}
END_TEST

/* A by-value struct whose tail holds a stale weight address at one launch and a host
 * address at another: once the second is seen, the first is unsure, while a word that
 * held region addresses while learning stays sure, and one that only held NULL then
 * does not; unsure ids can be dropped. */
START_TEST(garbage_words_make_touches_unsure)
{
    uint64_t w0 = alloc_region(MIB), w1 = alloc_region(MIB), act = alloc_region(MIB);
    static ft_scan_junk_t junk;
    memset(&junk, 0, sizeof junk);
    uint64_t p0[2] = { act, 0 }, tail[3];
    void *params[2] = { p0, tail };
    uint32_t sizes[2] = { 12, 24 }; /* 12 bytes: two words, the second half padding */
    ft_scan_set_t set;

    tail[0] = 16; tail[1] = w0; tail[2] = 0;
    ft_scan_set_clear(&set);
    ck_assert_uint_eq(ft_scan_params_junk(regions, params, sizes, 2, &junk, 1, &set), 2);
    ck_assert(!set.unsure[0] && !set.unsure[1]); /* nothing learned yet at word 3 */

    tail[1] = (uint64_t)(uintptr_t)&set;          /* a host address: garbage */
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, params, sizes, 2, &junk, 1, &set);
    ck_assert_uint_eq(set.n, 1);
    ck_assert(junk.bit[0] == (1ull << 2 | 1ull << 3)); /* tail words 0 and 1 */

    tail[1] = w1;
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, params, sizes, 2, &junk, 0, &set);
    ck_assert_uint_eq(set.n, 2);
    ck_assert_uint_eq(set.id[1], id_of(w1));
    ck_assert(!set.unsure[0] && set.unsure[1]);
    /* Found at a sure word too (the activation's word), it is sure. */
    p0[0] = w1;
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, params, sizes, 2, &junk, 0, &set);
    ck_assert_uint_eq(set.n, 1);
    ck_assert(!set.unsure[0]);
    p0[0] = act;
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, params, sizes, 2, &junk, 0, &set);
    ft_scan_set_drop_unsure(&set);
    ck_assert_uint_eq(set.n, 1);
    ck_assert_uint_eq(set.id[0], id_of(act));
    /* Tail word 2 held NULL at every launch while learning: a region found there later
     * is unsure too (garbage that looks like a pointer); for a kernel never learned,
     * it is sure. */
    tail[1] = 0;
    tail[2] = w0;
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, params, sizes, 2, &junk, 0, &set);
    ck_assert_uint_eq(set.n, 2);
    ck_assert(!set.unsure[0] && set.unsure[1]);
    static ft_scan_junk_t fresh;
    memset(&fresh, 0, sizeof fresh);
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, params, sizes, 2, &fresh, 0, &set);
    ck_assert(set.n == 2 && !set.unsure[0] && !set.unsure[1]);
    tail[1] = w1;
    tail[2] = 0;
    /* Without a junk map, every id is sure (ft_scan_bytes). */
    ft_scan_set_clear(&set);
    ft_scan_bytes(regions, tail, sizeof tail, &set);
    ck_assert(set.n == 1 && !set.unsure[0]);
    /* With FT_SCAN_SURE, the sure ids are those of a full scan, and the words are
     * still learned (tail word 2 holding a small integer becomes garbage). */
    ft_scan_set_t full;
    ft_scan_set_clear(&full);
    ft_scan_params_junk(regions, params, sizes, 2, &junk, 0, &full);
    ft_scan_set_drop_unsure(&full);
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, params, sizes, 2, &junk, FT_SCAN_LEARN | FT_SCAN_SURE, &set);
    ft_scan_set_drop_unsure(&set);
    ck_assert_uint_eq(set.n, full.n);
    ck_assert_uint_eq(set.n, 1);
    ck_assert_uint_eq(set.id[0], id_of(act));
    ck_assert(!set.unsure[0]);
    tail[2] = 7;
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, params, sizes, 2, &junk, FT_SCAN_LEARN | FT_SCAN_SURE, &set);
    ck_assert(junk.bit[0] == (1ull << 2 | 1ull << 3 | 1ull << 4));
    /* Without learning, once learned, only words that held a region address are read:
     * a word that held NULL while learning (here 70 of them, past a block of 64) and
     * now a region gives nothing, as a full scan's unsure id would be dropped. */
    static uint64_t many[72];
    static ft_scan_junk_t learned;
    memset(&learned, 0, sizeof learned);
    memset(many, 0, sizeof many);
    many[0] = act;
    many[66] = w0;
    void *one[1] = { many };
    uint32_t size_one[1] = { sizeof many };
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, one, size_one, 1, &learned, FT_SCAN_LEARN | FT_SCAN_SURE, &set);
    ck_assert_uint_eq(set.n, 2);
    many[66] = 0;
    many[70] = w1;
    ft_scan_set_clear(&full);
    ft_scan_params_junk(regions, one, size_one, 1, &learned, 0, &full);
    ft_scan_set_drop_unsure(&full);
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, one, size_one, 1, &learned, FT_SCAN_SURE, &set);
    ck_assert_uint_eq(full.n, 1);
    ck_assert_uint_eq(set.n, 1);
    ck_assert_uint_eq(set.id[0], id_of(act));
    many[66] = w1; /* a word that held a region while learning stays read */
    ft_scan_set_clear(&set);
    ft_scan_params_junk(regions, one, size_one, 1, &learned, FT_SCAN_SURE, &set);
    ck_assert_uint_eq(set.n, 2);
    ck_assert_uint_eq(set.id[1], id_of(w1));
}
END_TEST

/* Whether unit u holds the region at address a. */
static int unit_holds(const ft_disc_unit_t *u, uint64_t a)
{
    for (uint32_t k = 0; k < u->n_regions; k++)
        if (u->region_ids[k] == id_of(a))
            return 1;
    return 0;
}

/* Stale addresses of layer weights in kernels that run once before and once after the
 * layers, in launches touching fewer weights than the layer's own GEMM (whose padding
 * holds another layer's address): each weight stays in its layer's unit. */
START_TEST(stale_pointers_outside_the_layers_do_not_move_weights)
{
    llama_t m;
    llama_alloc(&m, 4);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    stale_ends = 1;
    for (int it = 0; it < 5 && ft_disc_state(d) != FT_DISC_DONE; it++)
        llama_forward(d, 1, &m, 4);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_unit_count(d), 6);
    ck_assert_uint_eq(ft_disc_unit(d, 0)->n_regions, 1); /* the embedding alone */
    for (int l = 0; l < 4; l++) {
        const ft_disc_unit_t *u = ft_disc_unit(d, (size_t)l + 1);
        ck_assert_uint_eq(u->n_regions, 9);
        ck_assert_msg(unit_holds(u, m.k[l]) && unit_holds(u, m.up[l]), "layer %d lost its k or up weight", l);
    }
    ck_assert_uint_eq(ft_disc_unit(d, 5)->n_regions, 2); /* final norm and head */
    ft_disc_free(d);
}
END_TEST

/* The H200's 16-layer Llama: RoPE's multiplies, three in a row in every layer, carry
 * the same stale word in their argument padding, a few bytes past an offset into one
 * layer's weight. With their activations out of the keys (they vary), three identical
 * keys made a period of 1 (a pass of 3 launches, one unit, no plan); the weight's first
 * touch put it in layer 0's unit. A touch off a tensor's alignment is now left out of
 * discovery's view: the units are the layers, the weight in its own, kept resident
 * (the guard still loads for such words: streamed, its unit was loaded at each). */
START_TEST(stale_misaligned_word_makes_no_period)
{
    llama_t m;
    llama_alloc(&m, 4);
    ft_disc_params_t p = params(1);
    ft_disc_t *d = ft_disc_new(regions, &p);
    stale_rope = 1;
    for (int it = 0; it < 6 && ft_disc_state(d) != FT_DISC_DONE; it++)
        llama_forward(d, 1, &m, 4);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_unit_count(d), 6);
    for (int l = 0; l < 4; l++) {
        const ft_disc_unit_t *u = ft_disc_unit(d, (size_t)l + 1);
        ck_assert_uint_eq(u->n_regions, 9);
        ck_assert_msg(unit_holds(u, m.gate[l]), "layer %d's gate is not in its unit", l);
        /* The weight the stale word points into is shared (kept resident), the
         * others are not. */
        ck_assert_int_eq(ft_disc_region_shared(d, id_of(m.gate[l])), l == 1);
    }
    ft_disc_free(d);
}
END_TEST

/* Discovers a 3-layer Llama emitting NVTX ranges (mode: the `nvtx` flag) and checks
 * the five units are named after them; long_layers: each layer's unit reaches into
 * the next layer's range. */
static void check_nvtx_names(int mode, int long_layers)
{
    llama_t m;
    llama_alloc(&m, 3);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    nvtx = mode;
    for (int it = 0; it < 5 && ft_disc_state(d) != FT_DISC_DONE; it++)
        llama_forward(d, 1, &m, 3);
    nvtx = 0;
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    const char *want[] = { "embed_tokens", "layers.0", "layers.1", "layers.2", "lm_head" };
    if (getenv("FT_TEST_DEBUG"))
        for (size_t i = 0; i < ft_disc_unit_count(d); i++)
            fprintf(stderr, "%s %u..%u regions %u\n", ft_disc_unit(d, i)->name, ft_disc_unit(d, i)->first_launch,
                    ft_disc_unit(d, i)->last_launch, ft_disc_unit(d, i)->n_regions);
    ck_assert_uint_eq(ft_disc_unit_count(d), 5);
    for (size_t i = 0; i < 5; i++) {
        ck_assert_str_eq(ft_disc_unit(d, i)->name, want[i]);
        if (long_layers && i > 0 && i < 4)
            ck_assert_uint_gt(ft_disc_unit(d, i)->last_launch, ft_disc_unit(d, i)->first_launch + 11);
    }
    ft_disc_free(d);
}

/* As in a transformers Llama: every norm weight lies in one shared segment, so a
 * layer's unit runs from its first projection to the next layer's, taking in the next
 * layer's input norm (inside that layer's range); the outermost range has no name
 * (NCCL's registered strings). Each unit is named after the range its own weights are
 * used in. */
START_TEST(units_are_named_after_the_ranges_their_weights_are_used_in)
{
    shared_norms = 1;
    check_nvtx_names(2, 1);
}
END_TEST

START_TEST(units_are_named_after_nvtx_ranges)
{
    check_nvtx_names(1, 0);
}
END_TEST

START_TEST(prologue_of_init_kernels_is_skipped)
{
    llama_t m;
    llama_alloc(&m, 3);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    /* Weights initialised on the device, one kernel each, before any forward: their
     * content changes before iteration 1, which two boundaries tell apart. */
    launch(d, 1, "uniform_", m.embed, 1, m.embed);
    for (int l = 0; l < 3; l++)
        launch(d, 1, "uniform_", m.q[l], 1, m.q[l]);
    for (int it = 0; it < 3; it++)
        llama_forward(d, 1, &m, 3);
    launch(d, 1, "embedding", m.act, 3, m.embed, m.input, m.act);
    check_llama_units(d, &m, 3);
    ft_disc_free(d);
}
END_TEST

/* The same with the host synchronising after every forward, and the init kernels
 * between the first launch and the first forward touching the embedding: weights whose
 * content moves once after the first launch stay in the detector's keys (activations
 * leave them when theirs has moved at two synchronisations), so passes still begin at
 * the embedding. */
START_TEST(init_kernels_then_synchronised_forwards)
{
    llama_t m;
    llama_alloc(&m, 3);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    syncs = 1;
    for (int l = 0; l < 3; l++)
        launch(d, 1, "uniform_", m.q[l], 1, m.q[l]);
    launch(d, 1, "uniform_", m.embed, 1, m.embed);
    for (int it = 0; it < 8 && ft_disc_state(d) != FT_DISC_DONE; it++)
        llama_forward(d, 1, &m, 3);
    check_llama_units(d, &m, 3);
    ft_disc_free(d);
}
END_TEST

/* Decode steps with a KV cache, as transformers' DynamicCache under PyTorch's caching
 * allocator (the H200's 28-layer Llama found no pass in 15 steps): a 2 MiB segment
 * alive at the first launch holds the norm weights and the token ids, then the
 * activations, at places that move every step as the cache grows (the cache itself in
 * segments made later); each step reads its token at the next 8 bytes; the host
 * synchronises after every step. Until the segment is known to vary (its content moved
 * at two synchronisations), every key holding it changes from one step to the next;
 * then the pass is found within two more: one step, its units the layers. */
START_TEST(decode_with_a_growing_cache_finds_the_pass)
{
    enum { LAYERS = 8 };
    uint64_t embed = alloc_region(64 * MIB), small = alloc_region(2 * MIB), q[LAYERS], o[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        q[l] = alloc_region(32 * MIB);
        o[l] = alloc_region(32 * MIB);
    }
    uint64_t head = alloc_region(64 * MIB);
    uint64_t toks = small + 1536 * KIB, final_norm = small + LAYERS * 8 * KIB;
    ft_disc_params_t p = params(1);
    ft_disc_t *d = ft_disc_new(regions, &p);
    int done_at = -1;
    uint64_t cache = 0;
    for (int it = 0; it < 12 && done_at < 0; it++) {
        /* The free space past the norms, where the step's blocks land. */
        uint64_t act = small + 128 * KIB + (uint64_t)((it * 7) % 13) * 16 * KIB;
        uint64_t act2 = act + 256 * KIB;
        launch(d, 1, "embedding", small, 3, embed, toks + 8 * (uint64_t)it, act);
        if (cache == 0)
            cache = alloc_region(8 * MIB); /* after the first launch: no candidate */
        for (int l = 0; l < LAYERS; l++) {
            uint64_t norm = small + (uint64_t)l * 8 * KIB;
            launch(d, 1, "rmsnorm", small, 3, act, norm, act2);
            launch(d, 1, "gemm", small, 3, act2, q[l], act);
            launch(d, 1, "cat", cache, 3, cache + (uint64_t)it * 64 * KIB, act, cache);
            launch(d, 1, "attention", small, 3, act, cache, act2);
            launch(d, 1, "gemm", small, 3, act2, o[l], act);
        }
        launch(d, 1, "rmsnorm", small, 3, act, final_norm, act2);
        launch(d, 1, "gemm_head", small, 3, act2, head, act);
        ft_disc_sync(d, 1);
        if (ft_disc_state(d) == FT_DISC_DONE)
            done_at = it;
    }
    /* The activations' segment is seen to move within the first step (the detector's
     * snapshots do not wait for a host synchronisation): keys settled from the second
     * step on, the pass found in the third (step 2). */
    ck_assert_int_eq(done_at, 2);
    ck_assert_uint_eq(ft_disc_pass_length(d), 1 + 5 * LAYERS + 2);
    ck_assert_uint_eq(ft_disc_unit_count(d), LAYERS + 2);
    ck_assert_uint_eq(ft_disc_unit(d, 0)->n_regions, 1);
    ck_assert_uint_eq(ft_disc_unit(d, 0)->region_ids[0], id_of(embed));
    ck_assert_uint_eq(ft_disc_unit(d, 0)->first_launch, 0);
    for (int l = 0; l < LAYERS; l++) {
        const ft_disc_unit_t *u = ft_disc_unit(d, (size_t)l + 1);
        ck_assert_uint_eq(u->n_regions, 2);
        ck_assert_uint_eq(u->region_ids[0], id_of(q[l]));
        ck_assert_uint_eq(u->region_ids[1], id_of(o[l]));
    }
    ck_assert_uint_eq(ft_disc_unit(d, LAYERS + 1)->region_ids[0], id_of(head));
    /* The segment (norms, token ids, activations) is no weight. */
    ck_assert_uint_eq(ft_disc_weight_bytes(d), 128 * MIB + LAYERS * 64 * MIB);
    ft_disc_free(d);
}
END_TEST

/* After discovery, positions in the pass come from ft_disc_track. The detector's
 * anchor (the embedding, or a launch before it touching the earliest-allocated region:
 * the input) also hashes the input's region; on the GPU the input moved to another
 * caching-allocator segment after discovery and no pass ever started again. Passes are
 * followed by a weight of the starting launch's own unit: two tracked forwards with the
 * input elsewhere, the pass starting at the embedding or one launch before it; or with
 * the embedding carrying, in discovery only, a stale address of the last layer's gate
 * (PyTorch's embedding kernel on the GPU). */
/* Whether ft_disc_track takes kernel `name` for one that touched no weight in the
 * recorded pass (a launch touching nothing, after the positions checked). */
static int weightless(ft_disc_t *d, const char *name)
{
    ft_scan_set_t none;
    ft_scan_set_clear(&none);
    int w = -1;
    ft_disc_track(d, 1, (uint64_t)(uintptr_t)name, &none, NULL, &w);
    return w;
}

static void check_tracking_with_a_moved_input(int with_copy_in, int with_stale_start)
{
    input_first = 1;
    copy_in = with_copy_in;
    stale_start = with_stale_start;
    llama_t m;
    llama_alloc(&m, 4);
    uint64_t moved = alloc_region(4 * KIB); /* alive at the first launch, like the input */
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 4; it++)
        llama_forward(d, 1, &m, 4);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_unit_count(d), 6);
    size_t n = ft_disc_pass_length(d);
    ck_assert_uint_eq(n, 55u + (unsigned)with_copy_in);
    m.input = moved;
    tracking = 1;
    llama_forward(d, 1, &m, 4);
    llama_forward(d, 1, &m, 4);
    ck_assert_uint_eq(n_track, 2 * n);
    /* The first tracked forward: from the embedding on (the copy_in before it is not
     * known to start a pass yet). */
    ck_assert_int_eq(track_log[0], with_copy_in ? -1 : 0);
    for (size_t i = (size_t)with_copy_in; i < n; i++)
        ck_assert_int_eq(track_log[i], (long)i);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(track_log[n + i], (long)i);
    /* Kernels of the pass that touched no weight there: a weight address in their
     * arguments later is stale. */
    ck_assert_int_eq(weightless(d, "rope"), 1);
    ck_assert_int_eq(weightless(d, "attention"), 1);
    ck_assert_int_eq(weightless(d, "gemm"), 0);
    ck_assert_int_eq(weightless(d, "embedding_large"), 0);
    ft_disc_free(d);
}

START_TEST(pass_start_survives_a_moved_input)
{
    check_tracking_with_a_moved_input(0, 0);
}
END_TEST

START_TEST(pass_start_before_the_first_weight_survives_a_moved_input)
{
    check_tracking_with_a_moved_input(1, 0);
}
END_TEST

START_TEST(pass_start_survives_a_stale_address_seen_in_discovery)
{
    check_tracking_with_a_moved_input(0, 1);
}
END_TEST

/* A 4-layer Llama allocated into m and discovered from four forwards on lane 1. */
static ft_disc_t *discovered_llama(llama_t *m)
{
    llama_alloc(m, 4);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 4; it++)
        llama_forward(d, 1, m, 4);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    return d;
}

/* A launch the recorded pass did not have (after layer 1's q projection) takes the
 * lane off the record. The next, the GEMM kernel at layer 1's k weight (in the region
 * that holds its q and v too), finds the same kernel at its count (v's): the count
 * stands. The one after, at v's weight where the record has another kernel, puts the
 * lane back where the record read v, and every later launch has its recorded position
 * again (on the H100, a transformers model's decode steps went off the record for good
 * at their first such launch). The same kernel on another slice of one weight at the
 * count (k and v read in the other order, as a router picking other experts of a fused
 * tensor) moves nothing. */
START_TEST(a_weight_touch_puts_a_lane_back_on_the_record)
{
    packed_qkv = 1;
    llama_t m;
    ft_disc_t *d = discovered_llama(&m);
    size_t n = ft_disc_pass_length(d);
    tracking = 1;
    llama_forward(d, 1, &m, 4);
    ck_assert_uint_eq(n_track, n);
    long plain[1024];
    memcpy(plain, track_log, n * sizeof *plain);
    extra_cat = 1;
    for (int f = 0; f < 2; f++) {
        n_track = 0;
        llama_forward(d, 1, &m, 4);
        ck_assert_uint_eq(n_track, n + 1);
        /* after layer 1's q projection: the embedding, layer 0's 13, a norm, q */
        size_t cat = 1 + 13 + 2;
        for (size_t i = 0; i < cat; i++) {
            ck_assert_int_eq(track_log[i], plain[i]);
            ck_assert_int_ne(track_exp[i], 0); /* 2 where a weight made it sure */
        }
        ck_assert_int_eq(track_exp[cat - 1], 2); /* q's gemm */
        ck_assert_int_eq(track_exp[cat], 0);        /* the cat: off the record */
        ck_assert_int_eq(track_log[cat + 1], plain[cat + 1]); /* k's gemm: the count */
        ck_assert_int_eq(track_exp[cat + 1], 1);
        ck_assert_int_eq(track_log[cat + 2], plain[cat + 1]); /* v's gemm: back on it */
        ck_assert_int_eq(track_exp[cat + 2], 2);
        for (size_t i = cat + 3; i < n + 1; i++) {
            ck_assert_int_eq(track_log[i], plain[i - 1]);
            ck_assert_int_ne(track_exp[i], 0);
        }
    }
    extra_cat = 0;
    swap_kv = 1;
    n_track = 0;
    llama_forward(d, 1, &m, 4);
    ck_assert_uint_eq(n_track, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(track_log[i], plain[i]);
        ck_assert_int_ne(track_exp[i], 0);
    }
    ft_disc_status_t st;
    ft_disc_status(d, &st);
    ck_assert_uint_eq(st.track_resyncs, 2);
    ck_assert_uint_eq(st.track_starts, 4);
    ft_disc_free(d);
}
END_TEST

/* A launch added after discovery that reads the start's weight (the embedding) with
 * another layer's does not start a pass; the next forward's embedding does. */
START_TEST(a_launch_reading_the_start_weight_and_another_does_not_start_a_pass)
{
    llama_t m;
    ft_disc_t *d = discovered_llama(&m);
    size_t n = ft_disc_pass_length(d);
    tracking = 1;
    llama_forward(d, 1, &m, 4);
    ck_assert_int_eq(track_log[0], 0);
    launch(d, 1, "embedding", m.act, 3, m.embed, m.q[2], m.act);
    ck_assert_int_eq(track_log[n], (long)n); /* not 0 */
    llama_forward(d, 1, &m, 4);
    ck_assert_int_eq(track_log[n + 1], 0);
    ck_assert_int_eq(track_log[2 * n], (long)n - 1);
    ft_disc_free(d);
}
END_TEST

START_TEST(pass_start_survives_another_embedding_kernel)
{
    large_embedding = 1;
    check_tracking_with_a_moved_input(0, 0);
}
END_TEST

START_TEST(activations_and_copies_are_not_weights)
{
    uint64_t w = alloc_region(4 * MIB), cache = alloc_region(4 * MIB);
    uint64_t a = alloc_region(64 * KIB), b = alloc_region(64 * KIB);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 6; it++) {
        launch(d, 7, "matmul", b, 3, w, a, b);
        launch(d, 7, "kv_append", cache, 2, b, cache); /* a cache: alive early, written */
        launch(d, 7, "act", a, 2, b, a);
    }
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_unit_count(d), 1);
    const ft_disc_unit_t *u = ft_disc_unit(d, 0);
    ck_assert_uint_eq(u->n_regions, 1);
    ck_assert_uint_eq(u->region_ids[0], id_of(w));
    ck_assert_uint_eq(ft_disc_weight_bytes(d), 4 * MIB);
    ft_disc_free(d);
}
END_TEST

/* More candidates than one hash call takes: every region is hashed, in calls of at
 * most 256, and one whose content cannot be read is not a weight. */
START_TEST(hash_batches_and_failures)
{
    enum { N = 600, PER = 15 };
    uint64_t w[N], act = alloc_region(64 * KIB);
    for (int i = 0; i < N; i++)
        w[i] = alloc_region(64 * KIB);
    hash_fails = w[N / 2];
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 4; it++)
        for (int i = 0; i < N; i += PER)
            launch(d, 7, i == 0 ? "first" : "matmul", act, PER + 1, act, w[i], w[i + 1], w[i + 2], w[i + 3],
                   w[i + 4], w[i + 5], w[i + 6], w[i + 7], w[i + 8], w[i + 9], w[i + 10], w[i + 11],
                   w[i + 12], w[i + 13], w[i + 14]);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_le(hash_batch_max, 256);
    for (int i = 0; i < N; i++) /* the unreadable one no more once failed */
        ck_assert_uint_eq(hash_calls[id_of(w[i])], i == N / 2 ? 1 : hash_calls[id_of(w[0])]);
    ck_assert_uint_ge(hash_calls[id_of(w[0])], 2);
    ck_assert_uint_eq(ft_disc_weight_bytes(d), (N - 1) * 64 * KIB);
    ft_disc_free(d);
}
END_TEST

START_TEST(shared_small_segment_does_not_fool_the_detector)
{
    /* As PyTorch lays a model out: every norm weight in one 2 MiB small-pool segment,
     * touched by the same kernel twice per layer; activations allocated during the
     * first pass (not candidates). */
    uint64_t embed = alloc_region(64 * MIB), small = alloc_region(2 * MIB);
    uint64_t q[4], o[4];
    for (int l = 0; l < 4; l++) {
        q[l] = alloc_region(32 * MIB);
        o[l] = alloc_region(32 * MIB);
    }
    uint64_t head = alloc_region(64 * MIB);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    uint64_t act = 0;
    for (int it = 0; it < 4; it++) {
        if (act == 0) {
            launch(d, 1, "embedding", 0, 1, embed);
            act = alloc_region(MIB);
        }
        launch(d, 1, "embedding", act, 2, embed, act);
        for (int l = 0; l < 4; l++) {
            launch(d, 1, "mul", act, 2, act, small);
            launch(d, 1, "gemm", act, 2, act, q[l]);
            launch(d, 1, "attention", act, 1, act);
            launch(d, 1, "mul", act, 2, act, small);
            launch(d, 1, "gemm", act, 2, act, o[l]);
        }
        launch(d, 1, "mul", act, 2, act, small); /* the final norm */
        launch(d, 1, "gemm", act, 2, act, head);
    }
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_unit_count(d), 6);
    /* The segment is first touched by layer 0's norm: it goes with layer 0. */
    ck_assert_uint_eq(ft_disc_unit(d, 0)->n_regions, 1);
    ck_assert_uint_eq(ft_disc_unit(d, 0)->region_ids[0], id_of(embed));
    ck_assert_uint_eq(ft_disc_unit(d, 1)->n_regions, 3); /* the segment, q0, o0 */
    ck_assert_uint_eq(ft_disc_unit(d, 1)->region_ids[0], id_of(small));
    ck_assert_uint_eq(ft_disc_unit(d, 2)->region_ids[0], id_of(q[1]));
    ck_assert_uint_eq(ft_disc_unit(d, 5)->region_ids[0], id_of(head));
    ft_disc_free(d);
}
END_TEST

START_TEST(activation_equal_at_every_boundary_is_not_a_weight)
{
    /* The same input every pass: the activation holds the same bytes at every
     * boundary, but not half-way through a pass. */
    uint64_t w1 = alloc_region(MIB), w2 = alloc_region(MIB), w3 = alloc_region(MIB);
    uint64_t act = alloc_region(64 * KIB);
    ft_disc_params_t p = params(3);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 7; it++) {
        version[id_of(act)] = 1;
        launch(d, 1, "k1", 0, 2, w1, act);
        version[id_of(act)] = 2;
        launch(d, 1, "k2", 0, 2, w2, act);
        version[id_of(act)] = 3;
        launch(d, 1, "k3", 0, 2, w3, act);
        version[id_of(act)] = 4; /* what every boundary sees */
    }
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_weight_bytes(d), 3 * MIB);
    ft_disc_free(d);
}
END_TEST

static void small_pass(ft_disc_t *d, uint64_t lane, uint64_t w1, uint64_t w2, uint64_t w3,
                       uint64_t s)
{
    launch(d, lane, "k1", 0, 1, w1);
    launch(d, lane, "k2", 0, 2, w2, s);
    launch(d, lane, "k3", 0, 1, w3);
}

START_TEST(change_between_two_lanes_first_boundaries_counts)
{
    /* A region written once, after lane 1's first boundary and before lane 2's: both
     * boundaries ask for an "early" snapshot, but only a change since the snapshot at
     * the first launch is excused as initialisation; this one happened within the
     * passes, so the region is not a weight. */
    uint64_t w1 = alloc_region(MIB), w2 = alloc_region(MIB), w3 = alloc_region(MIB);
    uint64_t s = alloc_region(64 * KIB);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int i = 0; i < 64 && ft_disc_iterations(d) < 1; i++)
        small_pass(d, 1, w1, w2, w3, s);
    ck_assert_int_eq(ft_disc_iterations(d), 1);
    version[id_of(s)]++;
    unsigned before = hash_calls[id_of(s)];
    for (int i = 0; i < 64 && hash_calls[id_of(s)] == before; i++)
        small_pass(d, 2, w1, w2, w3, s);
    ck_assert_uint_gt(hash_calls[id_of(s)], before); /* lane 2's first boundary */
    for (int i = 0; i < 64 && ft_disc_state(d) != FT_DISC_DONE; i++)
        small_pass(d, 1, w1, w2, w3, s);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_weight_bytes(d), 3 * MIB);
    ft_disc_free(d);
}
END_TEST

START_TEST(late_allocations_and_freed_regions)
{
    uint64_t w1 = alloc_region(MIB), w2 = alloc_region(MIB), gone = alloc_region(MIB);
    ft_disc_params_t p = params(1);
    ft_disc_t *d = ft_disc_new(regions, &p);
    uint64_t late = 0;
    for (int it = 0; it < 3; it++) {
        launch(d, 1, "k1", 0, 1, w1);
        if (late == 0)
            late = alloc_region(MIB); /* allocated during the first pass */
        launch(d, 1, "k2", 0, 3, w2, late, gone);
        if (it == 0)
            ft_disc_region_freed(d, id_of(gone));
    }
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    uint64_t total = 0;
    for (size_t i = 0; i < ft_disc_unit_count(d); i++)
        total += ft_disc_unit(d, i)->bytes;
    ck_assert_uint_eq(total, 2 * MIB); /* w1 and w2 only */
    ft_disc_free(d);
}
END_TEST

/* A model built on the device (`with torch.device("cuda")`): each weight is allocated
 * after the program's first launch and filled by an init kernel that no forward runs.
 * The first passes found touch no weight (the candidates are what was alive at the
 * first launch); discovery starts over with the regions those init kernels made, and
 * finds every weight. An activation first written by a forward's own kernel stays out. */
START_TEST(weights_made_by_init_kernels_are_found)
{
    uint64_t act = alloc_region(2 * MIB);
    ft_disc_params_t p = params(1);
    ft_disc_t *d = ft_disc_new(regions, &p);
    launch(d, 1, "probe", act, 1, act); /* the first launch: no weight exists yet */
    uint64_t w[4], out = 0;
    for (int l = 0; l < 4; l++) {
        w[l] = alloc_region(8 * MIB);
        launch(d, 1, "normal_", w[l], 1, w[l]);
    }
    for (int it = 0; it < 40 && ft_disc_state(d) != FT_DISC_DONE; it++)
        for (int l = 0; l < 4; l++) {
            if (out == 0)
                out = alloc_region(2 * MIB); /* made in the first forward, by its own kernel */
            launch(d, 1, "gemm", l % 2 ? act : out, 3, w[l], act + (uint64_t)l * 64 * KIB,
                   out + (uint64_t)l * 64 * KIB);
        }
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_weight_bytes(d), 32 * MIB);
    ck_assert_uint_eq(ft_disc_unit_count(d), 4);
    ft_disc_free(d);
}
END_TEST

/* Weights copied in after unrelated kernels ran (a framework's warm-up): the forwards
 * touch nothing alive at the first launch, so no pass can be found with those
 * candidates; after 256 launches in a row without one, and copies into new regions
 * since, discovery starts over with the regions alive then. Without the copies it
 * does not: a program's initialisation on the device is kernel_born, not copied. */
START_TEST(weights_copied_after_other_kernels_are_found)
{
    uint64_t warm = alloc_region(2 * MIB);
    ft_disc_params_t p = params(1);
    ft_disc_t *d = ft_disc_new(regions, &p);
    launch(d, 1, "warmup", warm, 1, warm);
    uint64_t w[4];
    for (int l = 0; l < 4; l++) {
        w[l] = alloc_region(8 * MIB);
        ft_scan_set_t in;
        ft_scan_set_clear(&in);
        ft_scan_bytes(regions, &w[l], 8, &in);
        ft_disc_write(d, &in); /* loaded by a copy */
    }
    uint64_t act = alloc_region(2 * MIB);
    int forwards = 0;
    for (; forwards < 200 && ft_disc_state(d) != FT_DISC_DONE; forwards++)
        for (int l = 0; l < 4; l++)
            launch(d, 1, "gemm", act, 2, w[l], act + (uint64_t)l * 64 * KIB);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_int_ge(forwards, 256 / 4); /* not before the run of launches without a key */
    ck_assert_uint_eq(ft_disc_weight_bytes(d), 32 * MIB);
    ft_disc_free(d);
}
END_TEST

/* Less than 1 MiB copied into new regions (token ids, small tables) starts nothing over:
 * 512 launches without a key, no restart said. */
START_TEST(small_copies_after_other_kernels_start_nothing_over)
{
    uint64_t warm = alloc_region(2 * MIB);
    ft_disc_params_t p = params(1);
    log_capture_start();
    ft_disc_t *d = ft_disc_new(regions, &p);
    launch(d, 1, "warmup", warm, 1, warm);
    uint64_t w[4];
    for (int l = 0; l < 4; l++) {
        w[l] = alloc_region(128 * KIB);
        ft_scan_set_t in;
        ft_scan_set_clear(&in);
        ft_scan_bytes(regions, &w[l], 8, &in);
        ft_disc_write(d, &in);
    }
    uint64_t act = alloc_region(2 * MIB);
    for (int f = 0; f < 128; f++)
        for (int l = 0; l < 4; l++)
            launch(d, 1, "gemm", act, 2, w[l], act + (uint64_t)l * 64 * KIB);
    ck_assert_ptr_null(strstr(log_captured(), "launches in a row touched no region alive at its start"));
    ft_disc_free(d);
}
END_TEST

START_TEST(explicit_marks_define_iterations)
{
    uint64_t w[6];
    for (int i = 0; i < 6; i++)
        w[i] = alloc_region(MIB);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    /* The same weight twice in a row inside one pass would fool no detector, but a
     * pass that starts mid-way through the weights needs the mark to be right. */
    for (int it = 0; it < 3; it++) {
        ft_disc_mark(d, 3);
        for (int i = 0; i < 6; i++)
            launch(d, 3, "k", 0, 1, w[(i + 3) % 6]);
    }
    ft_disc_mark(d, 3);
    launch(d, 3, "k", 0, 1, w[3]);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_int_eq(ft_disc_iterations(d), 2);
    /* All six use the same kernel and size: a period of 1, one unit per weight, in the
     * order of the marked pass. */
    ck_assert_uint_eq(ft_disc_unit_count(d), 6);
    ck_assert_uint_eq(ft_disc_unit(d, 0)->region_ids[0], id_of(w[3]));
    ft_disc_free(d);
}
END_TEST

START_TEST(marker_kernel_defines_iterations)
{
    uint64_t w1 = alloc_region(MIB), w2 = alloc_region(2 * MIB);
    ft_disc_params_t p = params(1);
    p.marker_glob = "step_begin*";
    ft_disc_t *d = ft_disc_new(regions, &p);
    launch(d, 1, "k", 0, 1, w1);         /* prologue, before the first marker */
    launch(d, 1, "step_begin_v2", 0, 0);
    launch(d, 1, "k", 0, 1, w2);
    launch(d, 1, "k", 0, 1, w1);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_OBSERVING);
    launch(d, 1, "step_begin_v2", 0, 0);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_uint_eq(ft_disc_unit(d, 0)->region_ids[0], id_of(w2));
    ft_disc_free(d);
}
END_TEST

START_TEST(threads_interleaved_give_the_same_units)
{
    llama_t m;
    llama_alloc(&m, 3);
    ft_disc_params_t p = params(2);
    ft_disc_t *d = ft_disc_new(regions, &p);
    /* Two lanes running forwards at once, launches interleaved one by one: simulate by
     * running each lane's forward launch by launch in alternation. Each lane reuses
     * the same weights and activations, which is harmless for discovery. */
    for (int it = 0; it < 4 && ft_disc_state(d) != FT_DISC_DONE; it++) {
        llama_forward(d, 1, &m, 3);
        llama_forward(d, 2, &m, 3);
    }
    check_llama_units(d, &m, 3);
    ft_disc_free(d);
}
END_TEST

START_TEST(patterns)
{
    const char *k[] = { "rmsnorm", "sm90_gemm_bf16" };
    ck_assert(ft_disc_pattern_match("unit.1*", "unit.12", k, 2, 0));
    ck_assert(ft_disc_pattern_match("name:unit.?", "unit.3", k, 2, 0));
    ck_assert(!ft_disc_pattern_match("name:unit.?", "unit.13", k, 2, 0));
    ck_assert(ft_disc_pattern_match("kernel:*gemm*", "unit.1", k, 2, 0));
    ck_assert(!ft_disc_pattern_match("kernel:attn*", "unit.1", k, 2, 0));
    ck_assert(ft_disc_pattern_match("size:>=16MiB", "u", k, 0, 16 * MIB));
    ck_assert(!ft_disc_pattern_match("size:>=16MiB", "u", k, 0, 16 * MIB - 1));
    ck_assert(ft_disc_pattern_match("size:<1G", "u", k, 0, 1023 * MIB));
    ck_assert(!ft_disc_pattern_match("size:<1G", "u", k, 0, 1024 * MIB));
    ck_assert(!ft_disc_pattern_match("size:~3", "u", k, 0, 1)); /* malformed: no match */
    /* The size is core/size.h's grammar, as in the size options: KB is 1000 bytes,
     * blanks are allowed, and a plain number below 1 MiB is no size (a unit left out),
     * so that pattern matches no unit, however large. */
    ck_assert(ft_disc_pattern_match("size:>=16MB", "u", k, 0, 16000000));
    ck_assert(!ft_disc_pattern_match("size:>=16MB", "u", k, 0, 16000000 - 1));
    ck_assert(ft_disc_pattern_match("size:< 1.5 GiB ", "u", k, 0, 1536 * MIB - 1));
    ck_assert(!ft_disc_pattern_match("size:>=8192", "u", k, 0, 1024 * MIB));
    ck_assert(!ft_disc_pattern_match("size:<8192", "u", k, 0, 0));
    ck_assert(ft_disc_pattern_match("size:>=1048576", "u", k, 0, MIB));
    ck_assert(!ft_disc_pattern_match("size:>=1e6", "u", k, 0, 1024 * MIB));

    llama_t m;
    llama_alloc(&m, 2);
    char *inc[] = { "kernel:gemm" };     /* units whose range runs the plain gemm */
    char *exc[] = { "size:<1MiB", "unit.2" };
    ft_disc_params_t p = params(1);
    p.include = inc;
    p.n_include = 1;
    p.exclude = exc;
    p.n_exclude = 2;
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 3; it++)
        llama_forward(d, 1, &m, 2);
    launch(d, 1, "embedding", m.act, 3, m.embed, m.input, m.act);
    ck_assert_uint_eq(ft_disc_unit_count(d), 4);
    ck_assert(!ft_disc_unit(d, 0)->offload); /* embedding: no gemm */
    ck_assert(ft_disc_unit(d, 1)->offload);
    ck_assert(!ft_disc_unit(d, 2)->offload); /* excluded by name */
    ck_assert(!ft_disc_unit(d, 3)->offload); /* head: gemm_head, not gemm */
    ft_disc_free(d);
}
END_TEST


/* At the end of discovery, a unit pattern that matches no unit and a marker no launch
 * matched are each warned about, by option and pattern; the ones that match are not. */
START_TEST(unmatched_patterns_and_marker_are_warned)
{
    llama_t m;
    llama_alloc(&m, 2);
    char *inc[] = { "unit.*", "layers.*" };
    char *exc[] = { "kernel:no_such*", "size:>=1GiB", "unit.1" };
    ft_disc_params_t p = params(1);
    p.include = inc;
    p.n_include = 2;
    p.exclude = exc;
    p.n_exclude = 3;
    p.marker_glob = "step_begin*";
    log_capture_start();
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 3; it++)
        llama_forward(d, 1, &m, 2);
    launch(d, 1, "embedding", m.act, 3, m.embed, m.input, m.act);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    const char *log = log_captured();
    ck_assert_ptr_nonnull(strstr(log, "warning: FT_INCLUDE_PATTERNS: 'layers.*' matches none of the 4 "
                                      "units, unit.0 .. unit.3\n"));
    ck_assert_ptr_nonnull(strstr(log, "warning: FT_EXCLUDE_PATTERNS: 'kernel:no_such*' matches none"));
    ck_assert_ptr_nonnull(strstr(log, "warning: FT_EXCLUDE_PATTERNS: 'size:>=1GiB' matches none"));
    ck_assert_ptr_null(strstr(log, "'unit.*' matches"));
    ck_assert_ptr_null(strstr(log, "'unit.1' matches"));
    ck_assert_ptr_nonnull(strstr(log, "warning: FT_ITERATION_MARKER: 'step_begin*' matches none of the "));
    ft_disc_status_t st;
    ft_disc_status(d, &st);
    ck_assert_uint_eq(st.marker_hits, 0);
    ck_assert_int_eq(st.iters_wanted, 1);
    ft_disc_free(d);

    /* No pattern of the include list matches: every unit stays resident, said so. */
    char *none[] = { "layers.*" };
    p = params(1);
    p.include = none;
    p.n_include = 1;
    d = ft_disc_new(regions, &p);
    for (int it = 0; it < 3; it++)
        llama_forward(d, 1, &m, 2);
    launch(d, 1, "embedding", m.act, 3, m.embed, m.input, m.act);
    ck_assert_ptr_nonnull(strstr(log_captured(), "; no pattern matches, so every unit stays resident"));
    ft_disc_free(d);

    /* A marker that matches: no warning. */
    uint64_t w1 = alloc_region(MIB), w2 = alloc_region(2 * MIB);
    p = params(1);
    p.marker_glob = "step_begin*";
    d = ft_disc_new(regions, &p);
    launch(d, 1, "step_begin_v2", 0, 0);
    launch(d, 1, "k", 0, 1, w2);
    launch(d, 1, "k", 0, 1, w1);
    launch(d, 1, "step_begin_v2", 0, 0);
    ck_assert_int_eq(ft_disc_state(d), FT_DISC_DONE);
    ck_assert_ptr_null(strstr(log_captured(), "warning"));
    ft_disc_status(d, &st);
    ck_assert_uint_eq(st.marker_hits, 2);
    ft_disc_free(d);
}
END_TEST

START_TEST(trace_records_read_back)
{
    llama_t m;
    llama_alloc(&m, 2);
    ft_disc_params_t p = params(1);
    ft_disc_t *d = ft_disc_new(regions, &p);
    for (int it = 0; it < 2; it++)
        llama_forward(d, 1, &m, 2);
    launch(d, 1, "embedding", m.act, 3, m.embed, m.input, m.act);
    ft_trace_writer_t w;
    ck_assert_int_eq(ft_trace_writer_init(&w), 0);
    ft_disc_trace(d, &w);
    char path[] = "/tmp/ft-disc-XXXXXX";
    int fd = mkstemp(path); /* stdlib.h */
    close(fd);
    ck_assert_int_eq(ft_trace_write_file(&w, path), 0);
    ft_trace_writer_free(&w);
    FILE *f = fopen(path, "rb");
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    unlink(path);
    char err[256];
    ck_assert_int_eq(ft_trace_read(buf, n, NULL, NULL, err, sizeof err), 0);
    ft_disc_free(d);
}
END_TEST

Suite *discovery_suite(void)
{
    Suite *s = suite_create("discovery");
    TCase *tc = tcase_create("engine");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, llama_units_by_wraparound);
    tcase_add_test(tc, kernels_alternating_between_layers_still_give_a_unit_a_layer);
    tcase_add_test(tc, pieces_join_the_unit_of_the_tensor_they_hold);
    tcase_add_test(tc, a_piece_after_room_stays_resident);
    tcase_add_test(tc, a_copy_over_two_units_pieces_keeps_them_resident);
    tcase_add_test(tc, a_model_freed_after_done_and_another_discovered);
    tcase_add_test(tc, hash_batches_and_failures);
    tcase_add_test(tc, passes_align_on_the_embedding_despite_a_different_first_forward);
    tcase_add_test(tc, pointer_array_touches_do_not_reorder_the_pass);
    tcase_add_test(tc, stale_pointers_in_padding_do_not_move_weights);
    tcase_add_test(tc, garbage_words_make_touches_unsure);
    tcase_add_test(tc, stale_pointers_outside_the_layers_do_not_move_weights);
    tcase_add_test(tc, stale_misaligned_word_makes_no_period);
    tcase_add_test(tc, units_are_named_after_nvtx_ranges);
    tcase_add_test(tc, passes_are_one_forward_when_small_activations_alternate);
    tcase_add_test(tc, units_are_named_after_the_ranges_their_weights_are_used_in);
    tcase_add_test(tc, prologue_of_init_kernels_is_skipped);
    tcase_add_test(tc, init_kernels_then_synchronised_forwards);
    tcase_add_test(tc, decode_with_a_growing_cache_finds_the_pass);
    tcase_add_test(tc, weights_made_by_init_kernels_are_found);
    tcase_add_test(tc, weights_copied_after_other_kernels_are_found);
    tcase_add_test(tc, small_copies_after_other_kernels_start_nothing_over);
    tcase_add_test(tc, pass_start_survives_a_moved_input);
    tcase_add_test(tc, a_weight_touch_puts_a_lane_back_on_the_record);
    tcase_add_test(tc, pass_start_before_the_first_weight_survives_a_moved_input);
    tcase_add_test(tc, pass_start_survives_a_stale_address_seen_in_discovery);
    tcase_add_test(tc, pass_start_survives_another_embedding_kernel);
    tcase_add_test(tc, a_launch_reading_the_start_weight_and_another_does_not_start_a_pass);
    tcase_add_test(tc, activations_and_copies_are_not_weights);
    tcase_add_test(tc, shared_small_segment_does_not_fool_the_detector);
    tcase_add_test(tc, activation_equal_at_every_boundary_is_not_a_weight);
    tcase_add_test(tc, change_between_two_lanes_first_boundaries_counts);
    tcase_add_test(tc, late_allocations_and_freed_regions);
    tcase_add_test(tc, explicit_marks_define_iterations);
    tcase_add_test(tc, marker_kernel_defines_iterations);
    tcase_add_test(tc, threads_interleaved_give_the_same_units);
    tcase_add_test(tc, patterns);
    tcase_add_test(tc, unmatched_patterns_and_marker_are_warned);
    tcase_add_test(tc, trace_records_read_back);
    suite_add_tcase(s, tc);
    return s;
}

/* trace_fixture.c - writes a known trace for ft-trace's scenario test
 * (tests/scenario/trace_discovery.sh): the discovery engine fed a synthetic llama-like
 * launch stream, as tests/check_discovery.c does, with the records the shim writes.
 *
 *   trace_fixture FILE [--partial]
 *
 * The model: an embedding, 2 identical layers (norm, q/k/v/o, norm, gate/up/down),
 * a final norm and a head -> 4 units. Beside the weights, on purpose:
 *   input     alive at the first launch, written by a memcpy before each forward
 *   act/act2  activations: alive at the first launch, content changed by kernels
 *   unused    alive at the first launch, never touched by a kernel
 *   rope_tmp  used by one init kernel before the first forward, then freed
 *   kv        allocated after the first launch (never a candidate)
 *   a barrier kernel touching no region, once per layer; q read by two gemm launches
 *   (split-K: one weight, counted once per kernel); the MLP gemms carry a long
 *   mangled name, the barrier quotes and a tab (for the viewer's escaping).
 * After discovery, three forwards and five launches are followed (ft_disc_track): the
 * TRACKING record. --partial stops after one forward: discovery still observing, no
 * units.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/discovery.h"
#include "core/log.h"

#define MIB (1ull << 20)
#define KIB (1ull << 10)
#define LAYERS 2

static const char GEMM_MLP[] =
    "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalINS1_9collective"
    "14CollectiveMmaILi4ENS_10bfloat16_tES6_fLi128ELi256ELi64EEEvEEEEvNT_6ParamsE";
static const char BARRIER[] = "sync \"barrier\"\tv2";

static ft_regions_t *regions;
static uint64_t next_base = 0x700000000000ull;
static uint64_t version[256];

static void die(const char *what)
{
    fprintf(stderr, "trace_fixture: %s\n", what);
    exit(1);
}

static uint64_t alloc_region(uint64_t size)
{
    uint64_t base = next_base;
    next_base += (size + 0xffff) & ~0xffffull;
    if (ft_regions_insert(regions, base, size, 0, 0) <= 0)
        die("region insert failed");
    return base;
}

static uint32_t id_of(uint64_t ptr)
{
    ft_region_t r;
    if (ft_regions_find(regions, ptr, &r) != 1 || r.id >= 256)
        die("unknown region");
    return r.id;
}

/* A region's content hash is its version: a kernel writing it bumps the version. */
static void fake_hash(void *ctx, ft_disc_hash_req_t *q, size_t n)
{
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        q[i].hash = version[id_of(q[i].base)] * 31 + q[i].size;
}

/* After discovery, launches are followed (ft_disc_track), as the shim does. */
static int tracking;

static void launch(ft_disc_t *d, const char *name, uint64_t written, int n, ...)
{
    ft_scan_set_t set;
    ft_scan_set_clear(&set);
    uint64_t args[8] = { 0 };
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        args[i] = va_arg(ap, uint64_t);
    va_end(ap);
    ft_scan_bytes(regions, args, (size_t)n * 8, &set);
    if (written)
        version[id_of(written)]++;
    /* The kernel's identity: its name's address, stable for the literals used here. */
    if (tracking)
        ft_disc_track(d, 1, (uint64_t)(uintptr_t)name, &set, NULL, NULL);
    else
        ft_disc_launch(d, 1, (uint64_t)(uintptr_t)name, name, &set);
}

typedef struct {
    uint64_t embed, norm, head, act, act2, input, unused, rope_tmp, kv;
    uint64_t ln1[LAYERS], q[LAYERS], k[LAYERS], v[LAYERS], o[LAYERS], ln2[LAYERS];
    uint64_t gate[LAYERS], up[LAYERS], down[LAYERS];
} llama_t;

static void forward(ft_disc_t *d, llama_t *m)
{
    ft_scan_set_t in;
    ft_scan_set_clear(&in);
    ft_scan_bytes(regions, &m->input, 8, &in);
    ft_disc_write(d, &in); /* the input arrives by memcpy each forward */
    launch(d, "embedding", m->act, 3, m->embed, m->input, m->act);
    for (int l = 0; l < LAYERS; l++) {
        launch(d, "rmsnorm", m->act2, 3, m->act, m->ln1[l], m->act2);
        launch(d, "gemm", m->act, 3, m->act2, m->q[l], m->act);
        launch(d, "gemm", m->act, 3, m->act2, m->q[l], m->act); /* split-K: q again */
        launch(d, "gemm", m->act, 3, m->act2, m->k[l], m->act);
        launch(d, "gemm", m->act, 3, m->act2, m->v[l], m->act);
        launch(d, "rope", m->act, 1, m->act);
        launch(d, "attention", m->act2, 3, m->act, m->kv, m->act2);
        launch(d, BARRIER, 0, 0);
        launch(d, "gemm", m->act, 3, m->act2, m->o[l], m->act);
        launch(d, "rmsnorm", m->act2, 3, m->act, m->ln2[l], m->act2);
        launch(d, GEMM_MLP, m->act, 3, m->act2, m->gate[l], m->act);
        launch(d, GEMM_MLP, m->act, 3, m->act2, m->up[l], m->act);
        launch(d, "silu_mul", m->act, 1, m->act);
        launch(d, GEMM_MLP, m->act2, 3, m->act, m->down[l], m->act2);
        launch(d, "add", m->act, 2, m->act2, m->act);
    }
    launch(d, "rmsnorm", m->act2, 3, m->act, m->norm, m->act2);
    launch(d, "gemm_head", m->act, 3, m->act2, m->head, m->act);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--partial") != 0)) {
        fprintf(stderr, "usage: trace_fixture FILE [--partial]\n");
        return 2;
    }
    int partial = argc == 3;
    ft_log_set_threshold(FT_LOG_ERROR);
    regions = ft_regions_new();
    if (regions == NULL)
        die("out of memory");

    llama_t m;
    m.embed = alloc_region(64 * MIB);
    for (int l = 0; l < LAYERS; l++) {
        m.ln1[l] = alloc_region(8 * KIB);
        m.q[l] = alloc_region(32 * MIB);
        m.k[l] = alloc_region(8 * MIB);
        m.v[l] = alloc_region(8 * MIB);
        m.o[l] = alloc_region(32 * MIB);
        m.ln2[l] = alloc_region(8 * KIB);
        m.gate[l] = alloc_region(112 * MIB);
        m.up[l] = alloc_region(112 * MIB);
        m.down[l] = alloc_region(112 * MIB);
    }
    m.norm = alloc_region(8 * KIB);
    m.head = alloc_region(64 * MIB);
    m.act = alloc_region(2 * MIB);
    m.act2 = alloc_region(2 * MIB);
    m.input = alloc_region(4 * KIB);
    m.unused = alloc_region(1 * MIB);
    m.rope_tmp = alloc_region(256 * KIB);

    ft_disc_params_t p;
    memset(&p, 0, sizeof p);
    p.iters = 2;
    p.hash = fake_hash;
    ft_disc_t *d = ft_disc_new(regions, &p);
    if (d == NULL)
        die("out of memory");

    /* Prologue: an init kernel fills a temporary, which is then freed. */
    launch(d, "rope_cache_init", m.rope_tmp, 1, m.rope_tmp);
    ft_disc_region_freed(d, id_of(m.rope_tmp));
    if (ft_regions_remove(regions, m.rope_tmp, NULL) != 0)
        die("region remove failed");
    m.kv = alloc_region(1 * MIB); /* after the first launch: never a candidate */

    for (int it = 0; it < (partial ? 1 : 8) && ft_disc_state(d) != FT_DISC_DONE; it++)
        forward(d, &m);
    if (!partial && ft_disc_state(d) != FT_DISC_DONE)
        die("discovery did not finish");
    /* Three forwards followed after discovery, and five launches of a fourth. */
    if (!partial) {
        tracking = 1;
        for (int it = 0; it < 3; it++)
            forward(d, &m);
        launch(d, "embedding", m.act, 3, m.embed, m.input, m.act);
        for (int i = 0; i < 4; i++)
            launch(d, "rope", m.act, 1, m.act);
    }

    ft_trace_writer_t w;
    if (ft_trace_writer_init(&w) != 0)
        die("out of memory");
    ft_trace_begin(&w, FT_TRACE_PROCESS);
    ft_trace_put_u32(&w, 4242);
    ft_trace_put_u64(&w, 1700000000000000000ull);
    ft_trace_put_u64(&w, 1700000002500000000ull);
    ft_trace_put_str(&w, "trace_fixture");
    ft_trace_put_str(&w, "Simulated GPU (fixture)");
    ft_trace_end(&w);
    ft_disc_trace(d, &w);
    int rc = ft_trace_write_file(&w, argv[1]);
    ft_trace_writer_free(&w);
    ft_disc_free(d);
    ft_regions_free(regions);
    if (rc != 0) {
        fprintf(stderr, "trace_fixture: %s: cannot write (%d)\n", argv[1], rc);
        return 1;
    }
    return 0;
}

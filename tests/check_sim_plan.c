/* check_sim_plan.c - the pipeline model (core/plan.c) against the simulator's virtual
 * clock. A plan is replayed twice, compute on one stream and streamed units copied on a
 * side stream, each compute waiting for its copy:
 *   - by the model's own rules (plan.h: group g of a pass keeps slot g % slots, its copy
 *     waits until that slot's previous group has computed): the measured step must be
 *     within 5% of ft_plan_predict, whatever the plan;
 *   - as the residency engine runs it, with its decisions from core/residency.c (misses,
 *     the prefetch window, the slot a load takes: ft_res_make_room, ft_res_prefetch).
 *     The engine gives a load the least recently loaded unit's slot, which is the
 *     model's slot when the streamed units are a multiple of the slots: then within 5%
 *     too; otherwise a copy may start sooner than the model lets it (its slot's previous
 *     unit computed earlier), so the step is at most the prediction (within 5%). */
#include "tests/sim/sim_test.h"

#include "core/plan.h"
#include "core/residency.h"

/* busy(uint64_t ns, const char *w): reads its weight's first byte; costs ns. */
static void k_busy_body(void **a, const simcuda_dims_t *d)
{
    (void)d;
    volatile const char *w = *(const char **)a[1];
    (void)w[0];
}
static uint64_t k_busy_cost(void **a, const simcuda_dims_t *d)
{
    (void)d;
    return *(uint64_t *)a[0];
}
static char k_busy;

static void register_busy(void)
{
    simcuda_kernel_desc_t desc = { "busy", k_busy_body, k_busy_cost, 0, 2, { 8, 8 } };
    ck_assert_int_eq(simcudaRegisterKernel(&k_busy, &desc), 0);
}

#define MAXU 16
#define PASSES 8

/* Replays the plan by the model's rules for PASSES passes; returns the mean virtual
 * step (us) of the last three, when the pipeline has settled. */
static double replay(const ft_plan_input_t *in, const int *resident, int slots)
{
    int group[MAXU];
    int ng = ft_plan_groups(in, resident, group);
    uint64_t slot_bytes = 0;
    for (size_t i = 0; i < in->n; i++)
        if (!resident[i] && in->units[i].bytes > slot_bytes)
            slot_bytes = in->units[i].bytes;
    char *host = NULL, *slot_mem[MAXU] = { 0 }, *res_mem[MAXU] = { 0 };
    RT_OK(cudaHostAlloc((void **)&host, slot_bytes ? slot_bytes : 1, cudaHostAllocDefault));
    for (int s = 0; s < slots && slot_bytes; s++)
        RT_OK(cudaMalloc((void **)&slot_mem[s], slot_bytes));
    for (size_t i = 0; i < in->n; i++)
        if (resident[i])
            RT_OK(cudaMalloc((void **)&res_mem[i], in->units[i].bytes));
    cudaStream_t comp, copy;
    RT_OK(cudaStreamCreateWithFlags(&comp, cudaStreamNonBlocking));
    RT_OK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    /* One event per (pass, unit) and per (pass, group): a stream waits on the record
     * made when the wait is enqueued, so reusing events across passes would make a
     * copy run ahead wait on the wrong pass. */
    static cudaEvent_t computed[PASSES][MAXU], copied[PASSES][MAXU];
    cudaEvent_t pass_start[PASSES + 1];
    for (int p = 0; p < PASSES; p++)
        for (size_t i = 0; i < in->n; i++) {
            RT_OK(cudaEventCreate(&computed[p][i]));
            RT_OK(cudaEventCreate(&copied[p][i]));
        }
    for (int p = 0; p <= PASSES; p++)
        RT_OK(cudaEventCreate(&pass_start[p]));

    /* For each group: its slot, its units' range, and the last unit of the slot's
     * previous occupant (in the global order of units over passes). */
    int first_of[MAXU], last_of[MAXU];
    for (int g = 0; g < ng; g++)
        first_of[g] = -1;
    for (size_t i = 0; i < in->n; i++) {
        if (group[i] < 0)
            continue;
        if (first_of[group[i]] < 0)
            first_of[group[i]] = (int)i;
        last_of[group[i]] = (int)i;
    }
    /* Copies are enqueued in order, each as soon as its slot's previous occupant's
     * compute has been enqueued (so the wait refers to that record): the host runs
     * ahead of the device, as the model assumes. */
    long next_copy = 0; /* global group index: pass * ng + g */
    long total_groups = (long)PASSES * ng;
    for (int p = 0; p < PASSES; p++) {
        for (size_t i = 0; i < in->n; i++) {
            long global_unit = (long)p * (long)in->n + (long)i;
            while (next_copy < total_groups) {
                /* Group g of a pass uses slot g % slots in every pass (the model's
                 * rule); its previous occupant is the latest earlier group with that slot. */
                int g = (int)(next_copy % ng);
                long prev = next_copy - 1;
                while (prev >= 0 && (int)(prev % ng) % slots != g % slots)
                    prev--;
                if (prev >= 0) {
                    int pg = (int)(prev % ng);
                    long prev_last = (prev / ng) * (long)in->n + last_of[pg];
                    if (prev_last >= global_unit)
                        break; /* its compute is not enqueued yet */
                    RT_OK(cudaStreamWaitEvent(copy, computed[prev / ng][last_of[pg]], 0));
                }
                uint64_t bytes = 0;
                for (int u = first_of[g]; u <= last_of[g]; u++)
                    if (group[u] == g)
                        bytes += in->units[u].bytes;
                RT_OK(cudaMemcpyAsync(slot_mem[g % slots], host, bytes, cudaMemcpyHostToDevice, copy));
                RT_OK(cudaEventRecord(copied[next_copy / ng][g], copy));
                next_copy++;
            }
            if (i == 0)
                RT_OK(cudaEventRecord(pass_start[p], comp));
            if (!resident[i])
                RT_OK(cudaStreamWaitEvent(comp, copied[p][group[i]], 0));
            uint64_t ns = (uint64_t)(in->units[i].compute_us * 1000.0 + 0.5);
            char *w = resident[i] ? res_mem[i] : slot_mem[group[i] % slots];
            void *args[] = { &ns, &w };
            RT_OK(cudaLaunchKernel(&k_busy, ONE, ONE, args, 0, comp));
            RT_OK(cudaEventRecord(computed[p][i], comp));
        }
    }
    RT_OK(cudaEventRecord(pass_start[PASSES], comp));
    RT_OK(cudaDeviceSynchronize());
    float ms = 0;
    RT_OK(cudaEventElapsedTime(&ms, pass_start[PASSES - 3], pass_start[PASSES]));
    for (size_t i = 0; i < in->n; i++)
        if (res_mem[i])
            RT_OK(cudaFree(res_mem[i]));
    for (int s = 0; s < slots; s++)
        if (slot_mem[s])
            RT_OK(cudaFree(slot_mem[s]));
    RT_OK(cudaFreeHost(host));
    return (double)ms * 1000.0 / 3.0;
}

/* The residency engine in the replay: each unit's device memory (the engine maps it at
 * the unit's own addresses; here it simply stays allocated, time is what is measured)
 * and what core/residency.c decides from. */
typedef struct {
    const ft_plan_input_t *in;
    int n, slots, loaded;
    uint64_t clock;
    ft_res_unit_t unit[MAXU];
    char *mem[MAXU], *host;
    cudaEvent_t ready[MAXU], used[MAXU]; /* behind its copy in; behind its last compute */
    int ready_recorded[MAXU], used_recorded[MAXU];
} engine_t;

/* load_unit: unit w loaded on `stream` for a call (keep -1: a miss) or by the prefetch
 * of unit keep's launch. Into full slots, the victim's copy in and last compute are
 * waited for on the host first, as an unmap must. */
static void engine_load(engine_t *e, int w, int keep, cudaStream_t stream)
{
    int victims[MAXU], n_victims;
    e->unit[w].busy = 1;
    if (keep >= 0)
        e->unit[keep].busy = 1;
    ft_res_room_t room = ft_res_make_room(e->unit, e->n, e->loaded, e->slots, keep >= 0, victims, &n_victims);
    e->unit[w].busy = 0;
    if (keep >= 0)
        e->unit[keep].busy = 0;
    if (room == FT_RES_SKIP)
        return;
    for (int i = 0; i < n_victims; i++) {
        int victim = victims[i];
        if (e->ready_recorded[victim])
            RT_OK(cudaEventSynchronize(e->ready[victim]));
        if (e->used_recorded[victim])
            RT_OK(cudaEventSynchronize(e->used[victim]));
        e->unit[victim].loaded = 0;
        e->loaded--;
    }
    RT_OK(cudaMemcpyAsync(e->mem[w], e->host, e->in->units[w].bytes, cudaMemcpyHostToDevice, stream));
    RT_OK(cudaEventRecord(e->ready[w], stream));
    e->ready_recorded[w] = 1;
    e->used_recorded[w] = 0;
    e->unit[w].loaded = 1;
    e->unit[w].stamp = ++e->clock;
    e->loaded++;
}

/* Replays the plan as the residency engine runs it for PASSES passes, from the switch
 * (nothing streamed loaded); returns the mean virtual step (us) of the last three. Each
 * unit is one launch, so its first launch is its last: the guard loads it on a miss,
 * the launch waits for its copy, and once the launch is enqueued the units that follow
 * it are prefetched. */
static double engine_replay(const ft_plan_input_t *in, const int *resident, int slots)
{
    static engine_t e;
    memset(&e, 0, sizeof e);
    e.in = in;
    e.n = (int)in->n;
    e.slots = slots;
    uint64_t biggest = 1;
    for (int i = 0; i < e.n; i++) {
        e.unit[i] = (ft_res_unit_t){ 0, resident[i], !resident[i], 0, 0 };
        RT_OK(cudaMalloc((void **)&e.mem[i], in->units[i].bytes));
        RT_OK(cudaEventCreate(&e.ready[i]));
        RT_OK(cudaEventCreate(&e.used[i]));
        if (in->units[i].bytes > biggest)
            biggest = in->units[i].bytes;
    }
    RT_OK(cudaHostAlloc((void **)&e.host, biggest, cudaHostAllocDefault));
    cudaStream_t comp, side;
    RT_OK(cudaStreamCreateWithFlags(&comp, cudaStreamNonBlocking));
    RT_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t pass_start[PASSES + 1];
    for (int p = 0; p <= PASSES; p++)
        RT_OK(cudaEventCreate(&pass_start[p]));
    int ahead[MAXU];
    for (int p = 0; p < PASSES; p++) {
        for (int i = 0; i < e.n; i++) {
            if (!e.unit[i].loaded)
                engine_load(&e, i, -1, comp);
            if (i == 0)
                RT_OK(cudaEventRecord(pass_start[p], comp));
            if (e.ready_recorded[i])
                RT_OK(cudaStreamWaitEvent(comp, e.ready[i], 0));
            uint64_t ns = (uint64_t)(in->units[i].compute_us * 1000.0 + 0.5);
            void *args[] = { &ns, &e.mem[i] };
            RT_OK(cudaLaunchKernel(&k_busy, ONE, ONE, args, 0, comp));
            RT_OK(cudaEventRecord(e.used[i], comp));
            e.used_recorded[i] = 1;
            int k = ft_res_prefetch(e.unit, e.n, i, slots, ahead);
            for (int a = 0; a < k; a++)
                if (!e.unit[ahead[a]].loaded)
                    engine_load(&e, ahead[a], i, side);
        }
    }
    RT_OK(cudaEventRecord(pass_start[PASSES], comp));
    RT_OK(cudaDeviceSynchronize());
    float ms = 0;
    RT_OK(cudaEventElapsedTime(&ms, pass_start[PASSES - 3], pass_start[PASSES]));
    for (int i = 0; i < e.n; i++)
        RT_OK(cudaFree(e.mem[i]));
    RT_OK(cudaFreeHost(e.host));
    return (double)ms * 1000.0 / 3.0;
}

static void set_env(void)
{
    setenv("FTSIM_H2D_GBPS", "4", 1);
    setenv("FTSIM_COPY_LATENCY_NS", "2000", 1);
}

static void check_plan(ft_plan_unit_t *u, size_t n, const int *resident, int slots)
{
    ft_plan_input_t in;
    memset(&in, 0, sizeof in);
    in.units = u;
    in.n = n;
    in.h2d_bytes_per_us = 4000.0; /* 4 GB/s */
    in.copy_latency_us = 2.0;
    in.min_slots = 2;
    in.max_slots = 8;
    double predicted = ft_plan_predict(&in, resident, slots, NULL);
    double measured = replay(&in, resident, slots);
    ck_assert_msg(predicted > 0, "model refused the plan");
    ck_assert_msg(measured > 0.95 * predicted && measured < 1.05 * predicted,
                  "virtual step %.1f us, model %.1f us (%zu units, %d slots)", measured, predicted,
                  n, slots);
    int streamed = 0;
    for (size_t i = 0; i < n; i++)
        streamed += !resident[i];
    if (streamed == 0)
        return;
    double engine = engine_replay(&in, resident, slots);
    if (streamed % slots == 0)
        ck_assert_msg(engine > 0.95 * predicted && engine < 1.05 * predicted,
                      "engine's virtual step %.1f us, model %.1f us (%zu units, %d streamed, %d slots)",
                      engine, predicted, n, streamed, slots);
    else
        ck_assert_msg(engine < 1.05 * predicted,
                      "engine's virtual step %.1f us above the model's %.1f us (%zu units, %d streamed, "
                      "%d slots)", engine, predicted, n, streamed, slots);
}

START_TEST(all_resident_is_the_sum_of_compute)
{
    set_env();
    register_busy();
    ft_plan_unit_t u[4] = { { "a", 1 << 20, 300, 0, 0 }, { "b", 1 << 20, 500, 0, 0 }, { "c", 1 << 20, 200, 0, 0 },
                            { "d", 1 << 20, 400, 0, 0 } };
    int resident[4] = { 1, 1, 1, 1 };
    check_plan(u, 4, resident, 0);
}
END_TEST

START_TEST(streamed_units_with_stalls)
{
    set_env();
    register_busy();
    /* 4 MiB at 4 GB/s: about 1050 us a copy, longer than most computes. */
    ft_plan_unit_t u[6] = { { "a", 4 << 20, 300, 0, 0 },  { "b", 4 << 20, 900, 0, 0 }, { "c", 4 << 20, 200, 0, 0 },
                            { "d", 4 << 20, 1500, 0, 0 }, { "e", 4 << 20, 100, 0, 0 }, { "f", 2 << 20, 700, 0, 0 } };
    int resident[6] = { 1, 0, 0, 1, 0, 0 };
    check_plan(u, 6, resident, 2);
    check_plan(u, 6, resident, 3);
    int all_streamed[6] = { 0, 0, 0, 0, 0, 0 };
    check_plan(u, 6, all_streamed, 2);
}
END_TEST

START_TEST(random_plans)
{
    set_env();
    register_busy();
    srand(7);
    for (int trial = 0; trial < 6; trial++) {
        ft_plan_unit_t u[8];
        int resident[8];
        size_t n = 3 + (size_t)(rand() % 6);
        for (size_t i = 0; i < n; i++) {
            u[i] = (ft_plan_unit_t){ "u", (uint64_t)(1 + rand() % 6) << 20, 100.0 + rand() % 1500, 0, 0 };
            resident[i] = rand() % 3 == 0;
        }
        resident[0] = 0; /* at least one streamed */
        check_plan(u, n, resident, 2 + rand() % 3);
    }
}
END_TEST

Suite *sim_plan_suite(void)
{
    Suite *s = suite_create("sim_plan");
    TCase *tc = tcase_create("model_vs_clock");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, all_resident_is_the_sum_of_compute);
    tcase_add_test(tc, streamed_units_with_stalls);
    tcase_add_test(tc, random_plans);
    suite_add_tcase(s, tc);
    return s;
}

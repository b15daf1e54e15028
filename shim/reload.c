/* reload.c - a model freed, another loaded. When the program frees most of the plan's
 * weights (FT_DISC_GONE_PERCENT of the units' bytes, core/discovery.h) after the plan,
 * the plan was made for a model that is gone: the weights loaded next (model B, after
 * `del A` and `torch.cuda.empty_cache()`) are in no unit, would be served past the
 * budget and never stream (H200, bench/RESULTS.md's free_load: 3661 MiB against a
 * 970 MiB budget). So the plan and the residency engine's state are dropped, and
 * discovery starts again from scratch with what the program does next; profiling and
 * the plan follow as they did the first time (docs/residency.md, "A model freed,
 * another loaded").
 *
 * The free only marks it (reload_wanted): the program is usually freeing the rest of
 * the model, which then need not come back to the device, and a program that frees its
 * model at its end loads nothing more, so its plan and verdict stay. The next
 * allocation (budget_admit) or guarded launch, copy or set (engine_enter) carries it
 * out, outside a stream capture: dropping the engine synchronises the device.
 *
 * Owns: reload_wanted (atomic), the count of plans dropped and the figures of the last
 * one (res.lock). It moves the phase from PLANNED or STREAMING to DISCOVERY
 * (engine_to), and asks each part to let go of what it kept of the plan
 * (res_drop_all, guard_forget, control_forget, profile_forget, observe_forget) and
 * discovery to start again (ft_disc_reload). */
#define _GNU_SOURCE
#include "shim/engine.h"

int reload_wanted;

/* Plans dropped so far, and the weight bytes the program had freed of the last one, of
 * how many (res.lock; the figures are written by the free that crossed the share). */
static int reloads;
static uint64_t gone_bytes, plan_bytes;
static int deferred_said, refused_said;

/* A program that keeps freeing and loading models goes through discovery, profiling
 * and FT_SPILL's moves each time; past this many, the plan in force stays (as
 * discovery's restarts are bounded, core/discovery.c's MAX_RESTARTS). */
#define RELOADS_MAX 4

void reload_note_free(uint32_t id)
{
    int ph = engine_phase();
    if (ph != PHASE_PLANNED && ph != PHASE_STREAMING)
        return;
    uint64_t gone, total;
    if (ft_disc_weight_freed(disc, id, &gone, &total) != 1)
        return;
    res_lock();
    gone_bytes = gone;
    plan_bytes = total;
    pthread_mutex_unlock(&res.lock);
    __atomic_store_n(&reload_wanted, 1, __ATOMIC_RELEASE);
}

void reload_now(void)
{
    if (!__atomic_load_n(&reload_wanted, __ATOMIC_ACQUIRE))
        return;
    res_lock();
    reload_now_locked();
    pthread_mutex_unlock(&res.lock);
}

/* res.lock held: no guarded call is between its guard and its enqueue, and no free is
 * in res_vmm_free, while the plan goes. */
void reload_now_locked(void)
{
    if (!__atomic_load_n(&reload_wanted, __ATOMIC_ACQUIRE))
        return;
    int ph = engine_phase();
    if (ph != PHASE_PLANNED && ph != PHASE_STREAMING) {
        __atomic_store_n(&reload_wanted, 0, __ATOMIC_RELAXED);
        return;
    }
    char a[32], b[32];
    if (capture_under_way()) {
        /* Loading the units back synchronises the device, which a capture forbids: the
         * next call after it ends does it. */
        if (!deferred_said++)
            FT_INFO("the program freed %s of the plan's %s of weights during a stream capture: the plan "
                    "is dropped once the capture ends", human_bytes(gone_bytes, a, sizeof a),
                    human_bytes(plan_bytes, b, sizeof b));
        return;
    }
    __atomic_store_n(&reload_wanted, 0, __ATOMIC_RELAXED);
    if (reloads >= RELOADS_MAX) {
        if (!refused_said++)
            FT_WARN("the program freed %s of the plan's %s of weights, after %d plans dropped already: the plan "
                    "stays (what the program loads next is served past it)", human_bytes(gone_bytes, a, sizeof a),
                    human_bytes(plan_bytes, b, sizeof b), RELOADS_MAX);
        return;
    }
    if (ph == PHASE_STREAMING) {
        /* A resident unit's calls leave no events behind: the device is drained. */
        REAL(cudaDeviceSynchronize)();
        if (res_drop_all() != 0) {
            FT_WARN("the program freed %s of the plan's %s of weights, but a streamed unit it still holds "
                    "could not be loaded back whole: the plan stays (the units loaded back are resident)",
                    human_bytes(gone_bytes, a, sizeof a), human_bytes(plan_bytes, b, sizeof b));
            return;
        }
    }
    timing_forget();
    guard_forget();
    control_forget();
    profile_forget();
    observe_forget();
    ft_disc_reload(disc);
    reloads++;
    engine_to(ph, PHASE_DISCOVERY, NULL);
    FT_INFO("the program freed %s of the plan's %s of weights: the plan is dropped (the streamed units' "
            "host copies freed, what the program still holds back on the device), and discovery starts "
            "again with what it runs next", human_bytes(gone_bytes, a, sizeof a),
            human_bytes(plan_bytes, b, sizeof b));
}

/* The verdict's note: "" when no plan was dropped. */
const char *reload_note(char *buf, size_t len)
{
    buf[0] = '\0';
    if (reloads == 0)
        return buf;
    char times[32] = "";
    if (reloads > 1)
        snprintf(times, sizeof times, " (%d times)", reloads);
    if (__atomic_load_n(&plan.made, __ATOMIC_ACQUIRE))
        snprintf(buf, len, "; planned again after the program freed the first plan's weights%s", times);
    else
        snprintf(buf, len, "; the program freed the first plan's weights%s, and no plan was made since", times);
    return buf;
}

/* handover.c - the user's profiler wins: when the application or a tool asks for CUPTI
 * (torch.profiler's Kineto, Nsight's injection library), FlexTensor gives CUPTI up at
 * once and carries on timing with CUDA events.
 *
 * Owns: ft_hook_cupti_wanted, which the CUPTI wrappers (shim.def's FT_CUPTI entries,
 * reached by direct calls and through the wrapped dlsym) call before forwarding; the
 * record of the hand-over (handover, written once by the thread that made it, under
 * handover.lock; the report reads it at exit under the same lock). The CUPTI side
 * (our activity kinds off and flushed, our subscriber removed) is cupti/observer.c's
 * ft_cupti_hand_over.
 *
 * Before CUDA 13.3 a process has one CUPTI subscriber: while FlexTensor held it,
 * Kineto's cuptiSubscribe failed with error 39 and torch.profiler recorded no GPU
 * event. FlexTensor's own copies (loads, write-backs, FT_SPILL's moves) go on while
 * the profiler records: they show in its trace on FlexTensor's own side streams, and
 * the exit report counts those made after the hand-over, so that the application's
 * can be told from them.
 *
 * Also owns ft_hook_cupti_register, the hook of cuptiActivityRegisterCallbacks: with
 * FT_CUPTI_AUDIT on, the application's buffer callbacks are registered behind
 * cupti/audit.c's trampolines (audit_lib: the libcupti that holds the real function,
 * written under audit_once). */
#define _GNU_SOURCE
#include "shim/engine.h"

#include "cupti/audit.h"

static struct {
    pthread_mutex_t lock;
    int done;              /* the application asked */
    int held;              /* FlexTensor held CUPTI then (ft_cupti_hand_over's 1) */
    ft_shim_fn_t by;       /* the call that asked first */
    int phase;             /* FlexTensor's phase then */
    /* FlexTensor's own copies until then, to count those made after */
    uint64_t region_loads, written_back, spill_moves;
} handover = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The copies FlexTensor itself made so far: regions copied in by loads, units copied
 * back, FT_SPILL's moves. res.lock: these counters move under it (the caller may hold
 * it already: engine_held). */
static void own_copies(uint64_t *loads, uint64_t *back, uint64_t *spill)
{
    if (!engine_held)
        res_lock();
    *loads = res.region_loads;
    *back = res.written_back + res.tail_written_back;
    *spill = spill_faults + spill_evictions;
    if (!engine_held)
        pthread_mutex_unlock(&res.lock);
}

/* Whether code at `caller` lies in the object that holds `code`. */
static int same_object(const void *caller, const void *code)
{
    Dl_info a, b;
    return dladdr(caller, &a) != 0 && dladdr(code, &b) != 0 && a.dli_fbase == b.dli_fbase;
}

/* libcupti calling one of its own exported functions, which a library built without
 * -Bsymbolic reaches through its PLT, and so through our export: the caller is libcupti
 * or, when libcupti made it a tail call, whoever called libcupti: FlexTensor's own
 * observer (the simulated libcupti's cuptiActivityEnable does this). Neither is the
 * application asking. */
static int not_the_application(const void *caller, const void *real)
{
    return same_object(caller, real) || same_object(caller, (const void *)same_object);
}

void ft_hook_cupti_wanted(ft_shim_fn_t by, const void *caller, const void *real)
{
    if (ft_cupti_handed_over())
        return; /* the common case after the first call: one atomic load */
    if (not_the_application(caller, real))
        return;
    int held = ft_cupti_hand_over();
    if (held < 0)
        return; /* another thread made the hand-over first */
    pthread_mutex_lock(&handover.lock);
    handover.done = 1;
    handover.held = held;
    handover.by = by;
    handover.phase = engine_phase();
    own_copies(&handover.region_loads, &handover.written_back, &handover.spill_moves);
    pthread_mutex_unlock(&handover.lock);
    if (held)
        FT_INFO("CUPTI handed to the application's subscriber (%s, during %s); FlexTensor times with "
                "CUDA events", ft_shim_fn_name(by), engine_phase_name(handover.phase));
    else
        FT_INFO("the application uses CUPTI (%s, during %s); FlexTensor did not hold it, and will not "
                "attach it again", ft_shim_fn_name(by), engine_phase_name(handover.phase));
    /* Before the plan, FlexTensor carries on (FT_CUPTI_HANDOVER=carry-on, the default)
     * or stands down, before the application's call goes on. On the H200, torch.profiler
     * recording while FlexTensor discovered died at its exit ("inserted.second INTERNAL
     * ASSERT FAILED", collection.cpp:1152): FlexTensor's own CUDA calls within one of its
     * hooks (a free's device synchronisation, checksum, copies, unmapping) came out of
     * CUPTI under one correlation id, and Kineto asserts on two flow starts sharing one
     * (FT_CUPTI_AUDIT named them). Such calls inside a driver hook are now made on the
     * own-call thread (cuda.c), each under an id of its own: carrying on, the H200 run
     * had no assert. Standing down, FlexTensor makes no more calls of its own: the
     * profile is the program's, and the program runs as it would without FlexTensor
     * (everything resident, the verdict says why). */
    if ((handover.phase == PHASE_DISCOVERY || handover.phase == PHASE_PROFILING) &&
        cfgp->cupti_handover == FT_CUPTI_HANDOVER_STAND_DOWN) {
        /* Called from a CUPTI wrapper, not a CUDA one: the stand-down's own CUDA calls
         * (FT_SPILL's allocations copied back) must pass through the driver hooks, not
         * enter the engine whose lock the stand-down holds. */
        ft_intercept_depth++;
        engine_to(PHASE_ANY, PHASE_STOOD_DOWN,
                  "the application's profiler took CUPTI before the plan (FlexTensor's own CUDA calls "
                  "would enter its trace, where torch.profiler asserts on the correlation ids they share)");
        ft_intercept_depth--;
    }
}

void handover_report(void)
{
    pthread_mutex_lock(&handover.lock);
    int done = handover.done, held = handover.held, phase = handover.phase;
    ft_shim_fn_t by = handover.by;
    uint64_t loads0 = handover.region_loads, back0 = handover.written_back, spill0 = handover.spill_moves;
    pthread_mutex_unlock(&handover.lock);
    if (!done)
        return;
    uint64_t loads, back, spill;
    own_copies(&loads, &back, &spill);
    FT_INFO("CUPTI: the application's profiler took it (%s) during %s%s; FlexTensor's own copies "
            "since, which its trace shows on FlexTensor's side streams: %llu region load(s), %llu "
            "write-back(s), %llu FT_SPILL move(s)", ft_shim_fn_name(by), engine_phase_name(phase),
            held ? ", from FlexTensor, which let go at once" : "", (unsigned long long)(loads - loads0),
            (unsigned long long)(back - back0), (unsigned long long)(spill - spill0));
}

/* For the verdict: ", the application's profiler had CUPTI from <phase> on", or "". */
const char *handover_note(char *buf, size_t len)
{
    pthread_mutex_lock(&handover.lock);
    if (handover.done)
        snprintf(buf, len, "; the application's profiler had CUPTI from %s on%s", engine_phase_name(handover.phase),
                 handover.phase != PHASE_DISCOVERY && handover.phase != PHASE_PROFILING ? ""
                 : cfgp->cupti_handover == FT_CUPTI_HANDOVER_STAND_DOWN ? " (before the plan: FlexTensor stood down)"
                                                                        : " (before the plan: FlexTensor carried on)");
    else if (len > 0)
        buf[0] = '\0';
    pthread_mutex_unlock(&handover.lock);
    return buf;
}

/* --- FT_CUPTI_AUDIT ------------------------------------------------------------------ */

/* The libcupti the application registers with: the object that holds the real
 * cuptiActivityRegisterCallbacks (torch's wheel may bring its own copy), opened once
 * with RTLD_NOLOAD and kept. */
static void *audit_lib;
static const void *audit_real;

static void open_audit_lib(void)
{
    Dl_info di;
    if (dladdr(audit_real, &di) != 0 && di.dli_fname != NULL)
        audit_lib = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

static void *audit_lookup(const char *name)
{
    return audit_lib != NULL ? ft_shim_real_dlsym(audit_lib, name) : NULL;
}

int ft_hook_cupti_register(cuptiActivityRegisterCallbacks_fn_t real, void *requested, void *completed)
{
    if (cfgp == NULL || !cfgp->cupti_audit || requested == NULL || completed == NULL)
        return real(requested, completed); /* libcupti refuses NULL callbacks itself */
    static pthread_once_t audit_once = PTHREAD_ONCE_INIT;
    audit_real = (const void *)real;
    pthread_once(&audit_once, open_audit_lib);
    void *req = requested, *done = completed;
    if (ft_cupti_audit_wrap(audit_lookup, requested, completed, &req, &done) != 0) {
        FT_WARN("FT_CUPTI_AUDIT: the application's libcupti lacks cuptiActivityGetNextRecord; its "
                "records are not audited");
        return real(requested, completed);
    }
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        FT_INFO("FT_CUPTI_AUDIT: the application's activity records are read before it gets them; "
                "correlation ids carried by two API records are reported");
    return real(req, done);
}

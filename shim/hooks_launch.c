/* hooks_launch.c - the interposed launch entry points, and the sampled clock of
 * FlexTensor's own host time per launch (and of the one-time work done inside some),
 * for the exit report.
 *
 * Owns: the per-phase sums (atomic, relaxed; a sampled launch reads the phase word once
 * for its bucket) and the thread's sample tick and launch_did_once (thread-local, so
 * that a launch writes no shared line). It calls engine.c and observe.c. */
#define _GNU_SOURCE
#include "shim/engine.h"

/* One-time work inside a launch -- a kernel's first sight (its name and parameter
 * layout from the driver) and a pointer-array peek (a stream sync and small copies) --
 * is timed whenever it happens and kept out of the sampled per-launch time
 * (report_launch_self), which is then what every launch pays. */
static _Atomic uint64_t once_ns[ONCE_COUNT], once_n[ONCE_COUNT];
/* This thread's launch did one-time work: its sample is not counted. Thread-local, as
 * the launch it belongs to. Cleared when a sampled launch starts. */
__thread int launch_did_once;

/* One-time work of `kind` that began at t0 ends now. */
void once_charge(int kind, uint64_t t0)
{
    atomic_fetch_add_explicit(&once_ns[kind], now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&once_n[kind], 1, memory_order_relaxed);
    launch_did_once = 1;
}

/* --- launches -------------------------------------------------------------------------- */

/* FlexTensor's own host time in a launch -- the hook less the real call -- sampled
 * at one launch in LAUNCH_SAMPLE on each thread (a clock read costs about as much as
 * the engine's whole work once the plan streams nothing), summed by phase for the exit
 * report: the per-launch cost measured in the process, beside the same launches,
 * rather than against another process on a host whose speed drifts. */
#define LAUNCH_SAMPLE 64
enum { PH_DISCOVERY, PH_PROFILING, PH_STREAMING, PH_IDLE, PH_OTHER, PH_COUNT };
static _Atomic uint64_t launch_self_ns[PH_COUNT], launch_samples[PH_COUNT];
static __thread unsigned launch_tick; /* thread-local: no shared counter line per launch */

typedef struct {
    int on;
    uint64_t self, t;
} launch_clock_t;

/* Every launch hook: the engine's entry and the launch observed before the real call
 * (FlexTensor's time, on a sampled launch, starts here and pauses at the return). */
static inline int launch_enter(launch_clock_t *c, uint64_t key, int is_stub, void **params, void **extra,
                               cudaStream_t stream)
{
    c->on = ++launch_tick % LAUNCH_SAMPLE == 0;
    if (c->on) {
        launch_did_once = 0;
        c->t = now_ns();
    }
    int held = engine_enter_launch();
    observe_launch(key, is_stub, params, extra, stream);
    if (c->on)
        c->self = now_ns() - c->t;
    return held;
}

/* A sampled launch's exit: its time added to the phase's. */
static void launch_leave_sampled(launch_clock_t *c, int held)
{
    c->t = now_ns();
    engine_leave(held);
    c->self += now_ns() - c->t;
    if (launch_did_once)
        return; /* timed apart (once_charge) */
    unsigned s = engine_state();
    int ph = state_phase(s) == PHASE_DISCOVERY ? PH_DISCOVERY
           : state_phase(s) == PHASE_PROFILING ? PH_PROFILING
           : state_phase(s) == PHASE_STREAMING ? PH_STREAMING
           : state_quiet(s)                    ? PH_IDLE
                                               : PH_OTHER;
    atomic_fetch_add_explicit(&launch_self_ns[ph], c->self, memory_order_relaxed);
    atomic_fetch_add_explicit(&launch_samples[ph], 1, memory_order_relaxed);
}

/* ... and the engine's exit after the real call. */
static inline void launch_leave(launch_clock_t *c, int held)
{
    if (c->on)
        launch_leave_sampled(c, held);
    else
        engine_leave(held);
}

/* ns in n parts, in us each (0 for none). */
static double mean_us(uint64_t ns, uint64_t n)
{
    return n > 0 ? (double)ns / 1e3 / (double)n : 0.0;
}

void report_launch_self(void)
{
    const char *const names[PH_COUNT] = { "discovery", "profiling", "streaming",
                                          engine_phase() == PHASE_STOOD_DOWN
                                              ? "after standing down" : "after a plan that streams nothing",
                                          "other" };
    char line[512];
    size_t len = 0;
    for (int ph = 0; ph < PH_COUNT; ph++) {
        uint64_t n = atomic_load(&launch_samples[ph]);
        if (n > 0)
            len += (size_t)snprintf(line + len, sizeof line - len, "%s%s %.2f us (%llu)", len ? ", " : "",
                                    names[ph], mean_us(atomic_load(&launch_self_ns[ph]), n),
                                    (unsigned long long)n);
        if (len >= sizeof line)
            break;
    }
    if (len > 0)
        FT_INFO("host time in FlexTensor per launch, the real call excluded (1 launch in %d sampled): %s",
                LAUNCH_SAMPLE, line);
    uint64_t nk = atomic_load(&once_n[ONCE_KERNEL]), np = atomic_load(&once_n[ONCE_PEEK]), nw = 0, ws = 0;
    if (disc != NULL)
        ft_disc_pass_work(disc, &nw, &ws);
    if (nk + np + nw > 0)
        FT_INFO("one-time work in launches, left out of the line above: %llu kernels' first launch "
                "%.1f us each; %llu pointer-array peeks %.1f us each (a stream sync and small copies); "
                "%llu weight snapshots of discovery's passes %.1f us each",
                (unsigned long long)nk, mean_us(atomic_load(&once_ns[ONCE_KERNEL]), nk),
                (unsigned long long)np, mean_us(atomic_load(&once_ns[ONCE_PEEK]), np),
                (unsigned long long)nw, mean_us(ws, nw));
}

cudaError_t ft_hook_rt_launch_handle(__cudaLaunchKernel_fn_t real, cudaKernel_t kernel, dim3 grid,
                                     dim3 block, void **args, size_t shmem, cudaStream_t stream)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)kernel, 0, args, NULL, stream);
    cudaError_t r_ = real(kernel, grid, block, args, shmem, stream);
    launch_leave(&clk, held);
    return r_;
}

cudaError_t ft_hook_rt_launch_stub(cudaLaunchKernel_fn_t real, const void *func, dim3 grid, dim3 block,
                                   void **args, size_t shmem, cudaStream_t stream)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)func, 1, args, NULL, stream);
    cudaError_t r_ = real(func, grid, block, args, shmem, stream);
    launch_leave(&clk, held);
    return r_;
}

cudaError_t ft_hook_rt_launch_ex(cudaLaunchKernelExC_fn_t real, const cudaLaunchConfig_t *config,
                                 const void *func, void **args)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)func, 1, args, NULL, config ? config->stream : NULL);
    cudaError_t r_ = real(config, func, args);
    launch_leave(&clk, held);
    return r_;
}

/* A graph launch: its kernels never pass through the launch wrappers, so what its
 * captured calls touch is brought in before it (capture.c), or the graph, cut into
 * segments, is launched a segment at a time with its units streamed between them (the
 * real function then launches the segments, not the graph). With FT_SPILL's moves, the
 * graph is waited for before anything can move its memory out again. */
/* Before a graph launch (*held: engine_enter's); 1 when it must be waited for. */
static int graph_launch_enter(uint64_t exec, cudaStream_t stream, int *held, graph_launch_t *how)
{
    *held = engine_enter();
    int relaxed = capture_relax();
    int wait = capture_graph_launch(exec, stream, *held, how);
    capture_restore(relaxed);
    return wait;
}

/* After it (ok: the real call succeeded). */
static void graph_launch_leave(int wait, int ok, cudaStream_t stream, int held)
{
    if (wait && ok)
        REAL(cudaStreamSynchronize)(stream);
    engine_leave(held);
}

static int rt_segment_launch(void *real, uint64_t exec, cudaStream_t stream)
{
    return (int)((cudaGraphLaunch_fn_t)real)((cudaGraphExec_t)(uintptr_t)exec, stream);
}

static int drv_segment_launch(void *real, uint64_t exec, cudaStream_t stream)
{
    return (int)((cuGraphLaunch_fn_t)real)((CUgraphExec)(uintptr_t)exec, (CUstream)stream);
}

cudaError_t ft_hook_rt_graph_launch(cudaGraphLaunch_fn_t real, cudaGraphExec_t exec, cudaStream_t stream)
{
    graph_launch_t how = { rt_segment_launch, (void *)real, 0, 0 };
    int held, wait = graph_launch_enter((uint64_t)(uintptr_t)exec, stream, &held, &how);
    cudaError_t r_ = how.launched ? (cudaError_t)how.rc : real(exec, stream);
    graph_launch_leave(wait, r_ == cudaSuccess, stream, held);
    return r_;
}

CUresult ft_hook_drv_graph_launch(cuGraphLaunch_fn_t real, CUgraphExec exec, CUstream stream)
{
    graph_launch_t how = { drv_segment_launch, (void *)real, 0, 0 };
    int held, wait = graph_launch_enter((uint64_t)(uintptr_t)exec, (cudaStream_t)stream, &held, &how);
    CUresult r_ = how.launched ? (CUresult)how.rc : real(exec, stream);
    graph_launch_leave(wait, r_ == CUDA_SUCCESS, (cudaStream_t)stream, held);
    return r_;
}

CUresult ft_hook_drv_launch(cuLaunchKernel_fn_t real, CUfunction f, unsigned int gx, unsigned int gy,
                            unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                            unsigned int shmem, CUstream stream, void **params, void **extra)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)f, 0, params, extra, (cudaStream_t)stream);
    CUresult r_ = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
    launch_leave(&clk, held);
    return r_;
}

CUresult ft_hook_drv_launch_ex(cuLaunchKernelEx_fn_t real, const CUlaunchConfig *config, CUfunction f,
                               void **params, void **extra)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)f, 0, params, extra,
                            config ? (cudaStream_t)config->hStream : NULL);
    CUresult r_ = real(config, f, params, extra);
    launch_leave(&clk, held);
    return r_;
}

CUresult ft_hook_drv_launch_coop(cuLaunchCooperativeKernel_fn_t real, CUfunction f, unsigned int gx,
                                 unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                                 unsigned int bz, unsigned int shmem, CUstream stream, void **params)
{
    launch_clock_t clk;
    int held = launch_enter(&clk, (uint64_t)(uintptr_t)f, 0, params, NULL, (cudaStream_t)stream);
    CUresult r_ = real(f, gx, gy, gz, bx, by, bz, shmem, stream, params);
    launch_leave(&clk, held);
    return r_;
}

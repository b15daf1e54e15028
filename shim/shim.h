/* shim.h - what the shim's files share: the generated function ids, the real entry
 * points, the hook prototypes, and the per-process state set up by init.c. */
#ifndef FT_SHIM_H
#define FT_SHIM_H

#include <stdatomic.h>
#include <stdint.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cupti/observer.h"

#define FT_EXPORT __attribute__((visibility("default")))
#define FT_EXPAND(...) __VA_ARGS__
/* ", params..." or nothing for an empty list: hooks take the real function first. */
#define FT_AFTER_REAL(...) __VA_OPT__(,) __VA_ARGS__

typedef enum {
#define FT_RT_FWD(ret, name, params, args) FT_FN_##name,
#define FT_RT(ret, name, params, args, hook) FT_FN_##name,
#define FT_DRV(ret, name, base, ptsz, params, args, hook) FT_FN_##name,
#define FT_CUPTI(name, params, args) FT_FN_##name,
#include "shim/shim.def"
#undef FT_RT_FWD
#undef FT_RT
#undef FT_DRV
#undef FT_CUPTI
    FT_FN_COUNT
} ft_shim_fn_t;

/* The function-pointer type of every entry point: name##_fn_t. */
#define FT_RT_FWD(ret, name, params, args) typedef ret(*name##_fn_t) params;
#define FT_RT(ret, name, params, args, hook) typedef ret(*name##_fn_t) params;
#define FT_DRV(ret, name, base, ptsz, params, args, hook) typedef ret(*name##_fn_t) params;
#define FT_CUPTI(name, params, args) typedef int (*name##_fn_t) params;
#include "shim/shim.def"
#undef FT_RT_FWD
#undef FT_RT
#undef FT_DRV
#undef FT_CUPTI

/* The hooks (shim/hooks_alloc.c, hooks_launch.c, hooks_copy.c): ft_hook_<hook>(real, args...), called by the wrappers
 * with the thread's depth raised, so that what they call reaches the real functions
 * unobserved. Entries sharing a hook have identical parameter lists. */
#define FT_RT(ret, name, params, args, hook) ret ft_hook_##hook(name##_fn_t real FT_AFTER_REAL params);
#define FT_DRV(ret, name, base, ptsz, params, args, hook) ret ft_hook_##hook(name##_fn_t real FT_AFTER_REAL params);
#include "shim/shim.def"
#undef FT_RT
#undef FT_DRV
#undef FT_RT_FWD
#undef FT_CUPTI
#undef FT_API

/* The hooks of FT_CUPTI_HOOKED entries (shim/cupti_audit.c): ft_hook_cupti_<hook>(real,
 * args...), after ft_hook_cupti_wanted; they call the real function themselves. */
#define FT_CUPTI_HOOKED(name, params, args, hook) int ft_hook_cupti_##hook(name##_fn_t real FT_AFTER_REAL params);
#include "shim/shim.def"
#undef FT_CUPTI_HOOKED
#undef FT_RT
#undef FT_DRV
#undef FT_RT_FWD
#undef FT_CUPTI
#undef FT_API

/* Nesting of driver hooks on this thread (wrappers.c raises it around a driver entry
 * point's hook, with ft_intercept_depth). A driver call FlexTensor's hook handles may
 * be made from inside a runtime call FlexTensor never saw: cuBLAS links its own copy of
 * the runtime, whose cudaLaunchKernel reaches the driver through our cuGetProcAddress.
 * FlexTensor's own runtime calls made there are then nested in that open runtime call,
 * under its correlation id, where a profiler (torch.profiler) expects one CPU-side
 * record per id; once the application's profiler holds CUPTI they are made through the
 * driver on FlexTensor's own-call thread instead (cuda.c, own_real). */
extern __thread int ft_driver_hook_depth;

/* The CUPTI wrappers' hook (shim/handover.c): code at `caller` (the wrapper's return
 * address) asks for CUPTI by the call `by`, whose real function is `real`; unless the
 * caller is libcupti itself, FlexTensor hands CUPTI over before the call goes on. */
void ft_hook_cupti_wanted(ft_shim_fn_t by, const void *caller, const void *real);
/* capture.c: the program was handed a way to change executable graphs that FlexTensor
 * does not watch (driver.c's cuGetProcAddress); graphs are no longer cut. */
void capture_cut_forbid(const char *why);

/* 1 once init.c found FT_ENABLED on and a valid configuration; read on every call,
 * written once before main (or at the first intercepted call). */
extern int ft_shim_active;

/* ft_intercept_depth (cupti/observer.h): nesting of FlexTensor's own work on this
 * thread. A cudart call that continues into the driver, or the shim's own CUDA calls,
 * must be seen (and acted on) once: a wrapper entered with depth > 0 forwards without
 * looking, and the CUPTI callback counts a driver call made at depth 0 as a bypass. */

/* Calls seen by an entry point, summed over the counter shards (wrappers.c). */
uint64_t ft_shim_calls(ft_shim_fn_t fn);

/* Name of an entry point, for reports. */
const char *ft_shim_fn_name(ft_shim_fn_t fn);

/* The real function behind entry point fn, resolved on first use, or NULL (said at
 * error level: a wrapper of the application's call has nothing to call). */
void *ft_shim_real(ft_shim_fn_t fn);
/* The same, saying nothing: FlexTensor's own calls have a stand-in (cuda.c). */
void *ft_shim_real_quiet(ft_shim_fn_t fn);

/* Makes sure init ran (a library's constructor may call CUDA before ours). */
void ft_shim_ensure_init(void);

/* Work deferred to the first CUDA call FlexTensor acts on (init.c): starting CUPTI. */
void ft_shim_first_call(void);
extern int ft_shim_called;

/* driver.c: the real dlsym, and a real driver entry point by base name (through the
 * driver's own cuGetProcAddress), or NULL. abi_version picks the ABI we call it with:
 * cuGetProcAddress returns the newest version not newer than it, and some functions
 * changed their arguments (cuCtxGetDevice_v2 takes a context since CUDA 13). */
void *ft_shim_real_dlsym(void *handle, const char *name);
/* name in the library `lib` when the process has it loaded (RTLD_LOCAL too, where
 * RTLD_NEXT does not look), or NULL. */
void *ft_shim_loaded_symbol(const char *lib, const char *name);
void *ft_shim_driver_proc(const char *base, int abi_version);
/* Records the real function for (base, ptsz) and returns the wrapper to hand out, or
 * NULL when FlexTensor does not wrap `base`. */
void *ft_shim_wrap_driver_proc(const char *base, int ptsz, void *real);
/* The same by exported symbol name (cuLaunchKernel, cuMemcpyHtoD_v2), for dlsym. */
void *ft_shim_wrap_driver_symbol(const char *symbol, void *real);
/* The same for a libcupti function (cuptiSubscribe ...), for dlsym; NULL when
 * FlexTensor does not wrap `symbol`. */
void *ft_shim_wrap_cupti_symbol(const char *symbol, void *real);
/* Overrides the real function behind fn (a pointer cuGetProcAddress handed out). */
void ft_shim_set_real(ft_shim_fn_t fn, void *real);

/* engine.c: set up the engine (discovery) for an active process; report.c: the exit
 * trace records, report and verdict. */
struct ft_config;
struct ft_trace_writer_t;
int ft_hooks_init(const struct ft_config *cfg);
/* Appends the engine's records (discovery) to the exit trace. */
void ft_hooks_trace(void *trace_writer);
/* The exit summary lines (FT_INFO). */
void ft_hooks_report(void);
/* What the engine lets go of at exit, whatever the log level: FT_SHM_ENABLED's shared
 * segment (the last process to leave it removes it). */
void ft_hooks_exit(void);
/* The exit report's last line, "verdict: offloaded|no plan|stood down: <why>" (FT_INFO):
 * what FlexTensor did for this process, and why when it did nothing. */
void ft_hooks_verdict(void);
/* NVTX ranges opened and closed on the calling thread (nvtx.c). */

#endif

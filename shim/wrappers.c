/* wrappers.c - the exported CUDA entry points, generated from shim.def.
 *
 * A wrapper counts the call, then either forwards (FlexTensor off, FT_RT_FWD, or a
 * nested call: depth > 0) or calls its hook with the depth raised. Wrappers hold no
 * policy; when FlexTensor is off they are plain forwards behind one predictable
 * branch (docs/architecture.md, "FT_ENABLED=0 changes nothing").
 */
#define _GNU_SOURCE
#include "shim/shim.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "core/log.h"

/* Call counters, sharded by thread: one counter line shared by every launching thread
 * would bounce between their caches on every launch. A thread picks its shard once;
 * relaxed atomics, as a counter needs no ordering. */
#define SHARDS 16
static struct {
    _Atomic uint64_t n[FT_FN_COUNT];
} __attribute__((aligned(64))) calls[SHARDS];
static _Atomic unsigned next_shard;
static __thread int my_shard = -1;

static inline void count_call(ft_shim_fn_t fn)
{
    if (my_shard < 0)
        my_shard = (int)(atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % SHARDS);
    atomic_fetch_add_explicit(&calls[my_shard].n[fn], 1, memory_order_relaxed);
}

uint64_t ft_shim_calls(ft_shim_fn_t fn)
{
    uint64_t sum = 0;
    for (int s = 0; s < SHARDS; s++)
        sum += atomic_load_explicit(&calls[s].n[fn], memory_order_relaxed);
    return sum;
}

static const char *const fn_names[FT_FN_COUNT] = {
#define FT_RT_FWD(ret, name, params, args) #name,
#define FT_RT(ret, name, params, args, hook) #name,
#define FT_DRV(ret, name, base, ptsz, params, args, hook) #name,
#define FT_CUPTI(name, params, args) #name,
#include "shim/shim.def"
#undef FT_RT_FWD
#undef FT_RT
#undef FT_DRV
#undef FT_CUPTI
};

/* Real entry points, filled on first use (or by driver.c when cuGetProcAddress hands
 * one out). A racing second resolution stores the same value: relaxed atomics. */
static _Atomic(void *) real_fn[FT_FN_COUNT];

const char *ft_shim_fn_name(ft_shim_fn_t fn)
{
    return fn < FT_FN_COUNT ? fn_names[fn] : "?";
}

void ft_shim_set_real(ft_shim_fn_t fn, void *real)
{
    if (real != NULL)
        atomic_store_explicit(&real_fn[fn], real, memory_order_relaxed);
}

static int is_cupti(ft_shim_fn_t fn)
{
    return strncmp(fn_names[fn], "cupti", 5) == 0;
}

static int is_driver(ft_shim_fn_t fn)
{
    return fn_names[fn][0] == 'c' && fn_names[fn][1] == 'u' && fn_names[fn][2] != 'd' && !is_cupti(fn);
}

/* Entry points FlexTensor's own calls looked up and found in no loaded object (a
 * runtime the process links statically, as JAX's XLA does, is never found; each own
 * call would look again). Only ft_shim_real_quiet reads it: the application's call of
 * an entry point a library loaded later exports still finds it. */
static _Atomic unsigned char real_missing[FT_FN_COUNT];

static void *real_lookup(ft_shim_fn_t fn)
{
    void *real = atomic_load_explicit(&real_fn[fn], memory_order_relaxed);
    if (real != NULL)
        return real;
    ft_shim_ensure_init();
    real = ft_shim_real_dlsym(RTLD_NEXT, fn_names[fn]);
    /* The application may have dlopened libcudart after us, with RTLD_LOCAL. */
    if (real == NULL && !is_driver(fn))
        real = ft_shim_loaded_symbol("libcudart.so.13", fn_names[fn]);
    /* The application dlopened libcupti RTLD_LOCAL (its dlsym, wrapped, would have
     * recorded the real function already); FlexTensor's observer did too. */
    if (real == NULL && is_cupti(fn) && (real = ft_shim_loaded_symbol("libcupti.so.13", fn_names[fn])) == NULL)
        real = ft_shim_loaded_symbol("libcupti.so", fn_names[fn]);
    if (real == NULL && is_driver(fn))
        real = ft_shim_loaded_symbol("libcuda.so.1", fn_names[fn]);
    ft_shim_set_real(fn, real);
    return real;
}

void *ft_shim_real(ft_shim_fn_t fn)
{
    void *real = real_lookup(fn);
    if (real == NULL)
        FT_LOG_CAPPED(FT_LOG_ERROR, 5, "cannot find the real %s", fn_names[fn]);
    return real;
}

void *ft_shim_real_quiet(ft_shim_fn_t fn)
{
    void *real = atomic_load_explicit(&real_fn[fn], memory_order_relaxed);
    if (real != NULL || atomic_load_explicit(&real_missing[fn], memory_order_relaxed))
        return real;
    real = real_lookup(fn);
    if (real == NULL)
        atomic_store_explicit(&real_missing[fn], 1, memory_order_relaxed);
    return real;
}

#define COUNT(name)                                                                     \
    do {                                                                                \
        if (ft_shim_active)                                                             \
            count_call(FT_FN_##name);                                                   \
    } while (0)

#define FT_RT_FWD(ret, name, params, args)                                              \
    FT_EXPORT ret name params                                                           \
    {                                                                                   \
        name##_fn_t real = (name##_fn_t)ft_shim_real(FT_FN_##name);                     \
        if (real == NULL)                                                               \
            return cudaErrorSharedObjectSymbolNotFound;                                 \
        COUNT(name);                                                                    \
        return real args;                                                               \
    }

int ft_shim_called;

static void first_call(void)
{
    ft_shim_first_call();
    __atomic_store_n(&ft_shim_called, 1, __ATOMIC_RELAXED);
}

__thread int ft_driver_hook_depth;

/* The body shared by hooked runtime and driver wrappers; `missing` is what the call
 * returns when the real function cannot be found; `drv` is 1 for a driver entry point,
 * whose hook runs with ft_driver_hook_depth raised too (shim.h says why). */
#define HOOKED(ret, name, args, hook, missing, drv)                                     \
    {                                                                                   \
        name##_fn_t real = (name##_fn_t)ft_shim_real(FT_FN_##name);                     \
        if (real == NULL)                                                               \
            return missing;                                                             \
        if (!ft_shim_active || ft_intercept_depth > 0)                                  \
            return real args;                                                           \
        COUNT(name);                                                                    \
        if (!__atomic_load_n(&ft_shim_called, __ATOMIC_RELAXED))                        \
            first_call();                                                               \
        ft_intercept_depth++;                                                           \
        ft_driver_hook_depth += (drv);                                                  \
        ret r = ft_hook_##hook(real FT_AFTER_REAL args);                                \
        ft_driver_hook_depth -= (drv);                                                  \
        ft_intercept_depth--;                                                           \
        return r;                                                                       \
    }

#define FT_RT(ret, name, params, args, hook)                                            \
    FT_EXPORT ret name params HOOKED(ret, name, args, hook, cudaErrorSharedObjectSymbolNotFound, 0)

#define FT_DRV(ret, name, base, ptsz, params, args, hook)                               \
    FT_EXPORT ret name params HOOKED(ret, name, args, hook, CUDA_ERROR_NOT_FOUND, 1)

/* CUPTI's CUPTI_ERROR_NOT_INITIALIZED, for a libcupti that cannot be found. */
#define FT_CUPTI_NOT_INITIALIZED 15

/* No depth raised and no first_call: the hook makes no CUDA call, and a process whose
 * only call so far is to CUPTI has nothing for FlexTensor to start. */
#define FT_CUPTI(name, params, args)                                                    \
    FT_EXPORT int name params                                                           \
    {                                                                                   \
        name##_fn_t real = (name##_fn_t)ft_shim_real(FT_FN_##name);                     \
        if (real == NULL)                                                               \
            return FT_CUPTI_NOT_INITIALIZED;                                            \
        if (ft_shim_active) {                                                           \
            COUNT(name);                                                                \
            ft_hook_cupti_wanted(FT_FN_##name, __builtin_return_address(0),             \
                                 (void *)real);                                         \
        }                                                                               \
        return real args;                                                               \
    }

/* The same, forwarding through its hook while FlexTensor is active. */
#define FT_CUPTI_HOOKED(name, params, args, hook)                                       \
    FT_EXPORT int name params                                                           \
    {                                                                                   \
        name##_fn_t real = (name##_fn_t)ft_shim_real(FT_FN_##name);                     \
        if (real == NULL)                                                               \
            return FT_CUPTI_NOT_INITIALIZED;                                            \
        if (!ft_shim_active)                                                            \
            return real args;                                                           \
        COUNT(name);                                                                    \
        ft_hook_cupti_wanted(FT_FN_##name, __builtin_return_address(0), (void *)real);  \
        return ft_hook_cupti_##hook(real FT_AFTER_REAL args);                           \
    }

#include "shim/shim.def"
#undef FT_RT_FWD
#undef FT_RT
#undef FT_DRV
#undef FT_CUPTI
#undef FT_CUPTI_HOOKED

/* The cuGetProcAddress table: base name and flavour -> our wrapper and its id. */
typedef struct {
    const char *base;
    int ptsz;
    ft_shim_fn_t fn;
    void *wrapper;
} proc_entry_t;

static const proc_entry_t procs[] = {
#define FT_DRV(ret, name, base, ptsz, params, args, hook) { #base, ptsz, FT_FN_##name, (void *)name },
#include "shim/shim.def"
#undef FT_DRV
#undef FT_RT
#undef FT_RT_FWD
#undef FT_CUPTI
#undef FT_API
};

/* The CUPTI wrappers, by name, for the wrapped dlsym. */
static const struct {
    ft_shim_fn_t fn;
    void *wrapper;
} cupti_fns[] = {
#define FT_CUPTI(name, params, args) { FT_FN_##name, (void *)name },
#include "shim/shim.def"
#undef FT_DRV
#undef FT_RT
#undef FT_RT_FWD
#undef FT_CUPTI
#undef FT_API
};

void *ft_shim_wrap_cupti_symbol(const char *symbol, void *real)
{
    for (size_t i = 0; i < sizeof cupti_fns / sizeof cupti_fns[0]; i++) {
        if (strcmp(fn_names[cupti_fns[i].fn], symbol) == 0) {
            if (real != cupti_fns[i].wrapper) /* RTLD_DEFAULT found our own export */
                ft_shim_set_real(cupti_fns[i].fn, real);
            return cupti_fns[i].wrapper;
        }
    }
    return NULL;
}

void *ft_shim_wrap_driver_proc(const char *base, int ptsz, void *real)
{
    const proc_entry_t *fallback = NULL;
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(procs[i].base, base) != 0)
            continue;
        if (procs[i].ptsz == ptsz) {
            if (real != procs[i].wrapper)
                ft_shim_set_real(procs[i].fn, real);
            return procs[i].wrapper;
        }
        fallback = &procs[i];
    }
    if (fallback != NULL) { /* a flavour we do not list: the default one's wrapper */
        if (real != fallback->wrapper)
            ft_shim_set_real(fallback->fn, real);
        return fallback->wrapper;
    }
    return NULL;
}

/* By exported symbol name (for the wrapped dlsym). */
void *ft_shim_wrap_driver_symbol(const char *symbol, void *real)
{
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        if (strcmp(fn_names[procs[i].fn], symbol) == 0) {
            if (real != procs[i].wrapper) /* RTLD_DEFAULT found our own export */
                ft_shim_set_real(procs[i].fn, real);
            return procs[i].wrapper;
        }
    }
    return NULL;
}

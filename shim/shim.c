/* shim.c - the interposed CUDA runtime entry points.
 *
 * Generated from shim.def: each wrapper counts the call and forwards to the real
 * function. Wrappers hold no policy; when FlexTensor is off they are plain forwards
 * behind one predictable branch (DESIGN.md invariant 4).
 */
#include "shim/shim.h"

#include <stddef.h>

#define FT_EXPORT __attribute__((visibility("default")))

_Atomic uint64_t ft_shim_calls[FT_FN_COUNT];

static const char *const fn_names[FT_FN_COUNT] = {
#define FT_CUDART(ret, name, params, args) #name,
#include "shim/shim.def"
#undef FT_CUDART
};

const char *ft_shim_fn_name(ft_shim_fn_t fn)
{
    return fn < FT_FN_COUNT ? fn_names[fn] : "?";
}

/* The real entry points, resolved on first use: the wrapper may run before our
 * constructor (another library's constructor), so no ordering is assumed. A racing
 * second resolution stores the same value, hence relaxed atomics suffice. */
#define FT_CUDART(ret, name, params, args)                                         \
    typedef ret(*name##_fn_t) params;                                              \
    static _Atomic(name##_fn_t) real_##name;                                       \
    FT_EXPORT ret name params                                                      \
    {                                                                              \
        name##_fn_t real = atomic_load_explicit(&real_##name, memory_order_relaxed); \
        if (real == NULL) {                                                        \
            ft_shim_ensure_init();                                                 \
            real = (name##_fn_t)ft_shim_resolve(#name);                            \
            if (real == NULL)                                                      \
                return cudaErrorSharedObjectSymbolNotFound;                        \
            atomic_store_explicit(&real_##name, real, memory_order_relaxed);       \
        }                                                                          \
        if (ft_shim_active)                                                        \
            atomic_fetch_add_explicit(&ft_shim_calls[FT_FN_##name], 1,             \
                                      memory_order_relaxed);                       \
        return real args;                                                          \
    }
#include "shim/shim.def"
#undef FT_CUDART

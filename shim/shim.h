/* shim.h - what the shim's files share: the generated function ids, the real entry
 * points, and the per-process state set up by init.c. */
#ifndef FT_SHIM_H
#define FT_SHIM_H

#include <stdatomic.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

typedef enum {
#define FT_CUDART(ret, name, params, args) FT_FN_##name,
#include "shim/shim.def"
#undef FT_CUDART
    FT_FN_COUNT
} ft_shim_fn_t;

/* 1 once init.c found FT_ENABLED on and a valid configuration; read on every call,
 * written once before main (or at the first intercepted call). */
extern int ft_shim_active;

/* Calls seen per entry point; relaxed atomics: counters only, no ordering needed. */
extern _Atomic uint64_t ft_shim_calls[FT_FN_COUNT];

/* Name of an entry point, for reports. */
const char *ft_shim_fn_name(ft_shim_fn_t fn);

/* Resolves the next definition of `name` (libcudart's), or NULL. */
void *ft_shim_resolve(const char *name);

/* Makes sure init ran (a library's constructor may call CUDA before ours). */
void ft_shim_ensure_init(void);

#endif

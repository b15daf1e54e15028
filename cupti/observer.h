/* observer.h - CUPTI as the observer: it confirms that every launch and copy the
 * driver executed was seen by the interposed functions, whatever path it took, and
 * (during profiling) times the kernels the shim tags, from activity records.
 *
 * Owns: the CUPTI subscription (one per process before CUDA 13.3: when another
 * subscriber -- the PyTorch profiler, Nsight -- holds it, we say so once and carry on
 * with the interposed view; when the application asks for CUPTI while we hold it, we
 * hand it over, ft_cupti_hand_over), and the thread-local depth of FlexTensor's interposed
 * calls, which the callback reads to tell seen calls from bypasses.
 *
 * The callback never calls CUDA (CUPTI forbids it): atomics and a name copy only.
 * libcupti is dlopened, so a process without it runs unchanged.
 */
#ifndef FT_CUPTI_OBSERVER_H
#define FT_CUPTI_OBSERVER_H

#include <stddef.h>
#include <stdint.h>

/* Nesting of FlexTensor's interposed calls on this thread (> 0 while a hook and the
 * real function it forwards to run). Written by shim/ wrappers, read by the callback. */
extern __thread int ft_intercept_depth;

typedef enum {
    FT_CUPTI_STATUS_OFF = 0,       /* not asked for, or stopped */
    FT_CUPTI_STATUS_ACTIVE,        /* subscribed */
    FT_CUPTI_STATUS_MISSING,       /* libcupti.so could not be loaded */
    FT_CUPTI_STATUS_HELD,          /* another subscriber holds CUPTI */
    FT_CUPTI_STATUS_FAILED,        /* any other CUPTI error */
    FT_CUPTI_STATUS_HANDED,        /* handed to the application's profiler (ft_cupti_hand_over) */
} ft_cupti_status_t;

/* Looks up `name` in the library `handle` (dlopen's), as dlsym does; NULL if absent. */
typedef void *(*ft_cupti_lookup_fn)(void *handle, const char *name);

/* Hands in how libcupti's functions are found; before ft_cupti_start. The shim passes
 * its real dlsym: inside libflextensor.so a plain dlsym call binds to the shim's
 * exported dlsym, a call back up into the shim, and this folder calls nothing of the
 * shim (tests/scenario/exports.sh checks the objects). */
void ft_cupti_init(ft_cupti_lookup_fn lookup);

/* Subscribes and enables the launch, copy and set callbacks of the driver API.
 * Returns the status; why receives a one-line explanation when not ACTIVE (FAILED
 * before ft_cupti_init). */
ft_cupti_status_t ft_cupti_start(char *why, size_t len);

/* Stops observing, so that a profiler started later can subscribe: the next watched
 * driver call detaches CUPTI at its exit (cuptiFinalize; unsubscribes where the library
 * lacks it). Idempotent. */
void ft_cupti_stop(void);
/* How many times CUPTI was detached (cuptiFinalize succeeded). */
uint64_t ft_cupti_detached(void);
/* The time its detaches took (ns, summed): cuptiFinalize flushes and tears down. */
uint64_t ft_cupti_detach_ns(void);

typedef struct {
    ft_cupti_status_t status;
    uint64_t launches, copies, sets;     /* driver calls CUPTI reported */
    uint64_t unseen_launches, unseen_copies, unseen_sets; /* of those, not interposed */
    char first_unseen[160];              /* "cuLaunchKernel: <kernel name>" */
} ft_cupti_stats_t;

void ft_cupti_get_stats(ft_cupti_stats_t *out);

/* Kernel timing from the activity API, for profiling. While on, the kernels launched
 * between ft_cupti_tag_push(tag) and ft_cupti_tag_pop() on a thread are reported with
 * that tag (an external correlation id) and their GPU start and end (ns). */
typedef struct {
    uint64_t tag;
    uint64_t start, end;
} ft_cupti_kernel_t;

/* 0 when kernel timing is on (CUPTI subscribed by ft_cupti_start, activity enabled). */
int ft_cupti_timing_start(void);
/* Flushes the activity buffers and hands over the tagged kernels seen since the last
 * call (at most max; the rest dropped). Not from inside a CUDA call. */
size_t ft_cupti_timing_collect(ft_cupti_kernel_t *out, size_t max);
void ft_cupti_timing_stop(void);
/* Around a launch (cheap; nothing when timing is off). push returns 1 when it pushed
 * the tag; pop only after a push that did. */
int ft_cupti_tag_push(uint64_t tag);
void ft_cupti_tag_pop(void);

/* The application (or a tool: torch.profiler's Kineto, Nsight) asks for CUPTI: the
 * user's profiler wins. Stops kernel timing (our activity kinds disabled, their records
 * flushed and dropped) and unsubscribes now, so that the application's cuptiSubscribe
 * that follows succeeds; ft_cupti_start refuses from then on (FT_CUPTI_STATUS_HANDED),
 * even after the application unsubscribes. 1 when FlexTensor held CUPTI and let go,
 * 0 when it held nothing, -1 when handed over before (nothing done). Not from inside a
 * CUPTI callback. */
int ft_cupti_hand_over(void);
/* 1 once ft_cupti_hand_over ran. */
int ft_cupti_handed_over(void);

#endif

/* control.h - the runtime control API's decisions (ft_set_gpu_mem_limit,
 * ft_request_replan, ft_release, ft_resume; docs/control.md): what each request does
 * to the requests waiting, what a pass boundary does with them, and which units move
 * when one plan gives way to another.
 *
 * Owns: nothing but the request state it is handed (ft_ctl_t). The shim
 * (shim/control.c) keeps one under res.lock, asks, and carries the answers out: the
 * new plan, the loads and evictions, the timing of re-profiled passes, the messages.
 * No lock, no CUDA.
 */
#ifndef FT_CONTROL_H
#define FT_CONTROL_H

#include <stdint.h>

/* The requests. Start it zeroed. */
typedef struct {
    int released;       /* ft_release, and no ft_resume since */
    int limit_waiting;  /* a new budget waits for the next pass boundary (or the resume) */
    uint64_t limit;     /* its FT_GPU_MEM_LIMIT in bytes (0: none) */
    int replan_waiting; /* a re-profile waits for the next pass boundary */
    int profiling;      /* passes are being re-profiled */
} ft_ctl_t;

/* What a pass boundary does. */
typedef enum {
    FT_CTL_NONE,          /* nothing */
    FT_CTL_APPLY,         /* plan again for c->limit and move the units (limit_waiting cleared) */
    FT_CTL_PROFILE_START, /* the re-profile's first pass begins here */
    FT_CTL_PROFILE_PASS,  /* a re-profiled pass ended here: time it; the caller ends the
                           * re-profile with ft_ctl_profiled once it has enough */
} ft_ctl_step_t;

/* The boundary of a pass. capture: a stream capture is under way, in which nothing may
 * synchronise: nothing is done, everything waits for a later boundary. Released, the
 * requests wait for ft_resume. A re-profile under way goes on first (a limit set
 * meanwhile is planned for at its end); one asked for starts before a limit waiting is
 * applied (the limit then joins the plan made from the new times). */
ft_ctl_step_t ft_ctl_boundary(ft_ctl_t *c, int capture);

/* The re-profile is over (timed, or given up): 1 when a limit waits, to be planned for
 * with the new times (limit_waiting cleared), else 0. */
int ft_ctl_profiled(ft_ctl_t *c);

/* A new limit is accepted (the shim has checked that a plan fits it): it waits for the
 * next pass boundary, replacing one waiting already. */
void ft_ctl_limit(ft_ctl_t *c, uint64_t limit);

/* A re-profile is asked for: 0 when it will start at the next pass boundary (or after
 * the resume), 1 when one is under way already (the request joins it). */
int ft_ctl_replan(ft_ctl_t *c);

/* ft_release: 0, or -1 when released already. A re-profile under way is given up (the
 * passes of a released process say nothing of its plan) and starts again after the
 * resume. */
int ft_ctl_release(ft_ctl_t *c);

/* ft_resume: -1 when not released; else 1 when a limit waits (the resume plans for it,
 * limit_waiting cleared), 0 when the plan in force before the release comes back. */
int ft_ctl_resume(ft_ctl_t *c);

/* The units that move when the plan in force, whose units on the device for good are
 * those with was[i] != 0, gives way to one that keeps those with now[i] != 0 (n
 * each): into demote[] those that leave the device to stream (was, not now), into
 * promote[] those that stay on the device from now on (now, not was), each in index
 * order; their counts in *n_demote and *n_promote. The shim makes every demotion
 * before any promotion, so that the memory they give back is there for the others. */
void ft_ctl_moves(const int *was, const int *now, int n, int *demote, int *n_demote, int *promote,
                  int *n_promote);

#endif

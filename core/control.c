/* control.c - the runtime control API's decisions (see control.h for what it decides
 * and what the shim keeps). */
#include "core/control.h"

ft_ctl_step_t ft_ctl_boundary(ft_ctl_t *c, int capture)
{
    if (capture || c->released)
        return FT_CTL_NONE;
    if (c->profiling)
        return FT_CTL_PROFILE_PASS;
    if (c->replan_waiting) {
        c->replan_waiting = 0;
        c->profiling = 1;
        return FT_CTL_PROFILE_START;
    }
    if (c->limit_waiting) {
        c->limit_waiting = 0;
        return FT_CTL_APPLY;
    }
    return FT_CTL_NONE;
}

int ft_ctl_profiled(ft_ctl_t *c)
{
    c->profiling = 0;
    int limit = c->limit_waiting;
    c->limit_waiting = 0;
    return limit;
}

void ft_ctl_limit(ft_ctl_t *c, uint64_t limit)
{
    c->limit = limit;
    c->limit_waiting = 1;
}

int ft_ctl_replan(ft_ctl_t *c)
{
    if (c->profiling)
        return 1;
    c->replan_waiting = 1;
    return 0;
}

int ft_ctl_release(ft_ctl_t *c)
{
    if (c->released)
        return -1;
    c->released = 1;
    if (c->profiling) {
        c->profiling = 0;
        c->replan_waiting = 1;
    }
    return 0;
}

int ft_ctl_resume(ft_ctl_t *c)
{
    if (!c->released)
        return -1;
    c->released = 0;
    int limit = c->limit_waiting;
    c->limit_waiting = 0;
    return limit;
}

void ft_ctl_moves(const int *was, const int *now, int n, int *demote, int *n_demote, int *promote,
                  int *n_promote)
{
    *n_demote = *n_promote = 0;
    for (int i = 0; i < n; i++) {
        if (was[i] && !now[i])
            demote[(*n_demote)++] = i;
        else if (!was[i] && now[i])
            promote[(*n_promote)++] = i;
    }
}

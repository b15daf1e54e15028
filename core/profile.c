/* profile.c - see profile.h. */
#include "core/profile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ft_prof {
    pthread_mutex_t lock;     /* suspend/resume come from any application thread */
    size_t n_units;
    int wanted, passes;
    double *samples;          /* passes x n_units, row per pass */
    int suspended;
    unsigned epoch;
};

ft_prof_t *ft_prof_new(size_t n_units, int passes_wanted)
{
    ft_prof_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    /* profiling_iters=0 behaves as 1, as in the Python library: the plan always sees at
     * least one profiled pass. */
    p->wanted = passes_wanted < 1 ? 1 : passes_wanted;
    p->n_units = n_units;
    p->samples = calloc((size_t)p->wanted * (n_units ? n_units : 1), sizeof *p->samples);
    if (p->samples == NULL) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    return p;
}

void ft_prof_free(ft_prof_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_destroy(&p->lock);
    free(p->samples);
    free(p);
}

int ft_prof_add_pass(ft_prof_t *p, const double *us)
{
    pthread_mutex_lock(&p->lock);
    if (!p->suspended && p->passes < p->wanted) {
        memcpy(p->samples + (size_t)p->passes * p->n_units, us, p->n_units * sizeof *us);
        p->passes++;
    }
    int n = p->passes;
    pthread_mutex_unlock(&p->lock);
    return n;
}

int ft_prof_passes(const ft_prof_t *p) { return p->passes; }
int ft_prof_done(const ft_prof_t *p) { return p->passes >= p->wanted; }

void ft_prof_suspend(ft_prof_t *p)
{
    pthread_mutex_lock(&p->lock);
    p->suspended++;
    p->epoch++;
    pthread_mutex_unlock(&p->lock);
}

int ft_prof_resume(ft_prof_t *p)
{
    pthread_mutex_lock(&p->lock);
    int rc = p->suspended > 0 ? (p->suspended--, 0) : -1;
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int ft_prof_suspended(const ft_prof_t *p) { return p->suspended > 0; }
unsigned ft_prof_epoch(const ft_prof_t *p) { return p->epoch; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

ft_prof_stat_t ft_prof_stat(const ft_prof_t *p, size_t unit)
{
    ft_prof_stat_t s = { 0, 0, 0, 0 };
    if (unit >= p->n_units || p->passes == 0)
        return s;
    double v[p->passes];
    for (int i = 0; i < p->passes; i++)
        v[i] = p->samples[(size_t)i * p->n_units + unit];
    qsort(v, (size_t)p->passes, sizeof v[0], cmp_double);
    s.n = p->passes;
    s.min = v[0];
    s.max = v[p->passes - 1];
    s.median = p->passes % 2 ? v[p->passes / 2] : (v[p->passes / 2 - 1] + v[p->passes / 2]) / 2;
    return s;
}

int ft_prof_quality(const ft_prof_t *p, const char *const *names, double spread_limit, char *buf,
                    size_t len)
{
    int findings = 0;
    size_t o = 0;
#define LINE(...)                                                                        \
    do {                                                                                 \
        findings++;                                                                      \
        if (o < len) {                                                                   \
            int w_ = snprintf(buf + o, len - o, __VA_ARGS__);                            \
            o += w_ > 0 ? (size_t)w_ : 0;                                                \
        }                                                                                \
    } while (0)
    if (len > 0)
        buf[0] = '\0';
    if (p->passes < 2)
        LINE("only %d profiled pass%s: timings are a single sample (FT_PROFILING_ITERS >= 3 "
             "is better)\n", p->passes, p->passes == 1 ? "" : "es");
    for (size_t u = 0; u < p->n_units; u++) {
        ft_prof_stat_t s = ft_prof_stat(p, u);
        if (s.n == 0 || s.max <= 0) {
            LINE("%s: no time measured\n", names ? names[u] : "?");
            continue;
        }
        double spread = s.median > 0 ? (s.max - s.min) / s.median : 0;
        if (spread > spread_limit)
            LINE("%s: spread %.0f%% (min %.1f us, median %.1f us, max %.1f us)\n",
                 names ? names[u] : "?", spread * 100, s.min, s.median, s.max);
    }
#undef LINE
    return findings;
}

int ft_prof_quiet_start(ft_prof_quiet_t *q, uint64_t lane)
{
    for (int i = 0; i < q->n; i++)
        if (q->lane[i].lane == lane)
            return ++q->lane[i].starts >= FT_PROF_QUIET_STARTS;
    if (q->n == FT_PROF_QUIET_LANES)
        return 0;
    q->lane[q->n].lane = lane;
    q->lane[q->n].starts = 1;
    return q->lane[q->n++].starts >= FT_PROF_QUIET_STARTS;
}

void ft_prof_quiet_reset(ft_prof_quiet_t *q)
{
    q->n = 0;
}

/* profile.h - the profiling phase's bookkeeping: per-unit compute-time samples over
 * FT_PROFILING_ITERS passes, their statistics, the quality report, and suspension.
 *
 * Owns: the samples and the suspension count. The shim measures (CUDA events around
 * each unit's kernel range) and feeds one pass at a time; nothing here touches CUDA.
 */
#ifndef FT_PROFILE_H
#define FT_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/trace.h"

typedef struct ft_prof ft_prof_t;

ft_prof_t *ft_prof_new(size_t n_units, int passes_wanted);
void ft_prof_free(ft_prof_t *p);

/* One complete pass: us[i] is unit i's compute time. Ignored while suspended. Returns
 * the number of passes recorded so far. */
int ft_prof_add_pass(ft_prof_t *p, const double *us);
int ft_prof_passes(const ft_prof_t *p);
int ft_prof_done(const ft_prof_t *p);

/* Reference-counted suspension (ft_profiling_suspend / ft_profiling_resume): passes
 * that end while suspended, or that were under way when a suspension began, are not
 * recorded. Resume returns -1 when nothing was suspended. */
void ft_prof_suspend(ft_prof_t *p);
int ft_prof_resume(ft_prof_t *p);
int ft_prof_suspended(const ft_prof_t *p);
/* Bumped by every suspend: a pass that saw it change is not recorded. */
unsigned ft_prof_epoch(const ft_prof_t *p);

/* Which application thread (lane) is timed. One lane's pass is timed at a time; the
 * timed lane is taken to have gone quiet (its thread finished, or stopped) when one
 * other lane began FT_PROF_QUIET_STARTS passes during the timed pass. Counted per lane:
 * counted together, three threads' forwards reached three while the timed lane's own
 * pass was under way (each other thread starts a pass per forward), and every pass was
 * abandoned. Lanes past the table's size are not counted: they never take over. */
#define FT_PROF_QUIET_STARTS 3
#define FT_PROF_QUIET_LANES 8
typedef struct {
    struct {
        uint64_t lane;
        int starts;
    } lane[FT_PROF_QUIET_LANES];
    int n;
} ft_prof_quiet_t;

/* Counts a pass start of `lane`, another than the timed one; 1 when the timed lane is
 * taken to have gone quiet. */
int ft_prof_quiet_start(ft_prof_quiet_t *q, uint64_t lane);
/* A new timed pass: the counts start again. */
void ft_prof_quiet_reset(ft_prof_quiet_t *q);

typedef struct {
    int n;
    double min, median, max;
} ft_prof_stat_t;

ft_prof_stat_t ft_prof_stat(const ft_prof_t *p, size_t unit);

/* The quality report, one line per finding ("too few passes", "unit.3: spread 42%
 * (min 10.0 us, max 14.2 us)", "unit.5: no time measured"), into buf. Returns the
 * number of findings. spread_limit: (max - min) / median above which a unit is
 * reported. */
int ft_prof_quality(const ft_prof_t *p, const char *const *names, double spread_limit, char *buf,
                    size_t len);

#endif

/* ft_timeline.h - ft-trace's timeline renderings of the TIMELINE record: the Chrome
 * trace-event format (Perfetto, chrome://tracing) and a plain SVG drawing, one lane
 * per stream. ft_trace.c parses and checks the record; these only draw it. */
#ifndef FT_TIMELINE_H
#define FT_TIMELINE_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    uint32_t kind, lane, unit;  /* FT_TIMING_* (core/trace.h), 0 program / 1 side, unit */
    uint64_t wait_ns, start_ns, end_ns;
} ftl_event_t;

typedef struct {
    uint64_t pass, start_ns, step_ns, stall_ns;
    uint32_t truncated, n;
    const ftl_event_t *ev;
} ftl_pass_t;

typedef struct {
    const char *s;              /* not NUL-terminated: a name from the trace */
    uint32_t n;
} ftl_name_t;

/* Each writes the whole document to f; 0, or -1 when writing failed. Unit indices at
 * or past n_names are drawn as "?". */
int ftl_write_chrome(FILE *f, const ftl_pass_t *p, uint32_t n, const ftl_name_t *names, uint32_t n_names);
int ftl_write_svg(FILE *f, const ftl_pass_t *p, uint32_t n, const ftl_name_t *names, uint32_t n_names);

#endif

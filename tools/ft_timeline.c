/* ft_timeline.c - the TIMELINE record drawn: ft-trace --chrome (the Chrome trace-event
 * format, JSON, for Perfetto and chrome://tracing) and ft-trace --timeline (plain SVG,
 * no script, for any browser).
 *
 * Owns nothing but the two renderings. Lanes: the program's stream (each unit's
 * compute, the stall before it, the copies of misses) and the side stream (copies
 * ahead of use, unloads); pass boundaries across both. Names come from the traced
 * program (any bytes): escaped for JSON and XML, bytes that are not printable ASCII
 * replaced, so that the output always parses. */
#include "tools/ft_timeline.h"

#include <inttypes.h>
#include <string.h>

#include "core/trace.h"

static const char *const kind_names[FT_TIMING_KINDS] = { "compute", "copy in", "miss", "unload" };
static const char *const lane_names[2] = { "program stream", "side stream" };

/* A unit's name, for either format: printable ASCII kept but for the characters JSON
 * and XML give meaning to; anything else becomes '?'. */
static void put_name(FILE *f, const ftl_name_t *names, uint32_t n_names, uint32_t unit)
{
    if (unit >= n_names) {
        fputc('?', f);
        return;
    }
    for (uint32_t i = 0; i < names[unit].n; i++) {
        unsigned char c = (unsigned char)names[unit].s[i];
        fputc(c >= 0x20 && c < 0x7f && !strchr("\"\\<>&'", c) ? c : '?', f);
    }
}

int ftl_write_chrome(FILE *f, const ftl_pass_t *p, uint32_t n, const ftl_name_t *names, uint32_t n_names)
{
    /* ts and dur in us; pid 1; tid 1 the program's stream, 2 the side stream. */
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
    fputs("{\"ph\": \"M\", \"pid\": 1, \"name\": \"process_name\", \"args\": {\"name\": \"FlexTensor offload\"}}", f);
    for (int l = 0; l < 2; l++)
        fprintf(f, ",\n{\"ph\": \"M\", \"pid\": 1, \"tid\": %d, \"name\": \"thread_name\", \"args\": {\"name\": \"%s\"}}",
                l + 1, lane_names[l]);
    for (uint32_t i = 0; i < n; i++) {
        fprintf(f, ",\n{\"ph\": \"i\", \"s\": \"g\", \"pid\": 1, \"tid\": 1, \"name\": \"pass %" PRIu64
                "\", \"cat\": \"pass\", \"ts\": %.3f, \"args\": {\"step_us\": %.3f, \"stall_us\": %.3f}}",
                p[i].pass, (double)p[i].start_ns / 1e3, (double)p[i].step_ns / 1e3, (double)p[i].stall_ns / 1e3);
        for (uint32_t k = 0; k < p[i].n; k++) {
            const ftl_event_t *e = &p[i].ev[k];
            if (e->kind == FT_TIMING_COMPUTE && e->start_ns > e->wait_ns) {
                fprintf(f, ",\n{\"ph\": \"X\", \"pid\": 1, \"tid\": 1, \"cat\": \"stall\", \"name\": \"stall ");
                put_name(f, names, n_names, e->unit);
                fprintf(f, "\", \"ts\": %.3f, \"dur\": %.3f, \"cname\": \"yellow\"}", (double)e->wait_ns / 1e3,
                        (double)(e->start_ns - e->wait_ns) / 1e3);
            }
            fprintf(f, ",\n{\"ph\": \"X\", \"pid\": 1, \"tid\": %u, \"cat\": \"%s\", \"name\": \"", e->lane + 1,
                    kind_names[e->kind]);
            put_name(f, names, n_names, e->unit);
            fprintf(f, "\", \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"pass\": %" PRIu64 "}%s}",
                    (double)e->start_ns / 1e3, (double)(e->end_ns - e->start_ns) / 1e3, p[i].pass,
                    e->kind == FT_TIMING_MISS ? ", \"cname\": \"terrible\"" : "");
        }
    }
    fputs("\n]}\n", f);
    return ferror(f) ? -1 : 0;
}

/* --- SVG ------------------------------------------------------------------------------ */

enum { SVG_W = 1200, LEFT = 130, RIGHT = 20, TOP = 40, LANE_H = 36, LANE_GAP = 14 };

static const char *const kind_fill[FT_TIMING_KINDS] = { "#4682b4", "#2e8b57", "red", "#999999" };

int ftl_write_svg(FILE *f, const ftl_pass_t *p, uint32_t n, const ftl_name_t *names, uint32_t n_names)
{
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (p[i].start_ns < t0)
            t0 = p[i].start_ns;
        if (p[i].start_ns + p[i].step_ns > t1)
            t1 = p[i].start_ns + p[i].step_ns;
        for (uint32_t k = 0; k < p[i].n; k++) {
            const ftl_event_t *e = &p[i].ev[k];
            uint64_t a = e->kind == FT_TIMING_COMPUTE ? e->wait_ns : e->start_ns;
            if (a < t0)
                t0 = a;
            if (e->end_ns > t1)
                t1 = e->end_ns;
        }
    }
    if (t0 == UINT64_MAX)
        t0 = t1 = 0;
    double span = t1 > t0 ? (double)(t1 - t0) : 1.0, w = SVG_W - LEFT - RIGHT;
#define X(ns) (LEFT + ((double)(ns) - (double)t0) / span * w)
    int h = TOP + 2 * (LANE_H + LANE_GAP) + 50;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<title>FlexTensor offload timeline: %u pass(es), %.3f ms</title>\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            SVG_W, h, SVG_W, h, n, span / 1e6, SVG_W, h);
    for (int l = 0; l < 2; l++) {
        int y = TOP + l * (LANE_H + LANE_GAP);
        fprintf(f, "<text x=\"8\" y=\"%d\">%s</text>\n<rect class=\"lane\" x=\"%d\" y=\"%d\" width=\"%.1f\" "
                "height=\"%d\" fill=\"#f4f4f4\"/>\n", y + LANE_H / 2 + 4, lane_names[l], LEFT, y, w, LANE_H);
    }
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < p[i].n; k++) {
            const ftl_event_t *e = &p[i].ev[k];
            int y = TOP + (int)e->lane * (LANE_H + LANE_GAP) + 3;
            if (e->kind == FT_TIMING_COMPUTE && e->start_ns > e->wait_ns) {
                fprintf(f, "<rect class=\"stall\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
                        "fill=\"orange\"><title>stall before ", X(e->wait_ns), y, X(e->start_ns) - X(e->wait_ns),
                        LANE_H - 6);
                put_name(f, names, n_names, e->unit);
                fprintf(f, ": %.1f us</title></rect>\n", (double)(e->start_ns - e->wait_ns) / 1e3);
            }
            double x = X(e->start_ns), wd = X(e->end_ns) - x;
            fprintf(f, "<rect class=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
                    "stroke=\"white\" stroke-width=\"0.5\"><title>", e->kind == FT_TIMING_COPY ? "copy"
                    : kind_names[e->kind], x, y, wd > 0.5 ? wd : 0.5, LANE_H - 6, kind_fill[e->kind]);
            fprintf(f, "%s ", kind_names[e->kind]);
            put_name(f, names, n_names, e->unit);
            fprintf(f, ", pass %" PRIu64 ": %.1f us</title></rect>\n", p[i].pass,
                    (double)(e->end_ns - e->start_ns) / 1e3);
        }
        double x = X(p[i].start_ns);
        fprintf(f, "<line class=\"pass\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"black\" "
                "stroke-dasharray=\"4 3\"/>\n<text x=\"%.2f\" y=\"%d\">pass %" PRIu64 "</text>\n", x, TOP - 14, x,
                TOP + 2 * (LANE_H + LANE_GAP), x + 3, TOP - 4, p[i].pass);
    }
    int ly = TOP + 2 * (LANE_H + LANE_GAP) + 24, lx = LEFT;
    static const char *const legend[] = { "compute", "copy in (hit)", "miss (copy on demand)", "unload" };
    for (int k = 0; k < FT_TIMING_KINDS; k++, lx += 170)
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" "
                "y=\"%d\">%s</text>\n", lx, ly - 10, kind_fill[k], lx + 16, ly, legend[k]);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"orange\"/><text x=\"%d\" y=\"%d\">"
            "stall</text>\n", lx, ly - 10, lx + 16, ly);
    fputs("</svg>\n", f);
#undef X
    return ferror(f) ? -1 : 0;
}

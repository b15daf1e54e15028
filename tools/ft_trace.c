/* ft-trace - print what a FlexTensor trace file holds.
 *
 *   ft-trace [--json] FILE
 *
 * The file is validated as a whole first (core/trace.c): a truncated or corrupt file
 * gets a one-line reason and exit status 1, never a partial or wrong report.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/trace.h"

typedef struct {
    int json;
    int first_section;
} report_t;

static void json_str(const char *s, uint32_t n)
{
    putchar('"');
    for (uint32_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void section(report_t *r, const char *name)
{
    if (r->json)
        printf("%s\n  \"%s\": ", r->first_section ? "" : ",", name);
    r->first_section = 0;
}

#define BAD() do { fprintf(stderr, "ft-trace: corrupt record payload\n"); return 1; } while (0)

static int visit(void *ctx, ft_trace_type_t type, ft_trace_cursor_t *c)
{
    report_t *r = ctx;
    const char *s1, *s2, *s3;
    uint32_t l1, l2, l3, u32, n;
    uint64_t a, b;

    switch (type) {
    case FT_TRACE_PROCESS:
        if (ft_trace_get_u32(c, &u32) || ft_trace_get_u64(c, &a) || ft_trace_get_u64(c, &b) ||
            ft_trace_get_str(c, &s1, &l1) || ft_trace_get_str(c, &s2, &l2))
            BAD();
        section(r, "process");
        if (r->json) {
            printf("{\"pid\": %u, \"start_ns\": %" PRIu64 ", \"end_ns\": %" PRIu64 ", \"program\": ",
                   u32, a, b);
            json_str(s1, l1);
            printf(", \"device\": ");
            json_str(s2, l2);
            printf("}");
        } else {
            printf("process   pid %u, %.*s\n", u32, (int)l1, s1);
            printf("duration  %.3f s\n", b >= a ? (double)(b - a) / 1e9 : 0.0);
            if (l2)
                printf("device    %.*s\n", (int)l2, s2);
        }
        return 0;
    case FT_TRACE_CONFIG:
        if (ft_trace_get_u32(c, &n))
            BAD();
        section(r, "config");
        if (r->json)
            printf("[");
        else
            printf("\nconfiguration (%u options)\n", n);
        for (uint32_t i = 0; i < n; i++) {
            if (ft_trace_get_str(c, &s1, &l1) || ft_trace_get_str(c, &s2, &l2) ||
                ft_trace_get_str(c, &s3, &l3))
                BAD();
            if (r->json) {
                printf("%s{\"name\": ", i ? ", " : "");
                json_str(s1, l1);
                printf(", \"value\": ");
                json_str(s2, l2);
                printf(", \"source\": ");
                json_str(s3, l3);
                printf("}");
            } else {
                printf("  %-26.*s %-24.*s (%.*s)\n", (int)l1, s1, (int)l2, s2, (int)l3, s3);
            }
        }
        if (r->json)
            printf("]");
        return 0;
    case FT_TRACE_CALLS:
        if (ft_trace_get_u32(c, &n))
            BAD();
        section(r, "calls");
        if (r->json)
            printf("[");
        else
            printf("\nintercepted calls\n  %-28s %12s\n", "entry point", "calls");
        for (uint32_t i = 0; i < n; i++) {
            if (ft_trace_get_str(c, &s1, &l1) || ft_trace_get_u64(c, &a))
                BAD();
            if (r->json) {
                printf("%s{\"name\": ", i ? ", " : "");
                json_str(s1, l1);
                printf(", \"count\": %" PRIu64 "}", a);
            } else {
                printf("  %-28.*s %12" PRIu64 "\n", (int)l1, s1, a);
            }
        }
        if (r->json)
            printf("]");
        return 0;
    default:
        /* A newer writer's record this reader does not know: skipped, as the format
         * allows (every record carries its length). */
        return 0;
    }
}

int main(int argc, char **argv)
{
    report_t r = { 0, 1 };
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            r.json = 1;
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: ft-trace [--json] FILE\n"
                   "Prints the summary of a FlexTensor trace (FT_TRACE_FILE).\n");
            return 0;
        } else if (path == NULL)
            path = argv[i];
        else {
            fprintf(stderr, "ft-trace: one file at a time (got %s and %s)\n", path, argv[i]);
            return 2;
        }
    }
    if (path == NULL) {
        fprintf(stderr, "usage: ft-trace [--json] FILE\n");
        return 2;
    }

    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "ft-trace: %s: %s\n", path, strerror(errno));
        return 1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ft-trace: %s: not a regular file\n", path);
        fclose(f);
        return 1;
    }
    size_t size = (size_t)st.st_size;
    unsigned char *data = malloc(size ? size : 1);
    if (data == NULL || fread(data, 1, size, f) != size) {
        fprintf(stderr, "ft-trace: %s: cannot read %zu bytes\n", path, size);
        fclose(f);
        free(data);
        return 1;
    }
    fclose(f);

    char err[256];
    int rc = ft_trace_read(data, size, NULL, NULL, err, sizeof err); /* validate first */
    if (rc != 0) {
        fprintf(stderr, "ft-trace: %s: %s\n", path, err);
        free(data);
        return 1;
    }
    if (r.json)
    {
        printf("{\"file\": ");
        json_str(path, (uint32_t)strlen(path));
        printf(", \"version\": %u", FT_TRACE_VERSION);
        r.first_section = 0;
    }
    else
        printf("trace     %s (format version %u, %zu bytes)\n", path, FT_TRACE_VERSION, size);
    rc = ft_trace_read(data, size, visit, &r, err, sizeof err);
    if (r.json)
        printf("\n}\n");
    free(data);
    return rc == 0 ? 0 : 1;
}

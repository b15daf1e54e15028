/* ft-run - run a program with FlexTensor preloaded.
 *
 *   ft-run [--gpu-mem SIZE] [--config FILE] [--trace FILE] [--log-level L] [--sim]
 *          [--disable] [--] PROGRAM [ARGS...]
 *   ft-run --print-config [--config FILE] [...]
 *   ft-run --shm-clean NAMESPACE
 *   ft-run --version
 *
 * Puts the libflextensor.so installed beside this program in front of LD_PRELOAD
 * (behind a sanitizer's runtime the user preloaded, which must stay first) and sets
 * FT_ENABLED=1, then execs PROGRAM. Its flags are explicit settings: they win over
 * the environment and the file. The configuration is validated here first, so a
 * mistake is reported before the program starts (exit status 2). --shm-clean removes
 * the shared segments of an FT_SHM_NAMESPACE (core/shmseg.h) and runs nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/shmseg.h"

#ifndef FT_VERSION
#error "FT_VERSION comes from the Makefile (its one source)"
#endif

extern char **environ;

static void usage(FILE *out)
{
    fputs("usage: ft-run [options] [--] PROGRAM [ARGS...]\n"
          "       ft-run --print-config [options]\n"
          "       ft-run --shm-clean NAMESPACE\n"
          "\n"
          "Runs PROGRAM with FlexTensor (libflextensor.so) preloaded and enabled.\n"
          "\n"
          "  --gpu-mem SIZE     device memory budget, e.g. 8GiB or 512MiB (FT_GPU_MEM_LIMIT)\n"
          "  --config FILE      INI file with a [flextensor] section (FT_CONFIG_FILE)\n"
          "  --trace FILE       write the trace to FILE (FT_TRACE_FILE)\n"
          "  --log-level LEVEL  error, warn, info, debug or trace (FT_LOG_LEVEL)\n"
          "  --sim              run on the simulated CUDA device (no GPU needed)\n"
          "  --disable          preload the library but leave it off (FT_ENABLED=0)\n"
          "  --print-config     print every option's effective value and its source\n"
          "  --shm-clean NS     remove the shared host-memory segments of FT_SHM_NAMESPACE NS\n"
          "                     (a process still using one keeps it until it ends)\n"
          "  --version          print ft-run's version\n"
          "  -h, --help         this text\n"
          "\n"
          "Every FT_* option is documented in docs/configuration.md.\n",
          out);
}

/* The folder holding this executable, to find the library and the simulator beside
 * it both in the build tree (build/bin -> build) and installed (bin -> lib). */
static int exe_dir(char *out, size_t len)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0)
        return -1;
    path[n] = '\0';
    snprintf(out, len, "%s", dirname(path));
    return 0;
}

static int first_existing(char *out, size_t len, const char *dir, const char *const *rel)
{
    for (; *rel; rel++) {
        snprintf(out, len, "%s/%s", dir, *rel);
        if (access(out, F_OK) == 0) {
            char real[PATH_MAX];
            if (realpath(out, real))
                snprintf(out, len, "%s", real);
            return 0;
        }
    }
    return -1;
}

static int prepend_env(const char *name, const char *value, char sep)
{
    const char *old = getenv(name);
    if (old == NULL || *old == '\0')
        return setenv(name, value, 1);
    char *joined;
    if (asprintf(&joined, "%s%c%s", value, sep, old) < 0)
        return -1;
    int rc = setenv(name, joined, 1);
    free(joined);
    return rc;
}

/* 1 when the preloaded object `entry` (len bytes, no separator) is a sanitizer's
 * runtime: it must stay first in LD_PRELOAD (ASan refuses to start otherwise, and a
 * sanitized program or library needs its interceptors in place before anything else). */
static int sanitizer_runtime(const char *entry, size_t len)
{
    static const char *const names[] = { "libasan", "libtsan", "libubsan", "liblsan", "libhwasan",
                                         "libmsan", "libclang_rt.asan", "libclang_rt.tsan",
                                         "libclang_rt.ubsan", "libclang_rt.msan", "libclang_rt.hwasan" };
    const char *base = entry;
    for (size_t i = 0; i < len; i++)
        if (entry[i] == '/')
            base = entry + i + 1;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        size_t n = strlen(names[i]);
        if ((size_t)(entry + len - base) >= n && strncmp(base, names[i], n) == 0)
            return 1;
    }
    return 0;
}

/* LD_PRELOAD with lib in front of what the user had, but behind any sanitizer runtime
 * the user preloaded (ld.so takes ':' and spaces between entries). */
static int preload_first(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    if (old == NULL || *old == '\0')
        return setenv("LD_PRELOAD", lib, 1);
    size_t cap = strlen(old) + strlen(lib) + 2, at = 0;
    char *out = malloc(cap);
    if (out == NULL)
        return -1;
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1) {
            at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? ":" : "", lib);
            continue;
        }
        for (const char *p = old; *p != '\0';) {
            size_t len = strcspn(p, ": ");
            if (len > 0 && sanitizer_runtime(p, len) == (pass == 0))
                at += (size_t)snprintf(out + at, cap - at, "%s%.*s", at ? ":" : "", (int)len, p);
            p += len;
            p += strspn(p, ": ");
        }
    }
    int rc = setenv("LD_PRELOAD", out, 1);
    free(out);
    return rc;
}

/* Sets option NAME among the n explicit settings in s. A flag given twice keeps its
 * last value, in the entry it already has: one entry per option, so s never holds
 * more than ft-run has flags however often they are repeated. */
static void set_explicit(ft_config_override_t *s, size_t *n, const char *name, const char *value,
                         const char *origin)
{
    size_t i = 0;
    while (i < *n && strcmp(s[i].name, name) != 0)
        i++;
    s[i] = (ft_config_override_t){ name, value, origin };
    if (i == *n)
        (*n)++;
}

/* --shm-clean's line for each segment removed (or not). */
static void cleaned(void *ctx, const char *name, int in_use, int err)
{
    int *failed = ctx;
    if (err != 0) {
        fprintf(stderr, "ft-run: cannot remove segment %s: %s\n", name, strerror(err));
        *failed = 1;
        return;
    }
    printf("ft-run: removed segment %s%s\n", name,
           in_use ? " (in use: the processes attached keep it until they end)" : "");
}

/* ft-run --shm-clean NAMESPACE: 0 when every segment found was removed, 1 when one
 * could not be, 2 for a namespace FT_SHM_NAMESPACE would refuse. */
static int shm_clean(const char *ns)
{
    if (!ft_shmseg_namespace_ok(ns)) {
        fprintf(stderr, "ft-run: --shm-clean: \"%s\" is not a valid namespace (1 to %d characters of "
                        "A-Z a-z 0-9 . _ -, not starting with a dot, without \"..\")\n", ns, FT_SHMSEG_NAMESPACE_MAX);
        return 2;
    }
    int failed = 0;
    int n = ft_shmseg_clean(ns, cleaned, &failed);
    if (n < 0) {
        fprintf(stderr, "ft-run: --shm-clean: %s\n", strerror(-n));
        return 1;
    }
    if (n == 0 && !failed)
        printf("ft-run: no segment of namespace %s\n", ns);
    return failed;
}

int main(int argc, char **argv)
{
    enum { OPT_GPU_MEM = 256, OPT_CONFIG, OPT_TRACE, OPT_LOG, OPT_SIM, OPT_DISABLE, OPT_PRINT,
           OPT_VERSION, OPT_SHM_CLEAN };
    static const struct option opts[] = {
        { "gpu-mem", required_argument, NULL, OPT_GPU_MEM },
        { "config", required_argument, NULL, OPT_CONFIG },
        { "trace", required_argument, NULL, OPT_TRACE },
        { "log-level", required_argument, NULL, OPT_LOG },
        { "sim", no_argument, NULL, OPT_SIM },
        { "disable", no_argument, NULL, OPT_DISABLE },
        { "print-config", no_argument, NULL, OPT_PRINT },
        { "version", no_argument, NULL, OPT_VERSION },
        { "shm-clean", required_argument, NULL, OPT_SHM_CLEAN },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    ft_config_override_t explicit_settings[4]; /* GPU_MEM_LIMIT, TRACE_FILE, LOG_LEVEL, ENABLED */
    size_t n_explicit = 0;
    const char *config_file = NULL;
    int sim = 0, print = 0, disable = 0;

    int c;
    /* "+": stop at the first non-option, which is the program to run. */
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_GPU_MEM:
            set_explicit(explicit_settings, &n_explicit, "GPU_MEM_LIMIT", optarg, "ft-run --gpu-mem");
            break;
        case OPT_CONFIG:
            config_file = optarg;
            break;
        case OPT_TRACE:
            set_explicit(explicit_settings, &n_explicit, "TRACE_FILE", optarg, "ft-run --trace");
            break;
        case OPT_LOG:
            set_explicit(explicit_settings, &n_explicit, "LOG_LEVEL", optarg, "ft-run --log-level");
            break;
        case OPT_SIM:
            sim = 1;
            break;
        case OPT_DISABLE:
            disable = 1;
            break;
        case OPT_PRINT:
            print = 1;
            break;
        case OPT_VERSION:
            puts("ft-run " FT_VERSION);
            return 0;
        case OPT_SHM_CLEAN:
            return shm_clean(optarg);
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    set_explicit(explicit_settings, &n_explicit, "ENABLED", disable ? "0" : "1",
                 disable ? "ft-run --disable" : "ft-run");

    if (config_file != NULL && setenv("FT_CONFIG_FILE", config_file, 1) != 0) {
        perror("ft-run: setenv");
        return 2;
    }

    ft_config_t cfg;
    static ft_config_diag_t diag;
    int rc = ft_config_load(&cfg, environ, NULL, explicit_settings, n_explicit, &diag);
    ft_config_diag_print(&diag, STDERR_FILENO);
    if (print) {
        ft_config_print(&cfg, STDOUT_FILENO);
        return rc == 0 ? 0 : 2;
    }
    if (rc != 0) {
        fprintf(stderr, "ft-run: invalid configuration, nothing started\n");
        return 2;
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }

    char dir[PATH_MAX], lib[PATH_MAX], simdir[PATH_MAX];
    static const char *const lib_paths[] = { "../libflextensor.so", "../lib/libflextensor.so", NULL };
    static const char *const sim_paths[] = { "../sim", "../lib/flextensor/sim", NULL };
    if (exe_dir(dir, sizeof dir) != 0 || first_existing(lib, sizeof lib, dir, lib_paths) != 0) {
        fprintf(stderr, "ft-run: libflextensor.so not found beside %s (looked in ../ and ../lib/)\n",
                dir);
        return 2;
    }
    if (sim) {
        if (first_existing(simdir, sizeof simdir, dir, sim_paths) != 0) {
            fprintf(stderr, "ft-run: --sim: the simulated device is not installed beside %s\n", dir);
            return 2;
        }
        prepend_env("LD_LIBRARY_PATH", simdir, ':');
    }
    for (size_t i = 0; i < n_explicit; i++) {
        char name[64];
        snprintf(name, sizeof name, "FT_%s", explicit_settings[i].name);
        setenv(name, explicit_settings[i].value, 1);
    }
    preload_first(lib);
    /* NVTX ranges name the units (libflextensor-nvtx.so, beside the shim); a tool that
     * already injects NVTX (Nsight) keeps it. */
    char nvtx[PATH_MAX];
    const char *slash = strrchr(lib, '/');
    if (slash != NULL &&
        snprintf(nvtx, sizeof nvtx, "%.*s/libflextensor-nvtx.so", (int)(slash - lib), lib) < (int)sizeof nvtx &&
        access(nvtx, R_OK) == 0)
        setenv("NVTX_INJECTION64_PATH", nvtx, 0);
    execvp(argv[optind], argv + optind);
    fprintf(stderr, "ft-run: cannot run %s: %s\n", argv[optind], strerror(errno));
    return 127;
}

/* init.c - the shim's life cycle: configuration before main, the report and trace at
 * exit, and the control API (flextensor.h).
 *
 * Owns: whether FlexTensor is active in this process (ft_shim_active).
 */
#define _GNU_SOURCE
#include "shim/shim.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "core/trace.h"

extern char **environ;

int ft_shim_active;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static ft_config_t config;
static uint64_t start_ns;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}


static void program_name(char *out, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", out, len - 1);
    out[n > 0 ? n : 0] = '\0';
}

/* The FT_TRACE_CONFIG record: every option as (FT_NAME, value, source), as
 * ft_config_print shows them. */
static void trace_config(ft_trace_writer_t *w)
{
    char val[1024], src[4200];
    ft_trace_begin(w, FT_TRACE_CONFIG);
    ft_trace_put_u32(w, FT_CONFIG_N_OPTIONS + 1);
    ft_trace_put_str(w, "FT_CONFIG_FILE");
    ft_trace_put_str(w, config.config_file[0] ? config.config_file : "none");
    ft_trace_put_str(w, !config.config_file[0] ? "default"
                        : strcmp(config.config_file_origin, "explicit") == 0 ? "explicit" : "env");
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        char name[64];
        snprintf(name, sizeof name, "FT_%s", ft_config_option_name((ft_config_opt_t)i));
        ft_trace_put_str(w, name);
        ft_trace_put_str(w, ft_config_format_value(&config, (ft_config_opt_t)i, val, sizeof val));
        ft_trace_put_str(w, ft_config_source_text(&config, (ft_config_opt_t)i, src, sizeof src));
    }
    ft_trace_end(w);
}

/* FT_TRACE_FILE with every "%p" replaced by the process id, so that the processes of
 * one job (torchrun workers, a launcher and its children) write separate traces. */
static int trace_path(char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = config.trace_file; *p; p++) {
        char pid[24];
        const char *piece = pid;
        if (p[0] == '%' && p[1] == 'p') {
            snprintf(pid, sizeof pid, "%d", (int)getpid());
            p++;
        } else {
            pid[0] = *p;
            pid[1] = '\0';
        }
        size_t n = strlen(piece);
        if (o + n >= len)
            return -1;
        memcpy(out + o, piece, n);
        o += n;
    }
    out[o] = '\0';
    return 0;
}

static void write_trace(void)
{
    if (config.trace_file == NULL || config.trace_file[0] == '\0')
        return;
    uint64_t calls = 0;
    for (int i = 0; i < FT_FN_COUNT; i++)
        calls += ft_shim_calls((ft_shim_fn_t)i);
    if (calls == 0) {
        /* A helper process that inherited the environment (ldconfig, a compiler) must
         * not overwrite the trace of the process that did the work. */
        FT_DEBUG("no CUDA call intercepted: no trace written");
        return;
    }
    char path[4096];
    if (trace_path(path, sizeof path) != 0) {
        FT_WARN("FT_TRACE_FILE is too long; no trace written");
        return;
    }
    ft_trace_writer_t w;
    if (ft_trace_writer_init(&w) != 0) {
        FT_WARN("trace %s not written: out of memory", path);
        return;
    }
    char prog[1024];
    program_name(prog, sizeof prog);
    ft_trace_begin(&w, FT_TRACE_PROCESS);
    ft_trace_put_u32(&w, (uint32_t)getpid());
    ft_trace_put_u64(&w, start_ns);
    ft_trace_put_u64(&w, now_ns());
    ft_trace_put_str(&w, prog);
    ft_trace_put_str(&w, "");
    ft_trace_end(&w);

    trace_config(&w);

    uint32_t n = 0;
    for (int i = 0; i < FT_FN_COUNT; i++)
        n += ft_shim_calls((ft_shim_fn_t)i) != 0;
    ft_trace_begin(&w, FT_TRACE_CALLS);
    ft_trace_put_u32(&w, n);
    for (int i = 0; i < FT_FN_COUNT; i++) {
        uint64_t c = ft_shim_calls((ft_shim_fn_t)i);
        if (c != 0) {
            ft_trace_put_str(&w, ft_shim_fn_name((ft_shim_fn_t)i));
            ft_trace_put_u64(&w, c);
        }
    }
    ft_trace_end(&w);
    ft_hooks_trace(&w);

    int rc = ft_trace_write_file(&w, path);
    if (rc != 0)
        FT_WARN("trace %s not written: %s", path, strerror(-rc));
    else
        FT_INFO("trace written to %s", path);
    ft_trace_writer_free(&w);
}

/* CUPTI observes during discovery (FT_CUPTI=auto|on). It is started at the first
 * intercepted CUDA call, not before main: the helper processes a CUDA program spawns
 * with the same environment (ldconfig, compilers) never load it. With `on`, failing to
 * subscribe stops the process like an invalid configuration. */
static void start_cupti(void)
{
    FT_INFO("enabled in pid %d (log level %s)", (int)getpid(), ft_log_level_name(config.log_level));
    if (config.cupti == FT_CUPTI_OFF)
        return;
    ft_cupti_init(ft_shim_real_dlsym);
    char why[256] = "";
    ft_cupti_status_t st = ft_cupti_start(why, sizeof why);
    if (st == FT_CUPTI_STATUS_ACTIVE)
        return;
    if (config.cupti == FT_CUPTI_ON) {
        FT_ERROR("FT_CUPTI=on but %s; stopping (exit status 2)", why);
        _exit(2);
    }
    if (st == FT_CUPTI_STATUS_HELD)
        FT_WARN("%s", why);
    else if (st == FT_CUPTI_STATUS_HANDED)
        FT_INFO("CUPTI not attached: %s; FlexTensor times with CUDA events", why);
    else
        FT_INFO("CUPTI not used: %s; launches are seen through the interposed calls only", why);
}

static void report_cupti(void)
{
    ft_cupti_stats_t s;
    ft_cupti_get_stats(&s);
    if (s.launches + s.copies + s.sets == 0)
        return;
    uint64_t unseen = s.unseen_launches + s.unseen_copies + s.unseen_sets;
    char detached[64];
    snprintf(detached, sizeof detached, "; CUPTI was detached (in %.1f ms)", (double)ft_cupti_detach_ns() / 1e6);
    if (unseen == 0)
        FT_INFO("CUPTI saw %llu launches, %llu copies, %llu sets in the driver: all went through "
                "FlexTensor's wrappers%s", (unsigned long long)s.launches,
                (unsigned long long)s.copies, (unsigned long long)s.sets,
                ft_cupti_detached() > 0 ? detached
                : s.status == FT_CUPTI_STATUS_HANDED ? "; CUPTI was handed to the application's profiler" : "");
    else
        FT_WARN("CUPTI saw %llu launches, %llu copies, %llu sets in the driver, of which %llu, "
                "%llu, %llu bypassed FlexTensor's wrappers (first: %s)",
                (unsigned long long)s.launches, (unsigned long long)s.copies,
                (unsigned long long)s.sets, (unsigned long long)s.unseen_launches,
                (unsigned long long)s.unseen_copies, (unsigned long long)s.unseen_sets,
                s.first_unseen);
}

/* The exit report: what the shim saw, and its verdict last. Runs from atexit, after
 * main returned. A process that made no CUDA call (a launcher, a shell, a compiler the
 * program ran with the same environment) says nothing: its report would only bury the
 * real one (a Python launcher printed it 33 times). */
static void report_at_exit(void)
{
    if (!ft_shim_active)
        return;
    uint64_t total = 0;
    for (int i = 0; i < FT_FN_COUNT; i++)
        total += ft_shim_calls((ft_shim_fn_t)i);
    if (total == 0)
        return;
    if (FT_LOG_ENABLED(FT_LOG_INFO)) {
        char line[256];
        FT_INFO("summary: %llu CUDA runtime calls intercepted", (unsigned long long)total);
        for (int i = 0; i < FT_FN_COUNT; i++) {
            uint64_t c = ft_shim_calls((ft_shim_fn_t)i);
            if (c == 0)
                continue;
            snprintf(line, sizeof line, "  %-28s %12llu", ft_shim_fn_name((ft_shim_fn_t)i),
                     (unsigned long long)c);
            FT_INFO("%s", line);
        }
        ft_hooks_report();
        report_cupti();
        ft_hooks_verdict();
    }
    ft_hooks_exit();
    write_trace();
}

static void init(void)
{
    static ft_config_diag_t diag;
    start_ns = now_ns();
    int rc = ft_config_load(&config, environ, NULL, NULL, 0, &diag);
    int enabled = ft_config_enabled_requested(&config);
    ft_log_set_threshold(rc == 0 ? config.log_level : FT_LOG_INFO);
    /* Warnings (an unknown FT_ variable, say) matter most when a typo left FlexTensor
     * off, so they are printed whether or not it is enabled. */
    ft_config_diag_print(&diag, STDERR_FILENO);
    if (rc != 0 && enabled) {
        /* The one exit in the library: the contract is that an invalid
         * configuration with FT_ENABLED=1 stops the process before the application
         * runs, never half-configured. _exit: no atexit handlers of a process that
         * has not started. */
        FT_ERROR("invalid configuration, stopping (exit status 2); "
                 "run `ft-run --print-config` to see every option");
        _exit(2);
    }
    if (!enabled)
        return;
    if (ft_hooks_init(&config) != 0) {
        FT_ERROR("out of memory setting up; FlexTensor stays off in this process");
        return;
    }
    ft_shim_active = 1;

    atexit(report_at_exit);
}

void ft_shim_first_call(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, start_cupti);
}

void ft_shim_ensure_init(void)
{
    pthread_once(&init_once, init);
}

__attribute__((constructor)) static void shim_constructor(void)
{
    ft_shim_ensure_init();
}

FT_EXPORT int ft_enabled(void)
{
    ft_shim_ensure_init();
    return ft_shim_active;
}

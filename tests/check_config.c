/* check_config.c - config_suite: layers and their precedence, sources, every kind of
 * bad input and the text of its message, sizes (their messages; the grammar is
 * check_size.c's), enum aliases, lists, the print-out and the generated documentation.
 * The environment is passed as an envp array: no setenv. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"

static ft_config_t cfg;
static ft_config_diag_t diag;
static char tmpdir[64];
static char path[512];

static void setup(void)
{
    /* Fresh template each time: CK_FORK=no runs every test in one process. */
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ft-config-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void teardown(void)
{
    ft_config_free(&cfg);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Writes `text` to tmpdir/name and returns its path (in the static `path`). */
static const char *write_file(const char *name, const char *text)
{
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Writes len bytes (NULs included) to tmpdir/name; returns its path as write_file. */
static const char *write_bytes(const char *name, const char *bytes, size_t len)
{
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, len, f), len);
    fclose(f);
    return path;
}

/* Loads with an envp built from the NULL-terminated arguments. */
static int load_env(const char *file, const char *first, ...)
{
    char *envp[64];
    size_t n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *e = first; e != NULL; e = va_arg(ap, const char *))
        envp[n++] = (char *)e;
    va_end(ap);
    envp[n] = NULL;
    ft_config_free(&cfg);
    return ft_config_load(&cfg, envp, file, NULL, 0, &diag);
}

/* Index of the first message containing every one of the NULL-terminated needles,
 * or -1. */
static int find_msg(bool is_error, const char *first, ...)
{
    for (unsigned i = 0; i < diag.n; i++) {
        if (diag.msg[i].is_error != is_error)
            continue;
        bool all = true;
        va_list ap;
        va_start(ap, first);
        for (const char *s = first; s != NULL; s = va_arg(ap, const char *))
            if (strstr(diag.msg[i].text, s) == NULL)
                all = false;
        va_end(ap);
        if (all)
            return (int)i;
    }
    return -1;
}

static void dump_diag(void)
{
    for (unsigned i = 0; i < diag.n; i++)
        fprintf(stderr, "  [%s] %s\n", diag.msg[i].is_error ? "E" : "W", diag.msg[i].text);
}

#define assert_error(...)                                                                  \
    do {                                                                                   \
        if (find_msg(true, __VA_ARGS__, NULL) < 0) {                                       \
            dump_diag();                                                                   \
            ck_abort_msg("no error with: %s", #__VA_ARGS__);                               \
        }                                                                                  \
    } while (0)
#define assert_warning(...)                                                                \
    do {                                                                                   \
        if (find_msg(false, __VA_ARGS__, NULL) < 0) {                                      \
            dump_diag();                                                                   \
            ck_abort_msg("no warning with: %s", #__VA_ARGS__);                             \
        }                                                                                  \
    } while (0)

/* Reads what fn wrote to a memfd. */
static char *capture(void (*fn)(int fd))
{
    static char buf[65536];
    int fd = memfd_create("out", 0);
    ck_assert_int_ge(fd, 0);
    fn(fd);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    ck_assert_int_ge(n, 0);
    buf[n] = '\0';
    close(fd);
    return buf;
}

static void print_cfg(int fd)
{
    ft_config_print(&cfg, fd);
}

static void print_diag(int fd)
{
    ft_config_diag_print(&diag, fd);
}

static void write_doc(int fd)
{
    ck_assert_int_eq(ft_config_write_doc(fd), 0);
}

/* The print-out line of one variable. */
static const char *print_line(const char *var)
{
    static char line[1024];
    const char *out = capture(print_cfg);
    char key[80];
    snprintf(key, sizeof key, "%s ", var);
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (strncmp(p, key, strlen(key)) == 0) {
            snprintf(line, sizeof line, "%.*s", (int)n, p);
            return line;
        }
        p += n + (e != NULL);
    }
    ck_abort_msg("no line for %s in:\n%s", var, out);
    return NULL;
}

/* ---- defaults and ENABLED -------------------------------------------------------- */

START_TEST(defaults_from_empty_environment)
{
    ck_assert_int_eq(load_env(NULL, NULL), 0);
    ck_assert_uint_eq(diag.n, 0);
    ck_assert(!cfg.enabled);
    ck_assert(!ft_config_enabled_requested(&cfg));
    ck_assert_int_eq(cfg.gpu_device, -1); /* the first allocation's device */
    ck_assert(cfg.pinned_memory);
    ck_assert_int_eq(cfg.pinned_memory_mode, FT_PINNED_MEMORY_MODE_HOST_REGISTER);
    ck_assert(!cfg.shm_enabled);
    ck_assert_str_eq(cfg.shm_namespace, "");
    ck_assert_int_eq(cfg.discovery_iters, 1);
    ck_assert_int_eq(cfg.profiling_iters, 3);
    ck_assert(cfg.time_budget_factor == 1.0);
    ck_assert_int_eq(cfg.transfer_mode, FT_TRANSFER_MODE_STRATEGY);
    ck_assert_int_eq(cfg.num_blocks, 4);
    ck_assert_int_eq(cfg.min_blocks, 2);
    ck_assert(cfg.max_gpu_mem_fraction < 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 0);
    ck_assert_int_eq(cfg.strategy, FT_STRATEGY_KNAPSACK);
    ck_assert_int_eq(cfg.offload_timing, FT_OFFLOAD_TIMING_OFF);
    ck_assert_uint_eq(cfg.include_patterns.n, 0);
    ck_assert_int_eq(cfg.log_level, FT_LOG_INFO);
    ck_assert_str_eq(cfg.trace_file, "");
    ck_assert_str_eq(cfg.iteration_marker, "");
    ck_assert_int_eq(cfg.cupti, FT_CUPTI_AUTO);
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++)
        ck_assert_int_eq(cfg.source[i].kind, FT_CONFIG_SRC_DEFAULT);
    ck_assert_str_eq(cfg.config_file, "");
    /* A NULL envp is an empty environment. */
    ft_config_free(&cfg);
    ck_assert_int_eq(ft_config_load(&cfg, NULL, NULL, NULL, 0, &diag), 0);
    ck_assert(!cfg.enabled);
}
END_TEST

START_TEST(enabled_bool_words)
{
    static const char *const on[] = {"FT_ENABLED=1", "FT_ENABLED=true", "FT_ENABLED=YES",
                                     "FT_ENABLED=On", "FT_ENABLED= True "};
    static const char *const off[] = {"FT_ENABLED=0", "FT_ENABLED=false", "FT_ENABLED=No",
                                      "FT_ENABLED=OFF"};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        ck_assert_int_eq(load_env(NULL, on[i], NULL), 0);
        ck_assert_msg(cfg.enabled, "%s", on[i]);
        ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_ENABLED].kind, FT_CONFIG_SRC_ENV);
    }
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
        ck_assert_int_eq(load_env(NULL, off[i], NULL), 0);
        ck_assert_msg(!cfg.enabled, "%s", off[i]);
        ck_assert(!ft_config_enabled_requested(&cfg));
    }
}
END_TEST

START_TEST(enabled_invalid_is_requested)
{
    ck_assert_int_lt(load_env(NULL, "FT_ENABLED=maybe", NULL), 0);
    assert_error("FT_ENABLED=maybe", "not a boolean", "accepted: true/false, 1/0, yes/no, on/off");
    ck_assert(!cfg.enabled_valid);
    ck_assert(ft_config_enabled_requested(&cfg));
}
END_TEST

START_TEST(enabled_known_despite_other_errors)
{
    ck_assert_int_lt(load_env(NULL, "FT_ENABLED=1", "FT_NUM_BLOCKS=x", NULL), 0);
    ck_assert(cfg.enabled && ft_config_enabled_requested(&cfg));
    ck_assert_int_lt(load_env(NULL, "FT_ENABLED=0", "FT_NUM_BLOCKS=x", NULL), 0);
    ck_assert(!ft_config_enabled_requested(&cfg));
}
END_TEST

START_TEST(enabled_defaults_true_with_a_file)
{
    const char *p = write_file("a.ini", "[flextensor]\nnum_blocks = 6\n");
    ck_assert_int_eq(load_env(p, NULL), 0);
    ck_assert(cfg.enabled);
    ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_ENABLED].kind, FT_CONFIG_SRC_DEFAULT);
    ck_assert_ptr_nonnull(strstr(print_line("FT_ENABLED"), "(default, a config file is named)"));
    /* Named through FT_CONFIG_FILE too. */
    char var[600];
    snprintf(var, sizeof var, "FT_CONFIG_FILE=%s", p);
    ck_assert_int_eq(load_env(NULL, var, NULL), 0);
    ck_assert(cfg.enabled);
    /* The file or the environment may still turn it off. */
    ck_assert_int_eq(load_env(NULL, var, "FT_ENABLED=0", NULL), 0);
    ck_assert(!cfg.enabled);
    p = write_file("b.ini", "[flextensor]\nenabled = no\n");
    ck_assert_int_eq(load_env(p, NULL), 0);
    ck_assert(!cfg.enabled);
    /* An empty FT_CONFIG_FILE names no file. */
    ck_assert_int_eq(load_env(NULL, "FT_CONFIG_FILE=", NULL), 0);
    ck_assert(!cfg.enabled);
}
END_TEST

/* ---- precedence and sources ------------------------------------------------------- */

START_TEST(precedence_and_sources)
{
    const char *p = write_file("p.ini", "; comment\n[flextensor]\nnum_blocks = 8\n"
                                        "strategy = greedy\ngpu_mem_limit = 4GiB\n");
    ft_config_override_t ex[] = {{"GPU_MEM_LIMIT", "8GiB", "ft-run --gpu-mem"}};
    char *envp[] = {"FT_NUM_BLOCKS=6", "FT_GPU_MEM_LIMIT=2GiB", "PATH=/bin", NULL};

    ck_assert_int_eq(ft_config_load(&cfg, envp, p, ex, 1, &diag), 0);
    ck_assert_int_eq(cfg.strategy, FT_STRATEGY_GREEDY); /* file only */
    ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_STRATEGY].kind, FT_CONFIG_SRC_FILE);
    ck_assert_uint_eq(cfg.source[FT_CONFIG_OPT_STRATEGY].line, 4);
    ck_assert_int_eq(cfg.num_blocks, 6); /* env over file */
    ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_NUM_BLOCKS].kind, FT_CONFIG_SRC_ENV);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 8ull << 30); /* explicit over env over file */
    ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_GPU_MEM_LIMIT].kind, FT_CONFIG_SRC_EXPLICIT);
    ck_assert_int_eq(cfg.min_blocks, 2); /* default */

    char want[700];
    ck_assert_str_eq(print_line("FT_GPU_MEM_LIMIT"),
                     "FT_GPU_MEM_LIMIT        = 8GiB                 (ft-run --gpu-mem)");
    ck_assert_ptr_nonnull(strstr(print_line("FT_NUM_BLOCKS"), "= 6 "));
    ck_assert_ptr_nonnull(strstr(print_line("FT_NUM_BLOCKS"), "(env)"));
    snprintf(want, sizeof want, "(file %s:4)", p);
    ck_assert_ptr_nonnull(strstr(print_line("FT_STRATEGY"), want));
    ck_assert_ptr_nonnull(strstr(print_line("FT_MIN_BLOCKS"), "= 2 "));
    ck_assert_ptr_nonnull(strstr(print_line("FT_MIN_BLOCKS"), "(default)"));
    snprintf(want, sizeof want, "= %s", p);
    ck_assert_ptr_nonnull(strstr(print_line("FT_CONFIG_FILE"), want));
    ck_assert_ptr_nonnull(strstr(print_line("FT_CONFIG_FILE"), "(explicit)"));

    /* Without the explicit setting the environment wins, without both the file. */
    ft_config_free(&cfg);
    ck_assert_int_eq(ft_config_load(&cfg, envp, p, NULL, 0, &diag), 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 2ull << 30);
    ft_config_free(&cfg);
    ck_assert_int_eq(ft_config_load(&cfg, NULL, p, NULL, 0, &diag), 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 4ull << 30);
    ck_assert_int_eq(cfg.num_blocks, 8);
    ck_assert_uint_eq(cfg.source[FT_CONFIG_OPT_NUM_BLOCKS].line, 3);
}
END_TEST

START_TEST(print_shows_every_option)
{
    ck_assert_int_eq(load_env(NULL, "FT_INCLUDE_PATTERNS=a,b", "FT_TRACE_FILE=/tmp/t.ftr", NULL), 0);
    const char *out = capture(print_cfg);
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        char var[80];
        snprintf(var, sizeof var, "\nFT_%s ", ft_config_option_name((ft_config_opt_t)i));
        ck_assert_msg(strstr(out, var) != NULL || strncmp(out, var + 1, strlen(var + 1)) == 0,
                      "%s missing", var + 1);
    }
    ck_assert_ptr_nonnull(strstr(print_line("FT_INCLUDE_PATTERNS"), "= a,b "));
    ck_assert_ptr_nonnull(strstr(print_line("FT_TRACE_FILE"), "= /tmp/t.ftr "));
    ck_assert_ptr_nonnull(strstr(print_line("FT_MAX_GPU_MEM_FRACTION"), "= none "));
    ck_assert_ptr_nonnull(strstr(print_line("FT_LOG_LEVEL"), "= info "));
    ck_assert_ptr_nonnull(strstr(print_line("FT_CONFIG_FILE"), "= none "));
}
END_TEST

/* Whatever the print-out shows parses back to the same value. */
START_TEST(printed_values_parse_back)
{
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMIT=1.5GiB", "FT_MAX_GPU_MEM_FRACTION=0.85",
                              "FT_EXCLUDE_PATTERNS=x.*, y", "FT_STRATEGY=greedy",
                              "FT_LOG_LEVEL=TRACE", "FT_SHM_ENABLED=1", "FT_SHM_NAMESPACE=ns",
                              NULL),
                     0);
    ft_config_t first = cfg;
    memset(&cfg, 0, sizeof cfg);
    static char vals[FT_CONFIG_N_OPTIONS][256];
    ft_config_override_t ex[FT_CONFIG_N_OPTIONS];
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        ex[i].name = ft_config_option_name((ft_config_opt_t)i);
        ex[i].value = ft_config_format_value(&first, (ft_config_opt_t)i, vals[i], sizeof vals[i]);
        ex[i].origin = "round trip";
    }
    ck_assert_int_eq(ft_config_load(&cfg, NULL, NULL, ex, FT_CONFIG_N_OPTIONS, &diag), 0);
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        char a[256], b[256];
        ck_assert_str_eq(ft_config_format_value(&first, (ft_config_opt_t)i, a, sizeof a),
                         ft_config_format_value(&cfg, (ft_config_opt_t)i, b, sizeof b));
    }
    ck_assert_uint_eq(cfg.gpu_mem_limit, 3ull << 29);
    ck_assert_int_eq(cfg.strategy, FT_STRATEGY_GREEDY);
    ft_config_free(&first);
}
END_TEST

/* ---- value errors ----------------------------------------------------------------- */

START_TEST(integer_errors)
{
    ck_assert_int_lt(load_env(NULL, "FT_NUM_BLOCKS=abc", NULL), 0);
    assert_error("FT_NUM_BLOCKS=abc: not an integer (accepted: integer 2..64)");
    ck_assert_int_eq(cfg.num_blocks, 4); /* the layer below stays */
    ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_NUM_BLOCKS].kind, FT_CONFIG_SRC_DEFAULT);

    ck_assert_int_lt(load_env(NULL, "FT_NUM_BLOCKS=100", NULL), 0);
    assert_error("FT_NUM_BLOCKS=100: out of range (accepted: integer 2..64)");
    ck_assert_int_lt(load_env(NULL, "FT_GPU_DEVICE=-2", NULL), 0);
    assert_error("FT_GPU_DEVICE=-2: out of range (accepted: integer -1..1023)");
    ck_assert_int_lt(load_env(NULL, "FT_DISCOVERY_ITERS=2.5", NULL), 0);
    assert_error("FT_DISCOVERY_ITERS=2.5: not an integer");
    ck_assert_int_lt(load_env(NULL, "FT_PROFILING_ITERS=99999999999999999999", NULL), 0);
    assert_error("FT_PROFILING_ITERS=99999999999999999999: out of range");
    ck_assert_int_lt(load_env(NULL, "FT_PROFILING_ITERS=", NULL), 0);
    assert_error("FT_PROFILING_ITERS=: empty value (accepted: integer 0..1000)");
    ck_assert_int_eq(load_env(NULL, "FT_PROFILING_ITERS= 7 ", NULL), 0);
    ck_assert_int_eq(cfg.profiling_iters, 7);
}
END_TEST

START_TEST(min_blocks_rules)
{
    ck_assert_int_lt(load_env(NULL, "FT_MIN_BLOCKS=1", NULL), 0);
    assert_error("FT_MIN_BLOCKS=1: out of range (accepted: integer 2..64)");
    ck_assert_int_lt(load_env(NULL, "FT_MIN_BLOCKS=8", NULL), 0);
    assert_error("FT_MIN_BLOCKS=8 (env) is greater than FT_NUM_BLOCKS=4 (default)",
                 "accepted: MIN_BLOCKS from 2 to NUM_BLOCKS");
    ck_assert_int_eq(load_env(NULL, "FT_MIN_BLOCKS=8", "FT_NUM_BLOCKS=8", NULL), 0);
}
END_TEST

START_TEST(float_errors_and_none)
{
    ck_assert_int_lt(load_env(NULL, "FT_MAX_GPU_MEM_FRACTION=0", NULL), 0);
    assert_error("FT_MAX_GPU_MEM_FRACTION=0: out of range (accepted: number in (0, 1], or none)");
    ck_assert_int_lt(load_env(NULL, "FT_MAX_GPU_MEM_FRACTION=1.5", NULL), 0);
    assert_error("FT_MAX_GPU_MEM_FRACTION=1.5: out of range");
    ck_assert_int_lt(load_env(NULL, "FT_MAX_GPU_MEM_FRACTION=ninety", NULL), 0);
    assert_error("FT_MAX_GPU_MEM_FRACTION=ninety: not a number");
    ck_assert_int_lt(load_env(NULL, "FT_TIME_BUDGET_FACTOR=nan", NULL), 0);
    assert_error("FT_TIME_BUDGET_FACTOR=nan: not a number (accepted: number in (0, 10])");
    ck_assert_int_lt(load_env(NULL, "FT_TIME_BUDGET_FACTOR=none", NULL), 0);
    assert_error("FT_TIME_BUDGET_FACTOR=none: not a number");

    ck_assert_int_eq(load_env(NULL, "FT_MAX_GPU_MEM_FRACTION=0.9", NULL), 0);
    ck_assert(cfg.max_gpu_mem_fraction == 0.9);
    ck_assert_int_eq(load_env(NULL, "FT_MAX_GPU_MEM_FRACTION=1", NULL), 0);
    ck_assert(cfg.max_gpu_mem_fraction == 1.0);
    ck_assert_int_eq(load_env(NULL, "FT_MAX_GPU_MEM_FRACTION=None", NULL), 0);
    ck_assert(cfg.max_gpu_mem_fraction < 0);
    ck_assert_int_eq(load_env(NULL, "FT_MAX_GPU_MEM_FRACTION=NULL", NULL), 0);
    ck_assert(cfg.max_gpu_mem_fraction < 0);
    ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_MAX_GPU_MEM_FRACTION].kind, FT_CONFIG_SRC_ENV);
    ck_assert_int_eq(load_env(NULL, "FT_SHM_WAIT_TIMEOUT=0", NULL), 0);
    ck_assert(cfg.shm_wait_timeout == 0.0);
}
END_TEST

START_TEST(enum_words_and_aliases)
{
    ck_assert_int_eq(load_env(NULL, "FT_PINNED_MEMORY_MODE=torch", NULL), 0);
    ck_assert_int_eq(cfg.pinned_memory_mode, FT_PINNED_MEMORY_MODE_ALLOC);
    ck_assert_int_eq(load_env(NULL, "FT_PINNED_MEMORY_MODE=Host_Register", NULL), 0);
    ck_assert_int_eq(cfg.pinned_memory_mode, FT_PINNED_MEMORY_MODE_HOST_REGISTER);
    ck_assert_int_eq(load_env(NULL, "FT_STRATEGY=Greedy", NULL), 0);
    ck_assert_str_eq(print_line("FT_STRATEGY") + strlen("FT_STRATEGY             = "),
                     "greedy               (env)");
    ck_assert_int_eq(load_env(NULL, "FT_TRANSFER_MODE=strategy", "FT_STRATEGY=GLOBAL",
                              "FT_OFFLOAD_TIMING=cuda_graph", "FT_CUPTI=off", NULL),
                     0);
    ck_assert_int_eq(cfg.transfer_mode, FT_TRANSFER_MODE_STRATEGY);
    ck_assert_int_eq(cfg.strategy, FT_STRATEGY_GLOBAL);
    ck_assert_int_eq(cfg.offload_timing, FT_OFFLOAD_TIMING_CUDA_GRAPH);
    ck_assert_int_eq(cfg.cupti, FT_CUPTI_OFF);
    ck_assert_str_eq(ft_config_word_name(FT_CUPTI_OFF), "off");

    ck_assert_int_lt(load_env(NULL, "FT_TRANSFER_MODE=fast", NULL), 0);
    assert_error("FT_TRANSFER_MODE=fast: unknown word (accepted: strategy)");
    ck_assert_int_lt(load_env(NULL, "FT_PINNED_MEMORY_MODE=mlock", NULL), 0);
    assert_error("FT_PINNED_MEMORY_MODE=mlock: unknown word (accepted: alloc, host_register; "
                 "aliases: torch (= alloc))");
    ck_assert_int_lt(load_env(NULL, "FT_STRATEGY=best", NULL), 0);
    assert_error("FT_STRATEGY=best", "accepted: knapsack, greedy, global");
    ck_assert_int_lt(load_env(NULL, "FT_OFFLOAD_TIMING=lazy", NULL), 0);
    assert_error("FT_OFFLOAD_TIMING=lazy", "accepted: off, eager, cuda_graph");
    ck_assert_int_lt(load_env(NULL, "FT_CUPTI=maybe", NULL), 0);
    assert_error("FT_CUPTI=maybe", "accepted: auto, on, off");
}
END_TEST

/* block changed only the planner's model: the engine never packed units. The word and
 * its aliases are refused, listing what is accepted. */
START_TEST(transfer_mode_block_refused)
{
    static const char *const removed[] = {"FT_TRANSFER_MODE=block",
                                          "FT_TRANSFER_MODE=allocation_block_transfer",
                                          "FT_TRANSFER_MODE=raw_block_transfer"};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        ck_assert_int_lt(load_env(NULL, removed[i], NULL), 0);
        assert_error(removed[i], ": unknown word (accepted: strategy)");
        ck_assert_int_eq(cfg.transfer_mode, FT_TRANSFER_MODE_STRATEGY);
    }
    const char *p = write_file("b.ini", "[flextensor]\ntransfer_mode = block\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s:2: transfer_mode=block: unknown word (accepted: strategy)", p);
    assert_error(want);
    ck_assert_int_eq(load_env(NULL, "FT_TRANSFER_MODE=Strategy", NULL), 0);
}
END_TEST

START_TEST(log_level_values)
{
    ck_assert_int_eq(load_env(NULL, "FT_LOG_LEVEL=debug", NULL), 0);
    ck_assert_int_eq(cfg.log_level, FT_LOG_DEBUG);
    ck_assert_int_eq(load_env(NULL, "FT_LOG_LEVEL=WARNING", NULL), 0);
    ck_assert_int_eq(cfg.log_level, FT_LOG_WARN);
    ck_assert_int_lt(load_env(NULL, "FT_LOG_LEVEL=verbose", NULL), 0);
    assert_error("FT_LOG_LEVEL=verbose: unknown log level (accepted: error, warn, info, debug, "
                 "trace)");
    ck_assert_int_eq(cfg.log_level, FT_LOG_INFO);
}
END_TEST

/* Every option is read now: none is marked "not implemented" by --print-config or the
 * documentation, and setting the last ones that were (FT_PROFILE_DIR,
 * FT_PROFILE_READ_ONLY, FT_OFFLOAD_TIMING, FT_SHM_*) warns of nothing. Their values are
 * checked and stored. */
START_TEST(not_implemented_options)
{
    ck_assert_int_eq(load_env(NULL, NULL), 0);
    ck_assert_uint_eq(diag.n, 0); /* defaults say nothing */
    static char doc[65536]; /* capture's buffer is reused by print_line */
    snprintf(doc, sizeof doc, "%s", capture(write_doc));
    ck_assert_ptr_null(strstr(doc, "Not implemented yet"));
    static const char *const names[] = {"FT_PROFILE_DIR", "FT_PROFILE_READ_ONLY", "FT_OFFLOAD_TIMING",
                                        "FT_SHM_ENABLED", "FT_GPU_MEM_LIMIT"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(strstr(print_line(names[i]), "not implemented") == NULL, "%s", print_line(names[i]));

    ck_assert_int_eq(load_env(NULL, "FT_PROFILE_DIR=/var/ft", "FT_SHM_ENABLED=1", "FT_SHM_NAMESPACE=ns",
                              "FT_OFFLOAD_TIMING=eager", "FT_PROFILE_READ_ONLY=1", NULL),
                     0);
    ck_assert_uint_eq(diag.n_warnings, 0);
    ck_assert_uint_eq(diag.n_errors, 0);
    ck_assert_str_eq(cfg.profile_dir, "/var/ft");
    ck_assert(cfg.profile_read_only);
    ck_assert_int_eq(cfg.offload_timing, FT_OFFLOAD_TIMING_EAGER);

    /* Values are still checked; "on" is eager's other word. */
    ck_assert_int_lt(load_env(NULL, "FT_PROFILE_READ_ONLY=soon", NULL), 0);
    ck_assert_int_eq(load_env(NULL, "FT_OFFLOAD_TIMING=on", NULL), 0);
    ck_assert_int_eq(cfg.offload_timing, FT_OFFLOAD_TIMING_EAGER);
}
END_TEST

/* FT_SHM_*: the namespace becomes part of a shm_open name, so only a plain name is
 * accepted (nothing that leads elsewhere, "/" or ".."), and FT_SHM_ENABLED needs one. */
START_TEST(shm_options)
{
    ck_assert_int_eq(load_env(NULL, "FT_SHM_ENABLED=1", "FT_SHM_NAMESPACE=llama-70b_v1.2", NULL), 0);
    ck_assert(cfg.shm_enabled);
    ck_assert_str_eq(cfg.shm_namespace, "llama-70b_v1.2");
    ck_assert(!cfg.shm_group);
    ck_assert(cfg.shm_wait_timeout == 300.0);
    ck_assert_int_eq(cfg.shm_test_stop_after, 0);
    ck_assert_uint_eq(diag.n, 0);

    ck_assert_int_lt(load_env(NULL, "FT_SHM_ENABLED=1", NULL), 0);
    assert_error("FT_SHM_ENABLED=true (env) needs FT_SHM_NAMESPACE");
    static const char *const bad[] = { "a/b", "../etc", "..", ".hidden", "a..b", "x y", "ns*", "tab\t" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char var[64];
        snprintf(var, sizeof var, "FT_SHM_NAMESPACE=%s", bad[i]);
        ck_assert_msg(load_env(NULL, "FT_SHM_ENABLED=1", var, NULL) < 0, "%s accepted", bad[i]);
        assert_error("is not a valid namespace");
    }
    char longest[202];
    memset(longest, 'n', 200);
    longest[200] = '\0';
    char var[240];
    snprintf(var, sizeof var, "FT_SHM_NAMESPACE=%s", longest);
    ck_assert_int_eq(load_env(NULL, var, NULL), 0);
    snprintf(var, sizeof var, "FT_SHM_NAMESPACE=%sn", longest);
    ck_assert_int_lt(load_env(NULL, var, NULL), 0);
    ck_assert_int_eq(load_env(NULL, "FT_SHM_GROUP=1", "FT_SHM_WAIT_TIMEOUT=2.5", NULL), 0);
    ck_assert(cfg.shm_group);
    ck_assert(cfg.shm_wait_timeout == 2.5);
    ck_assert_int_lt(load_env(NULL, "FT_SHM_WAIT_TIMEOUT=-1", NULL), 0);
}
END_TEST

/* FT_SKIP_DISCOVERY takes the units from a saved profile: without FT_PROFILE_DIR it is
 * an error like an invalid value (it used to switch the engine off without a word). */
START_TEST(skip_discovery_needs_a_profile)
{
    ck_assert_int_lt(load_env(NULL, "FT_ENABLED=1", "FT_SKIP_DISCOVERY=1", NULL), 0);
    assert_error("FT_SKIP_DISCOVERY=true (env) needs a saved profile, and FT_PROFILE_DIR is not set "
                 "(accepted: false, or FT_PROFILE_DIR)");
    ck_assert(ft_config_enabled_requested(&cfg));
    const char *p = write_file("k.ini", "[flextensor]\n\nskip_discovery = yes\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "FT_SKIP_DISCOVERY=true (file %s:3) needs a saved profile", p);
    assert_error(want);
    ck_assert_int_eq(load_env(NULL, "FT_SKIP_DISCOVERY=0", NULL), 0);
    ck_assert(!cfg.skip_discovery);
    ck_assert_int_eq(load_env(NULL, "FT_SKIP_DISCOVERY=1", "FT_PROFILE_DIR=/var/ft", NULL), 0);
    ck_assert(cfg.skip_discovery);
}
END_TEST

START_TEST(all_errors_collected)
{
    ck_assert_int_lt(load_env(NULL, "FT_NUM_BLOCKS=abc", "FT_STRATEGY=best",
                              "FT_GPU_MEM_LIMIT=lots", "FT_PINNED_MEMORY=perhaps", NULL),
                     0);
    ck_assert_uint_eq(diag.n_errors, 4);
    assert_error("FT_NUM_BLOCKS=abc");
    assert_error("FT_STRATEGY=best");
    assert_error("FT_GPU_MEM_LIMIT=lots: not a byte size (accepted: byte size such as 8GiB");
    assert_error("FT_PINNED_MEMORY=perhaps");
}
END_TEST

START_TEST(diag_print_format_and_overflow)
{
    ck_assert_int_lt(load_env(NULL, "FT_NUM_BLOCKS=abc", "FT_GPU_MEM_LIMT=1G", NULL), 0);
    const char *out = capture(print_diag);
    ck_assert_ptr_nonnull(strstr(out, "flextensor: error: FT_NUM_BLOCKS=abc: not an integer "
                                      "(accepted: integer 2..64)\n"));
    ck_assert_ptr_nonnull(strstr(out, "flextensor: warning: unknown variable FT_GPU_MEM_LIMT=1G"));

    static ft_config_override_t ex[FT_CONFIG_DIAG_MAX + 8];
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++)
        ex[i] = (ft_config_override_t){"NUM_BLOCKS", "zz", "test"};
    ft_config_free(&cfg);
    ck_assert_int_lt(ft_config_load(&cfg, NULL, NULL, ex, sizeof ex / sizeof ex[0], &diag), 0);
    ck_assert_uint_eq(diag.n_errors, FT_CONFIG_DIAG_MAX + 8);
    ck_assert_uint_eq(diag.n, FT_CONFIG_DIAG_MAX);
    out = capture(print_diag);
    ck_assert_ptr_nonnull(strstr(out, "flextensor: error: 8 more configuration messages not shown\n"));
}
END_TEST

/* ---- sizes ------------------------------------------------------------------------ */

START_TEST(gpu_mem_limit_values)
{
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMIT=512MiB", NULL), 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 512ull << 20);
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMIT=none", NULL), 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 0);
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMIT=0", NULL), 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 0);
    ck_assert_int_lt(load_env(NULL, "FT_GPU_MEM_LIMIT=8XB", NULL), 0);
    assert_error("FT_GPU_MEM_LIMIT=8XB: not a byte size",
                 "8GiB, 512MiB, 1.5GiB, 4G or 64B (a number without a unit is bytes, at "
                 "least 1MiB); 0 or none = off");
}
END_TEST

/* 8192 was an 8 KiB budget (the run went on with 0.0 MiB): a number without a unit
 * below 1 MiB is an error that names the likely fix, from every layer. */
START_TEST(size_without_unit)
{
    ck_assert_int_lt(load_env(NULL, "FT_GPU_MEM_LIMIT=8192", NULL), 0);
    assert_error("FT_GPU_MEM_LIMIT=8192: a number without a unit below 1 MiB: did you mean "
                 "8192MiB? (8192B if bytes are meant)");
    ck_assert_uint_eq(cfg.gpu_mem_limit, 0); /* the layer below stays */
    ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_GPU_MEM_LIMIT].kind, FT_CONFIG_SRC_DEFAULT);
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMIT=8192B", NULL), 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 8192);
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMIT=2147483648", NULL), 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 2ull << 30);

    ft_config_override_t ex[] = {{"GPU_MEM_LIMIT", "8192", "ft-run --gpu-mem"}};
    ft_config_free(&cfg);
    ck_assert_int_lt(ft_config_load(&cfg, NULL, NULL, ex, 1, &diag), 0);
    assert_error("ft-run --gpu-mem: FT_GPU_MEM_LIMIT=8192: ", "did you mean 8192MiB?");

    const char *p = write_file("s.ini", "[flextensor]\nvmm_min_size = 4\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s:2: vmm_min_size=4: a number without a unit below 1 MiB: "
             "did you mean 4MiB?", p);
    assert_error(want);
    ck_assert_uint_eq(cfg.vmm_min_size, 1ull << 20);
}
END_TEST

/* 0.0001k was read as 0, which silently meant "no limit". */
START_TEST(size_below_one_byte)
{
    ck_assert_int_lt(load_env(NULL, "FT_GPU_MEM_LIMIT=0.0001k", NULL), 0);
    assert_error("FT_GPU_MEM_LIMIT=0.0001k: less than one byte, which would read as 0 and "
                 "turn the option off (write 0 or none for that)");
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMIT=0.0GiB", NULL), 0);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 0);
}
END_TEST

/* FT_VMM_RESERVE=2^64-1 was accepted; it is address space reserved at a time. */
START_TEST(size_upper_bound)
{
    ck_assert_int_lt(load_env(NULL, "FT_VMM_RESERVE=18446744073709551615", NULL), 0);
    assert_error("FT_VMM_RESERVE=18446744073709551615: out of range", "at most 1TiB");
    ck_assert_uint_eq(cfg.vmm_reserve, 16ull << 30);
    ck_assert_int_lt(load_env(NULL, "FT_VMM_RESERVE=1.5TiB", NULL), 0);
    assert_error("FT_VMM_RESERVE=1.5TiB: out of range");
    ck_assert_int_eq(load_env(NULL, "FT_VMM_RESERVE=1TiB", NULL), 0);
    ck_assert_uint_eq(cfg.vmm_reserve, 1ull << 40);
    ck_assert_int_eq(load_env(NULL, "FT_VMM_RESERVE=0", NULL), 0);
    ck_assert_uint_eq(cfg.vmm_reserve, 0);
    /* The budget has no bound of its own: the device's free memory caps it. */
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMIT=18446744073709551615", NULL), 0);
    const char *doc = capture(write_doc);
    ck_assert_ptr_nonnull(strstr(doc, "| `FT_VMM_RESERVE` | size | `16GiB` | byte size such as "
                                      "8GiB, 512MiB, 1.5GiB, 4G or 64B (a number without a unit "
                                      "is bytes, at least 1MiB), at most 1TiB; 0 or none = off |"));
}
END_TEST

/* ---- lists and strings ------------------------------------------------------------ */

START_TEST(list_parsing)
{
    ck_assert_int_eq(load_env(NULL, "FT_INCLUDE_PATTERNS= layers.* , ,embed,,head ", NULL), 0);
    ck_assert_uint_eq(cfg.include_patterns.n, 3);
    ck_assert_str_eq(cfg.include_patterns.items[0], "layers.*");
    ck_assert_str_eq(cfg.include_patterns.items[1], "embed");
    ck_assert_str_eq(cfg.include_patterns.items[2], "head");
    ck_assert_int_eq(load_env(NULL, "FT_EXCLUDE_PATTERNS=none", NULL), 0);
    ck_assert_uint_eq(cfg.exclude_patterns.n, 0);
    ck_assert_int_eq(load_env(NULL, "FT_EXCLUDE_PATTERNS=", NULL), 0);
    ck_assert_uint_eq(cfg.exclude_patterns.n, 0);
    ck_assert_int_eq(load_env(NULL, "FT_EXCLUDE_PATTERNS=*.norm", NULL), 0);
    ck_assert_uint_eq(cfg.exclude_patterns.n, 1);
    ck_assert_str_eq(cfg.exclude_patterns.items[0], "*.norm");
}
END_TEST

START_TEST(list_continues_in_file)
{
    char text[2048];
    char longitem[400];
    memset(longitem, 'x', sizeof longitem - 1);
    longitem[sizeof longitem - 1] = '\0';
    snprintf(text, sizeof text,
             "[flextensor]\ninclude_patterns = a, b,\n    c\n\n    d,e\nexclude_patterns = %s\n",
             longitem);
    const char *p = write_file("l.ini", text);
    ck_assert_int_eq(load_env(p, NULL), 0);
    ck_assert_uint_eq(cfg.include_patterns.n, 5);
    ck_assert_str_eq(cfg.include_patterns.items[2], "c");
    ck_assert_str_eq(cfg.include_patterns.items[4], "e");
    /* Lines longer than inih's stack buffer are read whole. */
    ck_assert_uint_eq(cfg.exclude_patterns.n, 1);
    ck_assert_str_eq(cfg.exclude_patterns.items[0], longitem);
    ck_assert_uint_eq(cfg.source[FT_CONFIG_OPT_EXCLUDE_PATTERNS].line, 6);

    p = write_file("m.ini", "[flextensor]\nnum_blocks = 4\n   5\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s:3: num_blocks=5: continuation line of a single-valued key", p);
    assert_error(want);
}
END_TEST

START_TEST(strings_and_none)
{
    ck_assert_int_eq(load_env(NULL, "FT_TRACE_FILE=/tmp/run 1.ftr", "FT_ITERATION_MARKER=*gemm*",
                              "FT_PROFILE_DIR=none", NULL),
                     0);
    ck_assert_str_eq(cfg.trace_file, "/tmp/run 1.ftr");
    ck_assert_str_eq(cfg.iteration_marker, "*gemm*");
    ck_assert_str_eq(cfg.profile_dir, "");
}
END_TEST

/* ---- unknown names ---------------------------------------------------------------- */

START_TEST(unknown_variable_nearest_name)
{
    ck_assert_int_eq(load_env(NULL, "FT_GPU_MEM_LIMT=8G", "FT_enabled=1", "FT_SIM_BANDWIDTH=5",
                              "FT_TEST_X=1", "FTX=1", NULL),
                     0);
    assert_warning("unknown variable FT_GPU_MEM_LIMT=8G ignored (did you mean FT_GPU_MEM_LIMIT?)");
    assert_warning("unknown variable FT_enabled=1 ignored (did you mean FT_ENABLED?)");
    ck_assert_uint_eq(diag.n_warnings, 2); /* the simulator's and tests' own are not ours */
    ck_assert_int_eq(load_env(NULL, "FT_COLOR=1", NULL), 0);
    assert_warning("unknown variable FT_COLOR=1 ignored (nearest option: FT_");
    ck_assert(!cfg.enabled);
    ck_assert_uint_eq(ft_config_edit_distance("GPU_MEM_LIMT", "GPU_MEM_LIMIT"), 1);
    ck_assert_uint_eq(ft_config_edit_distance("abc", "ABC"), 0);
    ck_assert_uint_eq(ft_config_edit_distance("", "abc"), 3);
    ck_assert_uint_eq(ft_config_edit_distance("kitten", "sitting"), 3);
}
END_TEST

START_TEST(explicit_settings)
{
    ft_config_override_t ex[] = {
        {"ft_num_blocks", "6", "ft-run --blocks"},
        {"NUM_BLOKS", "6", "ft-run --bad"},
        {"STRATEGY", "best", "ft-run --strategy"},
        {"LOG_LEVEL", NULL, "ft-run --log"},
    };
    ck_assert_int_lt(ft_config_load(&cfg, NULL, NULL, ex, 4, &diag), 0);
    ck_assert_int_eq(cfg.num_blocks, 6);
    ck_assert_str_eq(cfg.source[FT_CONFIG_OPT_NUM_BLOCKS].origin, "ft-run --blocks");
    assert_error("ft-run --bad: unknown option NUM_BLOKS (did you mean NUM_BLOCKS?)");
    assert_error("ft-run --strategy: FT_STRATEGY=best: unknown word (accepted: knapsack");
    assert_error("ft-run --log: LOG_LEVEL: no value");
    ck_assert_uint_eq(diag.n_errors, 3);
}
END_TEST

/* ---- the file --------------------------------------------------------------------- */

START_TEST(file_missing)
{
    char var[600];
    snprintf(var, sizeof var, "FT_CONFIG_FILE=%s/none.ini", tmpdir);
    ck_assert_int_lt(load_env(NULL, var, NULL), 0);
    assert_error(var, ": cannot open: No such file or directory",
                 "accepted: a readable INI file with a [flextensor] section");
    ck_assert(ft_config_enabled_requested(&cfg)); /* so the shim stops */

    char p[600];
    snprintf(p, sizeof p, "%s/other.ini", tmpdir);
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "config file %s: cannot open", p);
    assert_error(want);

    ck_assert_int_lt(load_env(tmpdir, NULL), 0);
    snprintf(want, sizeof want, "config file %s: is a directory", tmpdir);
    assert_error(want);
}
END_TEST

START_TEST(file_unreadable)
{
    char p[700];
    write_file("u.ini", "[flextensor]\n");
    /* A path through a regular file cannot be opened, even by root. */
    snprintf(p, sizeof p, "%s/u.ini/x.ini", tmpdir);
    ck_assert_int_lt(load_env(p, NULL), 0);
    assert_error(p, "cannot open: Not a directory", "accepted: a readable INI file");
    /* Permissions, where they apply (not to root). */
    const char *u = write_file("u.ini", "[flextensor]\n");
    ck_assert_int_eq(chmod(u, 0), 0);
    if (access(u, R_OK) != 0) {
        ck_assert_int_lt(load_env(u, NULL), 0);
        assert_error(u, "cannot open: Permission denied");
    }
}
END_TEST

START_TEST(file_without_section)
{
    const char *p = write_file("n.ini", "[other]\nnum_blocks = 4\nx = 1\n[third]\ny = 2\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s: no [flextensor] section (accepted: a readable INI file", p);
    assert_error(want);
    snprintf(want, sizeof want, "%s:2: key 'num_blocks' in section [other] ignored", p);
    assert_warning(want, "FlexTensor reads only [flextensor]");
    snprintf(want, sizeof want, "%s:5: key 'y' in section [third] ignored", p);
    assert_warning(want);
    ck_assert_uint_eq(diag.n_warnings, 2); /* one per foreign section */
    ck_assert_int_eq(cfg.num_blocks, 4);
    ck_assert_int_eq(cfg.source[FT_CONFIG_OPT_NUM_BLOCKS].kind, FT_CONFIG_SRC_DEFAULT);

    p = write_file("c.json", "{\"enabled\": true}\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    assert_error("no [flextensor] section", "JSON and YAML files are read by the Python library only");
}
END_TEST

START_TEST(file_bad_values_name_line)
{
    const char *p = write_file("v.ini", "# settings\n[FlexTensor]\n\nnum_blocks = abc\n"
                                        "GPU_MEM_LIMIT = 3 parsecs\nnum_block = 3\n"
                                        "[flextensor]\nstrategy = greedy ; inline comment\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s:4: num_blocks=abc: not an integer (accepted: integer 2..64)", p);
    assert_error(want);
    snprintf(want, sizeof want, "%s:5: GPU_MEM_LIMIT=3 parsecs: not a byte size", p);
    assert_error(want);
    snprintf(want, sizeof want,
             "%s:6: unknown key 'num_block' in [flextensor] ignored (did you mean num_blocks?)", p);
    assert_warning(want);
    ck_assert_uint_eq(diag.n_errors, 2);
    ck_assert_int_eq(cfg.strategy, FT_STRATEGY_GREEDY);
    ck_assert_uint_eq(cfg.source[FT_CONFIG_OPT_STRATEGY].line, 8);
}
END_TEST

START_TEST(file_syntax_errors)
{
    const char *p = write_file("x.ini", "top = 1\n[flextensor]\nthis is not ini\nnum_blocks = 5\n"
                                        "neither is this\n[broken\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s:1: top = 1: key outside any section", p);
    assert_error(want);
    snprintf(want, sizeof want, "%s:3: 'this is not ini': not a key = value line", p);
    assert_error(want, "accepted: key = value, [section], or a comment");
    snprintf(want, sizeof want, "%s:5: 'neither is this'", p);
    assert_error(want);
    snprintf(want, sizeof want, "%s:6: section header without ']'", p);
    assert_error(want);
    ck_assert_uint_eq(diag.n_errors, 4);
    ck_assert_int_eq(cfg.num_blocks, 5); /* good lines still count */
}
END_TEST

START_TEST(file_duplicate_key)
{
    const char *p = write_file("d.ini", "[flextensor]\nnum_blocks = 4\nNUM_BLOCKS = 6\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s:3: NUM_BLOCKS=6: NUM_BLOCKS set again (first at line 2", p);
    assert_error(want);
}
END_TEST

START_TEST(file_enabled_invalid_then_env)
{
    const char *p = write_file("e.ini", "[flextensor]\nenabled = sure\n");
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s:2: enabled=sure: not a boolean", p);
    assert_error(want);
    ck_assert(ft_config_enabled_requested(&cfg));
    ck_assert_int_lt(load_env(p, "FT_ENABLED=0", NULL), 0);
    ck_assert(!ft_config_enabled_requested(&cfg));
}
END_TEST

/* inih reads C strings: "gpu_mem_limit = 1\0GiB" became a 1-byte budget. A NUL byte
 * anywhere rejects the whole file, naming its line. */
START_TEST(file_with_nul_byte)
{
    static const char text[] = "[flextensor]\nnum_blocks = 6\n\ngpu_mem_limit = 1\0GiB\n"
                               "trace_file = /tmp/a\0b\n";
    const char *p = write_bytes("z.ini", text, sizeof text - 1);
    ck_assert_int_lt(load_env(p, NULL), 0);
    char want[700];
    snprintf(want, sizeof want, "%s:4: NUL byte in the file; the file is not read (accepted: a "
             "text INI file)", p);
    assert_error(want);
    ck_assert_uint_eq(diag.n_errors, 1);
    ck_assert_uint_eq(cfg.gpu_mem_limit, 0);
    ck_assert_int_eq(cfg.num_blocks, 4); /* nothing of the file applies */
    ck_assert_str_eq(cfg.trace_file, "");
    ck_assert(ft_config_enabled_requested(&cfg)); /* a named file: the shim stops */

    /* The first NUL is named, on a line of its own or at the very end. */
    static const char tail[] = "[flextensor]\nnum_blocks = 6\n\0";
    p = write_bytes("t.ini", tail, sizeof tail - 1);
    ck_assert_int_lt(load_env(p, NULL), 0);
    snprintf(want, sizeof want, "%s:3: NUL byte in the file", p);
    assert_error(want);
}
END_TEST

/* ---- secure execution ------------------------------------------------------------- */

/* A setuid or setgid program (AT_SECURE) must not let its caller's environment steer a
 * library inside it: every FT_* variable, the file and explicit settings are ignored,
 * the defaults stand (FlexTensor off), and one warning says so. ft_config_load asks
 * getauxval; this test process is not secure, so it takes the flag directly
 * (tests/scenario/secure.sh makes a real setgid program). */
START_TEST(secure_process_ignores_environment_and_file)
{
    const char *p = write_file("sec.ini", "[flextensor]\nnum_blocks = 6\n");
    char var[600];
    snprintf(var, sizeof var, "FT_CONFIG_FILE=%s", p);
    char *envp[] = {"FT_ENABLED=1", "FT_GPU_MEM_LIMIT=8GiB", "FT_NUM_BLOCKS=abc", var,
                    "FT_SIM_BANDWIDTH=5", "PATH=/bin", NULL};
    ft_config_override_t ex[] = {{"STRATEGY", "greedy", "ft-run --strategy"}};

    ck_assert_int_eq(ft_config_load_secure(&cfg, envp, NULL, ex, 1, &diag), 0);
    ck_assert(!cfg.enabled);
    ck_assert(!ft_config_enabled_requested(&cfg));
    ck_assert_uint_eq(cfg.gpu_mem_limit, 0);
    ck_assert_int_eq(cfg.num_blocks, 4);
    ck_assert_int_eq(cfg.strategy, FT_STRATEGY_KNAPSACK);
    ck_assert_str_eq(cfg.config_file, "");
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++)
        ck_assert_int_eq(cfg.source[i].kind, FT_CONFIG_SRC_DEFAULT);
    ck_assert_uint_eq(diag.n_errors, 0);
    ck_assert_uint_eq(diag.n_warnings, 1);
    assert_warning("secure-execution process (setuid, setgid or file capabilities): every FT_* "
                   "variable and the config file are ignored; FlexTensor stays off");
    ck_assert_ptr_nonnull(strstr(print_line("FT_ENABLED"), "(default, secure-execution process)"));

    /* A file named by the caller is ignored too, and does not turn ENABLED on. */
    ft_config_free(&cfg);
    ck_assert_int_eq(ft_config_load_secure(&cfg, NULL, p, NULL, 0, &diag), 0);
    ck_assert(!cfg.enabled);
    ck_assert_int_eq(cfg.num_blocks, 4);
    ck_assert_uint_eq(diag.n_warnings, 1);

    /* Nothing of ours set: nothing to say (a setuid program's output stays its own). */
    char *quiet[] = {"PATH=/bin", "FT_SIM_BANDWIDTH=5", "FTX=1", NULL};
    ft_config_free(&cfg);
    ck_assert_int_eq(ft_config_load_secure(&cfg, quiet, NULL, NULL, 0, &diag), 0);
    ck_assert_uint_eq(diag.n, 0);

    /* The same environment in this ordinary process is read. */
    ft_config_free(&cfg);
    ck_assert_int_lt(ft_config_load(&cfg, envp, NULL, ex, 1, &diag), 0);
    ck_assert(cfg.enabled);
    ck_assert_int_eq(cfg.strategy, FT_STRATEGY_GREEDY);
}
END_TEST

/* ---- documentation ---------------------------------------------------------------- */

START_TEST(doc_lists_every_option)
{
    const char *doc = capture(write_doc);
    ck_assert_ptr_nonnull(strstr(doc, "# FlexTensor configuration"));
    ck_assert_ptr_nonnull(strstr(doc, "| `FT_CONFIG_FILE` |"));
    for (int i = 0; i < FT_CONFIG_N_OPTIONS; i++) {
        char row[128];
        snprintf(row, sizeof row, "| `FT_%s` |", ft_config_option_name((ft_config_opt_t)i));
        ck_assert_msg(strstr(doc, row) != NULL, "%s missing", row);
        ck_assert_ptr_nonnull(strstr(doc, ft_config_option_doc((ft_config_opt_t)i)));
    }
    ck_assert_ptr_nonnull(strstr(doc, "`host_register`:"));
    ck_assert_ptr_nonnull(strstr(doc, "torch (= alloc)"));
    ck_assert_ptr_nonnull(strstr(doc, "| `FT_GPU_MEM_LIMIT` | size | `none` |"));
    ck_assert_ptr_nonnull(strstr(doc, "| `FT_LOG_LEVEL` | level | `info` | error, warn, info, debug, trace |"));
    ck_assert_ptr_null(ft_config_option_name(FT_CONFIG_N_OPTIONS));
    ck_assert_int_eq(ft_config_write_doc(-1), -1);
}
END_TEST

START_TEST(free_is_idempotent)
{
    ck_assert_int_eq(load_env(NULL, "FT_INCLUDE_PATTERNS=a,b", "FT_TRACE_FILE=x", NULL), 0);
    ft_config_free(&cfg);
    ft_config_free(&cfg);
    ft_config_t zero;
    memset(&zero, 0, sizeof zero);
    ft_config_free(&zero);
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, defaults_from_empty_environment);
    tcase_add_test(tc, enabled_bool_words);
    tcase_add_test(tc, enabled_invalid_is_requested);
    tcase_add_test(tc, enabled_known_despite_other_errors);
    tcase_add_test(tc, enabled_defaults_true_with_a_file);
    tcase_add_test(tc, precedence_and_sources);
    tcase_add_test(tc, print_shows_every_option);
    tcase_add_test(tc, printed_values_parse_back);
    tcase_add_test(tc, integer_errors);
    tcase_add_test(tc, min_blocks_rules);
    tcase_add_test(tc, float_errors_and_none);
    tcase_add_test(tc, enum_words_and_aliases);
    tcase_add_test(tc, transfer_mode_block_refused);
    tcase_add_test(tc, log_level_values);
    tcase_add_test(tc, not_implemented_options);
    tcase_add_test(tc, shm_options);
    tcase_add_test(tc, skip_discovery_needs_a_profile);
    tcase_add_test(tc, all_errors_collected);
    tcase_add_test(tc, diag_print_format_and_overflow);
    tcase_add_test(tc, gpu_mem_limit_values);
    tcase_add_test(tc, size_without_unit);
    tcase_add_test(tc, size_below_one_byte);
    tcase_add_test(tc, size_upper_bound);
    tcase_add_test(tc, list_parsing);
    tcase_add_test(tc, list_continues_in_file);
    tcase_add_test(tc, strings_and_none);
    tcase_add_test(tc, unknown_variable_nearest_name);
    tcase_add_test(tc, explicit_settings);
    tcase_add_test(tc, file_missing);
    tcase_add_test(tc, file_unreadable);
    tcase_add_test(tc, file_without_section);
    tcase_add_test(tc, file_bad_values_name_line);
    tcase_add_test(tc, file_syntax_errors);
    tcase_add_test(tc, file_duplicate_key);
    tcase_add_test(tc, file_enabled_invalid_then_env);
    tcase_add_test(tc, file_with_nul_byte);
    tcase_add_test(tc, secure_process_ignores_environment_and_file);
    tcase_add_test(tc, doc_lists_every_option);
    tcase_add_test(tc, free_is_idempotent);
    suite_add_tcase(s, tc);
    return s;
}

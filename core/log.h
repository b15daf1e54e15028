/* log.h - the one logger of FlexTensor: every message goes through it.
 *
 * Owns: the log threshold, the output descriptor, the level names, and the one loop
 * that writes a whole buffer (ft_log_write_all).
 *
 * Messages go to stderr (or the descriptor set with ft_log_set_fd) with one write(2)
 * each, prefixed "flextensor: " and, for warnings and errors, the level word. They are
 * formatted with vsnprintf into a stack buffer: the logger never allocates, because it
 * runs before main and inside other libraries' calls (an allocator hook, a CUDA
 * callback). It never reads the environment: config/ parses FT_LOG_LEVEL and the shim
 * calls ft_log_set_threshold.
 *
 * FT_LOG and the helpers test the threshold before their arguments are evaluated, so a
 * trace message on the hot path costs one load and one compare when tracing is off.
 */
#ifndef FT_LOG_H
#define FT_LOG_H

#include <stdarg.h>
#include <stddef.h>

/* Lower is more severe; a message is written when its level <= the threshold. */
enum ft_log_level {
    FT_LOG_ERROR = 0,
    FT_LOG_WARN = 1,
    FT_LOG_INFO = 2,
    FT_LOG_DEBUG = 3,
    FT_LOG_TRACE = 4,
};
#define FT_LOG_LEVEL_COUNT 5
#define FT_LOG_DEFAULT_LEVEL FT_LOG_INFO

/* Longest message written; a longer one is cut and ends in "...". */
#define FT_LOG_MAX_LINE 1024

/* The threshold, read inline by every FT_LOG call site (a function call per disabled
 * trace message would be paid on the hot path). It is the only non-static variable of
 * core/log.c; hidden by -fvisibility=hidden. Write it with ft_log_set_threshold only. */
extern int ft_log_threshold;

#define FT_LOG_ENABLED(level) ((int)(level) <= __atomic_load_n(&ft_log_threshold, __ATOMIC_RELAXED))

/* Arguments are evaluated only when `level` passes the threshold. */
#define FT_LOG(level, ...)                                                              \
    do {                                                                                \
        if (FT_LOG_ENABLED(level))                                                      \
            ft_log_write((level), __VA_ARGS__);                                         \
    } while (0)

#define FT_ERROR(...) FT_LOG(FT_LOG_ERROR, __VA_ARGS__)
#define FT_WARN(...) FT_LOG(FT_LOG_WARN, __VA_ARGS__)
#define FT_INFO(...) FT_LOG(FT_LOG_INFO, __VA_ARGS__)
#define FT_DEBUG(...) FT_LOG(FT_LOG_DEBUG, __VA_ARGS__)
#define FT_TRACE(...) FT_LOG(FT_LOG_TRACE, __VA_ARGS__)

/* At most `cap` messages from this call site over the life of the process; the
 * cap-th carries "(further messages of this kind suppressed)". Once the cap is reached
 * the arguments are no longer evaluated. The counter is per call site (a static in
 * the expansion), shared by all threads. */
#define FT_LOG_CAPPED(level, cap, ...)                                                  \
    do {                                                                                \
        static unsigned ft_log_site_count;                                              \
        if (FT_LOG_ENABLED(level) &&                                                    \
            __atomic_load_n(&ft_log_site_count, __ATOMIC_RELAXED) < (unsigned)(cap))    \
            ft_log_write_capped(&ft_log_site_count, (unsigned)(cap), (level), __VA_ARGS__); \
    } while (0)

#define FT_WARN_CAPPED(cap, ...) FT_LOG_CAPPED(FT_LOG_WARN, cap, __VA_ARGS__)

/* Writes one message at `level` regardless of the threshold (callers test it first:
 * use the macros). Keeps errno. A message logged from inside the logger on the same
 * thread (a hook reached from vsnprintf or write) is dropped, not recursed into. */
void ft_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ft_log_vwrite(int level, const char *fmt, va_list ap);

/* The body of FT_LOG_CAPPED: counts the message in *site and writes it while the
 * count is within `cap`; the cap-th gets the suppression note. */
void ft_log_write_capped(unsigned *site, unsigned cap, int level, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes all of buf to fd with write(2), retrying on EINTR and short writes: 0, or
 * -errno of the write that failed. The logger's own output goes through it, and so do
 * the other writers of whole buffers (config/'s diagnostics, the trace file), so that
 * one loop handles interrupted and partial writes. Allocates nothing. */
int ft_log_write_all(int fd, const void *buf, size_t len);

/* Sets the threshold (clamped to FT_LOG_ERROR..FT_LOG_TRACE); returns the old one. */
int ft_log_set_threshold(int level);
int ft_log_get_threshold(void);

/* Sets where messages go (stderr by default; tests use a pipe); returns the old fd. */
int ft_log_set_fd(int fd);

/* "error", "warn", "info", "debug", "trace"; "?" for a level out of range. */
const char *ft_log_level_name(int level);

/* Parses a level word, case-insensitive: error, warn (or warning), info, debug, trace.
 * Surrounding blanks are ignored. 0 and *level set on success, -1 otherwise. Shared
 * with config/ (FT_LOG_LEVEL). */
int ft_log_level_parse(const char *word, int *level);

/* The accepted words, for error messages and the documentation. */
#define FT_LOG_LEVEL_WORDS "error, warn, info, debug, trace"

#endif

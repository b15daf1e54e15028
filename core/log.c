/* log.c - the logger: level threshold, prefix, one write(2) per message, caps.
 *
 * Owns: ft_log_threshold, the output descriptor, the per-thread recursion guard.
 * Nothing here allocates or reads the environment (see log.h).
 */
#include "core/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

int ft_log_threshold = FT_LOG_DEFAULT_LEVEL;

/* Relaxed atomics: a message written to the old descriptor while another thread
 * switches it is harmless; only tests switch it. */
static int log_fd = STDERR_FILENO;

/* Set while this thread is inside the logger. vsnprintf or write may land in a hook of
 * ours (or of another interposer) that logs again; recursing would loop or deadlock.
 * initial-exec TLS: global-dynamic TLS in a preloaded library may call
 * __tls_get_addr, which can allocate on first use. */
static __thread int in_logger __attribute__((tls_model("initial-exec")));

static const char *const level_names[FT_LOG_LEVEL_COUNT] = {
    "error", "warn", "info", "debug", "trace",
};

static const char suppressed_note[] = " (further messages of this kind suppressed)";

const char *ft_log_level_name(int level)
{
    if (level < 0 || level >= FT_LOG_LEVEL_COUNT)
        return "?";
    return level_names[level];
}

int ft_log_level_parse(const char *word, int *level)
{
    if (word == NULL)
        return -1;
    while (*word == ' ' || *word == '\t')
        word++;
    size_t n = strlen(word);
    while (n > 0 && (word[n - 1] == ' ' || word[n - 1] == '\t' || word[n - 1] == '\n'))
        n--;
    for (int i = 0; i < FT_LOG_LEVEL_COUNT; i++) {
        if (strlen(level_names[i]) == n && strncasecmp(word, level_names[i], n) == 0) {
            *level = i;
            return 0;
        }
    }
    if (n == 7 && strncasecmp(word, "warning", 7) == 0) {
        *level = FT_LOG_WARN;
        return 0;
    }
    return -1;
}

int ft_log_set_threshold(int level)
{
    if (level < FT_LOG_ERROR)
        level = FT_LOG_ERROR;
    if (level > FT_LOG_TRACE)
        level = FT_LOG_TRACE;
    return __atomic_exchange_n(&ft_log_threshold, level, __ATOMIC_RELAXED);
}

int ft_log_get_threshold(void)
{
    return __atomic_load_n(&ft_log_threshold, __ATOMIC_RELAXED);
}

int ft_log_set_fd(int fd)
{
    return __atomic_exchange_n(&log_fd, fd, __ATOMIC_RELAXED);
}

int ft_log_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Formats prefix + message (+ note) + newline into one stack buffer and writes it in
 * one call, so that lines from different threads do not interleave. */
static void emit(int level, const char *note, const char *fmt, va_list ap)
{
    char buf[FT_LOG_MAX_LINE];
    const char *prefix = level == FT_LOG_ERROR  ? "flextensor: error: "
                         : level == FT_LOG_WARN ? "flextensor: warning: "
                                                : "flextensor: ";
    size_t cap = sizeof buf - 1; /* room kept for the newline */
    size_t len = strlen(prefix);
    memcpy(buf, prefix, len);

    int n = vsnprintf(buf + len, cap - len, fmt, ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= cap - len) {
        len = cap - 1; /* vsnprintf's terminator */
        memcpy(buf + len - 3, "...", 3);
    } else {
        len += (size_t)n;
    }
    while (len > 0 && buf[len - 1] == '\n')
        len--;
    if (note != NULL) {
        size_t nl = strlen(note);
        if (len + nl > cap)
            len = cap - nl;
        memcpy(buf + len, note, nl);
        len += nl;
    }
    buf[len++] = '\n';
    /* A failure is dropped: there is nowhere to report a failing stderr. */
    (void)ft_log_write_all(__atomic_load_n(&log_fd, __ATOMIC_RELAXED), buf, len);
}

void ft_log_vwrite(int level, const char *fmt, va_list ap)
{
    if (in_logger)
        return;
    in_logger = 1;
    int saved = errno; /* interposed calls must not see errno change under them */
    emit(level, NULL, fmt, ap);
    errno = saved;
    in_logger = 0;
}

void ft_log_write(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ft_log_vwrite(level, fmt, ap);
    va_end(ap);
}

void ft_log_write_capped(unsigned *site, unsigned cap, int level, const char *fmt, ...)
{
    /* The macro's test is a cheap pre-check; this increment decides, so that racing
     * threads together write exactly `cap` messages. */
    unsigned seen = __atomic_fetch_add(site, 1, __ATOMIC_RELAXED);
    if (seen >= cap) {
        __atomic_store_n(site, cap, __ATOMIC_RELAXED); /* no wrap-around */
        return;
    }
    if (in_logger)
        return;
    in_logger = 1;
    int saved = errno;
    va_list ap;
    va_start(ap, fmt);
    emit(level, seen + 1 == cap ? suppressed_note : NULL, fmt, ap);
    va_end(ap);
    errno = saved;
    in_logger = 0;
}

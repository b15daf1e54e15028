/* trace.c - writing and validating FlexTensor trace files (format in trace.h). */
#include "core/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

uint32_t ft_crc32(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    crc = ~crc;
    while (len--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static void put_bytes(ft_trace_writer_t *w, const void *src, size_t n)
{
    if (w->failed)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + n)
            cap *= 2;
        unsigned char *nb = realloc(w->buf, cap);
        if (nb == NULL) {
            w->failed = 1;
            return;
        }
        w->buf = nb;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, src, n);
    w->len += n;
}

static void put_le(ft_trace_writer_t *w, uint64_t v, int bytes)
{
    unsigned char b[8];
    for (int i = 0; i < bytes; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    put_bytes(w, b, (size_t)bytes);
}

int ft_trace_writer_init(ft_trace_writer_t *w)
{
    memset(w, 0, sizeof *w);
    put_bytes(w, FT_TRACE_MAGIC, 8); /* 7 letters and the NUL */
    put_le(w, FT_TRACE_VERSION, 4);
    put_le(w, FT_TRACE_HEADER_SIZE, 4);
    return w->failed ? -ENOMEM : 0;
}

void ft_trace_writer_free(ft_trace_writer_t *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

void ft_trace_begin(ft_trace_writer_t *w, ft_trace_type_t type)
{
    w->record_start = w->len;
    put_le(w, (uint16_t)type, 2);
    put_le(w, 0, 2);
    put_le(w, 0, 4); /* length, patched by ft_trace_end */
}

void ft_trace_put_u32(ft_trace_writer_t *w, uint32_t v) { put_le(w, v, 4); }
void ft_trace_put_u64(ft_trace_writer_t *w, uint64_t v) { put_le(w, v, 8); }

void ft_trace_put_str(ft_trace_writer_t *w, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    put_le(w, (uint32_t)n, 4);
    put_bytes(w, s, n);
}

void ft_trace_end(ft_trace_writer_t *w)
{
    if (w->failed)
        return;
    uint32_t len = (uint32_t)(w->len - w->record_start - 8);
    for (int i = 0; i < 4; i++)
        w->buf[w->record_start + 4 + i] = (unsigned char)(len >> (8 * i));
    w->records++;
}

/* Creates the temporary file PATH.tmp.<16 hex digits> and returns its descriptor, or
 * -errno. The folder may be writable by others (/tmp): O_EXCL|O_NOFOLLOW never opens
 * what is already there, so a link planted at the name cannot redirect the write (the
 * old PATH.tmp.<pid>, opened with O_TRUNC, overwrote the link's target); the random
 * name only keeps a squatter from making every attempt fail. Mode 0644 through the
 * umask, as a plain creat() gives: mkstemp's 0600 would need the umask to widen it,
 * and a library cannot read the umask without setting it under the other threads. */
static int create_temp(const char *path, char *tmp, size_t size)
{
    for (unsigned attempt = 0; attempt < 64; attempt++) {
        uint64_t r;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
            /* No entropy yet (early boot) or no getrandom: O_EXCL still keeps it safe. */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            r = ((uint64_t)ts.tv_nsec << 24) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
                (uint64_t)(uintptr_t)&r ^ attempt;
        }
        if (snprintf(tmp, size, "%s.tmp.%016llx", path, (unsigned long long)r) >= (int)size)
            return -ENAMETOOLONG;
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0)
            return fd;
        if (errno != EEXIST)
            return -errno;
    }
    return -EEXIST;
}

int ft_trace_write_file(ft_trace_writer_t *w, const char *path)
{
    uint32_t crc = ft_crc32(0, w->buf, w->len);
    uint64_t records = w->records;
    ft_trace_begin(w, FT_TRACE_END);
    ft_trace_put_u64(w, records);
    ft_trace_put_u32(w, crc);
    ft_trace_end(w);
    if (w->failed)
        return -ENOMEM;

    char tmp[4096];
    int fd = create_temp(path, tmp, sizeof tmp);
    if (fd < 0)
        return fd;
    int rc = ft_log_write_all(fd, w->buf, w->len);
    if (rc != 0) {
        close(fd);
        unlink(tmp);
        return rc;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return -e;
    }
    return 0;
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int take(ft_trace_cursor_t *c, size_t n, const unsigned char **out)
{
    if (c->failed || c->left < n) {
        c->failed = 1;
        return -1;
    }
    *out = c->p;
    c->p += n;
    c->left -= n;
    return 0;
}

int ft_trace_get_u32(ft_trace_cursor_t *c, uint32_t *v)
{
    const unsigned char *p;
    if (take(c, 4, &p))
        return -1;
    *v = (uint32_t)get_le(p, 4);
    return 0;
}

int ft_trace_get_u64(ft_trace_cursor_t *c, uint64_t *v)
{
    const unsigned char *p;
    if (take(c, 8, &p))
        return -1;
    *v = get_le(p, 8);
    return 0;
}

int ft_trace_get_str(ft_trace_cursor_t *c, const char **s, uint32_t *len)
{
    const unsigned char *p;
    uint32_t n;
    if (ft_trace_get_u32(c, &n) || take(c, n, &p))
        return -1;
    *s = (const char *)p;
    *len = n;
    return 0;
}

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); return -1; } while (0)

int ft_trace_read(const unsigned char *data, size_t size, ft_trace_visit_fn visit, void *ctx,
                  char *err, size_t errlen)
{
    if (size < FT_TRACE_HEADER_SIZE)
        FAIL("not a FlexTensor trace: %zu bytes, shorter than the %u-byte header", size,
             FT_TRACE_HEADER_SIZE);
    if (memcmp(data, FT_TRACE_MAGIC, 8) != 0)
        FAIL("not a FlexTensor trace: bad magic at byte 0");
    uint32_t version = (uint32_t)get_le(data + 8, 4);
    if (version != FT_TRACE_VERSION)
        FAIL("trace format version %u, this ft-trace reads version %u", version,
             FT_TRACE_VERSION);
    if (get_le(data + 12, 4) != FT_TRACE_HEADER_SIZE)
        FAIL("corrupt header: header size %u at byte 12, expected %u",
             (unsigned)get_le(data + 12, 4), FT_TRACE_HEADER_SIZE);

    /* First pass: bounds of every record, and the END record's count and CRC. */
    size_t off = FT_TRACE_HEADER_SIZE;
    uint64_t n = 0;
    for (;;) {
        if (off == size)
            FAIL("truncated: no end record after %llu records (%zu bytes)",
                 (unsigned long long)n, size);
        if (size - off < 8)
            FAIL("truncated: record %llu header at byte %zu needs 8 bytes, %zu left",
                 (unsigned long long)n, off, size - off);
        uint32_t type = (uint32_t)get_le(data + off, 2);
        uint64_t len = get_le(data + off + 4, 4);
        if (len > size - off - 8)
            FAIL("truncated: record %llu (type %u) at byte %zu claims %llu bytes, %zu left",
                 (unsigned long long)n, type, off, (unsigned long long)len, size - off - 8);
        if (type == FT_TRACE_END) {
            if (len != 12 || get_le(data + off + 2, 2) != 0)
                FAIL("corrupt end record at byte %zu: length %llu, expected 12", off,
                     (unsigned long long)len);
            uint64_t count = get_le(data + off + 8, 8);
            uint32_t crc = (uint32_t)get_le(data + off + 16, 4);
            if (count != n)
                FAIL("corrupt: end record counts %llu records, the file holds %llu",
                     (unsigned long long)count, (unsigned long long)n);
            if (crc != ft_crc32(0, data, off))
                FAIL("corrupt: checksum mismatch over the first %zu bytes", off);
            if (off + 8 + len != size)
                FAIL("corrupt: %zu bytes after the end record", size - (off + 8 + (size_t)len));
            break;
        }
        off += 8 + (size_t)len;
        n++;
    }

    off = FT_TRACE_HEADER_SIZE;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t type = (uint32_t)get_le(data + off, 2);
        size_t len = (size_t)get_le(data + off + 4, 4);
        ft_trace_cursor_t c = { data + off + 8, len, 0 };
        int rc = visit ? visit(ctx, (ft_trace_type_t)type, &c) : 0;
        if (rc)
            return rc;
        off += 8 + len;
    }
    return 0;
}

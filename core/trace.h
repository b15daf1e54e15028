/* trace.h - the FlexTensor trace file: a versioned, self-checking record stream.
 *
 * Layout (little-endian; docs/trace-format.md is the reference):
 *   header   "FTTRACE\0" (8 bytes), u32 version, u32 header size (16)
 *   records  u16 type, u16 flags (0), u32 payload length, payload
 *   end      a record of type FT_TRACE_END whose payload is u64 record count (the
 *            records before it) and u32 CRC-32 of every byte before the END record.
 * A file without a valid END record is truncated or corrupt, and is reported so.
 *
 * Payload fields are u32/u64 integers and strings (u32 length, bytes, no NUL).
 */
#ifndef FT_TRACE_H
#define FT_TRACE_H

#include <stddef.h>
#include <stdint.h>

#define FT_TRACE_MAGIC "FTTRACE"
#define FT_TRACE_VERSION 1u
#define FT_TRACE_HEADER_SIZE 16u

typedef enum {
    FT_TRACE_PROCESS = 1,   /* u32 pid, u64 start ns, u64 end ns (unix), str program, str device */
    FT_TRACE_CONFIG = 2,    /* u32 n, then n x (str name, str value, str source) */
    FT_TRACE_CALLS = 3,     /* u32 n, then n x (str entry point, u64 count) */
    FT_TRACE_DISCOVERY = 4, /* u32 state, u32 iterations, u32 boundary source, u64 launches,
                               u64 launches touching no region */
    FT_TRACE_REGIONS = 5,   /* u32 n, then n x (u32 id, u64 base, u64 size, u32 flags, u32 unit) */
    FT_TRACE_KERNELS = 6,   /* u32 n, then n x (str name, u64 launches) */
    FT_TRACE_ITERATION = 7, /* u32 n, then n x (u32 kernel, u32 k, k x u32 region id) */
    FT_TRACE_UNITS = 8,     /* u32 n, then n x (str name, u64 bytes, u32 first launch,
                               u32 last launch, u32 offload, u32 k, k x u32 region id) */
    FT_TRACE_PROFILE = 9,   /* u32 passes, u32 n, then n x (str unit, u32 samples,
                               u64 min ns, u64 median ns, u64 max ns) */
    FT_TRACE_BANDWIDTH = 10, /* u64 bytes per copy, then in KB/s (10^3 B/s): u64 host to
                                device, u64 device to host, u64 and u64 the same with
                                both directions at once */
    FT_TRACE_PLAN = 11,     /* u32 memory mode, u64 budget, u64 other bytes, u32 slots,
                               u64 slot bytes, u64 device bytes, u64 predicted step ns,
                               u64 all-resident ns, u32 n, then n x (u32 resident,
                               u32 slot (0xffffffff resident), u64 predicted stall ns) */
    FT_TRACE_RESIDENCY = 12, /* u64 loads, u64 of them prefetched, u64 misses, u64 bytes
                                copied in, u64 unloads, u64 peak bytes of streamed units
                                held, u64 measured steps, u64 their median ns (0: none),
                                u64 predicted step ns; since 2026-11-29 (absent from older
                                traces) u64 unloads copied back, u64 stale addresses
                                skipped, u64 copies served from host memory, u64 units
                                made to stream by allocations, u64 FT_SPILL moves in,
                                u64 FT_SPILL moves out */
    FT_TRACE_MISSES = 13,   /* the residency engine's first misses: u32 n, then n x (u32
                               unit, u64 pass, u64 position of the launch before + 1 (0:
                               unknown), u32 pass off the recorded sequence, str kernel
                               ("?" for a copy or set)) */
    FT_TRACE_TRACKING = 14, /* how passes were followed after discovery: u32 rule (0 the
                               detector's anchors, 1 the start's kernel on its weight, 2
                               that or a kernel not in the recorded pass, 3 explicit
                               marks), u32 start position, u32 kernel index and u32 region
                               id (0xffffffff: none), u64 pass starts after discovery, u64
                               launches since the last start (the deciding thread), u32
                               1 when the "no pass has started" warning was given */
    FT_TRACE_TIMING = 15,   /* offload timing (FT_OFFLOAD_TIMING): u64 passes timed, u64
                               passes lost, u64 their steps' sum ns, u64 predicted step ns,
                               u64 stall ns, u32 n, then n x (u32 streamed, u64 bytes one load copies (the last
                               load's), u64 loads, u64
                               hits, u64 misses, u64 bytes in, u64 bytes copied back, u64
                               unloads, u64 copies timed, u64 transfer ns, u64 compute
                               overlapped ns, u64 passes with compute timed, u64 compute
                               ns, u64 stall ns) */
    FT_TRACE_TIMELINE = 16, /* the last FT_TIMING_KEEP_PASSES passes timed: u32 n, then n x
                               (u64 pass, u64 start ns, u64 step ns, u64 stall ns, u32
                               truncated, u32 k, then k x (u32 kind FT_TIMING_*, u32 lane
                               (0 the program's stream, 1 the side stream), u32 unit, u64
                               wait ns, u64 start ns, u64 end ns)); ns on one clock from
                               the first timed pass's start */
    FT_TRACE_END = 0xffff,
} ft_trace_type_t;

/* TIMELINE's event kinds: a unit's compute (wait ns: where its stall began), a copy in
 * ahead of use (a hit), a copy in on demand (a miss, on the program's stream), an
 * unload. */
enum { FT_TIMING_COMPUTE = 0, FT_TIMING_COPY = 1, FT_TIMING_MISS = 2, FT_TIMING_UNLOAD = 3, FT_TIMING_KINDS = 4 };
/* Passes whose events the trace keeps: the last ones timed. */
#define FT_TIMING_KEEP_PASSES 8

/* Region flag bits of the REGIONS record (docs/trace-format.md). */
enum {
    FT_TRACE_RF_VMM = 1u << 0,
    FT_TRACE_RF_CANDIDATE = 1u << 1,
    FT_TRACE_RF_WEIGHT = 1u << 2,
    FT_TRACE_RF_WRITTEN = 1u << 3,
    FT_TRACE_RF_CHANGED = 1u << 4,
    FT_TRACE_RF_FREED = 1u << 5,
    FT_TRACE_RF_KNOWN = (1u << 6) - 1,
};

/* A growing in-memory trace; written out in one go by ft_trace_write_file. */
typedef struct {
    unsigned char *buf;
    size_t len, cap;
    size_t record_start;    /* offset of the open record's header */
    uint64_t records;
    int failed;             /* an allocation failed: the trace is incomplete */
} ft_trace_writer_t;

int ft_trace_writer_init(ft_trace_writer_t *w);
void ft_trace_writer_free(ft_trace_writer_t *w);
void ft_trace_begin(ft_trace_writer_t *w, ft_trace_type_t type);
void ft_trace_put_u32(ft_trace_writer_t *w, uint32_t v);
void ft_trace_put_u64(ft_trace_writer_t *w, uint64_t v);
void ft_trace_put_str(ft_trace_writer_t *w, const char *s);
void ft_trace_end(ft_trace_writer_t *w);
/* Closes the stream with the END record and writes it to path (via a temporary file
 * renamed into place, so a reader never sees half a file; the temporary is created
 * exclusively under a random name, so a link planted in the folder is never followed,
 * and a link at path itself is replaced). The file ends with mode 0644 less the umask.
 * 0 or -errno. */
int ft_trace_write_file(ft_trace_writer_t *w, const char *path);

/* Reading: a cursor over one record's payload. Getters return 0, or -1 when the
 * payload is shorter than the field (the cursor then stays failed). */
typedef struct {
    const unsigned char *p;
    size_t left;
    int failed;
} ft_trace_cursor_t;

int ft_trace_get_u32(ft_trace_cursor_t *c, uint32_t *v);
int ft_trace_get_u64(ft_trace_cursor_t *c, uint64_t *v);
/* Points *s at the string's bytes (not NUL-terminated) and *len at its length. */
int ft_trace_get_str(ft_trace_cursor_t *c, const char **s, uint32_t *len);

typedef int (*ft_trace_visit_fn)(void *ctx, ft_trace_type_t type, ft_trace_cursor_t *payload);

/* Checks the whole file (magic, version, record bounds, END record, CRC) and then
 * calls visit for each record. On failure returns <0 and writes a one-line reason
 * naming the byte offset into err. A visitor returning nonzero stops the walk and its
 * value is returned. */
int ft_trace_read(const unsigned char *data, size_t size, ft_trace_visit_fn visit, void *ctx,
                  char *err, size_t errlen);

uint32_t ft_crc32(uint32_t crc, const void *data, size_t len);

#endif

/* check_audit.c - audit_suite: FT_CUPTI_AUDIT's reading of the application's API
 * records (cupti/audit.c). Records are handed to the completed-buffer trampoline from
 * an array, through a stand-in for cuptiActivityGetNextRecord; the application's
 * callback gets the buffer after the audit has read it. */
#include <check.h>
#include <cupti.h>
#include <string.h>

#include "cupti/audit.h"

static CUpti_ActivityAPI *records;
static size_t n_records;
static int app_got;

/* cuptiActivityGetNextRecord over `records`: the first with *rec NULL, then the one after. */
static CUptiResult next_record(uint8_t *buffer, size_t valid, CUpti_Activity **rec)
{
    (void)buffer;
    (void)valid;
    size_t i = *rec == NULL ? 0 : (size_t)((CUpti_ActivityAPI *)*rec - records) + 1;
    if (i >= n_records)
        return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *rec = (CUpti_Activity *)&records[i];
    return CUPTI_SUCCESS;
}

static void *lookup(const char *name)
{
    return strcmp(name, "cuptiActivityGetNextRecord") == 0 ? (void *)next_record : NULL;
}

static void CUPTIAPI app_requested(uint8_t **buffer, size_t *size, size_t *max)
{
    (void)buffer;
    (void)size;
    (void)max;
}

static void CUPTIAPI app_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    (void)valid;
    app_got += buffer == (uint8_t *)records;
}

static CUpti_ActivityAPI api(CUpti_ActivityKind kind, uint32_t cbid, uint32_t corr, uint64_t start, uint64_t end)
{
    CUpti_ActivityAPI a;
    memset(&a, 0, sizeof a);
    a.kind = kind;
    a.cbid = cbid;
    a.correlationId = corr;
    a.threadId = 1;
    a.start = start;
    a.end = end;
    return a;
}

/* Hands `n` records to the audit as one completed buffer; the counts it added. */
static void feed(CUpti_ActivityAPI *recs, size_t n, uint64_t *dups, uint64_t *flows)
{
    void *req = NULL, *done = NULL;
    ck_assert_int_eq(ft_cupti_audit_wrap(lookup, (void *)app_requested, (void *)app_completed, &req, &done), 0);
    uint64_t r0, d0, f0, r1, d1, f1;
    ft_cupti_audit_counts(&r0, &d0, &f0);
    records = recs;
    n_records = n;
    app_got = 0;
    ((CUpti_BuffersCallbackCompleteFunc)done)(NULL, 0, (uint8_t *)recs, n * sizeof *recs, n * sizeof *recs);
    ck_assert_int_eq(app_got, 1);
    ft_cupti_audit_counts(&r1, &d1, &f1);
    ck_assert_uint_eq(r1 - r0, n);
    *dups = d1 - d0;
    *flows = f1 - f0;
}

/* Two flow starts under one id, the id's first record starting none: calls made inside
 * an open runtime call (a driver hook reached from cuBLAS's own runtime) end before it,
 * so their records come first. A stream wait through the driver (no flow for Kineto),
 * the checksum kernel's cuLaunchKernel (a flow start), then the open call's own
 * cudaLaunchKernel (a flow start): torch.profiler asserts on this id. */
START_TEST(two_flow_starts_after_a_record_that_starts_none)
{
    CUpti_ActivityAPI recs[] = {
        api(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent, 101, 10, 11),
        api(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 101, 12, 13),
        api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 101, 9, 20),
        api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 102, 21, 22),
    };
    uint64_t dups, flows;
    feed(recs, 4, &dups, &flows);
    ck_assert_uint_eq(dups, 2);
    ck_assert_uint_eq(flows, 1);
}
END_TEST

/* One flow start under an id, whatever else it carries: nothing for torch.profiler. */
START_TEST(one_flow_start_among_others)
{
    CUpti_ActivityAPI recs[] = {
        api(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent, 201, 10, 11),
        api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020, 201, 12, 13),
        api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 201, 9, 20),
    };
    uint64_t dups, flows;
    feed(recs, 3, &dups, &flows);
    ck_assert_uint_eq(dups, 2);
    ck_assert_uint_eq(flows, 0);
}
END_TEST

/* Three flow starts under one id: the second and the third each count. */
START_TEST(every_further_flow_start_counts)
{
    CUpti_ActivityAPI recs[] = {
        api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, 301, 10, 11),
        api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, 301, 12, 13),
        api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, 301, 9, 20),
    };
    uint64_t dups, flows;
    feed(recs, 3, &dups, &flows);
    ck_assert_uint_eq(dups, 2);
    ck_assert_uint_eq(flows, 2);
}
END_TEST

Suite *audit_suite(void)
{
    Suite *s = suite_create("audit");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, two_flow_starts_after_a_record_that_starts_none);
    tcase_add_test(tc, one_flow_start_among_others);
    tcase_add_test(tc, every_further_flow_start_counts);
    suite_add_tcase(s, tc);
    return s;
}

/* audit.h - FT_CUPTI_AUDIT: which CPU-side activity records of the application's
 * profiler share a correlation id.
 *
 * torch.profiler's Kineto links each CPU-side API record that starts a flow (a launch,
 * a copy or set, a synchronize: runtime records; cuLaunchKernel[Ex]: driver records) to
 * its GPU work by correlation id, and asserts when two such records carry the same id
 * (collection.cpp, setParents: "inserted.second INTERNAL ASSERT FAILED"). The audit
 * stands between libcupti and the application's buffer callbacks: the buffer-requested
 * callback is the application's, passed through; the buffer-completed one first reads
 * the buffer's records (cuptiActivityGetNextRecord, read only: nothing written,
 * reordered or freed), keeps one entry per correlation id of the API records
 * (CUPTI_ACTIVITY_KIND_RUNTIME, DRIVER, INTERNAL_LAUNCH_API), logs every id seen twice
 * (both records: kind, callback id, function name, thread, timestamps), then hands the
 * buffer to the application's callback unchanged.
 *
 * Owns: the application's callbacks (atomics: CUPTI calls the trampolines from its own
 * threads, perhaps while the application registers again), the table of ids and the
 * pair counts (audit.lock: buffers may complete on several threads at once).
 */
#ifndef FT_CUPTI_AUDIT_H
#define FT_CUPTI_AUDIT_H

#include <stddef.h>
#include <stdint.h>

/* Looks up a function of the libcupti the application uses, by name; NULL if absent. */
typedef void *(*ft_cupti_audit_lookup_fn)(const char *name);

/* The callbacks to register with libcupti in place of the application's (`requested`,
 * `completed`: CUpti_BuffersCallbackRequestFunc and ...CompleteFunc, as void *). 0 and
 * the trampolines in *req_out and *done_out; -1 (nothing changed) when libcupti lacks
 * cuptiActivityGetNextRecord. `lookup` finds it (and cuptiGetCallbackName) in that
 * libcupti; it is called here, not later. */
int ft_cupti_audit_wrap(ft_cupti_audit_lookup_fn lookup, void *requested, void *completed, void **req_out,
                        void **done_out);

/* The exit line (FT_INFO): records read, ids seen twice, and the pairs of calls that
 * shared one, most frequent first; nothing when the audit never ran. */
void ft_cupti_audit_report(void);

/* For tests and the report: API records read, and ids seen twice of which both records
 * start a flow for Kineto (the assert's case). */
void ft_cupti_audit_counts(uint64_t *records, uint64_t *duplicates, uint64_t *flow_duplicates);

#endif

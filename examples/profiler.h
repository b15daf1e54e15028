/* profiler.h - model --profile-from N: the program profiles itself with CUPTI, as
 * torch.profiler (Kineto) does, to test that FlexTensor hands CUPTI over. */
#ifndef MODEL_PROFILER_H
#define MODEL_PROFILER_H

/* Subscribes, enables driver-API callbacks and the kernel and copy activity kinds,
 * registers the activity buffers. 0, or -1 with a message on stderr (the subscribe
 * failing: error 39 when another subscriber holds CUPTI). */
int profiler_start(void);
/* Flushes the records, prints what was recorded ("profiler: ..."), disables the
 * kinds and unsubscribes. 0, or -1 with a message. */
int profiler_stop(void);

#endif

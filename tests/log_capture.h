/* log_capture.h - the log into a pipe for a unit test (tests/check_log.c): in fork
 * mode the redirection dies with the test's process. */
#ifndef FT_TESTS_LOG_CAPTURE_H
#define FT_TESTS_LOG_CAPTURE_H

void log_capture_start(void);   /* the log at level info into a pipe */
void log_capture_stop(void);    /* back to stderr, the pipe closed */
const char *log_captured(void); /* what was written since the last call */

#endif

/* check_main.c - one Check runner; SUITES_DEF names the X-macro list of suites it runs.
 * Fork mode (the default) gives each test a timeout and crash isolation; nothing here
 * touches CUDA before the fork. */
#include <check.h>
#include <stdlib.h>

#define FT_SUITE(name) Suite *name##_suite(void);
#include SUITES_DEF
#undef FT_SUITE

int main(void)
{
    SRunner *runner = srunner_create(NULL);
#define FT_SUITE(name) srunner_add_suite(runner, name##_suite());
#include SUITES_DEF
#undef FT_SUITE
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

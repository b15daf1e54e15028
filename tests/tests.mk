# tests/: Check unit suites, simulator suites, and scenario scripts.
#
#   build/tests/check_unit  core/ and config/ suites (tests/check_<module>.c)
#   build/tests/check_sim   simulator suites (tests/check_sim_<part>.c), run against
#                           build/sim with LD_LIBRARY_PATH
#   tests/scenario/*.sh     programs run under the shim, compared with runs without it
#
# tests/run.sh runs all three, every step even after a failure, and names the failed
# ones at the end.

UNIT_TEST_SRCS := $(filter-out tests/check_main.c tests/check_sim_%.c,$(wildcard tests/check_*.c))
SIM_TEST_SRCS  := $(wildcard tests/check_sim_*.c)
SCENARIOS      := $(sort $(filter-out tests/scenario/lib.sh,$(wildcard tests/scenario/*.sh)))

# --wrap=malloc: check_scan.c makes the heap fail on demand (__wrap_malloc forwards
# otherwise), to see what a scan set does when it cannot grow.
$(BUILD)/tests/check_unit: tests/check_main.c tests/unit_suites.def $(UNIT_TEST_SRCS) $(CORE_OBJS) $(CONFIG_OBJS) $(BUILD)/cupti/audit.o
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -DSUITES_DEF='"unit_suites.def"' -Itests -o $@ \
	    tests/check_main.c $(UNIT_TEST_SRCS) $(CORE_OBJS) $(CONFIG_OBJS) $(BUILD)/cupti/audit.o $(INIH_LIB) \
	    $(FT_LDFLAGS) -Wl,--wrap=malloc $(CHECK_LIBS) -lm

$(BUILD)/tests/check_sim: tests/check_main.c tests/sim_suites.def $(SIM_TEST_SRCS) $(SIM_LIBS) $(BUILD)/core/plan.o $(BUILD)/core/residency.o
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -DSUITES_DEF='"sim_suites.def"' -Itests -Itests/sim -o $@ \
	    tests/check_main.c $(SIM_TEST_SRCS) $(BUILD)/core/plan.o $(BUILD)/core/residency.o -L$(BUILD)/sim -lcudart -lcuda \
	    $(FT_LDFLAGS) $(CHECK_LIBS) -ldl -lm

TEST_BINS := $(BUILD)/tests/check_unit $(BUILD)/tests/check_sim

# Another interposer, preloaded with the shim by tests/scenario/interposers.sh.
$(BUILD)/tests/libinterposer_getpid.so: tests/interposer_getpid.c
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -shared -o $@ $< $(FT_LDFLAGS) -ldl

# A profiler's NVTX injection stand-in, for tests/scenario/own_ranges.sh.
$(BUILD)/tests/libnvtx_probe.so: tests/nvtx_probe.c
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -shared -o $@ $< $(FT_LDFLAGS)

all: $(BUILD)/tests/libinterposer_getpid.so $(BUILD)/tests/libnvtx_probe.so

# A sanitizer build (the Makefile's SAN): every error ends the program that has it, and
# the scenarios preload the sanitizer's runtime ahead of the shim (SAN_PRELOAD, read by
# tests/scenario/lib.sh), as it must come first in a program that is not instrumented.
ifneq ($(SAN),)
check: export SAN_PRELOAD := $(shell $(CC) -print-file-name=lib$(SAN_RT).so)
check: export ASAN_OPTIONS := detect_leaks=1
check: export UBSAN_OPTIONS := print_stacktrace=1
check: export TSAN_OPTIONS := halt_on_error=1:second_deadlock_stack=1
# Check's timeouts, and check_plan.c's bound on a plan's time, are the plain build's.
check: export CK_TIMEOUT_MULTIPLIER := $(if $(filter thread,$(SAN)),50,5)
endif

check: all $(TEST_BINS)
	@BUILD=$(BUILD) bash tests/run.sh $(SCENARIOS)

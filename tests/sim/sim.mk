# tests/sim/: the simulated CUDA device. Three libraries with the real sonames, built
# against the real CUDA headers, into $(BUILD)/sim with dev symlinks so that tests
# link with -L$(BUILD)/sim -lcudart -lcuda and run with LD_LIBRARY_PATH=$(BUILD)/sim.
#
#   libcuda.so.1     the driver: owns all state (drv_*.c)
#   libcudart.so.13  the runtime: dlopens libcuda.so.1, uses cuGetProcAddress (rt.c)
#   libcupti.so.13   CUPTI callbacks and activity records (cupti.c)

SIM_DIR        := $(BUILD)/sim
SIM_DRV_SRCS   := tests/sim/drv_api.c tests/sim/drv_mem.c tests/sim/drv_exec.c tests/sim/drv_kernel.c tests/sim/drv_graph.c
SIM_DRV_OBJS   := $(SIM_DRV_SRCS:%.c=$(BUILD)/%.o)
SIM_RT_OBJS    := $(BUILD)/tests/sim/rt.o
SIM_CUPTI_OBJS := $(BUILD)/tests/sim/cupti.o
SIM_LIBS       := $(SIM_DIR)/libcuda.so.1 $(SIM_DIR)/libcudart.so.13 $(SIM_DIR)/libcupti.so.13

# The simulator's link flags are spelled out rather than taken from FT_LDFLAGS, so
# that target-specific additions made for test binaries never leak into them; a
# sanitizer build (Makefile's SAN) links its runtime.
SIM_LDFLAGS := -shared -pthread -Wl,-z,defs -Wl,--no-undefined $(SAN_FLAGS) $(LDFLAGS)

all: $(SIM_LIBS)

# The simulator's test runner (its rule is in tests/tests.mk) also depends on these.
$(BUILD)/tests/check_sim: tests/sim/sim_test.h tests/sim/simcuda.h tests/sim/drv_procs.def

$(SIM_DIR)/libcuda.so.1: $(SIM_DRV_OBJS) tests/sim/libcuda.map
	@mkdir -p $(dir $@)
	$(CC) $(SIM_LDFLAGS) -Wl,-soname,libcuda.so.1 -Wl,--version-script=tests/sim/libcuda.map \
	    -o $@ $(SIM_DRV_OBJS) -lm
	ln -sf libcuda.so.1 $(SIM_DIR)/libcuda.so

$(SIM_DIR)/libcudart.so.13: $(SIM_RT_OBJS) tests/sim/libcudart.map
	@mkdir -p $(dir $@)
	$(CC) $(SIM_LDFLAGS) -Wl,-soname,libcudart.so.13 -Wl,--version-script=tests/sim/libcudart.map \
	    -Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN' -o $@ $(SIM_RT_OBJS) -ldl
	ln -sf libcudart.so.13 $(SIM_DIR)/libcudart.so

$(SIM_DIR)/libcupti.so.13: $(SIM_CUPTI_OBJS) tests/sim/libcupti.map
	@mkdir -p $(dir $@)
	$(CC) $(SIM_LDFLAGS) -Wl,-soname,libcupti.so.13 -Wl,--version-script=tests/sim/libcupti.map \
	    -Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN' -o $@ $(SIM_CUPTI_OBJS) -ldl
	ln -sf libcupti.so.13 $(SIM_DIR)/libcupti.so

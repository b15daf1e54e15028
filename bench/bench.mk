# bench/: `make bench-core` builds and runs the CPU-only benchmarks of discovery's
# per-launch work and of the argument scan on a real model's buffers (GPU benchmarks are in bench/run.sh).
$(BUILD)/bench/disc_cost: bench/disc_cost.c $(CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ $^ $(FT_LDFLAGS)

$(BUILD)/bench/scan_replay: bench/scan_replay.c $(CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ $^ $(FT_LDFLAGS)

.PHONY: bench-core
bench-core: $(BUILD)/bench/disc_cost $(BUILD)/bench/scan_replay
	$(BUILD)/bench/disc_cost
	$(BUILD)/bench/scan_replay

# The launch-cost benchmark, on the simulator (always buildable) and on a GPU.
$(BUILD)/bench/launch_cost-sim: bench/launch_cost.c examples/kernels_sim.c examples/kernels.h $(SIM_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ bench/launch_cost.c examples/kernels_sim.c \
	    -L$(BUILD)/sim -lcudart -Wl,-rpath,'$$ORIGIN/../sim' $(FT_LDFLAGS)

$(BUILD)/bench/launch_cost-gpu: bench/launch_cost.c $(BUILD)/examples/kernels.o
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ bench/launch_cost.c $(BUILD)/examples/kernels.o \
	    -L$(CUDA_HOME)/lib64 -lcudart -lstdc++ $(FT_LDFLAGS)

.PHONY: gpu-bench
gpu-bench: $(BUILD)/bench/launch_cost-gpu
all: $(BUILD)/bench/disc_cost $(BUILD)/bench/scan_replay $(BUILD)/bench/launch_cost-sim

# Host instructions FlexTensor adds per launch, counted by callgrind on the simulator
# (bench/shim_instructions.sh; needs valgrind).
.PHONY: bench-instructions
bench-instructions: $(BUILD)/libflextensor.so $(BUILD)/bench/launch_cost-sim
	bash bench/shim_instructions.sh

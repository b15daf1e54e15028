# examples/: the example model, built for the simulated device (always) and for a
# real GPU (`make gpu-example`, needs nvcc).
EXAMPLE_HOST := examples/model.c examples/minblas.c examples/profiler.c

$(BUILD)/examples/model-sim: $(EXAMPLE_HOST) examples/kernels_sim.c examples/*.h $(SIM_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ $(EXAMPLE_HOST) examples/kernels_sim.c \
	    -L$(BUILD)/sim -lcudart -Wl,-rpath,'$$ORIGIN/../sim' $(FT_LDFLAGS) -ldl

# The same model linked to libcupti, so that --profile-from calls it directly (as
# libtorch_cuda.so does) rather than through dlopen and dlsym.
$(BUILD)/examples/model-sim-cupti: $(EXAMPLE_HOST) examples/kernels_sim.c examples/*.h $(SIM_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -DMODEL_CUPTI_LINKED -o $@ $(EXAMPLE_HOST) examples/kernels_sim.c \
	    -L$(BUILD)/sim -lcudart -lcupti -Wl,-rpath,'$$ORIGIN/../sim' $(FT_LDFLAGS) -ldl

# The same model with the simulated runtime linked in statically, as JAX's XLA links the
# CUDA runtime: no libcudart in the process, only the driver, which the runtime reaches
# with dlopen and cuGetProcAddress (tests/scenario/real_patterns.sh, static-runtime).
$(BUILD)/examples/model-sim-static: $(EXAMPLE_HOST) examples/kernels_sim.c examples/*.h $(SIM_RT_OBJS) $(SIM_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ $(EXAMPLE_HOST) examples/kernels_sim.c $(SIM_RT_OBJS) \
	    -Wl,-rpath,'$$ORIGIN/../sim' $(FT_LDFLAGS) -ldl

# The same model as a library (model_main, model_set_hook), for a program that embeds
# it: tests/scenario/python.sh runs it from Python, whose hook calls the control API.
$(BUILD)/examples/libmodel-sim.so: $(EXAMPLE_HOST) examples/kernels_sim.c examples/*.h $(SIM_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -DMODEL_LIBRARY -shared -o $@ $(EXAMPLE_HOST) examples/kernels_sim.c \
	    -L$(BUILD)/sim -lcudart -Wl,-rpath,'$$ORIGIN/../sim' $(FT_LDFLAGS) -ldl

$(BUILD)/examples/kernels.o: examples/kernels.cu examples/kernels.h
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -arch=sm_90 -I. -c $< -o $@

$(BUILD)/examples/model-gpu: $(EXAMPLE_HOST) examples/*.h $(BUILD)/examples/kernels.o
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ $(EXAMPLE_HOST) $(BUILD)/examples/kernels.o \
	    -L$(CUDA_HOME)/lib64 -lcudart -lstdc++ $(FT_LDFLAGS) -ldl

.PHONY: gpu-example
gpu-example: $(BUILD)/examples/model-gpu

all: $(BUILD)/examples/model-sim $(BUILD)/examples/model-sim-cupti $(BUILD)/examples/model-sim-static \
     $(BUILD)/examples/libmodel-sim.so

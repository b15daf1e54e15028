# shim/: libflextensor.so, the only place that exports symbols. shim.def is the one
# list of exports; the version script is generated from it.
SHIM_SRCS := $(wildcard shim/*.c)
SHIM_SRCS := $(filter-out shim/exports.c shim/nvtx.c,$(SHIM_SRCS))
SHIM_OBJS := $(SHIM_SRCS:%.c=$(BUILD)/%.o)
# The per-launch thread-locals (the recursion depth, the engine's state) are read with
# a %fs-relative load instead of a __tls_get_addr call: the library is preloaded, and
# its 108 bytes of TLS fit the static block even when it is dlopened (mimalloc does
# the same). Not the NVTX injection library, which NVTX dlopens.
$(SHIM_OBJS) $(CUPTI_OBJS): FT_CFLAGS += -ftls-model=initial-exec

# The exported dlsym (driver.c) runs inside the sanitizer runtime's own start-up, which
# looks up the functions it intercepts before its shadow memory exists: that file is
# built without instrumentation.
$(BUILD)/shim/driver.o: FT_CFLAGS += -fno-sanitize=all

# A saved profile names the FlexTensor version that wrote it (the Makefile's FT_VERSION).
$(BUILD)/shim/savedprof.o: FT_CFLAGS += -DFT_VERSION='"$(FT_VERSION)"'
$(BUILD)/shim/savedprof.o: Makefile

$(BUILD)/shim/exports.map: shim/exports.c shim/shim.def
	@mkdir -p $(dir $@)
	$(CC) -E -P -I. -x c shim/exports.c -o $@

$(BUILD)/libflextensor.so: $(SHIM_OBJS) $(CUPTI_OBJS) $(CORE_OBJS) $(CONFIG_OBJS) $(BUILD)/shim/exports.map
	$(CC) -shared -o $@ $(SHIM_OBJS) $(CUPTI_OBJS) $(CORE_OBJS) $(CONFIG_OBJS) $(INIH_LIB) \
	    -Wl,--version-script=$(BUILD)/shim/exports.map -Wl,--exclude-libs,ALL \
	    -Wl,-z,defs -Wl,--no-undefined $(FT_LDFLAGS) -ldl

all: $(BUILD)/libflextensor.so

# libflextensor-nvtx.so: the NVTX injection library (shim/nvtx.c), apart so that the
# shim exports nothing but the CUDA API and ft_*; it exports InitializeInjectionNvtx2
# alone and reaches the shim through ft_nvtx_range_push / _pop.
$(BUILD)/libflextensor-nvtx.so: shim/nvtx.c shim/nvtx.map
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -shared -o $@ shim/nvtx.c -Wl,--version-script=shim/nvtx.map \
	    -Wl,-z,defs $(FT_LDFLAGS) -ldl

all: $(BUILD)/libflextensor-nvtx.so

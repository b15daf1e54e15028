# shim/: libflextensor.so, the only place that exports symbols. shim.def is the one
# list of exports; the version script is generated from it.
SHIM_SRCS := $(wildcard shim/*.c)
SHIM_SRCS := $(filter-out shim/exports.c,$(SHIM_SRCS))
SHIM_OBJS := $(SHIM_SRCS:%.c=$(BUILD)/%.o)

$(BUILD)/shim/exports.map: shim/exports.c shim/shim.def
	@mkdir -p $(dir $@)
	$(CC) -E -P -I. -x c shim/exports.c -o $@

$(BUILD)/libflextensor.so: $(SHIM_OBJS) $(CUPTI_OBJS) $(CORE_OBJS) $(CONFIG_OBJS) $(BUILD)/shim/exports.map
	$(CC) -shared -o $@ $(SHIM_OBJS) $(CUPTI_OBJS) $(CORE_OBJS) $(CONFIG_OBJS) $(INIH_LIB) \
	    -Wl,--version-script=$(BUILD)/shim/exports.map -Wl,--exclude-libs,ALL \
	    -Wl,-z,defs -Wl,--no-undefined $(FT_LDFLAGS) -ldl

all: $(BUILD)/libflextensor.so

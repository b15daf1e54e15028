# tools/: ft-run and ft-trace. They link core/ and config/, never the shim.
# --version prints the Makefile's FT_VERSION; an edit of the Makefile rebuilds them.
TOOLS_OBJS := $(BUILD)/tools/ft_run.o $(BUILD)/tools/ft_trace.o $(BUILD)/tools/ft_timeline.o
$(TOOLS_OBJS): FT_CFLAGS += -DFT_VERSION='"$(FT_VERSION)"'
$(TOOLS_OBJS): Makefile

$(BUILD)/bin/ft-run: $(BUILD)/tools/ft_run.o $(CORE_OBJS) $(CONFIG_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(INIH_LIB) $(FT_LDFLAGS) -lm

$(BUILD)/bin/ft-trace: $(BUILD)/tools/ft_trace.o $(BUILD)/tools/ft_timeline.o $(CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(FT_LDFLAGS) -lm

all: $(BUILD)/bin/ft-run $(BUILD)/bin/ft-trace

# A known trace for tests/scenario/trace_discovery.sh: the discovery engine fed a
# synthetic launch stream, written as the shim writes it.
$(BUILD)/tests/trace_fixture: $(BUILD)/tests/trace_fixture.o $(CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(FT_LDFLAGS) -lm

all: $(BUILD)/tests/trace_fixture

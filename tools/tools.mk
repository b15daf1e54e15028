# tools/: ft-run and ft-trace. They link core/ and config/, never the shim.
$(BUILD)/bin/ft-run: $(BUILD)/tools/ft_run.o $(CORE_OBJS) $(CONFIG_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(INIH_LIB) $(FT_LDFLAGS) -lm

$(BUILD)/bin/ft-trace: $(BUILD)/tools/ft_trace.o $(CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(FT_LDFLAGS) -lm

all: $(BUILD)/bin/ft-run $(BUILD)/bin/ft-trace

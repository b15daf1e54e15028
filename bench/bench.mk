# bench/: `make bench-core` builds and runs the CPU-only benchmark of discovery's
# per-launch work (GPU benchmarks are in bench/run.sh).
$(BUILD)/bench/disc_cost: bench/disc_cost.c $(CORE_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ $^ $(FT_LDFLAGS)

.PHONY: bench-core
bench-core: $(BUILD)/bench/disc_cost
	$(BUILD)/bench/disc_cost

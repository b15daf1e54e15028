# config/: defaults < INI file < FT_* environment < explicit settings.
# options.def is the one table of options; docs/configuration.md is generated from it.
CONFIG_SRCS := $(filter-out config/gen_doc.c,$(wildcard config/*.c))
CONFIG_OBJS := $(CONFIG_SRCS:%.c=$(BUILD)/%.o)

CONFIG_DOC_GEN := $(BUILD)/bin/ft-config-doc

$(CONFIG_DOC_GEN): $(BUILD)/config/gen_doc.o $(CONFIG_OBJS) $(BUILD)/core/log.o $(BUILD)/core/size.o
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -o $@ $^ $(INIH_LIB) $(FT_LDFLAGS) -lm

all: $(CONFIG_DOC_GEN)

# Regenerates the committed documentation (always: a hand edit is overwritten).
.PHONY: config-docs
docs: config-docs
config-docs: $(CONFIG_DOC_GEN)
	$(CONFIG_DOC_GEN) > docs/configuration.md.tmp && mv docs/configuration.md.tmp docs/configuration.md

# Fails when the committed documentation no longer matches options.def.
.PHONY: config-doc-check
config-doc-check: $(CONFIG_DOC_GEN)
	@$(CONFIG_DOC_GEN) | diff -u docs/configuration.md - > /dev/null || \
	  { echo "docs/configuration.md is stale: run 'make docs'"; \
	    $(CONFIG_DOC_GEN) | diff -u docs/configuration.md - | head -40; exit 1; }

check: config-doc-check

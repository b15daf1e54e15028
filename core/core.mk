# core/: the engine's decisions, free of dlsym and the environment (docs/architecture.md,
# "Dependencies between folders").
CORE_SRCS := $(wildcard core/*.c)
CORE_OBJS := $(CORE_SRCS:%.c=$(BUILD)/%.o)

# The device checksum kernel, as PTX text in a C header (committed: the build needs no
# nvcc). `make ptx` regenerates it where nvcc exists; PTX ISA 7.0 keeps it loadable by
# drivers from CUDA 11.0 on.
.PHONY: ptx
ptx:
	$(NVCC) -arch=compute_75 -ptx core/checksum.cu -o $(BUILD)/checksum.ptx
	{ echo '/* Generated from core/checksum.cu by `make ptx`: do not edit. */'; \
	  echo 'static const char ft_checksum_ptx[] ='; \
	  sed -e 's/^\.version .*/.version 7.0/' -e '/^\/\//d' -e '/^$$/d' \
	      -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' $(BUILD)/checksum.ptx; \
	  echo '    ;'; } > core/checksum_ptx.h

# FlexTensor build.  `make` builds the shim, the tools and the simulated device;
# `make check` runs every test; `make demo` runs the example model under the shim.
#
# Each folder owns a fragment (<dir>/<dir>.mk) that appends to the variables below,
# so that the top level stays a list of goals.

# The version ft-run --version and ft-trace --version print; its one source.
FT_VERSION := 0.1.0

CUDA_HOME ?= /usr/local/cuda
PREFIX    ?= /usr/local
DESTDIR   ?=
# Where `make install` puts the flextensor Python module (python/flextensor): python3's
# directory for pure modules under PREFIX, unless given.
PYTHON      ?= python3
PYTHON_SITE ?= $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib", vars={"base": "$(PREFIX)", "platbase": "$(PREFIX)"}))' 2>/dev/null)
# SAN=address (ASan and UBSan) or SAN=thread (TSan) instruments everything, the shim,
# the tools, the tests and the simulated device, in a folder of its own. A sanitizer
# error ends the program (UBSan recovers by default) so that a test fails on it.
SAN ?=
ifeq ($(SAN),address)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_RT    := asan
else ifeq ($(SAN),thread)
SAN_FLAGS := -fsanitize=thread
SAN_RT    := tsan
else ifneq ($(SAN),)
$(error SAN=$(SAN): use SAN=address or SAN=thread)
endif
ifneq ($(SAN),)
SAN_FLAGS += -fno-omit-frame-pointer
endif
BUILD     ?= build$(if $(SAN_RT),-$(SAN_RT))
# The same tree named by its absolute path (tests/scenario/install.sh passes one) is the
# relative one: otherwise an object rebuilt then records its header dependencies under
# the absolute name, and a later plain `make` never sees them.
override BUILD := $(patsubst $(CURDIR)/%,%,$(BUILD))

# The set-up comes before anything below asks the system (pkg-config, libinih.a):
# tools/setup-deps.sh installs the Debian packages that the build and the tests need
# when they are missing, or fails with one line saying what to do (also for a missing
# CUDA Toolkit), which becomes make's error. `make SETUP=0` skips it, for libraries
# that come from elsewhere; `make clean` needs none; `make -n` installs nothing.
SETUP ?= 1
ifeq ($(SETUP),1)
ifneq ($(filter-out clean,$(or $(MAKECMDGOALS),all)),)
FT_SETUP_ERROR := $(shell CUDA_HOME='$(CUDA_HOME)' bash tools/setup-deps.sh \
                    $(if $(findstring n,$(firstword -$(MAKEFLAGS))),--check))
ifneq ($(.SHELLSTATUS),0)
$(error $(or $(FT_SETUP_ERROR),flextensor: tools/setup-deps.sh failed))
endif
endif
endif

CC      ?= gcc
NVCC    ?= $(CUDA_HOME)/bin/nvcc
CFLAGS  ?= -O2 -g
CUDA_INC := -I$(CUDA_HOME)/include -I$(CUDA_HOME)/extras/CUPTI/include

# Every build type hides symbols by default (a library inside someone else's process
# exports only what it means to); exports go through
# version scripts only. Thread-locals use the initial-exec model: the shim is loaded at
# start-up (LD_PRELOAD), and a launch reads several of them, each a call to
# __tls_get_addr otherwise (bench/shim_instructions.sh).
FT_CFLAGS := -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fPIC -pthread \
             -ftls-model=initial-exec -fvisibility=hidden -I. $(CUDA_INC) $(CFLAGS) $(SAN_FLAGS)
FT_LDFLAGS := -pthread $(SAN_FLAGS) $(LDFLAGS)

CHECK_LIBS := $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm)
# Debian keeps it under the multiarch triplet: x86_64-linux-gnu, aarch64-linux-gnu.
INIH_LIB   := $(firstword $(wildcard /usr/lib/$(shell $(CC) -print-multiarch)/libinih.a \
                                     /usr/lib/libinih.a /usr/local/lib/libinih.a))

.PHONY: all check demo install clean gpu-check docs
all:

include core/core.mk
include config/config.mk
include cupti/cupti.mk
include shim/shim.mk
include tools/tools.mk
include tests/sim/sim.mk
include examples/examples.mk
include tests/tests.mk
include bench/bench.mk

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(FT_CFLAGS) -MMD -MP -c $< -o $@

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

demo: all
	@bash examples/demo.sh

gpu-check:
	@bash bench/run.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin \
	           $(DESTDIR)$(PREFIX)/lib/flextensor/sim $(DESTDIR)$(PREFIX)/include \
	           $(DESTDIR)$(PREFIX)/share/doc/flextensor
	install -m 755 $(BUILD)/libflextensor.so $(BUILD)/libflextensor-nvtx.so $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/bin/ft-run $(BUILD)/bin/ft-trace $(DESTDIR)$(PREFIX)/bin/
	cp -P $(BUILD)/sim/*.so* $(DESTDIR)$(PREFIX)/lib/flextensor/sim/
	install -m 644 shim/flextensor.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/flextensor/
	$(if $(PYTHON_SITE),install -d $(DESTDIR)$(PYTHON_SITE)/flextensor)
	$(if $(PYTHON_SITE),install -m 644 python/flextensor/*.py $(DESTDIR)$(PYTHON_SITE)/flextensor/)

clean:
	rm -rf $(BUILD)

# core/: the engine, free of dlsym and the environment (STYLE.md rule 3).
CORE_SRCS := $(wildcard core/*.c)
CORE_OBJS := $(CORE_SRCS:%.c=$(BUILD)/%.o)

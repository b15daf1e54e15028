# config/: defaults < INI file < FT_* environment < explicit settings.
CONFIG_SRCS := $(wildcard config/*.c)
CONFIG_OBJS := $(CONFIG_SRCS:%.c=$(BUILD)/%.o)

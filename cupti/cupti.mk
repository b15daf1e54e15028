# cupti/: the observer. Only this folder includes <cupti.h>; libcupti is dlopened.
CUPTI_SRCS := $(wildcard cupti/*.c)
CUPTI_OBJS := $(CUPTI_SRCS:%.c=$(BUILD)/%.o)

/* gen_doc.c - ft-config-doc: writes docs/configuration.md (from options.def) to
 * stdout. Not part of the library (CONFIG_OBJS); `make docs` runs it and
 * `make config-doc-check` compares its output with the committed file. */
#include <stdio.h>
#include <unistd.h>

#include "config/config.h"

int main(void)
{
    if (ft_config_write_doc(STDOUT_FILENO) != 0) {
        perror("ft-config-doc: write");
        return 1;
    }
    return 0;
}

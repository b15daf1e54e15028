/* ownranges.c - FlexTensor's own work as NVTX ranges of the "flextensor" domain, named
 * "ft:load unit.7" (a prefetch on the side stream), "ft:miss unit.2" (a load on demand,
 * on the program's stream) and "ft:unload unit.3", so that Nsight Systems shows them
 * beside the program's kernels (a range around the calls that enqueue a load is
 * projected onto the copies they enqueue).
 *
 * Only when the process's NVTX injection (NVTX_INJECTION64_PATH) is another tool's:
 * without one, nobody would see the ranges; with FlexTensor's own (libflextensor-
 * nvtx.so, which ft-run sets unless a tool did), they would be read as the program's
 * ranges and name units. Decided once, at set-up (ft_hooks_init), where no lock of the
 * engine is held: the domain's creation is NVTX's first call, which loads the injection.
 *
 * Owns: `on` and the domain, written once at set-up, read after. */
#define _GNU_SOURCE
#include "shim/engine.h"

#include <nvtx3/nvToolsExt.h>

static int on;
static nvtxDomainHandle_t domain;

void own_ranges_setup(void)
{
    const char *inj = getenv("NVTX_INJECTION64_PATH");
    if (inj == NULL || inj[0] == '\0' || strstr(inj, "libflextensor-nvtx") != NULL)
        return;
    domain = nvtxDomainCreateA("flextensor");
    on = domain != NULL;
}

void own_range_push(const char *what, int unit)
{
    if (!on)
        return;
    char msg[128];
    snprintf(msg, sizeof msg, "ft:%s %s", what, ft_disc_unit(disc, (size_t)unit)->name);
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = msg;
    nvtxDomainRangePushEx(domain, &a);
}

void own_range_pop(void)
{
    if (on)
        nvtxDomainRangePop(domain);
}

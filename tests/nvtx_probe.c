/* nvtx_probe.c - an NVTX injection library standing in for a profiler's (Nsight
 * Systems'), for tests/scenario/own_ranges.sh: every domain created and every range
 * pushed and popped in a domain, one line each, to the file FT_TEST_NVTX_LOG names
 * ("domain NAME", "push DOMAIN MESSAGE", "pop DOMAIN"). Ranges of the default domain
 * (the program's) are written as "push - MESSAGE". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

static FILE *out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    nvtxDomainHandle_t h;
    char name[64];
} domains[16];
static int n_domains;

static const char *domain_name(nvtxDomainHandle_t h)
{
    for (int i = 0; i < n_domains; i++)
        if (domains[i].h == h)
            return domains[i].name;
    return "-";
}

static void line(const char *fmt, const char *a, const char *b)
{
    pthread_mutex_lock(&lock);
    if (out != NULL) {
        fprintf(out, fmt, a, b);
        fflush(out);
    }
    pthread_mutex_unlock(&lock);
}

static nvtxDomainHandle_t NVTX_API domain_create_a(const char *name)
{
    pthread_mutex_lock(&lock);
    nvtxDomainHandle_t h = (nvtxDomainHandle_t)(uintptr_t)(n_domains + 1);
    if (n_domains < 16) {
        domains[n_domains].h = h;
        snprintf(domains[n_domains].name, sizeof domains[n_domains].name, "%s", name ? name : "");
        n_domains++;
    }
    pthread_mutex_unlock(&lock);
    line("domain %s%s\n", name ? name : "", "");
    return h;
}

static int NVTX_API domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
    const char *msg = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii ? a->message.ascii : "?";
    line("push %s %s\n", domain_name(d), msg);
    return 0;
}

static int NVTX_API domain_pop(nvtxDomainHandle_t d)
{
    line("pop %s%s\n", domain_name(d), "");
    return 0;
}

static int NVTX_API push_a(const char *msg)
{
    line("push - %s%s\n", msg ? msg : "?", "");
    return 0;
}

static int NVTX_API pop(void)
{
    line("pop -%s%s\n", "", "");
    return 0;
}

static void set_slot(NvtxFunctionTable table, unsigned size, unsigned id, NvtxFunctionPointer fn)
{
    if (table != NULL && id < size && table[id] != NULL)
        *table[id] = fn;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get);

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
    const char *path = getenv("FT_TEST_NVTX_LOG");
    if (path == NULL || get == NULL)
        return 0;
    pthread_mutex_lock(&lock);
    if (out == NULL)
        out = fopen(path, "a");
    pthread_mutex_unlock(&lock);
    const NvtxExportTableCallbacks *cb = (const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
    if (out == NULL || cb == NULL || cb->GetModuleFunctionTable == NULL)
        return 0;
    NvtxFunctionTable t = NULL;
    unsigned n = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n)) {
        set_slot(t, n, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)push_a);
        set_slot(t, n, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)pop);
    }
    t = NULL;
    n = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n)) {
        set_slot(t, n, NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)domain_create_a);
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)domain_push_ex);
        set_slot(t, n, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)domain_pop);
    }
    return 1;
}

/* nvtx.c - libflextensor-nvtx.so, FlexTensor's NVTX injection library: the ranges an
 * application pushes (nvtxRangePushA, nvtxDomainRangePushEx, ...) name the units
 * discovery finds.
 *
 * NVTX 3 is header-only in the application; at its first call it dlopens the library
 * named by NVTX_INJECTION64_PATH and calls InitializeInjectionNvtx2 with a way to
 * reach its function tables. That entry point is this library's only export, so that
 * libflextensor.so exports nothing beyond the CUDA API and ft_*: the ranges reach the
 * shim through its control API (ft_nvtx_range_push / _pop), looked up in the process.
 * ft-run sets the variable to this library unless another tool (Nsight) already did;
 * by hand: NVTX_INJECTION64_PATH=<libflextensor-nvtx.so>, with libflextensor.so
 * preloaded. The callbacks run on the application's thread and only record the range
 * stack.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#include <nvtx3/nvToolsExt.h>

#define NVTX_EXPORT __attribute__((visibility("default")))

static void (*push_fn)(const char *);
static void (*pop_fn)(void);
static __thread int depth;

static const char *message_of(const nvtxEventAttributes_t *a)
{
    if (a != NULL && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii != NULL)
        return a->message.ascii;
    /* Wide and registered strings (NCCL's ranges) are not decoded: a range without a
     * name, which names no unit. */
    return NULL;
}

static int NVTX_API range_push_a(const char *message)
{
    push_fn(message);
    return depth++;
}

static int NVTX_API range_push_ex(const nvtxEventAttributes_t *attr)
{
    push_fn(message_of(attr));
    return depth++;
}

static int NVTX_API range_pop(void)
{
    pop_fn();
    return depth > 0 ? --depth : -1;
}

static int NVTX_API domain_range_push_ex(nvtxDomainHandle_t domain, const nvtxEventAttributes_t *attr)
{
    return range_push_ex(attr);
}

static int NVTX_API domain_range_pop(nvtxDomainHandle_t domain)
{
    return range_pop();
}

/* Sets slot `id` of a module's table when the table has it. */
static void set_slot(NvtxFunctionTable table, unsigned size, unsigned id, NvtxFunctionPointer fn)
{
    if (table != NULL && id < size && table[id] != NULL)
        *table[id] = fn;
}

NVTX_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

NVTX_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
    /* FlexTensor preloaded and enabled, or "no tool": NVTX turns its calls into no-ops. */
    int (*enabled)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ft_enabled");
    push_fn = (void (*)(const char *))dlsym(RTLD_DEFAULT, "ft_nvtx_range_push");
    pop_fn = (void (*)(void))dlsym(RTLD_DEFAULT, "ft_nvtx_range_pop");
    if (enabled == NULL || push_fn == NULL || pop_fn == NULL || !enabled() || get_export_table == NULL)
        return 0;
    const NvtxExportTableCallbacks *cb =
        (const NvtxExportTableCallbacks *)get_export_table(NVTX_ETID_CALLBACKS);
    if (cb == NULL || cb->GetModuleFunctionTable == NULL)
        return 0;
    NvtxFunctionTable table = NULL;
    unsigned size = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size)) {
        set_slot(table, size, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)range_push_a);
        set_slot(table, size, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)range_push_ex);
        set_slot(table, size, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)range_pop);
    }
    table = NULL;
    size = 0;
    if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) {
        set_slot(table, size, NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)domain_range_push_ex);
        set_slot(table, size, NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)domain_range_pop);
    }
    return 1;
}

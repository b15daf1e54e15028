/* check_sim_kernel.c - every kernel launch path, kernel metadata as measured on the
 * H200, cuGetProcAddress and the export list, devices and error reporting. */
#include "sim_test.h"

#include "core/checksum.h"
#include "core/checksum_ptx.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

/* axpy(float a, const float *x, float *y, int n, char tag): y = a*x + y, and records
 * its dims and tag. Parameter offsets (natural alignment): 0, 8, 16, 24, 28. */
static simcuda_dims_t g_dims;
static char g_tag;
static void axpy_body(void **args, const simcuda_dims_t *d)
{
    float a = *(float *)args[0];
    const float *x = *(const float **)args[1];
    float *y = *(float **)args[2];
    int n = *(int *)args[3];
    g_tag = *(char *)args[4];
    g_dims = *d;
    for (int i = 0; i < n; i++)
        y[i] = a * x[i] + y[i];
}
static char axpy_stub;

static const size_t AXPY_OFF[5] = {0, 8, 16, 24, 28};

static void register_axpy(void)
{
    simcuda_kernel_desc_t d = {.name = "_Z4axpyfPKfPfic", .fn = axpy_body, .cost_ns = 5000, .nparams = 5,
                               .param_size = {4, 8, 8, 4, 1}};
    ck_assert_int_eq(simcudaRegisterKernel(&axpy_stub, &d), 0);
}

static int register_axpy_again(void)
{
    simcuda_kernel_desc_t d = {.name = "_Z4axpyfPKfPfic", .fn = axpy_body, .cost_ns = 5000, .nparams = 5,
                               .param_size = {4, 8, 8, 4, 1}};
    return simcudaRegisterKernel(&axpy_stub, &d);
}

typedef struct {
    float *x, *y;
    int n;
} bufs_t;

static bufs_t setup_bufs(void)
{
    bufs_t b = {NULL, NULL, 256};
    float h[256];
    for (int i = 0; i < 256; i++)
        h[i] = (float)i;
    RT_OK(cudaMalloc((void **)&b.x, sizeof h));
    RT_OK(cudaMalloc((void **)&b.y, sizeof h));
    RT_OK(cudaMemcpy(b.x, h, sizeof h, cudaMemcpyHostToDevice));
    RT_OK(cudaMemset(b.y, 0, sizeof h));
    return b;
}

/* y must hold mult * i after the launches. */
static void check_y(bufs_t b, float mult)
{
    float h[256];
    RT_OK(cudaMemcpy(h, b.y, sizeof h, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 256; i++)
        ck_assert_float_eq(h[i], mult * (float)i);
}

START_TEST(test_cuda_launch_kernel)
{
    register_axpy();
    bufs_t b = setup_bufs();
    float a = 2.0f;
    char tag = 'L';
    void *args[] = {&a, &b.x, &b.y, &b.n, &tag};
    dim3 g = {4, 2, 1}, blk = {64, 1, 1};
    RT_OK(cudaLaunchKernel(&axpy_stub, g, blk, args, 128, 0));
    check_y(b, 2.0f);
    ck_assert_uint_eq(g_dims.grid[0], 4);
    ck_assert_uint_eq(g_dims.grid[1], 2);
    ck_assert_uint_eq(g_dims.block[0], 64);
    ck_assert_uint_eq(g_dims.shared_mem, 128);
    ck_assert_int_eq(g_tag, 'L');
    /* Launch validation. */
    dim3 zero = {0, 1, 1}, big = {2048, 1, 1};
    ck_assert_int_eq(cudaLaunchKernel(&axpy_stub, zero, blk, args, 0, 0), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaLaunchKernel(&axpy_stub, g, big, args, 0, 0), cudaErrorInvalidValue);
    static char unknown;
    ck_assert_int_eq(cudaLaunchKernel(&unknown, g, blk, args, 0, 0), cudaErrorInvalidDeviceFunction);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidDeviceFunction);
}
END_TEST

START_TEST(test_nvcc_launch_path)
{
    register_axpy();
    bufs_t b = setup_bufs();
    cudaKernel_t k1 = NULL, k2 = NULL;
    cudaFunction_t f = NULL;
    RT_OK(__cudaGetKernel(&k1, &axpy_stub));
    RT_OK(cudaGetKernel(&k2, &axpy_stub));
    RT_OK(cudaGetFuncBySymbol(&f, &axpy_stub));
    ck_assert_ptr_nonnull(k1);
    ck_assert_ptr_eq(k1, k2);
    /* As on the H200: cudaGetFuncBySymbol gives a CUfunction, not the CUkernel. */
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_ne((void *)k1, (void *)f);
    const char *name;
    CU_OK(cuFuncGetName(&name, (CUfunction)f));
    ck_assert_int_eq(cuKernelGetName(&name, (CUkernel)f), CUDA_ERROR_INVALID_HANDLE);
    static char unknown;
    ck_assert_int_eq(cudaGetKernel(&k2, &unknown), cudaErrorInvalidDeviceFunction);
    float a = 1.0f;
    char tag = 'N';
    void *args[] = {&a, &b.x, &b.y, &b.n, &tag};
    RT_OK(__cudaLaunchKernel(k1, ONE, ONE, args, 0, 0));
    RT_OK(__cudaLaunchKernel_ptsz(k1, ONE, ONE, args, 0, 0));
    RT_OK(cudaStreamSynchronize(cudaStreamPerThread));
    check_y(b, 2.0f);
    ck_assert_int_eq(g_tag, 'N');
    ck_assert_int_eq(__cudaLaunchKernel((cudaKernel_t)&unknown, ONE, ONE, args, 0, 0),
                     cudaErrorInvalidResourceHandle);
}
END_TEST

START_TEST(test_launch_ex_and_cooperative)
{
    register_axpy();
    bufs_t b = setup_bufs();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    float a = 1.0f;
    char tag = 'X';
    void *args[] = {&a, &b.x, &b.y, &b.n, &tag};
    cudaLaunchAttribute attr = {.id = cudaLaunchAttributeCooperative, .val = {.cooperative = 1}};
    cudaLaunchConfig_t cfg = {.gridDim = {3, 1, 1}, .blockDim = {32, 1, 1}, .dynamicSmemBytes = 64,
                              .stream = s, .attrs = &attr, .numAttrs = 1};
    RT_OK(cudaLaunchKernelExC(&cfg, &axpy_stub, args));
    RT_OK(cudaStreamSynchronize(s));
    ck_assert_uint_eq(g_dims.grid[0], 3);
    ck_assert_uint_eq(g_dims.shared_mem, 64);
    RT_OK(cudaLaunchCooperativeKernel(&axpy_stub, ONE, ONE, args, 0, s));
    RT_OK(cudaStreamSynchronize(s));
    check_y(b, 2.0f);
}
END_TEST

/* Kernel `name` of FlexTensor's PTX (core/checksum_ptx.h): the PTX names the entry, and
 * loading it gives the simulated device's C reference under that name. */
static CUfunction ptx_kernel(const char *name)
{
    char entry[64];
    snprintf(entry, sizeof entry, ".entry %s(", name);
    ck_assert_ptr_nonnull(strstr(ft_checksum_ptx, entry));
    RT_OK(cudaFree(0));
    CUmodule mod;
    CUfunction f;
    CU_OK(cuModuleLoadData(&mod, ft_checksum_ptx));
    CU_OK(cuModuleGetFunction(&f, mod, name));
    return f;
}

/* FlexTensor's checksum kernel: its PTX names the entry the shim asks for, and loading
 * it gives the simulated device's C reference, which adds the sum to *out (over two
 * launches, the sum of both); a changed word changes it. */
START_TEST(test_checksum_kernel_from_ptx)
{
    CUfunction f = ptx_kernel(FT_CHECKSUM_KERNEL);
    enum { N = 4096 };
    static uint64_t host[N];
    for (int i = 0; i < N; i++)
        host[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    uint64_t *dev, *sum, got = 0;
    RT_OK(cudaMalloc((void **)&dev, sizeof host));
    RT_OK(cudaMalloc((void **)&sum, sizeof *sum));
    RT_OK(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice));
    RT_OK(cudaMemset(sum, 0, sizeof *sum));
    uint64_t half = N / 2, salt = (uint64_t)(uintptr_t)dev / 8, salt2 = salt + half;
    uint64_t *p2 = dev + half;
    void *a1[] = {&dev, &half, &salt, &sum}, *a2[] = {&p2, &half, &salt2, &sum};
    CU_OK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, a1, NULL));
    CU_OK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, a2, NULL));
    RT_OK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
    ck_assert_uint_eq(got, ft_checksum_host(host, N, salt));
    host[17] ^= 1;
    ck_assert_uint_ne(got, ft_checksum_host(host, N, salt));
    RT_OK(cudaFree(dev));
    RT_OK(cudaFree(sum));
}
END_TEST

/* The copy back of a unit found changed (FT_COPY_BACK_KERNEL, from the same PTX): into
 * pinned host memory, at its own address, only when the sum differs from the expected. */
START_TEST(test_copy_back_kernel_from_ptx)
{
    CUfunction f = ptx_kernel(FT_COPY_BACK_KERNEL);
    enum { N = 1024 };
    uint64_t *dev, *sum, *host;
    RT_OK(cudaMalloc((void **)&dev, N * sizeof *dev));
    RT_OK(cudaMalloc((void **)&sum, sizeof *sum));
    RT_OK(cudaHostAlloc((void **)&host, N * sizeof *host, cudaHostAllocDefault));
    RT_OK(cudaMemset(dev, 0x5a, N * sizeof *dev));
    memset(host, 0, N * sizeof *host);
    uint64_t s = 7, n = N;
    RT_OK(cudaMemcpy(sum, &s, sizeof s, cudaMemcpyHostToDevice));
    void *dst;
    RT_OK(cudaHostGetDevicePointer(&dst, host, 0));
    uint64_t same = 7, other = 8;
    void *a_same[] = {&dev, &n, &sum, &same, &dst}, *a_other[] = {&dev, &n, &sum, &other, &dst};
    CU_OK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, a_same, NULL));
    RT_OK(cudaDeviceSynchronize());
    ck_assert_uint_eq(host[0], 0);
    ck_assert_uint_eq(host[N - 1], 0);
    CU_OK(cuLaunchKernel(f, 4, 1, 1, 256, 1, 1, 0, NULL, a_other, NULL));
    RT_OK(cudaDeviceSynchronize());
    ck_assert_uint_eq(host[0], 0x5a5a5a5a5a5a5a5aull);
    ck_assert_uint_eq(host[N - 1], 0x5a5a5a5a5a5a5a5aull);
    RT_OK(cudaFree(dev));
    RT_OK(cudaFree(sum));
    RT_OK(cudaFreeHost(host));
}
END_TEST

START_TEST(test_driver_launch_params_and_extra)
{
    register_axpy();
    bufs_t b = setup_bufs();
    cudaKernel_t k;
    RT_OK(cudaGetKernel(&k, &axpy_stub));
    CUfunction f = (CUfunction)k;
    float a = 1.0f;
    char tag = 'P';
    void *params[] = {&a, &b.x, &b.y, &b.n, &tag};
    CU_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));

    /* The packed buffer cuBLAS passes through `extra`. */
    unsigned char buf[32] = {0};
    size_t size = sizeof buf;
    memcpy(buf + AXPY_OFF[0], &a, 4);
    memcpy(buf + AXPY_OFF[1], &b.x, 8);
    memcpy(buf + AXPY_OFF[2], &b.y, 8);
    memcpy(buf + AXPY_OFF[3], &b.n, 4);
    buf[AXPY_OFF[4]] = 'E';
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CU_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
    CUlaunchConfig cfg = {.gridDimX = 2, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
                          .blockDimZ = 1, .hStream = NULL};
    CU_OK(cuLaunchKernelEx(&cfg, f, NULL, extra));
    CU_OK(cuLaunchKernelEx(&cfg, f, params, NULL));
    CU_OK(cuCtxSynchronize());
    check_y(b, 4.0f);
    ck_assert_uint_eq(g_dims.grid[0], 2);
    /* An empty extra list beside kernelParams is ignored (as on the H200). */
    void *empty[] = {CU_LAUNCH_PARAM_END};
    CU_OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, empty));
    CU_OK(cuCtxSynchronize());
    check_y(b, 5.0f);
    /* Both, or a buffer too small for the parameters, is invalid. */
    ck_assert_int_eq(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, extra), CUDA_ERROR_INVALID_VALUE);
    size = 16;
    ck_assert_int_eq(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra), CUDA_ERROR_INVALID_VALUE);
    /* An unknown handle. */
    static char junk[64];
    ck_assert_int_eq(cuLaunchKernel((CUfunction)junk, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                     CUDA_ERROR_INVALID_HANDLE);
    ck_assert_int_eq(cuLaunchKernelEx(&cfg, (CUfunction)junk, params, NULL), CUDA_ERROR_INVALID_HANDLE);
}
END_TEST

/* Arguments are copied at enqueue: changing them after the call has no effect. */
START_TEST(test_args_copied_at_enqueue)
{
    register_axpy();
    sim_test_register();
    bufs_t b = setup_bufs();
    cudaStream_t s;
    RT_OK(cudaStreamCreate(&s));
    static volatile int flag;
    RT_OK(launch_sleepy(&flag, 50000, s));
    float a = 3.0f;
    char tag = 'C';
    void *args[] = {&a, &b.x, &b.y, &b.n, &tag};
    RT_OK(cudaLaunchKernel(&axpy_stub, ONE, ONE, args, 0, s));
    a = 100.0f;
    tag = 'Z';
    RT_OK(cudaStreamSynchronize(s));
    check_y(b, 3.0f);
    ck_assert_int_eq(g_tag, 'C');
}
END_TEST

START_TEST(test_kernel_metadata_as_on_h200)
{
    register_axpy();
    RT_OK(cudaFree(0));
    cudaKernel_t rk;
    RT_OK(cudaGetKernel(&rk, &axpy_stub));
    CUkernel k = (CUkernel)rk;
    const char *name = NULL;
    CU_OK(cuKernelGetName(&name, k));
    ck_assert_str_eq(name, "_Z4axpyfPKfPfic");
    for (size_t i = 0; i < 5; i++) {
        size_t off = 99, size = 99;
        CU_OK(cuKernelGetParamInfo(k, i, &off, &size));
        ck_assert_uint_eq(off, AXPY_OFF[i]);
    }
    size_t off, size;
    CU_OK(cuKernelGetParamInfo(k, 4, &off, &size));
    ck_assert_uint_eq(size, 1);
    ck_assert_int_eq(cuKernelGetParamInfo(k, 5, &off, &size), CUDA_ERROR_INVALID_VALUE);
    /* The measured quirk: the CUfunction queries refuse a CUkernel handle. */
    ck_assert_int_eq(cuFuncGetName(&name, (CUfunction)k), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_int_eq(cuFuncGetParamInfo((CUfunction)k, 0, &off, &size), CUDA_ERROR_INVALID_HANDLE);
    ck_assert_int_eq(cuFuncGetName(&name, (CUfunction)k), 400);
    /* ...but work on its CUfunction view, which also launches. */
    CUfunction f;
    CU_OK(cuKernelGetFunction(&f, k));
    ck_assert_ptr_ne((void *)f, (void *)k);
    CU_OK(cuFuncGetName(&name, f));
    ck_assert_str_eq(name, "_Z4axpyfPKfPfic");
    CU_OK(cuFuncGetParamInfo(f, 3, &off, &size));
    ck_assert_uint_eq(off, 24);
    ck_assert_int_eq(cuKernelGetName(&name, (CUkernel)f), CUDA_ERROR_INVALID_HANDLE);
    int regs;
    CU_OK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
    ck_assert_int_eq(regs, 1024);
}
END_TEST

START_TEST(test_library_and_module_lookup)
{
    register_axpy();
    drv_setup();
    CUlibrary lib;
    CUkernel k;
    CU_OK(cuLibraryLoadData(&lib, "image", NULL, NULL, 0, NULL, NULL, 0));
    CU_OK(cuLibraryGetKernel(&k, lib, "_Z4axpyfPKfPfic"));
    cudaKernel_t rk;
    RT_OK(cudaGetKernel(&rk, &axpy_stub));
    ck_assert_ptr_eq((void *)k, (void *)rk);
    ck_assert_int_eq(cuLibraryGetKernel(&k, lib, "nope"), CUDA_ERROR_NOT_FOUND);
    CUmodule mod;
    CUfunction f;
    CU_OK(cuModuleLoadData(&mod, "image"));
    CU_OK(cuModuleGetFunction(&f, mod, "_Z4axpyfPKfPfic"));
    const char *name;
    CU_OK(cuFuncGetName(&name, f));
    ck_assert_str_eq(name, "_Z4axpyfPKfPfic");
}
END_TEST

/* An over-aligned parameter (a 128-byte CUtensorMap is 64-aligned). */
static void tmap_body(void **args, const simcuda_dims_t *d)
{
    (void)d;
    int *out = *(int **)args[0];
    const unsigned char *tm = args[1];
    *out = tm[0] + tm[127];
}
static char tmap_stub;

START_TEST(test_param_align_override)
{
    simcuda_kernel_desc_t d = {.name = "tmap", .fn = tmap_body, .cost_ns = 1, .nparams = 2,
                               .param_size = {8, 128}};
    size_t align[SIMCUDA_MAX_PARAMS] = {0, 64};
    ck_assert_int_eq(simcudaRegisterKernelEx(&tmap_stub, &d, align), 0);
    align[1] = 48;
    static char bad_stub;
    ck_assert_int_eq(simcudaRegisterKernelEx(&bad_stub, &d, align), cudaErrorInvalidValue);
    cudaKernel_t k;
    RT_OK(cudaGetKernel(&k, &tmap_stub));
    size_t off, size;
    CU_OK(cuKernelGetParamInfo((CUkernel)k, 1, &off, &size));
    ck_assert_uint_eq(off, 64);
    ck_assert_uint_eq(size, 128);
    int *out;
    RT_OK(cudaMallocHost((void **)&out, sizeof *out));
    unsigned char tm[128] = {0};
    tm[0] = 5;
    tm[127] = 7;
    void *args[] = {&out, tm};
    RT_OK(cudaLaunchKernel(&tmap_stub, ONE, ONE, args, 0, 0));
    RT_OK(cudaDeviceSynchronize());
    ck_assert_int_eq(*out, 12);
}
END_TEST

/* cuGetProcAddress takes base names and hands out the exported versioned symbol;
 * every entry of the proc table is exported under that name. */
START_TEST(test_get_proc_address_and_exports)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(h);
    __typeof__(cuGetProcAddress_v2) *gpa = dlsym(h, "cuGetProcAddress_v2");
    ck_assert_ptr_nonnull(gpa);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
#define SIM_PROC(base, sym)                                                                  \
    fn = NULL;                                                                               \
    ck_assert_int_eq(gpa(#base, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS); \
    ck_assert_int_eq(st, CU_GET_PROC_ADDRESS_SUCCESS);                                       \
    ck_assert_ptr_eq(fn, dlsym(h, #sym));
    /* An older ABI goes to a caller asking for a version before the current one's. */
#define SIM_PROC_OLD(base, sym, below)                                                          \
    fn = NULL;                                                                                  \
    ck_assert_int_eq(gpa(#base, &fn, below - 1, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS); \
    ck_assert_ptr_eq(fn, dlsym(h, #sym));                                                       \
    ck_assert_int_eq(gpa(#base, &fn, below, CU_GET_PROC_ADDRESS_DEFAULT, &st), CUDA_SUCCESS);     \
    ck_assert_ptr_ne(fn, dlsym(h, #sym));
#include "drv_procs.def"
#undef SIM_PROC
#undef SIM_PROC_OLD
    CU_OK(gpa("cuMemAlloc", &fn, 13000, 0, &st));
    ck_assert_ptr_eq(fn, (void *)cuMemAlloc);  /* cuda.h maps cuMemAlloc to cuMemAlloc_v2 */
    CU_OK(gpa("cuLaunchKernelEx", &fn, 13000, 0, &st));
    ck_assert_ptr_eq(fn, (void *)cuLaunchKernelEx);
    ck_assert_int_eq(gpa("cuNoSuchThing", &fn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
    ck_assert_int_eq(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    ck_assert_ptr_null(fn);
    /* The runtime's way to the same table. */
    enum cudaDriverEntryPointQueryResult rst;
    RT_OK(cudaGetDriverEntryPointByVersion("cuStreamDestroy", &fn, 13000, cudaEnableDefault, &rst));
    ck_assert_ptr_eq(fn, dlsym(h, "cuStreamDestroy_v2"));
    ck_assert_int_eq(cudaGetDriverEntryPointByVersion("cuNope", &fn, 13000, cudaEnableDefault, &rst),
                     cudaErrorSymbolNotFound);
    ck_assert_int_eq(rst, cudaDriverEntryPointSymbolNotFound);
    /* Nothing internal leaks: no symbol outside the API's namespaces. */
    ck_assert_ptr_null(dlsym(h, "sim_api_enter"));
    ck_assert_ptr_null(dlsym(h, "g_sim"));
    dlclose(h);
}
END_TEST

/* The export lists: every defined dynamic symbol of each library, read from its ELF
 * file. libcuda exports exactly the proc table plus the simcuda* extension; the
 * runtime and CUPTI only their API's prefixes, under their version nodes. */
typedef int (*name_ok_fn)(const char *);
static char g_bad_export[128];

static int count_exports(const char *lib, name_ok_fn ok)
{
    void *h = dlopen(lib, RTLD_NOW);
    ck_assert_ptr_nonnull(h);
    struct link_map *lm;
    ck_assert_int_eq(dlinfo(h, RTLD_DI_LINKMAP, &lm), 0);
    FILE *f = fopen(lm->l_name, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    char *img = malloc((size_t)size);
    fseek(f, 0, SEEK_SET);
    ck_assert_int_eq(fread(img, 1, (size_t)size, f), size);
    fclose(f);
    ElfW(Ehdr) *eh = (ElfW(Ehdr) *)img;
    ElfW(Shdr) *sh = (ElfW(Shdr) *)(img + eh->e_shoff);
    int n = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM)
            continue;
        ElfW(Sym) *sym = (ElfW(Sym) *)(img + sh[i].sh_offset);
        const char *str = img + sh[sh[i].sh_link].sh_offset;
        for (size_t k = 0; k < sh[i].sh_size / sizeof *sym; k++) {
            if (sym[k].st_shndx == SHN_UNDEF || ELF64_ST_BIND(sym[k].st_info) == STB_LOCAL)
                continue;
            const char *name = str + sym[k].st_name;
            if (ELF64_ST_TYPE(sym[k].st_info) == STT_OBJECT && strncmp(name, "libcu", 5) == 0)
                continue;  /* the version node's own symbol */
            if (!*name)
                continue;
            if (!ok(name))
                snprintf(g_bad_export, sizeof g_bad_export, "%s: %s", lib, name);
            n++;
        }
    }
    free(img);
    dlclose(h);
    return n;
}

static int driver_name_ok(const char *name)
{
#define SIM_PROC(base, sym) if (strcmp(name, #sym) == 0) return 1;
#define SIM_PROC_OLD(base, sym, below) if (strcmp(name, #sym) == 0) return 1;
#include "drv_procs.def"
#undef SIM_PROC
#undef SIM_PROC_OLD
    return strcmp(name, "simcudaVirtualNow") == 0 || strcmp(name, "simcudaHostNow") == 0 ||
           strcmp(name, "simcudaInjectFault") == 0 || strcmp(name, "simcudaDeviceMemUsed") == 0 ||
           strcmp(name, "simcudaUninterposed") == 0;
}

static int runtime_name_ok(const char *name)
{
    return strncmp(name, "cuda", 4) == 0 || strncmp(name, "__cuda", 6) == 0 || strncmp(name, "simcuda", 7) == 0;
}

static int cupti_name_ok(const char *name) { return strncmp(name, "cupti", 5) == 0; }

START_TEST(test_export_lists)
{
    int nprocs = 0;
#define SIM_PROC(base, sym) nprocs++;
#define SIM_PROC_OLD(base, sym, below) nprocs++;
#include "drv_procs.def"
#undef SIM_PROC
#undef SIM_PROC_OLD
    g_bad_export[0] = 0;
    ck_assert_int_eq(count_exports("libcuda.so.1", driver_name_ok), nprocs + 5);
    ck_assert_int_gt(count_exports("libcudart.so.13", runtime_name_ok), 60);
    ck_assert_int_gt(count_exports("libcupti.so.13", cupti_name_ok), 20);
    ck_assert_msg(g_bad_export[0] == 0, "unexpected export %s", g_bad_export);
    /* The runtime's symbols carry the real version node. */
    void *h = dlopen("libcudart.so.13", RTLD_NOW);
    ck_assert_ptr_nonnull(dlvsym(h, "cudaMalloc", "libcudart.so.13"));
    ck_assert_ptr_nonnull(dlvsym(h, "simcudaRegisterKernel", "libcudart.so.13"));
    void *c = dlopen("libcupti.so.13", RTLD_NOW);
    ck_assert_ptr_nonnull(dlvsym(c, "cuptiSubscribe", "libcupti.so.13"));
}
END_TEST

/* The runtime never links libcuda: it must reach it through dlopen. */
static int g_cudart_needs_libcuda = -1;
static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libcudart.so"))
        return 0;
    g_cudart_needs_libcuda = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        ElfW(Dyn) *dyn = (ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        const char *strtab = NULL;
        for (ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_STRTAB)
                strtab = (const char *)d->d_un.d_ptr;
        for (ElfW(Dyn) *d = dyn; strtab && d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_NEEDED && strstr(strtab + d->d_un.d_val, "libcuda.so"))
                g_cudart_needs_libcuda = 1;
    }
    return 1;
}

START_TEST(test_runtime_does_not_link_driver)
{
    RT_OK(cudaFree(0));
    dl_iterate_phdr(phdr_cb, NULL);
    ck_assert_int_eq(g_cudart_needs_libcuda, 0);
}
END_TEST

START_TEST(test_devices_and_versions)
{
    setenv("FTSIM_DEVICE_COUNT", "3", 1);
    setenv("FTSIM_DEVICE_MEM", "4GiB", 1);
    int n, v;
    RT_OK(cudaGetDeviceCount(&n));
    ck_assert_int_eq(n, 3);
    struct cudaDeviceProp p;
    RT_OK(cudaGetDeviceProperties(&p, 2));
    ck_assert_str_eq(p.name, "FlexTensor simulated device");
    ck_assert_int_eq(p.major, 9);
    ck_assert_int_eq(p.minor, 0);
    ck_assert_uint_eq(p.totalGlobalMem, 4ull << 30);
    ck_assert_int_eq(p.warpSize, 32);
    ck_assert_int_eq(p.unifiedAddressing, 1);
    RT_OK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 1));
    ck_assert_int_eq(v, 9);
    ck_assert_int_eq(cudaGetDeviceProperties(&p, 3), cudaErrorInvalidDevice);
    RT_OK(cudaDriverGetVersion(&v));
    ck_assert_int_eq(v, 13000);
    RT_OK(cudaRuntimeGetVersion(&v));
    ck_assert_int_eq(v, 13000);
    CUdevice dev;
    CU_OK(cuDeviceGet(&dev, 1));
    char name[64];
    CU_OK(cuDeviceGetName(name, sizeof name, dev));
    ck_assert_str_eq(name, "FlexTensor simulated device");
    CU_OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
    ck_assert_int_eq(v, 1);
    size_t total;
    CU_OK(cuDeviceTotalMem(&total, dev));
    ck_assert_uint_eq(total, 4ull << 30);
    ck_assert_int_eq(cuDeviceGet(&dev, 3), CUDA_ERROR_INVALID_DEVICE);
    /* Contexts: the runtime's primary context is the driver's. */
    CUcontext cur, prim;
    RT_OK(cudaSetDevice(2));
    RT_OK(cudaFree(0));
    CU_OK(cuCtxGetCurrent(&cur));
    CU_OK(cuDevicePrimaryCtxRetain(&prim, 2));
    ck_assert_ptr_eq(cur, prim);
    CU_OK(cuCtxGetDevice(&dev));
    ck_assert_int_eq(dev, 2);
    unsigned flags;
    int active;
    CU_OK(cuDevicePrimaryCtxGetState(2, &flags, &active));
    ck_assert_int_eq(active, 1);
    CU_OK(cuDevicePrimaryCtxRelease(2));
}
END_TEST

/* No peer access in the simulator: a kernel given another device's memory faults when
 * it runs (sticky on its context), and a stream of another device's context is not a
 * handle the current one knows. */
START_TEST(test_other_devices_memory_and_streams)
{
    setenv("FTSIM_DEVICE_COUNT", "2", 1);
    register_axpy();
    bufs_t b = setup_bufs(); /* on device 0 */
    cudaStream_t s0;
    RT_OK(cudaStreamCreate(&s0));
    float a = 1.0f;
    char tag = 'P';
    void *args[] = {&a, &b.x, &b.y, &b.n, &tag};
    dim3 g = {1, 1, 1}, blk = {64, 1, 1};
    RT_OK(cudaSetDevice(1));
    ck_assert_int_eq(cudaLaunchKernel(&axpy_stub, g, blk, args, 0, s0), cudaErrorInvalidResourceHandle);
    stderr_capture_begin();
    RT_OK(cudaLaunchKernel(&axpy_stub, g, blk, args, 0, 0));
    cudaError_t e = cudaDeviceSynchronize();
    const char *err = stderr_capture_end();
    ck_assert_int_eq(e, cudaErrorIllegalAddress);
    ck_assert_ptr_nonnull(strstr(err, "device 0's memory, no peer access"));
    RT_OK(cudaSetDevice(0)); /* device 0's context is untouched */
    RT_OK(cudaLaunchKernel(&axpy_stub, g, blk, args, 0, s0));
    check_y(b, 1.0f);
}
END_TEST

START_TEST(test_driver_needs_init_and_context)
{
    CUdeviceptr p;
    int n;
    ck_assert_int_eq(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&n));
    ck_assert_int_eq(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    drv_setup();
    CU_OK(cuMemAlloc(&p, 16));
    CU_OK(cuMemFree(p));
    ck_assert_int_eq(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemFree(0));  /* as on the H200 */
}
END_TEST

START_TEST(test_error_strings_and_last_error)
{
    const char *s;
    CU_OK(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
    ck_assert_str_eq(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
    CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    ck_assert_str_eq(s, "out of memory");
    ck_assert_int_eq(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    ck_assert_str_eq(cudaGetErrorName(cudaErrorNotPermitted), "cudaErrorNotPermitted");
    ck_assert_str_eq(cudaGetErrorString(cudaErrorIllegalAddress), "an illegal memory access was encountered");
    void *p;
    ck_assert_int_eq(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaPeekAtLastError(), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaPeekAtLastError(), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGetLastError(), cudaErrorInvalidValue);
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    RT_OK(cudaMalloc(&p, 16));
    ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
    void *q = (void *)1;
    RT_OK(cudaMalloc(&q, 0));  /* as on the H200: success, pointer left alone */
    ck_assert_ptr_eq(q, (void *)1);
}
END_TEST

/* Registration (nvcc's job, done in constructors) neither starts the device nor reads
 * FTSIM_ variables: a forked test can still configure it afterwards. */
START_TEST(test_registration_does_not_start_device)
{
    register_axpy();
    setenv("FTSIM_DEVICE_MEM", "96MiB", 1);
    size_t fr, total;
    RT_OK(cudaMemGetInfo(&fr, &total));
    ck_assert_uint_eq(total, 96u << 20);
    ck_assert_int_eq(register_axpy_again(), 0);  /* same kernel again: harmless */
}
END_TEST

Suite *sim_kernel_suite(void)
{
    Suite *s = suite_create("sim_kernel");
    TCase *tc = tcase_create("kernel");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_cuda_launch_kernel);
    tcase_add_test(tc, test_nvcc_launch_path);
    tcase_add_test(tc, test_launch_ex_and_cooperative);
    tcase_add_test(tc, test_driver_launch_params_and_extra);
    tcase_add_test(tc, test_args_copied_at_enqueue);
    tcase_add_test(tc, test_kernel_metadata_as_on_h200);
    tcase_add_test(tc, test_library_and_module_lookup);
    tcase_add_test(tc, test_param_align_override);
    tcase_add_test(tc, test_get_proc_address_and_exports);
    tcase_add_test(tc, test_runtime_does_not_link_driver);
    tcase_add_test(tc, test_export_lists);
    tcase_add_test(tc, test_checksum_kernel_from_ptx);
    tcase_add_test(tc, test_copy_back_kernel_from_ptx);
    tcase_add_test(tc, test_devices_and_versions);
    tcase_add_test(tc, test_other_devices_memory_and_streams);
    tcase_add_test(tc, test_driver_needs_init_and_context);
    tcase_add_test(tc, test_error_strings_and_last_error);
    tcase_add_test(tc, test_registration_does_not_start_device);
    suite_add_tcase(s, tc);
    return s;
}

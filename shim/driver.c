/* driver.c - reaching the CUDA driver the way libraries do, and handing them our
 * wrappers: the wrapped dlsym (libcublasLt and libcudart dlopen libcuda and look up
 * its entry points themselves) and the wrapped cuGetProcAddress (how libcudart,
 * cuBLAS, Triton and XLA get every other driver function).
 *
 * Owns: the real dlsym and the real cuGetProcAddress, and the exported dlsym's answer
 * relative to its caller.
 *
 * glibc's dlsym finds its caller from its return address: dlsym(RTLD_NEXT, ...) searches
 * the objects after the caller, RTLD_DEFAULT the caller's scopes. Called from a wrapper
 * in libflextensor.so, it would answer for libflextensor.so: an interposer preloaded
 * after us that wraps getpid through dlsym(RTLD_NEXT, "getpid") got its own getpid
 * back and recursed, even with FT_ENABLED=0. So the exported dlsym makes no call of
 * its own unless FlexTensor may replace the answer:
 *  - a lookup it leaves alone (FlexTensor off, or a name not starting with "cu"; the
 *    "cu" names include libcupti's, whose wrappers hand CUPTI over) is a
 *    jump to the real dlsym with the caller's return address in place (x86-64, the
 *    assembly below): glibc answers exactly as without FlexTensor, for every handle.
 *  - a "cu" name while FlexTensor is active is looked up here relative to the caller
 *    (next_after, from_default), then possibly replaced by our wrapper.
 * Elsewhere than x86-64 every lookup takes the second path.
 *
 * This runs before main, possibly before our own init and a sanitizer's: no
 * allocation and no logging on the path of a lookup we leave alone.
 */
#define _GNU_SOURCE
#include "shim/shim.h"

#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>

#include "core/log.h"

#undef cuGetProcAddress

typedef void *(*dlsym_fn_t)(void *, const char *);
typedef CUresult (*gpa_v2_fn_t)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn_t)(const char *, void **, int, cuuint64_t);

static _Atomic(dlsym_fn_t) real_dlsym;
static _Atomic(gpa_v2_fn_t) real_gpa_v2;
static _Atomic(gpa_v1_fn_t) real_gpa_v1;

static dlsym_fn_t get_real_dlsym(void)
{
    dlsym_fn_t fn = atomic_load_explicit(&real_dlsym, memory_order_relaxed);
    if (fn == NULL) {
        /* dlvsym is not interposed; glibc 2.34 moved dlsym into libc. */
        fn = (dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (fn == NULL)
            fn = (dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        atomic_store_explicit(&real_dlsym, fn, memory_order_relaxed);
    }
    return fn;
}

/* The real dlsym called from here: RTLD_NEXT and RTLD_DEFAULT answer for
 * libflextensor.so, which is what FlexTensor's own lookups want. */
void *ft_shim_real_dlsym(void *handle, const char *name)
{
    dlsym_fn_t fn = get_real_dlsym();
    return fn ? fn(handle, name) : NULL;
}

/* --- lookups relative to the caller ------------------------------------------------
 * glibc gives no way to ask "the next definition after object X", so next_after walks
 * the loaded objects in load order (dl_iterate_phdr, under the loader's lock, so that
 * none is unloaded under the walk) and reads each one's dynamic symbol table itself;
 * the real dlsym is then asked, on that object alone, for the address (it resolves
 * IFUNCs and TLS and picks the default version), and the answer is kept only if it
 * lies in that object. No dl* call is made inside the walk: dlsym takes the loader's
 * other lock, and dlopen takes both in the other order. */

/* One object's dynamic symbol table, as mapped. Elf_Symndx: DT_HASH's entry type. */
typedef struct {
    const ElfW(Sym) *symtab;
    const char *strtab;
    const uint32_t *gnu_hash;
    const Elf_Symndx *sysv_hash;
    const ElfW(Half) *versym;
} dynsym_t;

static int read_dynsym(const struct dl_phdr_info *info, dynsym_t *d)
{
    memset(d, 0, sizeof *d);
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (dyn == NULL)
        return -1;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        /* glibc relocates these entries in place, except where .dynamic is read-only
         * (the vdso, some architectures): there they are still offsets. */
        ElfW(Addr) p = dyn->d_un.d_ptr;
        if (p < info->dlpi_addr)
            p += info->dlpi_addr;
        switch (dyn->d_tag) {
        case DT_SYMTAB: d->symtab = (const ElfW(Sym) *)p; break;
        case DT_STRTAB: d->strtab = (const char *)p; break;
        case DT_GNU_HASH: d->gnu_hash = (const uint32_t *)p; break;
        case DT_HASH: d->sysv_hash = (const Elf_Symndx *)p; break;
        case DT_VERSYM: d->versym = (const ElfW(Half) *)p; break;
        }
    }
    return d->symtab != NULL && d->strtab != NULL && (d->gnu_hash || d->sysv_hash) ? 0 : -1;
}

/* Whether symbol i defines name for a lookup without a version, as glibc's
 * check_match decides: defined, of a type dlsym returns, not local, not a hidden
 * (non-default) version. */
static int defines(const dynsym_t *d, uint32_t i, const char *name)
{
    const ElfW(Sym) *s = &d->symtab[i];
    unsigned type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
    const unsigned types = 1u << STT_NOTYPE | 1u << STT_OBJECT | 1u << STT_FUNC |
                           1u << STT_COMMON | 1u << STT_TLS | 1u << STT_GNU_IFUNC;
    if (s->st_shndx == SHN_UNDEF || (s->st_value == 0 && s->st_shndx != SHN_ABS && type != STT_TLS))
        return 0;
    if (!(types & (1u << type)) || (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE))
        return 0;
    if (d->versym != NULL && (d->versym[i] & 0x8000))
        return 0;
    return strcmp(name, d->strtab + s->st_name) == 0;
}

static int gnu_lookup(const dynsym_t *d, const char *name)
{
    const uint32_t *g = d->gnu_hash;
    uint32_t nbuckets = g[0], symoffset = g[1], bloom_words = g[2];
    if (nbuckets == 0)
        return 0;
    uint32_t h = 5381;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = h * 33 + *c;
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(g + 4) + bloom_words);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t i = buckets[h % nbuckets];
    if (i == 0 || i < symoffset)
        return 0;
    for (;; i++) {
        uint32_t h2 = chain[i - symoffset];
        if ((h | 1) == (h2 | 1) && defines(d, i, name))
            return 1;
        if (h2 & 1)
            return 0;
    }
}

static int sysv_lookup(const dynsym_t *d, const char *name)
{
    Elf_Symndx nbucket = d->sysv_hash[0];
    if (nbucket == 0)
        return 0;
    const Elf_Symndx *bucket = d->sysv_hash + 2, *chain = bucket + nbucket;
    unsigned long h = 0;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        h = (h << 4) + *c;
        unsigned long g = h & 0xf0000000ul;
        h ^= g >> 24;
        h &= ~g;
    }
    for (Elf_Symndx i = bucket[h % nbucket]; i != STN_UNDEF; i = chain[i])
        if (defines(d, (uint32_t)i, name))
            return 1;
    return 0;
}

static int holds(const struct dl_phdr_info *info, uintptr_t a)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && a - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz)
            return 1;
    }
    return 0;
}

/* The walk's state: the search starts after the object that holds `from`. */
typedef struct {
    uintptr_t from;
    const char *name;
    uintptr_t vdso; /* AT_SYSINFO_EHDR: the vdso is in the list, in no search scope */
    int past;
    int found;
    uintptr_t where;      /* out: an address in the defining object */
    char path[PATH_MAX];  /* out: its name, to pin it with dlopen */
} next_walk_t;

static int walk_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    next_walk_t *w = arg;
    dynsym_t d;
    if (!w->past) {
        w->past = holds(info, w->from);
        return 0;
    }
    /* No name: the main program, first in the list, never after a caller. */
    if (info->dlpi_name == NULL || info->dlpi_name[0] == '\0' || (w->vdso && holds(info, w->vdso)) ||
        read_dynsym(info, &d) != 0)
        return 0;
    if (!(d.gnu_hash ? gnu_lookup(&d, w->name) : sysv_lookup(&d, w->name)))
        return 0;
    size_t n = strlen(info->dlpi_name);
    if (n >= sizeof w->path)
        return 0;
    memcpy(w->path, info->dlpi_name, n + 1);
    w->where = 0;
    for (int i = 0; i < info->dlpi_phnum && w->where == 0; i++)
        if (info->dlpi_phdr[i].p_type == PT_LOAD)
            w->where = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    w->found = w->where != 0;
    return w->found;
}

static int in_object(const void *p, const struct link_map *map)
{
    Dl_info di;
    struct link_map *lm = NULL;
    return p != NULL && dladdr1(p, &di, (void **)&lm, RTLD_DL_LINKMAP) && lm == map;
}

/* A handle on the loaded object `map` (glibc's handles are link maps, but dlsym on
 * one that no dlopen returned crashes: an object loaded at start-up has no search list
 * of its own until dlopen makes it one), or NULL. Close it with dlclose. */
static void *open_loaded(const struct link_map *map)
{
    if (map->l_name == NULL || map->l_name[0] == '\0')
        return dlopen(NULL, RTLD_LAZY); /* the main program */
    return dlopen(map->l_name, RTLD_LAZY | RTLD_NOLOAD);
}

/* The object that holds code at `caller`, or NULL. */
static struct link_map *object_of(const void *caller)
{
    Dl_info di;
    struct link_map *map = NULL;
    return dladdr1(caller, &di, (void **)&map, RTLD_DL_LINKMAP) ? map : NULL;
}

/* name looked up in the search list of the object `map` (the object, then its
 * dependencies): a definition elsewhere than in `map` itself when `elsewhere`. */
static void *in_scope_of(struct link_map *map, const char *name, int elsewhere)
{
    void *h = open_loaded(map);
    if (h == NULL)
        return NULL;
    void *p = ft_shim_real_dlsym(h, name);
    dlclose(h);
    return elsewhere && in_object(p, map) ? NULL : p;
}

/* Leaves dlerror() saying "undefined symbol: name" for a lookup we answer NULL: every
 * dl* call that succeeds clears it (dlclose too), so the last call is a lookup that
 * fails, in the dynamic loader's own object (its scope is itself), whose handle is
 * never closed (the loader is never unloaded). glibc would name the caller's object
 * where this names the loader's. */
static void leave_error(const char *name)
{
    static _Atomic(void *) ldso_handle;
    void *h = atomic_load_explicit(&ldso_handle, memory_order_acquire);
    if (h == NULL) {
        unsigned long base = getauxval(AT_BASE);
        struct link_map *ldso = base != 0 ? object_of((void *)base) : NULL;
        void *none = NULL;
        if (ldso == NULL || ldso->l_name == NULL || (h = dlopen(ldso->l_name, RTLD_LAZY | RTLD_NOLOAD)) == NULL)
            return;
        if (!atomic_compare_exchange_strong(&ldso_handle, &none, h))
            h = none; /* another thread's; ours is one more reference, harmless */
    }
    (void)ft_shim_real_dlsym(h, name);
}

/* dlsym(RTLD_NEXT, name) for code at `caller`: the first definition in the objects
 * loaded after the caller's (glibc's answer for an object loaded at start-up, whose
 * search scope is the global one in that order), then, if there is none, the caller's
 * own dependencies (glibc searches a dlopened object's local scope, which holds those
 * loaded before it). NULL, with dlerror() set, when there is none. */
static void *next_after(const char *name, const void *caller)
{
    struct link_map *self = object_of(caller);
    if (self == NULL) {
        leave_error(name); /* glibc: "RTLD_NEXT used in code not dynamically loaded" */
        return NULL;
    }
    next_walk_t w;
    w.from = (uintptr_t)caller;
    w.name = name;
    w.vdso = getauxval(AT_SYSINFO_EHDR);
    /* A handful of rounds: one more each time the loader disagrees with our reading. */
    for (int round = 0; round < 16; round++) {
        w.past = w.found = 0;
        dl_iterate_phdr(walk_one, &w);
        if (!w.found)
            break;
        /* Pinned while asked: another thread may dlclose it once the walk is over. */
        void *h = dlopen(w.path, RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL) {
            void *p = ft_shim_real_dlsym(h, name);
            int ok = in_object(p, (const struct link_map *)h);
            dlclose(h);
            if (ok)
                return p;
        }
        w.from = w.where;
    }
    void *p = in_scope_of(self, name, 1);
    if (p == NULL)
        leave_error(name);
    return p;
}

/* dlsym(RTLD_DEFAULT, name) for code at `caller`: the global scope, then (for a
 * caller dlopened RTLD_LOCAL, whose scope glibc searches too) the caller's own. */
static void *from_default(const char *name, const void *caller)
{
    void *p = ft_shim_real_dlsym(RTLD_DEFAULT, name);
    if (p != NULL)
        return p;
    struct link_map *self = object_of(caller);
    if (self != NULL)
        p = in_scope_of(self, name, 0);
    if (p == NULL)
        leave_error(name);
    return p;
}

void *ft_shim_loaded_symbol(const char *lib, const char *name)
{
    void *h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD), *p = NULL;
    if (h != NULL) {
        p = ft_shim_real_dlsym(h, name);
        dlclose(h);
    }
    return p;
}

static void *libcuda_symbol(const char *name)
{
    void *p = ft_shim_real_dlsym(RTLD_NEXT, name);
    /* libcudart dlopens libcuda RTLD_LOCAL: look in it directly. */
    return p != NULL ? p : ft_shim_loaded_symbol("libcuda.so.1", name);
}

static gpa_v2_fn_t get_real_gpa_v2(void)
{
    gpa_v2_fn_t fn = atomic_load_explicit(&real_gpa_v2, memory_order_relaxed);
    if (fn == NULL) {
        fn = (gpa_v2_fn_t)libcuda_symbol("cuGetProcAddress_v2");
        atomic_store_explicit(&real_gpa_v2, fn, memory_order_relaxed);
    }
    return fn;
}

FT_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status);

void *ft_shim_driver_proc(const char *base, int abi_version)
{
    gpa_v2_fn_t gpa = get_real_gpa_v2();
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    if (gpa == NULL || gpa(base, &fn, abi_version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

FT_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

/* What to hand out for a driver function the caller asked for. */
static void *substitute(const char *symbol, int version, cuuint64_t flags, void *real)
{
    if (!ft_shim_active || real == NULL || symbol == NULL)
        return real;
    if (strcmp(symbol, "cuGetProcAddress") == 0 && version < 12000) {
        /* The CUDA 11.3 ABI (four arguments) for callers built against CUDA 11. */
        if (real != (void *)cuGetProcAddress)
            atomic_store_explicit(&real_gpa_v1, (gpa_v1_fn_t)real, memory_order_relaxed);
        return (void *)cuGetProcAddress;
    }
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        /* A driver that takes its own exported address may hand out ours (we are
         * first in the global scope): never record our own function as the real one. */
        if (real != (void *)cuGetProcAddress_v2)
            atomic_store_explicit(&real_gpa_v2, (gpa_v2_fn_t)real, memory_order_relaxed);
        return (void *)cuGetProcAddress_v2;
    }
    /* cuGraphExecUpdate's CUDA 11 form takes four arguments, the wrapper three: handed
     * out as it is, and graphs are no longer cut (a segment would run what the graph
     * was before an update FlexTensor cannot see). */
    if (strcmp(symbol, "cuGraphExecUpdate") == 0 && version < 12000) {
        capture_cut_forbid("the program asked for cuGraphExecUpdate's CUDA 11 form, whose updates FlexTensor "
                           "does not see");
        return real;
    }
    /* cuGraphAddNode's CUDA 12.2 form has no edge data, the wrapper's has: handed out as
     * it is; a node it adds is one FlexTensor did not see made (its graph unknown at
     * instantiation, unless the node touches nothing). */
    if (strcmp(symbol, "cuGraphAddNode") == 0 && version < 12030)
        return real;
    void *w = ft_shim_wrap_driver_proc(symbol, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0,
                                       real);
    FT_TRACE("cuGetProcAddress(%s, %d, %#llx): %s", symbol, version, (unsigned long long)flags,
             w ? "wrapped" : "passed");
    return w ? w : real;
}

FT_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    gpa_v2_fn_t real = get_real_gpa_v2();
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = substitute(symbol, cudaVersion, flags, *pfn);
    return r;
}

/* The CUDA 11.3 ABI of the same function, still exported by libcuda. */
FT_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    gpa_v1_fn_t real = atomic_load_explicit(&real_gpa_v1, memory_order_relaxed);
    if (real == NULL) {
        real = (gpa_v1_fn_t)libcuda_symbol("cuGetProcAddress");
        atomic_store_explicit(&real_gpa_v1, real, memory_order_relaxed);
    }
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = substitute(symbol, cudaVersion, flags, *pfn);
    return r;
}

/* The exported dlsym's answer for code at `caller`, with our wrapper in place of a
 * driver function while FlexTensor is active. */
static void *dlsym_from(void *handle, const char *symbol, const void *caller)
{
    void *p;
    if (handle == RTLD_NEXT)
        p = next_after(symbol, caller);
    else if (handle == RTLD_DEFAULT)
        p = from_default(symbol, caller);
    else
        p = ft_shim_real_dlsym(handle, symbol);
    if (p == NULL || !ft_shim_active || symbol[0] != 'c' || symbol[1] != 'u')
        return p;
    /* RTLD_DEFAULT finds our own exports first: never record one as the real one. */
    if (p == (void *)cuGetProcAddress_v2 || p == (void *)cuGetProcAddress)
        return p;
    if (strcmp(symbol, "cuGetProcAddress_v2") == 0) {
        atomic_store_explicit(&real_gpa_v2, (gpa_v2_fn_t)p, memory_order_relaxed);
        return (void *)cuGetProcAddress_v2;
    }
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        atomic_store_explicit(&real_gpa_v1, (gpa_v1_fn_t)p, memory_order_relaxed);
        return (void *)cuGetProcAddress;
    }
    void *w = strncmp(symbol, "cupti", 5) == 0 ? ft_shim_wrap_cupti_symbol(symbol, p)
                                                : ft_shim_wrap_driver_symbol(symbol, p);
    FT_TRACE("dlsym(%p, %s): %s", handle, symbol, w ? "wrapped" : "passed");
    return w ? w : p;
}

#if defined(__x86_64__)
/* Entered by a jump from dlsym: the return address is dlsym's caller's. */
static void *dlsym_caught(void *handle, const char *symbol)
{
    return dlsym_from(handle, symbol, __builtin_return_address(0));
}

/* Where the exported dlsym jumps: the real dlsym, or dlsym_caught for a name whose
 * answer we may replace. Called from the assembly below, hence not static. */
__attribute__((used, visibility("hidden"))) void *ft_shim_dlsym_route(void *handle, const char *symbol)
{
    if (symbol != NULL && symbol[0] == 'c' && symbol[1] == 'u' && ft_shim_active)
        return (void *)dlsym_caught;
    dlsym_fn_t fn = get_real_dlsym();
    return fn != NULL ? (void *)fn : (void *)dlsym_caught;
}

/* dlsym: keep the arguments, ask the route, jump there. The caller's return address
 * stays on top of the stack, so the real dlsym sees the caller, not us; call and
 * return stay paired (shadow stacks), and endbr64 marks an indirect-branch target. */
__asm__(".pushsection .text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        ".p2align 4\n"
        "dlsym:\n"
        "    .cfi_startproc\n"
        "    endbr64\n"
        "    pushq %rdi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    pushq %rsi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    subq $8, %rsp\n" /* the call below needs a 16-byte aligned stack */
        "    .cfi_adjust_cfa_offset 8\n"
        "    call ft_shim_dlsym_route\n"
        "    addq $8, %rsp\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rsi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rdi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    jmp *%rax\n"
        "    .cfi_endproc\n"
        ".size dlsym, .-dlsym\n"
        ".popsection\n");
#else
FT_EXPORT void *dlsym(void *handle, const char *symbol)
{
    return dlsym_from(handle, symbol, __builtin_return_address(0));
}
#endif

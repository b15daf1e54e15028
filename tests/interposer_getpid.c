/* interposer_getpid.c - another interposer, for tests/scenario/interposers.sh: preloaded
 * with libflextensor.so (after it or before it), as users preload other tools (sanitizer
 * runtimes, profilers, time fakers). It wraps getpid and cudaMalloc and finds the next
 * definition of each the usual way, dlsym(RTLD_NEXT, ...) at the first call; after the
 * first cudaMalloc (the driver is loaded by then) it also looks up a driver function
 * and two names that exist nowhere. interposer_next(NAME) makes the same lookup on
 * demand, for a program that dlopens the library instead.
 *
 * At exit it prints one line per lookup, "interposer: NAME -> FILE" (the file holding
 * what dlsym returned) or "interposer: NAME -> NULL (dlerror's text)", each followed by
 * "dlerror clear" or "dlerror set" (the state the lookup left), and the calls it
 * forwarded. Being handed its own function back (RTLD_NEXT resolved from the wrong
 * object) is reported at once and ends the process with status 97, instead of
 * recursing until the stack runs out.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

enum { MAX_LOOKUPS = 8 };
static char lookups[MAX_LOOKUPS][512];
static int n_lookups;
static unsigned long getpid_calls, cuda_malloc_calls;
/* Lookups happen at a first call, possibly on several threads at once. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 when p lies in this object (&getpid may name another object's, one found first). */
static int is_own(void *p)
{
    Dl_info mine, theirs;
    return dladdr((void *)&lookups, &mine) && dladdr(p, &theirs) && mine.dli_fbase == theirs.dli_fbase;
}

static void describe(char *line, size_t size, const char *name, void *p, const char *err)
{
    Dl_info di;
    if (p == NULL)
        snprintf(line, size, "%s -> NULL (%s)", name, err ? err : "dlerror: none");
    else if (dladdr(p, &di) && di.dli_fname != NULL)
        snprintf(line, size, "%s -> %s", name,
                 strrchr(di.dli_fname, '/') ? strrchr(di.dli_fname, '/') + 1 : di.dli_fname);
    else
        snprintf(line, size, "%s -> %p (in no object)", name, p);
    size_t len = strlen(line);
    snprintf(line + len, size - len, ", dlerror %s", err ? "set" : "clear");
}

static void *lookup(const char *name, char *line, size_t size)
{
    /* Leave an error behind first: a lookup that succeeds clears it, as glibc's does. */
    (void)dlsym(RTLD_DEFAULT, "interposer_no_such_name");
    void *p = dlsym(RTLD_NEXT, name);
    const char *err = dlerror();
    if (p != NULL && is_own(p)) {
        char msg[256];
        int n = snprintf(msg, sizeof msg,
                         "interposer: dlsym(RTLD_NEXT, \"%s\") returned the interposer's own %s\n",
                         name, name);
        if (write(2, msg, (size_t)n) < 0)
            _exit(98);
        _exit(97);
    }
    describe(line, size, name, p, err);
    return p;
}

static void *next(const char *name)
{
    char line[sizeof lookups[0]];
    void *p = lookup(name, line, sizeof line);
    if (n_lookups < MAX_LOOKUPS)
        memcpy(lookups[n_lookups++], line, sizeof line);
    return p;
}

/* The same lookup on demand, for a program that dlopens this library (RTLD_LOCAL, as
 * Python's ctypes does): its next definitions lie in its own dependencies. */
EXPORT const char *interposer_next(const char *name)
{
    static char line[sizeof lookups[0]];
    pthread_mutex_lock(&lock);
    lookup(name, line, sizeof line);
    pthread_mutex_unlock(&lock);
    return line;
}

EXPORT pid_t getpid(void)
{
    static pid_t (*real)(void);
    pthread_mutex_lock(&lock);
    if (real == NULL)
        real = (pid_t(*)(void))next("getpid");
    getpid_calls++;
    pthread_mutex_unlock(&lock);
    return real ? real() : -1;
}

EXPORT int cudaMalloc(void **ptr, size_t size)
{
    static int (*real)(void **, size_t);
    static int looked;
    pthread_mutex_lock(&lock);
    if (real == NULL)
        real = (int (*)(void **, size_t))next("cudaMalloc");
    cuda_malloc_calls++;
    pthread_mutex_unlock(&lock);
    int rc = real ? real(ptr, size) : 2; /* cudaErrorMemoryAllocation */
    pthread_mutex_lock(&lock);
    if (!looked) {
        looked = 1;
        next("cuMemAlloc_v2");
        next("cuFtNoSuchFunction");
        next("ft_no_such_function");
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

__attribute__((destructor)) static void report(void)
{
    for (int i = 0; i < n_lookups; i++)
        fprintf(stderr, "interposer: %s\n", lookups[i]);
    fprintf(stderr, "interposer: forwarded %lu getpid, %lu cudaMalloc\n", getpid_calls,
            cuda_malloc_calls);
}

/* savedprof.c - saved profiles (FT_PROFILE_DIR, FT_PROFILE_READ_ONLY,
 * FT_SKIP_DISCOVERY): the profile of this program is loaded at set-up; the model is
 * checked against it as it appears (each allocation with a weight's id has the saved
 * size; at the first launch of a pass, the device and every weight's content
 * checksum); when everything matches, discovery takes the saved units and passes
 * (ft_disc_adopt) and the plan is made from the saved times and link, without
 * profiling. Anything that differs drops the profile with a warning naming the
 * difference, and discovery goes on as if there had been none (FT_SKIP_DISCOVERY:
 * FlexTensor stands down instead). After a plan made from discovery and profiling, the
 * profile is written (unless FT_PROFILE_READ_ONLY) to DIR/PROGRAM.ftprofile, through a
 * temporary file renamed into place.
 *
 * Owns: sp (sp.lock; sp.state also read without it, atomic). Calls discovery
 * (ft_disc_adopt, ft_disc_export), checksum.c's hash_regions, profiling.c's
 * plan_saved, and the stand-down passed down by ft_hooks_init. The file format is
 * core/savedprof.c's. */
#define _GNU_SOURCE
#include "shim/engine.h"
#include "core/savedprof.h"

#include <fnmatch.h>
#include <unistd.h>

#ifndef FT_VERSION
#error "FT_VERSION comes from the Makefile (its one source)"
#endif

enum { SP_NONE, SP_PENDING, SP_ADOPTED, SP_REJECTED };

static struct {
    pthread_mutex_t lock;
    int state;                /* SP_*; atomic */
    ft_savedprof_t p;
    char path[4096];
    int (*stand_down)(const char *why);
    int ahead; /* host stores made ahead (stores_ahead) */
} sp = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int state(void) { return __atomic_load_n(&sp.state, __ATOMIC_ACQUIRE); }

/* The program's name as the file name has it: what is not a plain character is '_'. */
static void file_path(char *out, size_t len)
{
    char prog[200];
    snprintf(prog, sizeof prog, "%s", program_invocation_short_name);
    for (char *c = prog; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '_' || *c == '-'))
            *c = '_';
    snprintf(out, len, "%s/%s.ftprofile", cfgp->profile_dir, prog[0] == '.' ? "_" : prog);
}

/* The profile cannot be used (sp.lock held, or at set-up): said once; FT_SKIP_DISCOVERY
 * stands down, otherwise discovery carries on. */
static void reject(const char *why)
{
    __atomic_store_n(&sp.state, SP_REJECTED, __ATOMIC_RELEASE);
    host_store_ahead_end("the profile was ignored");
    if (cfgp->skip_discovery) {
        char msg[5120];
        snprintf(msg, sizeof msg, "FT_SKIP_DISCOVERY needs a matching saved profile in FT_PROFILE_DIR=%s, and %s: %s",
                 cfgp->profile_dir, sp.path, why);
        FT_ERROR("%s", msg);
        sp.stand_down(msg);
        return;
    }
    FT_WARN("saved profile %s ignored: %s; discovery runs as usual", sp.path, why);
}

void savedprof_setup(int (*stand_down)(const char *why))
{
    sp.stand_down = stand_down;
    if (cfgp->profile_dir[0] == '\0')
        return;
    file_path(sp.path, sizeof sp.path);
    char err[512];
    int rc = ft_savedprof_load(sp.path, &sp.p, err, sizeof err);
    if (rc == -ENOENT && !cfgp->skip_discovery) {
        FT_INFO("no saved profile %s yet%s", sp.path,
                cfgp->profile_read_only ? " (FT_PROFILE_READ_ONLY: none will be written)" : "");
        return;
    }
    if (rc != 0) {
        reject(rc == -ENOENT ? "there is no such file" : err);
        return;
    }
    if (strcmp(sp.p.ft_version, FT_VERSION) != 0) {
        snprintf(err, sizeof err, "written by FlexTensor %s, this is %s", sp.p.ft_version, FT_VERSION);
        reject(err);
        return;
    }
    __atomic_store_n(&sp.state, SP_PENDING, __ATOMIC_RELEASE);
    FT_INFO("saved profile %s loaded (%u units, %u launches a pass); checked as the model appears", sp.path,
            sp.p.disc.n_units, sp.p.disc.n_launches);
}

static const ft_disc_saved_region_t *saved_region(uint32_t id)
{
    const ft_disc_saved_t *s = &sp.p.disc;
    uint32_t lo = 0, hi = s->n_regions;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->regions[mid].id == id)
            return &s->regions[mid];
        if (s->regions[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static const char *unit_name(const ft_disc_saved_region_t *r)
{
    return sp.p.disc.units[r->unit].name;
}

/* A region was tracked (hooks_alloc.c): one at a weight's place in the allocation
 * order must have the weight's size. */
void savedprof_region(uint32_t id, uint64_t size)
{
    if (state() != SP_PENDING)
        return;
    pthread_mutex_lock(&sp.lock);
    const ft_disc_saved_region_t *r = state() == SP_PENDING ? saved_region(id) : NULL;
    if (r != NULL && r->size != size) {
        char why[256];
        snprintf(why, sizeof why, "allocation %u is %llu bytes, the profile's (a weight of %s) %llu: another "
                 "model or other shapes", id, (unsigned long long)size, unit_name(r), (unsigned long long)r->size);
        reject(why);
    }
    pthread_mutex_unlock(&sp.lock);
}

/* The saved plan streams region r's weight (sp.lock held, or state not yet shared). */
static int saved_streams(const ft_disc_saved_region_t *r)
{
    return sp.p.resident != NULL && r->unit >= 0 && (uint32_t)r->unit < sp.p.disc.n_units &&
           sp.p.resident[r->unit] == 0 && sp.p.budget == spill_budget();
}

/* The program's first allocation while the profile waits (sp.lock held): the host
 * stores of the weights the saved plan streams are made ahead, in their allocation
 * order, each as vmm.c will ask (whole granules), those vmm.c serves whole only (an
 * allocation over half the budget is served in pieces). Half the host's memory at
 * most. */
static void stores_ahead(void)
{
    const ft_disc_saved_t *s = &sp.p.disc;
    size_t g = vmm_gran(), *sizes = malloc((s->n_regions ? s->n_regions : 1) * sizeof *sizes);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t room = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : 0, total = 0;
    uint32_t n = 0, next = ft_regions_next_id(regions);
    for (uint32_t i = 0; sizes != NULL && g != 0 && i < s->n_regions; i++) {
        const ft_disc_saved_region_t *r = &s->regions[i];
        size_t len = (size_t)((r->size + g - 1) / g * g);
        if (r->id < next || !saved_streams(r) || !vmm_serves((size_t)r->size) || r->size > sp.p.budget / 2 ||
            total + len > room)
            continue;
        sizes[n++] = len;
        total += len;
    }
    host_store_ahead(sizes, n);
    free(sizes);
}

/* Where FT_SPILL should place the allocation about to be tracked (the region table's
 * next id), while a saved profile waits to be checked: 1 when it is a weight that the
 * saved plan streams (it starts in host memory, where the plan will keep it, so that
 * loading the model moves nothing twice), 0 otherwise. Only with the budget the plan
 * was made for; a hint, never a promise: another thread's allocation may take the id
 * first, and the profile may still be refused (the allocation is then faulted in on
 * use, as any). The first call starts making the host stores ahead (stores_ahead). */
int savedprof_streams(void)
{
    if (state() != SP_PENDING)
        return 0;
    pthread_mutex_lock(&sp.lock);
    if (!sp.ahead && state() == SP_PENDING) {
        sp.ahead = 1;
        stores_ahead();
    }
    const ft_disc_saved_region_t *r = state() == SP_PENDING ? saved_region(ft_regions_next_id(regions)) : NULL;
    int streams = r != NULL && saved_streams(r);
    pthread_mutex_unlock(&sp.lock);
    return streams;
}

static void device_name(char *out, size_t len)
{
    typedef CUresult (*name_fn)(char *, int, CUdevice);
    name_fn get = (name_fn)ft_shim_driver_proc("cuDeviceGetName", 2000);
    CUdevice dev;
    snprintf(out, len, "?");
    if (get != NULL && managed_cu_device(&dev) == 0 && get(out, (int)len, dev) != CUDA_SUCCESS)
        snprintf(out, len, "?");
}

/* Is this launch the first of a pass, as the profile's passes start? All the saved
 * weights must be alive by then. */
/* Whether kernel kname can start a pass of the saved profile (sp.lock held): the test
 * that needs no region snapshot, made first at every launch while one is pending. */
static int start_kernel(const char *kname)
{
    const ft_disc_saved_t *s = &sp.p.disc;
    if (s->explicit_marks == 2)
        return cfgp->iteration_marker[0] && fnmatch(cfgp->iteration_marker, kname, 0) == 0;
    if (s->explicit_marks != 0)
        return 1; /* marked by ft_iteration_mark: checked at the first launch */
    return strcmp(kname, s->kernels[s->track_kernel]) == 0;
}

static int pass_starts(const char *kname, const ft_scan_set_t *set, ft_region_t *snap, long ns)
{
    const ft_disc_saved_t *s = &sp.p.disc;
    uint32_t alive = 0;
    for (long i = 0; i < ns; i++)
        alive += saved_region(snap[i].id) != NULL;
    if (alive < s->n_regions || !start_kernel(kname))
        return 0;
    if (s->explicit_marks != 0)
        return 1;
    for (size_t i = 0; i < set->n; i++)
        if (set->id[i] == s->track_region)
            return 1;
    return 0;
}

/* A weight's content sum on the device (salt 0, as FT_SHM's unit sums: discovery's
 * hashes are salted by the device address, which another run need not give), by
 * checksum.c's content_sum_*. 0, or -1 when it cannot be taken (no checksum kernel).
 * The sums share dh's first slot with discovery's snapshots in another thread: a sum
 * spoiled that way only differs, and a profile that differs is dropped, never used. */
static int device_sum(uint64_t base, uint64_t size, uint64_t *out)
{
    /* Not checksum_available(): that sets up the residency engine's per-unit sums,
     * before the units are known (content_sum_begin says when the kernel cannot run). */
    int prev = managed_device_enter();
    int rc = content_sum_begin() != 0 || content_sum_add(base, size / 8, 0) != 0 || content_sum_end(out) != 0;
    managed_device_leave(prev);
    return rc ? -1 : 0;
}

/* A weight's content sum, wherever it lies (the profile's save): 0, or -1 when it
 * cannot be taken (also a size not a whole number of words). */
static int weight_sum(uint64_t base, uint64_t size, uint64_t *out)
{
    if (size % 8 != 0)
        return -1;
    vmm_t *v = spilled_at(base);
    if (v != NULL) {
        *out = ft_checksum_host_parallel((const char *)v->host + (base - v->va), size / 8, 0);
        return 0;
    }
    return device_sum(base, size, out);
}

/* The weights' content against the profile's checksums; 0, or -1 with the first
 * difference in why. Those FT_SPILL holds in host memory are summed there, all at
 * once on several cores (one at a time, 162 allocations of 57 MB took 1.26 s on the
 * H100, most of a second start's first step); the others on the device. */
static int check_contents(ft_region_t *snap, long ns, char *why, size_t len)
{
    size_t m = ns > 0 ? (size_t)ns : 1;
    ft_checksum_buf_t *hb = malloc(m * sizeof *hb);
    long *of = malloc(m * sizeof *of); /* hb[k] is snap[of[k]]'s */
    uint64_t *hsum = malloc(m * sizeof *hsum), *sum = calloc(m, sizeof *sum);
    signed char *failed = calloc(m, 1);
    int rc = 0;
    if (hb == NULL || sum == NULL || of == NULL || failed == NULL || hsum == NULL) {
        snprintf(why, len, "no memory to check the weights' content");
        rc = -1;
        goto out;
    }
    long nh = 0;
    for (long i = 0; i < ns; i++) {
        if (saved_region(snap[i].id) == NULL)
            continue;
        vmm_t *v = snap[i].size % 8 == 0 ? spilled_at(snap[i].base) : NULL;
        if (snap[i].size % 8 != 0)
            failed[i] = 1; /* not a whole number of words */
        else if (v != NULL) {
            hb[nh] = (ft_checksum_buf_t){ (const char *)v->host + (snap[i].base - v->va), snap[i].size / 8, 0 };
            of[nh++] = i;
        } else
            failed[i] = device_sum(snap[i].base, snap[i].size, &sum[i]) != 0;
    }
    if (nh > 0 && ft_checksum_host_many(hb, (size_t)nh, hsum) != 0)
        for (long k = 0; k < nh; k++)
            failed[of[k]] = 1;
    else
        for (long k = 0; k < nh; k++)
            sum[of[k]] = hsum[k];
    for (long i = 0; i < ns && rc == 0; i++) {
        const ft_disc_saved_region_t *r = saved_region(snap[i].id);
        if (r != NULL && (failed[i] || sum[i] != r->hash)) {
            snprintf(why, len, "the content of allocation %u (a weight of %s, %llu bytes) %s: another model or "
                     "other weights", r->id, unit_name(r), (unsigned long long)r->size,
                     failed[i] ? "could not be summed" : "differs");
            rc = -1;
        }
    }
out:
    free(hb);
    free(sum);
    free(of);
    free(failed);
    free(hsum);
    return rc;
}

/* A launch in discovery, before discovery sees it (observe.c). 1 when the saved
 * profile matched at this launch and discovery took it: the caller makes the plan. */
int savedprof_launch(const char *kname, const ft_scan_set_t *set)
{
    if (state() != SP_PENDING)
        return 0;
    pthread_mutex_lock(&sp.lock);
    int adopted = 0;
    ft_region_t *snap = NULL;
    long ns = state() == SP_PENDING && start_kernel(kname) ? ft_regions_snapshot(regions, &snap) : -1;
    if (ns >= 0 && pass_starts(kname, set, snap, ns)) {
        char why[1024], dev[256];
        uint64_t t0 = now_ns(); /* the checks' time, in the line that says they passed */
        device_name(dev, sizeof dev);
        if (strcmp(dev, sp.p.device) != 0) {
            snprintf(why, sizeof why, "written on device \"%s\", this is \"%s\"", sp.p.device, dev);
            reject(why);
        } else if (check_contents(snap, ns, why, sizeof why) != 0) {
            reject(why);
        } else if (ft_disc_adopt(disc, &sp.p.disc, why, sizeof why) != 0) {
            reject(why);
        } else {
            __atomic_store_n(&sp.state, SP_ADOPTED, __ATOMIC_RELEASE);
            host_store_ahead_end("the profile matched: every weight is allocated");
            FT_INFO("saved profile %s matched (device %s, %u weights' sizes and contents, first launch of a "
                    "pass %s): discovery and profiling skipped, %u units; checked in %.1f ms",
                    sp.path, dev, sp.p.disc.n_regions, kname, sp.p.disc.n_units, (double)(now_ns() - t0) / 1e6);
            adopted = 1;
        }
    }
    free(snap);
    pthread_mutex_unlock(&sp.lock);
    return adopted;
}

/* The plan from the adopted profile (the launch that adopted it, after the move to
 * PLANNING). */
void savedprof_plan(void)
{
    bw_t b = { sp.p.h2d, sp.p.d2h, sp.p.h2d_both, sp.p.d2h_both, sp.p.latency_us, (size_t)sp.p.link_bytes };
    plan_saved(sp.p.median_us, sp.p.disc.n_units, &b, sp.p.other_bytes);
}

/* Discovery is DONE and this thread moved the phase to PLANNING (observe.c): 1 when
 * discovery took the saved profile (another thread's launch adopted it; the plan comes
 * from it); 0 otherwise, and a profile still waiting is dropped: its pass start never
 * came. */
int savedprof_discovery_done(void)
{
    if (state() == SP_ADOPTED)
        return 1;
    if (state() != SP_PENDING)
        return 0;
    pthread_mutex_lock(&sp.lock);
    if (state() == SP_PENDING)
        reject(sp.p.disc.explicit_marks == 0 ? "its pass start (a launch of its first unit's kernel on its "
                                               "weight) never came before discovery ended"
                                             : "no pass was marked before discovery ended");
    int adopted = state() == SP_ADOPTED;
    pthread_mutex_unlock(&sp.lock);
    return adopted;
}

/* A plan was made from discovery and profiling (profiling.c, prof.lock held): written
 * down for the next start, unless FT_PROFILE_READ_ONLY or the plan came from a profile. */
void savedprof_save(void)
{
    if (cfgp->profile_dir[0] == '\0' || cfgp->profile_read_only || state() == SP_ADOPTED)
        return;
    ft_savedprof_t p;
    memset(&p, 0, sizeof p);
    char why[256];
    if (ft_disc_export(disc, &p.disc, why, sizeof why) != 0) {
        FT_INFO("profile not saved: %s", why);
        return;
    }
    size_t n = p.disc.n_units;
    p.median_us = calloc(n ? n : 1, sizeof *p.median_us);
    p.resident = calloc(n ? n : 1, sizeof *p.resident);
    if (p.median_us == NULL || p.resident == NULL || n != prof.n || n != plan.in.n) {
        FT_WARN("profile not saved: %s", n != prof.n ? "units and profile disagree" : "out of memory");
        ft_savedprof_free(&p);
        return;
    }
    for (uint32_t i = 0; i < p.disc.n_regions; i++) {
        ft_disc_saved_region_t *r = &p.disc.regions[i];
        uint64_t base, size;
        if (ft_disc_region(disc, r->id, &base, &size) != 0 || weight_sum(base, size, &r->hash) != 0) {
            FT_INFO("profile not saved: the content of allocation %u (a weight) could not be summed", r->id);
            ft_savedprof_free(&p);
            return;
        }
    }
    for (size_t i = 0; i < n; i++) {
        p.median_us[i] = plan.in.units[i].compute_us;
        p.resident[i] = plan.out.resident ? (uint32_t)plan.out.resident[i] : 1;
    }
    snprintf(p.ft_version, sizeof p.ft_version, "%s", FT_VERSION);
    snprintf(p.program, sizeof p.program, "%s", program_invocation_short_name);
    device_name(p.device, sizeof p.device);
    p.link_bytes = bw.bytes;
    p.h2d = bw.h2d;
    p.d2h = bw.d2h;
    p.h2d_both = bw.h2d_both;
    p.d2h_both = bw.d2h_both;
    p.latency_us = bw.latency_us;
    p.budget = plan.in.budget_bytes;
    p.other_bytes = plan.in.other_bytes;
    p.slots = (uint32_t)plan.out.slots;
    p.step_ns = (uint64_t)(plan.out.step_us * 1000.0);
    char path[4096];
    file_path(path, sizeof path);
    int rc = ft_savedprof_write(&p, path);
    if (rc != 0)
        FT_WARN("profile not saved to %s: %s", path, strerror(-rc));
    else
        FT_INFO("profile saved to %s (%zu units)", path, n);
    ft_savedprof_free(&p);
}

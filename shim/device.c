/* device.c - which device FlexTensor manages (FT_GPU_DEVICE, or the device current at
 * the first allocation), the other devices the process uses (peer access to
 * FlexTensor's mappings, or standing down), and making the managed device current for
 * FlexTensor's own device work.
 *
 * Owns: managed_dev (set once by compare-and-swap), peer_devs and no_such_device
 * (atomic), peer_note's own lock (a device is checked once, by one thread). It finds
 * out that the process uses another device, or that FT_GPU_DEVICE names none; whether
 * FlexTensor stands down is the engine's answer, through the callback ft_hooks_init
 * gives (device_setup). It calls into vmm.c (peer grants) and cuda.c only. */
#define _GNU_SOURCE
#include "shim/engine.h"

static int managed_dev = -2; /* -2: not decided yet */

/* The engine's stand-down (engine.c), set once before any hook runs. */
static int (*stand_down)(const char *why);

void device_setup(int (*fn)(const char *why))
{
    stand_down = fn;
}

int managed_device(void)
{
    return __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE);
}

/* Other devices the process uses that can reach the managed device's memory (a bit per
 * ordinal, see peer_note): a virtual-memory mapping is reachable from another device
 * only where cuMemSetAccess grants it, whatever peer access the application enabled
 * (on the H200 pair, a copy between the devices was "invalid argument" without). */
static uint32_t peer_devs;

uint32_t peer_devices(void)
{
    return __atomic_load_n(&peer_devs, __ATOMIC_ACQUIRE);
}

/* FT_GPU_DEVICE: the one device whose allocations FlexTensor manages (-1: the device
 * current at the first allocation). Others pass through, untracked, so their
 * launches touch no region. */

/* runtime: the caller is a runtime allocation, which makes the primary context
 * current first (a driver caller has its own context current). */
/* The process allocates on device `other` too: where it can reach the managed device,
 * FlexTensor's mappings from now on, and those mapped already, grant it access, as the
 * allocations cudaMalloc would have made are reachable once the application enables
 * peer access. Said once per device. */
static void peer_note(int other, int managed)
{
    static uint32_t checked;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    if (other < 0 || other >= 32 || managed < 0 || (__atomic_load_n(&checked, __ATOMIC_ACQUIRE) >> other & 1u))
        return;
    pthread_mutex_lock(&lock);
    if (checked >> other & 1u) {
        pthread_mutex_unlock(&lock);
        return;
    }
    int can = 0;
    if (drv.can_access_peer != NULL && drv.set_access != NULL &&
        drv.can_access_peer(&can, other, managed) == CUDA_SUCCESS && can) {
        __atomic_or_fetch(&peer_devs, 1u << other, __ATOMIC_ACQ_REL);
        unsigned granted = 0, mapped = 0;
        vmm_grant_peer(other, &granted, &mapped);
        FT_INFO("device %d is used too: FlexTensor's mappings on device %d are made accessible from it "
                "(%u of %u allocations now, the rest as they are mapped)", other, managed, granted, mapped);
    } else {
        FT_INFO("device %d is used too, and cannot reach device %d's memory (no peer access): kernels "
                "and copies on it cannot touch FlexTensor's allocations", other, managed);
    }
    /* After the grants: what standing down brings back to the device is mapped with
     * them. */
    char why[192];
    snprintf(why, sizeof why, "an allocation on device %d while FlexTensor manages device %d: one "
             "process on several GPUs is not supported yet", other, managed);
    if (stand_down(why) < 0)
        FT_ERROR("an allocation on device %d after FlexTensor's plan for device %d: one process on "
                 "several GPUs is not supported; kernels or copies on device %d that touch streamed "
                 "weights may find them unloaded", other, managed, other);
    __atomic_or_fetch(&checked, 1u << other, __ATOMIC_ACQ_REL);
    pthread_mutex_unlock(&lock);
}

/* FT_GPU_DEVICE names no device of this process: it stood down at the first
 * allocation, and every allocation passes through (no peer to note). */
static int no_such_device;

/* At the first allocation (the driver answers by then): 1 when FT_GPU_DEVICE names a
 * device the process does not have. FlexTensor then stands down at once, and says
 * why, rather than at the first allocation on a device it does not manage. Set before
 * the managed device is, so that no thread takes the missing device for a real one. */
static int missing_device(int pick)
{
    int count = 0;
    if (cfgp->gpu_device < 0 || drv.device_count == NULL || drv.device_count(&count) != CUDA_SUCCESS ||
        pick < count)
        return 0;
    char why[192];
    snprintf(why, sizeof why, "FT_GPU_DEVICE=%d, but this process sees %d CUDA device(s), "
             "numbered from 0 (CUDA_VISIBLE_DEVICES renumbers them)", pick, count);
    __atomic_store_n(&no_such_device, 1, __ATOMIC_RELEASE);
    stand_down(why);
    return 1;
}

/* The managed device is chosen: it is said, and a budget it cannot hold is said now,
 * not found out later. FT_GPU_MEM_LIMIT above the device's memory is never reached:
 * FT_SPILL, holding allocations to it, moves none to host memory before the device is
 * full (a model larger than the device then fails to load: seen on the simulator), and
 * the plan caps it to what the device has free. */
static void managed_device_chosen(int pick)
{
    FT_INFO("managing device %d (FT_GPU_DEVICE%s)", pick, cfgp->gpu_device >= 0 ? "" : "=-1: the first allocation's");
    size_t total = 0;
    if (cfgp->gpu_mem_limit > 0 && drv.device_total_mem != NULL &&
        drv.device_total_mem(&total, (CUdevice)pick) == CUDA_SUCCESS && total > 0 &&
        cfgp->gpu_mem_limit > (uint64_t)total) {
        char a[32], b[32];
        FT_WARN("FT_GPU_MEM_LIMIT (%s) is more than device %d has (%s): %sthe plan will cap it to "
                "what the device has free; set it to at most %s", human_bytes(cfgp->gpu_mem_limit, a, sizeof a),
                pick, human_bytes(total, b, sizeof b),
                cfgp->spill ? "FT_SPILL moves nothing to host memory before the device is full (a "
                "model larger than the device fails to load), and " : "", b);
    }
}

int on_managed_device(int runtime)
{
    CUdevice dev;
    resolve_driver();
    if (__atomic_load_n(&no_such_device, __ATOMIC_ACQUIRE))
        return 0;
    if (drv.ctx_get_device == NULL || (runtime && REAL(cudaFree)(NULL) != cudaSuccess) ||
        drv.ctx_get_device(&dev) != CUDA_SUCCESS)
        return 1; /* cannot tell: managed, as before the option existed */
    int want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE);
    if (want == -2) {
        int pick = cfgp->gpu_device >= 0 ? cfgp->gpu_device : (int)dev;
        int unset = -2;
        if (missing_device(pick))
            return 0;
        if (__atomic_compare_exchange_n(&managed_dev, &unset, pick, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            managed_device_chosen(pick);
        want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE);
    }
    if ((int)dev != want)
        peer_note((int)dev, want);
    return (int)dev == want;
}

/* The device FlexTensor's physical memory goes on: the managed one, whatever device
 * the calling thread has current (a fault-in from a copy issued on another device put
 * a weight's memory there, and the next kernel on the managed device faulted). 0 on
 * success. */
int managed_cu_device(CUdevice *dev)
{
    int want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE);
    if (want >= 0) {
        *dev = (CUdevice)want;
        return 0;
    }
    return drv.ctx_get_device(dev) == CUDA_SUCCESS ? 0 : -1;
}

/* Makes the managed device current for FlexTensor's own device work, from whatever
 * thread and device the application's call came: the checksum's module, stream and
 * buffers are the managed device's, and a kernel reading its memory from another
 * device without peer access faults. Returns the device to restore, or -1. */
static struct {
    cudaError_t (*get)(int *);
    cudaError_t (*set)(int);
} cur_dev;
static pthread_once_t cur_dev_once = PTHREAD_ONCE_INIT;

static void cur_dev_lookup(void)
{
    cur_dev.set = (cudaError_t(*)(int))own_rt("cudaSetDevice");
    cur_dev.get = (cudaError_t(*)(int *))own_rt("cudaGetDevice");
}

/* Once, whatever threads ask first (the application's, the prefetching thread, the
 * threads making host stores ahead). */
static void cur_dev_resolve(void)
{
    pthread_once(&cur_dev_once, cur_dev_lookup);
}

int managed_device_enter(void)
{
    cur_dev_resolve();
    int want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE), cur = -1;
    if (want < 0 || cur_dev.get == NULL || cur_dev.set == NULL || cur_dev.get(&cur) != cudaSuccess || cur == want)
        return -1;
    return cur_dev.set(want) == cudaSuccess ? cur : -1;
}

void managed_device_bind(void)
{
    cur_dev_resolve();
    int want = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE);
    if (cur_dev.set != NULL)
        cur_dev.set(want >= 0 ? want : 0);
}

void managed_device_leave(int prev)
{
    if (prev >= 0)
        cur_dev.set(prev);
}

/* The host waits for every device that can reach FlexTensor's memory: the managed one
 * and its peers in use (peer_devs), whatever device the thread has current. Before an
 * allocation is unmapped, a copy that another device's stream has queued on it must be
 * over: cudaDeviceSynchronize waits for the current device alone, and with the thread
 * back on the managed device, a copy still queued on device 1 read an allocation
 * FT_SPILL had just moved out (illegal address on the simulator under load). */
void sync_reaching_devices(void)
{
    uint32_t peers = __atomic_load_n(&peer_devs, __ATOMIC_ACQUIRE);
    int managed = __atomic_load_n(&managed_dev, __ATOMIC_ACQUIRE), cur = -1;
    REAL(cudaDeviceSynchronize)();
    if (peers == 0)
        return;
    cur_dev_resolve();
    if (cur_dev.get == NULL || cur_dev.set == NULL || cur_dev.get(&cur) != cudaSuccess)
        return;
    for (int d = 0; d < 32; d++)
        if ((d == managed || (peers >> d & 1u)) && d != cur && cur_dev.set(d) == cudaSuccess)
            REAL(cudaDeviceSynchronize)();
    cur_dev.set(cur);
}

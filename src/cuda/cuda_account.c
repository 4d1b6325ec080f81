/* cuda_account.c -- the limits, the per-device regions and the charge /
 * give-back steps every wrapper shares (cuda_account.h). */
#include "cuda_glibc.h"
#include "cuda_account.h"
#include "cuda_real.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern char **environ;
struct cudacfg cuda_cfg;

/* A region this process has mapped, one per GPU UUID (the CUDA and the NVML
 * view of one GPU share it). Never unmapped: other threads may be inside. */
struct attached {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    struct cudareg *reg;
};

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER; /* attach only */
static struct attached regions[CUDACFG_MAX_DEVICES];
static unsigned n_regions;
static int dev_state[CUDACFG_MAX_DEVICES]; /* enum cuda_dev_state, atomic */
static struct cudareg *dev_reg[CUDACFG_MAX_DEVICES];
static struct {
    nvmlDevice_t handle;
    int state;
    struct cudareg *reg;
} nvml_dev[CUDACFG_MAX_DEVICES];
static unsigned n_nvml;

bool cuda_hooks_active(void)
{
    return cuda_cfg.state != CUDACFG_OFF;
}

void cuda_complain(const char *fmt, const char *a, const char *b)
{
    static char last[512];
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, b);
    pthread_mutex_lock(&state_lock);
    bool again = strcmp(msg, last) == 0;
    if (!again)
        snprintf(last, sizeof last, "%s", msg);
    pthread_mutex_unlock(&state_lock);
    if (!again)
        fprintf(stderr, "gpupool-cuda: %s\n", msg);
}

CUresult cuda_refuse_broken(void)
{
    cuda_complain("%s; CUDA is refused rather than run without the limit (%s)", cuda_cfg.why,
                  "fix or unset the variable");
    return CUDA_ERROR_NOT_PERMITTED;
}

void cuda_uuid_text(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* The region of uuid, mapped once per process. Under state_lock. */
static struct cudareg *region_for(const char *uuid, int64_t limit, char *err, size_t errlen)
{
    for (unsigned i = 0; i < n_regions; i++)
        if (strcmp(regions[i].uuid, uuid) == 0)
            return regions[i].reg;
    if (n_regions == CUDACFG_MAX_DEVICES) {
        snprintf(err, errlen, "more than %d GPUs", CUDACFG_MAX_DEVICES);
        return NULL;
    }
    char path[sizeof cuda_cfg.prefix + NVML_DEVICE_UUID_V2_BUFFER_SIZE + 2];
    snprintf(path, sizeof path, "%s.%s", cudacfg_region_prefix(&cuda_cfg, uuid), uuid);
    struct cudareg *r = cudareg_attach(path, limit, err, errlen);
    if (r != NULL) {
        snprintf(regions[n_regions].uuid, sizeof regions[n_regions].uuid, "%s", uuid);
        regions[n_regions++].reg = r;
    }
    return r;
}

int cuda_device_state(CUdevice dev)
{
    if (dev < 0 || dev >= CUDACFG_MAX_DEVICES)
        return DEV_UNKNOWN; /* not a device: the driver gives its own error */
    int st = __atomic_load_n(&dev_state[dev], __ATOMIC_ACQUIRE);
    if (st != DEV_UNKNOWN)
        return st;
    if (cuda_cfg.state != CUDACFG_ON)
        return DEV_FREE; /* off: pass-through; broken: refused by the caller */
    char err[1200] = "";
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "";
    size_t total = 0;
    CUuuid u;
    pthread_mutex_lock(&state_lock);
    st = dev_state[dev];
    if (st != DEV_UNKNOWN)
        goto out;
    if (real.cuDeviceTotalMem_v2 == NULL || real.cuDeviceTotalMem_v2(&total, dev) != CUDA_SUCCESS) {
        st = DEV_UNKNOWN; /* not a device the driver knows: let it answer */
        goto out;
    }
    int64_t limit = cudacfg_limit(&cuda_cfg, dev, (int64_t)total);
    /* A limit named by UUID (the DRA driver's) is exact and wins over the
     * ordinal forms; without the UUID nothing can be looked up. */
    if (limit != 0 || cuda_cfg.uuid_count > 0) {
        if (real.cuDeviceGetUuid == NULL || real.cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) {
            snprintf(err, sizeof err, "cannot read the UUID of CUDA device %d", dev);
            st = DEV_FAILED;
            goto decided;
        }
        cuda_uuid_text(&u, uuid, sizeof uuid);
        int64_t named = cudacfg_uuid_limit(&cuda_cfg, uuid);
        if (named >= 0)
            limit = named;
    }
    if (limit == 0) {
        st = DEV_FREE;
    } else {
        if (limit > (int64_t)total)
            limit = (int64_t)total;
        dev_reg[dev] = region_for(uuid, limit, err, sizeof err);
        st = dev_reg[dev] != NULL ? DEV_LIMITED : DEV_FAILED;
    }
decided:
    __atomic_store_n(&dev_state[dev], st, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&state_lock);
    if (err[0] != '\0')
        cuda_complain("%s; a memory limit is set, so CUDA is refused (%s)", err,
                      "unset the CUDA_DEVICE_MEMORY_LIMIT variables to run without one");
    return st;
}

struct cudareg *cuda_device_region(CUdevice dev)
{
    return dev >= 0 && dev < CUDACFG_MAX_DEVICES ? dev_reg[dev] : NULL;
}

CUdevice cuda_current_device(CUcontext *ctx)
{
    CUcontext c = NULL;
    CUdevice d;
    if (real.cuCtxGetCurrent == NULL || real.cuCtxGetCurrent(&c) != CUDA_SUCCESS || c == NULL ||
        real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        return -1;
    if (ctx != NULL)
        *ctx = c;
    return d;
}

CUdevice cuda_context_device(CUcontext ctx)
{
    if (ctx == NULL)
        return -1;
    CUcontext cur = NULL;
    CUdevice d = -1;
    if (real.cuCtxGetCurrent != NULL && real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx)
        return real.cuCtxGetDevice(&d) == CUDA_SUCCESS ? d : -1;
    /* Another context: make it current for one question, then restore. */
    if (real.cuCtxPushCurrent_v2 == NULL || real.cuCtxPopCurrent_v2 == NULL ||
        real.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS)
        return -1;
    if (real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        d = -1;
    CUcontext popped;
    (void)real.cuCtxPopCurrent_v2(&popped);
    return d;
}

CUresult cuda_charge(CUdevice dev, size_t bytes, struct cudareg **reg)
{
    *reg = NULL;
    if (cuda_cfg.state == CUDACFG_OFF)
        return CUDA_SUCCESS;
    if (cuda_cfg.state == CUDACFG_BROKEN)
        return cuda_refuse_broken();
    switch (cuda_device_state(dev)) {
    case DEV_LIMITED:
        break;
    case DEV_FAILED:
        return CUDA_ERROR_NOT_PERMITTED;
    default:
        return CUDA_SUCCESS;
    }
    struct cudareg *r = dev_reg[dev];
    if (bytes > (size_t)INT64_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Before a refusal, what this process's pools and graph memory hold
     * unused goes back to the driver (re-read, then trimmed): they are
     * charged what they reserve, and that memory is this container's to
     * reuse. */
    int rc = cudareg_reserve(r, (int64_t)bytes);
    for (int attempt = 0; rc == 1 && attempt < 2; attempt++) {
        cuda_pools_settle(dev, attempt == 1);
        rc = cudareg_reserve(r, (int64_t)bytes);
    }
    switch (rc) {
    case 0:
        *reg = r;
        return CUDA_SUCCESS;
    case 1:
        return CUDA_ERROR_OUT_OF_MEMORY;
    default:
        cuda_complain("%s (%s)",
                      "every accounting slot of this GPU's region is held by a live process",
                      "more than 1024 CUDA processes in one container");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}

void cuda_give_back(const struct cudaledger_entry *e, void *arg)
{
    (void)arg;
    struct cudareg *r = cuda_device_region(e->device);
    if (r != NULL && e->bytes > 0)
        cudareg_release(r, e->bytes);
}

/* Undoes an allocation the ledger could not record. */
static void undo_alloc(enum cudaledger_kind kind, uint64_t handle)
{
    switch (kind) {
    case LEDGER_POINTER:
        real.cuMemFree_v2((CUdeviceptr)handle);
        break;
    case LEDGER_HANDLE:
        real.cuMemRelease(handle);
        break;
    case LEDGER_ARRAY:
        real.cuArrayDestroy((CUarray)(uintptr_t)handle);
        break;
    case LEDGER_MIPMAP:
        real.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)handle);
        break;
    default:
        break; /* a mapping or a context limit is undone by its caller */
    }
}

/* A live entry replaced under the same key: the driver reused a handle we
 * saw no free for, so the old allocation is gone -- unless it was given to
 * another process, whose use it may still be (kept charged). */
static void replaced_gone(const struct cudaledger_entry *old)
{
    if (old->kind != 0 && !(old->flags & LEDGER_EXPORTED))
        cuda_give_back(old, NULL);
}

int cuda_record(struct cudareg *reg, const struct cudaledger_entry *e)
{
    struct cudaledger_entry old;
    if (cudaledger_add(e, &old) != 0) {
        cudareg_release(reg, e->bytes);
        return -1;
    }
    replaced_gone(&old);
    return 0;
}

CUresult cuda_settle_alloc(CUresult rc, struct cudareg *reg, enum cudaledger_kind kind,
                           const void *out, CUcontext ctx, CUdevice dev, size_t bytes)
{
    if (reg == NULL)
        return rc;
    if (rc != CUDA_SUCCESS) {
        cudareg_release(reg, (int64_t)bytes);
        return rc;
    }
    uint64_t handle = kind == LEDGER_POINTER || kind == LEDGER_HANDLE
                          ? *(const unsigned long long *)out
                          : (uint64_t)(uintptr_t) * (void *const *)out;
    struct cudaledger_entry e = {.handle = handle,
                                 .ctx = (uint64_t)(uintptr_t)ctx,
                                 .bytes = (int64_t)bytes,
                                 .device = dev,
                                 .kind = (uint8_t)kind,
                                 .refs = kind == LEDGER_HANDLE ? 1 : 0};
    if (cuda_record(reg, &e) != 0) {
        undo_alloc(kind, handle);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

void cuda_settle_free(CUresult rc, bool had, const struct cudaledger_entry *e)
{
    if (!had)
        return;
    if (rc == CUDA_SUCCESS) {
        cuda_give_back(e, NULL);
    } else {
        struct cudaledger_entry old;
        if (cudaledger_add(e, &old) == 0)
            replaced_gone(&old);
    }
}

/* ---- NVML devices --------------------------------------------------------- */

/* The limit variables are per container ordinal, and NVML's index inside a
 * container is that ordinal: NVML ignores CUDA_VISIBLE_DEVICES and counts
 * the container's GPUs in PCI order, as the plugin numbers them (one GPU
 * per container, the common case, is always 0). */
struct cudareg *cuda_nvml_region(nvmlDevice_t device, unsigned long long total, bool *refuse)
{
    *refuse = false;
    if (cuda_cfg.state == CUDACFG_OFF)
        return NULL;
    if (cuda_cfg.state == CUDACFG_BROKEN) {
        *refuse = true;
        return NULL;
    }
    pthread_mutex_lock(&state_lock);
    for (unsigned i = 0; i < n_nvml; i++)
        if (nvml_dev[i].handle == device) {
            struct cudareg *r = nvml_dev[i].reg;
            *refuse = nvml_dev[i].state == DEV_FAILED;
            pthread_mutex_unlock(&state_lock);
            return r;
        }
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], err[1200] = "";
    unsigned index = 0;
    int st = DEV_FREE;
    struct cudareg *r = NULL;
    if (real.nvmlDeviceGetUUID == NULL || real.nvmlDeviceGetIndex == NULL ||
        real.nvmlDeviceGetUUID(device, uuid, sizeof uuid) != NVML_SUCCESS ||
        real.nvmlDeviceGetIndex(device, &index) != NVML_SUCCESS) {
        st = DEV_UNKNOWN; /* ask again next time */
    } else {
        uuid[sizeof uuid - 1] = '\0';
        int64_t limit = cudacfg_uuid_limit(&cuda_cfg, uuid);
        if (limit < 0)
            limit = cudacfg_container_limit(&cuda_cfg, (int)index, (int64_t)total);
        if (limit > 0) {
            if (limit > (int64_t)total)
                limit = (int64_t)total;
            r = region_for(uuid, limit, err, sizeof err);
            st = r != NULL ? DEV_LIMITED : DEV_FAILED;
        }
    }
    if (st != DEV_UNKNOWN && n_nvml < CUDACFG_MAX_DEVICES) {
        nvml_dev[n_nvml].handle = device;
        nvml_dev[n_nvml].state = st;
        nvml_dev[n_nvml++].reg = r;
    }
    pthread_mutex_unlock(&state_lock);
    if (st == DEV_FAILED) {
        cuda_complain("%s; a memory limit is set, so NVML's memory figures are refused (%s)", err,
                      "unset the CUDA_DEVICE_MEMORY_LIMIT variables to run without one");
        *refuse = true;
    }
    return r;
}

/* ---- process life -------------------------------------------------------- */

static void before_fork(void)
{
    pthread_mutex_lock(&state_lock);
    cudaledger_before_fork();
}

static void after_fork_parent(void)
{
    cudaledger_after_fork_parent();
    pthread_mutex_unlock(&state_lock);
}

static void after_fork_child(void)
{
    cudaledger_after_fork_child();
    for (unsigned i = 0; i < n_regions; i++)
        cudareg_after_fork(regions[i].reg);
    pthread_mutex_unlock(&state_lock);
}

/* Runs when the library is loaded into any process of the container: only
 * getenv-level work here (most processes never touch CUDA). First of the
 * library's constructors: the others read what it sets. */
__attribute__((constructor(101))) static void cuda_account_load(void)
{
    cudacfg_load(&cuda_cfg, environ);
    cuda_real_init_dlsym();
    if (cuda_cfg.state != CUDACFG_OFF)
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

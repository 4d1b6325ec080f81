/* cuda_hooks.c -- the accounting wrappers of libgpupool-cuda: every
 * device-memory allocation is charged to the container's region for its GPU
 * before the driver is asked, and given back if the driver says no, when it
 * is freed, or when its context goes (docs/isolation.md).
 *
 * Rules every wrapper follows:
 *  - Reserve, then call, then roll back on failure: two processes can never
 *    both pass a check and then both allocate (cuda_region.h).
 *  - A NULL pointer argument goes to the driver untouched, so the caller gets
 *    exactly the driver's answer; we only adjust what the driver wrote.
 *  - Over the limit the answer is CUDA_ERROR_OUT_OF_MEMORY, the driver's own
 *    code for it, so frameworks take their normal out-of-memory path.
 *  - A GPU without a limit costs one table read per call. */
#include "cuda_glibc.h"
#include "cuda_abi.h"
#include "cuda_config.h"
#include "cuda_hooks.h"
#include "cuda_ledger.h"
#include "cuda_region.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- the driver's own entry points ------------------------------------------- */

static struct {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuGetProcAddress)(const char *, void **, int, cuuint64_t);
    CUresult (*cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t, int *);
    CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
    CUresult (*cuMemAllocPitch_v2)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemFree_v2)(CUdeviceptr);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr, CUstream);
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                            unsigned long long);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*cuMemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
    CUresult (*cuArrayCreate_v2)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*cuArray3DCreate_v2)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*cuArrayDestroy)(CUarray);
    CUresult (*cuMipmappedArrayCreate)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *,
                                       unsigned);
    CUresult (*cuMipmappedArrayDestroy)(CUmipmappedArray);
    CUresult (*cuCtxDestroy_v2)(CUcontext);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice);
    CUresult (*cuDevicePrimaryCtxReset_v2)(CUdevice);
    CUresult (*cuMemGetInfo_v2)(size_t *, size_t *);
    CUresult (*cuDeviceTotalMem_v2)(size_t *, CUdevice);
    /* called, never handed out */
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned *, int *);
    /* NVML */
    nvmlReturn_t (*nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*nvmlDeviceGetIndex)(nvmlDevice_t, unsigned *);
} real;

/* ---- what this process enforces ----------------------------------------- */

extern char **environ;
static struct cudacfg cfg;

enum dev_state { DEV_UNKNOWN, DEV_FREE, DEV_LIMITED, DEV_FAILED };

/* A region this process has mapped, one per GPU UUID (the CUDA and the NVML
 * view of one GPU share it). Never unmapped: other threads may be inside. */
struct attached {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    struct cudareg *reg;
};

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER; /* attach only */
static struct attached regions[CUDACFG_MAX_DEVICES];
static unsigned n_regions;
static int dev_state[CUDACFG_MAX_DEVICES]; /* enum dev_state, atomic */
static struct cudareg *dev_reg[CUDACFG_MAX_DEVICES];
static CUcontext primary_ctx[CUDACFG_MAX_DEVICES];
static struct {
    nvmlDevice_t handle;
    int state;
    struct cudareg *reg;
} nvml_dev[CUDACFG_MAX_DEVICES];
static unsigned n_nvml;

bool cuda_hooks_active(void)
{
    return cfg.state != CUDACFG_OFF;
}

/* One line on stderr per distinct reason: the process may call us from many
 * threads, the user needs to see it once. */
static void complain(const char *fmt, const char *a, const char *b)
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

static void uuid_text(const CUuuid *u, char *out, size_t len)
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
    char path[sizeof cfg.prefix + NVML_DEVICE_UUID_V2_BUFFER_SIZE + 2];
    snprintf(path, sizeof path, "%s.%s", cfg.prefix, uuid);
    struct cudareg *r = cudareg_attach(path, limit, err, errlen);
    if (r != NULL) {
        snprintf(regions[n_regions].uuid, sizeof regions[n_regions].uuid, "%s", uuid);
        regions[n_regions++].reg = r;
    }
    return r;
}

/* Decides, once, whether CUDA ordinal dev is limited and maps its region. */
static int device_state(CUdevice dev)
{
    if (dev < 0 || dev >= CUDACFG_MAX_DEVICES)
        return DEV_UNKNOWN; /* not a device: the driver gives its own error */
    int st = __atomic_load_n(&dev_state[dev], __ATOMIC_ACQUIRE);
    if (st != DEV_UNKNOWN)
        return st;
    if (cfg.state != CUDACFG_ON)
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
    int64_t limit = cudacfg_limit(&cfg, dev, (int64_t)total);
    if (limit == 0) {
        st = DEV_FREE;
    } else if (real.cuDeviceGetUuid == NULL || real.cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) {
        snprintf(err, sizeof err, "cannot read the UUID of CUDA device %d", dev);
        st = DEV_FAILED;
    } else {
        uuid_text(&u, uuid, sizeof uuid);
        if (limit > (int64_t)total)
            limit = (int64_t)total;
        dev_reg[dev] = region_for(uuid, limit, err, sizeof err);
        st = dev_reg[dev] != NULL ? DEV_LIMITED : DEV_FAILED;
    }
    __atomic_store_n(&dev_state[dev], st, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&state_lock);
    if (err[0] != '\0')
        complain("%s; a memory limit is set, so CUDA is refused (%s)", err,
                 "unset the CUDA_DEVICE_MEMORY_LIMIT variables to run without one");
    return st;
}

/* The device of the calling thread's current context; -1 without one. */
static CUdevice current_device(CUcontext *ctx)
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

/* ---- charging ---------------------------------------------------------------- */

/* Charges bytes on dev before the driver is asked. *reg: the region charged,
 * NULL when dev has no limit (nothing to undo or record). */
static CUresult refuse_broken(void);

static CUresult charge(CUdevice dev, size_t bytes, struct cudareg **reg)
{
    *reg = NULL;
    if (cfg.state == CUDACFG_OFF)
        return CUDA_SUCCESS;
    if (cfg.state == CUDACFG_BROKEN)
        return refuse_broken();
    switch (device_state(dev)) {
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
    switch (cudareg_reserve(r, (int64_t)bytes)) {
    case 0:
        *reg = r;
        return CUDA_SUCCESS;
    case 1:
        return CUDA_ERROR_OUT_OF_MEMORY;
    default:
        complain("%s (%s)", "every accounting slot of this GPU's region is held by a live process",
                 "more than 1024 CUDA processes in one container");
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
}

static void give_back(const struct cudaledger_entry *e, void *arg)
{
    (void)arg;
    if (e->device >= 0 && e->device < CUDACFG_MAX_DEVICES && dev_reg[e->device] != NULL)
        cudareg_release(dev_reg[e->device], e->bytes);
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
    }
}

/* After the driver answered a charged allocation: a failure gives the charge
 * back; a success is recorded (out: where the driver wrote the pointer or
 * handle, read only then). If the ledger cannot grow, the allocation is
 * undone and the caller sees out of memory. reg NULL: nothing was charged. */
static CUresult settle_alloc(CUresult rc, struct cudareg *reg, enum cudaledger_kind kind,
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
                                 .kind = (uint8_t)kind},
                            old;
    if (cudaledger_add(&e, &old) != 0) {
        undo_alloc(kind, handle);
        cudareg_release(reg, (int64_t)bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (old.kind != 0)
        give_back(&old, NULL); /* a handle reused behind our back: the old one is gone */
    return CUDA_SUCCESS;
}

/* After the driver's free succeeded or failed: give back, or put back. */
static void settle_free(CUresult rc, bool had, const struct cudaledger_entry *e)
{
    if (!had)
        return;
    if (rc == CUDA_SUCCESS) {
        give_back(e, NULL);
    } else {
        struct cudaledger_entry old;
        (void)cudaledger_add(e, &old);
    }
}

/* A free of something the ledger may hold: out of the ledger first (a
 * concurrent allocation that gets the same handle back cannot be confused
 * with it), then the driver, then given back -- or put back if the driver
 * refused the free. */
#define FREE_TRACKED(kind, handle, call)                    \
    do {                                                    \
        struct cudaledger_entry e_;                         \
        bool had_ = cudaledger_take((kind), (handle), &e_); \
        CUresult rc_ = (call);                              \
        settle_free(rc_, had_, &e_);                        \
        return rc_;                                         \
    } while (0)

#define NEED(fn)                                   \
    do {                                           \
        if (!cuda_real_ready() || real.fn == NULL) \
            return CUDA_ERROR_NOT_INITIALIZED;     \
    } while (0)

static CUresult refuse_broken(void)
{
    complain("%s; CUDA is refused rather than run without the limit (%s)", cfg.why,
             "fix or unset the variable");
    return CUDA_ERROR_NOT_PERMITTED;
}

/* An allocating entry point: also refused outright while the limit cannot
 * be understood, whatever its arguments. */
#define NEED_ALLOC(fn)                   \
    do {                                 \
        NEED(fn);                        \
        if (cfg.state == CUDACFG_BROKEN) \
            return refuse_broken();      \
    } while (0)

/* ---- initialisation ------------------------------------------------------- */

CUDA_EXPORT CUresult cuInit(unsigned flags)
{
    NEED(cuInit);
    CUresult rc = real.cuInit(flags);
    if (rc != CUDA_SUCCESS || cfg.state == CUDACFG_OFF)
        return rc;
    if (cfg.state == CUDACFG_BROKEN)
        return refuse_broken();
    /* Map every limited GPU's region now, so a region that cannot be made
     * fails the process at its start, not at some later allocation. */
    int n = 0;
    if (real.cuDeviceGetCount != NULL && real.cuDeviceGetCount(&n) == CUDA_SUCCESS)
        for (int d = 0; d < n && d < CUDACFG_MAX_DEVICES; d++)
            if (device_state(d) == DEV_FAILED)
                return CUDA_ERROR_NOT_PERMITTED;
    return CUDA_SUCCESS;
}

/* ---- linear allocations --------------------------------------------------- */

/* The common shape: charge on the current device, call, record or undo. */
#define ALLOC_ON_CURRENT(call, dptr, bytes)                                           \
    do {                                                                              \
        CUcontext ctx_ = NULL;                                                        \
        CUdevice dev_ = current_device(&ctx_);                                        \
        struct cudareg *reg_;                                                         \
        if ((dptr) == NULL || dev_ < 0)                                               \
            return call;                                                              \
        CUresult rc_ = charge(dev_, (bytes), &reg_);                                  \
        if (rc_ != CUDA_SUCCESS)                                                      \
            return rc_;                                                               \
        return settle_alloc(call, reg_, LEDGER_POINTER, (dptr), ctx_, dev_, (bytes)); \
    } while (0)

CUDA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    NEED_ALLOC(cuMemAlloc_v2);
    ALLOC_ON_CURRENT(real.cuMemAlloc_v2(dptr, bytesize), dptr, bytesize);
}

CUDA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned flags)
{
    NEED_ALLOC(cuMemAllocManaged);
    ALLOC_ON_CURRENT(real.cuMemAllocManaged(dptr, bytesize, flags), dptr, bytesize);
}

/* Stream-ordered allocations come from the pool of the stream's device,
 * which is the current context's device for every stream the caller may
 * pass here (a stream of another context is an error in the driver). */
CUDA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    NEED_ALLOC(cuMemAllocAsync);
    ALLOC_ON_CURRENT(real.cuMemAllocAsync(dptr, bytesize, s), dptr, bytesize);
}

CUDA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    NEED_ALLOC(cuMemAllocAsync_ptsz);
    ALLOC_ON_CURRENT(real.cuMemAllocAsync_ptsz(dptr, bytesize, s), dptr, bytesize);
}

/* Pools created here remember their device; any other pool (a device's
 * default pool, an imported one) is the current device's. */
static struct {
    CUmemoryPool pool;
    CUdevice dev;
} pools[256];
static unsigned n_pools;

static CUdevice pool_device(CUmemoryPool p, CUdevice fallback)
{
    unsigned n = __atomic_load_n(&n_pools, __ATOMIC_ACQUIRE);
    for (unsigned i = 0; i < n; i++)
        if (pools[i].pool == p)
            return pools[i].dev;
    return fallback;
}

CUDA_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    NEED(cuMemPoolCreate);
    CUresult rc = real.cuMemPoolCreate(pool, props);
    if (rc == CUDA_SUCCESS && pool != NULL && props != NULL &&
        props->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        pthread_mutex_lock(&state_lock);
        if (n_pools < sizeof pools / sizeof pools[0]) {
            pools[n_pools].pool = *pool;
            pools[n_pools].dev = props->location.id;
            __atomic_store_n(&n_pools, n_pools + 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&state_lock);
    }
    return rc;
}

static CUresult alloc_from_pool(CUresult (*fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream),
                                CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s)
{
    CUcontext ctx = NULL;
    CUdevice dev = current_device(&ctx);
    if (dptr == NULL || dev < 0)
        return fn(dptr, bytes, pool, s);
    dev = pool_device(pool, dev);
    struct cudareg *reg;
    CUresult rc = charge(dev, bytes, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    return settle_alloc(fn(dptr, bytes, pool, s), reg, LEDGER_POINTER, dptr, ctx, dev, bytes);
}

CUDA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream s)
{
    NEED_ALLOC(cuMemAllocFromPoolAsync);
    return alloc_from_pool(real.cuMemAllocFromPoolAsync, dptr, bytesize, pool, s);
}

CUDA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream s)
{
    NEED_ALLOC(cuMemAllocFromPoolAsync_ptsz);
    return alloc_from_pool(real.cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, s);
}

/* The driver pads each row to its pitch, which it tells only afterwards:
 * the unpadded size is charged first, the padding once it is known. */
CUDA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                        size_t height, unsigned elem)
{
    NEED_ALLOC(cuMemAllocPitch_v2);
    CUcontext ctx = NULL;
    CUdevice dev = current_device(&ctx);
    size_t bytes;
    if (dptr == NULL || pitch == NULL || dev < 0 || __builtin_mul_overflow(width, height, &bytes))
        return real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    struct cudareg *reg;
    CUresult rc = charge(dev, bytes, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    if (reg == NULL)
        return rc;
    if (rc != CUDA_SUCCESS) {
        cudareg_release(reg, (int64_t)bytes);
        return rc;
    }
    size_t padded;
    if (__builtin_mul_overflow(*pitch, height, &padded) || padded < bytes)
        padded = bytes;
    if (padded > bytes) {
        struct cudareg *more;
        if (charge(dev, padded - bytes, &more) != CUDA_SUCCESS) {
            real.cuMemFree_v2(*dptr);
            cudareg_release(reg, (int64_t)bytes);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    return settle_alloc(CUDA_SUCCESS, reg, LEDGER_POINTER, dptr, ctx, dev, padded);
}

static CUresult free_pointer(CUresult (*fn)(CUdeviceptr, CUstream), CUdeviceptr p, CUstream s,
                             bool async)
{
    FREE_TRACKED(LEDGER_POINTER, p, async ? fn(p, s) : real.cuMemFree_v2(p));
}

CUDA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED(cuMemFree_v2);
    return free_pointer(NULL, dptr, NULL, false);
}

/* An asynchronous free is given back when it is enqueued: the memory returns
 * to the pool by the time any later work on the stream runs. */
CUDA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    NEED(cuMemFreeAsync);
    return free_pointer(real.cuMemFreeAsync, dptr, s, true);
}

CUDA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    NEED(cuMemFreeAsync_ptsz);
    return free_pointer(real.cuMemFreeAsync_ptsz, dptr, s, true);
}

/* ---- virtual memory management (cuMemCreate + cuMemMap) ------------------- */

/* Physical memory is made by cuMemCreate and charged there; cuMemMap only
 * maps it (maps of one allocation, even in several places, cost nothing
 * more). It belongs to no context, so only cuMemRelease gives it back. */
CUDA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    NEED_ALLOC(cuMemCreate);
    if (handle == NULL || prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return real.cuMemCreate(handle, size, prop, flags);
    CUdevice dev = prop->location.id;
    struct cudareg *reg;
    CUresult rc = charge(dev, size, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    return settle_alloc(real.cuMemCreate(handle, size, prop, flags), reg, LEDGER_HANDLE, handle,
                        NULL, dev, size);
}

CUDA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    NEED(cuMemRelease);
    FREE_TRACKED(LEDGER_HANDLE, handle, real.cuMemRelease(handle));
}

/* ---- arrays ---------------------------------------------------------------- */

static size_t element_size(int format)
{
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4; /* 32-bit formats, and a fair price for packed/compressed ones */
    }
}

/* Bytes of an array level: elements x element size; 0 on overflow. */
static size_t array_bytes(size_t w, size_t h, size_t d, int format, unsigned channels)
{
    size_t b = element_size(format) * (channels ? channels : 1);
    if (__builtin_mul_overflow(b, w, &b) || __builtin_mul_overflow(b, h ? h : 1, &b) ||
        __builtin_mul_overflow(b, d ? d : 1, &b))
        return 0;
    return b;
}

static CUresult array_create(CUarray *arr, size_t bytes, bool charged_path,
                             CUresult (*call)(CUarray *, const void *), const void *desc)
{
    CUcontext ctx = NULL;
    CUdevice dev = current_device(&ctx);
    if (!charged_path || arr == NULL || dev < 0)
        return call(arr, desc);
    struct cudareg *reg;
    CUresult rc = charge(dev, bytes, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    return settle_alloc(call(arr, desc), reg, LEDGER_ARRAY, arr, ctx, dev, bytes);
}

static CUresult call_array2d(CUarray *a, const void *d)
{
    return real.cuArrayCreate_v2(a, d);
}

static CUresult call_array3d(CUarray *a, const void *d)
{
    return real.cuArray3DCreate_v2(a, d);
}

CUDA_EXPORT CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d)
{
    NEED_ALLOC(cuArrayCreate_v2);
    size_t bytes = d ? array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels) : 0;
    return array_create(arr, bytes, d != NULL && bytes > 0, call_array2d, d);
}

CUDA_EXPORT CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    NEED_ALLOC(cuArray3DCreate_v2);
    /* A deferred-mapping array has no memory of its own: what backs it comes
     * from cuMemCreate, charged there. */
    bool memory = d != NULL && !(d->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING);
    size_t bytes =
        memory ? array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels) : 0;
    return array_create(arr, bytes, memory && bytes > 0, call_array3d, d);
}

CUDA_EXPORT CUresult cuArrayDestroy(CUarray arr)
{
    NEED(cuArrayDestroy);
    FREE_TRACKED(LEDGER_ARRAY, (uint64_t)(uintptr_t)arr, real.cuArrayDestroy(arr));
}

CUDA_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                            unsigned levels)
{
    NEED_ALLOC(cuMipmappedArrayCreate);
    CUcontext ctx = NULL;
    CUdevice dev = current_device(&ctx);
    size_t bytes = 0;
    if (d != NULL && !(d->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING)) {
        size_t w = d->Width, h = d->Height, dep = d->Depth;
        bool layered = d->Flags & CUDA_ARRAY3D_LAYERED;
        for (unsigned l = 0; l < levels && l < 64; l++) {
            size_t b = array_bytes(w, h, dep, d->Format, d->NumChannels);
            if (b == 0 || __builtin_add_overflow(bytes, b, &bytes)) {
                bytes = 0;
                break;
            }
            w = w > 1 ? w / 2 : 1;
            h = h > 1 ? h / 2 : h;
            if (!layered)
                dep = dep > 1 ? dep / 2 : dep;
        }
    }
    if (arr == NULL || bytes == 0 || dev < 0)
        return real.cuMipmappedArrayCreate(arr, d, levels);
    struct cudareg *reg;
    CUresult rc = charge(dev, bytes, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    return settle_alloc(real.cuMipmappedArrayCreate(arr, d, levels), reg, LEDGER_MIPMAP, arr, ctx,
                        dev, bytes);
}

CUDA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr)
{
    NEED(cuMipmappedArrayDestroy);
    FREE_TRACKED(LEDGER_MIPMAP, (uint64_t)(uintptr_t)arr, real.cuMipmappedArrayDestroy(arr));
}

/* ---- contexts: their teardown frees what was made in them ------------------ */

CUDA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED(cuCtxDestroy_v2);
    CUresult rc = real.cuCtxDestroy_v2(ctx);
    if (rc == CUDA_SUCCESS && ctx != NULL)
        cudaledger_take_context((uint64_t)(uintptr_t)ctx, give_back, NULL);
    return rc;
}

CUDA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    NEED(cuDevicePrimaryCtxRetain);
    CUresult rc = real.cuDevicePrimaryCtxRetain(pctx, dev);
    if (rc == CUDA_SUCCESS && pctx != NULL && dev >= 0 && dev < CUDACFG_MAX_DEVICES)
        __atomic_store_n(&primary_ctx[dev], *pctx, __ATOMIC_RELEASE);
    return rc;
}

/* The primary context's memory goes when the context is really destroyed:
 * the driver says whether it still is active, we do not count retains. */
static void primary_gone(CUdevice dev, bool reset)
{
    if (dev < 0 || dev >= CUDACFG_MAX_DEVICES)
        return;
    CUcontext c = __atomic_load_n(&primary_ctx[dev], __ATOMIC_ACQUIRE);
    if (c == NULL)
        return;
    if (!reset) {
        unsigned flags;
        int active = 1;
        if (real.cuDevicePrimaryCtxGetState == NULL ||
            real.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || active)
            return;
    }
    cudaledger_take_context((uint64_t)(uintptr_t)c, give_back, NULL);
}

CUDA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    NEED(cuDevicePrimaryCtxRelease_v2);
    CUresult rc = real.cuDevicePrimaryCtxRelease_v2(dev);
    if (rc == CUDA_SUCCESS)
        primary_gone(dev, false);
    return rc;
}

CUDA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    NEED(cuDevicePrimaryCtxReset_v2);
    CUresult rc = real.cuDevicePrimaryCtxReset_v2(dev);
    if (rc == CUDA_SUCCESS)
        primary_gone(dev, true);
    return rc;
}

/* ---- what the application sees ---------------------------------------------- */

CUDA_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    NEED(cuMemGetInfo_v2);
    CUresult rc = real.cuMemGetInfo_v2(free_bytes, total_bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    CUdevice dev = current_device(NULL);
    if (dev < 0 || device_state(dev) != DEV_LIMITED)
        return rc;
    struct cudareg *r = dev_reg[dev];
    int64_t limit = cudareg_limit(r), left = limit - cudareg_usage(r);
    if (left < 0)
        left = 0;
    if (total_bytes != NULL)
        *total_bytes = (size_t)limit;
    if (free_bytes != NULL && *free_bytes > (size_t)left)
        *free_bytes = (size_t)left;
    return rc;
}

CUDA_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    NEED(cuDeviceTotalMem_v2);
    CUresult rc = real.cuDeviceTotalMem_v2(bytes, dev);
    if (rc == CUDA_SUCCESS && bytes != NULL && device_state(dev) == DEV_LIMITED)
        *bytes = (size_t)cudareg_limit(dev_reg[dev]);
    return rc;
}

/* ---- NVML: nvidia-smi and frameworks that size pools from it -------------- */

/* The region of an NVML device, by its UUID; NULL when it has no limit.
 * The limit variables are per CUDA ordinal; NVML's index inside a container
 * counts the same visible GPUs in PCI order, as CUDA does when the ordinals
 * follow the bus (one GPU per container, the common case, is always 0). */
static struct cudareg *nvml_region(nvmlDevice_t device, unsigned long long total, bool *refuse)
{
    *refuse = false;
    if (cfg.state == CUDACFG_OFF)
        return NULL;
    if (cfg.state == CUDACFG_BROKEN) {
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
        int64_t limit = cudacfg_container_limit(&cfg, (int)index, (int64_t)total);
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
        complain("%s; a memory limit is set, so NVML's memory figures are refused (%s)", err,
                 "unset the CUDA_DEVICE_MEMORY_LIMIT variables to run without one");
        *refuse = true;
    }
    return r;
}

static void nvml_view(struct cudareg *r, unsigned long long *total, unsigned long long *free_b,
                      unsigned long long *used)
{
    int64_t limit = cudareg_limit(r), u = cudareg_usage(r);
    *total = (unsigned long long)limit;
    *used = (unsigned long long)(u < limit ? u : limit);
    *free_b = *total - *used;
}

CUDA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m)
{
    if (!cuda_nvml_ready() || real.nvmlDeviceGetMemoryInfo == NULL)
        return 999; /* NVML_ERROR_UNKNOWN: no real NVML behind us */
    nvmlReturn_t rc = real.nvmlDeviceGetMemoryInfo(device, m);
    if (rc != NVML_SUCCESS || m == NULL)
        return rc;
    bool refuse;
    struct cudareg *r = nvml_region(device, m->total, &refuse);
    if (refuse)
        return NVML_ERROR_NO_PERMISSION;
    if (r != NULL)
        nvml_view(r, &m->total, &m->free, &m->used);
    return rc;
}

CUDA_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m)
{
    if (!cuda_nvml_ready() || real.nvmlDeviceGetMemoryInfo_v2 == NULL)
        return 999;
    nvmlReturn_t rc = real.nvmlDeviceGetMemoryInfo_v2(device, m);
    if (rc != NVML_SUCCESS || m == NULL)
        return rc;
    bool refuse;
    struct cudareg *r = nvml_region(device, m->total, &refuse);
    if (refuse)
        return NVML_ERROR_NO_PERMISSION;
    if (r != NULL) {
        nvml_view(r, &m->total, &m->free, &m->used);
        m->reserved = 0; /* the driver's reservation is outside the share */
    }
    return rc;
}

/* ---- the table cuda_intercept.c hands out ------------------------------------ */

#define HOOK(n, b, v)                                       \
    {                                                       \
#n, b, v, false, false, (void *)n, (void **)&real.n \
    }
#define HOOK_PTSZ(n, b, v)                                 \
    {                                                      \
#n, b, v, true, false, (void *)n, (void **)&real.n \
    }
#define HOOK_NVML(n)                                        \
    {                                                       \
#n, #n, 0, false, true, (void *)n, (void **)&real.n \
    }

/* clang-format off */
const struct cuda_hook cuda_hooks[] = {
    HOOK(cuInit, "cuInit", 2000),
    {"cuGetProcAddress", "cuGetProcAddress", 11030, false, false,
     (void *)cuGetProcAddress, (void **)&real.cuGetProcAddress},
    {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, false, false,
     (void *)cuGetProcAddress_v2, (void **)&real.cuGetProcAddress_v2},
    HOOK(cuMemAlloc_v2, "cuMemAlloc", 3020),
    HOOK(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020),
    HOOK(cuMemAllocManaged, "cuMemAllocManaged", 6000),
    HOOK(cuMemAllocAsync, "cuMemAllocAsync", 11020),
    HOOK_PTSZ(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020),
    HOOK(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020),
    HOOK_PTSZ(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020),
    HOOK(cuMemFree_v2, "cuMemFree", 3020),
    HOOK(cuMemFreeAsync, "cuMemFreeAsync", 11020),
    HOOK_PTSZ(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020),
    HOOK(cuMemCreate, "cuMemCreate", 10020),
    HOOK(cuMemRelease, "cuMemRelease", 10020),
    HOOK(cuMemPoolCreate, "cuMemPoolCreate", 11020),
    HOOK(cuArrayCreate_v2, "cuArrayCreate", 3020),
    HOOK(cuArray3DCreate_v2, "cuArray3DCreate", 3020),
    HOOK(cuArrayDestroy, "cuArrayDestroy", 2000),
    HOOK(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000),
    HOOK(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000),
    HOOK(cuCtxDestroy_v2, "cuCtxDestroy", 4000),
    HOOK(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000),
    HOOK(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000),
    HOOK(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000),
    HOOK(cuMemGetInfo_v2, "cuMemGetInfo", 3020),
    HOOK(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020),
    HOOK_NVML(nvmlDeviceGetMemoryInfo),
    HOOK_NVML(nvmlDeviceGetMemoryInfo_v2),
};
/* clang-format on */
const unsigned cuda_hook_count = sizeof cuda_hooks / sizeof cuda_hooks[0];

CUresult cuda_real_getprocaddress(const char *s, void **p, int v, cuuint64_t f)
{
    return real.cuGetProcAddress ? real.cuGetProcAddress(s, p, v, f) : CUDA_ERROR_NOT_FOUND;
}

CUresult cuda_real_getprocaddress_v2(const char *s, void **p, int v, cuuint64_t f, int *st)
{
    return real.cuGetProcAddress_v2 ? real.cuGetProcAddress_v2(s, p, v, f, st)
                                    : CUDA_ERROR_NOT_FOUND;
}

/* ---- loading the real libraries ------------------------------------------------ */

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT, nvml_once = PTHREAD_ONCE_INIT;
static bool cuda_loaded, nvml_loaded;

static void *open_lib(const char *soname)
{
    /* Already in the process (the application loaded it) or loaded now. */
    void *h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
    return h != NULL ? h : dlopen(soname, RTLD_NOW);
}

static void load_cuda(void)
{
    cuda_intercept_init();
    void *h = open_lib("libcuda.so.1");
    if (h == NULL)
        return;
    for (unsigned i = 0; i < cuda_hook_count; i++)
        if (!cuda_hooks[i].nvml)
            *cuda_hooks[i].real = cuda_real_dlsym(h, cuda_hooks[i].name);
    *(void **)&real.cuCtxGetCurrent = cuda_real_dlsym(h, "cuCtxGetCurrent");
    *(void **)&real.cuCtxGetDevice = cuda_real_dlsym(h, "cuCtxGetDevice");
    *(void **)&real.cuDeviceGetCount = cuda_real_dlsym(h, "cuDeviceGetCount");
    *(void **)&real.cuDeviceGetUuid = cuda_real_dlsym(h, "cuDeviceGetUuid_v2");
    if (real.cuDeviceGetUuid == NULL)
        *(void **)&real.cuDeviceGetUuid = cuda_real_dlsym(h, "cuDeviceGetUuid");
    *(void **)&real.cuDevicePrimaryCtxGetState = cuda_real_dlsym(h, "cuDevicePrimaryCtxGetState");
    cuda_loaded = real.cuCtxGetCurrent != NULL && real.cuCtxGetDevice != NULL;
}

static void load_nvml(void)
{
    cuda_intercept_init();
    void *h = open_lib("libnvidia-ml.so.1");
    if (h == NULL)
        return;
    for (unsigned i = 0; i < cuda_hook_count; i++)
        if (cuda_hooks[i].nvml)
            *cuda_hooks[i].real = cuda_real_dlsym(h, cuda_hooks[i].name);
    *(void **)&real.nvmlDeviceGetUUID = cuda_real_dlsym(h, "nvmlDeviceGetUUID");
    *(void **)&real.nvmlDeviceGetIndex = cuda_real_dlsym(h, "nvmlDeviceGetIndex");
    nvml_loaded = true;
}

bool cuda_real_ready(void)
{
    pthread_once(&cuda_once, load_cuda);
    return cuda_loaded;
}

bool cuda_nvml_ready(void)
{
    pthread_once(&nvml_once, load_nvml);
    return nvml_loaded;
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
 * getenv-level work here (most processes never touch CUDA). */
__attribute__((constructor)) static void cuda_hooks_load(void)
{
    cudacfg_load(&cfg, environ);
    cuda_intercept_init();
    if (cfg.state != CUDACFG_OFF)
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* cuda_hooks_mem.c -- the memory wrappers of libgpupool-cuda: linear
 * allocations, arrays, virtual memory management, contexts and what the
 * application is told of its memory (docs/isolation.md).
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
#include "cuda_account.h"
#include "cuda_real.h"

#include <stdint.h>

/* ---- initialisation ------------------------------------------------------- */

CUDA_EXPORT CUresult cuInit(unsigned flags)
{
    NEED(cuInit);
    CUresult rc = real.cuInit(flags);
    if (rc != CUDA_SUCCESS || cuda_cfg.state == CUDACFG_OFF)
        return rc;
    if (cuda_cfg.state == CUDACFG_BROKEN)
        return cuda_refuse_broken();
    /* Map every limited GPU's region now, so a region that cannot be made
     * fails the process at its start, not at some later allocation. */
    int n = 0;
    if (real.cuDeviceGetCount != NULL && real.cuDeviceGetCount(&n) == CUDA_SUCCESS)
        for (int d = 0; d < n && d < CUDACFG_MAX_DEVICES; d++)
            if (cuda_device_state(d) == DEV_FAILED)
                return CUDA_ERROR_NOT_PERMITTED;
    return CUDA_SUCCESS;
}

/* ---- linear allocations --------------------------------------------------- */

/* The common shape: charge on the current device, call, record or undo. */
#define ALLOC_ON_CURRENT(call, dptr, bytes)                                                \
    do {                                                                                   \
        CUcontext ctx_ = NULL;                                                             \
        CUdevice dev_ = cuda_current_device(&ctx_);                                        \
        struct cudareg *reg_;                                                              \
        if ((dptr) == NULL || dev_ < 0)                                                    \
            return call;                                                                   \
        CUresult rc_ = cuda_charge(dev_, (bytes), &reg_);                                  \
        if (rc_ != CUDA_SUCCESS)                                                           \
            return rc_;                                                                    \
        return cuda_settle_alloc(call, reg_, LEDGER_POINTER, (dptr), ctx_, dev_, (bytes)); \
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

/* The legacy 32-bit ABI (cudaVersion below 3020): a 32-bit address written
 * through an unsigned int. Charged like its successor. */
CUDA_EXPORT CUresult cuMemAlloc(unsigned *dptr, unsigned bytesize)
{
    NEED_ALLOC(cuMemAlloc);
    CUcontext ctx = NULL;
    CUdevice dev = cuda_current_device(&ctx);
    struct cudareg *reg;
    if (dptr == NULL || dev < 0)
        return real.cuMemAlloc(dptr, bytesize);
    CUresult rc = cuda_charge(dev, bytesize, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real.cuMemAlloc(dptr, bytesize);
    if (reg == NULL)
        return rc;
    if (rc != CUDA_SUCCESS) {
        cudareg_release(reg, bytesize);
        return rc;
    }
    struct cudaledger_entry e = {.handle = *dptr,
                                 .ctx = (uint64_t)(uintptr_t)ctx,
                                 .bytes = bytesize,
                                 .device = dev,
                                 .kind = LEDGER_POINTER};
    if (cuda_record(reg, &e) != 0) {
        real.cuMemFree(*dptr);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* The row pitch the driver will pick: the width rounded up to the texture
 * pitch alignment, and to 512 bytes, what NVIDIA's drivers have used. */
static size_t pitch_alignment(CUdevice dev)
{
    int a = 0;
    if (real.cuDeviceGetAttribute == NULL ||
        real.cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, dev) !=
            CUDA_SUCCESS ||
        a < 512 || (a & (a - 1)) != 0)
        a = 512;
    return (size_t)a;
}

/* The driver pads each row to its pitch, which it tells only afterwards, so
 * the padded size is charged up front (D10: charging the padding after the
 * driver allocated it let use pass the limit until the charge failed); the
 * charge is then made exact, up or down, from the pitch it returned. */
CUDA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                        size_t height, unsigned elem)
{
    NEED_ALLOC(cuMemAllocPitch_v2);
    CUcontext ctx = NULL;
    CUdevice dev = cuda_current_device(&ctx);
    size_t align = dev >= 0 ? pitch_alignment(dev) : 512, row, bytes;
    if (dptr == NULL || pitch == NULL || dev < 0 ||
        __builtin_add_overflow(width, align - 1, &row) ||
        __builtin_mul_overflow(row & ~(align - 1), height, &bytes))
        return real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    struct cudareg *reg;
    CUresult rc = cuda_charge(dev, bytes, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    if (reg == NULL || rc != CUDA_SUCCESS)
        return cuda_settle_alloc(rc, reg, LEDGER_POINTER, dptr, ctx, dev, bytes);
    size_t padded;
    if (__builtin_mul_overflow(*pitch, height, &padded))
        padded = bytes;
    if (padded > bytes) {
        struct cudareg *more;
        if (cuda_charge(dev, padded - bytes, &more) != CUDA_SUCCESS) {
            real.cuMemFree_v2(*dptr);
            cudareg_release(reg, (int64_t)bytes);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if (padded < bytes) {
        cudareg_release(reg, (int64_t)(bytes - padded));
    }
    return cuda_settle_alloc(CUDA_SUCCESS, reg, LEDGER_POINTER, dptr, ctx, dev, padded);
}

CUDA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED(cuMemFree_v2);
    FREE_TRACKED(LEDGER_POINTER, dptr, real.cuMemFree_v2(dptr));
}

CUDA_EXPORT CUresult cuMemFree(unsigned dptr)
{
    NEED(cuMemFree);
    FREE_TRACKED(LEDGER_POINTER, dptr, real.cuMemFree(dptr));
}

/* ---- virtual memory management ----------------------------------------------
 *
 * cuMemCreate makes the physical memory, charged there. It lives until
 * every handle to it is released AND every mapping of it is unmapped, in
 * whatever order (NVIDIA's cuMemRelease: the handle may be released while
 * mappings remain; the CUDA VMM samples and UCX do exactly that, D2). The
 * ledger keeps, per handle, the handles not yet released (refs: 1 at
 * creation, +1 per cuMemRetainAllocationHandle) and the live mappings
 * (maps), and one LEDGER_MAPPING entry per mapped address naming its
 * handle. The charge goes back when both counts reach zero. */

CUDA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    NEED_ALLOC(cuMemCreate);
    if (handle == NULL || prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return real.cuMemCreate(handle, size, prop, flags);
    CUdevice dev = prop->location.id;
    struct cudareg *reg;
    CUresult rc = cuda_charge(dev, size, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    return cuda_settle_alloc(real.cuMemCreate(handle, size, prop, flags), reg, LEDGER_HANDLE,
                             handle, NULL, dev, size);
}

/* A handle's counts changed by (drefs, dmaps); when both reached zero the
 * memory is gone -- unless another process was given it (exported), whose
 * use may outlive ours: that stays charged until this process exits. */
static void vmm_adjust(CUmemGenericAllocationHandle h, int drefs, int dmaps)
{
    struct cudaledger_entry gone;
    if (cudaledger_update(LEDGER_HANDLE, h, drefs, dmaps, 0, &gone) == 1 &&
        !(gone.flags & LEDGER_EXPORTED))
        cuda_give_back(&gone, NULL);
}

CUDA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    NEED(cuMemRelease);
    /* The reference goes first (a handle value the driver hands out again
     * after the release must not meet our old entry), and comes back if the
     * driver refuses. */
    struct cudaledger_entry gone;
    int st = cudaledger_update(LEDGER_HANDLE, handle, -1, 0, 0, &gone);
    CUresult rc = real.cuMemRelease(handle);
    if (rc == CUDA_SUCCESS) {
        if (st == 1 && !(gone.flags & LEDGER_EXPORTED))
            cuda_give_back(&gone, NULL);
    } else if (st == 1) {
        struct cudaledger_entry old;
        gone.refs = 1;
        (void)cudaledger_add(&gone, &old);
    } else if (st == 0) {
        (void)cudaledger_update(LEDGER_HANDLE, handle, +1, 0, 0, &gone);
    }
    return rc;
}

CUDA_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    NEED(cuMemMap);
    CUresult rc = real.cuMemMap(ptr, size, offset, handle, flags);
    if (rc != CUDA_SUCCESS || cuda_cfg.state != CUDACFG_ON)
        return rc;
    struct cudaledger_entry gone;
    if (cudaledger_update(LEDGER_HANDLE, handle, 0, +1, 0, &gone) < 0)
        return rc; /* not charged here (made without a limit, or imported) */
    struct cudaledger_entry m = {.handle = ptr,
                                 .ctx = handle,
                                 .bytes = (int64_t)size,
                                 .device = -1,
                                 .kind = LEDGER_MAPPING},
                            old;
    if (cudaledger_add(&m, &old) != 0) {
        /* Without a record the unmap could not give back: refuse the map. */
        (void)real.cuMemUnmap(ptr, size);
        vmm_adjust(handle, 0, -1);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (old.kind != 0)
        vmm_adjust(old.ctx, 0, -1); /* an unmap we did not see */
    return rc;
}

struct range {
    CUdeviceptr lo, hi;
};

static bool mapping_in(const struct cudaledger_entry *e, const void *arg)
{
    const struct range *r = arg;
    return e->kind == LEDGER_MAPPING && e->handle >= r->lo && e->handle < r->hi;
}

/* Collects the mappings an unmap took out, to settle them afterwards (the
 * ledger's callback runs under its lock). Past the bound, a mapping's
 * charge stays until the process exits: never given back early. */
struct taken {
    struct cudaledger_entry e[256];
    unsigned n;
};

static void keep_taken(const struct cudaledger_entry *e, void *arg)
{
    struct taken *t = arg;
    if (t->n < sizeof t->e / sizeof t->e[0])
        t->e[t->n++] = *e;
}

CUDA_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED(cuMemUnmap);
    if (cuda_cfg.state != CUDACFG_ON)
        return real.cuMemUnmap(ptr, size);
    /* The records out first (no map can reuse these addresses before the
     * driver unmaps them), then the driver, then settled -- or put back.
     * The common case is one mapping unmapped whole: one lookup. */
    struct taken t = {.n = 0};
    if (cudaledger_take(LEDGER_MAPPING, ptr, &t.e[0]))
        t.n = 1;
    if (t.n == 0 || t.e[0].bytes < (int64_t)size) {
        struct range r = {ptr, ptr + size};
        cudaledger_take_matching(mapping_in, &r, keep_taken, &t);
    }
    CUresult rc = real.cuMemUnmap(ptr, size);
    for (unsigned i = 0; i < t.n; i++) {
        struct cudaledger_entry old;
        if (rc == CUDA_SUCCESS)
            vmm_adjust(t.e[i].ctx, 0, -1);
        else
            (void)cudaledger_add(&t.e[i], &old);
    }
    return rc;
}

CUDA_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    NEED(cuMemRetainAllocationHandle);
    CUresult rc = real.cuMemRetainAllocationHandle(handle, addr);
    struct cudaledger_entry gone;
    if (rc == CUDA_SUCCESS && handle != NULL)
        (void)cudaledger_update(LEDGER_HANDLE, *handle, +1, 0, 0, &gone);
    return rc;
}

/* Memory another process made is charged there; an import that gives back
 * a handle of ours is one more reference to it. */
CUDA_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                    void *os_handle, int type)
{
    NEED(cuMemImportFromShareableHandle);
    CUresult rc = real.cuMemImportFromShareableHandle(handle, os_handle, type);
    struct cudaledger_entry gone;
    if (rc == CUDA_SUCCESS && handle != NULL)
        (void)cudaledger_update(LEDGER_HANDLE, *handle, +1, 0, 0, &gone);
    return rc;
}

/* Exported memory may stay in use by the importer after we let it go, and
 * the importer does not charge it: it stays charged here until this process
 * exits. */
CUDA_EXPORT CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h,
                                                  int type, unsigned long long flags)
{
    NEED(cuMemExportToShareableHandle);
    CUresult rc = real.cuMemExportToShareableHandle(shareable, h, type, flags);
    struct cudaledger_entry gone;
    if (rc == CUDA_SUCCESS)
        (void)cudaledger_update(LEDGER_HANDLE, h, 0, 0, LEDGER_EXPORTED, &gone);
    return rc;
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
    CUdevice dev = cuda_current_device(&ctx);
    if (!charged_path || arr == NULL || dev < 0)
        return call(arr, desc);
    struct cudareg *reg;
    CUresult rc = cuda_charge(dev, bytes, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    return cuda_settle_alloc(call(arr, desc), reg, LEDGER_ARRAY, arr, ctx, dev, bytes);
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
    CUdevice dev = cuda_current_device(&ctx);
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
    CUresult rc = cuda_charge(dev, bytes, &reg);
    if (rc != CUDA_SUCCESS)
        return rc;
    return cuda_settle_alloc(real.cuMipmappedArrayCreate(arr, d, levels), reg, LEDGER_MIPMAP, arr,
                             ctx, dev, bytes);
}

CUDA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr)
{
    NEED(cuMipmappedArrayDestroy);
    FREE_TRACKED(LEDGER_MIPMAP, (uint64_t)(uintptr_t)arr, real.cuMipmappedArrayDestroy(arr));
}

/* ---- contexts: their teardown frees what was made in them ------------------ */

void cuda_context_gone(CUcontext ctx, CUdevice dev)
{
    cudaledger_take_context((uint64_t)(uintptr_t)ctx, cuda_give_back, NULL);
    if (dev >= 0)
        cuda_pools_settle(dev, false);
}

static CUresult ctx_destroy(CUresult (*fn)(CUcontext), CUcontext ctx)
{
    CUdevice dev = cuda_cfg.state == CUDACFG_ON ? cuda_context_device(ctx) : -1;
    CUresult rc = fn(ctx);
    if (rc == CUDA_SUCCESS && ctx != NULL)
        cuda_context_gone(ctx, dev);
    return rc;
}

CUDA_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED(cuCtxDestroy_v2);
    return ctx_destroy(real.cuCtxDestroy_v2, ctx);
}

CUDA_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    NEED(cuCtxDestroy);
    return ctx_destroy(real.cuCtxDestroy, ctx);
}

/* Device bytes behind a context limit of `value`: the malloc heap is
 * that; the stack is per thread, for every thread the GPU can hold. 0 for
 * the limits that size no device memory, or when it cannot be told. */
static int64_t ctx_limit_bytes(int limit, size_t value, CUdevice dev)
{
    if (limit == CU_LIMIT_MALLOC_HEAP_SIZE)
        return value > (size_t)INT64_MAX ? INT64_MAX : (int64_t)value;
    int sms = 0, threads = 0;
    if (limit != CU_LIMIT_STACK_SIZE || real.cuDeviceGetAttribute == NULL ||
        real.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != 0 ||
        real.cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                  dev) != 0 ||
        sms <= 0 || threads <= 0)
        return 0;
    size_t b;
    if (__builtin_mul_overflow(value, (size_t)sms * (size_t)threads, &b) || b > (size_t)INT64_MAX)
        return INT64_MAX;
    return (int64_t)b;
}

/* Growing the malloc heap or the per-thread stack takes device memory the
 * application chose: the growth over what the context had is charged (its
 * first size is the context's own reservation, outside the share), and
 * goes with the context. */
CUDA_EXPORT CUresult cuCtxSetLimit(int limit, size_t value)
{
    NEED(cuCtxSetLimit);
    CUcontext ctx = NULL;
    CUdevice dev = cuda_current_device(&ctx);
    size_t before = 0;
    if ((limit != CU_LIMIT_STACK_SIZE && limit != CU_LIMIT_MALLOC_HEAP_SIZE) || dev < 0 ||
        cuda_cfg.state == CUDACFG_OFF || real.cuCtxGetLimit == NULL ||
        real.cuCtxGetLimit(&before, limit) != CUDA_SUCCESS)
        return real.cuCtxSetLimit(limit, value);
    int64_t grow = ctx_limit_bytes(limit, value, dev) - ctx_limit_bytes(limit, before, dev);
    uint64_t key = (uint64_t)(uintptr_t)ctx | (uint64_t)limit;
    struct cudaledger_entry e;
    bool had = cudaledger_take(LEDGER_CTX_LIMIT, key, &e);
    if (!had)
        e = (struct cudaledger_entry){.handle = key,
                                      .ctx = (uint64_t)(uintptr_t)ctx,
                                      .device = dev,
                                      .kind = LEDGER_CTX_LIMIT};
    struct cudareg *reg = NULL;
    if (grow > 0) {
        CUresult rc = cuda_charge(dev, (size_t)grow, &reg);
        if (rc != CUDA_SUCCESS) {
            struct cudaledger_entry old;
            if (had)
                (void)cudaledger_add(&e, &old);
            return rc;
        }
    }
    CUresult rc = real.cuCtxSetLimit(limit, value);
    if (rc != CUDA_SUCCESS) {
        if (reg != NULL)
            cudareg_release(reg, grow);
        grow = 0;
    } else if (grow < 0) {
        int64_t back = -grow < e.bytes ? -grow : e.bytes;
        struct cudareg *r = cuda_device_region(dev);
        if (r != NULL && back > 0)
            cudareg_release(r, back);
        grow = -back;
    } else if (reg == NULL) {
        grow = 0; /* no limit on this device: nothing charged */
    }
    e.bytes += grow;
    if (e.bytes > 0 && cuda_device_region(dev) != NULL &&
        cuda_record(cuda_device_region(dev), &e) != 0)
        (void)real.cuCtxSetLimit(limit, before);
    return rc;
}

/* The primary context of each device, as retained here: its teardown is
 * seen through the release and reset calls. */
static CUcontext primary_ctx[CUDACFG_MAX_DEVICES];

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
    cuda_context_gone(c, dev);
}

/* The legacy (unversioned) release and reset behave as the _v2 ones; an
 * application or runtime asking below cudaVersion 11000 gets them (D13). */
static CUresult primary_call(CUresult (*fn)(CUdevice), CUdevice dev, bool reset)
{
    CUresult rc = fn(dev);
    if (rc == CUDA_SUCCESS)
        primary_gone(dev, reset);
    return rc;
}

CUDA_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    NEED(cuDevicePrimaryCtxRelease_v2);
    return primary_call(real.cuDevicePrimaryCtxRelease_v2, dev, false);
}

CUDA_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    NEED(cuDevicePrimaryCtxRelease);
    return primary_call(real.cuDevicePrimaryCtxRelease, dev, false);
}

CUDA_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    NEED(cuDevicePrimaryCtxReset_v2);
    return primary_call(real.cuDevicePrimaryCtxReset_v2, dev, true);
}

CUDA_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    NEED(cuDevicePrimaryCtxReset);
    return primary_call(real.cuDevicePrimaryCtxReset, dev, true);
}

/* ---- what the application sees ---------------------------------------------- */

CUDA_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    NEED(cuMemGetInfo_v2);
    CUresult rc = real.cuMemGetInfo_v2(free_bytes, total_bytes);
    if (rc != CUDA_SUCCESS)
        return rc;
    CUdevice dev = cuda_current_device(NULL);
    if (dev < 0 || cuda_device_state(dev) != DEV_LIMITED)
        return rc;
    /* Pools the driver trimmed since the last look are seen now. */
    cuda_pools_settle(dev, false);
    struct cudareg *r = cuda_device_region(dev);
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
    if (rc == CUDA_SUCCESS && bytes != NULL && cuda_device_state(dev) == DEV_LIMITED)
        *bytes = (size_t)cudareg_limit(cuda_device_region(dev));
    return rc;
}

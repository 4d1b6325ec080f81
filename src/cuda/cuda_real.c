/* cuda_real.c -- finds the driver's own entry points behind the wrappers
 * (cuda_real.h). */
#include "cuda_glibc.h"
#include "cuda_real.h"
#include "cuda_hooks.h"

#include <dlfcn.h>
#include <stdint.h>

struct cuda_real_api real;

#define CUDA_SONAME "libcuda.so.1"
#define NVML_SONAME "libnvidia-ml.so.1"

/* Already in the process (the application loaded it) or loaded now. */
static void *open_lib(const char *soname)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_NOLOAD);
    return h != NULL ? h : dlopen(soname, RTLD_NOW);
}

static void lookup(void *h, void *slot, const char *name)
{
    void *p = cuda_real_dlsym(h, name);
    __atomic_store_n((void **)slot, p, __ATOMIC_RELAXED);
}

/* The driver's entry points that are called but never handed out; a newer
 * name first where the driver has two. */
static void load_cuda_extras(void *h)
{
    static const struct {
        const char *name, *fallback;
        size_t offset;
    } extras[] = {
#define EXTRA(field, name, fb) {name, fb, offsetof(struct cuda_real_api, field)}
        EXTRA(cuCtxGetCurrent, "cuCtxGetCurrent", NULL),
        EXTRA(cuCtxGetDevice, "cuCtxGetDevice", NULL),
        EXTRA(cuCtxPushCurrent_v2, "cuCtxPushCurrent_v2", NULL),
        EXTRA(cuCtxPopCurrent_v2, "cuCtxPopCurrent_v2", NULL),
        EXTRA(cuCtxGetLimit, "cuCtxGetLimit", NULL),
        EXTRA(cuDeviceGetCount, "cuDeviceGetCount", NULL),
        EXTRA(cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
        EXTRA(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL),
        EXTRA(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", NULL),
        EXTRA(cuStreamGetCtx, "cuStreamGetCtx", NULL),
        EXTRA(cuStreamIsCapturing, "cuStreamIsCapturing", NULL),
        EXTRA(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", NULL),
        EXTRA(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", NULL),
        EXTRA(cuGraphGetNodes, "cuGraphGetNodes", NULL),
        EXTRA(cuGraphNodeGetType, "cuGraphNodeGetType", NULL),
        EXTRA(cuGraphMemAllocNodeGetParams, "cuGraphMemAllocNodeGetParams", NULL),
#undef EXTRA
    };
    for (unsigned i = 0; i < sizeof extras / sizeof extras[0]; i++) {
        void *slot = (char *)&real + extras[i].offset;
        lookup(h, slot, extras[i].name);
        if (*(void **)slot == NULL && extras[i].fallback != NULL)
            lookup(h, slot, extras[i].fallback);
    }
}

/* 0 not loaded (or no library yet: asked again next time), 1 loaded.
 * Several threads may load at once: each stores the same pointers; none
 * ever waits for another (D6). */
static int cuda_state, nvml_state;

static int load_driver(bool nvml)
{
    cuda_real_init_dlsym();
    void *h = open_lib(nvml ? NVML_SONAME : CUDA_SONAME);
    if (h == NULL)
        return -1;
    for (unsigned i = 0; i < cuda_hook_count; i++)
        if (cuda_hooks[i].nvml == nvml)
            lookup(h, cuda_hooks[i].real, cuda_hooks[i].name);
    if (nvml) {
        lookup(h, &real.nvmlDeviceGetUUID, "nvmlDeviceGetUUID");
        lookup(h, &real.nvmlDeviceGetIndex, "nvmlDeviceGetIndex");
        lookup(h, &real.nvmlInit_v2, "nvmlInit_v2");
        lookup(h, &real.nvmlDeviceGetHandleByUUID, "nvmlDeviceGetHandleByUUID");
        return 1;
    }
    load_cuda_extras(h);
    return real.cuCtxGetCurrent != NULL && real.cuCtxGetDevice != NULL ? 1 : -1;
}

static bool ready(int *state, bool nvml)
{
    int st = __atomic_load_n(state, __ATOMIC_ACQUIRE);
    if (__builtin_expect(st == 0, 0)) {
        st = load_driver(nvml);
        if (st > 0)
            __atomic_store_n(state, st, __ATOMIC_RELEASE);
    }
    return st > 0;
}

bool cuda_real_ready(void)
{
    return ready(&cuda_state, false);
}

bool cuda_nvml_ready(void)
{
    return ready(&nvml_state, true);
}

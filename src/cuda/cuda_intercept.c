/* cuda_intercept.c -- how the wrappers reach the application, whichever way
 * it finds libcuda (docs/isolation.md, "Coverage"):
 *  - linked directly: the dynamic linker binds to our exported names first,
 *    because the library is preloaded;
 *  - dlopen + dlsym (the CUDA runtime before 11.3, most frameworks): our
 *    dlsym answers the interposed names with our wrappers;
 *  - cuGetProcAddress[_v2] (runtimes since 11.3 fetch every entry point this
 *    way): the driver is asked first, with the caller's cudaVersion and
 *    flags, and its answer is replaced only by the wrapper of the very same
 *    ABI. An older runtime asking for "cuMemAlloc" below 3020 gets the
 *    legacy ABI's wrapper.
 *
 * This file is never instrumented (src/cuda/CMakeLists.txt): the sanitizers'
 * runtimes call dlsym while they initialise, before their shadow memory
 * exists, so everything dlsym reaches is here. dlsym takes no lock of ours
 * and loads nothing: a thread that holds the dynamic loader's lock (a
 * library constructor calling dlsym) can never wait on us (isolation-review
 * D6). */
#include "cuda_glibc.h"
#include "cuda_abi.h"
#include "cuda_hooks.h"
#include "cuda_real.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

void *(*cuda_real_dlsym)(void *, const char *);

/* The dlsym after ours in the lookup order: glibc's (2.34 moved it into
 * libc under a new version; older glibc have the original versions). */
void cuda_real_init_dlsym(void)
{
    if (__atomic_load_n(&cuda_real_dlsym, __ATOMIC_ACQUIRE) != NULL)
        return;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.17", "GLIBC_2.2.5"};
    for (unsigned i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        void *p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (p != NULL) {
            __atomic_store_n((void **)&cuda_real_dlsym, p, __ATOMIC_RELEASE);
            return;
        }
    }
}

const struct cuda_hook *cuda_hook_by_name(const char *name)
{
    for (unsigned i = 0; i < cuda_hook_count; i++)
        if (strcmp(cuda_hooks[i].name, name) == 0)
            return &cuda_hooks[i];
    return NULL;
}

static bool interposable(const char *name)
{
    return name != NULL && ((name[0] == 'c' && name[1] == 'u') ||
                            (name[0] == 'n' && name[1] == 'v' && name[2] == 'm'));
}

/* True when the process has the driver library loaded, by its own doing
 * (asking never loads it), and the library has the name. */
static bool driver_has(bool nvml, const char *name)
{
    void *h = dlopen(nvml ? "libnvidia-ml.so.1" : "libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL)
        return false;
    bool has = cuda_real_dlsym(h, name) != NULL;
    dlclose(h); /* NOLOAD took a reference; give it back */
    return has;
}

/* Ours: every dlsym of the process lands here. Anything not interposed goes
 * on as a tail call, so glibc sees the caller's own return address: RTLD_NEXT
 * and RTLD_DEFAULT keep meaning "after the caller" and "the caller's scope"
 * (the file is built with -O2 -foptimize-sibling-calls for this; a test
 * checks RTLD_NEXT through us). */
CUDA_EXPORT void *dlsym(void *handle, const char *name)
{
    if (__builtin_expect(cuda_real_dlsym == NULL, 0))
        cuda_real_init_dlsym();
    if (interposable(name)) {
        const struct cuda_hook *h = cuda_hook_by_name(name);
        if (h != NULL) {
            /* The wrapper only where the caller would have found the name: a
             * library without it must still answer NULL. Our own export is
             * what a scope search (RTLD_DEFAULT) finds first, so it counts
             * only while the driver is loaded: without a driver the process
             * sees NULL, as it would without us (D15). */
            void *p = cuda_real_dlsym(handle, name);
            if (p == NULL || (p == h->wrapper && !driver_has(h->nvml, name)))
                return NULL;
            return h->wrapper;
        }
    }
    return cuda_real_dlsym(handle, name);
}

/* The wrapper of the ABI the driver chose for (symbol, cudaVersion, flags),
 * or the driver's pointer unchanged. First by identity (the driver returned
 * one of the exported entry points we wrap), else by the documented version
 * at which `symbol` took that ABI: the newest one not after the caller's
 * version (a _v2 ABI beats the one it replaced, D12). */
static void *substitute(const char *symbol, void *fn, int version, cuuint64_t flags)
{
    for (unsigned i = 0; i < cuda_hook_count; i++)
        if (!cuda_hooks[i].nvml && *cuda_hooks[i].real == fn)
            return cuda_hooks[i].wrapper;
    /* A per-thread request is served by the _ptsz variant where the name has
     * one, else by the plain ABI (it has no stream to be per-thread about). */
    bool has_ptsz = false;
    for (unsigned i = 0; i < cuda_hook_count; i++)
        has_ptsz |= cuda_hooks[i].ptsz && strcmp(cuda_hooks[i].base, symbol) == 0;
    bool want_ptsz = has_ptsz && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    const struct cuda_hook *best = NULL;
    for (unsigned i = 0; i < cuda_hook_count; i++) {
        const struct cuda_hook *h = &cuda_hooks[i];
        if (!h->nvml && h->ptsz == want_ptsz && version >= h->since &&
            strcmp(h->base, symbol) == 0 && (best == NULL || h->since > best->since))
            best = h;
    }
    return best != NULL ? best->wrapper : fn;
}

/* Exported under the driver's names: for applications linked to libcuda,
 * and as the wrappers handed out for "cuGetProcAddress" itself, so later
 * lookups stay covered. */
CUDA_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    if (!cuda_real_ready() || real.cuGetProcAddress == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = real.cuGetProcAddress(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL)
        *pfn = substitute(symbol, *pfn, version, flags);
    return rc;
}

CUDA_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                         cuuint64_t flags, int *status)
{
    if (!cuda_real_ready() || real.cuGetProcAddress_v2 == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = real.cuGetProcAddress_v2(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL)
        *pfn = substitute(symbol, *pfn, version, flags);
    return rc;
}

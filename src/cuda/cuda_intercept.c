/* cuda_intercept.c -- how the wrappers reach the application, whichever way
 * it finds libcuda (docs/isolation.md, "Coverage"):
 *  - linked directly: the dynamic linker binds to our exported names first,
 *    because the library is preloaded;
 *  - dlopen + dlsym (the CUDA runtime before 11.3, most frameworks): our
 *    dlsym answers the interposed names with our wrappers;
 *  - cuGetProcAddress[_v2] (runtimes since 11.3 fetch every entry point this
 *    way): the driver is asked first, with the caller's cudaVersion and
 *    flags, and its answer is replaced only by the wrapper of the very same
 *    ABI. An older runtime asking for "cuMemAlloc" below 3020 keeps the
 *    legacy entry point it asked for. */
#include "cuda_glibc.h"
#include "cuda_abi.h"
#include "cuda_hooks.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

void *(*cuda_real_dlsym)(void *, const char *);

/* The dlsym after ours in the lookup order: glibc's (2.34 moved it into
 * libc under a new version; older glibc have the original versions). */
void cuda_intercept_init(void)
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

/* Ours: every dlsym of the process lands here. Anything not interposed goes
 * on as a tail call, so glibc sees the caller's own return address: RTLD_NEXT
 * and RTLD_DEFAULT keep meaning "after the caller" and "the caller's scope"
 * (the file is built with -O2 -foptimize-sibling-calls for this; a test
 * checks RTLD_NEXT through us). */
CUDA_EXPORT void *dlsym(void *handle, const char *name)
{
    if (__builtin_expect(cuda_real_dlsym == NULL, 0))
        cuda_intercept_init();
    if (interposable(name)) {
        const struct cuda_hook *h = cuda_hook_by_name(name);
        /* The wrapper only where the driver has the name: a library without
         * it must still answer NULL. */
        if (h != NULL && (h->nvml ? cuda_nvml_ready() : cuda_real_ready()) && *h->real != NULL &&
            cuda_real_dlsym(handle, name) != NULL)
            return h->wrapper;
    }
    return cuda_real_dlsym(handle, name);
}

/* The wrapper of the ABI the driver chose for (symbol, cudaVersion, flags),
 * or the driver's pointer unchanged. First by identity (the driver returned
 * one of the exported entry points we wrap), else by the documented version
 * at which `symbol` took that ABI. */
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
    for (unsigned i = 0; i < cuda_hook_count; i++) {
        const struct cuda_hook *h = &cuda_hooks[i];
        if (!h->nvml && h->ptsz == want_ptsz && version >= h->since && strcmp(h->base, symbol) == 0)
            return h->wrapper;
    }
    return fn;
}

/* Exported under the driver's names: for applications linked to libcuda,
 * and as the wrappers handed out for "cuGetProcAddress" itself, so later
 * lookups stay covered. */
CUDA_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    if (!cuda_real_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = cuda_real_getprocaddress(symbol, pfn, version, flags);
    if (rc == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL)
        *pfn = substitute(symbol, *pfn, version, flags);
    return rc;
}

CUDA_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                         cuuint64_t flags, int *status)
{
    if (!cuda_real_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = cuda_real_getprocaddress_v2(symbol, pfn, version, flags, status);
    if (rc == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL)
        *pfn = substitute(symbol, *pfn, version, flags);
    return rc;
}

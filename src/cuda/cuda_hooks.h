/* cuda_hooks.h -- the seam inside libgpupool-cuda between the accounting
 * wrappers (cuda_hooks.c) and the code that hands them out in place of the
 * driver's entry points (cuda_intercept.c). Not installed, not a public API:
 * the library's only interface is the CUDA driver and NVML ABI it exports. */
#ifndef GP_CUDA_HOOKS_H
#define GP_CUDA_HOOKS_H

#include "cuda_abi.h"

#include <stdbool.h>

#define CUDA_EXPORT __attribute__((visibility("default")))

/* One interposed entry point. */
struct cuda_hook {
    const char *name; /* exact exported name in libcuda / libnvidia-ml */
    const char *base; /* what cuGetProcAddress is asked for ("cuMemAlloc") */
    int since;        /* the cudaVersion from which `base` means this ABI */
    bool ptsz;        /* the per-thread default stream variant */
    bool nvml;        /* lives in libnvidia-ml, not libcuda */
    void *wrapper;    /* ours */
    void **real;      /* where the driver's own pointer is kept */
};

extern const struct cuda_hook cuda_hooks[];
extern const unsigned cuda_hook_count;

/* The driver's real dlsym (never ours). Set by cuda_intercept_init. */
extern void *(*cuda_real_dlsym)(void *, const char *);

/* Finds the real dlsym; called by the constructor and lazily. */
void cuda_intercept_init(void);

/* The hook of an exported name, or NULL. */
const struct cuda_hook *cuda_hook_by_name(const char *name);

/* Loads the real libcuda pointers once (cheap after the first call); false
 * when no libcuda.so.1 can be found. Same for NVML. */
bool cuda_real_ready(void);
bool cuda_nvml_ready(void);

/* The driver's cuGetProcAddress[_v2] (cuda_hooks.c keeps the pointers), and
 * our exported replacements (cuda_intercept.c). */
CUresult cuda_real_getprocaddress(const char *, void **, int, cuuint64_t);
CUresult cuda_real_getprocaddress_v2(const char *, void **, int, cuuint64_t, int *);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, int *);

/* True when this process enforces a limit (any limit variable was set). */
bool cuda_hooks_active(void);

#endif

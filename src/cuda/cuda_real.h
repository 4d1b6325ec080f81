/* cuda_real.h -- the driver's own entry points, as libgpupool-cuda reaches
 * them: the real libcuda.so.1 and libnvidia-ml.so.1 behind the wrappers, and
 * glibc's dlsym behind ours (docs/isolation.md, "Coverage").
 *
 * Loading never waits on a lock: the first callers (any number of threads)
 * each open the library and store the same pointers, then publish "loaded".
 * A thread holding the dynamic loader's lock (a constructor calling dlsym or
 * cuInit) can therefore never wait on a thread that waits for that lock
 * (isolation-review D6). Not installed; the library's only interface is the
 * CUDA and NVML ABI it exports. */
#ifndef GP_CUDA_REAL_H
#define GP_CUDA_REAL_H

#include "cuda_abi.h"

#include <stdbool.h>

/* Every driver entry point a wrapper calls or hands on. The interposed ones
 * are filled from the hook table (cuda_table.c); the rest are looked up by
 * name in cuda_real.c. */
struct cuda_real_api {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuGetProcAddress)(const char *, void **, int, cuuint64_t);
    CUresult (*cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t, int *);
    /* linear memory */
    CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
    CUresult (*cuMemAlloc)(unsigned *, unsigned);
    CUresult (*cuMemAllocPitch_v2)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*cuMemFree_v2)(CUdeviceptr);
    CUresult (*cuMemFree)(unsigned);
    /* stream-ordered memory and pools */
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr, CUstream);
    CUresult (*cuMemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
    CUresult (*cuMemPoolDestroy)(CUmemoryPool);
    CUresult (*cuMemPoolTrimTo)(CUmemoryPool, size_t);
    CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
    CUresult (*cuDeviceGetMemPool)(CUmemoryPool *, CUdevice);
    CUresult (*cuDeviceSetMemPool)(CUdevice, CUmemoryPool);
    /* graphs */
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuGraphLaunch_ptsz)(CUgraphExec, CUstream);
    /* launches */
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuLaunchKernel_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, CUstream, void **, void **);
    CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*cuLaunchKernelEx_ptsz)(const CUlaunchConfig *, CUfunction, void **, void **);
    CUresult (*cuLaunchCooperativeKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                          unsigned, unsigned, unsigned, CUstream, void **);
    CUresult (*cuLaunchCooperativeKernel_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                               unsigned, unsigned, unsigned, CUstream, void **);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuDeviceGraphMemTrim)(CUdevice);
    /* virtual memory management */
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                            unsigned long long);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                         unsigned long long);
    CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
    CUresult (*cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
    CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
    CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int,
                                             unsigned long long);
    /* arrays */
    CUresult (*cuArrayCreate_v2)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*cuArray3DCreate_v2)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*cuArrayDestroy)(CUarray);
    CUresult (*cuMipmappedArrayCreate)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *,
                                       unsigned);
    CUresult (*cuMipmappedArrayDestroy)(CUmipmappedArray);
    /* contexts */
    CUresult (*cuCtxDestroy_v2)(CUcontext);
    CUresult (*cuCtxDestroy)(CUcontext);
    CUresult (*cuCtxSetLimit)(int, size_t);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuDevicePrimaryCtxReset_v2)(CUdevice);
    CUresult (*cuDevicePrimaryCtxReset)(CUdevice);
    /* reports */
    CUresult (*cuMemGetInfo_v2)(size_t *, size_t *);
    CUresult (*cuDeviceTotalMem_v2)(size_t *, CUdevice);
    /* called, never handed out */
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuCtxPushCurrent_v2)(CUcontext);
    CUresult (*cuCtxPopCurrent_v2)(CUcontext *);
    CUresult (*cuCtxGetLimit)(size_t *, int);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned *, int *);
    CUresult (*cuStreamGetCtx)(CUstream, CUcontext *);
    CUresult (*cuStreamIsCapturing)(CUstream, int *);
    CUresult (*cuMemPoolGetAttribute)(CUmemoryPool, int, void *);
    CUresult (*cuDeviceGetGraphMemAttribute)(CUdevice, int, void *);
    CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
    CUresult (*cuGraphNodeGetType)(CUgraphNode, int *);
    CUresult (*cuGraphMemAllocNodeGetParams)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *);
    /* NVML */
    nvmlReturn_t (*nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2)(nvmlDevice_t, nvmlMemory_v2_t *);
    nvmlReturn_t (*nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDevice_t, unsigned *,
                                                            nvmlProcessInfo_t *);
    nvmlReturn_t (*nvmlDeviceGetComputeRunningProcesses_v2)(nvmlDevice_t, unsigned *,
                                                            nvmlProcessInfo_t *);
    nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t, char *, unsigned);
    nvmlReturn_t (*nvmlDeviceGetIndex)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*nvmlInit_v2)(void);
    nvmlReturn_t (*nvmlDeviceGetHandleByUUID)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*nvmlDeviceGetProcessUtilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t *,
                                                    unsigned *, unsigned long long);
};

extern struct cuda_real_api real;

/* glibc's dlsym (never ours), found by cuda_real_init_dlsym. Both live in
 * cuda_intercept.c, which is never instrumented (see its CMake note). */
extern void *(*cuda_real_dlsym)(void *, const char *);
void cuda_real_init_dlsym(void);

/* Loads the driver's pointers (cheap once loaded); false when no
 * libcuda.so.1 can be found. Same for NVML. Never blocks on another thread. */
bool cuda_real_ready(void);
bool cuda_nvml_ready(void);

#endif

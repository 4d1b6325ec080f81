/* cuda_hooks.h -- every entry point libgpupool-cuda interposes, and the
 * table (cuda_table.c) that cuda_intercept.c hands them out from in place of
 * the driver's. Each wrapper lives with its API family:
 *   cuda_hooks_mem.c    linear memory, arrays, VMM, contexts, reports
 *   cuda_hooks_pool.c   stream-ordered allocation, pools, graph memory
 *   cuda_hooks_nvml.c   NVML's memory figures
 *   cuda_hooks_launch.c kernel launches (the compute limit, cuda_compute.h)
 *   cuda_intercept.c    dlsym and cuGetProcAddress themselves
 * Not installed, not a public API: the library's only interface is the CUDA
 * driver and NVML ABI it exports. */
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

/* The hook of an exported name, or NULL. */
const struct cuda_hook *cuda_hook_by_name(const char *name);

/* ---- the wrappers, under the driver's names and exact ABIs ---- */
CUresult cuInit(unsigned);
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuGetProcAddress_v2(const char *, void **, int, cuuint64_t, int *);

CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAlloc(unsigned *, unsigned);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemFree(unsigned);

CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemPoolCreate(CUmemoryPool *, const CUmemPoolProps *);
CUresult cuMemPoolDestroy(CUmemoryPool);
CUresult cuMemPoolTrimTo(CUmemoryPool, size_t);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, CUdevice);
CUresult cuDeviceGetMemPool(CUmemoryPool *, CUdevice);
CUresult cuDeviceSetMemPool(CUdevice, CUmemoryPool);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *, CUgraph, unsigned long long);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphLaunch_ptsz(CUgraphExec, CUstream);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuDeviceGraphMemTrim(CUdevice);

CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream, void **, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   unsigned, unsigned, CUstream, void **);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, unsigned, unsigned, CUstream, void **);

CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemMap(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
CUresult cuMemUnmap(CUdeviceptr, size_t);
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *, void *);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *, void *, int);
CUresult cuMemExportToShareableHandle(void *, CUmemGenericAllocationHandle, int,
                                      unsigned long long);

CUresult cuArrayCreate_v2(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
CUresult cuArray3DCreate_v2(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
CUresult cuArrayDestroy(CUarray);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray);

CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuCtxDestroy(CUcontext);
CUresult cuCtxSetLimit(int, size_t);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, CUdevice);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
CUresult cuDevicePrimaryCtxRelease(CUdevice);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice);
CUresult cuDevicePrimaryCtxReset(CUdevice);

CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuDeviceTotalMem_v2(size_t *, CUdevice);

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t, nvmlProcessUtilizationSample_t *,
                                             unsigned *, unsigned long long);

/* ---- between the families ---- */

/* Gives back what a context's teardown freed: its allocations (ledger) and
 * the stream-ordered and graph memory of its device, re-read. */
void cuda_context_gone(CUcontext ctx, CUdevice dev);

/* Brings the charges of dev's pools and graph memory down to what the
 * driver says they hold now (never below: a failed read keeps the charge).
 * trim: first ask the driver to give back what they hold unused. */
void cuda_pools_settle(CUdevice dev, bool trim);

#endif

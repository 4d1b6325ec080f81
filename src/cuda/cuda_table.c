/* cuda_table.c -- the entry points libgpupool-cuda hands out in place of the
 * driver's (cuda_hooks.h), with the cudaVersion from which each name means
 * each ABI (CUDA Driver API reference; cuda.h's version macros). */
#include "cuda_glibc.h"
#include "cuda_hooks.h"
#include "cuda_real.h"

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
    HOOK(cuGetProcAddress, "cuGetProcAddress", 11030),
    HOOK(cuGetProcAddress_v2, "cuGetProcAddress", 12000),
    /* linear memory; the legacy 32-bit ABIs below 3020 */
    HOOK(cuMemAlloc, "cuMemAlloc", 2000),
    HOOK(cuMemAlloc_v2, "cuMemAlloc", 3020),
    HOOK(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020),
    HOOK(cuMemAllocManaged, "cuMemAllocManaged", 6000),
    HOOK(cuMemFree, "cuMemFree", 2000),
    HOOK(cuMemFree_v2, "cuMemFree", 3020),
    /* stream-ordered memory, pools, graph memory */
    HOOK(cuMemAllocAsync, "cuMemAllocAsync", 11020),
    HOOK_PTSZ(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020),
    HOOK(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020),
    HOOK_PTSZ(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020),
    HOOK(cuMemFreeAsync, "cuMemFreeAsync", 11020),
    HOOK_PTSZ(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020),
    HOOK(cuMemPoolCreate, "cuMemPoolCreate", 11020),
    HOOK(cuMemPoolDestroy, "cuMemPoolDestroy", 11020),
    HOOK(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020),
    HOOK(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020),
    HOOK(cuDeviceGetMemPool, "cuDeviceGetMemPool", 11020),
    HOOK(cuDeviceSetMemPool, "cuDeviceSetMemPool", 11020),
    HOOK(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040),
    HOOK(cuGraphInstantiateWithFlags, "cuGraphInstantiate", 12000),
    HOOK(cuGraphLaunch, "cuGraphLaunch", 10000),
    HOOK_PTSZ(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000),
    HOOK(cuGraphExecDestroy, "cuGraphExecDestroy", 10000),
    HOOK(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040),
    /* launches: the compute limit (graphs above) */
    HOOK(cuLaunchKernel, "cuLaunchKernel", 4000),
    HOOK_PTSZ(cuLaunchKernel_ptsz, "cuLaunchKernel", 4000),
    HOOK(cuLaunchKernelEx, "cuLaunchKernelEx", 11060),
    HOOK_PTSZ(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx", 11060),
    HOOK(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000),
    HOOK_PTSZ(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel", 9000),
    /* virtual memory management */
    HOOK(cuMemCreate, "cuMemCreate", 10020),
    HOOK(cuMemRelease, "cuMemRelease", 10020),
    HOOK(cuMemMap, "cuMemMap", 10020),
    HOOK(cuMemUnmap, "cuMemUnmap", 10020),
    HOOK(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000),
    HOOK(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020),
    HOOK(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 10020),
    /* arrays */
    HOOK(cuArrayCreate_v2, "cuArrayCreate", 3020),
    HOOK(cuArray3DCreate_v2, "cuArray3DCreate", 3020),
    HOOK(cuArrayDestroy, "cuArrayDestroy", 2000),
    HOOK(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000),
    HOOK(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000),
    /* contexts: their teardown frees what was made in them */
    HOOK(cuCtxDestroy, "cuCtxDestroy", 2000),
    HOOK(cuCtxDestroy_v2, "cuCtxDestroy", 4000),
    HOOK(cuCtxSetLimit, "cuCtxSetLimit", 3010),
    HOOK(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000),
    HOOK(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000),
    HOOK(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000),
    HOOK(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 7000),
    HOOK(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000),
    /* what the application sees */
    HOOK(cuMemGetInfo_v2, "cuMemGetInfo", 3020),
    HOOK(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020),
    HOOK_NVML(nvmlDeviceGetMemoryInfo),
    HOOK_NVML(nvmlDeviceGetMemoryInfo_v2),
    HOOK_NVML(nvmlDeviceGetComputeRunningProcesses_v3),
    HOOK_NVML(nvmlDeviceGetComputeRunningProcesses_v2),
    HOOK_NVML(nvmlDeviceGetProcessUtilization),
};
/* clang-format on */
const unsigned cuda_hook_count = sizeof cuda_hooks / sizeof cuda_hooks[0];

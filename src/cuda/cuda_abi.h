/* cuda_abi.h -- the part of the CUDA driver and NVML ABIs the isolation
 * library touches, declared from NVIDIA's documentation (no NVIDIA header is
 * packaged). Only what libgpupool-cuda reads or passes through is here; the
 * layouts are those of 64-bit Linux (x86-64 and aarch64), which are the same.
 *
 * Values checked against the CUDA Driver API reference (cuda.h of CUDA 12.x)
 * and NVML's reference (nvml.h). A struct here must match the driver's byte
 * for byte up to the last field we read: we never allocate one, we only read
 * fields of the caller's. */
#ifndef GP_CUDA_ABI_H
#define GP_CUDA_ABI_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUarray_st *CUarray;
typedef struct CUmipmappedArray_st *CUmipmappedArray;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on LP64 */
typedef unsigned long long CUmemGenericAllocationHandle;
typedef unsigned long long cuuint64_t;

typedef struct {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_PERMITTED = 800,
};

/* CUmemLocationType / CUmemAllocationProp / CUmemPoolProps: both structs
 * start with two enums and then a CUmemLocation, which is all we read. */
enum { CU_MEM_LOCATION_TYPE_DEVICE = 1 };
typedef struct {
    int type; /* CUmemLocationType */
    int id;   /* device ordinal when type is DEVICE */
} CUmemLocation;
typedef struct {
    int type;                 /* CUmemAllocationType */
    int requestedHandleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    /* win32HandleMetaData, allocFlags follow; not read */
} CUmemAllocationProp;
typedef struct {
    int allocType;   /* CUmemAllocationType */
    int handleTypes; /* CUmemAllocationHandleType */
    CUmemLocation location;
    /* win32SecurityAttributes, maxSize, usage, reserved follow; not read */
} CUmemPoolProps;

/* The whole CUmemPoolProps, as a size: 88 bytes in every CUDA 11 and 12
 * header (the reserved tail shrank as maxSize and usage were added). */
#define CU_MEM_POOL_PROPS_SIZE 88

/* CUDA_MEM_ALLOC_NODE_PARAMS (v1, what cuGraphMemAllocNodeGetParams
 * fills): the pool properties, the access descriptors, then the size. */
typedef struct {
    unsigned char poolProps[CU_MEM_POOL_PROPS_SIZE];
    const void *accessDescs;
    size_t accessDescCount;
    size_t bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;

/* Stream-ordered pools (CUmemPool_attribute), graph memory
 * (CUgraphMem_attribute), graph node types, capture status. */
enum { CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5, CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7 };
enum { CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2 };
enum { CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10 };
enum { CU_STREAM_CAPTURE_STATUS_NONE = 0 };
/* The special stream handles that mean "the current context's". */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

/* CUlimit values that size device memory of the context. */
enum { CU_LIMIT_STACK_SIZE = 0, CU_LIMIT_MALLOC_HEAP_SIZE = 2 };

/* CUdevice_attribute values read here. */
enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
    CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT = 51,
};

/* CUarray_format: element sizes of the formats with a plain size. */
enum {
    CU_AD_FORMAT_UNSIGNED_INT8 = 0x01,
    CU_AD_FORMAT_UNSIGNED_INT16 = 0x02,
    CU_AD_FORMAT_UNSIGNED_INT32 = 0x03,
    CU_AD_FORMAT_SIGNED_INT8 = 0x08,
    CU_AD_FORMAT_SIGNED_INT16 = 0x09,
    CU_AD_FORMAT_SIGNED_INT32 = 0x0a,
    CU_AD_FORMAT_HALF = 0x10,
    CU_AD_FORMAT_FLOAT = 0x20,
};
typedef struct {
    size_t Width;
    size_t Height;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct {
    size_t Width;
    size_t Height;
    size_t Depth;
    int Format; /* CUarray_format */
    unsigned int NumChannels;
    unsigned int Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
#define CUDA_ARRAY3D_LAYERED 0x01
#define CUDA_ARRAY3D_DEFERRED_MAPPING 0x80 /* no memory until cuMemMapArrayAsync */

/* cuGetProcAddress flags (CUdriverProcAddress_flags). */
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 0x2

/* ---- NVML ---- */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_INSUFFICIENT_SIZE = 7
};
/* nvmlDeviceGetComputeRunningProcesses_v2/_v3's element. */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
/* nvmlDeviceGetProcessUtilization's element: percent of the time since the
 * previous sample that one process's kernels ran (timeStamp: CPU time in
 * microseconds). */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;
enum { NVML_ERROR_NOT_FOUND = 6 };

/* ---- launches ---- */
typedef struct CUfunc_st *CUfunction;
/* cuLaunchKernelEx's description (CUDA 11.8, cudaVersion 11060): only
 * hStream is read. */
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    void *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

#endif

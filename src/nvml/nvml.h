/* nvml.h -- loads libnvidia-ml.so.1 at run time and exposes it as a table
 * of function pointers.
 *
 * Fields are named after the NVML functions without the "nvml" prefix, so
 * `nvml->DeviceGetUUID(dev, buf, len)` calls nvmlDeviceGetUUID. Where NVML
 * has versioned symbols (nvmlInit_v2, nvmlDeviceGetPciInfo_v3, ...) the
 * newest one the library exports is bound, as go-nvml does; the NVML_FUNCTIONS
 * list below names the candidates, newest first. Optional functions may be
 * NULL (old drivers); required ones are never NULL after nvml_open().
 *
 * The table is immutable after nvml_open() and NVML itself is thread-safe,
 * so one struct nvml may be shared by every thread. */
#ifndef GP_NVML_H
#define GP_NVML_H

#include <stdbool.h>
#include <stddef.h>

#include "nvml_abi.h"
#include "compiler.h"

#define NVML_LIBRARY_SONAME "libnvidia-ml.so.1"

#define NVML_REQUIRED 1
#define NVML_OPTIONAL 0

/* X(required, return type, field name, (parameters), "symbol", "older symbol"...) */
/* clang-format off */
#define NVML_FUNCTIONS(X)                                                                          \
    X(NVML_REQUIRED, nvmlReturn_t, Init, (void), "nvmlInit_v2", "nvmlInit")                        \
    X(NVML_OPTIONAL, nvmlReturn_t, InitWithFlags, (unsigned int flags), "nvmlInitWithFlags")       \
    X(NVML_REQUIRED, nvmlReturn_t, Shutdown, (void), "nvmlShutdown")                               \
    X(NVML_OPTIONAL, const char *, ErrorString, (nvmlReturn_t result), "nvmlErrorString")          \
    X(NVML_OPTIONAL, nvmlReturn_t, SystemGetDriverVersion, (char *version, unsigned int length),   \
      "nvmlSystemGetDriverVersion")                                                                \
    X(NVML_OPTIONAL, nvmlReturn_t, SystemGetCudaDriverVersion, (int *cudaDriverVersion),           \
      "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion")                       \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetCount, (unsigned int *deviceCount),                    \
      "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount")                                               \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetHandleByIndex,                                         \
      (unsigned int index, nvmlDevice_t *device), "nvmlDeviceGetHandleByIndex_v2",                 \
      "nvmlDeviceGetHandleByIndex")                                                                \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetHandleByUUID, (const char *uuid, nvmlDevice_t *device), \
      "nvmlDeviceGetHandleByUUID")                                                                 \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetHandleByPciBusId,                                      \
      (const char *pciBusId, nvmlDevice_t *device), "nvmlDeviceGetHandleByPciBusId_v2",            \
      "nvmlDeviceGetHandleByPciBusId")                                                             \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetUUID,                                                  \
      (nvmlDevice_t device, char *uuid, unsigned int length), "nvmlDeviceGetUUID")                 \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetName,                                                  \
      (nvmlDevice_t device, char *name, unsigned int length), "nvmlDeviceGetName")                 \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetIndex, (nvmlDevice_t device, unsigned int *index),     \
      "nvmlDeviceGetIndex")                                                                        \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetMinorNumber,                                           \
      (nvmlDevice_t device, unsigned int *minorNumber), "nvmlDeviceGetMinorNumber")                \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetPciInfo, (nvmlDevice_t device, nvmlPciInfo_t *pci),    \
      "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo")                \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetMemoryInfo,                                            \
      (nvmlDevice_t device, nvmlMemory_t *memory), "nvmlDeviceGetMemoryInfo")                      \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetMemoryInfo_v2,                                         \
      (nvmlDevice_t device, nvmlMemory_v2_t *memory), "nvmlDeviceGetMemoryInfo_v2")                \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetCudaComputeCapability,                                 \
      (nvmlDevice_t device, int *major, int *minor), "nvmlDeviceGetCudaComputeCapability")         \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetNumaNodeId, (nvmlDevice_t device, unsigned int *node), \
      "nvmlDeviceGetNumaNodeId")                                                                   \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetMigMode,                                               \
      (nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode),                 \
      "nvmlDeviceGetMigMode")                                                                      \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetMaxMigDeviceCount,                                     \
      (nvmlDevice_t device, unsigned int *count), "nvmlDeviceGetMaxMigDeviceCount")                \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetMigDeviceHandleByIndex,                                \
      (nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice),                          \
      "nvmlDeviceGetMigDeviceHandleByIndex")                                                       \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetDeviceHandleFromMigDeviceHandle,                       \
      (nvmlDevice_t migDevice, nvmlDevice_t *device),                                              \
      "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")                                              \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceIsMigDeviceHandle,                                        \
      (nvmlDevice_t device, unsigned int *isMigDevice), "nvmlDeviceIsMigDeviceHandle")             \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetGpuInstanceId, (nvmlDevice_t device, unsigned int *id), \
      "nvmlDeviceGetGpuInstanceId")                                                                \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetGpuInstanceById,                                       \
      (nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance),                      \
      "nvmlDeviceGetGpuInstanceById")                                                              \
    X(NVML_OPTIONAL, nvmlReturn_t, GpuInstanceGetInfo,                                             \
      (nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info), "nvmlGpuInstanceGetInfo")      \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetComputeInstanceId,                                     \
      (nvmlDevice_t device, unsigned int *id), "nvmlDeviceGetComputeInstanceId")                   \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetAttributes,                                            \
      (nvmlDevice_t device, nvmlDeviceAttributes_t *attributes), "nvmlDeviceGetAttributes_v2",     \
      "nvmlDeviceGetAttributes")                                                                   \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetTopologyCommonAncestor,                                \
      (nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuTopologyLevel_t *pathInfo),              \
      "nvmlDeviceGetTopologyCommonAncestor")                                                       \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetNvLinkState,                                           \
      (nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive),                       \
      "nvmlDeviceGetNvLinkState")                                                                  \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetNvLinkRemotePciInfo,                                   \
      (nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci),                                \
      "nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo")                   \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetP2PStatus,                                             \
      (nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,                 \
       nvmlGpuP2PStatus_t *p2pStatus),                                                             \
      "nvmlDeviceGetP2PStatus")                                                                    \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetRemappedRows,                                          \
      (nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,                         \
       unsigned int *isPending, unsigned int *failureOccurred),                                    \
      "nvmlDeviceGetRemappedRows")                                                                 \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetRetiredPagesPendingStatus,                             \
      (nvmlDevice_t device, nvmlEnableState_t *isPending),                                         \
      "nvmlDeviceGetRetiredPagesPendingStatus")                                                    \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetUtilizationRates,                                      \
      (nvmlDevice_t device, nvmlUtilization_t *utilization), "nvmlDeviceGetUtilizationRates")      \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetComputeRunningProcesses,                              \
      (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos),                    \
      "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")        \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetProcessUtilization,                                    \
      (nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,                           \
       unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp),                   \
      "nvmlDeviceGetProcessUtilization")                                                           \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetTemperature,                                           \
      (nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int *temp),                  \
      "nvmlDeviceGetTemperature")                                                                  \
    X(NVML_OPTIONAL, nvmlReturn_t, DeviceGetPowerUsage, (nvmlDevice_t device, unsigned int *power), \
      "nvmlDeviceGetPowerUsage")                                                                   \
    X(NVML_REQUIRED, nvmlReturn_t, EventSetCreate, (nvmlEventSet_t *set), "nvmlEventSetCreate")    \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceGetSupportedEventTypes,                                   \
      (nvmlDevice_t device, unsigned long long *eventTypes), "nvmlDeviceGetSupportedEventTypes")   \
    X(NVML_REQUIRED, nvmlReturn_t, DeviceRegisterEvents,                                           \
      (nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set),                    \
      "nvmlDeviceRegisterEvents")                                                                  \
    X(NVML_REQUIRED, nvmlReturn_t, EventSetWait,                                                   \
      (nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms),                         \
      "nvmlEventSetWait_v2", "nvmlEventSetWait")                                                   \
    X(NVML_REQUIRED, nvmlReturn_t, EventSetFree, (nvmlEventSet_t set), "nvmlEventSetFree")
/* clang-format on */

/* Which exported symbol each field was bound to (NULL when absent), for
 * logs and tests: symbols.Init is "nvmlInit_v2" or "nvmlInit". */
struct nvml_symbols {
#define NVML_SYMBOL_FIELD(required, ret, name, params, ...) const char *name;
    NVML_FUNCTIONS(NVML_SYMBOL_FIELD)
#undef NVML_SYMBOL_FIELD
};

struct nvml {
    void *library;           /* dlopen handle */
    char library_path[4096]; /* what was passed to dlopen */
    struct nvml_symbols symbols;
#define NVML_POINTER_FIELD(required, ret, name, params, ...) ret(*name) params;
    NVML_FUNCTIONS(NVML_POINTER_FIELD)
#undef NVML_POINTER_FIELD
};

/* Loads NVML and initialises it. driver_root: NULL, "" or "/" means the
 * default loader path only; anything else is searched first (its
 * usr/lib64, usr/lib/<arch>-linux-gnu, lib64, lib/<arch>-linux-gnu).
 * On success *out is owned by the caller (nvml_close). Returns 0 or -1 with
 * a message saying what to check. */
GP_MUST_USE int nvml_open(const char *driver_root, struct nvml **out, char *err, size_t errlen);

/* nvmlShutdown + dlclose; NULL-safe. */
void nvml_close(struct nvml *nvml);

/* NVML's own text for rc when the library provides nvmlErrorString,
 * otherwise ours ("GPU is lost (NVML_ERROR_GPU_IS_LOST)"). nvml may be NULL.
 * Never NULL; the string is static. */
const char *nvml_strerror(const struct nvml *nvml, nvmlReturn_t rc);

/* "NVML_ERROR_GPU_IS_LOST" for 15; "NVML_ERROR_UNKNOWN" for unknown codes. */
const char *nvml_error_name(nvmlReturn_t rc);

#endif

/* nvml_abi.h -- our own declarations of the parts of the NVML C ABI that
 * gpupool uses (NVML API 13 as documented in NVIDIA's nvml.h).
 *
 * No NVIDIA header is needed to build gpupool: the library is dlopen'ed at
 * run time, so only the types, enum values, struct layouts and buffer sizes
 * have to match the driver's. Every value here is an ABI fact (see
 * docs/nvml.md); changing one breaks compatibility with real drivers.
 * Shared by the loader (src/nvml.c) and the fake library (test/fakenvml). */
#ifndef GP_NVML_ABI_H
#define GP_NVML_ABI_H

/* ---- opaque handles: one pointer each ---------------------------------- */
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

/* ---- return codes -------------------------------------------------------- */
typedef enum nvmlReturn_enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
    NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* ---- buffer sizes -------------------------------------------------------- */
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_ASCII_LEN 41
#define NVML_DEVICE_UUID_BINARY_LEN 16
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_DEVICE_PART_NUMBER_BUFFER_SIZE 80
#define NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE 32
#define NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE 16
#define NVML_NVLINK_MAX_LINKS 36
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT 0x1

#define NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT "%04X:%02X:%02X.0"

/* ---- flags and small enums ------------------------------------------------ */
#define NVML_INIT_FLAG_NO_GPUS (1u << 0)
#define NVML_INIT_FLAG_NO_ATTACH (1u << 1)
#define NVML_INIT_FLAG_FORCE_INIT (1u << 2)

#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1

#define NVML_VALUE_NOT_AVAILABLE (-1)

typedef enum nvmlEnableState_enum {
    NVML_FEATURE_DISABLED = 0,
    NVML_FEATURE_ENABLED = 1
} nvmlEnableState_t;

typedef enum nvmlGpuLevel_enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

typedef enum nvmlGpuP2PCapsIndex_enum {
    NVML_P2P_CAPS_INDEX_READ = 0,
    NVML_P2P_CAPS_INDEX_WRITE = 1,
    NVML_P2P_CAPS_INDEX_NVLINK = 2,
    NVML_P2P_CAPS_INDEX_ATOMICS = 3,
    NVML_P2P_CAPS_INDEX_PCI = 4,
    NVML_P2P_CAPS_INDEX_PROP = 4,
    NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

/* "SUPPORED" is NVIDIA's spelling; kept so the names match the header. */
typedef enum nvmlGpuP2PStatus_enum {
    NVML_P2P_STATUS_OK = 0,
    NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,
    NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
    NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
    NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
    NVML_P2P_STATUS_NOT_SUPPORTED = 5,
    NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

/* ---- event types (bit mask, unsigned long long) ---------------------------- */
#define nvmlEventTypeNone 0x0000000000000000ULL
#define nvmlEventTypeSingleBitEccError 0x0000000000000001ULL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002ULL
#define nvmlEventTypePState 0x0000000000000004ULL
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
#define nvmlEventTypeClock 0x0000000000000010ULL
#define nvmlEventTypePowerSourceChange 0x0000000000000080ULL
#define nvmlEventTypeSingleBitEccErrorStorm 0x0000000000000200ULL
#define nvmlEventTypeDramRetirementEvent 0x0000000000000400ULL
#define nvmlEventTypeDramRetirementFailure 0x0000000000000800ULL
#define nvmlEventTypeNonFatalPoisonError 0x0000000000001000ULL
#define nvmlEventTypeFatalPoisonError 0x0000000000002000ULL
#define nvmlEventTypeGpuUnavailableError 0x0000000000004000ULL
#define nvmlEventTypeGpuRecoveryAction 0x0000000000008000ULL
#define nvmlEventTypeAll                                                                   \
    (nvmlEventTypeNone | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | \
     nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock |            \
     nvmlEventTypePowerSourceChange | nvmlEventTypeSingleBitEccErrorStorm |                \
     nvmlEventTypeDramRetirementEvent | nvmlEventTypeDramRetirementFailure |               \
     nvmlEventTypeNonFatalPoisonError | nvmlEventTypeFatalPoisonError |                    \
     nvmlEventTypeGpuUnavailableError | nvmlEventTypeGpuRecoveryAction)

/* ---- structs (layouts must match the driver byte for byte) ----------------- */
#define NVML_STRUCT_VERSION(data, ver) \
    (unsigned int)(sizeof(nvml##data##_v##ver##_t) | ((ver) << 24U))

typedef struct nvmlPciInfo_st {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId; /* device id << 16 | vendor id */
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* nvmlDeviceGetUtilizationRates: percent of the last sample period. */
typedef struct nvmlUtilization_st {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

/* nvmlDeviceGetComputeRunningProcesses_v2/_v3: one process using the GPU
 * (host pid; usedGpuMemory NVML_VALUE_NOT_AVAILABLE as unsigned when the
 * driver cannot tell, e.g. under MIG without privileges). */
typedef struct nvmlProcessInfo_st {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* nvmlDeviceGetProcessUtilization: one process's sample, percent. */
typedef struct nvmlProcessUtilizationSample_st {
    unsigned int pid;
    unsigned long long timeStamp; /* microseconds */
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/* nvmlDeviceGetTemperature sensor. */
typedef enum nvmlTemperatureSensors_enum {
    NVML_TEMPERATURE_GPU = 0,
} nvmlTemperatureSensors_t;

typedef struct nvmlMemory_v2_st {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

typedef struct nvmlEventData_st {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData; /* the XID for XID events; 999 = unknown XID */
    unsigned int gpuInstanceId;   /* 0xFFFFFFFF when not attributable */
    unsigned int computeInstanceId;
} nvmlEventData_t;

typedef struct nvmlDeviceAttributes_st {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

/* GPU instance profile ids (nvmlGpuInstanceInfo_t.profileId). The
 * revisions carry the attributes MIG profile names show: REV1 = with media
 * extensions ("+me"), ALL_ME ("+me.all"), GFX ("+gfx"), NO_ME ("-me"). */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_GPU_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_GPU_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 0x8
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 0x9
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX 0xA
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX 0xB
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX 0xC
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME 0xD
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME 0xE
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME 0xF
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME 0x10

typedef struct nvmlGpuInstancePlacement_st {
    unsigned int start;
    unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceInfo_st {
    nvmlDevice_t device; /* the parent GPU */
    unsigned int id;
    unsigned int profileId; /* NVML_GPU_INSTANCE_PROFILE_* */
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

/* Layout checks: a mismatch here would corrupt memory inside the driver. */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlMemory_t) == 24, "nvmlMemory_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");
_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t layout");
_Static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24, "nvmlGpuInstanceInfo_t layout");

#endif

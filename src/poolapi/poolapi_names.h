/* poolapi_names.h -- every name the gpupool programs exchange through the API server.
 *
 * Resources, annotations, labels and the container environment that the
 * device plugin, the scheduler extender, kubectl-gpupool, the CUDA
 * interception library (libgpupool-cuda) and next the DRA driver must spell
 * the same way. One prefix, POOL_. Header-only and dependency-free on
 * purpose: src/cuda, loaded into users' containers, includes it without
 * linking jansson or gp_base.
 * docs/poolapi.md says who writes and who reads each name. */
#ifndef GP_POOLAPI_NAMES_H
#define GP_POOLAPI_NAMES_H

#include <stdint.h>

/* ---- extended resources ---- */
#define POOL_RES_GPU_MEM "aliyun.com/gpu-mem" /* GPU memory in the node's unit (poolapi_unit.h) */
#define POOL_RES_GPU_COUNT \
    "aliyun.com/gpu-count"                   /* node: its GPUs; pod: GPUs to split gpu-mem over */
#define POOL_RES_NVIDIA_GPU "nvidia.com/gpu" /* whole GPUs (the NVIDIA-compatible mode) */
#define POOL_RES_NVIDIA_PREFIX "nvidia.com/" /* every whole-GPU / MIG / replica resource */
/* Compute share: integer percent of one GPU, asked beside gpu-mem and
 * given on each of the pod's GPUs (HAMi's nvidia.com/gpucores semantics).
 * The extender books it per GPU so the shares on a GPU never pass 100. */
#define POOL_RES_GPU_CORES "gpupool.io/gpu-cores"
#define POOL_GPU_CORES_PER_GPU 100 /* a whole GPU; a GPU's capacity unless gpupool.io/gpus says */

/* ---- gpushare's pod annotations: written by the extender at bind
 * (ASSIGNED "false"), ASSIGNED set "true" by the device plugin ---- */
#define POOL_ANN_GPU_MEM_IDX "ALIYUN_COM_GPU_MEM_IDX"           /* GPU index list "1" or "0,1" */
#define POOL_ANN_GPU_MEM_POD "ALIYUN_COM_GPU_MEM_POD"           /* the pod's gpu-mem, decimal */
#define POOL_ANN_GPU_MEM_DEV "ALIYUN_COM_GPU_MEM_DEV"           /* memory of one assigned GPU */
#define POOL_ANN_GPU_MEM_ASSIGNED "ALIYUN_COM_GPU_MEM_ASSIGNED" /* "true"/"false" */
#define POOL_ANN_GPU_MEM_ASSUME_TIME "ALIYUN_COM_GPU_MEM_ASSUME_TIME" /* ns since the epoch */
/* gpushare 2.0's {"<container>": {"<gpu>": amount}}; read by the CLI only. */
#define POOL_ANN_GPUSHARE_ALLOCATION "scheduler.framework.gpushare.allocation"

/* ---- ours ---- */
#define POOL_ANN_NODE_GPUS "gpupool.io/gpus"          /* node: poolapi_gpus.h */
#define POOL_ANN_POD_GPU_MODEL "gpupool.io/gpu-model" /* pod annotation or label: "V100|A100" */
#define POOL_ANN_POD_GPU_COUNT "gpupool.io/gpu-count" /* pod annotation: GPUs to split over */
/* pod annotation: "high" gives its gpu-mem containers POOL_ENV_TASK_PRIORITY=0;
 * "normal" or absent: the default; any other value fails the Allocate. */
#define POOL_ANN_POD_PRIORITY "gpupool.io/priority"
#define POOL_PRIORITY_HIGH "high"
#define POOL_PRIORITY_NORMAL "normal"
#define POOL_LABEL_NODE_GPU_PRODUCT "nvidia.com/gpu.product" /* GPU feature discovery's label */
#define POOL_LABEL_NODE_GPU_PREFIX \
    "nvidia.com/gpu" /* GFD's label family: <prefix>.product, .count, ... */
#define POOL_ANN_NODE_LABELS \
    "gpupool.io/node-labels" /* node: the labels the plugin owns (--node-labels) */
/* kube-system ConfigMap unhealthy-gpu-<node>, key "gpus": gpushare's list. */
#define POOL_CM_UNHEALTHY_PREFIX "unhealthy-gpu-"

/* ---- the environment Allocate gives a gpu-mem container (gpushare's) ---- */
#define POOL_ENV_GPU_MEM_IDX "ALIYUN_COM_GPU_MEM_IDX"             /* the pod's index list */
#define POOL_ENV_GPU_MEM_POD "ALIYUN_COM_GPU_MEM_POD"             /* the pod's units */
#define POOL_ENV_GPU_MEM_CONTAINER "ALIYUN_COM_GPU_MEM_CONTAINER" /* this container's units */
#define POOL_ENV_GPU_MEM_DEV "ALIYUN_COM_GPU_MEM_DEV"             /* units of its first GPU */

/* ---- the container contract: what Allocate hands a container and
 * libgpupool-cuda (src/cuda) reads inside it (docs/isolation.md) ---- */
/* Bytes (or "4g", "1024m") for every GPU of the process; HAMi-core's name. */
#define POOL_ENV_MEM_LIMIT "CUDA_DEVICE_MEMORY_LIMIT"
/* + the GPU's ordinal as the CONTAINER sees it ("CUDA_DEVICE_MEMORY_LIMIT_1"),
 * which is what the plugin writes; a process's own CUDA_VISIBLE_DEVICES
 * renumbering is undone by the library. */
#define POOL_ENV_MEM_LIMIT_PREFIX POOL_ENV_MEM_LIMIT "_"
/* The path prefix of the per-GPU shared regions ("<prefix>.<GPU-UUID>"). */
#define POOL_ENV_SHARED_CACHE "CUDA_DEVICE_MEMORY_SHARED_CACHE"
/* Compute limits (HAMi-core's names, docs/compute.md): percent of the GPU's
 * busy time the container may use, for every GPU or for one ordinal (as
 * the CONTAINER numbers it, like POOL_ENV_MEM_LIMIT_PREFIX). 0 or 100: none.
 * The plugin writes the container's gpupool.io/gpu-cores in gpu-mem mode. */
#define POOL_ENV_SM_LIMIT "CUDA_DEVICE_SM_LIMIT"
#define POOL_ENV_SM_LIMIT_PREFIX POOL_ENV_SM_LIMIT "_"
/* The container's priority on a shared GPU (HAMi-core's name): 0 high, 1
 * normal (the default). Normal containers yield to a high one while it
 * uses the GPU; needs POOL_ENV_PRIORITY_DIR. */
#define POOL_ENV_TASK_PRIORITY "CUDA_TASK_PRIORITY"
/* The node-wide directory, shared by every container on the node, with one
 * file per GPU ("<dir>/<GPU-UUID>") where high-priority containers say they
 * are busy. The device plugin (gpu-mem mode with --isolation=memory)
 * mounts the host's <--isolation-dir>/priority read-write at
 * POOL_CONTAINER_PRIORITY_DIR in every gpu-mem container, and sets this
 * variable to it (so one flag places everything the plugin hands a
 * container). Unset: priority is off. */
#define POOL_ENV_PRIORITY_DIR "GPUPOOL_PRIORITY_DIR"
#define POOL_CONTAINER_PRIORITY_DIR "/run/gpupool-priority"
/* Where the plugin's mounts put the library, the preload list naming it,
 * and the container's read-write region directory. */
#define POOL_CONTAINER_LIBRARY "/usr/local/gpupool/libgpupool-cuda.so"
#define POOL_CONTAINER_PRELOAD "/etc/ld.so.preload"
#define POOL_CONTAINER_REGION_DIR "/run/gpupool-cuda"
/* The POOL_ENV_SHARED_CACHE value the plugin writes. */
#define POOL_CONTAINER_REGION_PREFIX POOL_CONTAINER_REGION_DIR "/region"
/* In the container's region directory: the node agent's map of the
 * container's GPU processes, one "<host pid> <pid in the container>" line
 * each after the header line; libgpupool-cuda reads it to answer
 * nvmlDeviceGetProcessUtilization (host pids) with the container's own
 * processes. At most POOL_PID_MAP_MAX bytes. */
#define POOL_REGION_PID_MAP "pids"
#define POOL_PID_MAP_HEADER "gpupool-pids 1"
#define POOL_PID_MAP_MAX 16384
/* The most GPUs one container gets a limit for: ordinals 0..63 of
 * POOL_ENV_MEM_LIMIT_PREFIX, and the library's per-process tables. */
#define POOL_MAX_CONTAINER_GPUS 64

/* gpushare's device IDs in gpu-mem mode: "<GPU-UUID>-_-<j>". */
#define POOL_DEVICE_ID_SEPARATOR "-_-"

/* The most GPUs one node schedules (index lists, gpupool.io/gpus, masks in
 * a uint32_t); the extender's placement engine has the same limit. */
#define POOL_MAX_GPUS 16
/* A GPU model name, NUL included ("Tesla-V100-SXM2-16GB"). */
#define POOL_MODEL_LEN 64

/* ---- the DRA kubelet plugin's claim contract (docs/dra.md) ---- */
/* The default --driver-name; "gpu.nvidia.com" serves claims written for NVIDIA's driver. */
#define POOL_DRA_DRIVER_DEFAULT "gpu.gpupool.io"
/* Per-claim CDI specs: kind "k8s.<driver>/claim", devices "<claim-uid>-<device>". */
#define POOL_DRA_CDI_VENDOR_PREFIX "k8s."
#define POOL_DRA_CDI_CLASS "claim"
/* A claim's opaque configuration for our driver (parameters of
 * devices.config[].opaque): {"apiVersion": ..., "kind": ..., options}. */
#define POOL_DRA_CONFIG_API_VERSION "gpupool.io/v1alpha1"
#define POOL_DRA_CONFIG_KIND "GpuConfig"
/* A DRA container may hold several claims, whose devices it numbers in an
 * order no plugin knows: the limit and the region path are keyed by the
 * device's UUID instead of a container ordinal, so two claims' CDI edits
 * never set the same variable. The UUID is spelled with '_' for each '-'
 * ("CUDA_DEVICE_MEMORY_LIMIT_GPU_8c1e..._..."): POSIX shells (dash, busybox
 * sh) drop variables whose names are not [A-Za-z0-9_], so a container whose
 * entrypoint is a shell script would start its workload without the limit.
 * The library takes either spelling. */
#define POOL_ENV_UUID_SEPARATOR '_'
#define POOL_ENV_SHARED_CACHE_PREFIX POOL_ENV_SHARED_CACHE "_"
/* Where a claim's region directory appears in its containers:
 * POOL_CONTAINER_CLAIMS_DIR "/<claim-uid>"; the region prefix is that + "/region". */
#define POOL_CONTAINER_CLAIMS_DIR POOL_CONTAINER_REGION_DIR "/claims"

#endif

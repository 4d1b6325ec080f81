/* gpumem.h -- GPU memory as a countable resource (gpushare's aliyun.com/gpu-mem).
 *
 * Pure domain code for --resource-mode=gpu-mem: every GPU of the node is
 * advertised as one device per unit of its memory (GiB or MiB), with
 * gpushare's device IDs "<GPU-UUID>-_-<j>". The kubelet only counts these
 * devices; which GPU a container runs on is the scheduler extender's choice
 * (pod annotation ALIYUN_COM_GPU_MEM_IDX), found by the pod identity logic
 * (podidentity.h) and turned into a container reply here.
 *
 * No NVML, no gRPC, no locking. Design and the correctness argument:
 * docs/gpumem.md. */
#ifndef GP_GPUMEM_H
#define GP_GPUMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "allocate.h"
#include "config.h"
#include "container_edits.h"
#include "gpu.h"
#include "resource.h"
#include "compiler.h"
#include "poolapi_names.h"
#include "poolapi_unit.h"

/* Resource, annotation and environment names are the pool contract's
 * (poolapi_names.h). */
/* The kubelet's gRPC client keeps grpc-go's default receive limit: a larger
 * ListAndWatchResponse is dropped ("received message larger than max"). */
#define GPUMEM_KUBELET_MAX_MESSAGE ((size_t)4 << 20)

/* Units of GPU memory of one GPU (truncated, as gpushare). */
unsigned long long gpumem_units(const struct gpu_device *gpu, enum pool_mem_unit unit);
const char *gpumem_unit_name(enum pool_mem_unit unit);

/* The encoded size of the largest ListAndWatchResponse this inventory can
 * produce in `unit` (every device "Unhealthy", the longer health string). */
size_t gpumem_snapshot_size(const struct gpu_inventory *inv, enum pool_mem_unit unit);

/* Builds the one resource aliyun.com/gpu-mem. Fails with a message naming
 * the remedy when the configuration asks for whole-GPU features (MIG
 * strategies, time-slicing, resource renames), when a GPU has MIG enabled,
 * and when the device list would pass the kubelet's 4 MiB message limit. */
GP_MUST_USE int gpumem_resource_build(const struct gpu_inventory *inv, const struct gp_config *cfg,
                                      struct resource_set *set, char *err, size_t errlen);

/* What the extender decided for a pod, parsed from its annotations. */
struct gpumem_assignment {
    size_t gpu_count;
    size_t gpus[POOL_MAX_GPUS];   /* inventory positions, in annotation order */
    char idx[POOL_MAX_GPUS * 4];  /* ALIYUN_COM_GPU_MEM_IDX as written: "1", "0,1" */
    unsigned long long pod_units; /* ALIYUN_COM_GPU_MEM_POD */
    unsigned container_cores;     /* the container's gpupool.io/gpu-cores; 0: none asked */
};

/* Parses ALIYUN_COM_GPU_MEM_IDX ("1" or "0,1": GPU indices; the contract's
 * grammar, poolapi_index.h) against the inventory. -1 + err when malformed,
 * repeated, or naming a GPU this node does not have (an extender working
 * from a stale inventory). */
GP_MUST_USE int gpumem_parse_idx(const char *idx, const struct gpu_inventory *inv,
                                 struct gpumem_assignment *out, char *err, size_t errlen);

/* One container's edits: what allocate_container() gives for the
 * assigned GPUs (NVIDIA_VISIBLE_DEVICES by id_by_index, volume-mounts,
 * CDI, device nodes), plus gpushare's environment ALIYUN_COM_GPU_MEM_IDX,
 * _POD, _CONTAINER (container_units), _DEV (the first GPU's units of
 * `unit`), and CUDA_DEVICE_SM_LIMIT when the container asks gpu-cores.
 * res is the gpu-mem resource built above. Adds to out. */
GP_MUST_USE int gpumem_container_edits(const struct edits_options *opts, enum pool_mem_unit unit,
                                       const struct gpu_inventory *inv, const struct resource *res,
                                       const struct gpumem_assignment *as, size_t container_units,
                                       struct container_edits *out, char *err, size_t errlen);

#endif

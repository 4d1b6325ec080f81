/* objects.h -- the few fields of Kubernetes Pods and Nodes the extender uses.
 *
 * Turns a v1.Pod or v1.Node (jansson, borrowed) into small plain structs:
 * what a pod requests (NodeResourcesFit's sum-and-max rule), where gpushare's
 * annotations say it runs, what a node offers per GPU. Pure: no I/O, no
 * locks, no logging. Nothing here keeps a pointer into the json_t after the
 * call except the `const char *` fields documented as borrowed.
 *
 * Names and formats (docs/extender.md has the full table):
 *   resources    aliyun.com/gpu-mem (GPU memory, the node's unit: GiB by
 *                default), aliyun.com/gpu-count (GPUs on a node; on a pod:
 *                how many GPUs its memory is split over)
 *   annotations  gpushare's ALIYUN_COM_GPU_MEM_{IDX,POD,DEV,ASSIGNED,ASSUME_TIME}
 *                and ours: gpupool.io/gpus (node: per-GPU memory, model,
 *                health), gpupool.io/gpu-model and gpupool.io/gpu-count (pod) */
#ifndef GP_EXTENDER_OBJECTS_H
#define GP_EXTENDER_OBJECTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "placement.h"
#include "compiler.h"


#define RES_GPU_MEM "aliyun.com/gpu-mem"
#define RES_GPU_COUNT "aliyun.com/gpu-count"

#define ANN_GPU_MEM_IDX "ALIYUN_COM_GPU_MEM_IDX"
#define ANN_GPU_MEM_POD "ALIYUN_COM_GPU_MEM_POD"
#define ANN_GPU_MEM_DEV "ALIYUN_COM_GPU_MEM_DEV"
#define ANN_GPU_MEM_ASSIGNED "ALIYUN_COM_GPU_MEM_ASSIGNED"
#define ANN_GPU_MEM_ASSUME_TIME "ALIYUN_COM_GPU_MEM_ASSUME_TIME"

#define ANN_NODE_GPUS "gpupool.io/gpus"          /* node: [{"index","memory","model","healthy"}] */
#define ANN_POD_GPU_MODEL "gpupool.io/gpu-model" /* pod annotation or label: "V100|A100" */
#define ANN_POD_GPU_COUNT "gpupool.io/gpu-count" /* pod annotation: GPUs to split gpu-mem over */
#define LABEL_NODE_GPU_PRODUCT "nvidia.com/gpu.product" /* GPU feature discovery's label */

/* Kubernetes resource.Quantity ("500m", "1.5Gi", "2e3") as an integer
 * count of 1/scale units, rounded up (scale 1000 gives milli-units, 1 whole
 * units, as Quantity.MilliValue()/Value() do). Negative values, fractions
 * below 1/scale that would round to a different number of digits, unknown
 * suffixes and values over UINT64_MAX are refused: -1 with a reason. */
int quantity_parse(const char *text, uint64_t scale, uint64_t *out, char *err, size_t errlen)
    GP_MUST_USE;

/* Where gpushare's annotations put a pod: GPU indices and memory. */
struct pod_assignment {
    bool present;            /* IDX and POD both present and valid */
    uint32_t gpu_mask;       /* bit i: GPU i (IDX "1" or, multi-GPU, "0,1") */
    uint32_t gpu_count;      /* bits set in gpu_mask */
    uint64_t pod_memory;     /* ALIYUN_COM_GPU_MEM_POD: the pod's total */
};

/* Everything the extender needs from a pod. */
struct pod_facts {
    const char *name, *ns, *uid; /* borrowed; never NULL ("" when absent) */
    const char *node_name;       /* borrowed; NULL when not bound */
    bool terminated;             /* phase Succeeded or Failed: holds nothing */
    bool deleting;               /* deletionTimestamp set: still holds resources */
    uint64_t cpu_milli;          /* NodeResourcesFit request: max(sum, max init) + overhead */
    uint64_t memory_bytes;
    uint64_t gpu_memory;         /* aliyun.com/gpu-mem, same rule */
    uint32_t gpu_count;          /* GPUs to split gpu_memory over; 1 when unset */
    const char *gpu_model;       /* borrowed "V100|A100" constraint, NULL when none */
    struct pod_assignment assigned;
};

/* Reads a pod. Fails (-1, err) on a pod that is not an object, mistyped
 * fields (a string where an object belongs), or an unparsable quantity;
 * a missing field is simply zero. Annotations that do not parse leave
 * `assigned.present` false (the caller may log err_ann, which may be NULL). */
int objects_pod_facts(const json_t *pod, struct pod_facts *out, char *err, size_t errlen) GP_MUST_USE;

/* A GPU-memory request as the placement engine sees it: gpu_count GPUs with
 * gpu_memory / gpu_count on each. -1 with a reason when the memory does not
 * divide evenly, or the count is 0 or over PLACEMENT_MAX_GPUS. */
int objects_pod_request(const struct pod_facts *pod, struct placement_request *req, char *err,
                        size_t errlen) GP_MUST_USE;

/* Everything the extender needs from a node. */
struct node_facts {
    const char *name;            /* borrowed */
    uint64_t cpu_milli;          /* status.allocatable */
    uint64_t memory_bytes;
    uint64_t gpu_memory_total;   /* capacity aliyun.com/gpu-mem; 0: not a GPU-sharing node */
    uint32_t gpu_count;          /* GPUs described (<= PLACEMENT_MAX_GPUS) */
    uint64_t gpu_memory[PLACEMENT_MAX_GPUS];
    uint32_t unhealthy;          /* bit i: the gpupool.io/gpus annotation says unhealthy */
    char model[PLACEMENT_MODEL_LEN]; /* "" when unknown */
    bool from_annotation;        /* per-GPU values came from gpupool.io/gpus */
    char warning[160];           /* non-empty: something was ignored (bad annotation, >16 GPUs) */
};

/* Reads a node: allocatable CPU and memory, capacity aliyun.com/gpu-mem and
 * aliyun.com/gpu-count (per GPU = total / count, as gpushare), replaced by
 * the gpupool.io/gpus annotation when that is present and valid. -1 only
 * for a node that is not an object or has mistyped fields / quantities. */
int objects_node_facts(const json_t *node, struct node_facts *out, char *err, size_t errlen)
    GP_MUST_USE;

/* Parses gpushare's comma-separated GPU index list ("1", "0,1", "0, 2")
 * into a bit mask. -1 on anything else (empty, out of range, repeated). */
int objects_parse_index_list(const char *text, uint32_t *mask) GP_MUST_USE;

/* Formats a mask as "0,1" into buf; returns buf. */
char *objects_format_index_list(uint32_t mask, char *buf, size_t len);

#endif

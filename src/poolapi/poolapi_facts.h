/* poolapi_facts.h -- what a v1.Pod and a v1.Node mean to the GPU pool.
 *
 * Turns a Pod or Node (jansson, borrowed) into small plain structs: what a
 * pod requests (the effective-request rule of poolapi_demand.h, overhead
 * added), where gpushare's annotations say it runs, what a node offers per
 * GPU (gpupool.io/gpus, else aliyun.com/gpu-count uniform GPUs). These are
 * the facts every program must read alike (the golden table test,
 * test/unit/poolapi/test_golden.c, holds them to it). Pure: no I/O, no
 * locks, no logging; any thread. Nothing keeps a pointer into the json_t
 * after the call except the `const char *` fields documented as borrowed.
 * Names: poolapi_names.h; docs/poolapi.md. */
#ifndef GP_POOLAPI_FACTS_H
#define GP_POOLAPI_FACTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "poolapi_names.h"

/* Where gpushare's annotations put a pod: GPU indices and memory. */
struct pod_assignment {
    bool present;        /* IDX and POD both present and valid */
    uint32_t gpu_mask;   /* bit i: GPU i (IDX "1" or, multi-GPU, "0,1") */
    uint32_t gpu_count;  /* bits set in gpu_mask */
    uint64_t pod_memory; /* ALIYUN_COM_GPU_MEM_POD: the pod's total */
};

/* ALIYUN_COM_GPU_MEM_POD in a pod's annotations (NULL: none): the pod's
 * gpu-mem units as the extender wrote them at bind. The one rule of every
 * reader (extender, CLI, device plugin): a JSON string of decimal digits,
 * no sign, blank or suffix, that fits in 64 bits. A JSON number is refused:
 * annotations are strings in the Kubernetes API (map[string]string), so no
 * API server serves one, and a value no writer can have produced is not
 * guessed at (the plugin then totals the pod's containers itself). 0 with
 * *units set; -1 when absent or malformed (*units untouched). */
int poolapi_gpu_mem_pod(const json_t *annotations, uint64_t *units) GP_MUST_USE;

/* Everything the pool needs from a pod. */
struct pod_facts {
    const char *name, *ns, *uid; /* borrowed; never NULL ("" when absent) */
    const char *node_name;       /* borrowed; NULL when not bound */
    bool terminated;             /* phase Succeeded or Failed: holds nothing */
    bool deleting;               /* deletionTimestamp set: still holds resources */
    uint64_t cpu_milli;          /* effective request (poolapi_demand.h) + overhead */
    uint64_t memory_bytes;
    uint64_t gpu_memory;   /* aliyun.com/gpu-mem, same rule */
    uint64_t gpu_cores;    /* gpupool.io/gpu-cores, same rule: percent on EACH of its GPUs
                            * (poolapi_gpu_cores_check says whether it is valid) */
    uint32_t gpu_count;    /* GPUs to split gpu_memory over; 1 when unset */
    const char *gpu_model; /* borrowed "V100|A100" constraint, NULL when none */
    struct pod_assignment assigned;
};

/* Reads a pod. Fails (-1, err) on a pod that is not an object, mistyped
 * fields (a string where an object belongs), or an unparsable quantity;
 * a missing field is simply zero. Annotations that do not parse leave
 * `assigned.present` false. */
int poolapi_pod_facts(const json_t *pod, struct pod_facts *out, char *err,
                      size_t errlen) GP_MUST_USE;

/* Whether a pod's gpupool.io/gpu-cores can be scheduled: 0 (none asked), or
 * 1..100 per GPU beside aliyun.com/gpu-mem (cores are booked on the GPUs
 * that gpu-mem places; a pod asking cores alone has no GPU to book them
 * on). 0, or -1 with a sentence for the user in err. */
int poolapi_gpu_cores_check(const struct pod_facts *pod, char *err, size_t errlen) GP_MUST_USE;

/* Everything the pool needs from a node. */
struct node_facts {
    const char *name;    /* borrowed */
    const char *address; /* borrowed: status.addresses' first InternalIP, else ExternalIP,
                          * else Hostname; NULL when none */
    uint64_t cpu_milli;  /* status.allocatable */
    uint64_t memory_bytes;
    uint64_t gpu_memory_total; /* capacity aliyun.com/gpu-mem; 0: not a GPU-sharing node */
    uint32_t gpu_count;        /* GPUs described (<= POOL_MAX_GPUS) */
    uint64_t gpu_memory[POOL_MAX_GPUS];
    uint32_t gpu_cores[POOL_MAX_GPUS]; /* percent; POOL_GPU_CORES_PER_GPU unless the
                                        * gpupool.io/gpus annotation says otherwise */
    uint32_t unhealthy;                /* bit i: the gpupool.io/gpus annotation says unhealthy */
    char model[POOL_MODEL_LEN];        /* "" when unknown */
    bool from_annotation;              /* per-GPU values came from gpupool.io/gpus */
    char warning[160]; /* non-empty: something was ignored (bad annotation, >16 GPUs) */
};

/* Reads a node: allocatable CPU and memory, capacity aliyun.com/gpu-mem and
 * aliyun.com/gpu-count (per GPU = total / count, as gpushare), replaced by
 * the gpupool.io/gpus annotation when that is present and valid. -1 only
 * for a node that is not an object or has mistyped fields / quantities. */
int poolapi_node_facts(const json_t *node, struct node_facts *out, char *err,
                       size_t errlen) GP_MUST_USE;

#endif

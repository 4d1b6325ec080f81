/* pool_model.h -- the GPU pool as the inspect commands see it.
 *
 * Built from the API server's objects, one at a time, as the paginated
 * LISTs deliver them: nodes first, then the kube-system ConfigMaps (the
 * unhealthy-GPU lists), then pods. Only the fields inspect prints are kept
 * (names, amounts, indices), never the JSON, so memory grows with the
 * number of GPU nodes and GPU pods, not with the size of the objects.
 *
 * What counts (compatible with gpushare's kubectl-inspect-gpushare):
 *  - a node is in the pool when its allocatable aliyun.com/gpu-mem or any
 *    nvidia.com/... resource is > 0 (or when it is the one node asked for);
 *  - its GPUs: the node annotation gpupool.io/gpus (per-GPU memory, model,
 *    health) when present and valid, else aliyun.com/gpu-count GPUs of
 *    aliyun.com/gpu-mem / gpu-count each;
 *  - a GPU-memory share is a pod with spec.nodeName on a pool node, phase
 *    not Succeeded/Failed, and an effective aliyun.com/gpu-mem request > 0
 *    (the contract's rule, poolapi_demand.h: app containers, init
 *    containers and sidecars); it is charged to the GPUs of its annotation
 *    scheduler.framework.gpushare.allocation (gpushare 2.0) or
 *    ALIYUN_COM_GPU_MEM_IDX ("1", or "0,1" for a multi-GPU share, split
 *    evenly); without a usable index it is pending;
 *  - whole-GPU / replica / MIG use: per node and nvidia.com/... resource, the
 *    pods' effective requests (the same rule) against the node's allocatable;
 *  - unhealthy GPUs: ConfigMap kube-system/unhealthy-gpu-<node> key "gpus"
 *    (comma-separated indices, gpushare's) and "healthy": false in
 *    gpupool.io/gpus.
 *
 * Ownership: everything hangs off struct pool and is released by
 * pool_free(); strings live in the pool's arena. Not thread-safe. */
#ifndef GP_CLI_POOL_H
#define GP_CLI_POOL_H

#include "arena.h"
#include "poolapi_names.h"
#include "poolapi_unit.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/* The names shared with the extender, the device plugin and gpushare are
 * the contract's (poolapi_names.h). The most GPUs one node may have for
 * the CLI; more in an annotation or a count is treated as malformed (keeps
 * a bad object from costing gigabytes). It is larger than the scheduler's
 * POOL_MAX_GPUS on purpose: inspect shows what is there. */
#define POOL_MODEL_MAX_GPUS 1024

struct pool_gpu {
    int64_t total;        /* memory, in the node's unit */
    int64_t allocated;    /* sum of the shares charged to it */
    int64_t cores_total;  /* gpupool.io/gpu-cores it offers (100 unless gpupool.io/gpus says) */
    int64_t cores_booked; /* sum of the gpu-cores of the shares charged to it */
    const char *model;    /* NULL when unknown */
    bool unhealthy;
    unsigned shares; /* pods charged to it */
};

/* A GPU-memory share: one pod, and how much of which GPUs it holds. */
struct pool_share {
    const char *ns, *name;
    int64_t amount; /* the pod's aliyun.com/gpu-mem (effective request) */
    int64_t cores;  /* its gpupool.io/gpu-cores, on each of its GPUs */
    int nparts;     /* 0: pending (no usable index) */
    int *gpu;       /* nparts GPU indices */
    int64_t *part;  /* nparts amounts, summing to amount */
};

/* A pod using an nvidia.com/... resource on the node. */
struct pool_device_pod {
    const char *ns, *name;
    int64_t count;
};

struct pool_resource {
    const char *name; /* "nvidia.com/gpu", "nvidia.com/mig-1g.5gb", ... */
    int64_t capacity; /* status.capacity (the plugin's devices, unhealthy ones too) */
    int64_t allocatable;
    int64_t requested;
    struct pool_device_pod *pods;
    size_t npods, cap;
};

/* DRA (pool_dra.h): one claim's part of a device. */
struct pool_dra_claim {
    const char *ns, *name;
    int64_t consumed; /* bytes of the device's memory */
};

/* A device of a ResourceSlice on a node, and the claims allocated on it. */
struct pool_dra_device {
    const char *node, *driver, *pool, *name;
    int64_t memory;                /* capacity memory, bytes; 0 when the device has none */
    bool shared;                   /* allowMultipleAllocations */
    int64_t consumed;              /* sum of the claims' parts */
    struct pool_dra_claim *claims; /* sorted by (namespace, name) after pool_finish() */
    size_t nclaims, claims_cap;
};

struct pool_node {
    const char *name;
    const char *address; /* InternalIP, or "unknown" */
    int64_t mem_total;   /* allocatable aliyun.com/gpu-mem */
    int64_t gpu_count;   /* allocatable aliyun.com/gpu-count */
    bool gpus_annotated; /* per-GPU data came from gpupool.io/gpus */
    int ngpus;
    struct pool_gpu *gpus;
    struct pool_share *shares; /* by (namespace, name) after pool_finish() */
    size_t nshares, shares_cap;
    int64_t pending; /* memory of the pending shares */
    size_t npending;
    struct pool_resource *resources;
    size_t nresources;
    int *unhealthy_cm; /* indices from the ConfigMap (any value, as given) */
    size_t nunhealthy_cm;
    /* NVIDIA's GPU feature discovery labels (whole-GPU and time-slicing
     * nodes): nvidia.com/gpu.product, .count, .replicas; NULL / 0 unset. */
    const char *product;
    int64_t label_count, label_replicas;
    /* DRA devices on the node, sorted by name after pool_finish() (the
     * devices live in pool->dra). */
    struct pool_dra_device **dra;
    size_t ndra;
};

struct pool {
    struct arena arena;
    struct pool_node **nodes; /* sorted by name after pool_finish() */
    size_t nnodes, nodes_cap;
    /* name -> node, open addressing; rebuilt as it grows */
    struct pool_node **table;
    size_t table_size;
    const char *only_node;     /* inspect NODE: that node is in the pool whatever it has */
    const char *pod_namespace; /* -n: pods listed in detail views; NULL = all */
    size_t pods_seen;          /* pods looked at (for --v and the bench) */
    /* DRA: every ResourceSlice device read (pool_dra.h), and the sorted
     * names of the nodes that have any (they are pool nodes). */
    struct pool_dra_device *dra;
    size_t ndra, dra_cap;
    const char **dra_nodes;
    size_t ndra_nodes;
    char warning[256]; /* the first malformed object met, for -v */
};

void pool_init(struct pool *pool, const char *only_node, const char *pod_namespace);
void pool_free(struct pool *pool);

/* Adds one v1.Node. Nodes outside the pool are skipped (returns 0).
 * -1 only when out of memory. */
int pool_add_node(struct pool *pool, const json_t *node) GP_MUST_USE;
/* Adds one ConfigMap; only kube-system/unhealthy-gpu-<pool node> matter. */
int pool_add_configmap(struct pool *pool, const json_t *configmap) GP_MUST_USE;
/* Adds one v1.Pod. -1 only when out of memory. */
int pool_add_pod(struct pool *pool, const json_t *pod) GP_MUST_USE;

/* A pod reduced to what the pool charges: pods can then be read (in
 * another thread, into a struct pool_pods) before their nodes are known. */
struct pool_pod_request {
    const char *resource; /* nvidia.com/... */
    int64_t count;        /* the pod's effective request, > 0 */
};

struct pool_pod {
    const char *ns, *name, *node;
    int64_t gpu_mem;                /* effective aliyun.com/gpu-mem request (poolapi_demand.h) */
    int64_t gpu_cores;              /* effective gpupool.io/gpu-cores request, on each GPU */
    const char *allocation, *index; /* the two gpushare annotations, NULL when absent */
    struct pool_pod_request *requests;
    size_t nrequests;
};

/* Pods read apart from any pool; zero-initialise ({0}) before use. Only
 * the pods that hold GPU memory or devices are kept; their strings live
 * in the arena. Not thread-safe; one thread fills it, then
 * pool_add_pods() hands it over. */
struct pool_pods {
    struct arena arena;
    struct pool_pod *pods;
    size_t count, cap;
    size_t seen; /* pods looked at */
};

/* Records one v1.Pod (see struct pool_pods). -1 only when out of memory. */
int pool_pods_add(struct pool_pods *pods, const json_t *pod) GP_MUST_USE;
/* Charges every recorded pod to the pool, which takes over their memory
 * (call after the nodes). pods is left for pool_pods_free(). */
int pool_add_pods(struct pool *pool, struct pool_pods *pods) GP_MUST_USE;
void pool_pods_free(struct pool_pods *pods);
/* Sorts the nodes by name and applies the unhealthy lists. Call once, after
 * the last object. */
void pool_finish(struct pool *pool);

struct pool_node *pool_find(const struct pool *pool, const char *name);

/* Physical GPUs behind the node's nvidia.com/gpu: the nvidia.com/gpu.count
 * label, else nvidia.com/gpu capacity / nvidia.com/gpu.replicas (1 when
 * unlabelled); 0 without nvidia.com/gpu. */
int64_t pool_node_whole_gpus(const struct pool_node *node);
/* Devices each of those GPUs is shared as: the replicas label, else 1. */
int64_t pool_node_replicas(const struct pool_node *node);
/* The node's nvidia.com/gpu resource, NULL when it has none. */
const struct pool_resource *pool_node_gpu_resource(const struct pool_node *node);

/* The unit of the node's numbers: gpushare's CLI heuristic through the
 * contract's unit type (poolapi_unit_guess: largest GPU > 100 units: MiB). */
enum pool_mem_unit pool_node_unit(const struct pool_node *node);
/* Share of `part` in `whole` in percent, truncated the way gpushare's Go
 * code does it: int64(float64(part)/float64(whole)*100); 0 when whole <= 0. */
int64_t pool_percent(int64_t part, int64_t whole);

#endif

/* resource.h -- which devices are served under which resource name.
 *
 * Pure domain code: turns the GPU inventory and the configuration (MIG
 * strategy, resources.gpus/mig patterns, time-slicing replicas, rename,
 * per-device lists) into named resources, each a list of advertised
 * devices. No NVML, no gRPC, no locking: the caller owns concurrency.
 *
 * Owner: struct resource_set is embedded by the caller and released with
 * resource_set_free(). Devices point back into the inventory by position,
 * so the inventory must outlive the set. */
#ifndef GP_RESOURCE_H
#define GP_RESOURCE_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "gpu.h"
#include "compiler.h"

#define RESOURCE_ID_LEN 128
#define RESOURCE_INDEX_LEN 24
#define RESOURCE_SOCKET_LEN 128
#define RESOURCE_NO_MIG (-1)
#define RESOURCE_NO_REPLICA (-1)

/* One device as the kubelet sees it. */
struct resource_device {
    char id[RESOURCE_ID_LEN];       /* advertised: "GPU-..", "MIG-..", "GPU-..::3" */
    char uuid[GPU_UUID_LEN];        /* the GPU or MIG device behind it */
    char index[RESOURCE_INDEX_LEN]; /* "0" or "1:0" (--device-id-strategy index) */
    size_t gpu;                     /* position of the physical GPU in the inventory */
    int mig;                        /* position in gpus[gpu].migs, or RESOURCE_NO_MIG */
    int replica;                    /* k of "::k", or RESOURCE_NO_REPLICA */
    int numa_node;                  /* GPU_NUMA_UNKNOWN when unknown */
    bool healthy;
};

struct resource {
    char name[CONFIG_NAME_LEN];            /* "nvidia.com/gpu" */
    char socket_name[RESOURCE_SOCKET_LEN]; /* "gpupool-nvidia-gpu.sock" */
    bool shared;                           /* some devices are time-sliced replicas */
    bool fail_requests_greater_than_one;
    size_t device_count;
    struct resource_device *devices; /* owned */
};

struct resource_set {
    size_t count;
    struct resource *resources; /* owned */
};

/* Builds the resources. Fails (-1 + err) on configurations that cannot be
 * served (MIG single on non-uniform GPUs) and on out-of-memory. A
 * time-slicing entry naming no resource of this node, or a per-device
 * reference (UUID, index) that matches no device here, is logged as a
 * warning and the devices that are present are shared: one configuration
 * serves a whole cluster. Devices of lost GPUs start Unhealthy. */
GP_MUST_USE int resource_set_build(const struct gpu_inventory *inv, const struct gp_config *cfg,
                                   struct resource_set *set, char *err, size_t errlen);
void resource_set_free(struct resource_set *set);

/* A whole-GPU device of inventory GPU `pos`: ID and UUID the GPU's UUID,
 * no MIG, no replica, Unhealthy from the start when the GPU is lost.
 * Callers that carve a GPU further (gpu-mem units) rename the ID. */
void resource_device_init_gpu(struct resource_device *d, const struct gpu_device *g, size_t pos);

/* Control nodes a container of any GPU needs: /dev/nvidiactl first (every
 * driver has it), then the optional ones, each only where the host has it. */
extern const char *const resource_control_nodes[];
extern const size_t resource_control_node_count;

/* The device nodes of one device: its GPU's /dev/nvidia<minor> and, for a
 * MIG device, the /dev/nvidia-caps/nvidia-cap<N> nodes of its GPU and
 * compute instances (those whose minor is known). Fills out[] and returns
 * how many. The Allocate reply and the CDI spec both build from it. */
#define RESOURCE_MAX_DEVICE_NODES 3
#define RESOURCE_NODE_LEN 48
size_t resource_device_nodes(const struct gpu_inventory *inv, const struct resource_device *d,
                             char out[RESOURCE_MAX_DEVICE_NODES][RESOURCE_NODE_LEN]);

/* `*`-wildcard match anchored at both ends (NVIDIA's resource patterns). */
bool resource_pattern_match(const char *pattern, const char *text);

#endif

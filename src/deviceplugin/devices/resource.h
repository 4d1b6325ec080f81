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
    char id[RESOURCE_ID_LEN];          /* advertised: "GPU-..", "MIG-..", "GPU-..::3" */
    char uuid[GPU_UUID_LEN];           /* the GPU or MIG device behind it */
    char index[RESOURCE_INDEX_LEN];    /* "0" or "1:0" (--device-id-strategy index) */
    size_t gpu;                        /* position of the physical GPU in the inventory */
    int mig;                           /* position in gpus[gpu].migs, or RESOURCE_NO_MIG */
    int replica;                       /* k of "::k", or RESOURCE_NO_REPLICA */
    int numa_node;                     /* GPU_NUMA_UNKNOWN when unknown */
    bool healthy;
};

struct resource {
    char name[CONFIG_NAME_LEN];        /* "nvidia.com/gpu" */
    char socket_name[RESOURCE_SOCKET_LEN]; /* "gpupool-nvidia-gpu.sock" */
    bool shared;                       /* some devices are time-sliced replicas */
    bool fail_requests_greater_than_one;
    size_t device_count;
    struct resource_device *devices;   /* owned */
};

struct resource_set {
    size_t count;
    struct resource *resources;        /* owned */
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

/* `*`-wildcard match anchored at both ends (NVIDIA's resource patterns). */
bool resource_pattern_match(const char *pattern, const char *text);

#endif

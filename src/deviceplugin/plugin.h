/* plugin.h -- DevicePlugin semantics for every resource of the node.
 *
 * A plugin_node owns the resources built from the inventory and the
 * configuration, their health, and one rpc_handlers context per resource.
 * It decodes requests, validates them, answers with resource/allocate/
 * preferred logic and encodes replies; the rpc_*.c transport only moves bytes.
 *
 * Threading: the handlers run on the RPC thread; plugin_node_set_gpu_health()
 * runs on the health thread. One mutex guards device health and the
 * snapshot generations; everything else is read-only after init. */
#ifndef GP_PLUGIN_H
#define GP_PLUGIN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "gpu.h"
#include "resource.h"
#include "rpc.h"
#include "compiler.h"

#define PLUGIN_API_VERSION "v1beta1"
#define PLUGIN_ALL_GPUS ((size_t)-1)

struct plugin_endpoint {
    struct plugin_node *node;
    size_t resource;                 /* position in node->resources */
    uint64_t generation;             /* bumped on every health change */
    struct rpc_server *server;       /* set by the daemon while serving */
    size_t *by_id;                   /* device positions sorted by ID (lookups) */
};

struct plugin_node {
    pthread_mutex_t lock;            /* device health, generations */
    pthread_mutex_t notify_lock;     /* endpoint->server while it is used */
    const struct gp_config *cfg;     /* borrowed */
    const struct gpu_inventory *inv; /* borrowed */
    struct resource_set resources;   /* owned */
    struct plugin_endpoint *endpoints; /* owned, one per resource */
    bool *gpu_lost;                  /* owned, per inventory GPU; under `lock` */
    /* --resource-mode=gpu-mem: Allocate goes to the pod identity service
     * and health changes are published through it (gpumem_service.h).
     * Set by the daemon before serving; NULL in whole-GPU mode. */
    struct gpumem_service *gpumem;
    /* --metrics-addr: Allocate latency and XID counters (plugin_metrics.h); set
     * by the daemon before serving, NULL when metrics are off. */
    struct plugin_metrics *metrics;
};

/* Builds the resources; -1 + err when the configuration cannot be served. */
GP_MUST_USE int plugin_node_init(struct plugin_node *node, const struct gp_config *cfg,
                     const struct gpu_inventory *inv, char *err, size_t errlen);
void plugin_node_free(struct plugin_node *node);

/* Moves a node built by plugin_node_init() (and not yet served: no server
 * attached, no thread using it) into *to, borrowing cfg and inv instead:
 * the daemon builds a reload's node next to the running one, then moves
 * it into place with the configuration and inventory it was built from.
 * *from is left empty (plugin_node_free() on it does nothing). */
void plugin_node_move(struct plugin_node *to, struct plugin_node *from,
                      const struct gp_config *cfg, const struct gpu_inventory *inv);

/* Handlers for resource `resource`, ready for rpc_server_start(). */
struct rpc_handlers plugin_node_handlers(struct plugin_node *node, size_t resource);

/* Attach (srv) or detach (NULL) the server that pushes snapshots of
 * `resource`. Detach before rpc_server_stop(): afterwards no thread uses it. */
void plugin_node_attach_server(struct plugin_node *node, size_t resource, struct rpc_server *srv);

/* Encoded RegisterRequest for resource `resource` (socket_name as endpoint). */
GP_MUST_USE int plugin_node_register_request(struct plugin_node *node, size_t resource, struct rpc_buf *out);

/* Marks every device carved from physical GPU `gpu` (the GPU itself, its
 * replicas, its MIG devices, in every resource) healthy or not, and pushes
 * a new snapshot to the kubelet for each resource that changed. Returns the
 * number of devices whose health changed. Any thread. */
size_t plugin_node_set_gpu_health(struct plugin_node *node, size_t gpu, bool healthy);

/* Only the devices carved from MIG device `mig` of GPU `gpu` (an XID the
 * driver attributed to one GPU/compute instance), and the GPU itself where
 * it is served whole (--mig-strategy none on a MIG-enabled GPU): the
 * whole device contains the failed instance. */
size_t plugin_node_set_mig_health(struct plugin_node *node, size_t gpu, int mig, bool healthy);

/* Marks every device of the node (health monitoring itself failed). */
size_t plugin_node_set_all_health(struct plugin_node *node, bool healthy);

/* Physical GPU `gpu` fell off the bus: Allocate refuses its devices with
 * FAILED_PRECONDITION from now on (GPUs the inventory could not identify
 * start out lost). Health is set separately. Any thread. */
void plugin_node_set_gpu_lost(struct plugin_node *node, size_t gpu);

#endif

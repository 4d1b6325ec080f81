/* plugin.h -- DevicePlugin semantics for every resource of the node.
 *
 * A plugin_node owns the resources built from the inventory and the
 * configuration, their health, and one rpc_handlers context per resource.
 * It decodes requests, validates them, answers with resource/allocate/
 * preferred logic and encodes replies; the rpc_*.c transport only moves
 * bytes. The DevicePlugin method table (plugin_node_handlers) lives here.
 *
 * Seams: what else runs beside the node plugs in through registrations
 * the node holds but does not own (their owner, the daemon, starts and
 * stops them and unregisters before it frees them):
 *   - an allocator (plugin_allocator): gpu-mem mode answers Allocate there;
 *   - health observers: told of every health change, in registration
 *     order, after the node's own (it pushes ListAndWatch snapshots);
 *   - allocate observers: told of every answered Allocate and its latency,
 *     deferred ones when they complete.
 * Other files read the model through the accessors below, never the
 * struct's fields (private to plugin.c) and never its locks.
 *
 * Threading: the handlers run on the RPC thread; the set_*_health()
 * functions on the health thread (any thread but a handler). `lock` guards
 * device health, gpu_lost and the snapshot generations; everything else of
 * the model is read-only after init. Lock order: observer_lock ->
 * notify_lock -> (rpc runtime lock); (rpc runtime lock) -> alloc_lock ->
 * whatever an allocator or allocate observer takes. Observers are called
 * with their list's lock held: they must not register or unregister. */
#ifndef GP_PLUGIN_H
#define GP_PLUGIN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "allocate.h"
#include "config.h"
#include "container_edits.h"
#include "gpu.h"
#include "resource.h"
#include "rpc.h"
#include "compiler.h"

#define PLUGIN_API_VERSION "v1beta1"
#define PLUGIN_ALL_GPUS ((size_t)-1)
/* The kubelet's registration method (rpc_client_call). */
#define PLUGIN_REGISTER_METHOD "/v1beta1.Registration/Register"
/* Registrations a node holds per kind, its own included. */
#define PLUGIN_MAX_OBSERVERS 8

/* The DevicePlugin service: positions in plugin_node_handlers()'s table,
 * the `method` a unary handler is called with. */
enum plugin_method {
    PLUGIN_GET_DEVICE_PLUGIN_OPTIONS,
    PLUGIN_LIST_AND_WATCH,
    PLUGIN_GET_PREFERRED_ALLOCATION,
    PLUGIN_ALLOCATE,
    PLUGIN_PRE_START_CONTAINER,
    PLUGIN_METHOD_COUNT,
};

struct plugin_node;

/* One Allocate handed to the registered allocator. Once parked
 * (plugin_allocation_park) its holder answers it exactly once, from any
 * thread, with plugin_allocation_reply() or plugin_allocation_fail(). */
struct plugin_allocation;

struct plugin_allocator {
    void *ctx;
    /* RPC thread. An Allocate of one container request holding `units`
     * valid device IDs of resource `resource`. Either park job, keep it
     * and return RPC_DEFERRED; or, without parking it, return an error
     * status with msg: the call is answered with it at once and job is
     * freed by the node. */
    enum rpc_status (*allocate)(void *ctx, struct plugin_allocation *job, size_t resource,
                                size_t units, char *msg, size_t msglen);
};

/* A health change: changed[r] for each resource r whose devices changed;
 * `devices` of them changed in all. */
struct plugin_health_change {
    const bool *changed;
    size_t resource_count;
    size_t devices;
};
typedef void (*plugin_health_fn)(void *ctx, const struct plugin_health_change *change);

/* An Allocate of `resource` answered after `seconds` (from its arrival to
 * its answer, a deferred one's included); ok = answered without an error
 * status. */
typedef void (*plugin_allocate_fn)(void *ctx, const char *resource, double seconds, bool ok);

struct plugin_health_observer {
    void *ctx;
    plugin_health_fn fn;
};

struct plugin_allocate_observer {
    void *ctx;
    plugin_allocate_fn fn;
};

struct plugin_endpoint {
    struct plugin_node *node;
    size_t resource;           /* position in node->resources */
    uint64_t generation;       /* bumped on every health change */
    struct rpc_server *server; /* attached by the daemon while serving */
    size_t *by_id;             /* device positions sorted by ID (lookups) */
};

/* Embedded by its owner (the daemon); every field is plugin.c's. */
struct plugin_node {
    pthread_mutex_t lock;              /* device health, gpu_lost, generations */
    pthread_mutex_t notify_lock;       /* endpoint->server while it is used */
    pthread_mutex_t observer_lock;     /* health_observers, held while they run */
    pthread_mutex_t alloc_lock;        /* allocator, allocate_observers, held while they run */
    const struct gp_config *cfg;       /* borrowed */
    const struct gpu_inventory *inv;   /* borrowed */
    struct edits_options edits;        /* from cfg: what allocate_container() reads */
    struct resource_set resources;     /* owned */
    struct plugin_endpoint *endpoints; /* owned, one per resource */
    bool *gpu_lost;                    /* owned, per inventory GPU; under `lock` */
    /* Registrations (borrowed contexts). [0] of the health observers is the
     * node's own: it pushes ListAndWatch snapshots to attached servers. */
    struct plugin_health_observer health_observers[PLUGIN_MAX_OBSERVERS];
    size_t health_observer_count;
    struct plugin_allocate_observer allocate_observers[PLUGIN_MAX_OBSERVERS];
    size_t allocate_observer_count;
    /* --resource-mode=gpu-mem: Allocate goes to the allocator (the gpu-mem
     * service registers itself); allocate == NULL in whole-GPU mode. */
    struct plugin_allocator allocator;
};

/* Builds the resources; -1 + err when the configuration cannot be served. */
GP_MUST_USE int plugin_node_init(struct plugin_node *node, const struct gp_config *cfg,
                                 const struct gpu_inventory *inv, char *err, size_t errlen);
void plugin_node_free(struct plugin_node *node);

/* Moves a node built by plugin_node_init() (and not yet served: no server
 * attached, nothing registered, no thread using it) into *to, borrowing
 * cfg and inv instead: the daemon builds a reload's node next to the
 * running one, then moves it into place with the configuration and
 * inventory it was built from. *from is left empty (plugin_node_free() on
 * it does nothing). */
void plugin_node_move(struct plugin_node *to, struct plugin_node *from, const struct gp_config *cfg,
                      const struct gpu_inventory *inv);

/* Handlers for resource `resource` with the DevicePlugin method table
 * (enum plugin_method), ready for rpc_server_start(). */
struct rpc_handlers plugin_node_handlers(struct plugin_node *node, size_t resource);

/* Attach (srv) or detach (NULL) the server that pushes snapshots of
 * `resource`. Detach before rpc_server_stop(): afterwards no thread uses it. */
void plugin_node_attach_server(struct plugin_node *node, size_t resource, struct rpc_server *srv);

/* Encoded RegisterRequest for resource `resource` (socket_name as
 * endpoint), for PLUGIN_REGISTER_METHOD. */
GP_MUST_USE int plugin_node_register_request(struct plugin_node *node, size_t resource,
                                             struct rpc_buf *out);

/* Marks every device carved from physical GPU `gpu` (the GPU itself, its
 * replicas, its MIG devices, in every resource) healthy or not; when any
 * changed, tells the health observers (the node's own first: it pushes a
 * new snapshot to the kubelet for each resource that changed). Returns the
 * number of devices whose health changed. Any thread but a handler. */
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

/* ---- registrations (main thread, before serving / after stopping) ------------
 * -1 when PLUGIN_MAX_OBSERVERS are registered already (a programming
 * error: the daemon registers a fixed few). Removing what is not
 * registered does nothing. Removal waits for a call in progress. */

/* At most one allocator; NULL allocate unregisters. */
void plugin_node_set_allocator(struct plugin_node *node, const struct plugin_allocator *a);
GP_MUST_USE int plugin_node_add_health_observer(struct plugin_node *node, void *ctx,
                                                plugin_health_fn fn);
void plugin_node_remove_health_observer(struct plugin_node *node, void *ctx, plugin_health_fn fn);
GP_MUST_USE int plugin_node_add_allocate_observer(struct plugin_node *node, void *ctx,
                                                  plugin_allocate_fn fn);
void plugin_node_remove_allocate_observer(struct plugin_node *node, void *ctx,
                                          plugin_allocate_fn fn);

/* ---- answering a parked Allocate (the allocator's side) -------------------------- */

/* In the allocator's allocate only, before job is handed to another
 * thread: parks the call (rpc_call_defer). -1 when out of memory: answer
 * with an error status then. */
GP_MUST_USE int plugin_allocation_park(struct plugin_allocation *job);

/* Answers job OK with one container's edits (encoded and packed here:
 * the node is the one v1beta1 encoder), tells the allocate observers and
 * frees job. -1 + err when out of memory or when the edits hold what a
 * v1beta1 reply cannot carry (hooks): job is untouched, answer it with
 * plugin_allocation_fail(). Any thread. */
GP_MUST_USE int plugin_allocation_reply(struct plugin_allocation *job,
                                        const struct container_edits *edits, char *err,
                                        size_t errlen);
/* Answers job with an error status (not RPC_OK) and msg, tells the
 * allocate observers and frees job. Any thread. */
void plugin_allocation_fail(struct plugin_allocation *job, enum rpc_status status, const char *msg);

/* ---- locked accessors (any thread) ------------------------------------------------ */

/* What one inventory GPU looks like now. */
struct plugin_gpu_state {
    bool lost;    /* fallen off the bus, or never identified */
    bool healthy; /* not lost, and every device carved from it Healthy */
};

/* The edits options built from the configuration (read-only after init):
 * allocators build their containers' edits with them. */
const struct edits_options *plugin_node_edits_options(const struct plugin_node *node);

/* The resources (read-only after init: names, sockets, devices; not the
 * devices' `healthy`, which only the accessors below read). */
size_t plugin_node_resource_count(const struct plugin_node *node);
const struct resource *plugin_node_resource(const struct plugin_node *node, size_t resource);
const struct resource_set *plugin_node_resources(const struct plugin_node *node);
/* GPU `gpu` (an inventory position) is lost; false outside the inventory. */
bool plugin_node_gpu_lost(struct plugin_node *node, size_t gpu);
/* states[g] for the first n inventory GPUs, read at one instant. */
void plugin_node_gpu_states(struct plugin_node *node, struct plugin_gpu_state *states, size_t n);
/* Devices of `resource` advertised Healthy now. */
size_t plugin_node_healthy_devices(struct plugin_node *node, size_t resource);

#endif

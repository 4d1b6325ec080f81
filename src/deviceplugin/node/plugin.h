/* plugin.h -- DevicePlugin semantics for every resource of the node.
 *
 * A plugin_node owns the resources built from the inventory and the
 * configuration, their health, and one rpc_handlers context per resource.
 * It decodes requests, validates them, answers with resource/allocate/
 * preferred logic and encodes replies; the rpc_*.c transport only moves
 * bytes. The DevicePlugin method table (plugin_node_handlers) lives here.
 *
 * GPU health and lost GPUs are not the node's: they live in the node's
 * GPU state (state/node_state.h, keyed by inventory GPU and MIG position,
 * owned by the node, reached with plugin_node_state()). The node is one
 * observer of it, the first: a change marks the devices carved from the
 * GPU (or MIG device) in every resource, bumps those resources'
 * generations and pushes new ListAndWatch snapshots. Health monitoring
 * writes the state; the gpu-mem publisher and the metrics read it.
 *
 * Seams: what else runs beside the node plugs in through registrations
 * the node holds but does not own (their owner, the daemon, starts and
 * stops them and unregisters before it frees them):
 *   - an allocator (plugin_allocator): gpu-mem mode answers Allocate there;
 *   - allocate observers: told of every answered Allocate and its latency,
 *     deferred ones when they complete;
 *   - GPU state observers (node_state_add_observer on plugin_node_state()).
 * Other files read the model through the accessors below, never the
 * struct's fields (private to plugin.c) and never its locks.
 *
 * Threading: the handlers run on the RPC thread; the node's state observer
 * on whichever thread changes the state (the health thread). `lock` guards
 * the devices' advertised health and the snapshot generations; everything
 * else of the model is read-only after init. Lock order: the state's
 * observer_lock -> lock / notify_lock -> (rpc runtime lock); (rpc runtime
 * lock) -> alloc_lock -> whatever an allocator or allocate observer takes;
 * a handler takes the state's own lock alone (is a GPU lost?). */
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
#include "node_state.h"
#include "resource.h"
#include "rpc.h"
#include "compiler.h"

#define PLUGIN_API_VERSION "v1beta1"
/* The kubelet's registration method (rpc_client_call). */
#define PLUGIN_REGISTER_METHOD "/v1beta1.Registration/Register"
/* Allocate observers a node holds. */
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

/* An Allocate of `resource` answered after `seconds` (from its arrival to
 * its answer, a deferred one's included); ok = answered without an error
 * status. */
typedef void (*plugin_allocate_fn)(void *ctx, const char *resource, double seconds, bool ok);

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
    pthread_mutex_t lock;              /* devices' advertised health, generations */
    pthread_mutex_t notify_lock;       /* endpoint->server while it is used */
    pthread_mutex_t alloc_lock;        /* allocator, allocate_observers, held while they run */
    const struct gp_config *cfg;       /* borrowed */
    const struct gpu_inventory *inv;   /* borrowed */
    struct edits_options edits;        /* from cfg: what allocate_container() reads */
    struct resource_set resources;     /* owned */
    struct plugin_endpoint *endpoints; /* owned, one per resource */
    /* Owned; the node is its first observer (it pushes ListAndWatch
     * snapshots to attached servers). */
    struct node_state state;
    /* Registrations (borrowed contexts). */
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

/* ---- registrations (main thread, before serving / after stopping) ------------
 * -1 when PLUGIN_MAX_OBSERVERS are registered already (a programming
 * error: the daemon registers a fixed few). Removing what is not
 * registered does nothing. Removal waits for a call in progress. */

/* At most one allocator; NULL allocate unregisters. */
void plugin_node_set_allocator(struct plugin_node *node, const struct plugin_allocator *a);
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

/* The node's GPU state: health and lost GPUs by inventory position. Set
 * it (health monitoring), read it, observe it through node_state.h. */
struct node_state *plugin_node_state(struct plugin_node *node);

/* The edits options built from the configuration (read-only after init):
 * allocators build their containers' edits with them. */
const struct edits_options *plugin_node_edits_options(const struct plugin_node *node);

/* The resources (read-only after init: names, sockets, devices; not the
 * devices' `healthy`, which only the accessors below read). */
size_t plugin_node_resource_count(const struct plugin_node *node);
const struct resource *plugin_node_resource(const struct plugin_node *node, size_t resource);
const struct resource_set *plugin_node_resources(const struct plugin_node *node);
/* Devices of `resource` advertised Healthy now. */
size_t plugin_node_healthy_devices(struct plugin_node *node, size_t resource);

#endif

/* gpumem_service.h -- the running half of --resource-mode=gpu-mem.
 *
 * Owns what the gpu-mem mode needs at run time: the API client, the
 * watched view of this node's pods (podview.h), the allocation ledger
 * (gpumem_ledger.h), the kubelet's PodResources client (podresources.h)
 * and two threads:
 *   - the allocator: answers parked Allocate calls one at a time, in
 *     arrival order: finds the pod (podidentity.h), records the call in the
 *     ledger, replies (gpumem.h); waits, bounded by --allocate-timeout,
 *     while the pod is not certain; never answers with a made-up GPU;
 *   - the API writer: pod annotation ALIYUN_COM_GPU_MEM_ASSIGNED=true after
 *     the reply, node status aliyun.com/gpu-count and the node annotation
 *     gpupool.io/gpus (per-GPU memory, model, health) at start, on every
 *     health change and every few minutes; retried with backoff.
 *
 * It reaches the node through plugin.h's seams only: it registers itself
 * as the node's allocator (Allocate calls arrive parked, on the RPC
 * thread, and are answered with plugin_allocation_reply/_fail) and as a
 * health observer (a change republishes the node annotation), and reads
 * GPU health through the node's locked accessors.
 *
 * Ownership and threads: the caller (the daemon) owns the service; start
 * and stop on the main thread, stop after the servers stopped (parked
 * calls are then cancelled and their answers dropped by
 * rpc_call_complete) and before the node is freed: stop unregisters.
 * Errors: -1 + err. Design: docs/gpumem.md. */
#ifndef GP_GPUMEM_SERVICE_H
#define GP_GPUMEM_SERVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "gpu.h"
#include "rpc.h"
#include "compiler.h"

struct plugin_node;
struct gpumem_service;

/* NODE_NAME must be set; the API configuration must load; the state
 * directory must be writable. The node's resources must be the gpu-mem
 * set; on success the service is registered with node (borrowed: it must
 * outlive the service). */
GP_MUST_USE int gpumem_service_start(const struct gp_config *cfg, const struct gpu_inventory *inv,
                                     struct plugin_node *node, struct rpc_runtime *rt,
                                     struct gpumem_service **out, char *err, size_t errlen);
/* Names the pod with this UID (ordinal < 0: container "") or its gpu-mem
 * container of that Allocate ordinal (the <n> of its region directory),
 * from the watched view; false when the view does not know it (yet). Any
 * thread; takes the view's lock briefly. Shaped as gpu_usage.h's resolver. */
bool gpumem_service_name_container(void *service, const char *uid, int ordinal, char *ns,
                                   size_t ns_len, char *pod, size_t pod_len, char *container,
                                   size_t container_len);

/* Unregisters from the node, answers queued calls UNAVAILABLE, joins the
 * threads, frees. NULL ok. */
void gpumem_service_stop(struct gpumem_service *s);

#endif

/* poolapi_demand.h -- what a pod requests of one resource: Kubernetes' effective request.
 *
 * ONE rule for every program that totals a pod (the extender's charging and
 * NodeResourcesFit, the CLI's pool, the device plugin's ALIYUN_COM_GPU_MEM_POD
 * fallback), the one of k8s resourcehelper.PodRequests with sidecars
 * (KEP-753). Init containers are walked in order with `sidecars`, the sum
 * of the restartPolicy: Always init containers seen so far:
 *   - a sidecar adds its request to the pod's running sum and to `sidecars`,
 *     and contributes `sidecars` to the init maximum;
 *   - a regular init container contributes its request + `sidecars`;
 *   demand = max(sum(app containers) + sum(sidecars), init maximum).
 * Pod overhead is the caller's to add (only NodeResourcesFit counts it).
 * Pure; any thread. */
#ifndef GP_POOLAPI_DEMAND_H
#define GP_POOLAPI_DEMAND_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/* The walk's state; zero-initialise ({0}) before the first container. */
struct poolapi_demand {
    uint64_t app;      /* sum over app containers */
    uint64_t sidecars; /* sum over the sidecars seen so far */
    uint64_t init_max; /* largest init-phase total seen so far */
};

/* Counts an app container (any order relative to the init containers). */
void poolapi_demand_add_app(struct poolapi_demand *d, uint64_t request);
/* Counts the next init container, in spec order. */
void poolapi_demand_add_init(struct poolapi_demand *d, uint64_t request, bool sidecar);
/* The pod's demand so far (saturates at UINT64_MAX). */
uint64_t poolapi_demand_total(const struct poolapi_demand *d);

/* Whether an init container is a sidecar (restartPolicy "Always"). */
bool poolapi_container_is_sidecar(const json_t *container);

/* One container's request of `resource` in 1/scale units: requests, else
 * limits (the API server defaults the one to the other), 0 when neither
 * names it; an extended resource ("domain/name", scale 1) must be a whole
 * number (poolapi_quantity_whole). -1 with a reason (naming `where`) when resources/requests/
 * limits are mistyped or the quantity does not parse. */
int poolapi_container_request(const json_t *container, const char *where, const char *resource,
                              uint64_t scale, uint64_t *out, char *err, size_t errlen) GP_MUST_USE;

/* Called for each container of a pod spec: where names it
 * ("spec.initContainers[1]"), init says which list, sidecar whether it is
 * an init container with restartPolicy Always. Non-zero stops the walk. */
typedef int (*poolapi_container_fn)(void *ctx, const json_t *container, const char *where,
                                    bool init, bool sidecar, char *err, size_t errlen);

/* Walks spec.containers, then spec.initContainers in spec order (the order
 * poolapi_demand_add_init needs). -1 with a reason when a list is not an
 * array, or when fn fails (its err). */
int poolapi_pod_containers(const json_t *spec, poolapi_container_fn fn, void *ctx, char *err,
                           size_t errlen) GP_MUST_USE;

/* The demand of `resource` of a pod spec (containers and initContainers,
 * no overhead). -1 with a reason on a mistyped spec or a bad quantity. */
int poolapi_pod_demand(const json_t *spec, const char *resource, uint64_t scale, uint64_t *out,
                       char *err, size_t errlen) GP_MUST_USE;

#endif

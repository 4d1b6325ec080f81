/* pool_dra.h -- DRA devices and claims in the pool inspect shows.
 *
 * Beside the device plugin's resources, a node may have GPUs handed out by
 * a DRA driver (docs/dra.md): ResourceSlices (resource.k8s.io/v1) list its
 * devices, ResourceClaims' status.allocation.devices.results say which
 * claim holds which device and, with consumable capacity, how much of its
 * memory (consumedCapacity.memory; a result without it holds all of it).
 * Read in that order: the slices before the nodes (a node with slices is a
 * pool node even without any extended resource: pool_model.c asks
 * pool->dra_nodes, which pool_dra_index() fills), the claims after.
 * Every driver's devices are shown, not only gpupool's.
 *
 * The records live in struct pool (pool_model.h) and its arena; pool_free
 * releases them. */
#ifndef GP_CLI_POOL_DRA_H
#define GP_CLI_POOL_DRA_H

#include "pool_model.h"

#include <jansson.h>
#include <stdbool.h>

#include "compiler.h"

/* Adds every device of one ResourceSlice with spec.nodeName (others, and
 * other nodes' with inspect NODE, are skipped). -1 only when out of memory. */
GP_MUST_USE int pool_add_resourceslice(struct pool *pool, const json_t *slice);
/* Call once after the last slice, before the nodes and the claims. -1
 * when out of memory. */
GP_MUST_USE int pool_dra_index(struct pool *pool);
/* Charges one ResourceClaim's allocation results to the devices they name
 * (after pool_dra_index). -1 only when out of memory. */
GP_MUST_USE int pool_add_resourceclaim(struct pool *pool, const json_t *claim);
/* Hangs each device on its node and sorts: call after pool_finish(). */
void pool_dra_finish(struct pool *pool);

#endif

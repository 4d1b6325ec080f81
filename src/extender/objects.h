/* objects.h -- the extender's side of the pool contract.
 *
 * What a Pod or Node means (struct pod_facts, struct node_facts, their
 * readers, the names) is the contract of src/poolapi (poolapi_facts.h),
 * shared with the device plugin and the CLI; this header re-exports it for
 * the extender and adds the one extender-only step: a pod's facts as the
 * placement engine's request. Pure: no I/O, no locks, no logging. */
#ifndef GP_EXTENDER_OBJECTS_H
#define GP_EXTENDER_OBJECTS_H

#include <assert.h>
#include <stddef.h>

#include "compiler.h"
#include "placement.h"
#include "poolapi_facts.h"
#include "poolapi_index.h"
#include "poolapi_names.h"

static_assert(POOL_MAX_GPUS == PLACEMENT_MAX_GPUS, "the contract's GPU limit is placement's");
static_assert(POOL_MODEL_LEN == PLACEMENT_MODEL_LEN, "the contract's model length is placement's");

/* A GPU-memory request as the placement engine sees it: gpu_count GPUs with
 * gpu_memory / gpu_count and gpu_cores on each. -1 with a reason when the
 * memory does not divide evenly, the count is 0 or over PLACEMENT_MAX_GPUS,
 * or the cores are not valid (poolapi_gpu_cores_check). */
int objects_pod_request(const struct pod_facts *pod, struct placement_request *req, char *err,
                        size_t errlen) GP_MUST_USE;

#endif

/* preferred.h -- GetPreferredAllocation policies.
 *
 * Whole GPUs: the best-connected set that contains every must-include
 * device, judged first by NVLink count, then by pairs sharing a NUMA node,
 * then by PCIe proximity; among equals, the set that leaves the best links
 * among the remaining GPUs intact. Replicas and MIG devices: spread over
 * the least-loaded physical GPUs (distributed, default) or pack onto the
 * most-loaded (packed).
 *
 * Topology comes from the inventory, read once at start, so a GPU that has
 * since fallen off the bus cannot fail the call. Pure; thread-compatible. */
#ifndef GP_PREFERRED_H
#define GP_PREFERRED_H

#include <stddef.h>

#include "config.h"
#include "gpu.h"
#include "resource.h"
#include "compiler.h"

/* available/required hold positions in res->devices (required ⊆ available
 * is not assumed). On success writes `size` positions to out (required
 * first) and returns 0; returns -1 + err when size cannot be met. */
GP_MUST_USE int preferred_choose(const struct resource *res, const struct gpu_inventory *inv,
                                 enum shared_alloc_policy policy, const size_t *available,
                                 size_t available_count, const size_t *required,
                                 size_t required_count, size_t size, size_t *out, char *err,
                                 size_t errlen);

#endif

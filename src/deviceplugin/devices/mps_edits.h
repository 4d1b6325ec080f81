/* mps_edits.h -- what a container holding MPS replicas gets (sharing.mps).
 *
 * The client side of the control daemons that the node agent runs
 * (mps_control.h): the resource's pipe directory, mounted where NVIDIA's
 * plugin mounts it (/mps/<resource>/pipe) and named by
 * CUDA_MPS_PIPE_DIRECTORY; <mps-root>/shm as /dev/shm (MPS clients and
 * server share memory through it); the container's share of the GPU's
 * threads, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / replicas x the
 * replicas it holds (at most 100); and its share of device memory,
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = "<ordinal>=<MiB>M,..." in the
 * container's device order. No state; errors: -1 when the arena is out of
 * memory. */
#ifndef GP_MPS_EDITS_H
#define GP_MPS_EDITS_H

#include <stddef.h>

#include "config.h"
#include "container_edits.h"
#include "gpu.h"
#include "resource.h"
#include "compiler.h"

#define MPS_CONTAINER_ROOT "/mps"

/* <root>/<resource>/pipe (or log) into out; -1 when it does not fit. */
GP_MUST_USE int mps_resource_dir(const char *root, const char *resource, const char *leaf,
                                 char *out, size_t outlen);

/* Adds the edits of one container holding positions[0..count) of res. Does
 * nothing for a resource without replicas. */
GP_MUST_USE int mps_add_edits(const struct gp_config *cfg, const struct gpu_inventory *inv,
                              const struct resource *res, const size_t *positions, size_t count,
                              struct container_edits *edits);

#endif

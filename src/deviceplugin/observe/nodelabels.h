/* nodelabels.h -- GPU Feature Discovery compatible node labels (--node-labels).
 *
 * nodelabels_build() computes, from the inventory and the configuration,
 * the labels NVIDIA's gpu-feature-discovery puts on a node, with its names
 * and value formats, so that nodeSelectors written for GFD keep working:
 *   nvidia.com/gpu.product   model, spaces -> '-'; "-SHARED" appended when
 *                            the resource is time-sliced and not renamed;
 *                            "<model>-MIG-<profile>" under MIG single
 *   nvidia.com/gpu.count / .replicas / .memory (MiB) / .family /
 *                .compute.major / .compute.minor / .sharing-strategy
 *   nvidia.com/mig.capable   "true" when any GPU can do MIG
 *   nvidia.com/mig.strategy  single|mixed (absent with none)
 *   nvidia.com/mig-<profile>.{product,count,replicas,memory,slices.gi,
 *                slices.ci,sharing-strategy} under MIG mixed
 * A node with several GPU models is labelled for its most common model
 * (GFD picks one at random). Values are made label-safe: characters other
 * than [A-Za-z0-9._-] become '-', 63 characters at most.
 *
 * A node_labeler writes them with one merge PATCH of /api/v1/nodes/<node>
 * on its own thread, retrying with backoff (1 s doubling to 60 s) until the
 * API server accepts it; the kubelet-facing servers never wait for it. The
 * keys it wrote are remembered in the node annotation
 * POOL_ANN_NODE_LABELS, so that a later run removes the ones that no
 * longer apply (a MIG profile gone, sharing turned off) without touching
 * labels written by anybody else (GFD, an operator).
 * Errors: -1 + err. Owner of a labeler: the caller (nodelabels_stop). */
#ifndef GP_NODELABELS_H
#define GP_NODELABELS_H

#include <jansson.h>
#include <stddef.h>

#include "config.h"
#include "gpu.h"
#include "poolapi_names.h"
#include "compiler.h"


/* *out: a new JSON object, label key -> string value. */
GP_MUST_USE int nodelabels_build(const struct gp_config *cfg, const struct gpu_inventory *inv,
                                 json_t **out, char *err, size_t errlen);

/* The merge patch that sets `labels` on a node whose current object is
 * `node` (may be NULL): our labels, null for keys we wrote before that
 * are gone, and the ownership annotation. New reference; NULL when out of
 * memory. */
json_t *nodelabels_patch(const json_t *labels, const json_t *node);

struct node_labeler;

/* Builds the labels and the API client (cfg->kubeconfig, else in-cluster)
 * and starts the writer thread. cfg->node_name must be set. */
GP_MUST_USE int nodelabels_start(const struct gp_config *cfg, const struct gpu_inventory *inv,
                                 struct node_labeler **out, char *err, size_t errlen);
/* Cancels a write in progress or its backoff, joins, frees. NULL ok. */
void nodelabels_stop(struct node_labeler *l);

#endif

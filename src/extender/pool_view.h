/* pool_view.h -- the whole pool at a glance: what /ui/pool.json and /metrics show.
 *
 * Both views walk the cache once under state_lock (like /inspect): every
 * GPU-sharing node, its GPUs (capacity, charge, health) and the pods charged
 * on each GPU. Figures are in the unit of the nodes' aliyun.com/gpu-mem
 * (GiB with gpushare's default device plugin); callers scale to bytes.
 *
 * Fragmentation (docs/extender.md, "Fragmentation"): the share of the free
 * memory of healthy GPUs that lies on GPUs whose free memory is smaller than
 * the median per-GPU share of the GPU pods charged now, i.e. free memory the
 * typical pod of this cluster cannot use. With no GPU pod charged there is no
 * typical request: the threshold is 0 and the fragmentation 0.
 *
 * Errors: -1 only when out of memory (with a message). */
#ifndef GP_EXTENDER_POOL_H
#define GP_EXTENDER_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "compiler.h"

struct pool_totals {
    uint64_t nodes; /* GPU-sharing nodes present */
    uint64_t gpus, unhealthy_gpus, gpus_in_use, gpus_full;
    uint64_t memory_total, memory_used;
    uint64_t memory_free;             /* on healthy GPUs */
    uint64_t memory_free_fragmented;  /* of that, on GPUs with less free than `threshold` */
    uint64_t threshold;               /* median per-GPU share of the charged GPU pods */
    uint64_t gpu_pods;                /* pods charged on some GPU */
    uint64_t cores_total, cores_used; /* gpupool.io/gpu-cores over all GPUs (100 per GPU) */
    double fragmentation;             /* memory_free_fragmented / memory_free, 0..1 */
};

/* One GPU as the walk reports it. */
struct pool_gpu {
    const char *node;    /* valid during the callback */
    const char *address; /* the node's (node_facts.address), NULL when none; as `node` */
    uint32_t index;
    uint64_t total, used;
    uint32_t cores_total, cores_used; /* gpupool.io/gpu-cores */
    bool healthy;
};

/* Calls gpu_fn for every GPU of every GPU-sharing node (node order is the
 * table's, GPUs ascending) and fills *totals. gpu_fn may be NULL. */
typedef void (*pool_gpu_fn)(void *ctx, const struct pool_gpu *gpu);
int pool_walk(struct cache *cache, pool_gpu_fn gpu_fn, void *ctx, struct pool_totals *totals,
              char *err, size_t errlen) GP_MUST_USE;

/* The text of /ui/pool.json (malloc'ed, NUL-terminated, *len without the
 * NUL; NULL when out of memory). Nodes sorted by name; each GPU is a compact
 * array [total, used, healthy, [[namespace, name, amount, cores], ...],
 * cores_total, cores_used] because at 5,000 nodes x 8 GPUs named keys would
 * triple the size (cores come last so that readers of the first four
 * positions are unaffected):
 *   {"unit":"GiB","policy":"gpupool",
 *    "nodes":[{"name":"n1","model":"Tesla-V100-SXM2-16GB",
 *              "gpus":[[16,10,true,[["default","old",10,30]],100,30],[16,0,true,[],100,0]]}],
 *    "totals":{"nodes":1,"gpus":2,"unhealthy_gpus":0,"gpus_in_use":1,"gpus_full":0,
 *              "memory_total":32,"memory_used":10,"memory_free":22,
 *              "memory_free_fragmented":6,"gpu_pods":1,"fragmentation_threshold":10,
 *              "fragmentation_percent":27.2727,"cores_total":200,"cores_used":30}}
 * Written as text under state_lock (no JSON values built): about 1 MB and a
 * few ms at 5,000 nodes. */
GP_MUST_USE char *pool_json(struct cache *cache, const char *unit, size_t *len);

#endif

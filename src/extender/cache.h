/* cache.h -- the extender's view of the cluster: nodes, pods, GPU usage.
 *
 * Filled by the reflectors (nodes, pods, kube-system ConfigMaps) and by
 * binds; read by filter, prioritize, bind and inspect. Only what placement
 * needs is kept per node (struct placement_node, ~350 bytes) and per pod
 * (a charge and a demand, ~120 bytes); no JSON is retained.
 *
 * Usage is rebuilt from the API after a restart: a pod with spec.nodeName,
 * not Succeeded/Failed (a pod being deleted still holds its memory until it
 * is gone) is charged its CPU and memory requests, and, when gpushare's
 * annotations name GPUs (ALIYUN_COM_GPU_MEM_IDX) and memory
 * (ALIYUN_COM_GPU_MEM_POD), POD / #GPUs on each of those GPUs.
 * A bind charges its pod at once (cache_assume) so the next filter sees it;
 * the API's view replaces the charge once the pod shows up bound, and a
 * refused bind gives it back (cache_rollback). A bind whose outcome is
 * unknown keeps it (cache_unknown) until the API shows the pod bound or
 * deleted, or a read-back after the hold shows it unbound
 * (cache_unknown_release).
 *
 * Locks (docs/extender.md, "Locks"), always taken in this order:
 *   state_lock (mutex)   every change: pod records, node presence, the tables
 *   nodes_lock (rwlock)  the node table; readers: filter, prioritize, inspect
 *   node->lock (mutex)   one node's placement_node
 *   model_lock (mutex)   the placement ctx (GPU model names, pod-mix model)
 * Filter and prioritize take nodes_lock for reading and each node's lock for
 * a few hundred nanoseconds; they never wait for I/O since nobody holds a
 * cache lock across a network call.
 *
 * Errors: fallible calls return -1 (or a negative enum) with a message. */
#ifndef GP_EXTENDER_CACHE_H
#define GP_EXTENDER_CACHE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objects.h"
#include "placement.h"
#include "compiler.h"

#define CACHE_REASON_LEN 256

struct cache;
struct cache_pod; /* a bind's handle on its pod record */

struct cache *cache_new(enum placement_policy policy) GP_MUST_USE;
void cache_free(struct cache *cache);
enum placement_policy cache_policy(const struct cache *cache);

/* ---- feeding (reflector callbacks; json borrowed) ----------------------- */

/* A (re-)list brackets its items: objects not seen between begin and end
 * are gone. Upserts return -1 with err for an object that cannot be read;
 * the cache is then unchanged for it. */
void cache_nodes_list_begin(struct cache *cache);
void cache_nodes_list_end(struct cache *cache);
int cache_node_upsert(struct cache *cache, const json_t *node, char *err,
                      size_t errlen) GP_MUST_USE;
void cache_node_delete(struct cache *cache, const json_t *node);

void cache_pods_list_begin(struct cache *cache);
void cache_pods_list_end(struct cache *cache);
int cache_pod_upsert(struct cache *cache, const json_t *pod, char *err, size_t errlen) GP_MUST_USE;
void cache_pod_delete(struct cache *cache, const json_t *pod);

/* ConfigMaps of kube-system; only gpushare's unhealthy-gpu-<node> are used
 * (data.gpus: "0,2"). */
#define CACHE_UNHEALTHY_CM_PREFIX POOL_CM_UNHEALTHY_PREFIX
void cache_configmaps_list_begin(struct cache *cache);
void cache_configmaps_list_end(struct cache *cache);
int cache_configmap_upsert(struct cache *cache, const json_t *cm, char *err,
                           size_t errlen) GP_MUST_USE;
void cache_configmap_delete(struct cache *cache, const json_t *cm);

/* ---- filter and prioritize ---------------------------------------------- */

/* A pod ready to be evaluated against nodes. */
struct cache_query {
    struct placement_request req;
    bool gpu;                          /* asks for aliyun.com/gpu-mem */
    char pod_reason[CACHE_REASON_LEN]; /* non-empty: fails on every node with this reason */
    struct placement_ctx *ctx;         /* scoring snapshot (prioritize only), owned */
};

/* Builds a query from a pod: its request, its GPU model constraint turned
 * into model ids. With `observe`, the pod joins the online pod-mix model
 * (once per UID). With `snapshot`, query->ctx receives a copy of the model
 * for scoring. -1 only when out of memory; a pod that can never fit (bad
 * gpu-count, unknown model) gets a pod_reason instead. */
int cache_query_init(struct cache *cache, const struct pod_facts *pod, bool observe, bool snapshot,
                     struct cache_query *query, char *err, size_t errlen) GP_MUST_USE;
void cache_query_free(struct cache_query *query);

/* Evaluates names[0..n-1] under one read lock: verdict(ctx, i, fits,
 * reason) is called once per node, in order (reason NULL when it fits,
 * else a sentence for FailedNodes). With scores != NULL, scores[i]
 * receives placement_score() (PLACEMENT_NO_FIT when it does not fit). */
typedef void (*cache_verdict_fn)(void *ctx, size_t i, bool fits, const char *reason);
void cache_evaluate(struct cache *cache, const struct cache_query *query, const char *const *names,
                    size_t n, cache_verdict_fn verdict, void *ctx, double *scores);

/* ---- bind ------------------------------------------------------------------ */

enum cache_assume_result {
    CACHE_ASSUMED = 0,
    CACHE_NEED_POD = -1,        /* the pod is not in the cache: pass its facts */
    CACHE_REFUSED = -2,         /* err says why: bound already, bind in progress, no fit, ... */
    CACHE_UNKNOWN_EXPIRED = -3, /* an earlier Binding's outcome is unknown and its hold is
                                   over: read the pod back, then cache_unknown_release() */
};

/* What a bind charged, for the annotations. */
struct cache_assumption {
    uint32_t gpu_mask;      /* GPUs chosen (0 for a pod without GPU memory) */
    uint64_t gpu_units;     /* memory on each chosen GPU */
    uint64_t pod_memory;    /* the pod's total aliyun.com/gpu-mem */
    uint64_t device_memory; /* memory of the first chosen GPU (ALIYUN_COM_GPU_MEM_DEV) */
    /* A retry to the node of an earlier Binding whose outcome is unknown:
     * that Binding's charge is re-used as it is (a pod binds once, so of
     * the two writes at most one lands, with this same charge); a refusal
     * must put it back with cache_unknown(handle, held_until_ns). */
    bool held;
    int64_t held_until_ns;
};

/* Chooses GPUs for pod uid on node_name under the node's lock, re-checking
 * the fit against everything charged so far, and charges the node at once.
 * ns/name (both NULL: not checked) are the pod the request names: a UID
 * that belongs to another pod (its record, or `pod`) is refused.
 * `pod` (may be NULL) supplies the pod when the cache does not know it; it
 * must then be the API's current object. On CACHE_ASSUMED *handle is the
 * pod's record, pinned until cache_confirm(), cache_unknown() or
 * cache_rollback(). */
enum cache_assume_result cache_assume(struct cache *cache, const char *uid, const char *ns,
                                      const char *name, const char *node_name,
                                      const struct pod_facts *pod, struct cache_pod **handle,
                                      struct cache_assumption *out, char *err,
                                      size_t errlen) GP_MUST_USE;
/* The Binding was created: the charge stays until the API shows the pod. */
void cache_confirm(struct cache *cache, struct cache_pod *handle);
/* The Binding's outcome is unknown (no answer, or a 5xx): the charge stays
 * until the API shows the pod bound (its view replaces the charge) or
 * deleted. Until hold_until_ns (clock_now_ns() terms) a bind of the pod to
 * the same node re-uses the charge (cache_assumption.held) and a bind to
 * another node is refused; after it, cache_assume() answers
 * CACHE_UNKNOWN_EXPIRED. */
void cache_unknown(struct cache *cache, struct cache_pod *handle, int64_t hold_until_ns);
/* A read-back after the hold found pod uid unbound (or gone): gives the
 * held charge back. True when it did (the record was POD_UNKNOWN, past its
 * hold, and not shown bound meanwhile). */
bool cache_unknown_release(struct cache *cache, const char *uid);
/* The Binding was refused: the charge is given back (unless the API already
 * shows the pod bound, in which case the API's view stands). */
void cache_rollback(struct cache *cache, struct cache_pod *handle);

/* ---- introspection --------------------------------------------------------- */

struct cache_stats {
    size_t nodes, gpu_nodes, pods, assumed;
};
void cache_stats(struct cache *cache, struct cache_stats *out);

/* gpushare's /inspect JSON for one node (name) or all (NULL): a new
 * object {"nodes":[...]} (with "error" when the node is unknown), NULL when
 * out of memory. */
GP_MUST_USE json_t *cache_inspect(struct cache *cache, const char *name);

#endif

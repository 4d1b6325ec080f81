/* bind.h -- the bind verb: re-validate, then one write that binds and annotates.
 *
 *   1. the request's PodUID must be the pod it names (PodNamespace/PodName):
 *      the cache's record of that UID, or the pod read from the API, must
 *      carry that name; otherwise it is refused before anything is written;
 *   2. cache_assume(): under the node's lock, choose GPUs against everything
 *      charged so far (filter reserved nothing, and kube-scheduler binds
 *      asynchronously, so two pods may have passed filter for the same slot)
 *      and charge them at once;
 *   3. POST the v1 Binding, with gpushare's annotations in its
 *      metadata.annotations and the UID in metadata.uid: kube-apiserver
 *      (BindingREST) sets spec.nodeName and merges the annotations into the
 *      pod in one write, or writes nothing. The annotations:
 *      ALIYUN_COM_GPU_MEM_IDX ("1"; multi-GPU "0,1"), _POD (total),
 *      _DEV (memory of the first chosen GPU), _ASSIGNED "false",
 *      _ASSUME_TIME (nanoseconds since the epoch);
 *   4. the charge then: created -> kept until the pod watch shows the pod
 *      (cache_confirm); refused with a 4xx Status, or never sent -> given
 *      back (cache_rollback); no answer or a 5xx (the write may have
 *      happened) -> kept (cache_unknown) until the watch shows the pod bound
 *      or deleted, or, after the hold, a GET shows it unbound; meanwhile a
 *      retry to the same node re-uses that charge (cache_assumption.held).
 *      Nothing is ever undone: a refused Binding wrote nothing.
 * The API calls go through struct bind_api so tests can script failures. */
#ifndef GP_EXTENDER_BIND_H
#define GP_EXTENDER_BIND_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "kube.h"
#include "protocol.h"
#include "compiler.h"

/* How long a charge whose Binding's outcome is unknown is held by default
 * (--bind-unknown-hold): past kube-apiserver's own --request-timeout (60 s),
 * after which a request it accepted can no longer be applied. */
#define BIND_UNKNOWN_HOLD_MS 60000

struct bind_api {
    void *ctx;
    /* GET the pod; *out is the caller's. 0 or -1 with err. No attempt
     * outlives deadline_ns (clock_now_ns() terms). */
    int (*get_pod)(void *ctx, const char *ns, const char *name, int64_t deadline_ns, json_t **out,
                   struct kube_error *err);
    /* POST pods/<name>/binding with metadata.uid (may be NULL) and
     * metadata.annotations (may be NULL), not outliving deadline_ns. Errors
     * as kube_bind_pod(). */
    int (*create_binding)(void *ctx, const char *ns, const char *name, const char *uid,
                          const char *node, const json_t *annotations, int64_t deadline_ns,
                          struct kube_error *err);
    /* How long an unknown outcome holds its charge (ns; 0: BIND_UNKNOWN_HOLD_MS). */
    int64_t unknown_hold_ns;
};

/* What became of a bind (the metrics count binds by it). */
enum bind_result {
    BIND_OK = 0,
    BIND_POD_UNAVAILABLE, /* the pod could not be read, is gone, or was re-created */
    BIND_REFUSED,         /* UID of another pod, no fit, bound already, bind in progress,
                             an earlier outcome not known yet */
    BIND_BINDING_REFUSED, /* the API refused the Binding (4xx): nothing written, charge back */
    BIND_BINDING_UNKNOWN, /* no answer or a 5xx: the Binding may exist; charge held */
    BIND_RESULTS
};
/* The label value of a result ("bound", "refused", ...). */
const char *bind_result_name(enum bind_result r);

/* Binds args' pod to args->node; the API calls end by deadline_ns
 * (clock_now_ns() terms: the caller's fencing limit, or now + the API
 * timeout). BIND_OK, or another result with a message for
 * ExtenderBindingResult.Error. Thread-safe: binds of different pods run
 * concurrently, the cache serializes them per node. */
enum bind_result bind_pod_result(struct cache *cache, const struct bind_api *api,
                                 const struct binding_args *args, int64_t deadline_ns, char *err,
                                 size_t errlen) GP_MUST_USE;

/* The five annotations for an assumption, {"ALIYUN_COM_GPU_MEM_IDX": ...}
 * (new reference; NULL when out of memory). assume_time_ns is
 * ALIYUN_COM_GPU_MEM_ASSUME_TIME. */
GP_MUST_USE json_t *bind_annotations(const struct cache_assumption *as, long long assume_time_ns);

#endif

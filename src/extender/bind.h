/* bind.h -- the bind verb: re-validate, annotate, bind, or roll back.
 *
 *   1. cache_assume(): under the node's lock, choose GPUs against everything
 *      charged so far (filter reserved nothing, and kube-scheduler binds
 *      asynchronously, so two pods may have passed filter for the same slot)
 *      and charge them at once;
 *   2. PATCH gpushare's annotations onto the pod (strategic merge):
 *      ALIYUN_COM_GPU_MEM_IDX ("1"; multi-GPU "0,1"), _POD (total),
 *      _DEV (memory of the first chosen GPU), _ASSIGNED "false",
 *      _ASSUME_TIME (nanoseconds since the epoch);
 *   3. POST the v1 Binding;
 *   4. on a failure in 2 or 3 give the charge back; after a refused Binding
 *      also remove the annotations (best effort), so the device plugin never
 *      matches a pod that is not coming.
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

struct bind_api {
    void *ctx;
    /* GET the pod; *out is the caller's. 0 or -1 with err. */
    int (*get_pod)(void *ctx, const char *ns, const char *name, json_t **out,
                   struct kube_error *err);
    /* Strategic-merge PATCH of the pod. */
    int (*patch_pod)(void *ctx, const char *ns, const char *name, const json_t *patch,
                     struct kube_error *err);
    /* POST pods/<name>/binding. */
    int (*create_binding)(void *ctx, const char *ns, const char *name, const char *uid,
                          const char *node, struct kube_error *err);
};

/* Binds args' pod to args->node. 0, or -1 with a message for
 * ExtenderBindingResult.Error (the cache is then as it was). */
int bind_pod(struct cache *cache, const struct bind_api *api, const struct binding_args *args,
             char *err, size_t errlen) GP_MUST_USE;

/* bind_pod() saying which step failed (the metrics count binds by it). */
enum bind_result {
    BIND_OK = 0,
    BIND_POD_UNAVAILABLE, /* the pod could not be read, is gone, or was re-created */
    BIND_REFUSED,         /* no fit any more, bound already, bind in progress */
    BIND_ANNOTATE_FAILED, /* the annotation PATCH failed */
    BIND_BINDING_FAILED,  /* the Binding POST failed */
    BIND_RESULTS
};
/* The label value of a result ("bound", "refused", ...). */
const char *bind_result_name(enum bind_result r);
/* deadline_ns: the clock_now_ns() instant no API call of this bind may
 * outlive (the leader's fence, or now + --api-timeout). */
enum bind_result bind_pod_result(struct cache *cache, const struct bind_api *api,
                                 const struct binding_args *args, int64_t deadline_ns, char *err,
                                 size_t errlen) GP_MUST_USE;

/* The annotation patch for an assumption (new reference; NULL when out of
 * memory). assume_time_ns is ALIYUN_COM_GPU_MEM_ASSUME_TIME. */
GP_MUST_USE json_t *bind_annotations(const struct cache_assumption *as, long long assume_time_ns);

#endif

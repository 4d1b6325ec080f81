/* bind.c -- the bind verb (see bind.h). */
#include "bind.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"

json_t *bind_annotations(const struct cache_assumption *as, long long assume_time_ns)
{
    char idx[64], pod[32], dev[32], when[32];
    poolapi_index_format(as->gpu_mask, idx, sizeof(idx));
    snprintf(pod, sizeof(pod), "%llu", (unsigned long long)as->pod_memory);
    snprintf(dev, sizeof(dev), "%llu", (unsigned long long)as->device_memory);
    snprintf(when, sizeof(when), "%lld", assume_time_ns);
    return json_pack("{s:{s:{s:s, s:s, s:s, s:s, s:s}}}", "metadata", "annotations",
                     POOL_ANN_GPU_MEM_IDX, idx, POOL_ANN_GPU_MEM_POD, pod, POOL_ANN_GPU_MEM_DEV,
                     dev, POOL_ANN_GPU_MEM_ASSIGNED, "false", POOL_ANN_GPU_MEM_ASSUME_TIME, when);
}

/* Removing the annotations again: null deletes a key in a merge patch. */
static json_t *annotations_removal(void)
{
    return json_pack("{s:{s:{s:n, s:n, s:n, s:n, s:n}}}", "metadata", "annotations",
                     POOL_ANN_GPU_MEM_IDX, POOL_ANN_GPU_MEM_POD, POOL_ANN_GPU_MEM_DEV,
                     POOL_ANN_GPU_MEM_ASSIGNED, POOL_ANN_GPU_MEM_ASSUME_TIME);
}

/* GETs the pod the cache does not know; *pod_json is the caller's. */
static int fetch_pod(const struct bind_api *api, const struct binding_args *args, json_t **pod_json,
                     struct pod_facts *facts, char *err, size_t errlen)
{
    struct kube_error kerr = {0};
    if (api->get_pod(api->ctx, args->pod_namespace, args->pod_name, pod_json, &kerr) < 0) {
        if (kerr.http_status == 404)
            snprintf(err, errlen, "pod %s/%s not found (deleted?)", args->pod_namespace,
                     args->pod_name);
        else
            snprintf(err, errlen, "cannot read pod %s/%s: %s", args->pod_namespace, args->pod_name,
                     kerr.message);
        return -1;
    }
    char why[256];
    if (poolapi_pod_facts(*pod_json, facts, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "pod %s/%s: %s", args->pod_namespace, args->pod_name, why);
        return -1;
    }
    if (args->pod_uid[0] && strcmp(args->pod_uid, facts->uid) != 0) {
        snprintf(err, errlen, "pod %s/%s has UID %s, not %s: it was deleted and re-created",
                 args->pod_namespace, args->pod_name, facts->uid, args->pod_uid);
        return -1;
    }
    return 0;
}

/* Steps 2-4 once the charge is in place. */
static enum bind_result annotate_and_bind(struct cache *cache, const struct bind_api *api,
                                          const struct binding_args *args, const char *uid,
                                          struct cache_pod *handle,
                                          const struct cache_assumption *as, char *err,
                                          size_t errlen)
{
    struct kube_error kerr = {0};
    if (as->gpu_mask) {
        json_t *patch = bind_annotations(as, clock_wall_ns());
        int rc = patch ? api->patch_pod(api->ctx, args->pod_namespace, args->pod_name, patch, &kerr)
                       : -1;
        json_decref(patch);
        if (rc < 0) {
            cache_rollback(cache, handle);
            snprintf(err, errlen, "annotating pod %s/%s failed: %s", args->pod_namespace,
                     args->pod_name, patch ? kerr.message : "out of memory");
            return BIND_ANNOTATE_FAILED;
        }
    }
    if (api->create_binding(api->ctx, args->pod_namespace, args->pod_name, uid, args->node, &kerr) <
        0) {
        cache_rollback(cache, handle);
        /* A refusal (a Status from the server) is final: take the
         * annotations back. After a lost connection the Binding may exist
         * after all; the annotations then stay true, and the pod watch
         * re-charges the pod if it shows up bound. */
        if (as->gpu_mask && kerr.http_status > 0) {
            struct kube_error ignored = {0};
            json_t *undo = annotations_removal();
            if (!undo ||
                api->patch_pod(api->ctx, args->pod_namespace, args->pod_name, undo, &ignored) < 0)
                log_warn("pod %s/%s: could not remove the GPU annotations after a failed bind: %s",
                         args->pod_namespace, args->pod_name,
                         undo ? ignored.message : "out of memory");
            json_decref(undo);
        }
        snprintf(err, errlen, "binding pod %s/%s to %s failed: %s", args->pod_namespace,
                 args->pod_name, args->node, kerr.message);
        return BIND_BINDING_FAILED;
    }
    cache_confirm(cache, handle);
    return BIND_OK;
}

const char *bind_result_name(enum bind_result r)
{
    static const char *const names[BIND_RESULTS] = {"bound", "pod_unavailable", "refused",
                                                    "annotate_failed", "binding_failed"};
    return (unsigned)r < BIND_RESULTS ? names[r] : "unknown";
}

enum bind_result bind_pod_result(struct cache *cache, const struct bind_api *api,
                                 const struct binding_args *args, int64_t deadline_ns, char *err,
                                 size_t errlen)
{
    (void)deadline_ns; /* honoured by the bind rewrite (issue 16, item 1) */
    json_t *pod_json = NULL;
    struct pod_facts facts, *known = NULL;
    const char *uid = args->pod_uid;
    enum bind_result result = BIND_POD_UNAVAILABLE;
    if (!uid[0]) {
        /* No UID in the request: the API's pod names it. */
        if (fetch_pod(api, args, &pod_json, &facts, err, errlen) < 0)
            goto out;
        known = &facts;
        uid = facts.uid;
    }
    struct cache_pod *handle;
    struct cache_assumption as;
    enum cache_assume_result r =
        cache_assume(cache, uid, args->node, known, &handle, &as, err, errlen);
    if (r == CACHE_NEED_POD) {
        if (fetch_pod(api, args, &pod_json, &facts, err, errlen) < 0)
            goto out;
        r = cache_assume(cache, uid, args->node, &facts, &handle, &as, err, errlen);
    }
    if (r != CACHE_ASSUMED) {
        if (r == CACHE_NEED_POD)
            snprintf(err, errlen, "pod %s/%s: not in the cache", args->pod_namespace,
                     args->pod_name);
        else
            result = BIND_REFUSED;
        goto out;
    }
    result = annotate_and_bind(cache, api, args, uid, handle, &as, err, errlen);
    if (result == BIND_OK) {
        char idx[64];
        log_v(2, "bound pod %s/%s to %s (GPUs %s, %llu each)", args->pod_namespace, args->pod_name,
              args->node,
              as.gpu_mask ? poolapi_index_format(as.gpu_mask, idx, sizeof(idx)) : "none",
              (unsigned long long)as.gpu_units);
    }
out:
    json_decref(pod_json);
    return result;
}

int bind_pod(struct cache *cache, const struct bind_api *api, const struct binding_args *args,
             char *err, size_t errlen)
{
    return bind_pod_result(cache, api, args, INT64_MAX, err, errlen) == BIND_OK ? 0 : -1;
}

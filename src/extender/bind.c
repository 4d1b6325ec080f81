/* bind.c -- the bind verb (see bind.h). */
#include "bind.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "log.h"

json_t *bind_annotations(const struct cache_assumption *as, long long assume_time_ns)
{
    char idx[64], pod[32], dev[32], when[32];
    poolapi_index_format(as->gpu_mask, idx, sizeof(idx));
    snprintf(pod, sizeof(pod), "%llu", (unsigned long long)as->pod_memory);
    snprintf(dev, sizeof(dev), "%llu", (unsigned long long)as->device_memory);
    snprintf(when, sizeof(when), "%lld", assume_time_ns);
    return json_pack("{s:s, s:s, s:s, s:s, s:s}", POOL_ANN_GPU_MEM_IDX, idx, POOL_ANN_GPU_MEM_POD,
                     pod, POOL_ANN_GPU_MEM_DEV, dev, POOL_ANN_GPU_MEM_ASSIGNED, "false",
                     POOL_ANN_GPU_MEM_ASSUME_TIME, when);
}

/* GETs the pod the request names and checks it is the request's UID (when
 * one was given); *pod_json is the caller's. -1 with err (and *gone set
 * when the API says the pod is not there, or is another one). */
static int fetch_pod(const struct bind_api *api, const struct binding_args *args,
                     int64_t deadline_ns, json_t **pod_json, struct pod_facts *facts, bool *gone,
                     char *err, size_t errlen)
{
    struct kube_error kerr = {0};
    *gone = false;
    if (api->get_pod(api->ctx, args->pod_namespace, args->pod_name, deadline_ns, pod_json, &kerr) <
        0) {
        *gone = kerr.http_status == 404;
        if (*gone)
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
        *gone = true;
        snprintf(err, errlen,
                 "pod %s/%s has UID %s, not the request's %s (another pod's UID, or the pod was "
                 "re-created)",
                 args->pod_namespace, args->pod_name, facts->uid, args->pod_uid);
        return -1;
    }
    return 0;
}

/* Did the API certainly not apply the Binding? A 4xx Status is a refusal
 * (nothing written); "DeadlineExceeded"/"ConnectError" never reached it.
 * Anything else (no answer, a timeout, a 5xx) may have been applied. */
static bool binding_not_applied(const struct kube_error *kerr)
{
    if (kerr->http_status >= 400 && kerr->http_status < 500)
        return true;
    return kerr->http_status == 0 && (strcmp(kerr->reason, "DeadlineExceeded") == 0 ||
                                      strcmp(kerr->reason, "ConnectError") == 0);
}

/* Step 3-4 once the charge is in place: the one write, then the charge's fate. */
static enum bind_result write_binding(struct cache *cache, const struct bind_api *api,
                                      const struct binding_args *args, const char *uid,
                                      int64_t deadline_ns, struct cache_pod *handle,
                                      const struct cache_assumption *as, char *err, size_t errlen)
{
    struct kube_error kerr = {0};
    json_t *ann = NULL;
    if (as->gpu_mask && !(ann = bind_annotations(as, clock_wall_ns()))) {
        cache_rollback(cache, handle);
        snprintf(err, errlen, "binding pod %s/%s: out of memory", args->pod_namespace,
                 args->pod_name);
        return BIND_BINDING_REFUSED;
    }
    int rc = api->create_binding(api->ctx, args->pod_namespace, args->pod_name, uid, args->node,
                                 ann, deadline_ns, &kerr);
    json_decref(ann);
    if (rc == 0) {
        cache_confirm(cache, handle);
        return BIND_OK;
    }
    if (binding_not_applied(&kerr) && as->held) {
        /* This write did not land, the earlier one still may: its hold stands. */
        cache_unknown(cache, handle, as->held_until_ns);
        snprintf(err, errlen,
                 "binding pod %s/%s to %s failed: %s (an earlier Binding's charge stays held)",
                 args->pod_namespace, args->pod_name, args->node, kerr.message);
        return BIND_BINDING_REFUSED;
    }
    if (binding_not_applied(&kerr)) {
        cache_rollback(cache, handle);
        snprintf(err, errlen, "binding pod %s/%s to %s failed: %s", args->pod_namespace,
                 args->pod_name, args->node, kerr.message);
        return BIND_BINDING_REFUSED;
    }
    /* The write may land yet (kube-apiserver finishes a request whose
     * client gave up): giving the charge back now would let the next pod
     * have the same memory (D1). */
    int64_t hold =
        api->unknown_hold_ns > 0 ? api->unknown_hold_ns : (int64_t)BIND_UNKNOWN_HOLD_MS * 1000000;
    int64_t now = clock_now_ns(), until = (deadline_ns > now ? deadline_ns : now) + hold;
    cache_unknown(cache, handle, as->held && as->held_until_ns > until ? as->held_until_ns : until);
    log_warn("pod %s/%s: the Binding to %s may or may not exist (%s); its GPU charge is held "
             "until the API shows the pod, or %.0f s have passed",
             args->pod_namespace, args->pod_name, args->node, kerr.message, (double)hold / 1e9);
    snprintf(err, errlen, "binding pod %s/%s to %s: outcome not known: %s", args->pod_namespace,
             args->pod_name, args->node, kerr.message);
    return BIND_BINDING_UNKNOWN;
}

const char *bind_result_name(enum bind_result r)
{
    static const char *const names[BIND_RESULTS] = {"bound", "pod_unavailable", "refused",
                                                    "binding_refused", "binding_unknown"};
    return (unsigned)r < BIND_RESULTS ? names[r] : "unknown";
}

/* The pod's earlier Binding had an unknown outcome and its hold is over:
 * the API's pod decides. Unbound (or gone): the charge goes back and the
 * caller may assume again with *facts. Bound: refused, the watch brings
 * the API's charge. 0 to go on, -1 with err. */
static int resolve_unknown(struct cache *cache, const struct bind_api *api,
                           const struct binding_args *args, const char *uid, int64_t deadline_ns,
                           json_t **pod_json, struct pod_facts *facts, enum bind_result *result,
                           char *err, size_t errlen)
{
    bool gone;
    json_decref(*pod_json);
    *pod_json = NULL;
    if (fetch_pod(api, args, deadline_ns, pod_json, facts, &gone, err, errlen) < 0) {
        if (gone && cache_unknown_release(cache, uid))
            log_info("pod %s/%s: gone; the charge of its unknown Binding is released",
                     args->pod_namespace, args->pod_name);
        *result = BIND_POD_UNAVAILABLE;
        return -1;
    }
    if (facts->node_name) {
        snprintf(err, errlen, "pod %s/%s is already bound to node %s", args->pod_namespace,
                 args->pod_name, facts->node_name);
        *result = BIND_REFUSED;
        return -1;
    }
    if (cache_unknown_release(cache, uid))
        log_info("pod %s/%s: still unbound after the hold; the charge of its unknown Binding is "
                 "released",
                 args->pod_namespace, args->pod_name);
    return 0;
}

enum bind_result bind_pod_result(struct cache *cache, const struct bind_api *api,
                                 const struct binding_args *args, int64_t deadline_ns, char *err,
                                 size_t errlen)
{
    json_t *pod_json = NULL;
    struct pod_facts facts, *known = NULL;
    const char *uid = args->pod_uid;
    enum bind_result result = BIND_POD_UNAVAILABLE;
    bool gone;
    if (!uid[0]) {
        /* No UID in the request: the API's pod names it. */
        if (fetch_pod(api, args, deadline_ns, &pod_json, &facts, &gone, err, errlen) < 0)
            goto out;
        known = &facts;
        uid = facts.uid;
    }
    struct cache_pod *handle;
    struct cache_assumption as;
    const char *ns = args->pod_namespace, *name = args->pod_name;
    enum cache_assume_result r =
        cache_assume(cache, uid, ns, name, args->node, known, &handle, &as, err, errlen);
    if (r == CACHE_UNKNOWN_EXPIRED) {
        if (resolve_unknown(cache, api, args, uid, deadline_ns, &pod_json, &facts, &result, err,
                            errlen) < 0)
            goto out;
        r = cache_assume(cache, uid, ns, name, args->node, &facts, &handle, &as, err, errlen);
    } else if (r == CACHE_NEED_POD) {
        if (fetch_pod(api, args, deadline_ns, &pod_json, &facts, &gone, err, errlen) < 0)
            goto out;
        r = cache_assume(cache, uid, ns, name, args->node, &facts, &handle, &as, err, errlen);
    }
    if (r != CACHE_ASSUMED) {
        if (r == CACHE_NEED_POD || r == CACHE_UNKNOWN_EXPIRED)
            snprintf(err, errlen, "pod %s/%s: changed while it was read; retry", ns, name);
        result = BIND_REFUSED;
        goto out;
    }
    result = write_binding(cache, api, args, uid, deadline_ns, handle, &as, err, errlen);
    if (result == BIND_OK) {
        char idx[64];
        log_v(2, "bound pod %s/%s to %s (GPUs %s, %llu each)", ns, name, args->node,
              as.gpu_mask ? poolapi_index_format(as.gpu_mask, idx, sizeof(idx)) : "none",
              (unsigned long long)as.gpu_units);
    }
out:
    json_decref(pod_json);
    return result;
}

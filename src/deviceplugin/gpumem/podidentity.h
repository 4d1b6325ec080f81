/* podidentity.h -- which pod a gpu-mem Allocate is for, with certainty.
 *
 * The kubelet's Allocate request carries no pod. Three sources together
 * name it (docs/gpumem.md has the argument):
 *   - the kubelet's PodResources List, called while the Allocate is in
 *     flight: the pods of its pod manager, which is frozen during an
 *     admission and holds the pod being admitted, with the device IDs of
 *     every app container allocated so far;
 *   - the watched API view of the pods bound to this node: specs (which
 *     containers request how many units), phase, the extender's annotations;
 *   - the ledger: how many Allocate calls of each pod were answered
 *     (gpumem_ledger.h), because init containers never appear in List.
 * A pod is named only when exactly one pod can be the one being admitted;
 * otherwise the caller waits for the view to change (a watch that lags, a
 * rejected pod whose Failed status is on its way) and finally fails.
 *
 * Pure: no I/O, no locks, no allocation. The List's types are the
 * PodResources client's (podresources.h). */
#ifndef GP_PODIDENTITY_H
#define GP_PODIDENTITY_H

#include <stdbool.h>
#include <stddef.h>

#include "podresources.h"
#include "compiler.h"

/* A container requesting aliyun.com/gpu-mem, in the kubelet's order. */
struct gpumem_container {
    char *name;
    unsigned long long units; /* its limit */
    bool init;
    bool sidecar;   /* an init container with restartPolicy Always */
    unsigned cores; /* its gpupool.io/gpu-cores (0: none; at most 100) */
};

/* One pod of the watched view (pods with spec.nodeName = this node). */
struct gpumem_pod {
    char *ns, *name, *uid;
    bool terminal; /* phase Succeeded or Failed */
    bool deleted;  /* gone from the API: kept a while as a tombstone */
    char *idx;     /* ALIYUN_COM_GPU_MEM_IDX, NULL when absent */
    bool has_pod_units;
    unsigned long long pod_units; /* ALIYUN_COM_GPU_MEM_POD */
    bool assigned;                /* ALIYUN_COM_GPU_MEM_ASSIGNED == "true" */
    char *bad;                    /* why its gpu-mem limits could not be read, or NULL */
    bool priority_high;           /* gpupool.io/priority "high" */
    bool priority_bad;            /* gpupool.io/priority neither "high" nor "normal" */
    size_t n_containers;
    struct gpumem_container *containers; /* gpu-mem containers: init ones, then app ones */
};

struct identity_source {
    void *ctx;
    /* The view's pod ns/name (deleted ones included), or NULL. */
    const struct gpumem_pod *(*lookup)(void *ctx, const char *ns, const char *name);
    /* Allocate calls of pod `uid` answered so far (the ledger). */
    unsigned (*progress)(void *ctx, const char *uid);
};

enum identity_result {
    IDENTITY_FOUND, /* pod is the one */
    IDENTITY_WAIT,  /* not certain yet: wait for the view to change, then ask again */
    IDENTITY_FAIL,  /* certain that no pod matches: why says so */
};

struct identity_decision {
    const struct gpumem_pod *pod; /* FOUND: the pod (borrowed from the view) */
    bool repeat; /* FOUND: the pod was fully answered before (kubelet re-Allocate) */
    /* FOUND: the container's Allocate ordinal in the pod (its position in
     * containers[]): the answered calls for a fresh call; for a repeat, the
     * first container of this size still lacking devices in List (an app
     * container), else the first init container of this size. */
    unsigned container;
    char why[768]; /* WAIT / FAIL: the reason, for logs and the gRPC error */
};

/* units: the number of device IDs in the container request. */
GP_MUST_USE enum identity_result identify_pod(const struct identity_source *src,
                                              const struct pr_list *list, unsigned long long units,
                                              struct identity_decision *out);

/* Allocate calls a pod gets from the kubelet: one per gpu-mem container. */
static inline unsigned gpumem_pod_calls(const struct gpumem_pod *pod)
{
    return (unsigned)pod->n_containers;
}

#endif

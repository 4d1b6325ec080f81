/* cache_internal.h -- the cache's structs, shared by cache.c and inspect.c
 * (and the unit tests). Consumers use cache.h. */
#ifndef GP_EXTENDER_CACHE_INTERNAL_H
#define GP_EXTENDER_CACHE_INTERNAL_H

#include <pthread.h>

#include "cache.h"
#include "table.h"

/* What one pod holds on its node. GPU shares of one pod are equal, so a
 * mask and one amount describe them (16 bytes instead of 16 amounts). */
struct charge {
    uint64_t cpu, memory;
    uint64_t gpu_units; /* on each GPU of gpu_mask */
    uint32_t gpu_cores; /* on each GPU of gpu_mask (0: a memory-only pod) */
    uint32_t gpu_mask;
};

struct cache_node {
    struct table_entry entry; /* key: name */
    pthread_mutex_t lock;     /* guards pn, present, gpu_node */
    struct placement_node pn; /* capacity and usage, in the node's gpu-mem unit */
    bool present;             /* the Node object exists (else: a placeholder that
                                   pods or a ConfigMap refer to) */
    bool gpu_node;            /* capacity aliyun.com/gpu-mem > 0 */
    bool has_cm;              /* an unhealthy-gpu-<name> ConfigMap exists */
    uint32_t ann_unhealthy;   /* from gpupool.io/gpus */
    uint32_t cm_unhealthy;    /* from the ConfigMap */
    uint32_t pods;            /* pod records charging this node */
    uint32_t gen, cm_gen;     /* list generation last seen in */
    void *scratch;            /* inspect's, under state_lock */
    char *address;            /* owned, state_lock: where its agent is read directly
                                 (node_facts.address); NULL when the Node has none */
    char name[];              /* inline: one cache line fewer per lookup */
};

enum pod_state {
    POD_OBSERVED, /* charges what the API says (nothing unless bound) */
    POD_BINDING,  /* a bind is between cache_assume and confirm/rollback */
    POD_ASSUMED,  /* bound by us; the API has not shown it bound yet */
    POD_UNKNOWN,  /* our Binding's outcome is unknown: charged until the API
                     shows the pod bound or deleted, or, past `hold_until`,
                     a read-back shows it unbound (cache_unknown_release) */
};

struct cache_pod {
    struct table_entry entry; /* key: uid */
    char *strings;            /* owned: "uid\0namespace\0name\0" */
    const char *ns, *name;    /* into strings */
    struct cache_node *node;  /* where `charge` is charged; NULL: nothing charged */
    struct charge charge;
    /* The pod's demand, kept for binds (the bind request names only the pod). */
    uint64_t cpu, memory, gpu_memory, gpu_cores;
    uint32_t gpu_count;
    char *gpu_model;    /* owned constraint, NULL when none */
    int64_t hold_until; /* POD_UNKNOWN: clock_now_ns() before which nothing is released */
    uint32_t gen;
    uint8_t state; /* enum pod_state */
    bool known;    /* the demand came from an API object */
    bool bound;    /* the API shows spec.nodeName */
    bool observed; /* fed to the pod-mix model already */
    bool gone;     /* deleted while BINDING: the bind frees it */
};

struct cache {
    enum placement_policy policy;
    pthread_mutex_t state_lock;
    pthread_rwlock_t nodes_lock;
    pthread_mutex_t model_lock;
    struct table nodes; /* struct cache_node by name */
    struct table pods;  /* struct cache_pod by uid (state_lock only) */
    uint32_t node_gen, pod_gen, cm_gen;
    size_t assumed;           /* records in BINDING, ASSUMED or UNKNOWN */
    struct placement_ctx ctx; /* model_lock */
};

#endif

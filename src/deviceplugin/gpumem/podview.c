/* podview.c -- watched pods of this node (see podview.h). */
#include "podview.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "gpumem.h"
#include "poolapi_demand.h"
#include "poolapi_facts.h"
#include "poolapi_quantity.h"
#include "log.h"

/* How long a deleted pod is remembered: the kubelet drops it from its pod
 * manager when its sync loop gets to the deletion, normally at once. */
#define TOMBSTONE_MS (10 * 60 * 1000LL)
#define PAGE_LIMIT 500

struct view_entry {
    struct gpumem_pod pod;
    bool seen; /* during a re-list */
    long long deleted_at_ms;
};

struct podview {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* CLOCK_MONOTONIC */
    unsigned long long generation;
    bool synced;
    size_t count, cap;
    struct view_entry **entries;
    struct kube_client *kc;
    struct kube_cancel *cancel;
    char *path;
    pthread_t thread;
    bool thread_started;
};

/* ---- parsing --------------------------------------------------------------- */

void gpumem_pod_clear(struct gpumem_pod *pod)
{
    for (size_t i = 0; i < pod->n_containers; i++)
        free(pod->containers[i].name);
    free(pod->containers);
    free(pod->ns);
    free(pod->name);
    free(pod->uid);
    free(pod->idx);
    free(pod->bad);
    memset(pod, 0, sizeof *pod);
}

static char *dup_string(const json_t *v)
{
    const char *s = json_string_value(v);
    return strdup(s ? s : "");
}

/* One pass of poolapi_pod_containers' walk: the containers of one list
 * (init ones first, then app ones: the kubelet's Allocate order, which
 * containers[] keeps). */
struct container_pass {
    struct gpumem_pod *pod;
    bool init;
    bool oom;
};

static int add_container(void *ctx, const json_t *c, const char *where, bool init, bool sidecar,
                         char *err, size_t errlen)
{
    struct container_pass *w = ctx;
    struct gpumem_pod *pod = w->pod;
    if (init != w->init)
        return 0;
    const json_t *limit = json_object_get(
        json_object_get(json_object_get(c, "resources"), "limits"), POOL_RES_GPU_MEM);
    if (limit == NULL)
        return 0;
    const char *name = json_string_value(json_object_get(c, "name"));
    uint64_t units;
    char what[128], why[256];
    /* The contract's quantity ("4", "1k", "2e3"); a fraction is refused. */
    snprintf(what, sizeof what, "the %s limit of container \"%.63s\"", POOL_RES_GPU_MEM,
             name ? name : "");
    if (poolapi_quantity_whole(limit, what, &units, why, sizeof why) != 0) {
        snprintf(why + strlen(why), sizeof why - strlen(why), ": not a whole number of units");
        free(pod->bad);
        pod->bad = strdup(why);
        return 0;
    }
    if (units == 0)
        return 0;
    /* Its compute share, by the contract's rule (requests, else limits);
     * more than one GPU is what the extender refuses, so it is capped. */
    uint64_t cores;
    if (poolapi_container_request(c, where, POOL_RES_GPU_CORES, 1, &cores, why, sizeof why) != 0) {
        free(pod->bad);
        pod->bad = strdup(why);
        return 0;
    }
    struct gpumem_container *grown =
        realloc(pod->containers, (pod->n_containers + 1) * sizeof *grown);
    if (grown == NULL)
        goto oom;
    pod->containers = grown;
    struct gpumem_container *gc = &pod->containers[pod->n_containers];
    gc->name = strdup(name ? name : "");
    gc->units = units;
    gc->cores = cores > POOL_GPU_CORES_PER_GPU ? POOL_GPU_CORES_PER_GPU : (unsigned)cores;
    gc->init = init;
    gc->sidecar = sidecar;
    if (gc->name == NULL)
        goto oom;
    pod->n_containers++;
    return 0;
oom:
    w->oom = true;
    snprintf(err, errlen, "out of memory");
    return -1;
}

/* The gpu-mem containers of spec through the contract's one walk. A list
 * that is not an array marks the pod unreadable (out->bad). -1: out of
 * memory. */
static int add_containers(struct gpumem_pod *out, const json_t *spec)
{
    struct container_pass w = {.pod = out, .init = true};
    char why[256];
    for (int pass = 0; pass < 2; pass++, w.init = false) {
        if (poolapi_pod_containers(spec, add_container, &w, why, sizeof why) == 0)
            continue;
        if (w.oom)
            return -1;
        free(out->bad);
        if ((out->bad = strdup(why)) == NULL)
            return -1;
        break;
    }
    return 0;
}

int gpumem_pod_parse(const json_t *obj, struct gpumem_pod *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const json_t *meta = json_object_get(obj, "metadata");
    if (!json_is_object(meta) || !json_is_string(json_object_get(meta, "name"))) {
        snprintf(err, errlen, "not a pod with metadata.name");
        return -1;
    }
    const json_t *ann = json_object_get(meta, "annotations");
    const json_t *spec = json_object_get(obj, "spec");
    const char *phase = json_string_value(json_object_get(json_object_get(obj, "status"), "phase"));
    out->ns = dup_string(json_object_get(meta, "namespace"));
    out->name = dup_string(json_object_get(meta, "name"));
    out->uid = dup_string(json_object_get(meta, "uid"));
    out->terminal =
        phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
    const char *idx = json_string_value(json_object_get(ann, POOL_ANN_GPU_MEM_IDX));
    const char *assigned = json_string_value(json_object_get(ann, POOL_ANN_GPU_MEM_ASSIGNED));
    const char *prio = json_string_value(json_object_get(ann, POOL_ANN_POD_PRIORITY));
    uint64_t pod_units;
    /* A typo must not pass for "normal" unnoticed: serve_item refuses it. */
    out->priority_high = prio != NULL && strcmp(prio, POOL_PRIORITY_HIGH) == 0;
    out->priority_bad = json_object_get(ann, POOL_ANN_POD_PRIORITY) != NULL &&
                        !out->priority_high &&
                        (prio == NULL || strcmp(prio, POOL_PRIORITY_NORMAL) != 0);
    out->assigned = assigned != NULL && strcmp(assigned, "true") == 0;
    out->has_pod_units = poolapi_gpu_mem_pod(ann, &pod_units) == 0;
    out->pod_units = out->has_pod_units ? pod_units : 0;
    if (idx != NULL && (out->idx = strdup(idx)) == NULL)
        goto oom;
    if (out->ns == NULL || out->name == NULL || out->uid == NULL || add_containers(out, spec) != 0)
        goto oom;
    return 0;
oom:
    gpumem_pod_clear(out);
    snprintf(err, errlen, "out of memory");
    return -1;
}

/* ---- the table --------------------------------------------------------------- */

static struct view_entry *find_entry(const struct podview *v, const char *ns, const char *name)
{
    for (size_t i = 0; i < v->count; i++) {
        struct view_entry *e = v->entries[i];
        if (strcmp(e->pod.name, name) == 0 && strcmp(e->pod.ns, ns) == 0)
            return e;
    }
    return NULL;
}

static void changed(struct podview *v)
{
    v->generation++;
    pthread_cond_broadcast(&v->changed);
}

static void remove_at(struct podview *v, size_t i)
{
    gpumem_pod_clear(&v->entries[i]->pod);
    free(v->entries[i]);
    v->entries[i] = v->entries[--v->count];
}

static void purge_tombstones(struct podview *v, long long now)
{
    for (size_t i = 0; i < v->count;) {
        struct view_entry *e = v->entries[i];
        if (e->pod.deleted && now - e->deleted_at_ms > TOMBSTONE_MS)
            remove_at(v, i);
        else
            i++;
    }
}

/* Takes over *pod's contents; returns its entry, NULL when out of memory. */
static struct view_entry *upsert(struct podview *v, struct gpumem_pod *pod)
{
    struct view_entry *e = find_entry(v, pod->ns, pod->name);
    if (e == NULL) {
        if (v->count == v->cap) {
            size_t cap = v->cap ? v->cap * 2 : 64;
            struct view_entry **grown = realloc(v->entries, cap * sizeof *grown);
            if (grown == NULL)
                return NULL;
            v->entries = grown;
            v->cap = cap;
        }
        if ((e = calloc(1, sizeof *e)) == NULL)
            return NULL;
        v->entries[v->count++] = e;
    } else {
        gpumem_pod_clear(&e->pod);
    }
    e->pod = *pod;
    e->seen = true;
    e->deleted_at_ms = 0;
    memset(pod, 0, sizeof *pod);
    return e;
}

static void tombstone(struct view_entry *e, long long now)
{
    if (!e->pod.deleted) {
        e->pod.deleted = true;
        e->deleted_at_ms = now;
    }
}

/* ---- reflector callbacks (reflector thread) ------------------------------------------ */

static int apply(struct podview *v, enum kube_event_type type, json_t *obj)
{
    struct gpumem_pod pod;
    char err[128];
    if (gpumem_pod_parse(obj, &pod, err, sizeof err) != 0) {
        log_warn("gpu-mem pod watch: ignoring an object: %s", err);
        return 0;
    }
    int rc = 0;
    pthread_mutex_lock(&v->lock);
    long long now = clock_now_ms();
    struct view_entry *e = find_entry(v, pod.ns, pod.name);
    if (type == KUBE_EVENT_DELETED && e != NULL && strcmp(e->pod.uid, pod.uid) != 0) {
        /* a newer pod of the same name replaced it already */
    } else if (type == KUBE_EVENT_DELETED && e != NULL) {
        tombstone(e, now);
    } else if ((e = upsert(v, &pod)) == NULL) {
        rc = -1;
    } else if (type == KUBE_EVENT_DELETED) {
        tombstone(e, now); /* deleted before we saw it: the kubelet may still hold it */
    }
    purge_tombstones(v, now);
    changed(v);
    pthread_mutex_unlock(&v->lock);
    gpumem_pod_clear(&pod);
    if (rc != 0)
        log_error("gpu-mem pod watch: out of memory");
    return rc;
}

static int on_list_begin(void *ctx)
{
    struct podview *v = ctx;
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < v->count; i++)
        v->entries[i]->seen = false;
    pthread_mutex_unlock(&v->lock);
    return 0;
}

static int on_list_item(json_t *item, void *ctx)
{
    return apply(ctx, KUBE_EVENT_ADDED, item);
}

/* Pods missing from a (re-)list were deleted while the watch was down. */
static int on_list_end(const char *rv, void *ctx)
{
    struct podview *v = ctx;
    (void)rv;
    pthread_mutex_lock(&v->lock);
    long long now = clock_now_ms();
    for (size_t i = 0; i < v->count; i++)
        if (!v->entries[i]->seen)
            tombstone(v->entries[i], now);
    if (!v->synced)
        log_info("gpu-mem: watching the pods of this node (%zu known)", v->count);
    v->synced = true;
    changed(v);
    pthread_mutex_unlock(&v->lock);
    return 0;
}

static int on_event(enum kube_event_type type, json_t *obj, void *ctx)
{
    if (type == KUBE_EVENT_BOOKMARK)
        return 0;
    return apply(ctx, type, obj);
}

static void on_error(const struct kube_error *err, void *ctx)
{
    (void)ctx;
    log_warn("gpu-mem pod watch: %s (HTTP %d, %s); retrying", err->message, err->http_status,
             err->reason);
}

static void *reflector_main(void *arg)
{
    struct podview *v = arg;
    static const struct kube_reflector_ops ops = {
        .list_begin = on_list_begin,
        .list_item = on_list_item,
        .list_end = on_list_end,
        .event = on_event,
        .on_error = on_error,
    };
    struct kube_error err;
    enum kube_result r = kube_reflector_run(v->kc, v->path, PAGE_LIMIT, &ops, v, v->cancel, &err);
    if (r != KUBE_CANCELLED)
        log_error("gpu-mem pod watch stopped: %s", err.message);
    return NULL;
}

/* ---- public ------------------------------------------------------------------------------ */

int podview_start(struct kube_client *kc, const char *node, struct podview **out, char *err,
                  size_t errlen)
{
    struct podview *v = calloc(1, sizeof *v);
    char selector[320];
    snprintf(selector, sizeof selector, "spec.nodeName=%s", node);
    char *escaped = kube_escape(selector);
    if (v == NULL || escaped == NULL)
        goto oom;
    if (asprintf(&v->path, "/api/v1/pods?fieldSelector=%s", escaped) < 0) {
        v->path = NULL;
        goto oom;
    }
    free(escaped);
    escaped = NULL;
    if ((v->cancel = kube_cancel_new()) == NULL)
        goto oom;
    v->kc = kc;
    clock_cond_init(&v->changed);
    pthread_mutex_init(&v->lock, NULL);
    int rc = pthread_create(&v->thread, NULL, reflector_main, v);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the pod watch thread: %s", strerror(rc));
        podview_stop(v);
        return -1;
    }
    v->thread_started = true;
    *out = v;
    return 0;
oom:
    free(escaped);
    if (v != NULL) {
        free(v->path);
        free(v);
    }
    snprintf(err, errlen, "out of memory");
    return -1;
}

void podview_stop(struct podview *v)
{
    if (v == NULL)
        return;
    if (v->thread_started) {
        kube_cancel_fire(v->cancel);
        pthread_join(v->thread, NULL);
    }
    for (size_t i = 0; i < v->count; i++) {
        gpumem_pod_clear(&v->entries[i]->pod);
        free(v->entries[i]);
    }
    free(v->entries);
    kube_cancel_free(v->cancel);
    free(v->path);
    pthread_cond_destroy(&v->changed);
    pthread_mutex_destroy(&v->lock);
    free(v);
}

void podview_lock(struct podview *v)
{
    pthread_mutex_lock(&v->lock);
}

void podview_unlock(struct podview *v)
{
    pthread_mutex_unlock(&v->lock);
}

bool podview_synced(const struct podview *v)
{
    return v->synced;
}

unsigned long long podview_generation(const struct podview *v)
{
    return v->generation;
}

bool podview_wait(struct podview *v, unsigned long long gen, long long deadline_ms)
{
    struct timespec ts = clock_timespec_ms(deadline_ms);
    while (v->generation == gen) {
        int rc = pthread_cond_timedwait(&v->changed, &v->lock, &ts);
        if (rc == ETIMEDOUT)
            return v->generation != gen;
    }
    return true;
}

const struct gpumem_pod *podview_find(const struct podview *v, const char *ns, const char *name)
{
    const struct view_entry *e = find_entry(v, ns, name);
    return e ? &e->pod : NULL;
}

const struct gpumem_pod *podview_find_uid(const struct podview *v, const char *uid)
{
    for (size_t i = 0; i < v->count; i++)
        if (!v->entries[i]->pod.deleted && strcmp(v->entries[i]->pod.uid, uid) == 0)
            return &v->entries[i]->pod;
    return NULL;
}

bool podview_has_uid(const struct podview *v, const char *uid)
{
    return podview_find_uid(v, uid) != NULL;
}

void podview_poke(struct podview *v)
{
    pthread_mutex_lock(&v->lock);
    changed(v);
    pthread_mutex_unlock(&v->lock);
}

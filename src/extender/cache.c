/* cache.c -- nodes, pods and GPU usage (see cache.h for the rules and locks). */
#include "cache_internal.h"
#include "clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- life cycle ---------------------------------------------------------- */

struct cache *cache_new(enum placement_policy policy)
{
    struct cache *cache = calloc(1, sizeof(*cache));
    if (!cache)
        return NULL;
    cache->policy = policy;
    pthread_mutex_init(&cache->state_lock, NULL);
    pthread_mutex_init(&cache->model_lock, NULL);
    /* Writers (a new node) must not starve behind a stream of filters. */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&cache->nodes_lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    placement_ctx_init(&cache->ctx);
    return cache;
}

static void node_destroy(struct cache_node *node)
{
    free(node->address);
    pthread_mutex_destroy(&node->lock);
    free(node);
}

static void pod_destroy(struct cache_pod *pod)
{
    free(pod->strings);
    free(pod->gpu_model);
    free(pod);
}

void cache_free(struct cache *cache)
{
    if (!cache)
        return;
    size_t i;
    struct table_entry *e, *next;
    for (e = table_first(&cache->pods, &i); e; e = next) {
        next = table_next(&cache->pods, &i, e);
        pod_destroy(table_container(e, struct cache_pod, entry));
    }
    for (e = table_first(&cache->nodes, &i); e; e = next) {
        next = table_next(&cache->nodes, &i, e);
        node_destroy(table_container(e, struct cache_node, entry));
    }
    table_free(&cache->pods);
    table_free(&cache->nodes);
    pthread_rwlock_destroy(&cache->nodes_lock);
    pthread_mutex_destroy(&cache->state_lock);
    pthread_mutex_destroy(&cache->model_lock);
    free(cache);
}

enum placement_policy cache_policy(const struct cache *cache)
{
    return cache->policy;
}

/* ---- nodes (state_lock held by every caller below) ------------------------ */

static struct cache_node *node_find(struct cache *cache, const char *name)
{
    struct table_entry *e = table_find(&cache->nodes, name);
    return e ? table_container(e, struct cache_node, entry) : NULL;
}

/* The node of that name, created as an absent placeholder when unknown. */
static struct cache_node *node_get(struct cache *cache, const char *name)
{
    struct cache_node *node = node_find(cache, name);
    if (node)
        return node;
    size_t len = strlen(name) + 1;
    node = calloc(1, sizeof(*node) + len);
    if (!node)
        return NULL;
    memcpy(node->name, name, len);
    pthread_mutex_init(&node->lock, NULL);
    node->entry.key = node->name;
    node->pn.name = node->name;
    node->pn.model = PLACEMENT_MODEL_NONE;
    pthread_rwlock_wrlock(&cache->nodes_lock);
    int rc = table_insert(&cache->nodes, &node->entry);
    pthread_rwlock_unlock(&cache->nodes_lock);
    if (rc < 0) {
        node_destroy(node);
        return NULL;
    }
    return node;
}

/* Frees a node nothing refers to any more. */
static void node_maybe_free(struct cache *cache, struct cache_node *node)
{
    if (node->present || node->pods > 0 || node->has_cm)
        return;
    pthread_rwlock_wrlock(&cache->nodes_lock);
    table_remove(&cache->nodes, &node->entry);
    pthread_rwlock_unlock(&cache->nodes_lock);
    node_destroy(node);
}

static uint64_t sub_floor(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static uint64_t add_cap(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Adds or removes a charge; node->lock held. Usage may exceed capacity
 * (pods the API shows are facts, even on a shrunken node): placement treats
 * an over-full GPU as having nothing free, and nothing ever wraps. */
static void charge_apply_locked(struct cache_node *node, const struct charge *c, bool add)
{
    struct placement_node *pn = &node->pn;
    pn->cpu_requested =
        add ? add_cap(pn->cpu_requested, c->cpu) : sub_floor(pn->cpu_requested, c->cpu);
    pn->memory_requested =
        add ? add_cap(pn->memory_requested, c->memory) : sub_floor(pn->memory_requested, c->memory);
    for (uint32_t g = 0; g < PLACEMENT_MAX_GPUS; g++) {
        if (!(c->gpu_mask & (1u << g)))
            continue;
        pn->gpu_used[g] =
            add ? add_cap(pn->gpu_used[g], c->gpu_units) : sub_floor(pn->gpu_used[g], c->gpu_units);
        uint32_t cores = pn->cores_used[g];
        pn->cores_used[g] =
            add ? (cores > UINT32_MAX - c->gpu_cores ? UINT32_MAX : cores + c->gpu_cores)
                : (cores > c->gpu_cores ? cores - c->gpu_cores : 0);
    }
}

static void charge_apply(struct cache_node *node, const struct charge *c, bool add)
{
    pthread_mutex_lock(&node->lock);
    charge_apply_locked(node, c, add);
    pthread_mutex_unlock(&node->lock);
}

static void node_set_unhealthy_locked(struct cache_node *node)
{
    node->pn.unhealthy = node->ann_unhealthy | node->cm_unhealthy;
}

int cache_node_upsert(struct cache *cache, const json_t *json, char *err, size_t errlen)
{
    struct node_facts f;
    if (poolapi_node_facts(json, &f, err, errlen) < 0)
        return -1;
    if (!f.name[0]) {
        snprintf(err, errlen, "node without metadata.name");
        return -1;
    }
    int model = PLACEMENT_MODEL_NONE;
    if (f.model[0]) {
        pthread_mutex_lock(&cache->model_lock);
        model = placement_model_id(&cache->ctx, f.model);
        pthread_mutex_unlock(&cache->model_lock);
        if (model < 0)
            model = PLACEMENT_MODEL_NONE;
    }
    pthread_mutex_lock(&cache->state_lock);
    struct cache_node *node = node_get(cache, f.name);
    if (!node) {
        pthread_mutex_unlock(&cache->state_lock);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    node->gen = cache->node_gen;
    /* Copied only when it changed: nodes are updated every few seconds
     * (heartbeats), their addresses almost never. */
    if (!f.address != !node->address || (f.address && strcmp(f.address, node->address) != 0)) {
        char *copy = f.address ? strdup(f.address) : NULL;
        if (f.address && !copy) {
            pthread_mutex_unlock(&cache->state_lock);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        free(node->address);
        node->address = copy;
    }
    pthread_mutex_lock(&node->lock);
    struct placement_node *pn = &node->pn;
    node->present = true;
    node->gpu_node = f.gpu_memory_total > 0;
    pn->cpu_allocatable = f.cpu_milli;
    pn->memory_allocatable = f.memory_bytes;
    pn->gpu_count = f.gpu_count;
    pn->model = model;
    memset(pn->gpu_total, 0, sizeof(pn->gpu_total));
    memcpy(pn->gpu_total, f.gpu_memory, sizeof(f.gpu_memory[0]) * f.gpu_count);
    memset(pn->cores_total, 0, sizeof(pn->cores_total));
    memcpy(pn->cores_total, f.gpu_cores, sizeof(f.gpu_cores[0]) * f.gpu_count);
    node->ann_unhealthy = f.unhealthy;
    node_set_unhealthy_locked(node);
    pthread_mutex_unlock(&node->lock);
    pthread_mutex_unlock(&cache->state_lock);
    if (f.warning[0])
        snprintf(err, errlen, "%s", f.warning);
    else if (errlen)
        err[0] = '\0';
    return 0;
}

static void node_gone_locked(struct cache *cache, struct cache_node *node)
{
    pthread_mutex_lock(&node->lock);
    node->present = false;
    node->gpu_node = false;
    pthread_mutex_unlock(&node->lock);
    node_maybe_free(cache, node);
}

void cache_node_delete(struct cache *cache, const json_t *json)
{
    const char *name =
        json_string_value(json_object_get(json_object_get(json, "metadata"), "name"));
    if (!name)
        return;
    pthread_mutex_lock(&cache->state_lock);
    struct cache_node *node = node_find(cache, name);
    if (node)
        node_gone_locked(cache, node);
    pthread_mutex_unlock(&cache->state_lock);
}

void cache_nodes_list_begin(struct cache *cache)
{
    pthread_mutex_lock(&cache->state_lock);
    cache->node_gen++;
    pthread_mutex_unlock(&cache->state_lock);
}

static void node_sweep(struct table_entry *e, void *ctx)
{
    struct cache *cache = ctx;
    struct cache_node *node = table_container(e, struct cache_node, entry);
    if (node->present && node->gen != cache->node_gen)
        node_gone_locked(cache, node);
}

void cache_nodes_list_end(struct cache *cache)
{
    pthread_mutex_lock(&cache->state_lock);
    table_sweep(&cache->nodes, node_sweep, cache);
    pthread_mutex_unlock(&cache->state_lock);
}

/* ---- unhealthy-gpu ConfigMaps ------------------------------------------ */

static const char *cm_node_name(const json_t *cm)
{
    const char *name = json_string_value(json_object_get(json_object_get(cm, "metadata"), "name"));
    size_t n = strlen(CACHE_UNHEALTHY_CM_PREFIX);
    if (!name || strncmp(name, CACHE_UNHEALTHY_CM_PREFIX, n) != 0 || !name[n])
        return NULL;
    return name + n;
}

static void cm_set_locked(struct cache_node *node, bool has, uint32_t mask)
{
    node->has_cm = has;
    pthread_mutex_lock(&node->lock);
    node->cm_unhealthy = mask;
    node_set_unhealthy_locked(node);
    pthread_mutex_unlock(&node->lock);
}

/* data.gpus: the contract's index list, except that people write this
 * ConfigMap by hand, so blanks around the items are allowed ("0, 3"). */
static int unhealthy_list_parse(const char *text, uint32_t *mask)
{
    char compact[128];
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < sizeof(compact); p++)
        if (*p != ' ')
            compact[n++] = *p;
    compact[n] = '\0';
    struct poolapi_index_list list;
    if (strlen(text) >= sizeof(compact) || poolapi_index_parse(compact, &list, NULL, 0) < 0)
        return -1;
    *mask = list.mask;
    return 0;
}

int cache_configmap_upsert(struct cache *cache, const json_t *cm, char *err, size_t errlen)
{
    const char *node_name = cm_node_name(cm);
    if (errlen)
        err[0] = '\0';
    if (!node_name)
        return 0; /* not ours to read */
    json_t *data = json_object_get(cm, "data");
    const char *gpus = json_string_value(json_object_get(data, "gpus"));
    uint32_t mask = 0;
    if (gpus && *gpus && unhealthy_list_parse(gpus, &mask) < 0) {
        snprintf(err, errlen, "ConfigMap %s%s: data.gpus \"%.60s\" is not a list of GPU indices",
                 CACHE_UNHEALTHY_CM_PREFIX, node_name, gpus);
        return -1;
    }
    pthread_mutex_lock(&cache->state_lock);
    struct cache_node *node = node_get(cache, node_name);
    if (node) {
        node->cm_gen = cache->cm_gen;
        cm_set_locked(node, true, mask);
    }
    pthread_mutex_unlock(&cache->state_lock);
    if (!node) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

void cache_configmap_delete(struct cache *cache, const json_t *cm)
{
    const char *node_name = cm_node_name(cm);
    if (!node_name)
        return;
    pthread_mutex_lock(&cache->state_lock);
    struct cache_node *node = node_find(cache, node_name);
    if (node) {
        cm_set_locked(node, false, 0);
        node_maybe_free(cache, node);
    }
    pthread_mutex_unlock(&cache->state_lock);
}

void cache_configmaps_list_begin(struct cache *cache)
{
    pthread_mutex_lock(&cache->state_lock);
    cache->cm_gen++;
    pthread_mutex_unlock(&cache->state_lock);
}

static void cm_sweep(struct table_entry *e, void *ctx)
{
    struct cache *cache = ctx;
    struct cache_node *node = table_container(e, struct cache_node, entry);
    if (node->has_cm && node->cm_gen != cache->cm_gen) {
        cm_set_locked(node, false, 0);
        node_maybe_free(cache, node);
    }
}

void cache_configmaps_list_end(struct cache *cache)
{
    pthread_mutex_lock(&cache->state_lock);
    table_sweep(&cache->nodes, cm_sweep, cache);
    pthread_mutex_unlock(&cache->state_lock);
}

/* ---- pods (state_lock held by the helpers) -------------------------------- */

static struct cache_pod *pod_find(struct cache *cache, const char *uid)
{
    struct table_entry *e = table_find(&cache->pods, uid);
    return e ? table_container(e, struct cache_pod, entry) : NULL;
}

static struct cache_pod *pod_create(struct cache *cache, const char *uid, const char *ns,
                                    const char *name)
{
    size_t lu = strlen(uid) + 1, ln = strlen(ns) + 1, lm = strlen(name) + 1;
    struct cache_pod *pod = calloc(1, sizeof(*pod));
    char *s = malloc(lu + ln + lm);
    if (!pod || !s) {
        free(pod);
        free(s);
        return NULL;
    }
    memcpy(s, uid, lu);
    memcpy(s + lu, ns, ln);
    memcpy(s + lu + ln, name, lm);
    pod->strings = s;
    pod->ns = s + lu;
    pod->name = s + lu + ln;
    pod->entry.key = s;
    pod->gen = cache->pod_gen;
    if (table_insert(&cache->pods, &pod->entry) < 0) {
        pod_destroy(pod);
        return NULL;
    }
    return pod;
}

static void pod_set_state(struct cache *cache, struct cache_pod *pod, enum pod_state state)
{
    bool was = pod->state != POD_OBSERVED, is = state != POD_OBSERVED;
    if (was && !is)
        cache->assumed--;
    else if (!was && is)
        cache->assumed++;
    pod->state = (uint8_t)state;
}

/* Takes back whatever the pod charges. */
static void pod_uncharge(struct cache *cache, struct cache_pod *pod)
{
    struct cache_node *node = pod->node;
    if (!node)
        return;
    charge_apply(node, &pod->charge, false);
    pod->node = NULL;
    memset(&pod->charge, 0, sizeof(pod->charge));
    node->pods--;
    node_maybe_free(cache, node);
}

/* Makes the pod charge exactly `c` on `node`. */
static void pod_charge(struct cache *cache, struct cache_pod *pod, struct cache_node *node,
                       const struct charge *c)
{
    if (pod->node == node && memcmp(&pod->charge, c, sizeof(*c)) == 0)
        return;
    node->pods++; /* first, so uncharging an old charge here cannot free node */
    pod_uncharge(cache, pod);
    pod->node = node;
    pod->charge = *c;
    charge_apply(node, c, true);
}

static void pod_remove(struct cache *cache, struct cache_pod *pod)
{
    pod_uncharge(cache, pod);
    pod_set_state(cache, pod, POD_OBSERVED);
    table_remove(&cache->pods, &pod->entry);
    pod_destroy(pod);
}

static int pod_set_demand(struct cache_pod *pod, const struct pod_facts *f)
{
    pod->cpu = f->cpu_milli;
    pod->memory = f->memory_bytes;
    pod->gpu_memory = f->gpu_memory;
    pod->gpu_cores = f->gpu_cores;
    pod->gpu_count = f->gpu_count;
    if (!(f->gpu_model && pod->gpu_model && strcmp(f->gpu_model, pod->gpu_model) == 0)) {
        free(pod->gpu_model);
        pod->gpu_model = NULL;
        if (f->gpu_model && !(pod->gpu_model = strdup(f->gpu_model)))
            return -1;
    }
    pod->known = true;
    return 0;
}

/* What the API says a bound pod holds: its requests, and gpushare's
 * annotated GPUs with POD / #GPUs each (rounded up: never under-count) and
 * its gpu-cores on each: the spec carries the cores, so no annotation is
 * needed for them. */
static void charge_of_facts(const struct pod_facts *f, struct charge *c)
{
    memset(c, 0, sizeof(*c));
    c->cpu = f->cpu_milli;
    c->memory = f->memory_bytes;
    if (f->assigned.present && f->assigned.gpu_count > 0) {
        c->gpu_mask = f->assigned.gpu_mask;
        c->gpu_units = f->assigned.pod_memory / f->assigned.gpu_count +
                       (f->assigned.pod_memory % f->assigned.gpu_count != 0);
        /* A bound pod is a fact even if its cores are not valid: charged as
         * asked (saturating), so an over-full GPU shows as full. */
        c->gpu_cores = f->gpu_cores > UINT32_MAX ? UINT32_MAX : (uint32_t)f->gpu_cores;
    }
}

int cache_pod_upsert(struct cache *cache, const json_t *json, char *err, size_t errlen)
{
    struct pod_facts f;
    if (poolapi_pod_facts(json, &f, err, errlen) < 0)
        return -1;
    if (!f.uid[0]) {
        snprintf(err, errlen, "pod %s/%s has no metadata.uid", f.ns, f.name);
        return -1;
    }
    int rc = 0;
    pthread_mutex_lock(&cache->state_lock);
    struct cache_pod *pod = pod_find(cache, f.uid);
    bool binding = pod && pod->state == POD_BINDING;
    if (f.terminated) {
        /* Finished pods hold nothing. A bind in flight keeps its record. */
        if (pod && binding)
            pod_uncharge(cache, pod);
        else if (pod)
            pod_remove(cache, pod);
        goto out;
    }
    if (!f.node_name && f.gpu_memory == 0 && (!pod || (pod->state == POD_OBSERVED && !pod->node))) {
        /* Pending pods without GPU memory are not ours to bind: no record. */
        if (pod)
            pod_remove(cache, pod);
        goto out;
    }
    if (!pod && !(pod = pod_create(cache, f.uid, f.ns, f.name)))
        goto oom;
    pod->gen = cache->pod_gen;
    if (pod_set_demand(pod, &f) < 0)
        goto oom;
    if (f.node_name) {
        struct cache_node *node = node_get(cache, f.node_name);
        if (!node)
            goto oom;
        struct charge c;
        charge_of_facts(&f, &c);
        pod->bound = true;
        pod_charge(cache, pod, node, &c);
        if (pod->state == POD_ASSUMED || pod->state == POD_UNKNOWN)
            pod_set_state(cache, pod, POD_OBSERVED);
    } else {
        pod->bound = false;
        if (pod->state == POD_OBSERVED)
            pod_uncharge(cache, pod);
    }
    goto out;
oom:
    snprintf(err, errlen, "out of memory");
    rc = -1;
out:
    pthread_mutex_unlock(&cache->state_lock);
    return rc;
}

void cache_pod_delete(struct cache *cache, const json_t *json)
{
    const char *uid = json_string_value(json_object_get(json_object_get(json, "metadata"), "uid"));
    if (!uid)
        return;
    pthread_mutex_lock(&cache->state_lock);
    struct cache_pod *pod = pod_find(cache, uid);
    if (pod && pod->state == POD_BINDING) {
        pod_uncharge(cache, pod);
        pod->gone = true;
    } else if (pod) {
        pod_remove(cache, pod);
    }
    pthread_mutex_unlock(&cache->state_lock);
}

void cache_pods_list_begin(struct cache *cache)
{
    pthread_mutex_lock(&cache->state_lock);
    cache->pod_gen++;
    pthread_mutex_unlock(&cache->state_lock);
}

static void pod_sweep(struct table_entry *e, void *ctx)
{
    struct cache *cache = ctx;
    struct cache_pod *pod = table_container(e, struct cache_pod, entry);
    if (pod->gen != cache->pod_gen && pod->state != POD_BINDING)
        pod_remove(cache, pod);
}

void cache_pods_list_end(struct cache *cache)
{
    pthread_mutex_lock(&cache->state_lock);
    table_sweep(&cache->pods, pod_sweep, cache);
    pthread_mutex_unlock(&cache->state_lock);
}

/* ---- queries ------------------------------------------------------------ */

/* "V100|A100": each alternative allows every known model name that equals
 * it or contains it (case-insensitive), so "V100" matches GPU feature
 * discovery's "Tesla-V100-SXM2-16GB". model_lock held. */
static uint64_t models_matching(const struct placement_ctx *ctx, const char *constraint)
{
    uint64_t mask = 0;
    char alt[PLACEMENT_MODEL_LEN];
    const char *p = constraint;
    while (*p) {
        size_t n = strcspn(p, "|,");
        size_t len = n < sizeof(alt) - 1 ? n : sizeof(alt) - 1;
        memcpy(alt, p, len);
        alt[len] = '\0';
        char *a = alt;
        while (*a == ' ')
            a++;
        for (char *end = a + strlen(a); end > a && end[-1] == ' ';)
            *--end = '\0';
        for (uint32_t m = 0; *a && m < ctx->model_count; m++)
            if (strcasestr(ctx->model_names[m], a))
                mask |= UINT64_C(1) << m;
        p += n;
        if (*p)
            p++;
    }
    return mask;
}

int cache_query_init(struct cache *cache, const struct pod_facts *pod, bool observe, bool snapshot,
                     struct cache_query *q, char *err, size_t errlen)
{
    memset(q, 0, sizeof(*q));
    q->gpu = pod->gpu_memory > 0;
    if (objects_pod_request(pod, &q->req, q->pod_reason, sizeof(q->pod_reason)) < 0)
        observe = false;
    if (q->gpu && pod->gpu_model && !q->pod_reason[0]) {
        pthread_mutex_lock(&cache->model_lock);
        q->req.models = models_matching(&cache->ctx, pod->gpu_model);
        pthread_mutex_unlock(&cache->model_lock);
        if (q->req.models == 0)
            snprintf(q->pod_reason, sizeof(q->pod_reason),
                     "no node has a GPU model matching \"%.80s\" (%s)", pod->gpu_model,
                     POOL_ANN_POD_GPU_MODEL);
    }
    if (observe && q->gpu && !q->pod_reason[0]) {
        bool first = true;
        if (pod->uid[0]) {
            pthread_mutex_lock(&cache->state_lock);
            struct cache_pod *rec = pod_find(cache, pod->uid);
            if (rec) {
                first = !rec->observed;
                rec->observed = true;
            }
            pthread_mutex_unlock(&cache->state_lock);
        }
        if (first) {
            pthread_mutex_lock(&cache->model_lock);
            placement_stats_observe(&cache->ctx, &q->req);
            pthread_mutex_unlock(&cache->model_lock);
        }
    }
    if (snapshot) {
        if (!(q->ctx = malloc(sizeof(*q->ctx)))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        pthread_mutex_lock(&cache->model_lock);
        *q->ctx = cache->ctx;
        pthread_mutex_unlock(&cache->model_lock);
    }
    return 0;
}

void cache_query_free(struct cache_query *q)
{
    free(q->ctx);
    q->ctx = NULL;
}

/* Why req does not fit pn, as one sentence; pn's lock held. */
static void explain(const struct placement_node *pn, const struct placement_request *req, char *out,
                    size_t len)
{
    uint64_t cpu_free = sub_floor(pn->cpu_allocatable, pn->cpu_requested);
    uint64_t mem_free = sub_floor(pn->memory_allocatable, pn->memory_requested);
    if (req->cpu > cpu_free) {
        snprintf(out, len, "Insufficient cpu: the pod requests %llum, %llum of %llum is free",
                 (unsigned long long)req->cpu, (unsigned long long)cpu_free,
                 (unsigned long long)pn->cpu_allocatable);
        return;
    }
    if (req->memory > mem_free) {
        snprintf(out, len, "Insufficient memory: the pod requests %llu bytes, %llu of %llu is free",
                 (unsigned long long)req->memory, (unsigned long long)mem_free,
                 (unsigned long long)pn->memory_allocatable);
        return;
    }
    if (req->models && (pn->model < 0 || !((req->models >> pn->model) & 1))) {
        snprintf(out, len, "the node's GPU model is not one the pod allows (%s)",
                 POOL_ANN_POD_GPU_MODEL);
        return;
    }
    uint32_t gpus = pn->gpu_count < PLACEMENT_MAX_GPUS ? pn->gpu_count : PLACEMENT_MAX_GPUS;
    uint32_t usable = 0, sick = 0, memory_only = 0, most_cores = 0;
    uint64_t largest = 0, largest_total = 0;
    for (uint32_t g = 0; g < gpus; g++) {
        uint64_t free = placement_gpu_free(pn, g);
        uint32_t cores = placement_gpu_cores_free(pn, g);
        if (pn->unhealthy & (1u << g))
            sick++;
        else if (free >= req->units && cores >= req->cores)
            usable++;
        else if (free >= req->units)
            memory_only++;
        if (!(pn->unhealthy & (1u << g)) && cores > most_cores)
            most_cores = cores;
        if (free > largest || (free == largest && pn->gpu_total[g] > largest_total)) {
            largest = free;
            largest_total = pn->gpu_total[g];
        }
    }
    if (req->gpu_count > gpus - sick) {
        snprintf(out, len, "the pod needs %u GPUs, the node has %u healthy of %u", req->gpu_count,
                 gpus - sick, gpus);
        return;
    }
    if (memory_only > 0 && usable < req->gpu_count) {
        /* The memory is there; the compute share is what is booked. */
        snprintf(out, len,
                 "Insufficient GPU cores in one device: the pod needs %u %s on each of %u "
                 "GPU(s), %u GPU(s) with its memory free have that many (most free %u of %d)",
                 req->cores, POOL_RES_GPU_CORES, req->gpu_count, usable, most_cores,
                 POOL_GPU_CORES_PER_GPU);
        return;
    }
    snprintf(out, len,
             "Insufficient GPU Memory in one device: the pod needs %llu on each of %u GPU(s), "
             "%u GPU(s) have that free (largest free %llu of %llu)%s",
             (unsigned long long)req->units, req->gpu_count, usable, (unsigned long long)largest,
             (unsigned long long)largest_total, sick ? ", some GPUs unhealthy" : "");
}

void cache_evaluate(struct cache *cache, const struct cache_query *q, const char *const *names,
                    size_t n, cache_verdict_fn verdict, void *ctx, double *scores)
{
    char reason[CACHE_REASON_LEN];
    pthread_rwlock_rdlock(&cache->nodes_lock);
    for (size_t i = 0; i < n; i++) {
        struct table_entry *e = table_find(&cache->nodes, names[i]);
        struct cache_node *node = e ? table_container(e, struct cache_node, entry) : NULL;
        bool fits = false;
        double score = PLACEMENT_NO_FIT;
        reason[0] = '\0';
        if (node)
            pthread_mutex_lock(&node->lock);
        if (!node || !node->present) {
            snprintf(reason, sizeof(reason), "node %.100s is not in the extender's cache",
                     names[i]);
        } else if (q->pod_reason[0]) {
            snprintf(reason, sizeof(reason), "%s", q->pod_reason);
        } else if (q->gpu && !node->gpu_node) {
            snprintf(reason, sizeof(reason),
                     "The node %.100s is not for GPU share (no %s capacity)", names[i],
                     POOL_RES_GPU_MEM);
        } else if (!(fits = placement_fits(&node->pn, &q->req))) {
            explain(&node->pn, &q->req, reason, sizeof(reason));
        } else if (scores) {
            score = placement_score(q->ctx, cache->policy, &node->pn, &q->req, NULL);
        }
        if (node)
            pthread_mutex_unlock(&node->lock);
        if (scores)
            scores[i] = score;
        if (verdict)
            verdict(ctx, i, fits, fits ? NULL : reason);
    }
    pthread_rwlock_unlock(&cache->nodes_lock);
}

/* ---- bind ------------------------------------------------------------------ */

static enum cache_assume_result refuse(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum cache_assume_result refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return CACHE_REFUSED;
}

/* Checks the pod record against a bind; state_lock held. */
/* assume_check_pod(): retry on the node of a held charge (not public). */
#define ASSUME_RETRY_HELD 1

static enum cache_assume_result assume_check_pod(struct cache *cache, struct cache_pod **podp,
                                                 const char *uid, const char *ns, const char *name,
                                                 const char *node_name, const struct pod_facts *f,
                                                 char *err, size_t errlen)
{
    struct cache_pod *pod = *podp;
    /* A UID names one pod for good: a request pairing it with another
     * pod's name would charge one pod and write to the other. */
    if (pod && ns && name && (strcmp(pod->ns, ns) != 0 || strcmp(pod->name, name) != 0))
        return refuse(err, errlen, "PodUID %s belongs to pod %s/%s, not %s/%s", uid, pod->ns,
                      pod->name, ns, name);
    if (f && ns && name && (strcmp(f->ns, ns) != 0 || strcmp(f->name, name) != 0))
        return refuse(err, errlen, "PodUID %s belongs to pod %s/%s, not %s/%s", uid, f->ns, f->name,
                      ns, name);
    if (pod && pod->state == POD_BINDING)
        return refuse(err, errlen, "a bind of pod %s/%s is already in progress", pod->ns,
                      pod->name);
    if (pod && pod->state == POD_UNKNOWN && !pod->bound) {
        int64_t left = pod->hold_until - clock_now_ns();
        if (left > 0 && pod->node && strcmp(pod->node->name, node_name) == 0)
            return (enum cache_assume_result)ASSUME_RETRY_HELD;
        if (left > 0)
            return refuse(err, errlen,
                          "the outcome of an earlier Binding of pod %s/%s to %s is not known yet "
                          "(its charge is held %.1f s more); retry later",
                          pod->ns, pod->name, pod->node ? pod->node->name : "?",
                          (double)left / 1e9);
        return CACHE_UNKNOWN_EXPIRED;
    }
    if (pod && (pod->bound || pod->state == POD_ASSUMED))
        return refuse(err, errlen, "pod %s/%s is already bound to node %s", pod->ns, pod->name,
                      pod->node ? pod->node->name : "?");
    if (!f && (!pod || !pod->known))
        return CACHE_NEED_POD;
    if (f) {
        if (f->node_name)
            return refuse(err, errlen, "pod %s/%s is already bound to node %s", f->ns, f->name,
                          f->node_name);
        if (f->deleting || f->terminated)
            return refuse(err, errlen, "pod %s/%s is %s", f->ns, f->name,
                          f->deleting ? "being deleted" : "terminated");
        if (!pod && !(pod = pod_create(cache, uid, f->ns, f->name)))
            return refuse(err, errlen, "out of memory");
        *podp = pod;
        if (pod_set_demand(pod, f) < 0)
            return refuse(err, errlen, "out of memory");
    }
    return CACHE_ASSUMED;
}

enum cache_assume_result cache_assume(struct cache *cache, const char *uid, const char *ns,
                                      const char *name, const char *node_name,
                                      const struct pod_facts *f, struct cache_pod **handle,
                                      struct cache_assumption *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    *handle = NULL;
    pthread_mutex_lock(&cache->state_lock);
    struct cache_pod *pod = pod_find(cache, uid);
    enum cache_assume_result r =
        assume_check_pod(cache, &pod, uid, ns, name, node_name, f, err, errlen);
    if ((int)r == ASSUME_RETRY_HELD) {
        struct cache_node *held = pod->node;
        pthread_mutex_lock(&held->lock);
        out->gpu_mask = pod->charge.gpu_mask;
        out->gpu_units = pod->charge.gpu_mask ? pod->charge.gpu_units : 0;
        out->pod_memory = pod->gpu_memory;
        out->device_memory =
            pod->charge.gpu_mask ? held->pn.gpu_total[__builtin_ctz(pod->charge.gpu_mask)] : 0;
        pthread_mutex_unlock(&held->lock);
        out->held = true;
        out->held_until_ns = pod->hold_until;
        pod_set_state(cache, pod, POD_BINDING);
        *handle = pod;
        r = CACHE_ASSUMED;
        goto out;
    }
    if (r != CACHE_ASSUMED)
        goto out;
    struct pod_facts demand = {.name = pod->name,
                               .ns = pod->ns,
                               .uid = uid,
                               .cpu_milli = pod->cpu,
                               .memory_bytes = pod->memory,
                               .gpu_memory = pod->gpu_memory,
                               .gpu_cores = pod->gpu_cores,
                               .gpu_count = pod->gpu_count,
                               .gpu_model = pod->gpu_model};
    struct cache_query q;
    if (cache_query_init(cache, &demand, false, false, &q, err, errlen) < 0) {
        r = CACHE_REFUSED;
        goto out;
    }
    if (q.pod_reason[0]) {
        r = refuse(err, errlen, "%s", q.pod_reason);
        goto out;
    }
    struct cache_node *node = node_find(cache, node_name);
    if (!node || !node->present) {
        r = refuse(err, errlen, "node %s is not in the extender's cache", node_name);
        goto out;
    }
    pthread_mutex_lock(&node->lock);
    struct placement_choice choice = {0};
    int chosen = -1;
    if (!q.gpu || node->gpu_node) {
        pthread_mutex_lock(&cache->model_lock);
        chosen = placement_choose(&cache->ctx, cache->policy, &node->pn, &q.req, &choice);
        pthread_mutex_unlock(&cache->model_lock);
    }
    if (chosen < 0) {
        char why[CACHE_REASON_LEN];
        if (q.gpu && !node->gpu_node)
            snprintf(why, sizeof(why), "no %s capacity", POOL_RES_GPU_MEM);
        else
            explain(&node->pn, &q.req, why, sizeof(why));
        pthread_mutex_unlock(&node->lock);
        r = refuse(err, errlen, "pod %s/%s does not fit on node %s: %s", pod->ns, pod->name,
                   node_name, why);
        goto out;
    }
    struct charge c = {.cpu = q.req.cpu,
                       .memory = q.req.memory,
                       .gpu_units = q.req.units,
                       .gpu_cores = q.req.cores};
    for (uint32_t k = 0; k < choice.count; k++)
        c.gpu_mask |= 1u << choice.gpu[k];
    charge_apply_locked(node, &c, true);
    out->gpu_mask = c.gpu_mask;
    out->gpu_units = c.gpu_mask ? c.gpu_units : 0;
    out->pod_memory = pod->gpu_memory;
    out->device_memory = choice.count ? node->pn.gpu_total[choice.gpu[0]] : 0;
    pthread_mutex_unlock(&node->lock);
    /* The charge is applied; record it (pod_charge would apply it again). */
    pod_uncharge(cache, pod);
    node->pods++;
    pod->node = node;
    pod->charge = c;
    pod_set_state(cache, pod, POD_BINDING);
    *handle = pod;
out:
    pthread_mutex_unlock(&cache->state_lock);
    return r;
}

void cache_confirm(struct cache *cache, struct cache_pod *pod)
{
    pthread_mutex_lock(&cache->state_lock);
    if (pod->gone)
        pod_remove(cache, pod);
    else
        pod_set_state(cache, pod, pod->bound ? POD_OBSERVED : POD_ASSUMED);
    pthread_mutex_unlock(&cache->state_lock);
}

void cache_unknown(struct cache *cache, struct cache_pod *pod, int64_t hold_until_ns)
{
    pthread_mutex_lock(&cache->state_lock);
    if (pod->gone) {
        pod_remove(cache, pod);
    } else if (pod->bound) {
        pod_set_state(cache, pod, POD_OBSERVED); /* the API's view is here already */
    } else {
        pod->hold_until = hold_until_ns;
        pod_set_state(cache, pod, POD_UNKNOWN);
    }
    pthread_mutex_unlock(&cache->state_lock);
}

bool cache_unknown_release(struct cache *cache, const char *uid)
{
    bool released = false;
    pthread_mutex_lock(&cache->state_lock);
    struct cache_pod *pod = pod_find(cache, uid);
    if (pod && pod->state == POD_UNKNOWN && !pod->bound && clock_now_ns() >= pod->hold_until) {
        pod_uncharge(cache, pod);
        pod_set_state(cache, pod, POD_OBSERVED);
        released = true;
    }
    pthread_mutex_unlock(&cache->state_lock);
    return released;
}

void cache_rollback(struct cache *cache, struct cache_pod *pod)
{
    pthread_mutex_lock(&cache->state_lock);
    if (!pod->bound)
        pod_uncharge(cache, pod);
    pod_set_state(cache, pod, POD_OBSERVED);
    if (pod->gone)
        pod_remove(cache, pod);
    pthread_mutex_unlock(&cache->state_lock);
}

void cache_stats(struct cache *cache, struct cache_stats *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&cache->state_lock);
    size_t i;
    for (struct table_entry *e = table_first(&cache->nodes, &i); e;
         e = table_next(&cache->nodes, &i, e)) {
        struct cache_node *node = table_container(e, struct cache_node, entry);
        out->nodes += node->present;
        out->gpu_nodes += node->present && node->gpu_node;
    }
    out->pods = cache->pods.count;
    out->assumed = cache->assumed;
    pthread_mutex_unlock(&cache->state_lock);
}

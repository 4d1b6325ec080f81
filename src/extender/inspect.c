/* inspect.c -- gpushare's /inspect view of the cache (see cache.h).
 *
 *   {"nodes":[{"name":"n1","totalGPU":32,"usedGPU":6,
 *              "devs":[{"id":0,"totalGPU":16,"usedGPU":6,
 *                       "pods":[{"name":"p","namespace":"default","usedGPU":6}]}, ...]}],
 *    "error":"..."}     (error only when a named node is unknown)
 *
 * usedGPU counts what the cache charges, assumed binds included, so the
 * view is what the next filter sees. Each dev also says "healthy",
 * "totalCores" and "usedCores" (gpupool.io/gpu-cores booked), and each pod
 * its "usedCores" (additions; gpushare's readers ignore unknown keys).
 *
 * state_lock is held only to copy what the view needs into a compact
 * snapshot (numbers, and names into one string block); the JSON values --
 * the slow part, about 100,000 of them at 5,000 nodes -- are built after
 * it is released, so binds and the reflectors are not kept waiting. */
#include "cache_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct inspect_node {
    size_t name; /* offset into the string block */
    uint32_t gpu_count, unhealthy;
    uint64_t total[PLACEMENT_MAX_GPUS], used[PLACEMENT_MAX_GPUS];
    uint32_t cores_total[PLACEMENT_MAX_GPUS], cores_used[PLACEMENT_MAX_GPUS];
};

struct inspect_pod {
    size_t node;     /* index into nodes */
    size_t name, ns; /* offsets into the string block */
    uint32_t gpu_mask;
    uint32_t gpu_cores;
    uint64_t gpu_units;
};

/* What the view shows, copied under state_lock. Grows by doubling; oom
 * sticks, and the view is then refused as a whole. */
struct inspect_snapshot {
    struct inspect_node *nodes;
    size_t node_count, node_cap;
    struct inspect_pod *pods;
    size_t pod_count, pod_cap;
    char *strings;
    size_t strings_len, strings_cap;
    bool oom;
};

static bool grow(void **array, size_t *cap, size_t need, size_t size, bool *oom)
{
    if (*oom)
        return false;
    if (need <= *cap)
        return true;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*array, cap2 * size);
    if (!p) {
        *oom = true;
        return false;
    }
    *array = p;
    *cap = cap2;
    return true;
}

static size_t snapshot_string(struct inspect_snapshot *s, const char *text)
{
    size_t n = strlen(text) + 1, at = s->strings_len;
    if (!grow((void **)&s->strings, &s->strings_cap, at + n, 1, &s->oom))
        return 0;
    memcpy(s->strings + at, text, n);
    s->strings_len += n;
    return at;
}

/* state_lock held. node->scratch remembers the node's index (+1) for the
 * pod walk. */
static void snapshot_node(struct inspect_snapshot *s, struct cache_node *node)
{
    if (!grow((void **)&s->nodes, &s->node_cap, s->node_count + 1, sizeof(*s->nodes), &s->oom))
        return;
    struct inspect_node *n = &s->nodes[s->node_count];
    n->name = snapshot_string(s, node->name);
    pthread_mutex_lock(&node->lock);
    const struct placement_node *pn = &node->pn;
    n->gpu_count = pn->gpu_count < PLACEMENT_MAX_GPUS ? pn->gpu_count : PLACEMENT_MAX_GPUS;
    n->unhealthy = pn->unhealthy;
    memcpy(n->total, pn->gpu_total, sizeof(n->total));
    memcpy(n->used, pn->gpu_used, sizeof(n->used));
    memcpy(n->cores_total, pn->cores_total, sizeof(n->cores_total));
    memcpy(n->cores_used, pn->cores_used, sizeof(n->cores_used));
    pthread_mutex_unlock(&node->lock);
    node->scratch = (void *)(uintptr_t)++s->node_count;
}

static void snapshot_pod(struct inspect_snapshot *s, const struct cache_pod *pod)
{
    uintptr_t node = pod->node ? (uintptr_t)pod->node->scratch : 0;
    if (!node || !pod->charge.gpu_mask)
        return;
    if (!grow((void **)&s->pods, &s->pod_cap, s->pod_count + 1, sizeof(*s->pods), &s->oom))
        return;
    struct inspect_pod *p = &s->pods[s->pod_count++];
    p->node = node - 1;
    p->name = snapshot_string(s, pod->name);
    p->ns = snapshot_string(s, pod->ns);
    p->gpu_mask = pod->charge.gpu_mask;
    p->gpu_units = pod->charge.gpu_units;
    p->gpu_cores = pod->charge.gpu_cores;
}

static void snapshot_take(struct cache *cache, const char *name, struct inspect_snapshot *s)
{
    size_t i;
    struct table_entry *e;
    pthread_mutex_lock(&cache->state_lock);
    for (e = table_first(&cache->nodes, &i); e; e = table_next(&cache->nodes, &i, e)) {
        struct cache_node *node = table_container(e, struct cache_node, entry);
        node->scratch = NULL;
        if (!node->present || !node->gpu_node || (name && strcmp(name, node->name) != 0))
            continue;
        snapshot_node(s, node);
    }
    for (e = table_first(&cache->pods, &i); e; e = table_next(&cache->pods, &i, e))
        snapshot_pod(s, table_container(e, struct cache_pod, entry));
    for (e = table_first(&cache->nodes, &i); e; e = table_next(&cache->nodes, &i, e))
        table_container(e, struct cache_node, entry)->scratch = NULL;
    pthread_mutex_unlock(&cache->state_lock);
}

static void snapshot_free(struct inspect_snapshot *s)
{
    free(s->nodes);
    free(s->pods);
    free(s->strings);
}

/* The node's object; *devs_out borrows its "devs" array. */
static json_t *node_json(const struct inspect_snapshot *s, const struct inspect_node *n,
                         json_t **devs_out)
{
    json_t *devs = json_array();
    json_t *obj = json_pack("{s:s, s:I, s:I, s:o}", "name", s->strings + n->name, "totalGPU",
                            (json_int_t)0, "usedGPU", (json_int_t)0, "devs", devs);
    *devs_out = obj ? devs : NULL;
    if (!obj)
        return NULL;
    json_int_t total = 0, used = 0;
    for (uint32_t g = 0; g < n->gpu_count; g++) {
        total += (json_int_t)n->total[g];
        used += (json_int_t)n->used[g];
        json_array_append_new(devs, json_pack("{s:i, s:I, s:I, s:b, s:I, s:I, s:[]}", "id", (int)g,
                                              "totalGPU", (json_int_t)n->total[g], "usedGPU",
                                              (json_int_t)n->used[g], "healthy",
                                              !(n->unhealthy & (1u << g)), "totalCores",
                                              (json_int_t)n->cores_total[g], "usedCores",
                                              (json_int_t)n->cores_used[g], "pods"));
    }
    json_object_set_new(obj, "totalGPU", json_integer(total));
    json_object_set_new(obj, "usedGPU", json_integer(used));
    return obj;
}

static void add_pod(const struct inspect_snapshot *s, const struct inspect_pod *p, json_t *devs)
{
    for (uint32_t g = 0; g < PLACEMENT_MAX_GPUS; g++) {
        json_t *dev = json_array_get(devs, g);
        if (!(p->gpu_mask & (1u << g)) || !dev)
            continue;
        json_array_append_new(json_object_get(dev, "pods"),
                              json_pack("{s:s, s:s, s:I, s:I}", "name", s->strings + p->name,
                                        "namespace", s->strings + p->ns, "usedGPU",
                                        (json_int_t)p->gpu_units, "usedCores",
                                        (json_int_t)p->gpu_cores));
    }
}

json_t *cache_inspect(struct cache *cache, const char *name)
{
    struct inspect_snapshot s = {.oom = false};
    snapshot_take(cache, name, &s);
    json_t *nodes = json_array();
    json_t *result = json_pack("{s:o}", "nodes", nodes);
    json_t **devs = calloc(s.node_count ? s.node_count : 1, sizeof(*devs));
    if (!result || !devs || s.oom) {
        json_decref(result);
        free(devs);
        snapshot_free(&s);
        return NULL;
    }
    for (size_t i = 0; i < s.node_count; i++)
        json_array_append_new(nodes, node_json(&s, &s.nodes[i], &devs[i]));
    for (size_t i = 0; i < s.pod_count; i++)
        if (devs[s.pods[i].node])
            add_pod(&s, &s.pods[i], devs[s.pods[i].node]);
    free(devs);
    snapshot_free(&s);
    if (name && json_array_size(nodes) == 0) {
        char msg[320];
        snprintf(msg, sizeof(msg), "node %.256s is not a GPU-sharing node in the extender's cache",
                 name);
        json_object_set_new(result, "error", json_string(msg));
    }
    return result;
}

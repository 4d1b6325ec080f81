/* inspect.c -- gpushare's /inspect view of the cache (see cache.h).
 *
 *   {"nodes":[{"name":"n1","totalGPU":32,"usedGPU":6,
 *              "devs":[{"id":0,"totalGPU":16,"usedGPU":6,
 *                       "pods":[{"name":"p","namespace":"default","usedGPU":6}]}, ...]}],
 *    "error":"..."}     (error only when a named node is unknown)
 *
 * usedGPU counts what the cache charges, assumed binds included, so the
 * view is what the next filter sees. Each dev also says "healthy" (an
 * addition; gpushare's readers ignore unknown keys). */
#include "cache_internal.h"

#include <stdio.h>
#include <string.h>

static json_t *node_json(struct cache_node *node)
{
    json_t *devs = json_array();
    json_t *obj = json_pack("{s:s, s:I, s:I, s:o}", "name", node->name, "totalGPU", (json_int_t)0,
                            "usedGPU", (json_int_t)0, "devs", devs);
    if (!obj)
        return NULL;
    pthread_mutex_lock(&node->lock);
    const struct placement_node *pn = &node->pn;
    json_int_t total = 0, used = 0;
    for (uint32_t g = 0; g < pn->gpu_count && g < PLACEMENT_MAX_GPUS; g++) {
        total += (json_int_t)pn->gpu_total[g];
        used += (json_int_t)pn->gpu_used[g];
        json_array_append_new(devs, json_pack("{s:i, s:I, s:I, s:b, s:[]}", "id", (int)g,
                                              "totalGPU", (json_int_t)pn->gpu_total[g], "usedGPU",
                                              (json_int_t)pn->gpu_used[g], "healthy",
                                              !(pn->unhealthy & (1u << g)), "pods"));
    }
    pthread_mutex_unlock(&node->lock);
    json_object_set_new(obj, "totalGPU", json_integer(total));
    json_object_set_new(obj, "usedGPU", json_integer(used));
    node->scratch = devs;
    return obj;
}

static void add_pod(struct cache_pod *pod)
{
    json_t *devs = pod->node ? pod->node->scratch : NULL;
    if (!devs || !pod->charge.gpu_mask)
        return;
    for (uint32_t g = 0; g < PLACEMENT_MAX_GPUS; g++) {
        json_t *dev = json_array_get(devs, g);
        if (!(pod->charge.gpu_mask & (1u << g)) || !dev)
            continue;
        json_array_append_new(json_object_get(dev, "pods"),
                              json_pack("{s:s, s:s, s:I}", "name", pod->name, "namespace", pod->ns,
                                        "usedGPU", (json_int_t)pod->charge.gpu_units));
    }
}

json_t *cache_inspect(struct cache *cache, const char *name)
{
    json_t *nodes = json_array();
    json_t *result = json_pack("{s:o}", "nodes", nodes);
    if (!result)
        return NULL;
    size_t i;
    struct table_entry *e;
    pthread_mutex_lock(&cache->state_lock);
    for (e = table_first(&cache->nodes, &i); e; e = table_next(&cache->nodes, &i, e)) {
        struct cache_node *node = table_container(e, struct cache_node, entry);
        node->scratch = NULL;
        if (!node->present || !node->gpu_node || (name && strcmp(name, node->name) != 0))
            continue;
        json_array_append_new(nodes, node_json(node));
    }
    for (e = table_first(&cache->pods, &i); e; e = table_next(&cache->pods, &i, e))
        add_pod(table_container(e, struct cache_pod, entry));
    for (e = table_first(&cache->nodes, &i); e; e = table_next(&cache->nodes, &i, e))
        table_container(e, struct cache_node, entry)->scratch = NULL;
    pthread_mutex_unlock(&cache->state_lock);
    if (name && json_array_size(nodes) == 0) {
        char msg[320];
        snprintf(msg, sizeof(msg), "node %.256s is not a GPU-sharing node in the extender's cache",
                 name);
        json_object_set_new(result, "error", json_string(msg));
    }
    return result;
}

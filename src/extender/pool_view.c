/* pool_view.c -- the pool at a glance for /ui/pool.json and /metrics (see pool_view.h). */
#include "pool_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"
#include "buf.h"

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static bool is_shown(const struct cache_node *node)
{
    return node && node->present && node->gpu_node;
}

/* The median per-GPU share of the pods charged on GPUs (state_lock held). */
static int median_share(struct cache *cache, uint64_t *median, uint64_t *gpu_pods)
{
    size_t cap = cache->pods.count, n = 0, i;
    uint64_t *shares = malloc(sizeof(*shares) * (cap ? cap : 1));
    if (!shares)
        return -1;
    for (struct table_entry *e = table_first(&cache->pods, &i); e;
         e = table_next(&cache->pods, &i, e)) {
        const struct cache_pod *pod = table_container(e, struct cache_pod, entry);
        if (pod->charge.gpu_mask && is_shown(pod->node) && n < cap)
            shares[n++] = pod->charge.gpu_units;
    }
    qsort(shares, n, sizeof(*shares), compare_u64);
    /* The lower median: a share some pod really asked for. */
    *median = n ? shares[(n - 1) / 2] : 0;
    *gpu_pods = n;
    free(shares);
    return 0;
}

/* Adds one GPU to the totals. */
static void add_gpu(struct pool_totals *t, const struct pool_gpu *gpu)
{
    uint64_t free_units = gpu->used < gpu->total ? gpu->total - gpu->used : 0;
    t->gpus++;
    t->memory_total += gpu->total;
    t->memory_used += gpu->used;
    t->gpus_in_use += gpu->used > 0;
    t->gpus_full += gpu->total > 0 && free_units == 0;
    t->cores_total += gpu->cores_total;
    t->cores_used += gpu->cores_used;
    if (!gpu->healthy) {
        t->unhealthy_gpus++;
    } else {
        t->memory_free += free_units;
        if (free_units > 0 && free_units < t->threshold)
            t->memory_free_fragmented += free_units;
    }
}

/* A consistent copy of one node's capacity and usage. */
static void node_copy(struct cache_node *node, struct placement_node *pn)
{
    pthread_mutex_lock(&node->lock);
    *pn = node->pn;
    pthread_mutex_unlock(&node->lock);
}

/* Adds one node's GPUs to the totals and reports them. */
static void walk_node(struct cache_node *node, struct pool_totals *t, pool_gpu_fn gpu_fn, void *ctx)
{
    struct placement_node pn;
    node_copy(node, &pn);
    t->nodes++;
    for (uint32_t g = 0; g < pn.gpu_count && g < PLACEMENT_MAX_GPUS; g++) {
        struct pool_gpu gpu = {node->name,
                               node->address,
                               g,
                               pn.gpu_total[g],
                               pn.gpu_used[g],
                               pn.cores_total[g],
                               pn.cores_used[g],
                               !(pn.unhealthy & (1u << g))};
        add_gpu(t, &gpu);
        if (gpu_fn)
            gpu_fn(ctx, &gpu);
    }
}

int pool_walk(struct cache *cache, pool_gpu_fn gpu_fn, void *ctx, struct pool_totals *totals,
              char *err, size_t errlen)
{
    memset(totals, 0, sizeof(*totals));
    size_t i;
    pthread_mutex_lock(&cache->state_lock);
    if (median_share(cache, &totals->threshold, &totals->gpu_pods) < 0) {
        pthread_mutex_unlock(&cache->state_lock);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (struct table_entry *e = table_first(&cache->nodes, &i); e;
         e = table_next(&cache->nodes, &i, e)) {
        struct cache_node *node = table_container(e, struct cache_node, entry);
        if (is_shown(node))
            walk_node(node, totals, gpu_fn, ctx);
    }
    pthread_mutex_unlock(&cache->state_lock);
    totals->fragmentation =
        totals->memory_free ? (double)totals->memory_free_fragmented / (double)totals->memory_free
                            : 0.0;
    return 0;
}

/* ---- /ui/pool.json ------------------------------------------------------- */

/* A GPU pod, for grouping pods by node after one pass over the pod table. */
struct placed_pod {
    size_t node; /* index into the sorted nodes */
    const struct cache_pod *pod;
};

static int compare_nodes(const void *a, const void *b)
{
    const struct cache_node *x = *(const struct cache_node *const *)a;
    const struct cache_node *y = *(const struct cache_node *const *)b;
    return strcmp(x->name, y->name);
}

static int compare_placed(const void *a, const void *b)
{
    const struct placed_pod *x = a, *y = b;
    return x->node < y->node ? -1 : x->node > y->node;
}

static void emit_gpu(void *ctx, const struct pool_gpu *gpu)
{
    struct buf *out = ctx;
    buf_add(out, gpu->index ? ",[" : "[", gpu->index ? 2 : 1);
    buf_u64(out, gpu->total);
    buf_add(out, ",", 1);
    buf_u64(out, gpu->used);
    buf_str(out, gpu->healthy ? ",true,[" : ",false,[");
    /* the pods follow (emit_node), then the cores and "]" */
}

/* One node: {"name":..,"model":..,
 * "gpus":[[total,used,healthy,[[ns,name,amount,cores],..],cores_total,cores_used],..]}.
 * pods[0..npods-1] are this node's GPU pods. */
static void emit_node(struct cache *cache, struct cache_node *node, const struct placed_pod *pods,
                      size_t npods, struct pool_totals *t, struct buf *out)
{
    struct placement_node pn;
    node_copy(node, &pn);
    buf_str(out, "{\"name\":");
    buf_json_string(out, node->name);
    pthread_mutex_lock(&cache->model_lock);
    const char *model =
        pn.model == PLACEMENT_MODEL_NONE ? NULL : placement_model_name(&cache->ctx, pn.model);
    buf_str(out, ",\"model\":");
    if (model)
        buf_json_string(out, model);
    else
        buf_str(out, "null");
    pthread_mutex_unlock(&cache->model_lock);
    buf_str(out, ",\"gpus\":[");
    t->nodes++;
    for (uint32_t g = 0; g < pn.gpu_count && g < PLACEMENT_MAX_GPUS; g++) {
        struct pool_gpu gpu = {node->name,
                               node->address,
                               g,
                               pn.gpu_total[g],
                               pn.gpu_used[g],
                               pn.cores_total[g],
                               pn.cores_used[g],
                               !(pn.unhealthy & (1u << g))};
        add_gpu(t, &gpu);
        emit_gpu(out, &gpu);
        bool first = true;
        for (size_t k = 0; k < npods; k++) {
            const struct cache_pod *pod = pods[k].pod;
            if (!(pod->charge.gpu_mask & (1u << g)))
                continue;
            buf_add(out, first ? "[" : ",[", first ? 1 : 2);
            buf_json_string(out, pod->ns);
            buf_add(out, ",", 1);
            buf_json_string(out, pod->name);
            buf_add(out, ",", 1);
            buf_u64(out, pod->charge.gpu_units);
            buf_add(out, ",", 1);
            buf_u64(out, pod->charge.gpu_cores);
            buf_add(out, "]", 1);
            first = false;
        }
        buf_add(out, "],", 2);
        buf_u64(out, gpu.cores_total);
        buf_add(out, ",", 1);
        buf_u64(out, gpu.cores_used);
        buf_add(out, "]", 1);
    }
    buf_add(out, "]}", 2);
}

static void emit_totals(const struct pool_totals *t, struct buf *out)
{
    buf_printf(out,
               "\"totals\":{\"nodes\":%llu,\"gpus\":%llu,\"unhealthy_gpus\":%llu,"
               "\"gpus_in_use\":%llu,\"gpus_full\":%llu,\"memory_total\":%llu,"
               "\"memory_used\":%llu,\"memory_free\":%llu,\"memory_free_fragmented\":%llu,",
               (unsigned long long)t->nodes, (unsigned long long)t->gpus,
               (unsigned long long)t->unhealthy_gpus, (unsigned long long)t->gpus_in_use,
               (unsigned long long)t->gpus_full, (unsigned long long)t->memory_total,
               (unsigned long long)t->memory_used, (unsigned long long)t->memory_free,
               (unsigned long long)t->memory_free_fragmented);
    buf_printf(out,
               "\"gpu_pods\":%llu,\"fragmentation_threshold\":%llu,"
               "\"fragmentation_percent\":%.10g,\"cores_total\":%llu,\"cores_used\":%llu}",
               (unsigned long long)t->gpu_pods, (unsigned long long)t->threshold,
               100.0 * t->fragmentation, (unsigned long long)t->cores_total,
               (unsigned long long)t->cores_used);
}

/* Sorted GPU nodes and their GPU pods grouped by node (state_lock held). */
static int collect(struct cache *cache, struct cache_node ***nodes_out, size_t *nn,
                   struct placed_pod **pods_out, size_t *np)
{
    size_t i, n = 0, p = 0;
    struct cache_node **nodes = malloc(sizeof(*nodes) * (cache->nodes.count + 1));
    struct placed_pod *pods = malloc(sizeof(*pods) * (cache->pods.count + 1));
    if (!nodes || !pods) {
        free(nodes);
        free(pods);
        return -1;
    }
    for (struct table_entry *e = table_first(&cache->nodes, &i); e;
         e = table_next(&cache->nodes, &i, e)) {
        struct cache_node *node = table_container(e, struct cache_node, entry);
        if (is_shown(node) && n < cache->nodes.count)
            nodes[n++] = node;
    }
    qsort(nodes, n, sizeof(*nodes), compare_nodes);
    /* scratch = position + 1, so each pod finds its node's slot in O(1). */
    for (size_t k = 0; k < n; k++)
        nodes[k]->scratch = (void *)(uintptr_t)(k + 1);
    for (struct table_entry *e = table_first(&cache->pods, &i); e;
         e = table_next(&cache->pods, &i, e)) {
        const struct cache_pod *pod = table_container(e, struct cache_pod, entry);
        if (pod->charge.gpu_mask && is_shown(pod->node) && pod->node->scratch &&
            p < cache->pods.count)
            pods[p++] = (struct placed_pod){(size_t)(uintptr_t)pod->node->scratch - 1, pod};
    }
    for (size_t k = 0; k < n; k++)
        nodes[k]->scratch = NULL;
    qsort(pods, p, sizeof(*pods), compare_placed);
    *nodes_out = nodes;
    *pods_out = pods;
    *nn = n;
    *np = p;
    return 0;
}

char *pool_json(struct cache *cache, const char *unit, size_t *len)
{
    struct pool_totals t = {0};
    struct buf out = {0};
    struct cache_node **nodes;
    struct placed_pod *pods;
    size_t n, np;
    buf_str(&out, "{\"unit\":");
    buf_json_string(&out, unit);
    buf_str(&out, ",\"policy\":");
    buf_json_string(&out, placement_policy_name(cache->policy));
    buf_str(&out, ",\"nodes\":[");
    pthread_mutex_lock(&cache->state_lock);
    if (median_share(cache, &t.threshold, &t.gpu_pods) < 0 ||
        collect(cache, &nodes, &n, &pods, &np) < 0) {
        pthread_mutex_unlock(&cache->state_lock);
        free(buf_take(&out, len));
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t first = k;
        while (k < np && pods[k].node == i)
            k++;
        if (i)
            buf_add(&out, ",", 1);
        emit_node(cache, nodes[i], pods + first, k - first, &t, &out);
    }
    pthread_mutex_unlock(&cache->state_lock);
    free(nodes);
    free(pods);
    t.fragmentation =
        t.memory_free ? (double)t.memory_free_fragmented / (double)t.memory_free : 0.0;
    buf_add(&out, "],", 2);
    emit_totals(&t, &out);
    buf_add(&out, "}", 1);
    return buf_take(&out, len);
}

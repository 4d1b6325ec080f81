/* render_json.c -- `-o json` (render.h): the whole pool as one document.
 *
 *   {"kind": "GPUPool", "unit": "GiB",
 *    "cluster": {"nodes", "gpus", "unhealthyGPUs",
 *                "memory": {"allocated", "total", "pending", "pendingPods"},
 *                "resources": [{"name", "requested", "allocatable"}]},
 *    "nodes": [{"name", "address", "unit",
 *               "memory": {"allocated", "total", "pending"},
 *               "gpus": [{"index", "model"|null, "healthy", "memory": {"allocated", "total"},
 *                         "cores": {"booked", "total"} (gpupool.io/gpu-cores),
 *                         "pods": [{"namespace", "name", "memory"}]}],
 *               "pending": [{"namespace", "name", "memory"}],
 *               "resources": [{"name", "requested", "allocatable",
 *                              "pods": [{"namespace", "name", "count"}]}]}]}
 *
 * Printed with one line per node (and one for the cluster figures), each
 * built and freed in turn. Memory is in the node's unit ("unit"); the cluster figures in the
 * top-level "unit" (MiB as soon as one node counts in MiB). "memory.allocated"
 * of a node includes its pending shares, as gpushare counts them. */
#include "render.h"

#include <string.h>

/* json_object_set_new into obj; a NULL value marks the whole build failed. */
static void set(json_t *obj, const char *key, json_t *value, bool *failed)
{
    if (!value || json_object_set_new(obj, key, value) != 0)
        *failed = true;
}

static void push(json_t *array, json_t *value, bool *failed)
{
    if (!value || json_array_append_new(array, value) != 0)
        *failed = true;
}

static json_t *pod_ref(const char *ns, const char *name, const char *key, int64_t amount)
{
    return json_pack("{s:s, s:s, s:I}", "namespace", ns, "name", name, key, (json_int_t)amount);
}

static json_t *gpu_json(const struct pool_node *n, int g, bool *failed)
{
    const struct pool_gpu *gpu = &n->gpus[g];
    json_t *pods = json_array();
    for (size_t i = 0; pods && i < n->nshares; i++) {
        const struct pool_share *s = &n->shares[i];
        for (int p = 0; p < s->nparts; p++)
            if (s->gpu[p] == g)
                push(pods, pod_ref(s->ns, s->name, "memory", s->part[p]), failed);
    }
    return json_pack("{s:i, s:s?, s:b, s:{s:I, s:I}, s:{s:I, s:I}, s:o*}", "index", g, "model",
                     gpu->model, "healthy", !gpu->unhealthy, "memory", "allocated",
                     (json_int_t)gpu->allocated, "total", (json_int_t)gpu->total, "cores", "booked",
                     (json_int_t)gpu->cores_booked, "total", (json_int_t)gpu->cores_total, "pods",
                     pods);
}

static json_t *resource_json(const struct pool_resource *r, bool *failed)
{
    json_t *pods = json_array();
    for (size_t p = 0; pods && p < r->npods; p++)
        push(pods, pod_ref(r->pods[p].ns, r->pods[p].name, "count", r->pods[p].count), failed);
    return json_pack("{s:s, s:I, s:I, s:o*}", "name", r->name, "requested",
                     (json_int_t)r->requested, "allocatable", (json_int_t)r->allocatable, "pods",
                     pods);
}

/* A DRA device: bytes, its claims with the bytes each consumes. */
static json_t *dra_json(const struct pool_dra_device *d, bool *failed)
{
    json_t *claims = json_array();
    for (size_t c = 0; claims && c < d->nclaims; c++)
        push(claims,
             json_pack("{s:s, s:s, s:I}", "namespace", d->claims[c].ns, "name", d->claims[c].name,
                       "memoryBytes", (json_int_t)d->claims[c].consumed),
             failed);
    json_t *dev = json_pack("{s:s, s:s, s:s, s:I, s:I, s:b}", "name", d->name, "driver", d->driver,
                            "pool", d->pool, "memoryBytes", (json_int_t)d->memory, "consumedBytes",
                            (json_int_t)d->consumed, "shared", d->shared);
    if (!dev) {
        json_decref(claims);
        return NULL;
    }
    set(dev, "claims", claims, failed);
    return dev;
}

static json_t *node_json(const struct pool_node *n, bool *failed)
{
    int64_t allocated = n->pending;
    for (int g = 0; g < n->ngpus; g++)
        allocated += n->gpus[g].allocated;
    json_t *node = json_pack("{s:s, s:s, s:s, s:{s:I, s:I, s:I}}", "name", n->name, "address",
                             n->address, "unit", poolapi_unit_name(pool_node_unit(n)), "memory",
                             "allocated", (json_int_t)allocated, "total", (json_int_t)n->mem_total,
                             "pending", (json_int_t)n->pending);
    json_t *gpus = json_array(), *pending = json_array(), *resources = json_array();
    for (int g = 0; gpus && g < n->ngpus; g++)
        push(gpus, gpu_json(n, g, failed), failed);
    for (size_t i = 0; pending && i < n->nshares; i++)
        if (n->shares[i].nparts == 0)
            push(pending,
                 pod_ref(n->shares[i].ns, n->shares[i].name, "memory", n->shares[i].amount),
                 failed);
    for (size_t r = 0; resources && r < n->nresources; r++)
        push(resources, resource_json(&n->resources[r], failed), failed);
    if (!node) {
        json_decref(gpus);
        json_decref(pending);
        json_decref(resources);
        return NULL;
    }
    set(node, "gpus", gpus, failed);
    set(node, "pending", pending, failed);
    set(node, "resources", resources, failed);
    if (n->ndra > 0) { /* only on DRA nodes: other nodes' JSON is as it was */
        json_t *dra = json_array();
        for (size_t i = 0; dra && i < n->ndra; i++)
            push(dra, dra_json(n->dra[i], failed), failed);
        set(node, "dra", dra, failed);
    }
    return node;
}

static json_t *cluster_json(const struct pool *pool, bool mib, bool *failed)
{
    json_int_t allocated = 0, total = 0, pending = 0, pending_pods = 0, gpus = 0, unhealthy = 0;
    json_t *resources = json_array();
    for (size_t i = 0; i < pool->nnodes; i++) {
        const struct pool_node *n = pool->nodes[i];
        json_int_t scale = mib && pool_node_unit(n) != POOL_UNIT_MIB ? 1024 : 1;
        for (int g = 0; g < n->ngpus; g++) {
            allocated += n->gpus[g].allocated * scale;
            unhealthy += n->gpus[g].unhealthy;
        }
        allocated += n->pending * scale;
        total += n->mem_total * scale;
        pending += n->pending * scale;
        pending_pods += (json_int_t)n->npending;
        gpus += n->ngpus;
        for (size_t r = 0; resources && r < n->nresources; r++) {
            const struct pool_resource *res = &n->resources[r];
            size_t k;
            json_t *entry = NULL, *e;
            json_array_foreach (resources, k, e)
                if (strcmp(json_string_value(json_object_get(e, "name")), res->name) == 0)
                    entry = e;
            if (!entry) {
                entry = json_pack("{s:s, s:I, s:I}", "name", res->name, "requested", (json_int_t)0,
                                  "allocatable", (json_int_t)0);
                push(resources, entry, failed);
                if (!entry)
                    continue;
            }
            set(entry, "requested",
                json_integer(json_integer_value(json_object_get(entry, "requested")) +
                             res->requested),
                failed);
            set(entry, "allocatable",
                json_integer(json_integer_value(json_object_get(entry, "allocatable")) +
                             res->allocatable),
                failed);
        }
    }
    return json_pack("{s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}, s:o*}", "nodes",
                     (json_int_t)pool->nnodes, "gpus", gpus, "unhealthyGPUs", unhealthy, "memory",
                     "allocated", allocated, "total", total, "pending", pending, "pendingPods",
                     pending_pods, "resources", resources);
}

/* Streamed: one node's document exists at a time, so a 5,000-node pool
 * never becomes one 5,000-node jansson tree. Each node is one line. */
static int dump_line(const char *prefix, json_t *value, const char *suffix, FILE *out)
{
    int rc = -1;
    if (value && fputs(prefix, out) != EOF &&
        json_dumpf(value, out, JSON_COMPACT | JSON_PRESERVE_ORDER) == 0 &&
        fputs(suffix, out) != EOF)
        rc = 0;
    json_decref(value);
    return rc;
}

int render_json(const struct pool *pool, FILE *out)
{
    bool failed = false, mib = false;
    for (size_t i = 0; i < pool->nnodes; i++)
        mib |= pool_node_unit(pool->nodes[i]) == POOL_UNIT_MIB;
    if (fprintf(out, "{\n  \"kind\": \"GPUPool\",\n  \"unit\": \"%s\",\n", mib ? "MiB" : "GiB") <
            0 ||
        dump_line("  \"cluster\": ", cluster_json(pool, mib, &failed), ",\n", out) != 0 ||
        fputs("  \"nodes\": [", out) == EOF)
        return -1;
    for (size_t i = 0; i < pool->nnodes && !failed; i++)
        if (dump_line(i ? ",\n    " : "\n    ", node_json(pool->nodes[i], &failed), "", out) != 0)
            return -1;
    if (failed || fputs(pool->nnodes ? "\n  ]\n}\n" : "]\n}\n", out) == EOF)
        return -1;
    return 0;
}

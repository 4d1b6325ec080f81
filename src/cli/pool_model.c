/* pool_model.c -- builds the pool view from API objects (see pool_model.h). */
#include "pool_model.h"

#include "poolapi_demand.h"
#include "poolapi_gpus.h"
#include "poolapi_index.h"
#include "poolapi_quantity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small JSON readers: absent or mistyped fields read as "none" ---- */

static const char *jstr(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* A quantity field (a string, or a bare integer) as a whole number; 0 when
 * absent or malformed. */
static int64_t jquantity(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    int64_t out = 0;
    if (json_is_integer(v))
        return json_integer_value(v) > 0 ? json_integer_value(v) : 0;
    uint64_t u;
    /* The contract's parser (err not wanted: malformed reads as none). */
    if (json_is_string(v) && poolapi_quantity_parse(json_string_value(v), 1, &u, NULL, 0) == 0 &&
        u <= INT64_MAX)
        out = (int64_t)u;
    return out;
}

static void warn_once(struct pool *pool, const char *what, const char *name)
{
    if (!pool->warning[0])
        snprintf(pool->warning, sizeof pool->warning, "%s %s", what, name ? name : "(unnamed)");
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- the name table ---- */

static size_t hash_name(const char *s)
{
    size_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static void table_put(struct pool_node **table, size_t size, struct pool_node *node)
{
    size_t i = hash_name(node->name) & (size - 1);
    while (table[i])
        i = (i + 1) & (size - 1);
    table[i] = node;
}

static int table_grow(struct pool *pool)
{
    size_t size = pool->table_size ? pool->table_size * 2 : 64;
    struct pool_node **table = calloc(size, sizeof *table);
    if (!table)
        return -1;
    for (size_t i = 0; i < pool->nnodes; i++)
        table_put(table, size, pool->nodes[i]);
    free(pool->table);
    pool->table = table;
    pool->table_size = size;
    return 0;
}

struct pool_node *pool_find(const struct pool *pool, const char *name)
{
    if (!pool->table_size || !name)
        return NULL;
    size_t i = hash_name(name) & (pool->table_size - 1);
    for (; pool->table[i]; i = (i + 1) & (pool->table_size - 1))
        if (strcmp(pool->table[i]->name, name) == 0)
            return pool->table[i];
    return NULL;
}

void pool_init(struct pool *pool, const char *only_node, const char *pod_namespace)
{
    memset(pool, 0, sizeof *pool);
    pool->only_node = only_node;
    pool->pod_namespace = pod_namespace;
}

void pool_free(struct pool *pool)
{
    for (size_t i = 0; i < pool->nnodes; i++) {
        struct pool_node *n = pool->nodes[i];
        free(n->shares);
        for (size_t r = 0; r < n->nresources; r++)
            free(n->resources[r].pods);
        free(n->resources);
        free(n->unhealthy_cm);
        free(n->dra);
    }
    for (size_t d = 0; d < pool->ndra; d++)
        free(pool->dra[d].claims);
    free(pool->dra);
    free(pool->dra_nodes);
    free(pool->nodes);
    free(pool->table);
    arena_free(&pool->arena);
    memset(pool, 0, sizeof *pool);
}

/* ---- nodes ---- */

static const char *node_address(struct pool *pool, const json_t *status)
{
    const json_t *addresses = json_object_get(status, "addresses");
    size_t i;
    const json_t *a;
    json_array_foreach (addresses, i, a) {
        const char *type = jstr(a, "type"), *address = jstr(a, "address");
        if (type && address && strcmp(type, "InternalIP") == 0)
            return arena_strdup(&pool->arena, address);
    }
    return "unknown";
}

/* gpupool.io/gpus through the contract's reader (poolapi_gpus.h).
 * Returns the GPU count (0: malformed, use the fallback; -1: out of memory). */
static int node_gpus_from_annotation(struct pool *pool, struct pool_node *n, const char *text)
{
    struct poolapi_gpu *gpus;
    size_t count;
    char why[96];
    if (poolapi_gpus_parse(text, POOL_MODEL_MAX_GPUS, &gpus, &count, why, sizeof why) != 0) {
        if (strcmp(why, "out of memory") == 0)
            return -1;
        warn_once(pool, "ignoring a malformed " POOL_ANN_NODE_GPUS " annotation on node", n->name);
        return 0;
    }
    int ngpus = (int)count;
    n->gpus = arena_calloc(&pool->arena, count, sizeof *n->gpus);
    for (size_t i = 0; n->gpus && i < count; i++) {
        struct pool_gpu *gpu = &n->gpus[i];
        gpu->total = (int64_t)gpus[i].memory; /* a JSON integer: <= INT64_MAX */
        gpu->cores_total = gpus[i].cores;     /* 100 when the annotation has none */
        gpu->model = gpus[i].has_model ? arena_strdup(&pool->arena, gpus[i].model) : NULL;
        gpu->unhealthy = !gpus[i].healthy;
        if (gpus[i].has_model && !gpu->model)
            n->gpus = NULL;
    }
    free(gpus);
    if (!n->gpus)
        return -1;
    n->gpus_annotated = true;
    return ngpus;
}

static int node_gpus(struct pool *pool, struct pool_node *n, const json_t *annotations)
{
    const char *text = jstr(annotations, POOL_ANN_NODE_GPUS);
    if (text) {
        int ngpus = node_gpus_from_annotation(pool, n, text);
        if (ngpus != 0) {
            n->ngpus = ngpus > 0 ? ngpus : 0;
            return ngpus > 0 ? 0 : -1;
        }
    }
    /* gpushare's rule: gpu-count GPUs of equal size, total / count each. */
    int64_t count = n->gpu_count < POOL_MODEL_MAX_GPUS ? n->gpu_count : POOL_MODEL_MAX_GPUS;
    if (count <= 0)
        return 0;
    n->gpus = arena_calloc(&pool->arena, (size_t)count, sizeof *n->gpus);
    if (!n->gpus)
        return -1;
    for (int64_t i = 0; i < count; i++) {
        n->gpus[i].total = n->mem_total / count;
        n->gpus[i].cores_total = POOL_GPU_CORES_PER_GPU;
    }
    n->ngpus = (int)count;
    return 0;
}

static int node_resources(struct pool *pool, struct pool_node *n, const json_t *allocatable,
                          const json_t *capacity)
{
    const char *key;
    const json_t *v;
    size_t count = 0;
    json_object_foreach ((json_t *)allocatable, key, v) {
        if (has_prefix(key, POOL_RES_NVIDIA_PREFIX) && jquantity(allocatable, key) > 0)
            count++;
    }
    if (!count)
        return 0;
    n->resources = calloc(count, sizeof *n->resources);
    if (!n->resources)
        return -1;
    json_object_foreach ((json_t *)allocatable, key, v) {
        int64_t amount = jquantity(allocatable, key);
        if (!has_prefix(key, POOL_RES_NVIDIA_PREFIX) || amount <= 0)
            continue;
        struct pool_resource *r = &n->resources[n->nresources++];
        r->name = arena_strdup(&pool->arena, key);
        r->allocatable = amount;
        r->capacity = jquantity(capacity, key);
        if (!r->name)
            return -1;
    }
    return 0;
}

static int append_node(struct pool *pool, struct pool_node *n)
{
    if (pool->nnodes == pool->nodes_cap) {
        size_t cap = pool->nodes_cap ? pool->nodes_cap * 2 : 64;
        struct pool_node **nodes = realloc(pool->nodes, cap * sizeof *nodes);
        if (!nodes)
            return -1;
        pool->nodes = nodes;
        pool->nodes_cap = cap;
    }
    if ((pool->nnodes + 1) * 2 > pool->table_size && table_grow(pool) != 0)
        return -1;
    pool->nodes[pool->nnodes++] = n;
    table_put(pool->table, pool->table_size, n);
    return 0;
}


static int by_string(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The node has DRA devices: pool->dra_nodes, sorted and deduplicated by
 * pool_dra_index() (pool_dra.h) before the nodes are read. */
static bool has_dra_node(const struct pool *pool, const char *name)
{
    return pool->ndra_nodes > 0 && bsearch(&name, pool->dra_nodes, pool->ndra_nodes,
                                           sizeof *pool->dra_nodes, by_string) != NULL;
}
int pool_add_node(struct pool *pool, const json_t *node)
{
    const json_t *meta = json_object_get(node, "metadata");
    const json_t *status = json_object_get(node, "status");
    const json_t *allocatable = json_object_get(status, "allocatable");
    const char *name = jstr(meta, "name");
    if (!name) {
        warn_once(pool, "ignoring a node without", "metadata.name");
        return 0;
    }
    if ((pool->only_node && strcmp(pool->only_node, name) != 0) || pool_find(pool, name))
        return 0;
    /* Filled on the stack: a node that is not kept costs nothing. */
    struct pool_node tmp = {.name = name};
    tmp.mem_total = jquantity(allocatable, POOL_RES_GPU_MEM);
    tmp.gpu_count = jquantity(allocatable, POOL_RES_GPU_COUNT);
    if (node_resources(pool, &tmp, allocatable, json_object_get(status, "capacity")) != 0) {
        free(tmp.resources);
        return -1;
    }
    if (!pool->only_node && tmp.mem_total <= 0 && tmp.nresources == 0 && !has_dra_node(pool, name))
        return 0; /* not a GPU node */
    struct pool_node *n = arena_alloc(&pool->arena, sizeof *n);
    if (!n) {
        free(tmp.resources);
        return -1;
    }
    *n = tmp;
    n->name = arena_strdup(&pool->arena, name);
    n->address = node_address(pool, status);
    const json_t *labels = json_object_get(meta, "labels");
    const char *product = jstr(labels, POOL_LABEL_NODE_GPU_PRODUCT);
    n->product = product ? arena_strdup(&pool->arena, product) : NULL;
    n->label_count = jquantity(labels, POOL_LABEL_NODE_GPU_PREFIX ".count");
    n->label_replicas = jquantity(labels, POOL_LABEL_NODE_GPU_PREFIX ".replicas");
    if (!n->name || !n->address || (product && !n->product) ||
        node_gpus(pool, n, json_object_get(meta, "annotations")) != 0 ||
        append_node(pool, n) != 0) {
        free(n->resources);
        return -1;
    }
    return 0;
}

const struct pool_resource *pool_node_gpu_resource(const struct pool_node *node)
{
    for (size_t r = 0; r < node->nresources; r++)
        if (strcmp(node->resources[r].name, POOL_RES_NVIDIA_GPU) == 0)
            return &node->resources[r];
    return NULL;
}

int64_t pool_node_replicas(const struct pool_node *node)
{
    return node->label_replicas > 0 ? node->label_replicas : 1;
}

int64_t pool_node_whole_gpus(const struct pool_node *node)
{
    const struct pool_resource *gpu = pool_node_gpu_resource(node);
    if (gpu == NULL)
        return 0;
    if (node->label_count > 0)
        return node->label_count;
    int64_t devices = gpu->capacity > 0 ? gpu->capacity : gpu->allocatable;
    int64_t replicas = pool_node_replicas(node);
    return (devices + replicas - 1) / replicas;
}

/* ---- unhealthy ConfigMaps ---- */

int pool_add_configmap(struct pool *pool, const json_t *configmap)
{
    const json_t *meta = json_object_get(configmap, "metadata");
    const char *name = jstr(meta, "name"), *ns = jstr(meta, "namespace");
    if (!name || !has_prefix(name, POOL_CM_UNHEALTHY_PREFIX) || (ns && strcmp(ns, "kube-system")))
        return 0;
    struct pool_node *n = pool_find(pool, name + strlen(POOL_CM_UNHEALTHY_PREFIX));
    const char *gpus = jstr(json_object_get(configmap, "data"), "gpus");
    if (!n || !gpus)
        return 0;
    /* gpushare's format: "0,3" -- items that are not integers are skipped. */
    for (const char *p = gpus; *p;) {
        char *end;
        long index = strtol(p, &end, 10);
        if (end != p && (*end == ',' || *end == '\0') && index >= 0 &&
            index < POOL_MODEL_MAX_GPUS) {
            int *list = realloc(n->unhealthy_cm, (n->nunhealthy_cm + 1) * sizeof *list);
            if (!list)
                return -1;
            list[n->nunhealthy_cm++] = (int)index;
            n->unhealthy_cm = list;
        } else {
            warn_once(pool, "ignoring a bad item in ConfigMap", name);
        }
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    return 0;
}

/* ---- pods ---- */

#define POD_RESOURCES_MAX 16

/* The nvidia.com/... requests of one pod: per resource, the walk of the
 * contract's effective-request rule (poolapi_demand.h). */
struct pod_requests {
    struct {
        const char *name;
        struct poolapi_demand demand;
    } r[POD_RESOURCES_MAX];
    size_t n;
};

/* A container's amount of a resource: its limit, else its request
 * (extended resources must have equal ones when both are set). */
static void container_requests(const json_t *container, bool init, struct pod_requests *req)
{
    const json_t *resources = json_object_get(container, "resources");
    const json_t *lists[2] = {json_object_get(resources, "limits"),
                              json_object_get(resources, "requests")};
    bool sidecar = init && poolapi_container_is_sidecar(container);
    for (int l = 0; l < 2; l++) {
        const char *key;
        const json_t *v;
        json_object_foreach ((json_t *)lists[l], key, v) {
            if (!has_prefix(key, POOL_RES_NVIDIA_PREFIX))
                continue;
            if (l == 1 && json_object_get(lists[0], key))
                continue; /* the limit already counted */
            int64_t amount = jquantity(lists[l], key);
            size_t i = 0;
            while (i < req->n && strcmp(req->r[i].name, key) != 0)
                i++;
            if (i == req->n) {
                if (req->n == POD_RESOURCES_MAX)
                    continue;
                req->r[req->n++].name = key;
            }
            if (init)
                poolapi_demand_add_init(&req->r[i].demand, (uint64_t)amount, sidecar);
            else
                poolapi_demand_add_app(&req->r[i].demand, (uint64_t)amount);
        }
    }
}

/* The pod's aliyun.com/gpu-mem by the contract's rule; 0 when the spec
 * does not read (the extender refuses such a pod; inspect shows none). */
static int64_t pod_gpu_mem(const json_t *spec)
{
    uint64_t total;
    if (poolapi_pod_demand(spec, POOL_RES_GPU_MEM, 1, &total, NULL, 0) != 0)
        return 0;
    return total > INT64_MAX ? INT64_MAX : (int64_t)total;
}

/* The pod's gpupool.io/gpu-cores by the same rule; 0 when it does not read. */
static int64_t pod_gpu_cores(const json_t *spec)
{
    uint64_t total;
    if (poolapi_pod_demand(spec, POOL_RES_GPU_CORES, 1, &total, NULL, 0) != 0)
        return 0;
    return total > INT64_MAX ? INT64_MAX : (int64_t)total;
}

static struct pool_resource *node_resource(struct pool *pool, struct pool_node *n, const char *name)
{
    for (size_t i = 0; i < n->nresources; i++)
        if (strcmp(n->resources[i].name, name) == 0)
            return &n->resources[i];
    /* Requested but not allocatable (the plugin is gone, or it is another
     * node's resource): shown with allocatable 0. */
    struct pool_resource *list = realloc(n->resources, (n->nresources + 1) * sizeof *list);
    if (!list)
        return NULL;
    n->resources = list;
    struct pool_resource *r = &list[n->nresources];
    memset(r, 0, sizeof *r);
    r->name = arena_strdup(&pool->arena, name);
    if (!r->name)
        return NULL;
    n->nresources++;
    return r;
}

static int add_device_pod(struct pool *pool, struct pool_node *n, const struct pool_pod *pod)
{
    for (size_t i = 0; i < pod->nrequests; i++) {
        struct pool_resource *r = node_resource(pool, n, pod->requests[i].resource);
        if (!r)
            return -1;
        r->requested += pod->requests[i].count;
        if (pool->pod_namespace && strcmp(pool->pod_namespace, pod->ns) != 0)
            continue;
        if (r->npods == r->cap) {
            size_t cap = r->cap ? r->cap * 2 : 4;
            struct pool_device_pod *pods = realloc(r->pods, cap * sizeof *pods);
            if (!pods)
                return -1;
            r->pods = pods;
            r->cap = cap;
        }
        r->pods[r->npods++] = (struct pool_device_pod){pod->ns, pod->name, pod->requests[i].count};
    }
    return 0;
}

/* Fills the share's parts from gpushare 2.0's allocation annotation
 * {"<container>": {"<gpu>": amount}}; false when absent or unusable. */
static bool parts_from_allocation(struct pool *pool, const struct pool_node *n,
                                  struct pool_share *s, const char *text, bool *oom)
{
    json_t *doc = json_loads(text, 0, NULL);
    int64_t *per_gpu = n->ngpus ? calloc((size_t)n->ngpus, sizeof *per_gpu) : NULL;
    bool ok = json_is_object(doc) && json_object_size(doc) > 0 && per_gpu;
    *oom = n->ngpus && !per_gpu;
    const char *ckey, *gkey;
    json_t *container, *amount;
    json_object_foreach (doc, ckey, container) {
        char *end;
        (void)strtol(ckey, &end, 10);
        if (!ok || !json_is_object(container) || end == ckey || *end) {
            ok = false;
            break;
        }
        json_object_foreach (container, gkey, amount) {
            long gpu = strtol(gkey, &end, 10);
            if (end == gkey || *end || gpu < 0 || gpu >= n->ngpus || !json_is_integer(amount) ||
                json_integer_value(amount) < 0) {
                ok = false;
                break;
            }
            per_gpu[gpu] += json_integer_value(amount);
        }
    }
    int nparts = 0;
    for (int g = 0; ok && g < n->ngpus; g++)
        nparts += per_gpu[g] > 0;
    if (ok && nparts > 0) {
        s->gpu = arena_calloc(&pool->arena, (size_t)nparts, sizeof *s->gpu);
        s->part = arena_calloc(&pool->arena, (size_t)nparts, sizeof *s->part);
        *oom = !s->gpu || !s->part;
        for (int g = 0; s->gpu && s->part && g < n->ngpus; g++) {
            if (per_gpu[g] > 0) {
                s->gpu[s->nparts] = g;
                s->part[s->nparts++] = per_gpu[g];
            }
        }
    }
    free(per_gpu);
    json_decref(doc);
    return s->nparts > 0;
}

/* ALIYUN_COM_GPU_MEM_IDX: "2", or "0,1" for a share split evenly over
 * several GPUs (the extender only writes amounts that divide evenly; a
 * remainder would go to the first GPUs). The contract's grammar
 * (poolapi_index.h); a list it refuses, or an index this node does not
 * have, makes the share pending. */
static int parts_from_index(struct pool *pool, const struct pool_node *n, struct pool_share *s,
                            const char *text)
{
    struct poolapi_index_list list;
    if (poolapi_index_parse(text, &list, NULL, 0) != 0)
        return 0; /* unusable: the share is pending */
    int count = (int)list.count;
    for (int i = 0; i < count; i++)
        if (list.gpu[i] >= n->ngpus)
            return 0;
    s->gpu = arena_calloc(&pool->arena, (size_t)count, sizeof *s->gpu);
    s->part = arena_calloc(&pool->arena, (size_t)count, sizeof *s->part);
    if (!s->gpu || !s->part)
        return -1;
    for (int i = 0; i < count; i++) {
        s->gpu[i] = list.gpu[i];
        s->part[i] = s->amount / count + (i < s->amount % count);
    }
    s->nparts = count;
    return 0;
}

static int add_share(struct pool *pool, struct pool_node *n, const struct pool_pod *pod)
{
    struct pool_share s = {
        .ns = pod->ns, .name = pod->name, .amount = pod->gpu_mem, .cores = pod->gpu_cores};
    bool oom = false;
    if (!(pod->allocation && parts_from_allocation(pool, n, &s, pod->allocation, &oom)) && !oom &&
        pod->index && parts_from_index(pool, n, &s, pod->index) != 0)
        return -1;
    if (oom)
        return -1;
    if (s.nparts == 0) {
        n->pending += s.amount;
        n->npending++;
    }
    for (int i = 0; i < s.nparts; i++) {
        n->gpus[s.gpu[i]].allocated += s.part[i];
        n->gpus[s.gpu[i]].cores_booked += s.cores;
        n->gpus[s.gpu[i]].shares++;
    }
    if (pool->pod_namespace && strcmp(pool->pod_namespace, pod->ns) != 0)
        return 0;
    if (n->nshares == n->shares_cap) {
        size_t cap = n->shares_cap ? n->shares_cap * 2 : 4;
        struct pool_share *shares = realloc(n->shares, cap * sizeof *shares);
        if (!shares)
            return -1;
        n->shares = shares;
        n->shares_cap = cap;
    }
    n->shares[n->nshares++] = s;
    return 0;
}

static const char *arena_copy(struct arena *arena, const char *s, bool *oom)
{
    if (s == NULL)
        return NULL;
    const char *copy = arena_strdup(arena, s);
    *oom |= copy == NULL;
    return copy;
}

/* 1 and *out filled when the pod holds GPU memory or nvidia.com/...
 * devices and may still run (phase not Succeeded/Failed), 0 when it
 * does not matter, -1 when out of memory. Strings go to `arena`. */
static int pod_record(struct arena *arena, const json_t *pod, struct pool_pod *out)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const json_t *spec = json_object_get(pod, "spec");
    const char *phase = jstr(json_object_get(pod, "status"), "phase");
    const char *node = jstr(spec, "nodeName");
    if (!node || (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)))
        return 0;
    int64_t mem = pod_gpu_mem(spec);
    struct pod_requests req = {.n = 0};
    size_t i;
    const json_t *c;
    json_array_foreach (json_object_get(spec, "containers"), i, c)
        container_requests(c, false, &req);
    json_array_foreach (json_object_get(spec, "initContainers"), i, c)
        container_requests(c, true, &req);
    size_t nrequests = 0;
    int64_t counts[POD_RESOURCES_MAX];
    for (i = 0; i < req.n; i++) {
        uint64_t total = poolapi_demand_total(&req.r[i].demand);
        int64_t count = total > INT64_MAX ? INT64_MAX : (int64_t)total;
        if (count > 0) {
            req.r[nrequests].name = req.r[i].name;
            counts[nrequests++] = count; /* compacted in place: nrequests <= i */
        }
    }
    if (mem <= 0 && nrequests == 0)
        return 0;
    const json_t *annotations = json_object_get(meta, "annotations");
    const char *name = jstr(meta, "name"), *ns = jstr(meta, "namespace");
    bool oom = false;
    *out = (struct pool_pod){
        .ns = arena_copy(arena, ns ? ns : "", &oom),
        .name = arena_copy(arena, name ? name : "", &oom),
        .node = arena_copy(arena, node, &oom),
        .gpu_mem = mem > 0 ? mem : 0,
        .gpu_cores = mem > 0 ? pod_gpu_cores(spec) : 0,
        .allocation = mem > 0
                          ? arena_copy(arena, jstr(annotations, POOL_ANN_GPUSHARE_ALLOCATION), &oom)
                          : NULL,
        .index = mem > 0 ? arena_copy(arena, jstr(annotations, POOL_ANN_GPU_MEM_IDX), &oom) : NULL,
        .nrequests = nrequests,
        .requests = nrequests ? arena_calloc(arena, nrequests, sizeof *out->requests) : NULL,
    };
    if (nrequests && !out->requests)
        return -1;
    for (i = 0; i < nrequests; i++)
        out->requests[i] =
            (struct pool_pod_request){arena_copy(arena, req.r[i].name, &oom), counts[i]};
    return oom ? -1 : 1;
}

/* Charges one pod record to its node; pods of nodes outside the pool
 * are skipped. */
static int add_record(struct pool *pool, const struct pool_pod *pod)
{
    struct pool_node *n = pool_find(pool, pod->node);
    if (!n)
        return 0;
    if (pod->gpu_mem > 0 && add_share(pool, n, pod) != 0)
        return -1;
    return add_device_pod(pool, n, pod);
}

int pool_add_pod(struct pool *pool, const json_t *pod)
{
    struct pool_pod record;
    pool->pods_seen++;
    int kept = pod_record(&pool->arena, pod, &record);
    return kept <= 0 ? kept : add_record(pool, &record);
}

int pool_pods_add(struct pool_pods *pods, const json_t *pod)
{
    struct pool_pod record;
    pods->seen++;
    int kept = pod_record(&pods->arena, pod, &record);
    if (kept <= 0)
        return kept;
    if (pods->count == pods->cap) {
        size_t cap = pods->cap ? pods->cap * 2 : 64;
        struct pool_pod *grown = realloc(pods->pods, cap * sizeof *grown);
        if (!grown)
            return -1;
        pods->pods = grown;
        pods->cap = cap;
    }
    pods->pods[pods->count++] = record;
    return 0;
}

int pool_add_pods(struct pool *pool, struct pool_pods *pods)
{
    pool->pods_seen += pods->seen;
    arena_adopt(&pool->arena, &pods->arena); /* the records' strings now live as long as the pool */
    for (size_t i = 0; i < pods->count; i++)
        if (add_record(pool, &pods->pods[i]) != 0)
            return -1;
    return 0;
}

void pool_pods_free(struct pool_pods *pods)
{
    free(pods->pods);
    arena_free(&pods->arena);
    memset(pods, 0, sizeof *pods);
}

/* ---- finishing ---- */

static int by_name(const void *a, const void *b)
{
    return strcmp((*(struct pool_node *const *)a)->name, (*(struct pool_node *const *)b)->name);
}

static int by_pod_name(const char *ns_a, const char *name_a, const char *ns_b, const char *name_b)
{
    int c = strcmp(ns_a, ns_b);
    return c != 0 ? c : strcmp(name_a, name_b);
}

static int share_by_pod(const void *a, const void *b)
{
    const struct pool_share *x = a, *y = b;
    return by_pod_name(x->ns, x->name, y->ns, y->name);
}

static int device_pod_by_pod(const void *a, const void *b)
{
    const struct pool_device_pod *x = a, *y = b;
    return by_pod_name(x->ns, x->name, y->ns, y->name);
}

void pool_finish(struct pool *pool)
{
    if (pool->nnodes > 1) /* NULL when no node has GPUs: qsort's array may not be */
        qsort(pool->nodes, pool->nnodes, sizeof *pool->nodes, by_name);
    for (size_t i = 0; i < pool->nnodes; i++) {
        struct pool_node *n = pool->nodes[i];
        /* etcd lists in (namespace, name) order, the watch cache in no
         * order at all: sorted, the output does not depend on which. */
        if (n->nshares > 1) /* qsort's array may not be NULL, even when empty */
            qsort(n->shares, n->nshares, sizeof *n->shares, share_by_pod);
        for (size_t r = 0; r < n->nresources; r++)
            if (n->resources[r].npods > 1)
                qsort(n->resources[r].pods, n->resources[r].npods, sizeof *n->resources[r].pods,
                      device_pod_by_pod);
        for (size_t u = 0; u < n->nunhealthy_cm; u++)
            if (n->unhealthy_cm[u] < n->ngpus)
                n->gpus[n->unhealthy_cm[u]].unhealthy = true;
    }
}

enum pool_mem_unit pool_node_unit(const struct pool_node *node)
{
    int64_t largest = 0;
    for (int i = 0; i < node->ngpus; i++)
        if (node->gpus[i].total > largest)
            largest = node->gpus[i].total;
    return poolapi_unit_guess(largest);
}

int64_t pool_percent(int64_t part, int64_t whole)
{
    if (whole <= 0)
        return 0;
    return (int64_t)((double)part / (double)whole * 100);
}

/* poolapi_facts.c -- the v1.Pod / v1.Node facts of the pool contract (see poolapi_facts.h). */
#include "poolapi_facts.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolapi_demand.h"
#include "poolapi_gpus.h"
#include "poolapi_index.h"
#include "poolapi_quantity.h"

/* ---- typed field access -------------------------------------------------- */

/* The member `key` of obj when it is of `type`; NULL when absent or null;
 * -1 (with err) when it is there with another type. */
static int member(const json_t *obj, const char *key, json_type type, const char *where,
                  json_t **out, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (json_typeof(v) != type) {
        static const char *const names[] = {"an object", "an array",  "a string",  "an integer",
                                            "a number",  "a boolean", "a boolean", "null"};
        snprintf(err, errlen, "%s.%s must be %s", where, key, names[type]);
        return -1;
    }
    *out = v;
    return 0;
}

static const char *string_member(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

/* ---- pods ---------------------------------------------------------------- */

enum pod_resource { R_CPU, R_MEMORY, R_GPU_MEM, R_GPU_COUNT, R_GPU_CORES, R_COUNT };
static const char *const resource_names[R_COUNT] = {"cpu", "memory", POOL_RES_GPU_MEM,
                                                    POOL_RES_GPU_COUNT, POOL_RES_GPU_CORES};
static const uint64_t resource_scales[R_COUNT] = {1000, 1, 1, 1, 1};

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The walk of every resource at once, and the largest GPU count any
 * container names. */
struct requests_walk {
    struct poolapi_demand demand[R_COUNT];
    uint64_t gpu_count;
};

static int add_container(void *ctx, const json_t *c, const char *where, bool init, bool sidecar,
                         char *err, size_t errlen)
{
    struct requests_walk *w = ctx;
    for (int r = 0; r < R_COUNT; r++) {
        uint64_t one;
        if (poolapi_container_request(c, where, resource_names[r], resource_scales[r], &one, err,
                                      errlen) < 0)
            return -1;
        if (r == R_GPU_COUNT)
            w->gpu_count = one > w->gpu_count ? one : w->gpu_count;
        else if (init)
            poolapi_demand_add_init(&w->demand[r], one, sidecar);
        else
            poolapi_demand_add_app(&w->demand[r], one);
    }
    return 0;
}

/* NodeResourcesFit: the effective request of each resource (the walk of
 * poolapi_demand.h) + overhead; the GPU count is the largest any container
 * names. */
static int pod_requests(const json_t *spec, uint64_t total[R_COUNT], char *err, size_t errlen)
{
    json_t *overhead;
    struct requests_walk w;
    memset(&w, 0, sizeof(w));
    if (member(spec, "overhead", JSON_OBJECT, "spec", &overhead, err, errlen) < 0 ||
        poolapi_pod_containers(spec, add_container, &w, err, errlen) < 0)
        return -1;
    for (int r = 0; r < R_COUNT; r++) {
        if (r == R_GPU_COUNT) {
            total[r] = w.gpu_count;
            continue;
        }
        total[r] = poolapi_demand_total(&w.demand[r]);
        json_t *v = overhead ? json_object_get(overhead, resource_names[r]) : NULL;
        uint64_t extra = 0;
        if (v &&
            poolapi_quantity_json(v, "spec.overhead", resource_scales[r], &extra, err, errlen) < 0)
            return -1;
        total[r] = add_sat(total[r], extra);
    }
    return 0;
}

/* Decimal digits only, at most UINT64_MAX: strtoull alone would take a
 * sign, blanks and "0x". */
static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int poolapi_gpu_mem_pod(const json_t *annotations, uint64_t *units)
{
    const char *text = json_string_value(json_object_get(annotations, POOL_ANN_GPU_MEM_POD));
    return text != NULL ? parse_u64(text, units) : -1;
}

static void pod_assignment_of(const json_t *annotations, struct pod_assignment *a)
{
    struct poolapi_index_list list;
    memset(a, 0, sizeof(*a));
    const char *idx = json_string_value(json_object_get(annotations, POOL_ANN_GPU_MEM_IDX));
    if (!idx || poolapi_index_parse(idx, &list, NULL, 0) < 0 ||
        poolapi_gpu_mem_pod(annotations, &a->pod_memory) < 0) {
        memset(a, 0, sizeof(*a));
        return;
    }
    a->gpu_mask = list.mask;
    a->gpu_count = list.count;
    a->present = true;
}

int poolapi_pod_facts(const json_t *pod, struct pod_facts *out, char *err, size_t errlen)
{
    json_t *meta, *spec, *status, *annotations, *labels;
    memset(out, 0, sizeof(*out));
    out->name = out->ns = out->uid = "";
    if (!json_is_object(pod)) {
        snprintf(err, errlen, "pod must be an object");
        return -1;
    }
    if (member(pod, "metadata", JSON_OBJECT, "pod", &meta, err, errlen) < 0 ||
        member(pod, "spec", JSON_OBJECT, "pod", &spec, err, errlen) < 0 ||
        member(pod, "status", JSON_OBJECT, "pod", &status, err, errlen) < 0)
        return -1;
    if (meta) {
        if (member(meta, "annotations", JSON_OBJECT, "metadata", &annotations, err, errlen) < 0 ||
            member(meta, "labels", JSON_OBJECT, "metadata", &labels, err, errlen) < 0)
            return -1;
        json_t *s;
        if (member(meta, "name", JSON_STRING, "metadata", &s, err, errlen) < 0 ||
            member(meta, "namespace", JSON_STRING, "metadata", &s, err, errlen) < 0 ||
            member(meta, "uid", JSON_STRING, "metadata", &s, err, errlen) < 0)
            return -1;
        out->name = string_member(meta, "name");
        out->ns = string_member(meta, "namespace");
        out->uid = string_member(meta, "uid");
        json_t *deletion = json_object_get(meta, "deletionTimestamp");
        out->deleting = deletion && !json_is_null(deletion);
    } else {
        annotations = labels = NULL;
    }
    if (status) {
        const char *phase = string_member(status, "phase");
        out->terminated = strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0;
    }
    uint64_t total[R_COUNT] = {0};
    if (spec) {
        json_t *node;
        if (member(spec, "nodeName", JSON_STRING, "spec", &node, err, errlen) < 0)
            return -1;
        const char *n = json_string_value(node);
        out->node_name = n && *n ? n : NULL;
        if (pod_requests(spec, total, err, errlen) < 0)
            return -1;
    }
    out->cpu_milli = total[R_CPU];
    out->memory_bytes = total[R_MEMORY];
    out->gpu_memory = total[R_GPU_MEM];
    out->gpu_cores = total[R_GPU_CORES];
    out->gpu_count = total[R_GPU_COUNT] > UINT32_MAX ? UINT32_MAX : (uint32_t)total[R_GPU_COUNT];
    const char *count = json_string_value(json_object_get(annotations, POOL_ANN_POD_GPU_COUNT));
    uint64_t n;
    if (count) {
        if (parse_u64(count, &n) < 0 || n > UINT32_MAX) {
            snprintf(err, errlen, "annotation %s: \"%.40s\" is not a GPU count",
                     POOL_ANN_POD_GPU_COUNT, count);
            return -1;
        }
        out->gpu_count = (uint32_t)n;
    }
    if (out->gpu_memory > 0 && out->gpu_count == 0 && !count)
        out->gpu_count = 1;
    out->gpu_model = json_string_value(json_object_get(annotations, POOL_ANN_POD_GPU_MODEL));
    if (!out->gpu_model)
        out->gpu_model = json_string_value(json_object_get(labels, POOL_ANN_POD_GPU_MODEL));
    if (out->gpu_model && !*out->gpu_model)
        out->gpu_model = NULL;
    pod_assignment_of(annotations, &out->assigned);
    return 0;
}

int poolapi_gpu_cores_check(const struct pod_facts *pod, char *err, size_t errlen)
{
    if (pod->gpu_cores == 0)
        return 0;
    if (pod->gpu_cores > POOL_GPU_CORES_PER_GPU) {
        snprintf(err, errlen,
                 "%s %llu is more than one GPU: it is a percent of each of the pod's GPUs "
                 "(1..%d)",
                 POOL_RES_GPU_CORES, (unsigned long long)pod->gpu_cores, POOL_GPU_CORES_PER_GPU);
        return -1;
    }
    if (pod->gpu_memory == 0) {
        snprintf(err, errlen,
                 "%s %llu without %s: cores are booked on the GPUs that gpu-mem places, "
                 "ask for both",
                 POOL_RES_GPU_CORES, (unsigned long long)pod->gpu_cores, POOL_RES_GPU_MEM);
        return -1;
    }
    return 0;
}

/* ---- nodes --------------------------------------------------------------- */

/* gpupool.io/gpus through the shared reader (poolapi_gpus.h); the model
 * is GPU 0's. On any defect the annotation is ignored as a whole. */
static int node_gpus_annotation(const char *text, struct node_facts *out)
{
    struct poolapi_gpu *gpus;
    size_t n;
    char why[96];
    if (poolapi_gpus_parse(text, POOL_MAX_GPUS, &gpus, &n, why, sizeof(why)) < 0) {
        snprintf(out->warning, sizeof(out->warning), "annotation %s ignored: %s",
                 POOL_ANN_NODE_GPUS, why);
        return -1;
    }
    out->gpu_count = (uint32_t)n;
    for (size_t g = 0; g < n; g++) {
        out->gpu_memory[g] = gpus[g].memory;
        out->gpu_cores[g] = gpus[g].cores;
        if (!gpus[g].healthy)
            out->unhealthy |= 1u << g;
    }
    /* Truncated to the scheduler's POOL_MODEL_LEN, as it always was. */
    snprintf(out->model, sizeof(out->model), "%.*s", (int)sizeof(out->model) - 1, gpus[0].model);
    out->from_annotation = true;
    free(gpus);
    return 0;
}

/* Where a client reaches the node itself (docs/extender.md, "Used beside
 * booked"): the first InternalIP, else the first ExternalIP, else the
 * first Hostname -- as metrics-server reaches the kubelet. NULL: none. */
static const char *node_address(const json_t *status)
{
    static const char *const preferred[] = {"InternalIP", "ExternalIP", "Hostname"};
    const json_t *addresses = json_object_get(status, "addresses");
    for (size_t p = 0; p < sizeof preferred / sizeof preferred[0]; p++) {
        size_t i;
        const json_t *a;
        json_array_foreach (addresses, i, a) {
            const char *type = json_string_value(json_object_get(a, "type"));
            const char *address = json_string_value(json_object_get(a, "address"));
            if (type && address && address[0] && strcmp(type, preferred[p]) == 0)
                return address;
        }
    }
    return NULL;
}

int poolapi_node_facts(const json_t *node, struct node_facts *out, char *err, size_t errlen)
{
    json_t *meta, *status, *alloc, *cap, *annotations = NULL, *labels = NULL;
    memset(out, 0, sizeof(*out));
    out->name = "";
    if (!json_is_object(node)) {
        snprintf(err, errlen, "node must be an object");
        return -1;
    }
    if (member(node, "metadata", JSON_OBJECT, "node", &meta, err, errlen) < 0 ||
        member(node, "status", JSON_OBJECT, "node", &status, err, errlen) < 0)
        return -1;
    if (meta &&
        (member(meta, "annotations", JSON_OBJECT, "metadata", &annotations, err, errlen) < 0 ||
         member(meta, "labels", JSON_OBJECT, "metadata", &labels, err, errlen) < 0))
        return -1;
    out->name = string_member(meta, "name");
    out->address = node_address(status);
    alloc = cap = NULL;
    if (status && (member(status, "allocatable", JSON_OBJECT, "status", &alloc, err, errlen) < 0 ||
                   member(status, "capacity", JSON_OBJECT, "status", &cap, err, errlen) < 0))
        return -1;
    json_t *v;
    uint64_t count = 0;
    if (((v = json_object_get(alloc, "cpu")) &&
         poolapi_quantity_json(v, "allocatable cpu", 1000, &out->cpu_milli, err, errlen) < 0) ||
        ((v = json_object_get(alloc, "memory")) &&
         poolapi_quantity_json(v, "allocatable memory", 1, &out->memory_bytes, err, errlen) < 0) ||
        ((v = json_object_get(cap, POOL_RES_GPU_MEM)) &&
         poolapi_quantity_json(v, "capacity " POOL_RES_GPU_MEM, 1, &out->gpu_memory_total, err,
                               errlen) < 0) ||
        ((v = json_object_get(cap, POOL_RES_GPU_COUNT)) &&
         poolapi_quantity_json(v, "capacity " POOL_RES_GPU_COUNT, 1, &count, err, errlen) < 0))
        return -1;

    const char *gpus = json_string_value(json_object_get(annotations, POOL_ANN_NODE_GPUS));
    if (!gpus || node_gpus_annotation(gpus, out) < 0) {
        /* gpushare's model: uniform GPUs, total / count each. */
        if (count > POOL_MAX_GPUS) {
            snprintf(out->warning, sizeof(out->warning),
                     "%llu GPUs: only the first %d are scheduled", (unsigned long long)count,
                     POOL_MAX_GPUS);
        }
        out->gpu_count = count > POOL_MAX_GPUS ? POOL_MAX_GPUS : (uint32_t)count;
        for (uint32_t g = 0; g < out->gpu_count; g++) {
            out->gpu_memory[g] = out->gpu_memory_total / count;
            out->gpu_cores[g] = POOL_GPU_CORES_PER_GPU;
        }
    }
    if (!out->model[0]) {
        const char *product =
            json_string_value(json_object_get(labels, POOL_LABEL_NODE_GPU_PRODUCT));
        if (product)
            snprintf(out->model, sizeof(out->model), "%s", product);
    }
    return 0;
}

/* objects.c -- v1.Pod / v1.Node fields the extender needs (see objects.h). */
#include "objects.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef unsigned __int128 u128;

/* ---- quantities ---------------------------------------------------------- */

static bool mul_u128(u128 a, u128 b, u128 *out)
{
    if (a != 0 && b > (~(u128)0) / a)
        return false;
    *out = a * b;
    return true;
}

static u128 pow10_u128(unsigned n)
{
    u128 v = 1;
    while (n--)
        v *= 10;
    return v;
}

/* The suffix of a quantity: a power of two (binary_shift) and of ten (exp10). */
static int quantity_suffix(const char *s, unsigned *binary_shift, int *exp10)
{
    static const struct {
        const char *name;
        unsigned shift;
        int exp10;
    } suffixes[] = {
        {"", 0, 0},    {"Ki", 10, 0}, {"Mi", 20, 0}, {"Gi", 30, 0}, {"Ti", 40, 0},
        {"Pi", 50, 0}, {"Ei", 60, 0}, {"n", 0, -9},  {"u", 0, -6},  {"m", 0, -3},
        {"k", 0, 3},   {"M", 0, 6},   {"G", 0, 9},   {"T", 0, 12},  {"P", 0, 15},
        {"E", 0, 18},
    };
    *binary_shift = 0;
    *exp10 = 0;
    const char *p = s + 1;
    if (s[0] && (*p == '+' || *p == '-'))
        p++;
    if ((s[0] == 'e' || s[0] == 'E') && isdigit((unsigned char)*p)) {
        /* Scientific notation: e<int>; "E" and "Ei" are suffixes, below. */
        for (const char *q = p; *q; q++)
            if (!isdigit((unsigned char)*q))
                return -1;
        errno = 0;
        long e = strtol(s + 1, NULL, 10);
        if (errno || e > 60 || e < -60)
            return -1;
        *exp10 = (int)e;
        return 0;
    }
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if (strcmp(s, suffixes[i].name) == 0) {
            *binary_shift = suffixes[i].shift;
            *exp10 = suffixes[i].exp10;
            return 0;
        }
    }
    return -1;
}

int quantity_parse(const char *text, uint64_t scale, uint64_t *out, char *err, size_t errlen)
{
    const char *p = text;
    if (!p || !*p) {
        snprintf(err, errlen, "empty quantity");
        return -1;
    }
    if (*p == '-') {
        snprintf(err, errlen, "quantity \"%.40s\" is negative", text);
        return -1;
    }
    if (*p == '+')
        p++;
    u128 mantissa = 0;
    unsigned digits = 0, fraction = 0;
    bool dot = false;
    for (; isdigit((unsigned char)*p) || (*p == '.' && !dot); p++) {
        if (*p == '.') {
            dot = true;
            continue;
        }
        if (mantissa == 0 && *p == '0') {
            if (dot)
                fraction++;
            continue; /* leading zeros carry no digits */
        }
        if (++digits > 30) {
            snprintf(err, errlen, "quantity \"%.40s\" has too many digits", text);
            return -1;
        }
        mantissa = mantissa * 10 + (u128)(*p - '0');
        if (dot)
            fraction++;
    }
    bool any_digit = false;
    for (const char *q = text; q < p; q++)
        any_digit |= isdigit((unsigned char)*q) != 0;
    unsigned shift;
    int exp10;
    if (!any_digit || quantity_suffix(p, &shift, &exp10) < 0) {
        snprintf(err, errlen, "invalid quantity \"%.40s\"", text);
        return -1;
    }
    int net10 = exp10 - (int)fraction;
    u128 num = mantissa, den = 1;
    bool ok = mul_u128(num, scale, &num) && mul_u128(num, (u128)1 << shift, &num);
    if (ok && net10 > 0)
        ok = net10 <= 38 && mul_u128(num, pow10_u128((unsigned)net10), &num);
    if (ok && net10 < 0) {
        if (-net10 > 38) {
            *out = num ? 1 : 0; /* a positive speck rounds up to one unit */
            return 0;
        }
        den = pow10_u128((unsigned)-net10);
    }
    u128 value = ok ? num / den + (num % den != 0) : 0;
    if (!ok || value > UINT64_MAX) {
        snprintf(err, errlen, "quantity \"%.40s\" is too large", text);
        return -1;
    }
    *out = (uint64_t)value;
    return 0;
}

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
        static const char *const names[] = {"an object", "an array", "a string", "an integer",
                                            "a number", "a boolean", "a boolean", "null"};
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

/* A quantity value: Kubernetes writes strings; plain integers are accepted. */
static int quantity_of(const json_t *v, const char *what, uint64_t scale, uint64_t *out, char *err,
                       size_t errlen)
{
    char why[128];
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0 || (uint64_t)i > UINT64_MAX / scale) {
            snprintf(err, errlen, "%s: %lld is out of range", what, (long long)i);
            return -1;
        }
        *out = (uint64_t)i * scale;
        return 0;
    }
    if (!json_is_string(v)) {
        snprintf(err, errlen, "%s must be a quantity string", what);
        return -1;
    }
    if (quantity_parse(json_string_value(v), scale, out, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "%s: %s", what, why);
        return -1;
    }
    return 0;
}

/* ---- pods ---------------------------------------------------------------- */

enum pod_resource { R_CPU, R_MEMORY, R_GPU_MEM, R_GPU_COUNT, R_COUNT };
static const char *const resource_names[R_COUNT] = {"cpu", "memory", RES_GPU_MEM, RES_GPU_COUNT};
static const uint64_t resource_scales[R_COUNT] = {1000, 1, 1, 1};

/* One container's effective request per resource: requests, else limits
 * (the API server defaults requests to limits, so this is what it would
 * store; extended resources must have both equal anyway). */
static int container_requests(const json_t *c, const char *where, uint64_t r[R_COUNT], char *err,
                              size_t errlen)
{
    json_t *res, *req, *lim;
    memset(r, 0, sizeof(r[0]) * R_COUNT);
    if (!json_is_object(c)) {
        snprintf(err, errlen, "%s must be an object", where);
        return -1;
    }
    if (member(c, "resources", JSON_OBJECT, where, &res, err, errlen) < 0)
        return -1;
    if (!res)
        return 0;
    if (member(res, "requests", JSON_OBJECT, "resources", &req, err, errlen) < 0 ||
        member(res, "limits", JSON_OBJECT, "resources", &lim, err, errlen) < 0)
        return -1;
    for (int i = 0; i < R_COUNT; i++) {
        json_t *v = req ? json_object_get(req, resource_names[i]) : NULL;
        if (!v && lim)
            v = json_object_get(lim, resource_names[i]);
        if (!v)
            continue;
        char what[160];
        snprintf(what, sizeof(what), "%s resources %s", where, resource_names[i]);
        if (quantity_of(v, what, resource_scales[i], &r[i], err, errlen) < 0)
            return -1;
    }
    return 0;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* NodeResourcesFit: max(sum over containers, max over init containers) +
 * overhead; the GPU count is the largest any container names. */
static int pod_requests(const json_t *spec, uint64_t total[R_COUNT], char *err, size_t errlen)
{
    json_t *containers, *inits, *overhead;
    uint64_t sum[R_COUNT] = {0}, init_max[R_COUNT] = {0}, one[R_COUNT];
    if (member(spec, "containers", JSON_ARRAY, "spec", &containers, err, errlen) < 0 ||
        member(spec, "initContainers", JSON_ARRAY, "spec", &inits, err, errlen) < 0 ||
        member(spec, "overhead", JSON_OBJECT, "spec", &overhead, err, errlen) < 0)
        return -1;
    size_t i;
    json_t *c;
    char where[64];
    json_array_foreach(containers, i, c) {
        snprintf(where, sizeof(where), "spec.containers[%zu]", i);
        if (container_requests(c, where, one, err, errlen) < 0)
            return -1;
        for (int r = 0; r < R_COUNT; r++)
            sum[r] = r == R_GPU_COUNT ? (one[r] > sum[r] ? one[r] : sum[r]) : add_sat(sum[r], one[r]);
    }
    json_array_foreach(inits, i, c) {
        snprintf(where, sizeof(where), "spec.initContainers[%zu]", i);
        if (container_requests(c, where, one, err, errlen) < 0)
            return -1;
        for (int r = 0; r < R_COUNT; r++)
            if (one[r] > init_max[r])
                init_max[r] = one[r];
    }
    for (int r = 0; r < R_COUNT; r++) {
        total[r] = sum[r] > init_max[r] ? sum[r] : init_max[r];
        json_t *v = overhead ? json_object_get(overhead, resource_names[r]) : NULL;
        uint64_t extra = 0;
        if (v && r != R_GPU_COUNT &&
            quantity_of(v, "spec.overhead", resource_scales[r], &extra, err, errlen) < 0)
            return -1;
        total[r] = add_sat(total[r], extra);
    }
    return 0;
}

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

int objects_parse_index_list(const char *text, uint32_t *mask)
{
    *mask = 0;
    const char *p = text;
    if (!p || !*p)
        return -1;
    for (;;) {
        while (*p == ' ')
            p++;
        if (!isdigit((unsigned char)*p))
            return -1;
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || v >= PLACEMENT_MAX_GPUS || (*mask & (1u << v)))
            return -1;
        *mask |= 1u << v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == '\0')
            return 0;
        if (*p++ != ',')
            return -1;
    }
}

char *objects_format_index_list(uint32_t mask, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned g = 0; g < PLACEMENT_MAX_GPUS && used < len; g++) {
        if (!(mask & (1u << g)))
            continue;
        int n = snprintf(buf + used, len - used, used ? ",%u" : "%u", g);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return buf;
}

static void pod_assignment_of(const json_t *annotations, struct pod_assignment *a)
{
    memset(a, 0, sizeof(*a));
    const char *idx = json_string_value(json_object_get(annotations, ANN_GPU_MEM_IDX));
    const char *mem = json_string_value(json_object_get(annotations, ANN_GPU_MEM_POD));
    if (!idx || !mem || objects_parse_index_list(idx, &a->gpu_mask) < 0 ||
        parse_u64(mem, &a->pod_memory) < 0) {
        memset(a, 0, sizeof(*a));
        return;
    }
    a->gpu_count = (uint32_t)__builtin_popcount(a->gpu_mask);
    a->present = true;
}

int objects_pod_facts(const json_t *pod, struct pod_facts *out, char *err, size_t errlen)
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
    out->gpu_count = total[R_GPU_COUNT] > UINT32_MAX ? UINT32_MAX : (uint32_t)total[R_GPU_COUNT];
    const char *count = json_string_value(json_object_get(annotations, ANN_POD_GPU_COUNT));
    uint64_t n;
    if (count) {
        if (parse_u64(count, &n) < 0 || n > UINT32_MAX) {
            snprintf(err, errlen, "annotation %s: \"%.40s\" is not a GPU count", ANN_POD_GPU_COUNT,
                     count);
            return -1;
        }
        out->gpu_count = (uint32_t)n;
    }
    if (out->gpu_memory > 0 && out->gpu_count == 0 && !count)
        out->gpu_count = 1;
    out->gpu_model = json_string_value(json_object_get(annotations, ANN_POD_GPU_MODEL));
    if (!out->gpu_model)
        out->gpu_model = json_string_value(json_object_get(labels, ANN_POD_GPU_MODEL));
    if (out->gpu_model && !*out->gpu_model)
        out->gpu_model = NULL;
    pod_assignment_of(annotations, &out->assigned);
    return 0;
}

int objects_pod_request(const struct pod_facts *pod, struct placement_request *req, char *err,
                        size_t errlen)
{
    memset(req, 0, sizeof(*req));
    req->cpu = pod->cpu_milli;
    req->memory = pod->memory_bytes;
    if (pod->gpu_memory == 0)
        return 0;
    if (pod->gpu_count == 0 || pod->gpu_count > PLACEMENT_MAX_GPUS) {
        snprintf(err, errlen, "%s %u is out of range (1..%d)", RES_GPU_COUNT, pod->gpu_count,
                 PLACEMENT_MAX_GPUS);
        return -1;
    }
    if (pod->gpu_memory % pod->gpu_count != 0) {
        snprintf(err, errlen, "%s %llu is not divisible by %s %u: each GPU must get an equal share",
                 RES_GPU_MEM, (unsigned long long)pod->gpu_memory, RES_GPU_COUNT, pod->gpu_count);
        return -1;
    }
    req->gpu_count = pod->gpu_count;
    req->units = pod->gpu_memory / pod->gpu_count;
    return 0;
}

/* ---- nodes --------------------------------------------------------------- */

/* gpupool.io/gpus: [{"index":0,"memory":16,"model":"Tesla-V100","healthy":true},...]
 * Indices must be 0..n-1, each once. On any defect the annotation is ignored
 * as a whole (a half-read inventory is worse than the uniform fallback). */
static int node_gpus_annotation(const char *text, struct node_facts *out)
{
    json_error_t jerr;
    json_t *arr = json_loads(text, 0, &jerr);
    uint64_t memory[PLACEMENT_MAX_GPUS] = {0};
    uint32_t seen = 0, unhealthy = 0;
    char model[PLACEMENT_MODEL_LEN] = "";
    const char *why = NULL;
    size_t i, n = json_array_size(arr);
    json_t *gpu;
    if (!json_is_array(arr) || n == 0)
        why = "not a non-empty JSON array";
    else if (n > PLACEMENT_MAX_GPUS)
        why = "more than 16 GPUs";
    json_array_foreach(arr, i, gpu) {
        if (why)
            break;
        json_t *index = json_object_get(gpu, "index"), *mem = json_object_get(gpu, "memory");
        json_t *healthy = json_object_get(gpu, "healthy");
        const char *m = json_string_value(json_object_get(gpu, "model"));
        json_int_t x = json_integer_value(index);
        if (!json_is_integer(index) || x < 0 || x >= (json_int_t)n || (seen & (1u << x)))
            why = "bad or repeated index";
        else if (!json_is_integer(mem) || json_integer_value(mem) < 0)
            why = "memory must be a non-negative integer";
        else if (healthy && !json_is_boolean(healthy))
            why = "healthy must be a boolean";
        if (why)
            break;
        seen |= 1u << x;
        memory[x] = (uint64_t)json_integer_value(mem);
        if (json_is_false(healthy))
            unhealthy |= 1u << x;
        if (m && x == 0)
            snprintf(model, sizeof(model), "%s", m);
    }
    json_decref(arr);
    if (why) {
        snprintf(out->warning, sizeof(out->warning), "annotation %s ignored: %s", ANN_NODE_GPUS,
                 why);
        return -1;
    }
    out->gpu_count = (uint32_t)n;
    memcpy(out->gpu_memory, memory, sizeof(memory));
    out->unhealthy = unhealthy;
    snprintf(out->model, sizeof(out->model), "%s", model);
    out->from_annotation = true;
    return 0;
}

int objects_node_facts(const json_t *node, struct node_facts *out, char *err, size_t errlen)
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
    if (meta && (member(meta, "annotations", JSON_OBJECT, "metadata", &annotations, err, errlen) < 0 ||
                 member(meta, "labels", JSON_OBJECT, "metadata", &labels, err, errlen) < 0))
        return -1;
    out->name = string_member(meta, "name");
    alloc = cap = NULL;
    if (status && (member(status, "allocatable", JSON_OBJECT, "status", &alloc, err, errlen) < 0 ||
                   member(status, "capacity", JSON_OBJECT, "status", &cap, err, errlen) < 0))
        return -1;
    json_t *v;
    uint64_t count = 0;
    if (((v = json_object_get(alloc, "cpu")) &&
         quantity_of(v, "allocatable cpu", 1000, &out->cpu_milli, err, errlen) < 0) ||
        ((v = json_object_get(alloc, "memory")) &&
         quantity_of(v, "allocatable memory", 1, &out->memory_bytes, err, errlen) < 0) ||
        ((v = json_object_get(cap, RES_GPU_MEM)) &&
         quantity_of(v, "capacity " RES_GPU_MEM, 1, &out->gpu_memory_total, err, errlen) < 0) ||
        ((v = json_object_get(cap, RES_GPU_COUNT)) &&
         quantity_of(v, "capacity " RES_GPU_COUNT, 1, &count, err, errlen) < 0))
        return -1;

    const char *gpus = json_string_value(json_object_get(annotations, ANN_NODE_GPUS));
    if (!gpus || node_gpus_annotation(gpus, out) < 0) {
        /* gpushare's model: uniform GPUs, total / count each. */
        if (count > PLACEMENT_MAX_GPUS) {
            snprintf(out->warning, sizeof(out->warning),
                     "%llu GPUs: only the first %d are scheduled", (unsigned long long)count,
                     PLACEMENT_MAX_GPUS);
        }
        out->gpu_count = count > PLACEMENT_MAX_GPUS ? PLACEMENT_MAX_GPUS : (uint32_t)count;
        for (uint32_t g = 0; g < out->gpu_count; g++)
            out->gpu_memory[g] = out->gpu_memory_total / count;
    }
    if (!out->model[0]) {
        const char *product = json_string_value(json_object_get(labels, LABEL_NODE_GPU_PRODUCT));
        if (product)
            snprintf(out->model, sizeof(out->model), "%s", product);
    }
    return 0;
}

/* ext_fixtures.h -- Pods and Nodes as the API server would send them, for
 * the extender's unit tests. Every function returns a new reference. */
#ifndef GP_TEST_EXT_FIXTURES_H
#define GP_TEST_EXT_FIXTURES_H

#include <jansson.h>
#include <stdio.h>

/* A node with `count` GPUs and `memory` aliyun.com/gpu-mem in all (0: no GPU). */
static inline json_t *fx_node(const char *name, int memory, int count)
{
    json_t *node = json_pack("{s:{s:s}, s:{s:{s:s, s:s}, s:{s:s, s:s}}}", "metadata", "name", name,
                             "status", "allocatable", "cpu", "8", "memory", "32Gi", "capacity",
                             "cpu", "8", "memory", "32Gi");
    if (memory > 0) {
        char m[32], c[32];
        snprintf(m, sizeof m, "%d", memory);
        snprintf(c, sizeof c, "%d", count);
        json_t *cap = json_object_get(json_object_get(node, "status"), "capacity");
        json_object_set_new(cap, "aliyun.com/gpu-mem", json_string(m));
        json_object_set_new(cap, "aliyun.com/gpu-count", json_string(c));
    }
    return node;
}

/* A pod asking for `memory` aliyun.com/gpu-mem (0: none) and 1 CPU; bound
 * to `node` when not NULL; gpushare annotations when idx is not NULL. */
static inline json_t *fx_pod(const char *uid, const char *name, int memory, const char *node,
                             const char *idx)
{
    json_t *pod = json_pack(
        "{s:{s:s, s:s, s:s, s:{}}, s:{s:[{s:s, s:{s:{s:s}}}]}, s:{s:s}}", "metadata", "name", name,
        "namespace", "default", "uid", uid, "annotations", "spec", "containers", "name", "c",
        "resources", "requests", "cpu", "1", "status", "phase", node ? "Running" : "Pending");
    json_t *spec = json_object_get(pod, "spec");
    if (memory > 0) {
        char m[32];
        snprintf(m, sizeof m, "%d", memory);
        json_t *c = json_array_get(json_object_get(spec, "containers"), 0);
        json_object_set_new(json_object_get(c, "resources"), "limits",
                            json_pack("{s:s}", "aliyun.com/gpu-mem", m));
        if (idx) {
            json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
            json_object_set_new(ann, "ALIYUN_COM_GPU_MEM_IDX", json_string(idx));
            json_object_set_new(ann, "ALIYUN_COM_GPU_MEM_POD", json_string(m));
        }
    }
    if (node)
        json_object_set_new(spec, "nodeName", json_string(node));
    return pod;
}

static inline json_t *fx_json(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, 0, &e);
    if (!v)
        fprintf(stderr, "fixture JSON: %s (line %d)\n", e.text, e.line);
    return v;
}

#endif

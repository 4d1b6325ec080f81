/* The golden table: one table of quantities, pods and node annotations, read
 * through EACH program's own entry point -- the extender's pod/node facts
 * (objects.h), kubectl-gpupool's pool model (pool_model.h), the device
 * plugin's pod view and IDX parsing (podview.h, gpumem.h) -- and every
 * reading must agree with the table. Linking gp_extender, gp_cli and
 * gp_deviceplugin into one program is part of the test (two of them once
 * exported quantity_parse). Disagreements it found: docs/poolapi.md. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"
#include "gpumem.h"
#include "objects.h"
#include "pool_model.h"
#include "podview.h"
#include "poolapi_demand.h"

#define BAD (-1LL)

/* ---- quantities and pod shapes: the pod's aliyun.com/gpu-mem ---- */

struct pod_case {
    const char *spec; /* the pod's spec (JSON), bound to node "n" */
    long long want;   /* the pod's gpu-mem, or BAD: every program refuses it */
};

#define C(name, q) \
    "{\"name\":\"" name "\",\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":" q "}}}"
#define SIDE(name, q)                                                    \
    "{\"name\":\"" name "\",\"restartPolicy\":\"Always\",\"resources\":" \
    "{\"limits\":{\"aliyun.com/gpu-mem\":" q "}}}"

static const struct pod_case pod_cases[] = {
    /* quantities */
    {"{\"containers\":[" C("a", "\"4\"") "]}", 4},
    {"{\"containers\":[" C("a", "4") "]}", 4},
    {"{\"containers\":[" C("a", "\"1k\"") "]}", 1000},
    {"{\"containers\":[" C("a", "\"2e3\"") "]}", 2000},
    {"{\"containers\":[" C("a", "\"1Ki\"") "]}", 1024},
    {"{\"containers\":[" C("a", "\"1000m\"") "]}", 1},
    {"{\"containers\":[" C("a", "\"500m\"") "]}", BAD}, /* not a whole number */
    {"{\"containers\":[" C("a", "\"0.5\"") "]}", BAD},
    {"{\"containers\":[" C("a", "\"-1\"") "]}", BAD},
    {"{\"containers\":[" C("a", "\"1 \"") "]}", BAD},
    {"{\"containers\":[" C("a", "\"abc\"") "]}", BAD},
    {"{\"containers\":[" C("a", "\"1Q\"") "]}", BAD},
    /* several containers, init containers, sidecars (KEP-753) */
    {"{\"containers\":[" C("a", "\"2\"") "," C("b", "\"3\"") "]}", 5},
    {"{\"initContainers\":[" C("i", "\"8\"") "],\"containers\":[" C("a", "\"2\"") "]}", 8},
    {"{\"initContainers\":[" C("i", "\"1\"") "],\"containers\":[" C("a", "\"2\"") "]}", 2},
    {"{\"initContainers\":[" SIDE("s", "\"1\"") "],\"containers\":[" C("a", "\"2\"") "]}", 3},
    {"{\"initContainers\":[" SIDE("s", "\"1\"") "," C("i", "\"5\"") "," SIDE(
         "t", "\"2\"") "],\"containers\":[" C("a", "\"3\"") "]}",
     6},
    {"{\"initContainers\":[" SIDE("s", "\"2\"") "," C("i", "\"5\"") "],\"containers\":[" C(
         "a", "\"1\"") "]}",
     7},
    {"{\"initContainers\":[" C("i", "\"4\"") "," C("j", "\"6\"") "],\"containers\":[" C(
         "a", "\"1\"") "," C("b", "\"1\"") "]}",
     6},
};

static json_t *pod_json(const char *spec, const char *idx)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\"%s%s%s},"
             "\"spec\":%s,\"status\":{\"phase\":\"Running\"}}",
             idx ? ",\"annotations\":{\"ALIYUN_COM_GPU_MEM_IDX\":\"" : "", idx ? idx : "",
             idx ? "\",\"ALIYUN_COM_GPU_MEM_POD\":\"4\"}" : "", spec);
    json_error_t jerr;
    json_t *pod = json_loads(text, 0, &jerr);
    if (!pod)
        fail_msg("bad test JSON (%s): %s", jerr.text, text);
    json_t *s = json_object_get(pod, "spec");
    json_object_set_new(s, "nodeName", json_string("n"));
    return pod;
}

/* The extender: what it charges (-1: it refuses the pod). */
static long long extender_pod(const json_t *pod)
{
    struct pod_facts f;
    char err[256];
    return poolapi_pod_facts(pod, &f, err, sizeof err) == 0 ? (long long)f.gpu_memory : BAD;
}

/* kubectl-gpupool: the share it shows on node "n" (BAD: no share). */
static long long cli_pod(const json_t *pod)
{
    struct pool pool;
    pool_init(&pool, NULL, NULL);
    json_t *node = json_loads("{\"metadata\":{\"name\":\"n\"},\"status\":{\"allocatable\":"
                              "{\"aliyun.com/gpu-mem\":\"64\",\"aliyun.com/gpu-count\":\"4\"}}}",
                              0, NULL);
    assert_int_equal(pool_add_node(&pool, node), 0);
    assert_int_equal(pool_add_pod(&pool, pod), 0);
    pool_finish(&pool);
    struct pool_node *n = pool_find(&pool, "n");
    long long got = n->nshares ? n->shares[0].amount : BAD;
    pool_free(&pool);
    json_decref(node);
    return got;
}

/* The device plugin: the pod view's containers, totalled as gpumem_service
 * totals them for ALIYUN_COM_GPU_MEM_POD (copy_found); BAD when the view
 * marks the pod's limits unreadable. */
static long long plugin_pod(const json_t *pod)
{
    struct gpumem_pod p;
    char err[256];
    assert_int_equal(gpumem_pod_parse(pod, &p, err, sizeof err), 0);
    struct poolapi_demand d = {0};
    for (size_t c = 0; c < p.n_containers; c++) {
        if (p.containers[c].init)
            poolapi_demand_add_init(&d, p.containers[c].units, p.containers[c].sidecar);
        else
            poolapi_demand_add_app(&d, p.containers[c].units);
    }
    long long got = p.bad ? BAD : (long long)poolapi_demand_total(&d);
    gpumem_pod_clear(&p);
    return got;
}

static void test_pods(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof pod_cases / sizeof pod_cases[0]; i++) {
        json_t *pod = pod_json(pod_cases[i].spec, NULL);
        long long e = extender_pod(pod), c = cli_pod(pod), d = plugin_pod(pod);
        if (e != pod_cases[i].want || c != pod_cases[i].want || d != pod_cases[i].want)
            fail_msg("case %zu %s: want %lld, extender %lld, cli %lld, device plugin %lld", i,
                     pod_cases[i].spec, pod_cases[i].want, e, c, d);
        json_decref(pod);
    }
}

/* ---- ALIYUN_COM_GPU_MEM_IDX ---- */

struct idx_case {
    const char *idx;
    uint32_t mask; /* 0: every program refuses it */
};

static const struct idx_case idx_cases[] = {
    {"1", 0x2}, {"0,1", 0x3}, {"3,0", 0x9}, {"", 0},   {"0, 1", 0}, {" 1", 0}, {"+1", 0},
    {"1,1", 0}, {"1,", 0},    {",1", 0},    {"-1", 0}, {"16", 0},   {"x", 0},
};

static void test_index_lists(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    fixture_inventory(&inv, 4, 0);
    for (size_t i = 0; i < sizeof idx_cases / sizeof idx_cases[0]; i++) {
        const struct idx_case *k = &idx_cases[i];
        json_t *pod = pod_json("{\"containers\":[" C("a", "\"4\"") "]}", k->idx);
        /* extender: the pod's assignment (4 GPUs are not its concern) */
        struct pod_facts f;
        char err[256];
        assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
        uint32_t ext = f.assigned.present ? f.assigned.gpu_mask : 0;
        /* CLI: the GPUs the share is charged to on a 4-GPU node */
        struct pool pool;
        pool_init(&pool, NULL, NULL);
        json_t *node =
            json_loads("{\"metadata\":{\"name\":\"n\"},\"status\":{\"allocatable\":"
                       "{\"aliyun.com/gpu-mem\":\"64\",\"aliyun.com/gpu-count\":\"4\"}}}",
                       0, NULL);
        assert_int_equal(pool_add_node(&pool, node), 0);
        assert_int_equal(pool_add_pod(&pool, pod), 0);
        struct pool_node *n = pool_find(&pool, "n");
        uint32_t cli = 0;
        for (int s = 0; n->nshares && s < n->shares[0].nparts; s++)
            cli |= 1u << n->shares[0].gpu[s];
        pool_free(&pool);
        json_decref(node);
        /* device plugin: the GPUs Allocate would give */
        struct gpumem_assignment as;
        uint32_t dp = 0;
        if (gpumem_parse_idx(k->idx, &inv, &as, err, sizeof err) == 0)
            for (size_t g = 0; g < as.gpu_count; g++)
                dp |= 1u << inv.gpus[as.gpus[g]].index;
        if (ext != k->mask || cli != k->mask || dp != k->mask)
            fail_msg("IDX \"%s\": want 0x%x, extender 0x%x, cli 0x%x, device plugin 0x%x", k->idx,
                     k->mask, ext, cli, dp);
        json_decref(pod);
    }
    fixture_inventory_free(&inv);
}

/* ---- the annotation ALIYUN_COM_GPU_MEM_POD ---- */

struct pod_units_case {
    const char *value; /* the annotation's JSON value */
    bool ok;           /* false: nobody takes it */
    uint64_t want;
};

static const struct pod_units_case pod_units_cases[] = {
    {"\"6\"", true, 6},
    {"\"0\"", true, 0},
    {"\"007\"", true, 7},
    {"\"18446744073709551615\"", true, UINT64_MAX},
    {"\"18446744073709551616\"", false, 0},
    {"\"\"", false, 0},
    {"\"-1\"", false, 0},
    {"\"+6\"", false, 0},
    {"\" 6\"", false, 0},
    {"\"6 \"", false, 0},
    {"\"6Gi\"", false, 0},
    {"\"0x10\"", false, 0},
    {"\"1e3\"", false, 0},
    /* Annotations are strings in the API: a number is refused by both. */
    {"6", false, 0},
    {"null", false, 0},
};

/* The extender (and the CLI: the same poolapi_pod_facts) reads the pod's
 * units from its assignment; the device plugin from its pod view. */
static void test_pod_units_annotation(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof pod_units_cases / sizeof pod_units_cases[0]; i++) {
        const struct pod_units_case *k = &pod_units_cases[i];
        char text[512];
        snprintf(
            text, sizeof text,
            "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\","
            "\"annotations\":{\"ALIYUN_COM_GPU_MEM_IDX\":\"1\",\"ALIYUN_COM_GPU_MEM_POD\":%s}},"
            "\"spec\":{\"nodeName\":\"n\",\"containers\":[" C("a", "\"4\"") "]}}",
            k->value);
        json_error_t jerr;
        json_t *pod = json_loads(text, 0, &jerr);
        if (pod == NULL)
            fail_msg("bad test JSON (%s): %s", jerr.text, text);
        struct pod_facts f;
        struct gpumem_pod p;
        char err[256];
        assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
        assert_int_equal(gpumem_pod_parse(pod, &p, err, sizeof err), 0);
        bool ext_ok = f.assigned.present, dp_ok = p.has_pod_units, want_ok = k->ok;
        uint64_t want = k->want;
        if (ext_ok != want_ok || dp_ok != want_ok ||
            (want_ok && (f.assigned.pod_memory != want || p.pod_units != want)))
            fail_msg("%s %s: want %s%llu, extender %s%llu, device plugin %s%llu",
                     POOL_ANN_GPU_MEM_POD, k->value, want_ok ? "" : "none ",
                     (unsigned long long)want, ext_ok ? "" : "none ",
                     (unsigned long long)f.assigned.pod_memory, dp_ok ? "" : "none ",
                     (unsigned long long)p.pod_units);
        gpumem_pod_clear(&p);
        json_decref(pod);
    }
}

/* ---- the node annotation gpupool.io/gpus ---- */

struct node_case {
    const char *gpus;  /* the annotation */
    int count;         /* GPUs read from it; 0: ignored (2 x 8 fallback) */
    long long memory0; /* GPU 0's memory */
};

static const struct node_case node_cases[] = {
    {"[{\"index\":0,\"memory\":16,\"model\":\"V100\",\"healthy\":true},"
     "{\"index\":1,\"memory\":40,\"healthy\":false}]",
     2, 16},
    {"[{\"index\":0,\"memory\":24}]", 1, 24},
    {"[]", 0, 8},
    {"{}", 0, 8},
    {"[{\"index\":1,\"memory\":16}]", 0, 8},
    {"[{\"index\":0,\"memory\":-1}]", 0, 8},
    {"[{\"index\":0,\"memory\":\"16\"}]", 0, 8},
    {"[{\"index\":0,\"memory\":16,\"healthy\":1}]", 0, 8},
    {"[{\"index\":0,\"memory\":16,\"memory\":17}]", 0, 8},
    {"[{\"index\":0,\"memory\":16},{\"index\":0,\"memory\":16}]", 0, 8},
};

static void test_node_annotations(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof node_cases / sizeof node_cases[0]; i++) {
        const struct node_case *k = &node_cases[i];
        json_t *node =
            json_pack("{s:{s:s,s:{s:s}},s:{s:{s:s,s:s},s:{s:s,s:s}}}", "metadata", "name", "n",
                      "annotations", "gpupool.io/gpus", k->gpus, "status", "capacity",
                      "aliyun.com/gpu-mem", "16", "aliyun.com/gpu-count", "2", "allocatable",
                      "aliyun.com/gpu-mem", "16", "aliyun.com/gpu-count", "2");
        struct node_facts f;
        char err[256];
        assert_int_equal(poolapi_node_facts(node, &f, err, sizeof err), 0);
        struct pool pool;
        pool_init(&pool, NULL, NULL);
        assert_int_equal(pool_add_node(&pool, node), 0);
        struct pool_node *n = pool_find(&pool, "n");
        int want = k->count ? k->count : 2;
        if ((int)f.gpu_count != want || n->ngpus != want || f.from_annotation != (k->count > 0) ||
            n->gpus_annotated != (k->count > 0) || (long long)f.gpu_memory[0] != k->memory0 ||
            n->gpus[0].total != k->memory0)
            fail_msg("annotation %s: want %d GPUs (%lld), extender %u (%llu), cli %d (%lld)",
                     k->gpus, want, k->memory0, f.gpu_count, (unsigned long long)f.gpu_memory[0],
                     n->ngpus, (long long)n->gpus[0].total);
        pool_free(&pool);
        json_decref(node);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pods),
        cmocka_unit_test(test_index_lists),
        cmocka_unit_test(test_pod_units_annotation),
        cmocka_unit_test(test_node_annotations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The pool built from API objects, and the tables printed from it. The
 * gpushare summary is checked against the example of gpushare's user guide
 * (docs/userguide.md), whose alignment and separator length come from the
 * real Go program. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "pool_model.h"
#include "render.h"

#include <string.h>

static void add_json(struct pool *pool, int (*add)(struct pool *, const json_t *), const char *text)
{
    json_error_t error;
    json_t *obj = json_loads(text, 0, &error);
    if (!obj)
        fail_msg("bad test JSON: %s: %s", error.text, text);
    assert_int_equal(add(pool, obj), 0);
    json_decref(obj);
}

static void node(struct pool *pool, const char *name, const char *ip, const char *mem,
                 const char *count, const char *annotations)
{
    char text[2048];
    snprintf(
        text, sizeof text,
        "{\"metadata\": {\"name\": \"%s\", \"annotations\": {%s}},"
        " \"status\": {\"addresses\": [{\"type\": \"Hostname\", \"address\": \"h\"},"
        " {\"type\": \"InternalIP\", \"address\": \"%s\"}],"
        " \"allocatable\": {\"aliyun.com/gpu-mem\": \"%s\", \"aliyun.com/gpu-count\": \"%s\"}}}",
        name, annotations ? annotations : "", ip, mem, count);
    add_json(pool, pool_add_node, text);
}

static void share(struct pool *pool, const char *ns, const char *name, const char *node_name,
                  const char *mem, const char *annotations, const char *phase)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"metadata\": {\"name\": \"%s\", \"namespace\": \"%s\", \"annotations\": {%s}},"
             " \"spec\": {\"nodeName\": \"%s\", \"containers\": [{\"name\": \"a\","
             " \"resources\": {\"limits\": {\"aliyun.com/gpu-mem\": \"%s\"}}}]},"
             " \"status\": {\"phase\": \"%s\"}}",
             name, ns, annotations ? annotations : "", node_name, mem, phase);
    add_json(pool, pool_add_pod, text);
}

static char *rendered(const struct pool *pool, int (*render)(const struct pool *, FILE *))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(render(pool, out), 0);
    fclose(out);
    return buf;
}

static void expect_render(const struct pool *pool, int (*render)(const struct pool *, FILE *),
                          const char *want)
{
    char *got = rendered(pool, render);
    if (strcmp(got, want) != 0)
        fail_msg("got:\n%s\nwant:\n%s", got, want);
    free(got);
}

static void userguide_cluster(struct pool *pool)
{
    pool_init(pool, NULL, NULL);
    node(pool, "cn-shanghai.i-uf61h64dz1tmlob9hmtc", "192.168.0.70", "15", "1", NULL);
    node(pool, "cn-shanghai.i-uf61h64dz1tmlob9hmtb", "192.168.0.71", "15", "1", NULL);
    share(pool, "default", "binpack-1-0", "cn-shanghai.i-uf61h64dz1tmlob9hmtb", "6",
          "\"ALIYUN_COM_GPU_MEM_IDX\": \"0\"", "Running");
    share(pool, "default", "binpack-2-0", "cn-shanghai.i-uf61h64dz1tmlob9hmtc", "3",
          "\"ALIYUN_COM_GPU_MEM_IDX\": \"0\"", "Running");
    pool_finish(pool);
}

static void test_gpushare_summary_matches_userguide(void **state)
{
    (void)state;
    struct pool pool;
    userguide_cluster(&pool);
    expect_render(
        &pool, render_gpushare_summary,
        "NAME                                IPADDRESS     GPU0(Allocated/Total)  GPU Memory(GiB)\n"
        "cn-shanghai.i-uf61h64dz1tmlob9hmtb  192.168.0.71  6/15                   6/15\n"
        "cn-shanghai.i-uf61h64dz1tmlob9hmtc  192.168.0.70  3/15                   3/15\n"
        "------------------------------------------------------------------------------\n"
        "Allocated/Total GPU Memory In Cluster:\n"
        "9/30 (30%)  \n");
    pool_free(&pool);
}

static void test_gpushare_details(void **state)
{
    (void)state;
    struct pool pool;
    pool_init(&pool, NULL, NULL);
    node(&pool, "n1", "10.0.0.1", "30", "2", NULL);
    share(&pool, "default", "b", "n1", "5", "\"ALIYUN_COM_GPU_MEM_IDX\": \"1\"", "Running");
    share(&pool, "default", "a", "n1", "3", "\"ALIYUN_COM_GPU_MEM_IDX\": \"0\"", "Running");
    share(&pool, "ml", "p", "n1", "2", NULL, "Pending");
    pool_finish(&pool);
    /* Rows: GPU 0's pods, GPU 1's, then pending. The separator is the
     * first node's raw pod rows (tabs included) + 10 long. */
    expect_render(&pool, render_gpushare_details,
                  "\n"
                  "NAME:       n1\n"
                  "IPADDRESS:  10.0.0.1\n"
                  "\n"
                  "NAME         NAMESPACE  GPU0(Allocated)  GPU1(Allocated)  Pending(Allocated)  \n"
                  "a            default    3                0                0                   \n"
                  "b            default    0                5                0                   \n"
                  "p            ml         0                0                2                   \n"
                  "Allocated :  10 (33%)   \n"
                  "Total :      30         \n"
                  "--------------------------------------------------------\n"
                  "\n"
                  "\n"
                  "Allocated/Total GPU Memory In Cluster:  10/30 (33%)  \n");
    expect_render(
        &pool, render_gpushare_summary,
        "NAME  IPADDRESS  GPU0(Allocated/Total)  GPU1(Allocated/Total)  PENDING(Allocated)  GPU "
        "Memory(GiB)\n"
        "n1    10.0.0.1   3/15                   5/15                   2                   10/30\n"
        "--------------------------------------------------\n"
        "Allocated/Total GPU Memory In Cluster:\n"
        "10/30 (33%)  \n");
    pool_free(&pool);
}

static void test_gpushare_mib_and_truncated_percent(void **state)
{
    (void)state;
    struct pool pool;
    pool_init(&pool, NULL, NULL);
    node(&pool, "m", "10.0.0.9", "100", "1", NULL); /* per GPU 100: GiB */
    share(&pool, "d", "x", "m", "29", "\"ALIYUN_COM_GPU_MEM_IDX\": \"0\"", "Running");
    pool_finish(&pool);
    /* float64(29)/100*100 = 28.999999999999996: Go prints 28 */
    char *out = rendered(&pool, render_gpushare_summary);
    assert_non_null(strstr(out, "GPU Memory(GiB)\n"));
    assert_non_null(strstr(out, "\n29/100 (28%)  \n"));
    free(out);
    pool_free(&pool);

    pool_init(&pool, NULL, NULL);
    node(&pool, "m", "10.0.0.9", "32510", "2", NULL); /* 16255 per GPU: MiB */
    pool_finish(&pool);
    out = rendered(&pool, render_gpushare_summary);
    assert_non_null(strstr(out, "GPU Memory(MiB)\n"));
    assert_null(strstr(out, "PENDING"));
    free(out);
    pool_free(&pool);
}

static void test_accounting(void **state)
{
    (void)state;
    struct pool pool;
    pool_init(&pool, NULL, NULL);
    node(&pool, "het", "10.0.0.2", "56", "2",
         "\"gpupool.io/gpus\": "
         "\"[{\\\"index\\\":0,\\\"memory\\\":16,\\\"model\\\":\\\"V100\\\",\\\"healthy\\\":true},"
         "{\\\"index\\\":1,\\\"memory\\\":40,\\\"model\\\":\\\"A100\\\",\\\"healthy\\\":false}]\"");
    node(&pool, "bad-annotation", "10.0.0.3", "32", "2",
         "\"gpupool.io/gpus\": \"[{\\\"index\\\": -1}]\"");
    share(&pool, "d", "one", "het", "4", "\"ALIYUN_COM_GPU_MEM_IDX\": \"1\"", "Running");
    share(&pool, "d", "split", "het", "8", "\"ALIYUN_COM_GPU_MEM_IDX\": \"0,1\"", "Running");
    share(&pool, "d", "v2", "het", "6",
          "\"scheduler.framework.gpushare.allocation\": \"{\\\"0\\\": {\\\"0\\\": 2, \\\"1\\\": "
          "4}}\"",
          "Running");
    share(&pool, "d", "done", "het", "9", "\"ALIYUN_COM_GPU_MEM_IDX\": \"0\"", "Succeeded");
    share(&pool, "d", "failed", "het", "9", "\"ALIYUN_COM_GPU_MEM_IDX\": \"0\"", "Failed");
    share(&pool, "d", "bad-index", "het", "1", "\"ALIYUN_COM_GPU_MEM_IDX\": \"7\"", "Running");
    share(&pool, "d", "not-a-number", "het", "1", "\"ALIYUN_COM_GPU_MEM_IDX\": \"x\"", "Running");
    share(&pool, "d", "elsewhere", "no-such-node", "5", NULL, "Running");
    add_json(&pool, pool_add_configmap,
             "{\"metadata\": {\"name\": \"unhealthy-gpu-bad-annotation\", \"namespace\": "
             "\"kube-system\"},"
             " \"data\": {\"gpus\": \"1,x,9\"}}");
    add_json(&pool, pool_add_configmap,
             "{\"metadata\": {\"name\": \"unhealthy-gpu-het\", \"namespace\": \"default\"},"
             " \"data\": {\"gpus\": \"0\"}}");
    pool_finish(&pool);

    assert_int_equal(pool.nnodes, 2);
    const struct pool_node *het = pool_find(&pool, "het");
    assert_non_null(het);
    assert_true(het->gpus_annotated);
    assert_int_equal(het->ngpus, 2);
    assert_int_equal(het->gpus[0].total, 16);
    assert_int_equal(het->gpus[1].total, 40);
    assert_string_equal(het->gpus[1].model, "A100");
    assert_int_equal(het->gpus[0].allocated, 4 + 2);     /* split half + v2 */
    assert_int_equal(het->gpus[1].allocated, 4 + 4 + 4); /* one + split half + v2 */
    assert_int_equal(het->gpus[0].shares, 2);
    assert_int_equal(het->gpus[1].shares, 3);
    assert_false(het->gpus[0].unhealthy); /* the ConfigMap is not in kube-system */
    assert_true(het->gpus[1].unhealthy);
    assert_int_equal(het->npending, 2);
    assert_int_equal(het->pending, 2);

    const struct pool_node *fallback = pool_find(&pool, "bad-annotation");
    assert_false(fallback->gpus_annotated);
    assert_int_equal(fallback->ngpus, 2);
    assert_int_equal(fallback->gpus[1].total, 16);
    assert_true(fallback->gpus[1].unhealthy);
    assert_false(fallback->gpus[0].unhealthy);
    assert_non_null(strstr(pool.warning, "bad-annotation"));

    char *json = rendered(&pool, render_json);
    json_t *doc = json_loads(json, 0, NULL);
    assert_non_null(doc);
    json_t *n0 = json_array_get(json_object_get(doc, "nodes"), 0);
    assert_string_equal(json_string_value(json_object_get(n0, "name")), "bad-annotation");
    json_t *n1 = json_array_get(json_object_get(doc, "nodes"), 1);
    json_t *g1 = json_array_get(json_object_get(n1, "gpus"), 1);
    assert_false(json_is_true(json_object_get(g1, "healthy")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(g1, "memory"), "total")),
                     40);
    assert_int_equal(json_array_size(json_object_get(g1, "pods")), 3);
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(json_object_get(doc, "cluster"), "memory"), "allocated")),
                     18 + 2);
    json_decref(doc);
    free(json);
    pool_free(&pool);
}

static void test_nvidia_resources(void **state)
{
    (void)state;
    struct pool pool;
    pool_init(&pool, NULL, "team");
    add_json(&pool, pool_add_node,
             "{\"metadata\": {\"name\": \"whole\"}, \"status\": {\"allocatable\":"
             " {\"nvidia.com/gpu\": \"8\", \"nvidia.com/mig-1g.5gb\": \"7\", \"cpu\": \"4\"}}}");
    add_json(
        &pool, pool_add_node,
        "{\"metadata\": {\"name\": \"cpu\"}, \"status\": {\"allocatable\": {\"cpu\": \"4\"}}}");
    /* effective request: max(sum of containers 1+2, init container 4) = 4 */
    add_json(&pool, pool_add_pod,
             "{\"metadata\": {\"name\": \"train\", \"namespace\": \"team\"}, \"spec\": "
             "{\"nodeName\": \"whole\","
             " \"initContainers\": [{\"resources\": {\"limits\": {\"nvidia.com/gpu\": \"4\"}}}],"
             " \"containers\": [{\"resources\": {\"limits\": {\"nvidia.com/gpu\": \"1\"}}},"
             "  {\"resources\": {\"requests\": {\"nvidia.com/gpu\": \"2\"}}}]}, \"status\": "
             "{\"phase\": \"Running\"}}");
    add_json(
        &pool, pool_add_pod,
        "{\"metadata\": {\"name\": \"mig\", \"namespace\": \"other\"}, \"spec\": {\"nodeName\": "
        "\"whole\","
        " \"containers\": [{\"resources\": {\"limits\": {\"nvidia.com/mig-1g.5gb\": \"2\"}}}]}}");
    pool_finish(&pool);
    assert_int_equal(pool.nnodes, 1);
    const struct pool_node *n = pool.nodes[0];
    assert_int_equal(n->nresources, 2);
    for (size_t r = 0; r < n->nresources; r++) {
        if (strcmp(n->resources[r].name, "nvidia.com/gpu") == 0) {
            assert_int_equal(n->resources[r].requested, 4);
            assert_int_equal(n->resources[r].allocatable, 8);
            assert_int_equal(n->resources[r].npods, 1);
        } else {
            assert_string_equal(n->resources[r].name, "nvidia.com/mig-1g.5gb");
            assert_int_equal(n->resources[r].requested, 2); /* counted ... */
            assert_int_equal(n->resources[r].npods, 0);     /* ... not listed: -n team */
        }
    }
    char *table = rendered(&pool, render_table);
    assert_non_null(strstr(table, "gpu 4/8, mig-1g.5gb 2/7"));
    assert_non_null(strstr(table, "nvidia.com/gpu requested: 4/8 (50%)\n"));
    free(table);
    pool_free(&pool);
}

static void test_only_node(void **state)
{
    (void)state;
    struct pool pool;
    pool_init(&pool, "b", NULL);
    add_json(&pool, pool_add_node, "{\"metadata\": {\"name\": \"a\"}, \"status\": {}}");
    add_json(&pool, pool_add_node, "{\"metadata\": {\"name\": \"b\"}, \"status\": {}}");
    add_json(&pool, pool_add_node, "{\"metadata\": {}}");
    pool_finish(&pool);
    assert_int_equal(pool.nnodes, 1);
    assert_string_equal(pool.nodes[0]->address, "unknown");
    /* gpushare prints the header and an empty total for a node without GPU memory */
    expect_render(&pool, render_gpushare_summary,
                  "NAME  IPADDRESS  GPU Memory()\n"
                  "\n"
                  "Allocated/Total GPU Memory In Cluster:\n"
                  "0/0 (0%)  \n");
    pool_free(&pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpushare_summary_matches_userguide),
        cmocka_unit_test(test_gpushare_details),
        cmocka_unit_test(test_gpushare_mib_and_truncated_percent),
        cmocka_unit_test(test_accounting),
        cmocka_unit_test(test_nvidia_resources),
        cmocka_unit_test(test_only_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests: quantities, pod requests, node GPUs, index lists (src/poolapi). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "ext_fixtures.h"
#include "poolapi_facts.h"
#include "poolapi_index.h"
#include "poolapi_quantity.h"
#include "objects.h"

static uint64_t q(const char *text, uint64_t scale)
{
    uint64_t v = 12345;
    char err[128];
    assert_int_equal(poolapi_quantity_parse(text, scale, &v, err, sizeof err), 0);
    return v;
}

static void q_bad(const char *text, const char *want)
{
    uint64_t v;
    char err[128] = "";
    assert_int_equal(poolapi_quantity_parse(text, 1, &v, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("%s: \"%s\" lacks \"%s\"", text, err, want);
}

static void test_quantities(void **state)
{
    (void)state;
    assert_int_equal(q("500m", 1000), 500);
    assert_int_equal(q("2", 1000), 2000);
    assert_int_equal(q("0.5", 1000), 500);
    assert_int_equal(q("1.5", 1000), 1500);
    assert_int_equal(q("100u", 1000), 1); /* rounds up */
    assert_int_equal(q("1Gi", 1), 1073741824ull);
    assert_int_equal(q("512Mi", 1), 536870912ull);
    assert_int_equal(q("1G", 1), 1000000000ull);
    assert_int_equal(q("1.5Gi", 1), 1610612736ull);
    assert_int_equal(q("1e3", 1), 1000);
    assert_int_equal(q("1E3", 1), 1000);
    assert_int_equal(q("2E", 1), 2000000000000000000ull); /* exa, not an exponent */
    assert_int_equal(q("100k", 1), 100000);
    assert_int_equal(q("+7", 1), 7);
    assert_int_equal(q("0", 1000), 0);
    assert_int_equal(q("0.0001", 1), 1); /* a speck rounds up to one unit */
    assert_int_equal(q("1n", 1), 1);
    assert_int_equal(q("16", 1), 16);
    assert_int_equal(q("007", 1), 7);
    q_bad("", "empty");
    q_bad("-1", "negative");
    q_bad("abc", "invalid");
    q_bad("1Xi", "invalid");
    q_bad("1.2.3", "invalid");
    q_bad(".", "invalid");
    q_bad("1e", "invalid");
    q_bad("16Ei", "too large");
    q_bad("99999999999999999999999", "too large");
    q_bad("1 ", "invalid");
}

static void test_pod_requests_sum_and_init_max(void **state)
{
    (void)state;
    json_t *pod =
        fx_json("{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u1\"},"
                "\"spec\":{\"containers\":["
                " {\"resources\":{\"requests\":{\"cpu\":\"500m\",\"memory\":\"1Gi\"},\"limits\":{"
                "\"aliyun.com/gpu-mem\":\"3\"}}},"
                " {\"resources\":{\"limits\":{\"cpu\":\"1\",\"aliyun.com/gpu-mem\":\"2\"}}}],"
                " \"initContainers\":[{\"resources\":{\"requests\":{\"cpu\":\"4\",\"aliyun.com/"
                "gpu-mem\":\"4\"}}}],"
                " \"overhead\":{\"cpu\":\"100m\"}},"
                "\"status\":{\"phase\":\"Pending\"}}");
    struct pod_facts f;
    char err[256];
    assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
    assert_string_equal(f.name, "p");
    assert_string_equal(f.ns, "ns");
    assert_string_equal(f.uid, "u1");
    assert_null(f.node_name);
    assert_int_equal(f.cpu_milli, 4100); /* max(0.5+1, 4) + 0.1 */
    assert_int_equal(f.memory_bytes, 1073741824ull);
    assert_int_equal(f.gpu_memory, 5); /* max(3+2, 4) */
    assert_int_equal(f.gpu_count, 1);
    assert_false(f.assigned.present);
    json_decref(pod);
}

static void test_pod_multi_gpu_and_request(void **state)
{
    (void)state;
    json_t *pod = fx_json(
        "{\"metadata\":{\"uid\":\"u\",\"annotations\":{\"gpupool.io/gpu-model\":\"V100|A100\"}},"
        "\"spec\":{\"containers\":[{\"resources\":{\"limits\":"
        "{\"aliyun.com/gpu-mem\":\"8\",\"aliyun.com/gpu-count\":\"2\"}}}]}}");
    struct pod_facts f;
    struct placement_request req;
    char err[256];
    assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
    assert_int_equal(f.gpu_count, 2);
    assert_string_equal(f.gpu_model, "V100|A100");
    assert_int_equal(objects_pod_request(&f, &req, err, sizeof err), 0);
    assert_int_equal(req.gpu_count, 2);
    assert_int_equal(req.units, 4);
    f.gpu_memory = 7; /* not divisible */
    assert_int_equal(objects_pod_request(&f, &req, err, sizeof err), -1);
    assert_non_null(strstr(err, "not divisible"));
    f.gpu_memory = 8;
    f.gpu_count = 17;
    assert_int_equal(objects_pod_request(&f, &req, err, sizeof err), -1);
    assert_non_null(strstr(err, "out of range"));
    json_decref(pod);
}

static void test_pod_assignment_and_states(void **state)
{
    (void)state;
    json_t *pod = fx_pod("u", "p", 6, "n1", "0,2");
    struct pod_facts f;
    char err[256];
    assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
    assert_string_equal(f.node_name, "n1");
    assert_true(f.assigned.present);
    assert_int_equal(f.assigned.gpu_mask, 0x5);
    assert_int_equal(f.assigned.gpu_count, 2);
    assert_int_equal(f.assigned.pod_memory, 6);
    assert_false(f.terminated);
    json_object_set_new(json_object_get(pod, "status"), "phase", json_string("Succeeded"));
    json_object_set_new(json_object_get(pod, "metadata"), "deletionTimestamp", json_string("x"));
    json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                        "ALIYUN_COM_GPU_MEM_IDX", json_string("99"));
    assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
    assert_true(f.terminated);
    assert_true(f.deleting);
    assert_false(f.assigned.present); /* index out of range: ignored */
    json_decref(pod);
}

static void test_pod_mistyped(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"spec\":[]}",
        "{\"metadata\":{\"name\":5}}",
        "{\"spec\":{\"containers\":{}}}",
        "{\"spec\":{\"containers\":[5]}}",
        "{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{\"aliyun.com/"
        "gpu-mem\":\"lots\"}}}]}}",
        "{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{\"cpu\":true}}}]}}",
        "{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":-3}}}]}}",
        "{\"metadata\":{\"annotations\":{\"gpupool.io/gpu-count\":\"two\"}}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *pod = fx_json(bad[i]);
        struct pod_facts f;
        char err[256] = "";
        assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), -1);
        assert_true(strlen(err) > 0);
        json_decref(pod);
    }
    struct pod_facts f;
    char err[64];
    assert_int_equal(poolapi_pod_facts(NULL, &f, err, sizeof err), -1);
}

static void test_node_uniform_and_annotation(void **state)
{
    (void)state;
    json_t *node = fx_node("n1", 32, 4);
    struct node_facts f;
    char err[256];
    assert_int_equal(poolapi_node_facts(node, &f, err, sizeof err), 0);
    assert_string_equal(f.name, "n1");
    assert_int_equal(f.cpu_milli, 8000);
    assert_int_equal(f.memory_bytes, 32ull << 30);
    assert_int_equal(f.gpu_memory_total, 32);
    assert_int_equal(f.gpu_count, 4);
    assert_int_equal(f.gpu_memory[3], 8);
    assert_false(f.from_annotation);

    json_t *meta = json_object_get(node, "metadata");
    json_object_set_new(
        meta, "annotations",
        json_pack("{s:s}", "gpupool.io/gpus",
                  "[{\"index\":1,\"memory\":24,\"model\":\"A10\",\"healthy\":false},"
                  "{\"index\":0,\"memory\":8,\"model\":\"T4\"}]"));
    assert_int_equal(poolapi_node_facts(node, &f, err, sizeof err), 0);
    assert_true(f.from_annotation);
    assert_int_equal(f.gpu_count, 2);
    assert_int_equal(f.gpu_memory[0], 8);
    assert_int_equal(f.gpu_memory[1], 24);
    assert_int_equal(f.unhealthy, 0x2);
    assert_string_equal(f.model, "T4");

    /* A broken annotation falls back to total / count, with a warning. */
    json_object_set_new(meta, "annotations",
                        json_pack("{s:s}", "gpupool.io/gpus",
                                  "[{\"index\":0,\"memory\":8},{\"index\":0,\"memory\":8}]"));
    json_object_set_new(meta, "labels", json_pack("{s:s}", "nvidia.com/gpu.product", "Tesla-V100"));
    assert_int_equal(poolapi_node_facts(node, &f, err, sizeof err), 0);
    assert_false(f.from_annotation);
    assert_int_equal(f.gpu_count, 4);
    assert_non_null(strstr(f.warning, "ignored"));
    assert_string_equal(f.model, "Tesla-V100");
    json_decref(node);

    node = fx_json("{\"metadata\":{\"name\":\"x\"},\"status\":{\"allocatable\":{\"cpu\":[]}}}");
    assert_int_equal(poolapi_node_facts(node, &f, err, sizeof err), -1);
    json_decref(node);
}

/* Where the extender reads a node's agent directly: the first InternalIP,
 * else ExternalIP, else Hostname, whatever their order in the list. */
static void test_node_address(void **state)
{
    (void)state;
    struct node_facts f;
    char err[256];
    static const struct {
        const char *addresses, *want;
    } cases[] = {
        {"[{\"type\":\"Hostname\",\"address\":\"h\"},{\"type\":\"ExternalIP\",\"address\":"
         "\"1.2.3.4\"},{\"type\":\"InternalIP\",\"address\":\"10.0.0.7\"},"
         "{\"type\":\"InternalIP\",\"address\":\"fd00::7\"}]",
         "10.0.0.7"},
        {"[{\"type\":\"Hostname\",\"address\":\"h\"},{\"type\":\"ExternalIP\",\"address\":"
         "\"1.2.3.4\"}]",
         "1.2.3.4"},
        {"[{\"type\":\"InternalIP\",\"address\":\"\"},{\"type\":\"Hostname\",\"address\":\"h\"}]",
         "h"},
        {"[]", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{\"metadata\":{\"name\":\"x\"},\"status\":{\"addresses\":%s}}",
                 cases[i].addresses);
        json_t *node = fx_json(text);
        assert_int_equal(poolapi_node_facts(node, &f, err, sizeof err), 0);
        if (cases[i].want)
            assert_string_equal(f.address, cases[i].want);
        else
            assert_null(f.address);
        json_decref(node);
    }
}

static void test_index_lists(void **state)
{
    (void)state;
    struct poolapi_index_list l;
    char buf[64], err[128];
    assert_int_equal(poolapi_index_parse("1", &l, err, sizeof err), 0);
    assert_int_equal(l.mask, 0x2);
    assert_int_equal(poolapi_index_parse("15,0,3", &l, err, sizeof err), 0);
    assert_int_equal(l.mask, 0x8009);
    assert_int_equal(l.count, 3);
    assert_int_equal(l.gpu[0], 15); /* the order written is kept */
    assert_int_equal(l.gpu[2], 3);
    assert_string_equal(poolapi_index_format(l.mask, buf, sizeof buf), "0,3,15");
    /* The one grammar: blanks (the extender took "0, 3"), signs, repeats,
     * empty items and indices >= 16 are refused. */
    const char *bad[] = {"",   "16", "1,1",  "1,", ",1", "-1",
                         "+1", "a",  "0, 3", " 1", "1 ", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (poolapi_index_parse(bad[i], &l, err, sizeof err) != -1)
            fail_msg("accepted \"%s\"", bad[i]);
    assert_int_equal(poolapi_index_parse(NULL, &l, err, sizeof err), -1);
    assert_non_null(strstr(err, "ALIYUN_COM_GPU_MEM_IDX"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantities),
        cmocka_unit_test(test_pod_requests_sum_and_init_max),
        cmocka_unit_test(test_pod_multi_gpu_and_request),
        cmocka_unit_test(test_pod_assignment_and_states),
        cmocka_unit_test(test_pod_mistyped),
        cmocka_unit_test(test_node_uniform_and_annotation),
        cmocka_unit_test(test_node_address),
        cmocka_unit_test(test_index_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests: the extender JSON envelope (protocol.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "ext_fixtures.h"
#include "protocol.h"

#define POD                                                                                        \
    "{\"metadata\":{\"name\":\"p\",\"namespace\":\"d\",\"uid\":\"u\"},\"spec\":{\"containers\":[]" \
    "}}"

static int parse(const char *body, struct extender_args *a, char *err, size_t len)
{
    return protocol_parse_args(body, strlen(body), a, err, len);
}

static void test_node_names(void **state)
{
    (void)state;
    struct extender_args a;
    char err[256];
    assert_int_equal(
        parse("{\"Pod\":" POD ",\"Nodes\":null,\"NodeNames\":[\"a\",\"b\"]}", &a, err, sizeof err),
        0);
    assert_true(a.node_cache_capable);
    assert_int_equal(a.count, 2);
    assert_string_equal(a.names[1], "b");
    assert_null(a.nodes);
    assert_string_equal(a.facts.name, "p");
    protocol_args_free(&a);
    assert_int_equal(parse("{\"Pod\":" POD ",\"NodeNames\":[]}", &a, err, sizeof err), 0);
    assert_int_equal(a.count, 0);
    protocol_args_free(&a);
    /* Escapes, other keys and odd layouts take the general path: same result. */
    static const char *const variants[] = {
        "{\"NodeNames\" : [ \"a\" , \"b\" ] , \"Pod\":" POD "}",
        "{\"Pod\":" POD ",\"NodeNames\":[\"\\u0061\",\"b\"]}",
        "{\"Pod\":" POD ",\"Extra\":1,\"NodeNames\":[\"a\",\"b\"]}",
        " {\"Pod\":" POD ",\"Nodes\":null,\"NodeNames\":[\"a\",\"b\"]}\n",
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
        assert_int_equal(parse(variants[i], &a, err, sizeof err), 0);
        assert_int_equal(a.count, 2);
        assert_string_equal(a.names[0], "a");
        assert_string_equal(a.names[1], "b");
        assert_string_equal(a.facts.uid, "u");
        struct filter_result r;
        size_t len;
        protocol_filter_begin(&r, &a);
        protocol_filter_add(&r, 0, true, NULL);
        protocol_filter_add(&r, 1, false, "no");
        char *body = protocol_filter_finish(&r, &len);
        assert_string_equal(body,
                            "{\"Nodes\":null,\"NodeNames\":[\"a\"],\"FailedNodes\":{\"b\":\"no\"},"
                            "\"FailedAndUnresolvableNodes\":null,\"Error\":\"\"}");
        free(body);
        protocol_args_free(&a);
    }
    /* The fast path refuses what the general path refuses. */
    assert_int_equal(parse("{\"Pod\":" POD ",\"NodeNames\":[\"a\",]}", &a, err, sizeof err), -1);
    assert_int_equal(
        parse("{\"Pod\":{\"a\":1,\"a\":2},\"NodeNames\":[\"a\"]}", &a, err, sizeof err), -1);
    assert_int_equal(parse("{\"Pod\":" POD ",\"NodeNames\":[\"a\"]} x", &a, err, sizeof err), -1);
}

static void test_full_nodes(void **state)
{
    (void)state;
    struct extender_args a;
    char err[256];
    assert_int_equal(
        parse("{\"Pod\":" POD
              ",\"Nodes\":{\"items\":[{\"metadata\":{\"name\":\"n1\"}}]},\"NodeNames\":null}",
              &a, err, sizeof err),
        0);
    assert_false(a.node_cache_capable);
    assert_int_equal(a.count, 1);
    assert_string_equal(a.names[0], "n1");
    assert_non_null(a.nodes[0]);

    /* The answer keeps the full node objects in Nodes.items. */
    struct filter_result r;
    size_t len;
    protocol_filter_begin(&r, &a);
    protocol_filter_add(&r, 0, true, NULL);
    char *body = protocol_filter_finish(&r, &len);
    json_t *out = fx_json(body);
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(
                json_array_get(json_object_get(json_object_get(out, "Nodes"), "items"), 0),
                "metadata"),
            "name")),
        "n1");
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "NodeNames"), 0)),
                        "n1");
    assert_string_equal(json_string_value(json_object_get(out, "Error")), "");
    json_decref(out);
    free(body);
    protocol_args_free(&a);
}

static void bad(const char *body, const char *want)
{
    struct extender_args a;
    char err[256] = "";
    assert_int_equal(parse(body, &a, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("body %s: error \"%s\" lacks \"%s\"", body, err, want);
    assert_null(a.root);
}

static void test_bad_args(void **state)
{
    (void)state;
    bad("", "empty");
    bad("nonsense", "not valid JSON");
    bad("[1,2]", "must be a JSON object");
    bad("{\"Pod\":" POD ",\"NodeNames\":[\"a\"]", "not valid JSON");
    bad("{\"NodeNames\":[\"a\"]}", "Pod must be a Pod object");
    bad("{\"Pod\":\"x\",\"NodeNames\":[\"a\"]}", "Pod must be a Pod object");
    bad("{\"Pod\":" POD "}", "neither NodeNames nor Nodes");
    bad("{\"Pod\":" POD ",\"NodeNames\":\"a\"}", "NodeNames must be an array");
    bad("{\"Pod\":" POD ",\"NodeNames\":[1]}", "NodeNames[0] must be a string");
    bad("{\"Pod\":" POD ",\"Nodes\":{\"items\":{}}}", "NodeList");
    bad("{\"Pod\":" POD ",\"Nodes\":{\"items\":[{}]}}", "metadata.name");
    bad("{\"Pod\":{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{\"cpu\":\"x\"}}}]}},"
        "\"NodeNames\":[]}",
        "ExtenderArgs.Pod:");
    bad("{\"Pod\":" POD ",\"Pod\":" POD ",\"NodeNames\":[]}", "duplicate");
}

static void test_depth(void **state)
{
    (void)state;
    char deep[400];
    size_t n = 0;
    for (int i = 0; i < PROTOCOL_MAX_DEPTH + 1; i++)
        deep[n++] = '[';
    deep[n] = '\0';
    assert_int_equal(protocol_json_depth(deep, n, PROTOCOL_MAX_DEPTH), -1);
    assert_int_equal(protocol_json_depth("{\"a\":\"[[[[\\\"[[[\"}", 17, 2),
                     1); /* strings skipped */
    assert_int_equal(protocol_json_depth("{\"a\":[{}]}", 10, 64), 3);
    bad(deep, "nested deeper");
}

/* n bytes of text holding k copies of unit inside one array. */
static char *repeated(const char *unit, size_t k, size_t *n)
{
    size_t u = strlen(unit);
    char *text = malloc(k * u + 3);
    assert_non_null(text);
    text[0] = '[';
    for (size_t i = 0; i < k; i++)
        memcpy(text + 1 + i * u, unit, u);
    text[1 + k * u - 1] = ']'; /* replaces the last comma */
    text[1 + k * u] = '\0';
    *n = k * u + 1;
    return text;
}

static void test_value_budget(void **state)
{
    (void)state;
    char err[256];
    size_t n;
    /* Empty objects, 3 bytes each: over the container budget once past
     * the base allowance; strings never count. */
    char *t = repeated("{},", 1000, &n);
    assert_int_equal(protocol_json_bounded(t, n, err, sizeof err), 0);
    free(t);
    t = repeated("{},", 100000, &n);
    assert_int_equal(protocol_json_bounded(t, n, err, sizeof err), -1);
    assert_non_null(strstr(err, "too many JSON values"));
    free(t);
    /* Scalars, 2 bytes each: over the element budget. */
    t = repeated("0,", 100000, &n);
    assert_int_equal(protocol_json_bounded(t, n, err, sizeof err), -1);
    free(t);
    /* The same count padded to 8 bytes per element and 64 per container is allowed. */
    t = repeated("0,      ", 100000, &n);
    assert_int_equal(protocol_json_bounded(t, n, err, sizeof err), 0);
    free(t);
    t = repeated("\"{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\",", 100000, &n);
    assert_int_equal(protocol_json_bounded(t, n, err, sizeof err), 0);
    free(t);
    /* And the parsers refuse such a body with that message. */
    t = repeated("{},", 100000, &n);
    char *body = malloc(n + 100);
    assert_non_null(body);
    int len = snprintf(body, n + 100, "{\"Pod\":" POD ",\"NodeNames\":[\"a\"],\"X\":%s}", t);
    bad(body, "too many JSON values");
    struct binding_args b;
    len = snprintf(body, n + 100, "{\"PodName\":\"p\",\"X\":%s}", t);
    assert_int_equal(protocol_parse_binding(body, (size_t)len, &b, err, sizeof err), -1);
    assert_non_null(strstr(err, "too many JSON values"));
    free(body);
    free(t);
    char deep[200];
    memset(deep, '[', PROTOCOL_MAX_DEPTH + 1);
    assert_int_equal(protocol_json_bounded(deep, PROTOCOL_MAX_DEPTH + 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "nested deeper"));
}

static void test_binding_args(void **state)
{
    (void)state;
    struct binding_args b;
    char err[256];
    const char *ok =
        "{\"PodName\":\"p-1\",\"PodNamespace\":\"default\",\"PodUID\":\"abc\",\"Node\":\"n1.x\"}";
    assert_int_equal(protocol_parse_binding(ok, strlen(ok), &b, err, sizeof err), 0);
    assert_string_equal(b.pod_name, "p-1");
    assert_string_equal(b.pod_uid, "abc");
    assert_string_equal(b.node, "n1.x");
    protocol_binding_free(&b);
    const char *no_uid = "{\"PodName\":\"p\",\"PodNamespace\":\"d\",\"Node\":\"n\"}";
    assert_int_equal(protocol_parse_binding(no_uid, strlen(no_uid), &b, err, sizeof err), 0);
    assert_string_equal(b.pod_uid, "");
    protocol_binding_free(&b);
    /* the longest names Kubernetes allows: a 63-byte namespace, a 253-byte
     * pod name of long dot-separated parts */
    char name[254], ns[64], longest[600];
    memset(name, 'x', 253);
    name[200] = '.'; /* parts of 200 and 52 bytes */
    name[253] = '\0';
    memset(ns, 'n', 63);
    ns[62] = '0';
    ns[63] = '\0';
    snprintf(longest, sizeof longest,
             "{\"PodName\":\"%s\",\"PodNamespace\":\"%s\",\"Node\":\"a.b-c.9\"}", name, ns);
    assert_int_equal(protocol_parse_binding(longest, strlen(longest), &b, err, sizeof err), 0);
    assert_int_equal(strlen(b.pod_name), 253);
    assert_int_equal(strlen(b.pod_namespace), 63);
    protocol_binding_free(&b);
    snprintf(longest, sizeof longest, "{\"PodName\":\"%sx\",\"PodNamespace\":\"d\",\"Node\":\"n\"}",
             name);
    assert_int_equal(protocol_parse_binding(longest, strlen(longest), &b, err, sizeof err), -1);
    snprintf(longest, sizeof longest, "{\"PodName\":\"p\",\"PodNamespace\":\"%sx\",\"Node\":\"n\"}",
             ns);
    assert_int_equal(protocol_parse_binding(longest, strlen(longest), &b, err, sizeof err), -1);
    static const char *const bads[][2] = {
        {"{\"PodNamespace\":\"d\",\"Node\":\"n\"}", "PodName is missing"},
        {"{\"PodName\":\"p\",\"PodNamespace\":\"d\",\"Node\":\"\"}", "Node is missing"},
        {"{\"PodName\":5,\"PodNamespace\":\"d\",\"Node\":\"n\"}", "must be a string"},
        {"{\"PodName\":\"../x\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "not a valid object name"},
        {"{\"PodName\":\"p\",\"PodNamespace\":\"d?x=1\",\"Node\":\"n\"}",
         "not a valid object name"},
        {"{\"PodName\":\"p\",\"PodNamespace\":\"d\",\"PodUID\":\"a/b\",\"Node\":\"n\"}",
         "not a UID"},
        /* D7: names Kubernetes never gives, which libcurl folds into other paths */
        {"{\"PodName\":\"..\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "PodName \"..\" is not"},
        {"{\"PodName\":\".\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "PodName \".\" is not"},
        {"{\"PodName\":\"p\",\"PodNamespace\":\"..\",\"Node\":\"n\"}",
         "a namespace is a DNS-1123 label"},
        {"{\"PodName\":\"p\",\"PodNamespace\":\"a.b\",\"Node\":\"n\"}",
         "a namespace is a DNS-1123 label"},
        {"{\"PodName\":\"p\",\"PodNamespace\":\"-d\",\"Node\":\"n\"}",
         "a namespace is a DNS-1123 label"},
        {"{\"PodName\":\"p\",\"PodNamespace\":\"d\",\"Node\":\"..\"}", "Node \"..\" is not"},
        {"{\"PodName\":\".p\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "not a valid object"},
        {"{\"PodName\":\"p.\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "not a valid object"},
        {"{\"PodName\":\"a..b\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "not a valid object"},
        {"{\"PodName\":\"a.-b\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "not a valid object"},
        {"{\"PodName\":\"p-\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "not a valid object"},
        {"{\"PodName\":\"P\",\"PodNamespace\":\"d\",\"Node\":\"n\"}", "not a valid object"},
        {"{\"PodName\":\"p\",\"PodNamespace\":\"d\",\"PodUID\":\"..\",\"Node\":\"n\"}",
         "not a UID"},
        {"[]", "must be a JSON object"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        err[0] = '\0';
        assert_int_equal(
            protocol_parse_binding(bads[i][0], strlen(bads[i][0]), &b, err, sizeof err), -1);
        if (!strstr(err, bads[i][1]))
            fail_msg("%s: \"%s\" lacks \"%s\"", bads[i][0], err, bads[i][1]);
    }
}

static void test_replies(void **state)
{
    (void)state;
    size_t len;
    char *body = protocol_error("", &len);
    assert_string_equal(body, "{\"Error\":\"\"}");
    free(body);
    /* A message cut inside a UTF-8 sequence still gives valid JSON. */
    body = protocol_error("n\xc3", &len);
    assert_string_equal(body, "{\"Error\":\"n?\"}");
    free(body);
    body = protocol_filter_error("boom", &len);
    json_t *v = fx_json(body);
    assert_string_equal(json_string_value(json_object_get(v, "Error")), "boom");
    assert_true(json_is_null(json_object_get(v, "NodeNames")));
    json_decref(v);
    free(body);

    struct extender_args a;
    char err[128];
    assert_int_equal(parse("{\"Pod\":" POD ",\"NodeNames\":[\"a\",\"b\"]}", &a, err, sizeof err),
                     0);
    int prio[2] = {10, 3};
    body = protocol_priorities(&a, prio, &len);
    assert_string_equal(body, "[{\"Host\":\"a\",\"Score\":10},{\"Host\":\"b\",\"Score\":3}]");
    free(body);
    struct filter_result r;
    protocol_filter_begin(&r, &a);
    protocol_filter_add(&r, 0, false, "full");
    protocol_filter_add(&r, 1, true, NULL);
    body = protocol_filter_finish(&r, &len);
    assert_string_equal(body,
                        "{\"Nodes\":null,\"NodeNames\":[\"b\"],\"FailedNodes\":{\"a\":\"full\"},"
                        "\"FailedAndUnresolvableNodes\":null,\"Error\":\"\"}");
    free(body);
    protocol_args_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_names),   cmocka_unit_test(test_full_nodes),
        cmocka_unit_test(test_bad_args),     cmocka_unit_test(test_depth),
        cmocka_unit_test(test_value_budget), cmocka_unit_test(test_binding_args),
        cmocka_unit_test(test_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

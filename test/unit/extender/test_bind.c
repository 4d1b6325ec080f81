/* Unit tests: the bind verb against a scripted API -- annotations, Binding,
 * rollback of the charge and of the annotations (bind.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"
#include "ext_fixtures.h"

/* A scripted API server: what it was asked, and how to fail. */
struct fake_api {
    json_t *pod;      /* GET answer (NULL: 404) */
    int patch_status; /* 0: ok; else fail with this status */
    int bind_status;  /* 0: ok; -1: connection lost; else a Status */
    int gets, patches, binds;
    json_t *last_patch;
    json_t *first_patch;
    char bound_node[64], bound_uid[64];
};

static int api_fail(struct kube_error *err, int status, const char *message)
{
    err->http_status = status;
    snprintf(err->message, sizeof err->message, "%s", message);
    return -1;
}

static int fake_get(void *ctx, const char *ns, const char *name, json_t **out,
                    struct kube_error *err)
{
    struct fake_api *a = ctx;
    (void)ns;
    (void)name;
    a->gets++;
    if (!a->pod)
        return api_fail(err, 404, "pods \"x\" not found");
    *out = json_incref(a->pod);
    return 0;
}

static int fake_patch(void *ctx, const char *ns, const char *name, const json_t *patch,
                      struct kube_error *err)
{
    struct fake_api *a = ctx;
    (void)ns;
    (void)name;
    a->patches++;
    json_decref(a->last_patch);
    a->last_patch = json_deep_copy(patch);
    if (!a->first_patch)
        a->first_patch = json_deep_copy(patch);
    return a->patch_status ? api_fail(err, a->patch_status, "patch refused") : 0;
}

static int fake_bind(void *ctx, const char *ns, const char *name, const char *uid, const char *node,
                     struct kube_error *err)
{
    struct fake_api *a = ctx;
    (void)ns;
    (void)name;
    a->binds++;
    if (a->bind_status == -1)
        return api_fail(err, 0, "connection reset");
    if (a->bind_status)
        return api_fail(err, a->bind_status, "pod is already assigned to node \"other\"");
    snprintf(a->bound_node, sizeof a->bound_node, "%s", node);
    snprintf(a->bound_uid, sizeof a->bound_uid, "%s", uid ? uid : "");
    return 0;
}

struct fixture {
    struct cache *cache;
    struct fake_api api;
    struct bind_api ops;
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    fx->cache = cache_new(PLACEMENT_BINPACK);
    fx->ops = (struct bind_api){&fx->api, fake_get, fake_patch, fake_bind};
    char err[256];
    json_t *node = fx_node("n1", 16, 2);
    assert_int_equal(cache_node_upsert(fx->cache, node, err, sizeof err), 0);
    json_decref(node);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    cache_free(fx->cache);
    json_decref(fx->api.pod);
    json_decref(fx->api.last_patch);
    json_decref(fx->api.first_patch);
    free(fx);
    return 0;
}

static int bind(struct fixture *fx, const char *uid, char *err, size_t len)
{
    json_t *root = json_pack("{s:s, s:s, s:s, s:s}", "PodName", "p", "PodNamespace", "default",
                             "PodUID", uid, "Node", "n1");
    struct binding_args args = {root, "p", "default", uid, "n1"};
    int rc = bind_pod(fx->cache, &fx->ops, &args, err, len);
    json_decref(root);
    return rc;
}

static long long used(struct cache *c, int dev)
{
    json_t *v = cache_inspect(c, "n1");
    json_t *d = json_array_get(
        json_object_get(json_array_get(json_object_get(v, "nodes"), 0), "devs"), (size_t)dev);
    long long u = json_integer_value(json_object_get(d, "usedGPU"));
    json_decref(v);
    return u;
}

static const char *ann(const json_t *patch, const char *key)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(patch, "metadata"), "annotations"), key));
}

static void test_success_writes_gpushare_annotations(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    fx->api.pod = fx_pod("u1", "p", 6, NULL, NULL); /* not in the cache: fetched */
    assert_int_equal(bind(fx, "u1", err, sizeof err), 0);
    assert_int_equal(fx->api.gets, 1);
    assert_int_equal(fx->api.patches, 1);
    assert_int_equal(fx->api.binds, 1);
    assert_string_equal(fx->api.bound_node, "n1");
    assert_string_equal(fx->api.bound_uid, "u1");
    assert_string_equal(ann(fx->api.last_patch, "ALIYUN_COM_GPU_MEM_IDX"), "0");
    assert_string_equal(ann(fx->api.last_patch, "ALIYUN_COM_GPU_MEM_POD"), "6");
    assert_string_equal(ann(fx->api.last_patch, "ALIYUN_COM_GPU_MEM_DEV"), "8");
    assert_string_equal(ann(fx->api.last_patch, "ALIYUN_COM_GPU_MEM_ASSIGNED"), "false");
    const char *t = ann(fx->api.last_patch, "ALIYUN_COM_GPU_MEM_ASSUME_TIME");
    assert_non_null(t);
    assert_true(strlen(t) >= 19); /* nanoseconds since the epoch */
    assert_int_equal(used(fx->cache, 0), 6);
    /* Best fit: the next 2 goes onto the same GPU. */
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u2", "p", 2, NULL, NULL);
    assert_int_equal(bind(fx, "u2", err, sizeof err), 0);
    assert_int_equal(used(fx->cache, 0), 8);
    /* The same pod again: refused without touching the API. */
    int calls = fx->api.patches + fx->api.binds;
    assert_int_equal(bind(fx, "u2", err, sizeof err), -1);
    assert_non_null(strstr(err, "already bound"));
    assert_int_equal(fx->api.patches + fx->api.binds, calls);
}

static void test_failed_binding_rolls_back(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    fx->api.pod = fx_pod("u1", "p", 8, NULL, NULL);
    fx->api.bind_status = 409;
    assert_int_equal(bind(fx, "u1", err, sizeof err), -1);
    assert_non_null(strstr(err, "already assigned"));
    assert_int_equal(used(fx->cache, 0), 0);
    /* Two patches: the annotations, then their removal (nulls). */
    assert_int_equal(fx->api.patches, 2);
    json_t *a = json_object_get(json_object_get(fx->api.last_patch, "metadata"), "annotations");
    assert_true(json_is_null(json_object_get(a, "ALIYUN_COM_GPU_MEM_IDX")));
    assert_true(json_is_null(json_object_get(a, "ALIYUN_COM_GPU_MEM_ASSUME_TIME")));
    /* The memory is free again for the next pod. */
    fx->api.bind_status = 0;
    assert_int_equal(bind(fx, "u1", err, sizeof err), 0);
    assert_int_equal(used(fx->cache, 0), 8);
}

static void test_lost_connection_keeps_annotations(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    fx->api.pod = fx_pod("u1", "p", 8, NULL, NULL);
    fx->api.bind_status = -1;
    assert_int_equal(bind(fx, "u1", err, sizeof err), -1);
    assert_int_equal(fx->api.patches, 1); /* no removal: the Binding may exist */
    assert_int_equal(used(fx->cache, 0), 0);
}

static void test_failed_patch_skips_binding(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    fx->api.pod = fx_pod("u1", "p", 8, NULL, NULL);
    fx->api.patch_status = 500;
    assert_int_equal(bind(fx, "u1", err, sizeof err), -1);
    assert_non_null(strstr(err, "annotating"));
    assert_int_equal(fx->api.binds, 0);
    assert_int_equal(used(fx->cache, 0), 0);
}

static void test_pod_problems(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    assert_int_equal(bind(fx, "u1", err, sizeof err), -1); /* GET answers 404 */
    assert_non_null(strstr(err, "not found"));
    fx->api.pod = fx_pod("other-uid", "p", 8, NULL, NULL);
    assert_int_equal(bind(fx, "u1", err, sizeof err), -1);
    assert_non_null(strstr(err, "re-created"));
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u1", "p", 8, "n2", NULL);
    assert_int_equal(bind(fx, "u1", err, sizeof err), -1);
    assert_non_null(strstr(err, "already bound to node n2"));
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u1", "p", 9, NULL, NULL);
    assert_int_equal(bind(fx, "u1", err, sizeof err), -1);
    assert_non_null(strstr(err, "Insufficient GPU Memory"));
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u1", "p", 8, NULL, NULL);
    /* No UID in the request: the API's pod supplies it. */
    assert_int_equal(bind(fx, "", err, sizeof err), 0);
    assert_string_equal(fx->api.bound_uid, "u1");
    assert_int_equal(fx->api.binds, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_success_writes_gpushare_annotations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_binding_rolls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_connection_keeps_annotations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_patch_skips_binding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pod_problems, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

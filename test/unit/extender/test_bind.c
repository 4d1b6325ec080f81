/* Unit tests: the bind verb against a scripted API -- one Binding carrying
 * the annotations, the UID check, and what becomes of the charge after a
 * refusal, an unknown outcome and its read-back (bind.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bind.h"
#include "clock.h"
#include "ext_fixtures.h"

/* A scripted API server: what it was asked, and how to fail. */
enum { BIND_OK_ = 0, BIND_RESET = -1, BIND_NOT_SENT = -2 };
struct fake_api {
    json_t *pod;     /* GET answer (NULL: 404) */
    int bind_status; /* BIND_OK_, BIND_RESET (no answer), BIND_NOT_SENT, else a Status code */
    int gets, binds;
    json_t *annotations; /* of the last Binding */
    int64_t deadline;    /* of the last Binding */
    char bound_node[64], bound_uid[64];
};

static int api_fail(struct kube_error *err, int status, const char *reason, const char *message)
{
    err->http_status = status;
    snprintf(err->reason, sizeof err->reason, "%s", reason);
    snprintf(err->message, sizeof err->message, "%s", message);
    return -1;
}

static int fake_get(void *ctx, const char *ns, const char *name, int64_t deadline, json_t **out,
                    struct kube_error *err)
{
    struct fake_api *a = ctx;
    (void)ns;
    (void)name;
    (void)deadline;
    a->gets++;
    if (!a->pod)
        return api_fail(err, 404, "NotFound", "pods \"x\" not found");
    *out = json_incref(a->pod);
    return 0;
}

static int fake_bind(void *ctx, const char *ns, const char *name, const char *uid, const char *node,
                     const json_t *annotations, int64_t deadline, struct kube_error *err)
{
    struct fake_api *a = ctx;
    (void)ns;
    (void)name;
    a->binds++;
    a->deadline = deadline;
    json_decref(a->annotations);
    a->annotations = annotations ? json_deep_copy(annotations) : NULL;
    if (a->bind_status == BIND_RESET)
        return api_fail(err, 0, "ConnectionError", "connection reset");
    if (a->bind_status == BIND_NOT_SENT)
        return api_fail(err, 0, "DeadlineExceeded", "deadline passed before it was sent");
    if (a->bind_status)
        return api_fail(err, a->bind_status, "Conflict", "pod is already assigned to node \"x\"");
    snprintf(a->bound_node, sizeof a->bound_node, "%s", node);
    snprintf(a->bound_uid, sizeof a->bound_uid, "%s", uid ? uid : "");
    return 0;
}

struct fixture {
    struct cache *cache;
    struct fake_api api;
    struct bind_api ops;
    int64_t deadline_ms; /* each bind's deadline from now */
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    fx->cache = cache_new(PLACEMENT_BINPACK);
    fx->ops = (struct bind_api){&fx->api, fake_get, fake_bind, 0};
    fx->deadline_ms = 1000;
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
    json_decref(fx->api.annotations);
    free(fx);
    return 0;
}

static enum bind_result bind_named(struct fixture *fx, const char *name, const char *uid, char *err,
                                   size_t len)
{
    json_t *root = json_pack("{s:s, s:s, s:s, s:s}", "PodName", name, "PodNamespace", "default",
                             "PodUID", uid, "Node", "n1");
    struct binding_args args = {root, name, "default", uid, "n1"};
    enum bind_result r = bind_pod_result(fx->cache, &fx->ops, &args,
                                         clock_now_ns() + fx->deadline_ms * 1000000, err, len);
    json_decref(root);
    return r;
}

static enum bind_result bind(struct fixture *fx, const char *uid, char *err, size_t len)
{
    return bind_named(fx, "p", uid, err, len);
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

static const char *ann(const json_t *annotations, const char *key)
{
    return json_string_value(json_object_get(annotations, key));
}

/* The pod as the watch would deliver it (into the cache). */
static void watch_shows(struct fixture *fx, json_t *pod)
{
    char err[256];
    assert_int_equal(cache_pod_upsert(fx->cache, pod, err, sizeof err), 0);
}

static void test_one_binding_carries_the_annotations(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    fx->api.pod = fx_pod("u1", "p", 6, NULL, NULL); /* not in the cache: fetched */
    int64_t before = clock_now_ns();
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_OK);
    assert_int_equal(fx->api.gets, 1);
    assert_int_equal(fx->api.binds, 1);
    assert_true(fx->api.deadline > before); /* the caller's deadline reaches the call */
    assert_string_equal(fx->api.bound_node, "n1");
    assert_string_equal(fx->api.bound_uid, "u1");
    assert_int_equal(json_object_size(fx->api.annotations), 5);
    assert_string_equal(ann(fx->api.annotations, "ALIYUN_COM_GPU_MEM_IDX"), "0");
    assert_string_equal(ann(fx->api.annotations, "ALIYUN_COM_GPU_MEM_POD"), "6");
    assert_string_equal(ann(fx->api.annotations, "ALIYUN_COM_GPU_MEM_DEV"), "8");
    assert_string_equal(ann(fx->api.annotations, "ALIYUN_COM_GPU_MEM_ASSIGNED"), "false");
    const char *t = ann(fx->api.annotations, "ALIYUN_COM_GPU_MEM_ASSUME_TIME");
    assert_non_null(t);
    assert_true(strlen(t) >= 19); /* nanoseconds since the epoch */
    assert_int_equal(used(fx->cache, 0), 6);
    /* Best fit: the next 2 goes onto the same GPU. */
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u2", "p", 2, NULL, NULL);
    assert_int_equal(bind(fx, "u2", err, sizeof err), BIND_OK);
    assert_int_equal(used(fx->cache, 0), 8);
    /* The same pod again: refused without touching the API. */
    int calls = fx->api.gets + fx->api.binds;
    assert_int_equal(bind(fx, "u2", err, sizeof err), BIND_REFUSED);
    assert_non_null(strstr(err, "already bound"));
    assert_int_equal(fx->api.gets + fx->api.binds, calls);
}

static void test_refused_binding_gives_the_charge_back(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    fx->api.pod = fx_pod("u1", "p", 8, NULL, NULL);
    fx->api.bind_status = 409;
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_BINDING_REFUSED);
    assert_non_null(strstr(err, "already assigned"));
    assert_int_equal(used(fx->cache, 0), 0);
    assert_int_equal(fx->api.binds, 1); /* nothing else: nothing to undo */
    /* Never sent (deadline gone while waiting for a connection): the same. */
    fx->api.bind_status = BIND_NOT_SENT;
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_BINDING_REFUSED);
    assert_int_equal(used(fx->cache, 0), 0);
    /* The memory is free again for the next pod. */
    fx->api.bind_status = 0;
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_OK);
    assert_int_equal(used(fx->cache, 0), 8);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_unknown_outcome_holds_the_charge(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    fx->ops.unknown_hold_ns = 50 * 1000000LL; /* held from the deadline on */
    fx->deadline_ms = 10;
    fx->api.pod = fx_pod("u1", "p", 8, NULL, NULL);
    fx->api.bind_status = BIND_RESET;
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_BINDING_UNKNOWN);
    assert_non_null(strstr(err, "not known"));
    assert_int_equal(used(fx->cache, 0), 8); /* D1: kept */
    /* Another pod cannot have that memory; the pod's own retry to the same
     * node re-uses the held charge: one Binding, no read-back, nothing more
     * charged. */
    fx->api.bind_status = 0;
    json_t *other = fx_pod("u2", "q", 8, NULL, NULL); /* GPU 0 is held: GPU 1 */
    watch_shows(fx, other);
    json_decref(other);
    assert_int_equal(bind_named(fx, "q", "u2", err, sizeof err), BIND_OK);
    assert_int_equal(used(fx->cache, 1), 8);
    int gets = fx->api.gets, binds = fx->api.binds;
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_OK);
    assert_int_equal(fx->api.gets, gets);
    assert_int_equal(fx->api.binds, binds + 1);
    assert_int_equal(used(fx->cache, 0), 8);
    assert_int_equal(used(fx->cache, 1), 8);
}

static void test_unknown_outcome_that_landed(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    fx->ops.unknown_hold_ns = 1000000LL;
    fx->deadline_ms = 1;
    fx->api.pod = fx_pod("u1", "p", 8, NULL, NULL);
    fx->api.bind_status = 504; /* a 5xx may have been applied */
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_BINDING_UNKNOWN);
    assert_int_equal(used(fx->cache, 0), 8);
    /* It did land: the read-back shows it bound; the charge stays. */
    sleep_ms(5);
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u1", "p", 8, "n1", "0");
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_REFUSED);
    assert_non_null(strstr(err, "already bound"));
    assert_int_equal(used(fx->cache, 0), 8);
    /* The watch then brings the API's view, which replaces the charge. */
    watch_shows(fx, fx->api.pod);
    assert_int_equal(used(fx->cache, 0), 8);
    assert_int_equal(used(fx->cache, 1), 0);
    /* A pod deleted while its outcome was unknown frees the memory. */
    json_t *q = fx_pod("u3", "q", 8, NULL, NULL);
    watch_shows(fx, q);
    assert_int_equal(bind_named(fx, "q", "u3", err, sizeof err), BIND_BINDING_UNKNOWN);
    assert_int_equal(used(fx->cache, 1), 8);
    cache_pod_delete(fx->cache, q);
    json_decref(q);
    assert_int_equal(used(fx->cache, 1), 0);
}

static void test_uid_of_another_pod_is_refused(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    json_t *q = fx_pod("uq", "q", 8, NULL, NULL);
    watch_shows(fx, q);
    json_decref(q);
    /* D2: the UID is q's, the name p's: nothing is asked of the API. */
    assert_int_equal(bind_named(fx, "p", "uq", err, sizeof err), BIND_REFUSED);
    assert_non_null(strstr(err, "belongs to pod default/q"));
    assert_int_equal(fx->api.gets + fx->api.binds, 0);
    assert_int_equal(used(fx->cache, 0) + used(fx->cache, 1), 0);
    /* A UID the cache does not know: the named pod is read and differs. */
    fx->api.pod = fx_pod("up", "p", 8, NULL, NULL);
    assert_int_equal(bind_named(fx, "p", "u-unknown", err, sizeof err), BIND_POD_UNAVAILABLE);
    assert_non_null(strstr(err, "not the request's"));
    assert_int_equal(fx->api.binds, 0);
}

static void test_pod_problems(void **state)
{
    struct fixture *fx = *state;
    char err[512];
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_POD_UNAVAILABLE); /* GET: 404 */
    assert_non_null(strstr(err, "not found"));
    fx->api.pod = fx_pod("other-uid", "p", 8, NULL, NULL);
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_POD_UNAVAILABLE);
    assert_non_null(strstr(err, "re-created"));
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u1", "p", 8, "n2", NULL);
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_REFUSED);
    assert_non_null(strstr(err, "already bound to node n2"));
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u1", "p", 9, NULL, NULL);
    assert_int_equal(bind(fx, "u1", err, sizeof err), BIND_REFUSED);
    assert_non_null(strstr(err, "Insufficient GPU Memory"));
    json_decref(fx->api.pod);
    fx->api.pod = fx_pod("u1", "p", 8, NULL, NULL);
    /* No UID in the request: the API's pod supplies it. */
    assert_int_equal(bind(fx, "", err, sizeof err), BIND_OK);
    assert_string_equal(fx->api.bound_uid, "u1");
    assert_int_equal(fx->api.binds, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_binding_carries_the_annotations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_binding_gives_the_charge_back, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unknown_outcome_holds_the_charge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_outcome_that_landed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uid_of_another_pod_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pod_problems, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

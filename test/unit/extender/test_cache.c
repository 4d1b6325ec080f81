/* Unit tests: the cluster cache -- usage from annotations, lists, deletes,
 * unhealthy GPUs, filter verdicts, assume/confirm/rollback (cache.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "clock.h"
#include "ext_fixtures.h"

/* Feeds one object (and frees it). */
static void node_in(struct cache *c, json_t *node)
{
    char err[256];
    assert_int_equal(cache_node_upsert(c, node, err, sizeof err), 0);
    json_decref(node);
}

static void pod_in(struct cache *c, json_t *pod)
{
    char err[256];
    assert_int_equal(cache_pod_upsert(c, pod, err, sizeof err), 0);
    json_decref(pod);
}

/* usedGPU of GPU `dev` on node `name`, from /inspect. */
static long long used(struct cache *c, const char *name, int dev)
{
    json_t *v = cache_inspect(c, name);
    json_t *d = json_array_get(
        json_object_get(json_array_get(json_object_get(v, "nodes"), 0), "devs"), (size_t)dev);
    long long u = d ? json_integer_value(json_object_get(d, "usedGPU")) : -1;
    json_decref(v);
    return u;
}

struct verdicts {
    int fits;
    char reason[8][CACHE_REASON_LEN];
};

static void collect(void *ctx, size_t i, bool fits, const char *reason)
{
    struct verdicts *v = ctx;
    if (fits)
        v->fits |= 1 << i;
    else
        snprintf(v->reason[i], sizeof v->reason[i], "%s", reason);
}

/* Filters a pod asking for `memory` over names; returns the fit bit mask. */
static int filter(struct cache *c, int memory, const char *const *names, size_t n,
                  struct verdicts *v)
{
    json_t *pod = fx_pod("filter-uid", "f", memory, NULL, NULL);
    struct pod_facts f;
    struct cache_query q;
    char err[256];
    memset(v, 0, sizeof *v);
    assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
    assert_int_equal(cache_query_init(c, &f, true, false, &q, err, sizeof err), 0);
    cache_evaluate(c, &q, names, n, collect, v, NULL);
    cache_query_free(&q);
    json_decref(pod);
    return v->fits;
}

static void test_usage_from_annotations(void **state)
{
    (void)state;
    struct cache *c = cache_new(PLACEMENT_BINPACK);
    node_in(c, fx_node("n1", 32, 2)); /* 2 x 16 */
    pod_in(c, fx_pod("u1", "a", 10, "n1", "0"));
    pod_in(c, fx_pod("u2", "b", 8, "n1", "0,1")); /* 4 on each */
    pod_in(c, fx_pod("u3", "c", 4, "n1", NULL));  /* bound, no annotation: no GPU */
    pod_in(c, fx_pod("u4", "d", 4, NULL, "1"));   /* annotated, not bound: nothing */
    assert_int_equal(used(c, "n1", 0), 14);
    assert_int_equal(used(c, "n1", 1), 4);

    /* Finished pods give their memory back; a deleted pod too. */
    json_t *done = fx_pod("u1", "a", 10, "n1", "0");
    json_object_set_new(json_object_get(done, "status"), "phase", json_string("Succeeded"));
    pod_in(c, done);
    assert_int_equal(used(c, "n1", 0), 4);
    json_t *gone = fx_pod("u2", "b", 8, "n1", "0,1");
    cache_pod_delete(c, gone);
    json_decref(gone);
    assert_int_equal(used(c, "n1", 0), 0);
    assert_int_equal(used(c, "n1", 1), 0);

    /* A terminating pod (deletionTimestamp) still holds its memory. */
    json_t *terminating = fx_pod("u5", "e", 6, "n1", "1");
    json_object_set_new(json_object_get(terminating, "metadata"), "deletionTimestamp",
                        json_string("2024-01-01T00:00:00Z"));
    pod_in(c, terminating);
    assert_int_equal(used(c, "n1", 1), 6);
    cache_free(c);
}

static void test_pods_before_nodes_and_relist(void **state)
{
    (void)state;
    struct cache *c = cache_new(PLACEMENT_BINPACK);
    /* The pods reflector may be ahead of the nodes one. */
    cache_pods_list_begin(c);
    pod_in(c, fx_pod("u1", "a", 5, "n1", "1"));
    pod_in(c, fx_pod("u2", "b", 3, "n1", "1"));
    cache_pods_list_end(c);
    cache_nodes_list_begin(c);
    node_in(c, fx_node("n1", 16, 2));
    cache_nodes_list_end(c);
    assert_int_equal(used(c, "n1", 1), 8);
    struct cache_stats st;
    cache_stats(c, &st);
    assert_int_equal(st.nodes, 1);
    assert_int_equal(st.pods, 2);

    /* A re-list without u2: it was deleted while the watch was down. */
    cache_pods_list_begin(c);
    pod_in(c, fx_pod("u1", "a", 5, "n1", "1"));
    cache_pods_list_end(c);
    assert_int_equal(used(c, "n1", 1), 5);
    /* A re-list without the node: gone, though its pod record remains. */
    cache_nodes_list_begin(c);
    cache_nodes_list_end(c);
    cache_stats(c, &st);
    assert_int_equal(st.nodes, 0);
    const char *names[] = {"n1"};
    struct verdicts v;
    assert_int_equal(filter(c, 1, names, 1, &v), 0);
    assert_non_null(strstr(v.reason[0], "not in the extender's cache"));
    cache_free(c);
}

static void test_filter_reasons(void **state)
{
    (void)state;
    struct cache *c = cache_new(PLACEMENT_BINPACK);
    node_in(c, fx_node("big", 32, 2));
    node_in(c, fx_node("small", 8, 2));
    node_in(c, fx_node("cpu-only", 0, 0));
    pod_in(c, fx_pod("u1", "a", 12, "big", "0"));
    const char *names[] = {"big", "small", "cpu-only", "nowhere"};
    struct verdicts v;
    assert_int_equal(filter(c, 10, names, 4, &v), 0x1);
    assert_non_null(strstr(v.reason[1], "Insufficient GPU Memory in one device"));
    assert_non_null(strstr(v.reason[1], "largest free 4 of 4"));
    assert_non_null(strstr(v.reason[2], "not for GPU share"));
    assert_non_null(strstr(v.reason[3], "not in the extender's cache"));
    assert_int_equal(filter(c, 17, names, 1, &v), 0);
    assert_int_equal(filter(c, 16, names, 1, &v), 0x1);

    /* An unhealthy-gpu ConfigMap takes GPU 1 away: 16 no longer fits. */
    json_t *cm =
        fx_json("{\"metadata\":{\"name\":\"unhealthy-gpu-big\",\"namespace\":\"kube-system\"},"
                "\"data\":{\"gpus\":\"1\"}}");
    char err[256];
    assert_int_equal(cache_configmap_upsert(c, cm, err, sizeof err), 0);
    assert_int_equal(filter(c, 16, names, 1, &v), 0);
    assert_non_null(strstr(v.reason[0], "unhealthy"));
    cache_configmap_delete(c, cm);
    assert_int_equal(filter(c, 16, names, 1, &v), 0x1);
    /* ... and a re-list without it clears it too. */
    assert_int_equal(cache_configmap_upsert(c, cm, err, sizeof err), 0);
    cache_configmaps_list_begin(c);
    cache_configmaps_list_end(c);
    assert_int_equal(filter(c, 16, names, 1, &v), 0x1);
    json_decref(cm);
    cm = fx_json("{\"metadata\":{\"name\":\"unhealthy-gpu-big\"},\"data\":{\"gpus\":\"x\"}}");
    assert_int_equal(cache_configmap_upsert(c, cm, err, sizeof err), -1);
    json_decref(cm);
    cache_free(c);
}

static void test_assume_confirm_rollback(void **state)
{
    (void)state;
    struct cache *c = cache_new(PLACEMENT_BINPACK);
    node_in(c, fx_node("n1", 16, 2));
    pod_in(c, fx_pod("u1", "a", 6, NULL, NULL)); /* pending: the cache knows its demand */
    struct cache_pod *h;
    struct cache_assumption as;
    char err[256];
    assert_int_equal(cache_assume(c, "u1", NULL, NULL, "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_ASSUMED);
    assert_int_equal(as.gpu_mask, 0x1);
    assert_int_equal(as.gpu_units, 6);
    assert_int_equal(as.device_memory, 8);
    assert_int_equal(used(c, "n1", 0), 6);
    /* A second bind of the same pod while the first is in flight. */
    struct cache_pod *h2;
    assert_int_equal(cache_assume(c, "u1", NULL, NULL, "n1", NULL, &h2, &as, err, sizeof err),
                     CACHE_REFUSED);
    assert_non_null(strstr(err, "in progress"));
    cache_rollback(c, h);
    assert_int_equal(used(c, "n1", 0), 0);

    /* Unknown pod: the caller must supply it. */
    assert_int_equal(cache_assume(c, "u9", NULL, NULL, "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_NEED_POD);
    json_t *p9 = fx_pod("u9", "z", 8, NULL, NULL);
    struct pod_facts f;
    assert_int_equal(poolapi_pod_facts(p9, &f, err, sizeof err), 0);
    assert_int_equal(cache_assume(c, "u9", NULL, NULL, "n1", &f, &h, &as, err, sizeof err),
                     CACHE_ASSUMED);
    json_decref(p9);
    cache_confirm(c, h);
    assert_int_equal(used(c, "n1", 0) + used(c, "n1", 1), 8);
    struct cache_stats st;
    cache_stats(c, &st);
    assert_int_equal(st.assumed, 1);
    /* Assumed: a second bind is refused; then the watch shows it bound. */
    assert_int_equal(cache_assume(c, "u9", NULL, NULL, "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_REFUSED);
    assert_non_null(strstr(err, "already bound"));
    pod_in(c, fx_pod("u9", "z", 8, "n1", as.gpu_mask == 1 ? "0" : "1"));
    cache_stats(c, &st);
    assert_int_equal(st.assumed, 0);
    assert_int_equal(used(c, "n1", 0) + used(c, "n1", 1), 8);

    /* Too big for any GPU now: refused with the reason. */
    pod_in(c, fx_pod("u2", "b", 9, NULL, NULL));
    assert_int_equal(cache_assume(c, "u2", NULL, NULL, "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_REFUSED);
    assert_non_null(strstr(err, "does not fit"));
    assert_int_equal(cache_assume(c, "u2", NULL, NULL, "n7", NULL, &h, &as, err, sizeof err),
                     CACHE_REFUSED);
    assert_non_null(strstr(err, "not in the extender's cache"));
    cache_free(c);
}

static void test_unknown_outcome_and_uid_check(void **state)
{
    (void)state;
    struct cache *c = cache_new(PLACEMENT_BINPACK);
    node_in(c, fx_node("n1", 16, 2));
    pod_in(c, fx_pod("u1", "a", 8, NULL, NULL));
    pod_in(c, fx_pod("u2", "b", 8, NULL, NULL));
    struct cache_pod *h;
    struct cache_assumption as;
    char err[256];
    /* u1 is a's UID: a request naming b with it is refused, nothing charged. */
    assert_int_equal(cache_assume(c, "u1", "default", "b", "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_REFUSED);
    assert_non_null(strstr(err, "belongs to pod default/a"));
    assert_int_equal(used(c, "n1", 0) + used(c, "n1", 1), 0);
    /* An unknown outcome keeps the charge, also when the watch shows the pod
     * still pending (a lagging watch cannot prove the write did not land). */
    assert_int_equal(cache_assume(c, "u1", "default", "a", "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_ASSUMED);
    cache_unknown(c, h, clock_now_ns() + 3600 * 1000000000LL);
    pod_in(c, fx_pod("u1", "a", 8, NULL, NULL));
    cache_pods_list_begin(c);
    pod_in(c, fx_pod("u1", "a", 8, NULL, NULL));
    pod_in(c, fx_pod("u2", "b", 8, NULL, NULL));
    cache_pods_list_end(c);
    assert_int_equal(used(c, "n1", 0), 8);
    /* A retry elsewhere is refused; one to the same node re-uses the charge
     * (nothing more is charged), and a refusal of it keeps the hold. */
    node_in(c, fx_node("n2", 16, 2));
    assert_int_equal(cache_assume(c, "u1", "default", "a", "n2", NULL, &h, &as, err, sizeof err),
                     CACHE_REFUSED);
    assert_non_null(strstr(err, "not known yet"));
    assert_int_equal(used(c, "n2", 0) + used(c, "n2", 1), 0);
    assert_int_equal(cache_assume(c, "u1", "default", "a", "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_ASSUMED);
    assert_true(as.held);
    assert_int_equal(as.gpu_mask, 1);
    assert_int_equal(as.pod_memory, 8);
    assert_int_equal(used(c, "n1", 0), 8);
    assert_int_equal(used(c, "n1", 1), 0);
    cache_unknown(c, h, as.held_until_ns);
    assert_false(cache_unknown_release(c, "u1")); /* the hold is not over */
    struct cache_stats st;
    cache_stats(c, &st);
    assert_int_equal(st.assumed, 1);
    /* Past the hold: assume asks for a read-back; a release frees it. */
    assert_int_equal(cache_assume(c, "u2", "default", "b", "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_ASSUMED);
    cache_unknown(c, h, clock_now_ns() - 1);
    assert_int_equal(used(c, "n1", 1), 8);
    assert_int_equal(cache_assume(c, "u2", "default", "b", "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_UNKNOWN_EXPIRED);
    assert_true(cache_unknown_release(c, "u2"));
    assert_false(cache_unknown_release(c, "u2"));
    assert_int_equal(used(c, "n1", 1), 0);
    /* The watch showing u1 bound ends its unknown state: the API's charge. */
    pod_in(c, fx_pod("u1", "a", 8, "n1", "1"));
    cache_stats(c, &st);
    assert_int_equal(st.assumed, 0);
    assert_int_equal(used(c, "n1", 0), 0);
    assert_int_equal(used(c, "n1", 1), 8);
    cache_free(c);
}

static void test_delete_while_binding(void **state)
{
    (void)state;
    struct cache *c = cache_new(PLACEMENT_BINPACK);
    node_in(c, fx_node("n1", 16, 2));
    json_t *pod = fx_pod("u1", "a", 6, NULL, NULL);
    pod_in(c, json_incref(pod));
    struct cache_pod *h;
    struct cache_assumption as;
    char err[256];
    assert_int_equal(cache_assume(c, "u1", NULL, NULL, "n1", NULL, &h, &as, err, sizeof err),
                     CACHE_ASSUMED);
    cache_pod_delete(c, pod); /* the record stays pinned until the bind ends */
    cache_pods_list_begin(c);
    cache_pods_list_end(c);
    assert_int_equal(used(c, "n1", 0), 0);
    cache_rollback(c, h);
    struct cache_stats st;
    cache_stats(c, &st);
    assert_int_equal(st.pods, 0);
    assert_int_equal(st.assumed, 0);
    json_decref(pod);
    cache_free(c);
}

/* Many threads assume pods of 3 onto one node of 2 x 10: never more than
 * 3 per GPU, whatever the interleaving. */
struct race {
    struct cache *c;
    int first, count, assumed;
};

static void *racer(void *arg)
{
    struct race *r = arg;
    for (int i = r->first; i < r->first + r->count; i++) {
        char uid[32];
        snprintf(uid, sizeof uid, "race-%d", i);
        json_t *pod = fx_pod(uid, uid, 3, NULL, NULL);
        struct pod_facts f;
        struct cache_pod *h;
        struct cache_assumption as;
        char err[256];
        if (poolapi_pod_facts(pod, &f, err, sizeof err) == 0 &&
            cache_assume(r->c, uid, NULL, NULL, "n1", &f, &h, &as, err, sizeof err) ==
                CACHE_ASSUMED) {
            r->assumed++;
            cache_confirm(r->c, h);
        }
        json_decref(pod);
    }
    return NULL;
}

static void test_concurrent_assumes_never_overcommit(void **state)
{
    (void)state;
    struct cache *c = cache_new(PLACEMENT_GPUPOOL);
    node_in(c, fx_node("n1", 20, 2));
    struct race r[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (struct race){c, i * 10, 10, 0};
        assert_int_equal(pthread_create(&t[i], NULL, racer, &r[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        total += r[i].assumed;
    }
    assert_int_equal(total, 6);
    assert_int_equal(used(c, "n1", 0), 9);
    assert_int_equal(used(c, "n1", 1), 9);
    cache_free(c);
}

static void test_model_constraint(void **state)
{
    (void)state;
    struct cache *c = cache_new(PLACEMENT_BINPACK);
    json_t *v100 = fx_node("v", 32, 2), *t4 = fx_node("t", 32, 2);
    json_object_set_new(json_object_get(v100, "metadata"), "labels",
                        json_pack("{s:s}", "nvidia.com/gpu.product", "Tesla-V100-SXM2-16GB"));
    json_object_set_new(json_object_get(t4, "metadata"), "labels",
                        json_pack("{s:s}", "nvidia.com/gpu.product", "Tesla-T4"));
    node_in(c, v100);
    node_in(c, t4);
    const char *names[] = {"v", "t"};
    static const struct {
        const char *constraint;
        int fits;
    } cases[] = {{"V100", 0x1}, {"t4|v100", 0x3}, {"A100", 0}, {"", 0x3}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *pod = fx_pod("m", "m", 4, NULL, NULL);
        json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                            "gpupool.io/gpu-model", json_string(cases[i].constraint));
        struct pod_facts f;
        struct cache_query q;
        struct verdicts v = {0};
        char err[256];
        assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
        assert_int_equal(cache_query_init(c, &f, false, false, &q, err, sizeof err), 0);
        cache_evaluate(c, &q, names, 2, collect, &v, NULL);
        assert_int_equal(v.fits, cases[i].fits);
        if (cases[i].fits == 0)
            assert_non_null(strstr(v.reason[0], "GPU model"));
        cache_query_free(&q);
        json_decref(pod);
    }
    cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_from_annotations),
        cmocka_unit_test(test_pods_before_nodes_and_relist),
        cmocka_unit_test(test_filter_reasons),
        cmocka_unit_test(test_assume_confirm_rollback),
        cmocka_unit_test(test_unknown_outcome_and_uid_check),
        cmocka_unit_test(test_delete_while_binding),
        cmocka_unit_test(test_concurrent_assumes_never_overcommit),
        cmocka_unit_test(test_model_constraint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

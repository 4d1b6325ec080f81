/* Unit tests: GetPreferredAllocation policies (preferred.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fixtures.h"
#include "preferred.h"
#include "resource.h"

struct world {
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
};

static void build(struct world *w, size_t gpus, int nvlink, int replicas)
{
    char err[256];
    fixture_inventory(&w->inv, gpus, nvlink);
    fixture_config(&w->cfg);
    if (replicas > 1)
        fixture_time_slice(&w->cfg, "nvidia.com/gpu", replicas);
    assert_int_equal(resource_set_build(&w->inv, &w->cfg, &w->set, err, sizeof err), 0);
}

static void destroy(struct world *w)
{
    resource_set_free(&w->set);
    free(w->cfg.time_slices);
    fixture_inventory_free(&w->inv);
}

static void sort_sizes(size_t *v, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            size_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
}

static void test_nvlink_pair_preferred(void **state)
{
    (void)state;
    struct world w;
    build(&w, 8, 1, 0);
    size_t avail[] = {0, 2, 3, 5, 6};
    size_t out[2];
    char err[256];
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_DISTRIBUTED, avail,
                                      5, NULL, 0, 2, out, err, sizeof err),
                     0);
    sort_sizes(out, 2);
    assert_int_equal(out[0], 2); /* 2-3 share NVLink; 5-6 do not (pairs are 4-5, 6-7) */
    assert_int_equal(out[1], 3);
    destroy(&w);
}

static void test_must_include_honoured(void **state)
{
    (void)state;
    struct world w;
    build(&w, 8, 1, 0);
    size_t avail[] = {0, 1, 2, 3, 4, 5, 6, 7};
    size_t req[] = {5};
    size_t out[2];
    char err[256];
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_DISTRIBUTED, avail,
                                      8, req, 1, 2, out, err, sizeof err),
                     0);
    assert_int_equal(out[0], 5);
    assert_int_equal(out[1], 4); /* its NVLink peer */
    destroy(&w);
}

static void test_same_numa_preferred_without_nvlink(void **state)
{
    (void)state;
    struct world w;
    build(&w, 8, 0, 0);
    /* 3 (NUMA 0) and 4, 5 (NUMA 1, one PCIe switch): a pair from 4,5 wins,
     * and for 3 GPUs the two on NUMA 1 plus... only 3 is left. */
    size_t avail[] = {3, 4, 6};
    size_t out[2];
    char err[256];
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_DISTRIBUTED, avail,
                                      3, NULL, 0, 2, out, err, sizeof err),
                     0);
    sort_sizes(out, 2);
    assert_int_equal(out[0], 4); /* 4 and 6 share NUMA 1; 3 is on NUMA 0 */
    assert_int_equal(out[1], 6);
    destroy(&w);
}

static void test_single_gpu_keeps_pairs_intact(void **state)
{
    (void)state;
    struct world w;
    build(&w, 8, 1, 0);
    /* 1's NVLink peer 0 is gone: taking 1 breaks no pair. */
    size_t avail[] = {1, 2, 3, 4, 5};
    size_t out[1];
    char err[256];
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_DISTRIBUTED, avail,
                                      5, NULL, 0, 1, out, err, sizeof err),
                     0);
    assert_int_equal(out[0], 1);
    destroy(&w);
}

static void test_bad_sizes(void **state)
{
    (void)state;
    struct world w;
    build(&w, 4, 0, 0);
    size_t avail[] = {0, 1};
    size_t req[] = {2};
    size_t out[4];
    char err[256];
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_DISTRIBUTED, avail,
                                      2, NULL, 0, 3, out, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "cannot choose 3"));
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_DISTRIBUTED, avail,
                                      2, req, 1, 1, out, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "not among the available"));
    destroy(&w);
}

static void test_lost_topology_scores_zero(void **state)
{
    (void)state;
    struct world w;
    build(&w, 4, 1, 0);
    for (size_t i = 0; i < 4; i++) /* GPU 1 fell off: every pair with it unknown */
        w.inv.link_score[1 * 4 + i] = w.inv.link_score[i * 4 + 1] = 0;
    size_t avail[] = {0, 1, 2, 3};
    size_t out[2];
    char err[256];
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_DISTRIBUTED, avail,
                                      4, NULL, 0, 2, out, err, sizeof err),
                     0);
    sort_sizes(out, 2);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 3);
    destroy(&w);
}

static size_t gpu_of(const struct world *w, size_t pos)
{
    return w->set.resources[0].devices[pos].gpu;
}

static void test_replicas_distributed(void **state)
{
    (void)state;
    struct world w;
    build(&w, 4, 0, 4); /* 16 replicas; positions 4g..4g+3 belong to GPU g */
    /* GPU 0 has 3 replicas in use, GPU 1 two, GPUs 2 and 3 none. */
    size_t avail[] = {3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    size_t out[3];
    char err[256];
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_DISTRIBUTED, avail,
                                      11, NULL, 0, 3, out, err, sizeof err),
                     0);
    size_t g[3] = {gpu_of(&w, out[0]), gpu_of(&w, out[1]), gpu_of(&w, out[2])};
    sort_sizes(g, 3);
    /* 2 and 3 (idle) first; then they carry 1 each, still below GPU 1's 2. */
    assert_int_equal(g[0], 2);
    assert_int_equal(g[1], 2);
    assert_int_equal(g[2], 3);
    destroy(&w);
}

static void test_replicas_packed(void **state)
{
    (void)state;
    struct world w;
    build(&w, 4, 0, 4);
    w.cfg.shared_alloc_policy = SHARED_ALLOC_PACKED;
    size_t avail[] = {3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    size_t out[3];
    char err[256];
    assert_int_equal(preferred_choose(&w.set.resources[0], &w.inv, SHARED_ALLOC_PACKED, avail, 11,
                                      NULL, 0, 3, out, err, sizeof err),
                     0);
    assert_int_equal(gpu_of(&w, out[0]), 0); /* the last replica of the busiest GPU */
    assert_int_equal(gpu_of(&w, out[1]), 1);
    assert_int_equal(gpu_of(&w, out[2]), 1);
    destroy(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvlink_pair_preferred),
        cmocka_unit_test(test_must_include_honoured),
        cmocka_unit_test(test_same_numa_preferred_without_nvlink),
        cmocka_unit_test(test_single_gpu_keeps_pairs_intact),
        cmocka_unit_test(test_bad_sizes),
        cmocka_unit_test(test_lost_topology_scores_zero),
        cmocka_unit_test(test_replicas_distributed),
        cmocka_unit_test(test_replicas_packed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

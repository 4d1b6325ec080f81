/* Unit tests: inventory + configuration -> resources (resource.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fixtures.h"
#include "resource.h"

static void test_pattern_match(void **state)
{
    (void)state;
    assert_true(resource_pattern_match("*", "NVIDIA A100"));
    assert_true(resource_pattern_match("*A100*", "NVIDIA A100-SXM4-40GB"));
    assert_true(resource_pattern_match("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"));
    assert_false(resource_pattern_match("A100", "NVIDIA A100"));      /* anchored */
    assert_false(resource_pattern_match("*A100", "NVIDIA A100-SXM")); /* anchored end */
    assert_true(resource_pattern_match("1g.*gb", "1g.10gb"));
    assert_false(resource_pattern_match("2g.*", "1g.10gb"));
    assert_true(resource_pattern_match("a*b*c", "aXXbYYc"));
    assert_false(resource_pattern_match("a*b*c", "aXXbYY"));
}

static void test_full_gpus_default(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 4, 0);
    fixture_config(&cfg);
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 1);
    assert_string_equal(set.resources[0].name, "nvidia.com/gpu");
    assert_string_equal(set.resources[0].socket_name, "gpupool-nvidia-gpu.sock");
    assert_int_equal(set.resources[0].device_count, 4);
    assert_string_equal(set.resources[0].devices[2].id, inv.gpus[2].uuid);
    assert_string_equal(set.resources[0].devices[2].index, "2");
    assert_int_equal(set.resources[0].devices[3].numa_node, 1);
    assert_true(set.resources[0].devices[3].healthy);
    assert_false(set.resources[0].shared);
    resource_set_free(&set);
    fixture_inventory_free(&inv);
}

static void test_time_slicing_replicas(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 8, 0);
    fixture_config(&cfg);
    fixture_time_slice(&cfg, "nvidia.com/gpu", 4);
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 1);
    assert_int_equal(set.resources[0].device_count, 32);
    assert_true(set.resources[0].shared);
    char want[RESOURCE_ID_LEN];
    snprintf(want, sizeof want, "%s::3", inv.gpus[1].uuid);
    assert_string_equal(set.resources[0].devices[7].id, want);
    assert_int_equal(set.resources[0].devices[7].gpu, 1);
    assert_int_equal(set.resources[0].devices[7].replica, 3);
    assert_string_equal(set.resources[0].devices[7].uuid, inv.gpus[1].uuid);
    resource_set_free(&set);
    free(cfg.time_slices);
    fixture_inventory_free(&inv);
}

static void test_time_slicing_rename_and_devices(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 4, 0);
    fixture_config(&cfg);
    struct config_time_slice *ts = fixture_time_slice(&cfg, "nvidia.com/gpu", 2);
    snprintf(ts->rename, sizeof ts->rename, "nvidia.com/gpu.shared");
    char refs[2][CONFIG_DEVICE_REF_LEN];
    snprintf(refs[0], sizeof refs[0], "1");
    snprintf(refs[1], sizeof refs[1], "%s", inv.gpus[3].uuid);
    ts->all_devices = 0;
    ts->devices = refs;
    ts->device_count = 2;
    cfg.fail_requests_greater_than_one = 1;
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 2);
    const struct resource *plain = &set.resources[0], *shared = &set.resources[1];
    if (strcmp(plain->name, "nvidia.com/gpu") != 0) {
        const struct resource *t = plain;
        plain = shared;
        shared = t;
    }
    assert_string_equal(plain->name, "nvidia.com/gpu");
    assert_int_equal(plain->device_count, 2); /* GPUs 0 and 2 whole */
    assert_false(plain->shared);
    assert_string_equal(shared->name, "nvidia.com/gpu.shared");
    assert_string_equal(shared->socket_name, "gpupool-nvidia-gpu.shared.sock");
    assert_int_equal(shared->device_count, 4); /* GPUs 1 and 3, twice each */
    assert_true(shared->fail_requests_greater_than_one);
    assert_int_equal(shared->devices[0].gpu, 1);
    assert_int_equal(shared->devices[3].gpu, 3);
    resource_set_free(&set);

    /* A reference absent from this node (one ConfigMap, many nodes) is a
     * warning: the devices that are present are still shared. */
    snprintf(refs[1], sizeof refs[1], "GPU-ffffffff-ffff-ffff-ffff-ffffffffffff");
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 2);
    shared = strcmp(set.resources[0].name, "nvidia.com/gpu.shared") == 0 ? &set.resources[0]
                                                                         : &set.resources[1];
    assert_string_equal(shared->name, "nvidia.com/gpu.shared");
    assert_int_equal(shared->device_count, 2); /* GPU 1 twice */
    assert_int_equal(shared->devices[1].gpu, 1);
    resource_set_free(&set);

    snprintf(refs[0], sizeof refs[0], "7"); /* past the last GPU */
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 1);
    assert_string_equal(set.resources[0].name, "nvidia.com/gpu");
    assert_int_equal(set.resources[0].device_count, 4);
    resource_set_free(&set);
    free(cfg.time_slices);
    fixture_inventory_free(&inv);
}

static void test_gpu_patterns(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 4, 0);
    snprintf(inv.gpus[3].name, sizeof inv.gpus[3].name, "Tesla T4");
    fixture_config(&cfg);
    struct config_resource_pattern patterns[2] = {
        {"*A100*", "nvidia.com/a100"},
        {"*T4*", "nvidia.com/t4"},
    };
    cfg.gpu_resources = patterns;
    cfg.gpu_resource_count = 2;
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 2);
    assert_string_equal(set.resources[0].name, "nvidia.com/a100");
    assert_int_equal(set.resources[0].device_count, 3);
    assert_string_equal(set.resources[1].name, "nvidia.com/t4");
    assert_int_equal(set.resources[1].device_count, 1);
    assert_string_equal(set.resources[1].devices[0].index, "3");
    resource_set_free(&set);
    fixture_inventory_free(&inv);
}

static void test_mig_mixed(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 3, 0);
    fixture_mig(&inv, 0, 7, "1g.5gb");
    fixture_mig(&inv, 1, 2, "3g.20gb");
    fixture_config(&cfg);
    cfg.mig_strategy = MIG_STRATEGY_MIXED;
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 3);
    assert_string_equal(set.resources[0].name, "nvidia.com/gpu"); /* GPU 2 is not in MIG mode */
    assert_int_equal(set.resources[0].device_count, 1);
    assert_string_equal(set.resources[1].name, "nvidia.com/mig-1g.5gb");
    assert_string_equal(set.resources[1].socket_name, "gpupool-nvidia-mig-1g.5gb.sock");
    assert_int_equal(set.resources[1].device_count, 7);
    assert_string_equal(set.resources[1].devices[4].index, "0:4");
    assert_string_equal(set.resources[1].devices[4].id, inv.gpus[0].migs[4].uuid);
    assert_string_equal(set.resources[2].name, "nvidia.com/mig-3g.20gb");
    assert_int_equal(set.resources[2].devices[1].mig, 1);
    resource_set_free(&set);
    fixture_inventory_free(&inv);
}

static void test_mig_single(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 2, 0);
    fixture_mig(&inv, 0, 7, "1g.5gb");
    fixture_mig(&inv, 1, 7, "1g.5gb");
    fixture_config(&cfg);
    cfg.mig_strategy = MIG_STRATEGY_SINGLE;
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 1);
    assert_string_equal(set.resources[0].name, "nvidia.com/gpu");
    assert_int_equal(set.resources[0].device_count, 14);
    resource_set_free(&set);

    snprintf(inv.gpus[1].migs[3].profile, sizeof inv.gpus[1].migs[3].profile, "2g.10gb");
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), -1);
    assert_non_null(strstr(err, "same profile"));
    fixture_inventory_free(&inv);

    fixture_inventory(&inv, 2, 0);
    fixture_mig(&inv, 0, 7, "1g.5gb");
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), -1);
    assert_non_null(strstr(err, "1 of 2 GPUs"));
    fixture_inventory_free(&inv);
}

static void test_mig_none_serves_whole_gpus(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 2, 0);
    fixture_mig(&inv, 0, 7, "1g.5gb");
    fixture_config(&cfg);
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 1);
    assert_int_equal(set.resources[0].device_count, 2);
    resource_set_free(&set);
    fixture_inventory_free(&inv);
}

/* A GPU NVML could not identify is listed whole and Unhealthy, whatever
 * the MIG strategy, and does not make `single` non-uniform. */
static void test_lost_gpu_listed_unhealthy(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 3, 0);
    fixture_mig(&inv, 0, 7, "1g.5gb");
    fixture_mig(&inv, 1, 7, "1g.5gb");
    inv.gpus[2].lost = true;
    fixture_config(&cfg);
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.resources[0].device_count, 3);
    assert_true(set.resources[0].devices[0].healthy);
    assert_false(set.resources[0].devices[2].healthy);
    resource_set_free(&set);

    cfg.mig_strategy = MIG_STRATEGY_SINGLE;
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 1);
    assert_string_equal(set.resources[0].name, "nvidia.com/gpu");
    assert_int_equal(set.resources[0].device_count, 15);
    size_t unhealthy = 0;
    for (size_t i = 0; i < set.resources[0].device_count; i++)
        if (!set.resources[0].devices[i].healthy) {
            unhealthy++;
            assert_int_equal(set.resources[0].devices[i].gpu, 2);
            assert_int_equal(set.resources[0].devices[i].mig, RESOURCE_NO_MIG);
        }
    assert_int_equal(unhealthy, 1);
    resource_set_free(&set);
    fixture_inventory_free(&inv);
}

static void test_mig_replicas(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 1, 0);
    fixture_mig(&inv, 0, 2, "3g.20gb");
    fixture_config(&cfg);
    cfg.mig_strategy = MIG_STRATEGY_MIXED;
    fixture_time_slice(&cfg, "nvidia.com/mig-3g.20gb", 3);
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    assert_int_equal(set.count, 1);
    assert_int_equal(set.resources[0].device_count, 6);
    char want[RESOURCE_ID_LEN];
    snprintf(want, sizeof want, "%s::2", inv.gpus[0].migs[1].uuid);
    assert_string_equal(set.resources[0].devices[5].id, want);
    assert_int_equal(set.resources[0].devices[5].mig, 1);
    resource_set_free(&set);
    free(cfg.time_slices);
    fixture_inventory_free(&inv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pattern_match),
        cmocka_unit_test(test_full_gpus_default),
        cmocka_unit_test(test_time_slicing_replicas),
        cmocka_unit_test(test_time_slicing_rename_and_devices),
        cmocka_unit_test(test_lost_gpu_listed_unhealthy),
        cmocka_unit_test(test_gpu_patterns),
        cmocka_unit_test(test_mig_mixed),
        cmocka_unit_test(test_mig_single),
        cmocka_unit_test(test_mig_none_serves_whole_gpus),
        cmocka_unit_test(test_mig_replicas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests: the gpupool.io/gpus writer and reader round-trip (poolapi_gpus.h),
 * the effective-request walk (poolapi_demand.h) and the unit helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolapi_demand.h"
#include "poolapi_facts.h"
#include "poolapi_gpus.h"
#include "poolapi_unit.h"

static void test_round_trip(void **state)
{
    (void)state;
    struct poolapi_gpu in[3] = {
        {.index = 0, .memory = 16, .healthy = true, .model = "Tesla-V100-SXM2-16GB"},
        {.index = 1, .memory = 16, .healthy = false, .model = "Tesla-V100-SXM2-16GB"},
        {.index = 2, .memory = 40960, .healthy = true, .model = "A100"},
    };
    char *text = poolapi_gpus_format(in, 3);
    assert_non_null(text);
    /* The bytes the device plugin has always published. */
    assert_string_equal(text, "[{\"index\":0,\"memory\":16,\"model\":\"Tesla-V100-SXM2-16GB\","
                              "\"healthy\":true},{\"index\":1,\"memory\":16,\"model\":"
                              "\"Tesla-V100-SXM2-16GB\",\"healthy\":false},{\"index\":2,"
                              "\"memory\":40960,\"model\":\"A100\",\"healthy\":true}]");
    struct poolapi_gpu *out;
    size_t n;
    char err[128];
    assert_int_equal(poolapi_gpus_parse(text, POOL_MAX_GPUS, &out, &n, err, sizeof err), 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].index, in[i].index);
        assert_int_equal(out[i].memory, in[i].memory);
        assert_int_equal(out[i].healthy, in[i].healthy);
        assert_true(out[i].has_model);
        assert_string_equal(out[i].model, in[i].model);
    }
    free(out);
    free(text);
}

static void test_bad_annotations(void **state)
{
    (void)state;
    const char *bad[] = {
        "",
        "{}",
        "[]",
        "not json",
        "[{\"index\":1,\"memory\":1}]",
        "[{\"index\":0,\"memory\":1},{\"index\":0,\"memory\":1}]",
        "[{\"index\":0,\"memory\":-1}]",
        "[{\"index\":0,\"memory\":\"16\"}]",
        "[{\"index\":0,\"memory\":1,\"healthy\":\"yes\"}]",
        "[{\"index\":0,\"memory\":1,\"memory\":2}]", /* duplicate key */
    };
    struct poolapi_gpu *out;
    size_t n;
    char err[128];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (poolapi_gpus_parse(bad[i], POOL_MAX_GPUS, &out, &n, err, sizeof err) != -1)
            fail_msg("accepted %s", bad[i]);
        assert_null(out);
    }
    assert_int_equal(poolapi_gpus_parse("[{\"index\":0,\"memory\":1},{\"index\":1,\"memory\":1}]",
                                        1, &out, &n, err, sizeof err),
                     -1);
    assert_string_equal(err, "more than 1 GPUs");
    /* healthy and model are optional. */
    assert_int_equal(
        poolapi_gpus_parse("[{\"index\":0,\"memory\":0}]", 1, &out, &n, err, sizeof err), 0);
    assert_true(out[0].healthy);
    assert_false(out[0].has_model);
    free(out);
}

/* cores: written when the writer has them, read back; absent (every
 * annotation written before cores existed) is a whole GPU's 100; out of
 * 0..100 or mistyped, the annotation is refused as a whole. */
static void test_cores(void **state)
{
    (void)state;
    struct poolapi_gpu in[2] = {
        {.index = 0, .memory = 16, .healthy = true, .model = "T4", .has_cores = true, .cores = 100},
        {.index = 1, .memory = 16, .healthy = true, .model = "T4", .has_cores = true, .cores = 50},
    };
    char *text = poolapi_gpus_format(in, 2);
    assert_non_null(text);
    assert_string_equal(text, "[{\"index\":0,\"memory\":16,\"model\":\"T4\",\"healthy\":true,"
                              "\"cores\":100},{\"index\":1,\"memory\":16,\"model\":\"T4\","
                              "\"healthy\":true,\"cores\":50}]");
    struct poolapi_gpu *out;
    size_t n;
    char err[128];
    assert_int_equal(poolapi_gpus_parse(text, POOL_MAX_GPUS, &out, &n, err, sizeof err), 0);
    assert_int_equal(out[0].cores, 100);
    assert_int_equal(out[1].cores, 50);
    assert_true(out[1].has_cores);
    free(out);
    free(text);
    assert_int_equal(poolapi_gpus_parse("[{\"index\":0,\"memory\":16,\"healthy\":true}]",
                                        POOL_MAX_GPUS, &out, &n, err, sizeof err),
                     0);
    assert_int_equal(out[0].cores, POOL_GPU_CORES_PER_GPU);
    assert_false(out[0].has_cores);
    free(out);
    const char *bad[] = {
        "[{\"index\":0,\"memory\":1,\"cores\":101}]",
        "[{\"index\":0,\"memory\":1,\"cores\":-1}]",
        "[{\"index\":0,\"memory\":1,\"cores\":\"50\"}]",
        "[{\"index\":0,\"memory\":1,\"cores\":50.5}]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(poolapi_gpus_parse(bad[i], POOL_MAX_GPUS, &out, &n, err, sizeof err), -1);
        assert_string_equal(err, "cores must be an integer 0..100");
    }
}

/* A pod's gpupool.io/gpu-cores: the effective request like any resource,
 * limits when requests omit it; valid only 1..100 and beside gpu-mem. */
static void test_pod_cores(void **state)
{
    (void)state;
    static const struct {
        const char *containers;
        uint64_t cores;
        const char *problem; /* NULL: valid */
    } cases[] = {
        {"[{\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":\"4\",\"gpupool.io/gpu-cores\":"
         "\"30\"}}}]",
         30, NULL},
        {"[{\"resources\":{\"requests\":{\"aliyun.com/gpu-mem\":\"4\"}}}]", 0, NULL},
        {"[{\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":\"2\",\"gpupool.io/gpu-cores\":"
         "\"60\"}}},{\"resources\":{\"limits\":{\"aliyun.com/gpu-mem\":\"2\","
         "\"gpupool.io/gpu-cores\":\"50\"}}}]",
         110, "gpupool.io/gpu-cores 110 is more than one GPU"},
        {"[{\"resources\":{\"limits\":{\"gpupool.io/gpu-cores\":\"20\"}}}]", 20,
         "gpupool.io/gpu-cores 20 without aliyun.com/gpu-mem"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512], err[256];
        snprintf(text, sizeof text, "{\"metadata\":{\"name\":\"p\"},\"spec\":{\"containers\":%s}}",
                 cases[i].containers);
        json_t *pod = json_loads(text, 0, NULL);
        assert_non_null(pod);
        struct pod_facts f;
        assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), 0);
        assert_int_equal(f.gpu_cores, cases[i].cores);
        int rc = poolapi_gpu_cores_check(&f, err, sizeof err);
        if (cases[i].problem) {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(err, cases[i].problem));
        } else {
            assert_int_equal(rc, 0);
        }
        json_decref(pod);
    }
    /* a fraction is not a whole number of cores */
    json_t *pod = json_loads("{\"spec\":{\"containers\":[{\"resources\":{\"limits\":{"
                             "\"gpupool.io/gpu-cores\":\"500m\"}}}]}}",
                             0, NULL);
    struct pod_facts f;
    char err[256];
    assert_int_equal(poolapi_pod_facts(pod, &f, err, sizeof err), -1);
    assert_non_null(strstr(err, "gpupool.io/gpu-cores"));
    json_decref(pod);
}

static void test_demand_walk(void **state)
{
    (void)state;
    /* KEP-753's example shape: sidecar 1, init 5, sidecar 2, app 3. */
    struct poolapi_demand d = {0};
    poolapi_demand_add_init(&d, 1, true);
    poolapi_demand_add_init(&d, 5, false); /* 5 + 1 running sidecar = 6 */
    poolapi_demand_add_init(&d, 2, true);  /* sidecars 3 */
    poolapi_demand_add_app(&d, 3);         /* 3 + 3 = 6 */
    assert_int_equal(poolapi_demand_total(&d), 6);
    poolapi_demand_add_app(&d, 1);
    assert_int_equal(poolapi_demand_total(&d), 7);
    struct poolapi_demand e = {0};
    poolapi_demand_add_init(&e, 9, false);
    poolapi_demand_add_app(&e, 2);
    poolapi_demand_add_app(&e, 2);
    assert_int_equal(poolapi_demand_total(&e), 9);
    struct poolapi_demand big = {0};
    poolapi_demand_add_app(&big, UINT64_MAX);
    poolapi_demand_add_init(&big, 1, true);
    assert_true(poolapi_demand_total(&big) == UINT64_MAX);
}

static void test_units(void **state)
{
    (void)state;
    assert_int_equal(poolapi_unit_shift(POOL_UNIT_GIB), 30);
    assert_int_equal(poolapi_unit_bytes(POOL_UNIT_MIB), 1 << 20);
    assert_int_equal(poolapi_unit_from_bytes(((uint64_t)16 << 30) + 5, POOL_UNIT_GIB), 16);
    assert_string_equal(poolapi_unit_name(POOL_UNIT_MIB), "MiB");
    assert_int_equal(poolapi_unit_guess(100), POOL_UNIT_GIB);
    assert_int_equal(poolapi_unit_guess(101), POOL_UNIT_MIB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),  cmocka_unit_test(test_bad_annotations),
        cmocka_unit_test(test_cores),       cmocka_unit_test(test_pod_cores),
        cmocka_unit_test(test_demand_walk), cmocka_unit_test(test_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

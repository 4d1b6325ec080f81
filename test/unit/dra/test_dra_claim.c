/* Unit tests: dra_claim.c (a ResourceClaim's results and opaque GpuConfig)
 * and dra_devices.c (device names), on hand-built inventories and claims. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "dra_claim.h"
#include "dra_devices.h"
#include "fixtures.h"

#define GIB (1ull << 30)
#define DRIVER "gpu.gpupool.io"
#define NODE "node1"

struct world {
    struct gpu_inventory inv;
    struct dra_device_table t;
};

static int setup(void **state)
{
    struct world *w = calloc(1, sizeof *w);
    if (w == NULL)
        return -1;
    fixture_inventory(&w->inv, 3, 0); /* three 40 GiB GPUs, the third in MIG mode */
    fixture_mig(&w->inv, 2, 2, "3g.20gb");
    char err[256];
    if (dra_devices_build(&w->inv, &w->t, err, sizeof err) != 0)
        return -1;
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    struct world *w = *state;
    dra_devices_free(&w->t);
    gpu_inventory_free(&w->inv);
    free(w);
    return 0;
}

static void test_device_names(void **state)
{
    struct world *w = *state;
    /* GPUs 0 and 1 whole; GPU 2 in MIG mode: its two MIG devices, not the GPU */
    assert_int_equal(w->t.count, 4);
    assert_string_equal(w->t.devices[0].name, "gpu-0");
    assert_string_equal(w->t.devices[0].nodes[0], "/dev/nvidia0");
    assert_int_equal(w->t.devices[0].node_count, 1);
    assert_int_equal(w->t.devices[0].mig, -1);
    for (size_t k = 0; k < 2; k++) {
        char want[64];
        const struct mig_device *m = &w->inv.gpus[2].migs[k];
        snprintf(want, sizeof want, "gpu-2-mig-%u-%u", m->gpu_instance_id, m->compute_instance_id);
        const struct dra_node_device *d = &w->t.devices[2 + k];
        assert_string_equal(d->name, want);
        assert_string_equal(d->uuid, m->uuid);
        assert_true(d->memory == m->memory_bytes);
        assert_int_equal(d->mig, (int)k);
        assert_string_equal(d->nodes[0], "/dev/nvidia2");
    }
    assert_non_null(dra_devices_find(&w->t, "gpu-1"));
    assert_null(dra_devices_find(&w->t, "gpu-2"));
    assert_null(dra_devices_find(&w->t, "gpu-9"));
}

/* ---- GpuConfig ---- */

static int parse(const char *text, struct dra_gpu_config *out, char *err, size_t errlen)
{
    json_error_t je;
    json_t *v = json_loads(text, 0, &je);
    assert_non_null(v);
    int rc = dra_config_parse(v, out, err, errlen);
    json_decref(v);
    return rc;
}

static void test_config(void **state)
{
    (void)state;
    struct dra_gpu_config c;
    char err[512];
    assert_int_equal(parse("{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\"}", &c,
                           err, sizeof err),
                     0);
    assert_true(c.memory_limit == 0);
    assert_int_equal(parse("{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\","
                           "\"memoryLimit\":\"1536Mi\"}",
                           &c, err, sizeof err),
                     0);
    assert_true(c.memory_limit == 1536ull << 20);
    assert_int_equal(parse("{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\","
                           "\"memoryLimit\":1073741824}",
                           &c, err, sizeof err),
                     0);
    assert_true(c.memory_limit == GIB);

    static const struct {
        const char *text, *why;
    } bad[] = {
        {"[]", "not an object"},
        {"{\"kind\":\"GpuConfig\"}", "apiVersion missing"},
        {"{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\"}",
         "apiVersion \"resource.nvidia.com/v1beta1\" is not gpupool.io/v1alpha1"},
        {"{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"MigDeviceConfig\"}",
         "kind \"MigDeviceConfig\" is not GpuConfig"},
        {"{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\",\"sharing\":{}}",
         "unknown field \"sharing\""},
        {"{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\",\"memoryLimit\":\"4 Gi\"}",
         "memoryLimit"},
        {"{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\",\"memoryLimit\":\"-1Gi\"}",
         "memoryLimit"},
        {"{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\",\"memoryLimit\":\"0\"}",
         "memoryLimit must be more than 0"},
        {"{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\",\"memoryLimit\":true}",
         "memoryLimit"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(parse(bad[i].text, &c, err, sizeof err), -1);
        if (strstr(err, bad[i].why) == NULL)
            fail_msg("%s: error \"%s\" does not say \"%s\"", bad[i].text, err, bad[i].why);
    }
}

/* ---- claims ---- */

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, 0, &je);
    if (v == NULL)
        fail_msg("bad test JSON at %d: %s", je.position, je.text);
    return v;
}

static int resolve(struct world *w, const char *uid, const char *text, struct dra_claim_entry *e,
                   char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    snprintf(e->uid, sizeof e->uid, "%s", uid);
    snprintf(e->ns, sizeof e->ns, "default");
    snprintf(e->name, sizeof e->name, "c");
    const struct dra_claim_scope scope = {DRIVER, NODE, &w->t};
    json_t *claim = load(text);
    int rc = dra_claim_resolve(claim, &scope, e, err, errlen);
    json_decref(claim);
    return rc;
}

#define CLAIM(results, config)                                                              \
    "{\"metadata\":{\"uid\":\"u-1\"},\"status\":{\"allocation\":{\"devices\":{\"results\":" \
    "[" results "],\"config\":[" config "]}}}}"
#define RESULT(dev, extra)                                                                   \
    "{\"request\":\"gpu\",\"driver\":\"" DRIVER "\",\"pool\":\"" NODE "\",\"device\":\"" dev \
    "\"" extra "}"
#define OURS(params)                                                                          \
    "{\"source\":\"FromClaim\",\"requests\":[],\"opaque\":{\"driver\":\"" DRIVER              \
    "\",\"parameters\":{\"apiVersion\":\"gpupool.io/v1alpha1\",\"kind\":\"GpuConfig\"" params \
    "}}}"

static void test_shared_whole_and_ours_only(void **state)
{
    struct world *w = *state;
    struct dra_claim_entry e;
    char err[512];
    assert_int_equal(
        resolve(
            w, "u-1",
            CLAIM(RESULT("gpu-0",
                         ",\"consumedCapacity\":{\"memory\":\"4Gi\"},\"shareID\":"
                         "\"s1\"") "," RESULT("gpu-1",
                                              "") ","
                                                  "{\"request\":\"gpu\",\"driver\":\"other."
                                                  "example.com\",\"pool\":\"node1\","
                                                  "\"device\":\"gpu-9\"}," RESULT(
                                                      "gpu-1",
                                                      ",\"consumedCapacity\":{\"memory\":"
                                                      "\"40Gi\"}") "," RESULT("gpu-0",
                                                                              ",\"consumedCapacit"
                                                                              "y\":{\"memory\":"
                                                                              "\"8Gi\"},"
                                                                              "\"adminAccess\":"
                                                                              "true"),
                  ""),
            &e, err, sizeof err),
        0);
    assert_int_equal(e.state, DRA_PREPARE_STARTED);
    assert_int_equal(e.device_count, 4); /* the other driver's result is not ours */
    assert_string_equal(e.devices[0].device, "gpu-0");
    assert_true(e.devices[0].limit == 4 * GIB); /* shared */
    assert_string_equal(e.devices[0].share_id, "s1");
    assert_string_equal(e.devices[0].uuid, w->inv.gpus[0].uuid);
    assert_string_equal(e.devices[0].cdi_id, "k8s." DRIVER "/claim=u-1-gpu-0");
    assert_string_equal(e.devices[0].request, "gpu");
    assert_string_equal(e.devices[0].pool, NODE);
    assert_true(e.devices[1].limit == 0); /* no consumedCapacity: whole */
    assert_true(e.devices[2].limit == 0); /* all of its memory: whole */
    assert_true(e.devices[3].limit == 0); /* admin access: never limited */
    free(e.devices);

    /* a claim with no result of ours is fine: nothing to do */
    assert_int_equal(resolve(w, "u-1",
                             CLAIM("{\"request\":\"r\",\"driver\":\"x.io\",\"pool\":\"p\","
                                   "\"device\":\"d\"}",
                                   ""),
                             &e, err, sizeof err),
                     0);
    assert_int_equal(e.device_count, 0);
    assert_null(e.devices);
}

/* A device whose memory is not a whole number of MiB: the slices offer its
 * whole MiBs as "all of it" (requestPolicy default); a claim consuming that
 * is the whole device, one MiB less is a share. */
static void test_whole_mibs_are_the_whole_device(void **state)
{
    struct world *w = *state;
    w->t.devices[0].memory = (16ull << 30) + 12345;
    struct dra_claim_entry e;
    char err[512];
    assert_int_equal(
        resolve(w, "u-1",
                CLAIM(RESULT("gpu-0", ",\"consumedCapacity\":{\"memory\":\"16Gi\"}") "," RESULT(
                          "gpu-0", ",\"consumedCapacity\":{\"memory\":\"16383Mi\"}"),
                      ""),
                &e, err, sizeof err),
        0);
    assert_true(e.devices[0].limit == 0);
    assert_true(e.devices[1].limit == 16383ull << 20);
    free(e.devices);
    w->t.devices[0].memory = 40ull << 30;
}

static void test_opaque_config_applies(void **state)
{
    struct world *w = *state;
    struct dra_claim_entry e;
    char err[512];
    /* class config first, the claim's after it: the claim's wins; requests filter */
    assert_int_equal(
        resolve(
            w, "u-1",
            CLAIM(
                RESULT("gpu-0",
                       ",\"consumedCapacity\":{\"memory\":\"8Gi\"}") ","
                                                                     "{\"request\":\"other\","
                                                                     "\"driver\":\"" DRIVER
                                                                     "\",\"pool\":\"" NODE
                                                                     "\",\"device\":\"gpu-1\"}",
                OURS(
                    ",\"memoryLimit\":\"6Gi\"") ","
                                                "{\"source\":\"FromClass\",\"requests\":[\"gpu\"],"
                                                "\"opaque\":{\"driver\":"
                                                "\"" DRIVER "\",\"parameters\":{\"apiVersion\":"
                                                "\"gpupool.io/v1alpha1\","
                                                "\"kind\":\"GpuConfig\",\"memoryLimit\":\"7Gi\"}}},"
                                                "{\"source\":\"FromClaim\",\"requests\":["
                                                "\"nomatch\"],\"opaque\":{"
                                                "\"driver\":\"" DRIVER
                                                "\",\"parameters\":{\"bad\":1}}},"
                                                "{\"source\":\"FromClaim\",\"opaque\":{\"driver\":"
                                                "\"x.io\",\"parameters\":"
                                                "{\"whatever\":1}}}"),
            &e, err, sizeof err),
        0);
    assert_true(e.devices[0].limit == 6 * GIB);
    assert_true(e.devices[1].limit == 6 * GIB); /* whole GPU capped by the claim's config */
    free(e.devices);
}

static void expect_error(struct world *w, const char *uid, const char *text, const char *why)
{
    struct dra_claim_entry e;
    char err[512] = "";
    assert_int_equal(resolve(w, uid, text, &e, err, sizeof err), -1);
    assert_null(e.devices);
    if (strstr(err, why) == NULL)
        fail_msg("error \"%s\" does not say \"%s\"", err, why);
}

static void test_errors(void **state)
{
    struct world *w = *state;
    expect_error(w, "u-2", CLAIM(RESULT("gpu-0", ""), ""), "has UID u-1, not u-2");
    expect_error(w, "u-1", "{\"metadata\":{\"uid\":\"u-1\"},\"status\":{}}", "is not allocated");
    expect_error(w, "u-1", CLAIM(RESULT("gpu-0", "") "," RESULT("gpu-5", ""), ""),
                 "device \"gpu-5\" of pool node1 is not a device of this node");
    expect_error(w, "u-1",
                 CLAIM("{\"request\":\"r\",\"driver\":\"" DRIVER "\",\"pool\":\"node2\","
                       "\"device\":\"gpu-0\"}",
                       ""),
                 "another pool");
    expect_error(w, "u-1",
                 CLAIM(RESULT("gpu-0", ",\"consumedCapacity\":{\"memory\":\"80Gi\"}"), ""),
                 "is not in 1..");
    expect_error(w, "u-1",
                 CLAIM(RESULT("gpu-0", ",\"consumedCapacity\":{\"memory\":\"lots\"}"), ""),
                 "consumedCapacity.memory");
    expect_error(w, "u-1",
                 CLAIM(RESULT("gpu-0", ",\"consumedCapacity\":{\"memory\":\"4Gi\"}"),
                       OURS(",\"memoryLimit\":\"5Gi\"")),
                 "memoryLimit 5368709120 bytes is more than the 4294967296 bytes allocated");
    expect_error(w, "u-1", CLAIM(RESULT("gpu-0", ""), OURS(",\"cores\":50")),
                 "opaque config 0 (FromClaim) for driver " DRIVER ": unknown field \"cores\"");
    /* a lost GPU */
    w->t.devices[0].lost = true;
    expect_error(w, "u-1", CLAIM(RESULT("gpu-0", ""), ""), "is lost");
    w->t.devices[0].lost = false;
}

static void test_cdi_id(void **state)
{
    (void)state;
    char id[64];
    assert_int_equal(dra_claim_cdi_id("gpu.nvidia.com", "abc", "gpu-0", id, sizeof id), 0);
    assert_string_equal(id, "k8s.gpu.nvidia.com/claim=abc-gpu-0");
    char small[10];
    assert_int_equal(dra_claim_cdi_id("gpu.nvidia.com", "abc", "gpu-0", small, sizeof small), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_device_names, setup, teardown),
        cmocka_unit_test(test_config),
        cmocka_unit_test_setup_teardown(test_shared_whole_and_ours_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_whole_mibs_are_the_whole_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_opaque_config_applies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test(test_cdi_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

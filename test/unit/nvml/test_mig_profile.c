/* test_mig_profile.c -- MIG profile attribute suffixes ("+me" and kin):
 * the id -> suffix rule, and gpu_inventory_load() reading the GPU instance
 * profile id through the fake NVML (optional gi_profile_id per MIG device). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fake_nvml_env.h"
#include "gpu.h"

static void test_suffix_rule(void **state)
{
    (void)state;
    assert_string_equal(gpu_mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_1_SLICE), "");
    assert_string_equal(gpu_mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_7_SLICE), "");
    assert_string_equal(gpu_mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1), "+me");
    assert_string_equal(gpu_mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1), "+me");
    assert_string_equal(gpu_mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2), "");
    assert_string_equal(gpu_mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME),
                        "+me.all");
    assert_string_equal(gpu_mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX), "+gfx");
    assert_string_equal(gpu_mig_profile_suffix(NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME), "-me");
    assert_string_equal(gpu_mig_profile_suffix(GPU_PROFILE_ID_UNKNOWN), "");
    assert_string_equal(gpu_mig_profile_suffix(0x7f), "");
}

/* 8a100-mig-mixed.json with GPU 0's two 1g devices given revision profiles. */
static char *use_media_inventory(bool fail_info)
{
    json_t *root = fake_inventory_load("8a100-mig-mixed.json");
    json_t *migs = json_object_get(json_array_get(json_object_get(root, "gpus"), 0), "migs");
    json_object_set_new(json_array_get(migs, 2), "gi_profile_id",
                        json_integer(NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1));
    json_object_set_new(json_array_get(migs, 3), "gi_profile_id",
                        json_integer(NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME));
    if (fail_info)
        fake_add_error(root, "nvmlGpuInstanceGetInfo", -1, "NOT_SUPPORTED", 0);
    unsetenv("FAKE_NVML_CONTROL");
    char *path = fake_inventory_use_json(root);
    json_decref(root);
    return path;
}

static void load(struct gpu_inventory *inv)
{
    struct nvml *nvml = NULL;
    char err[2048] = "";
    if (nvml_open(fake_driver_root(0), &nvml, err, sizeof err) != 0)
        fail_msg("nvml_open: %s", err);
    if (gpu_inventory_load(nvml, inv, err, sizeof err) != 0)
        fail_msg("gpu_inventory_load: %s", err);
    nvml_close(nvml);
}

static void test_profile_ids_from_nvml(void **state)
{
    (void)state;
    char *path = use_media_inventory(false);
    struct gpu_inventory inv;
    load(&inv);
    const struct gpu_device *g0 = &inv.gpus[0];
    assert_int_equal(g0->mig_count, 4);
    assert_string_equal(g0->migs[0].profile, "3g.20gb"); /* default id: plain */
    assert_int_equal(g0->migs[0].gpu_instance_profile_id, NVML_GPU_INSTANCE_PROFILE_3_SLICE);
    assert_string_equal(g0->migs[2].profile, "1g.5gb+me");
    assert_int_equal(g0->migs[2].gpu_instance_profile_id, NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1);
    assert_string_equal(g0->migs[3].profile, "1g.5gb-me");
    assert_string_equal(inv.gpus[7].migs[0].profile, "2g.10gb");
    gpu_inventory_free(&inv);
    fake_inventory_remove(path);
}

/* A driver that cannot say the profile id: the plain name, id unknown. */
static void test_profile_id_unavailable(void **state)
{
    (void)state;
    char *path = use_media_inventory(true);
    struct gpu_inventory inv;
    load(&inv);
    assert_string_equal(inv.gpus[0].migs[2].profile, "1g.5gb");
    assert_int_equal(inv.gpus[0].migs[2].gpu_instance_profile_id, GPU_PROFILE_ID_UNKNOWN);
    gpu_inventory_free(&inv);
    fake_inventory_remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_suffix_rule),
        cmocka_unit_test(test_profile_ids_from_nvml),
        cmocka_unit_test(test_profile_id_unavailable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_gpu.c -- gpu_inventory_load() over the fake NVML: every stored
 * inventory, MIG profiles and capability minors, NUMA from sysfs and from
 * NVML, link scores, and errors in the middle of enumeration. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <sys/stat.h>

#include "fake_nvml_env.h"
#include "gpu.h"
#include "gpu_internal.h"

/* No sysfs and no mig-minors: every fact comes from NVML. */
static const struct gpu_host_paths no_host_files = {"/nonexistent/sys/bus/pci/devices",
                                                    "/nonexistent/mig-minors"};

static struct nvml *open_fake(void)
{
    struct nvml *nvml = NULL;
    char err[2048] = "";
    int rc = nvml_open(fake_driver_root(0), &nvml, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "nvml_open: %s\n", err);
    assert_int_equal(rc, 0);
    return nvml;
}

static void load_ok(struct nvml *nvml, const struct gpu_host_paths *paths,
                    struct gpu_inventory *inv)
{
    char err[1024] = "";
    int rc = gpu_inventory_load_with_paths(nvml, paths, inv, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "gpu_inventory_load: %s\n", err);
    assert_int_equal(rc, 0);
}

/* Identity facts must match the inventory file, GPU by GPU. */
static void assert_matches_inventory(const struct gpu_inventory *inv, const char *name)
{
    json_t *root = fake_inventory_load(name);
    json_t *gpus = json_object_get(root, "gpus");
    assert_int_equal(inv->count, json_array_size(gpus));
    for (size_t i = 0; i < inv->count; i++) {
        json_t *g = json_array_get(gpus, i);
        const struct gpu_device *d = &inv->gpus[i];
        assert_int_equal(d->index, i);
        assert_string_equal(d->uuid, json_string_value(json_object_get(g, "uuid")));
        assert_string_equal(d->name, json_string_value(json_object_get(g, "name")));
        assert_string_equal(d->pci_bus_id, json_string_value(json_object_get(g, "pci_bus_id")));
        assert_int_equal(d->minor, json_integer_value(json_object_get(g, "minor")));
        assert_int_equal(d->numa_node, json_integer_value(json_object_get(g, "numa_node")));
        assert_int_equal(d->memory_bytes,
                         (unsigned long long)json_integer_value(json_object_get(g, "memory_mib"))
                             << 20);
        json_t *cc = json_object_get(g, "cc");
        assert_int_equal(d->cc_major, json_integer_value(json_array_get(cc, 0)));
        assert_int_equal(d->cc_minor, json_integer_value(json_array_get(cc, 1)));
        const char *mode = json_string_value(json_object_get(g, "mig_mode"));
        assert_int_equal(d->mig_capable, strcmp(mode, "unsupported") != 0);
        assert_int_equal(d->mig_enabled, strcmp(mode, "enabled") == 0);
        json_t *migs = json_object_get(g, "migs");
        assert_int_equal(d->mig_count, json_is_array(migs) ? json_array_size(migs) : 0);
        for (size_t j = 0; j < d->mig_count; j++) {
            json_t *m = json_array_get(migs, j);
            assert_string_equal(d->migs[j].uuid, json_string_value(json_object_get(m, "uuid")));
            assert_int_equal(d->migs[j].gpu_instance_id,
                             json_integer_value(json_object_get(m, "gi")));
            assert_int_equal(d->migs[j].compute_instance_id,
                             json_integer_value(json_object_get(m, "ci")));
            assert_int_equal(d->migs[j].index, json_integer_value(json_object_get(m, "slot")));
        }
    }
    json_decref(root);
}

static void test_4gpu(void **state)
{
    (void)state;
    fake_use_inventory("4gpu.json");
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    load_ok(nvml, &no_host_files, &inv);
    assert_matches_inventory(&inv, "4gpu.json");
    assert_string_equal(inv.driver_version, "550.54.15");
    assert_int_equal(inv.gpus[0].numa_node, 0);
    assert_int_equal(inv.gpus[3].numa_node, 1);
    assert_false(inv.gpus[0].mig_capable);
    /* Pairs share a PCIe switch; the NUMA nodes differ across pairs. */
    assert_int_equal(gpu_link_score(&inv, 0, 1), 50);
    assert_int_equal(gpu_link_score(&inv, 2, 3), 50);
    assert_int_equal(gpu_link_score(&inv, 0, 2), 10);
    assert_int_equal(gpu_link_score(&inv, 1, 3), 10);
    assert_int_equal(gpu_link_score(&inv, 0, 0), 0);
    assert_int_equal(gpu_link_score(&inv, 0, 4), -1);
    gpu_inventory_free(&inv);
    nvml_close(nvml);
}

static void test_8gpu_nvlink_scores(void **state)
{
    (void)state;
    fake_use_inventory("8gpu-nvlink.json");
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    load_ok(nvml, &no_host_files, &inv);
    assert_matches_inventory(&inv, "8gpu-nvlink.json");
    assert_true(inv.gpus[0].mig_capable);
    assert_false(inv.gpus[0].mig_enabled);
    /* Same switch + 4 NVLinks; same NUMA + 1 NVLink; same NUMA; across NUMA. */
    assert_int_equal(gpu_link_score(&inv, 0, 1), 50 + 400);
    assert_int_equal(gpu_link_score(&inv, 1, 0), 50 + 400);
    assert_int_equal(gpu_link_score(&inv, 0, 2), 20 + 100);
    assert_int_equal(gpu_link_score(&inv, 1, 3), 20 + 100);
    assert_int_equal(gpu_link_score(&inv, 0, 3), 20);
    assert_int_equal(gpu_link_score(&inv, 0, 4), 10);
    assert_int_equal(gpu_link_score(&inv, 6, 7), 50 + 400);
    assert_int_equal(gpu_link_score(&inv, 5, 7), 20 + 100);
    for (size_t a = 0; a < inv.count; a++)
        for (size_t b = 0; b < inv.count; b++)
            assert_int_equal(gpu_link_score(&inv, a, b), gpu_link_score(&inv, b, a));
    gpu_inventory_free(&inv);
    nvml_close(nvml);
}

static void test_lost_pair_scores_zero_without_failing(void **state)
{
    (void)state;
    json_t *root = fake_inventory_load("8gpu-nvlink.json");
    fake_add_error(root, "nvmlDeviceGetTopologyCommonAncestor", 2, "GPU_IS_LOST", 0);
    char *path = fake_inventory_use_json(root);
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    load_ok(nvml, &no_host_files, &inv);
    assert_int_equal(inv.count, 8);
    for (size_t b = 0; b < inv.count; b++) {
        assert_int_equal(gpu_link_score(&inv, 2, b), 0);
        assert_int_equal(gpu_link_score(&inv, b, 2), 0);
    }
    assert_int_equal(gpu_link_score(&inv, 0, 1), 450);
    assert_int_equal(gpu_link_score(&inv, 1, 3), 120);
    gpu_inventory_free(&inv);
    nvml_close(nvml);
    fake_inventory_remove(path);
    json_decref(root);
}

static void test_nvlink_error_scores_zero(void **state)
{
    (void)state;
    json_t *root = fake_inventory_load("8gpu-nvlink.json");
    fake_add_error(root, "nvmlDeviceGetNvLinkRemotePciInfo", 4, "UNKNOWN", 0);
    char *path = fake_inventory_use_json(root);
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    load_ok(nvml, &no_host_files, &inv);
    assert_int_equal(gpu_link_score(&inv, 4, 5), 0);
    assert_int_equal(gpu_link_score(&inv, 5, 4), 0);
    assert_int_equal(gpu_link_score(&inv, 6, 7), 450);
    gpu_inventory_free(&inv);
    nvml_close(nvml);
    fake_inventory_remove(path);
    json_decref(root);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_mig_mixed_profiles_and_minors(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp-migminors-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char minors[128];
    snprintf(minors, sizeof minors, "%s/mig-minors", dir);
    write_file(minors, "config 1\nmonitor 2\ngpu0/gi1/access 21\ngpu0/gi1/ci0/access 22\n"
                       "gpu0/gi8/access 120\ngpu0/gi8/ci0/access 121\ngpu7/gi3/access 30\n");
    fake_use_inventory("8a100-mig-mixed.json");
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    struct gpu_host_paths paths = {no_host_files.pci_devices_dir, minors};
    load_ok(nvml, &paths, &inv);
    assert_matches_inventory(&inv, "8a100-mig-mixed.json");
    const struct gpu_device *g0 = &inv.gpus[0];
    assert_true(g0->mig_enabled);
    assert_int_equal(g0->mig_count, 4);
    assert_string_equal(g0->migs[0].profile, "3g.20gb");
    assert_string_equal(g0->migs[1].profile, "2g.10gb");
    assert_string_equal(g0->migs[2].profile, "1g.5gb");
    assert_string_equal(g0->migs[3].profile, "1g.5gb");
    assert_int_equal(g0->migs[0].memory_bytes, 19968ull << 20);
    assert_int_equal(g0->migs[0].gpu_instance_slices, 3);
    assert_int_equal(g0->migs[0].compute_instance_slices, 3);
    assert_int_equal(g0->migs[0].gi_access_minor, 21);
    assert_int_equal(g0->migs[0].ci_access_minor, 22);
    assert_int_equal(g0->migs[3].gpu_instance_id, 8);
    assert_int_equal(g0->migs[3].gi_access_minor, 120);
    assert_int_equal(g0->migs[3].ci_access_minor, 121);
    assert_int_equal(g0->migs[1].gi_access_minor, GPU_MINOR_UNKNOWN);
    assert_int_equal(inv.gpus[4].mig_count, 2);
    assert_string_equal(inv.gpus[4].migs[1].profile, "3g.20gb");
    assert_string_equal(inv.gpus[7].migs[0].profile, "2g.10gb");
    assert_int_equal(inv.gpus[7].migs[0].gi_access_minor, 30);
    assert_int_equal(inv.gpus[7].migs[0].ci_access_minor, GPU_MINOR_UNKNOWN);
    gpu_inventory_free(&inv);
    /* Without the minors file the minors are unknown, nothing else changes. */
    load_ok(nvml, &no_host_files, &inv);
    assert_int_equal(inv.gpus[0].migs[0].gi_access_minor, GPU_MINOR_UNKNOWN);
    assert_int_equal(inv.gpus[0].migs[0].ci_access_minor, GPU_MINOR_UNKNOWN);
    assert_string_equal(inv.gpus[0].migs[0].profile, "3g.20gb");
    gpu_inventory_free(&inv);
    nvml_close(nvml);
    unlink(minors);
    rmdir(dir);
}

static void test_mig_single_and_nonuniform(void **state)
{
    (void)state;
    fake_use_inventory("2gpu-mig-single.json");
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    load_ok(nvml, &no_host_files, &inv);
    assert_matches_inventory(&inv, "2gpu-mig-single.json");
    for (size_t i = 0; i < inv.count; i++) {
        assert_int_equal(inv.gpus[i].mig_count, 7);
        for (size_t j = 0; j < 7; j++)
            assert_string_equal(inv.gpus[i].migs[j].profile, "1g.5gb");
    }
    gpu_inventory_free(&inv);
    nvml_close(nvml);

    fake_use_inventory("mig-mixed-nonuniform.json");
    nvml = open_fake();
    load_ok(nvml, &no_host_files, &inv);
    assert_matches_inventory(&inv, "mig-mixed-nonuniform.json");
    assert_string_equal(inv.gpus[0].migs[6].profile, "1g.5gb");
    assert_string_equal(inv.gpus[1].migs[0].profile, "3g.20gb");
    gpu_inventory_free(&inv);
    nvml_close(nvml);
}

static void test_compute_instance_profile_name(void **state)
{
    (void)state;
    json_t *root = fake_inventory_load("2gpu-mig-single.json");
    json_t *mig = json_array_get(
        json_object_get(json_array_get(json_object_get(root, "gpus"), 0), "migs"), 0);
    json_object_set_new(mig, "gi_slices", json_integer(2));
    json_object_set_new(mig, "ci_slices", json_integer(1));
    json_object_set_new(mig, "memory_mib", json_integer(9856));
    char *path = fake_inventory_use_json(root);
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    load_ok(nvml, &no_host_files, &inv);
    assert_string_equal(inv.gpus[0].migs[0].profile, "1c.2g.10gb");
    assert_string_equal(inv.gpus[0].migs[1].profile, "1g.5gb");
    gpu_inventory_free(&inv);
    nvml_close(nvml);
    fake_inventory_remove(path);
    json_decref(root);

    char name[GPU_PROFILE_LEN];
    gpu_mig_profile_name(1, 1, 9728, 81920ull << 20, name, sizeof name); /* A100-80GB */
    assert_string_equal(name, "1g.10gb");
    gpu_mig_profile_name(7, 7, 40192, 40960ull << 20, name, sizeof name);
    assert_string_equal(name, "7g.40gb");
    gpu_mig_profile_name(4, 4, 19968, 40960ull << 20, name, sizeof name);
    assert_string_equal(name, "4g.20gb");
    gpu_mig_profile_name(3, 2, 19968, 40960ull << 20, name, sizeof name);
    assert_string_equal(name, "2c.3g.20gb");
}

static void test_numa_from_sysfs_first(void **state)
{
    (void)state;
    char dir[] = "/tmp/gp-sysfs-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    /* sysfs names use a 4-digit, lower-case domain. */
    snprintf(path, sizeof path, "%s/0000:0f:00.0", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/0000:0f:00.0/numa_node", dir);
    write_file(path, "1\n");
    snprintf(path, sizeof path, "%s/0000:0f:00.0/vendor", dir);
    write_file(path, "0x10de\n");
    snprintf(path, sizeof path, "%s/0000:47:00.0", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/0000:47:00.0/numa_node", dir);
    write_file(path, "-1\n");
    /* Somebody else's device at GPU 3's address: not believed. */
    snprintf(path, sizeof path, "%s/0000:4e:00.0", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/0000:4e:00.0/numa_node", dir);
    write_file(path, "0\n");
    snprintf(path, sizeof path, "%s/0000:4e:00.0/vendor", dir);
    write_file(path, "0x8086\n");
    fake_use_inventory("4gpu.json");
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    struct gpu_host_paths paths = {dir, no_host_files.mig_minors_file};
    load_ok(nvml, &paths, &inv);
    assert_int_equal(inv.gpus[0].numa_node, 0);                /* no sysfs entry: NVML says 0 */
    assert_int_equal(inv.gpus[1].numa_node, 1);                /* sysfs says 1, NVML 0 */
    assert_int_equal(inv.gpus[2].numa_node, GPU_NUMA_UNKNOWN); /* sysfs -1 */
    assert_int_equal(inv.gpus[3].numa_node, 1);                /* sysfs entry is not NVIDIA's */
    gpu_inventory_free(&inv);
    nvml_close(nvml);
    const char *files[] = {"0000:0f:00.0/vendor", "0000:4e:00.0/numa_node", "0000:4e:00.0/vendor"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/0000:4e:00.0", dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/0000:0f:00.0/numa_node", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/0000:47:00.0/numa_node", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/0000:0f:00.0", dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/0000:47:00.0", dir);
    rmdir(path);
    rmdir(dir);
}

static void assert_load_fails(json_t *root, const char *expected1, const char *expected2)
{
    char *path = fake_inventory_use_json(root);
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    char err[1024] = "";
    assert_int_equal(gpu_inventory_load_with_paths(nvml, &no_host_files, &inv, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, expected1));
    assert_non_null(strstr(err, expected2));
    assert_int_equal(inv.count, 0);
    assert_null(inv.gpus);
    nvml_close(nvml);
    fake_inventory_remove(path);
}

/* Loads root (with its error rules); checks that GPU `lost` alone is lost,
 * with `uuid` as its ID, and that every other GPU kept its own. */
static void assert_one_lost(json_t *root, size_t lost, const char *uuid)
{
    char *path = fake_inventory_use_json(root);
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    load_ok(nvml, &no_host_files, &inv);
    assert_int_equal(inv.count, json_array_size(json_object_get(root, "gpus")));
    for (size_t i = 0; i < inv.count; i++) {
        const char *want = json_string_value(
            json_object_get(json_array_get(json_object_get(root, "gpus"), i), "uuid"));
        assert_int_equal(inv.gpus[i].lost, i == lost);
        assert_string_equal(inv.gpus[i].uuid, i == lost ? uuid : want);
        assert_int_equal(inv.gpus[i].index, i);
    }
    assert_int_equal(inv.gpus[lost].mig_count, 0);
    assert_false(inv.gpus[lost].mig_enabled);
    assert_int_equal(gpu_link_score(&inv, lost, (lost + 1) % inv.count), 0);
    gpu_inventory_free(&inv);
    nvml_close(nvml);
    fake_inventory_remove(path);
}

static const char *inventory_uuid(json_t *root, size_t gpu)
{
    return json_string_value(
        json_object_get(json_array_get(json_object_get(root, "gpus"), gpu), "uuid"));
}

/* One GPU NVML cannot identify is kept, lost, and the others load. */
static void test_identity_errors_mark_one_gpu_lost(void **state)
{
    (void)state;
    /* No UUID but a handle: the ID derives from the PCI address. */
    json_t *root = fake_inventory_load("4gpu.json");
    fake_add_error(root, "nvmlDeviceGetUUID", 2, "GPU_IS_LOST", 0);
    assert_one_lost(root, 2, GPU_LOST_UUID_PREFIX "00000000:47:00.0");
    json_decref(root);

    /* The UUID was read: it is kept. */
    root = fake_inventory_load("4gpu.json");
    fake_add_error(root, "nvmlDeviceGetMinorNumber", 1, "UNKNOWN", 0);
    char uuid[GPU_UUID_LEN];
    snprintf(uuid, sizeof uuid, "%s", inventory_uuid(root, 1));
    assert_one_lost(root, 1, uuid);
    json_decref(root);

    /* No handle at all: the NVML index is all that is known. */
    root = fake_inventory_load("4gpu.json");
    fake_add_error(root, "nvmlDeviceGetHandleByIndex", 3, "NO_PERMISSION", 0);
    assert_one_lost(root, 3, GPU_LOST_UUID_PREFIX "index-3");
    json_decref(root);

    /* A MIG device's identity counts too; the partial MIG list is freed. */
    root = fake_inventory_load("8a100-mig-mixed.json");
    fake_add_error(root, "nvmlDeviceGetGpuInstanceId", 2, "UNKNOWN", 1);
    snprintf(uuid, sizeof uuid, "%s", inventory_uuid(root, 2));
    assert_one_lost(root, 2, uuid);
    json_decref(root);
}

static void test_count_error_fails_the_load(void **state)
{
    (void)state;
    json_t *root = fake_inventory_load("4gpu.json");
    fake_add_error(root, "nvmlDeviceGetCount", -1, "UNINITIALIZED", 0);
    assert_load_fails(root, "nvmlDeviceGetCount_v2 failed", "Uninitialized");
    json_decref(root);
}

static void test_optional_fact_errors_are_tolerated(void **state)
{
    (void)state;
    json_t *root = fake_inventory_load("8a100-mig-mixed.json");
    fake_add_error(root, "nvmlDeviceGetNumaNodeId", 1, "NOT_SUPPORTED", 0);
    fake_add_error(root, "nvmlDeviceGetAttributes", 3, "UNKNOWN", 0);
    fake_add_error(root, "nvmlDeviceGetMigMode", 5, "NOT_SUPPORTED", 0);
    char *path = fake_inventory_use_json(root);
    struct nvml *nvml = open_fake();
    struct gpu_inventory inv;
    load_ok(nvml, &no_host_files, &inv);
    assert_int_equal(inv.gpus[1].numa_node, GPU_NUMA_UNKNOWN);
    assert_int_equal(inv.gpus[2].numa_node, 0);
    assert_int_equal(inv.gpus[3].mig_count, 4);
    assert_string_equal(inv.gpus[3].migs[0].profile, "");
    assert_int_equal(inv.gpus[3].migs[0].memory_bytes, 19968ull << 20); /* from MemoryInfo */
    assert_false(inv.gpus[5].mig_capable);
    assert_int_equal(inv.gpus[5].mig_count, 0);
    gpu_inventory_free(&inv);
    nvml_close(nvml);
    fake_inventory_remove(path);
    json_decref(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_4gpu),
        cmocka_unit_test(test_8gpu_nvlink_scores),
        cmocka_unit_test(test_lost_pair_scores_zero_without_failing),
        cmocka_unit_test(test_nvlink_error_scores_zero),
        cmocka_unit_test(test_mig_mixed_profiles_and_minors),
        cmocka_unit_test(test_mig_single_and_nonuniform),
        cmocka_unit_test(test_compute_instance_profile_name),
        cmocka_unit_test(test_numa_from_sysfs_first),
        cmocka_unit_test(test_identity_errors_mark_one_gpu_lost),
        cmocka_unit_test(test_count_error_fails_the_load),
        cmocka_unit_test(test_optional_fact_errors_are_tolerated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

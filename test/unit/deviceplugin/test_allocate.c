/* Unit tests: a container's Allocate edits per strategy (allocate.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sys/stat.h>
#include <unistd.h>

#include "allocate.h"
#include "fixtures.h"

struct world {
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    struct arena arena;
    struct edits_options opts; /* envvar by UUID unless a test says otherwise */
    struct container_edits out;
};

static int setup(void **state)
{
    struct world *w = calloc(1, sizeof *w);
    fixture_inventory(&w->inv, 4, 0);
    fixture_config(&w->cfg);
    w->opts.device_list = EDITS_LIST_ENVVAR;
    container_edits_init(&w->out, &w->arena);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    struct world *w = *state;
    arena_free(&w->arena);
    resource_set_free(&w->set);
    free(w->cfg.time_slices);
    fixture_inventory_free(&w->inv);
    free(w);
    return 0;
}

static void allocate(struct world *w, const size_t *positions, size_t n)
{
    char err[256];
    resource_set_free(&w->set);
    assert_int_equal(resource_set_build(&w->inv, &w->cfg, &w->set, err, sizeof err), 0);
    assert_int_equal(allocate_container(&w->opts, &w->inv, &w->set.resources[0], positions, n,
                                        &w->out, err, sizeof err),
                     0);
}

static const char *env(const struct container_edits *o, const char *key)
{
    return container_edits_env(o, key);
}

static void test_envvar_uuid(void **state)
{
    struct world *w = *state;
    size_t pos[] = {2, 0};
    allocate(w, pos, 2);
    char want[256];
    snprintf(want, sizeof want, "%s,%s", w->inv.gpus[2].uuid, w->inv.gpus[0].uuid);
    assert_string_equal(env(&w->out, "NVIDIA_VISIBLE_DEVICES"), want);
    assert_int_equal(w->out.n_env, 1);
    assert_int_equal(w->out.n_mounts, 0);
    assert_int_equal(w->out.n_device_nodes, 0);
    assert_int_equal(w->out.n_cdi_devices, 0);
}

static void test_envvar_index(void **state)
{
    struct world *w = *state;
    w->opts.id_by_index = true;
    size_t pos[] = {1, 3};
    allocate(w, pos, 2);
    assert_string_equal(env(&w->out, "NVIDIA_VISIBLE_DEVICES"), "1,3");
}

static void test_replicas_fold_to_one_gpu(void **state)
{
    struct world *w = *state;
    fixture_time_slice(&w->cfg, "nvidia.com/gpu", 4);
    size_t pos[] = {4, 5, 9}; /* GPU 1 twice, GPU 2 once */
    allocate(w, pos, 3);
    char want[256];
    snprintf(want, sizeof want, "%s,%s", w->inv.gpus[1].uuid, w->inv.gpus[2].uuid);
    assert_string_equal(env(&w->out, "NVIDIA_VISIBLE_DEVICES"), want);
}

static void test_volume_mounts(void **state)
{
    struct world *w = *state;
    w->opts.device_list = EDITS_LIST_VOLUME_MOUNTS;
    size_t pos[] = {0, 1};
    allocate(w, pos, 2);
    assert_string_equal(env(&w->out, "NVIDIA_VISIBLE_DEVICES"),
                        "/var/run/nvidia-container-devices");
    assert_int_equal(w->out.n_mounts, 2);
    char want[256];
    snprintf(want, sizeof want, "/var/run/nvidia-container-devices/%s", w->inv.gpus[1].uuid);
    assert_string_equal(w->out.mounts[1].container_path, want);
    assert_string_equal(w->out.mounts[1].host_path, "/dev/null");
    assert_false(w->out.mounts[1].read_only);
}

/* CDI only: the names, nothing else (how they travel is the encoder's). */
static void test_cdi_names_only(void **state)
{
    struct world *w = *state;
    w->opts.device_list = EDITS_LIST_CDI;
    w->opts.pass_device_specs = true;
    size_t pos[] = {3};
    allocate(w, pos, 1);
    assert_int_equal(w->out.n_env, 0); /* no env, no device nodes */
    assert_int_equal(w->out.n_device_nodes, 0);
    char want[256];
    snprintf(want, sizeof want, "k8s.device-plugin.nvidia.com/gpu=%s", w->inv.gpus[3].uuid);
    assert_int_equal(w->out.n_cdi_devices, 1);
    assert_string_equal(w->out.cdi_devices[0], want);
}

static void test_gds_mofed(void **state)
{
    struct world *w = *state;
    w->opts.gds = true;
    w->opts.mofed = true;
    w->opts.device_list = EDITS_LIST_ENVVAR | EDITS_LIST_CDI;
    size_t pos[] = {0};
    allocate(w, pos, 1);
    assert_string_equal(env(&w->out, "NVIDIA_GDS"), "enabled");
    assert_string_equal(env(&w->out, "NVIDIA_MOFED"), "enabled");
    assert_int_equal(w->out.n_cdi_devices, 3);
    assert_string_equal(w->out.cdi_devices[1], "k8s.device-plugin.nvidia.com/gds=all");
}

static void test_pass_device_specs(void **state)
{
    struct world *w = *state;
    char root[] = "/tmp/gp-devroot-XXXXXX";
    assert_non_null(mkdtemp(root));
    char path[512];
    snprintf(path, sizeof path, "%s/dev", root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/dev/nvidiactl", root);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    w->opts.dev_root = root;
    w->opts.pass_device_specs = true;
    size_t pos[] = {2};
    allocate(w, pos, 1);
    assert_int_equal(w->out.n_device_nodes, 2); /* nvidiactl exists, uvm etc. do not */
    assert_string_equal(w->out.device_nodes[0].path, "/dev/nvidiactl");
    assert_string_equal(w->out.device_nodes[0].host_path, path);
    assert_string_equal(w->out.device_nodes[1].path, "/dev/nvidia2");
    assert_string_equal(w->out.device_nodes[1].permissions, "rw");
    unlink(path);
    snprintf(path, sizeof path, "%s/dev", root);
    rmdir(path);
    rmdir(root);
}

static void test_mig_device_specs(void **state)
{
    struct world *w = *state;
    fixture_mig(&w->inv, 0, 2, "3g.20gb");
    w->cfg.mig_strategy = MIG_STRATEGY_MIXED;
    w->opts.pass_device_specs = true;
    w->opts.dev_root = "/nonexistent-root";
    char err[256];
    assert_int_equal(resource_set_build(&w->inv, &w->cfg, &w->set, err, sizeof err), 0);
    const struct resource *mig = &w->set.resources[1];
    assert_string_equal(mig->name, "nvidia.com/mig-3g.20gb");
    size_t pos[] = {1};
    assert_int_equal(allocate_container(&w->opts, &w->inv, mig, pos, 1, &w->out, err, sizeof err),
                     0);
    assert_string_equal(env(&w->out, "NVIDIA_VISIBLE_DEVICES"), w->inv.gpus[0].migs[1].uuid);
    assert_int_equal(w->out.n_device_nodes, 3);
    assert_string_equal(w->out.device_nodes[0].path, "/dev/nvidia0");
    assert_string_equal(w->out.device_nodes[0].host_path, "/nonexistent-root/dev/nvidia0");
    assert_string_equal(w->out.device_nodes[1].path, "/dev/nvidia-caps/nvidia-cap101");
    assert_string_equal(w->out.device_nodes[2].path, "/dev/nvidia-caps/nvidia-cap201");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_envvar_uuid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_envvar_index, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replicas_fold_to_one_gpu, setup, teardown),
        cmocka_unit_test_setup_teardown(test_volume_mounts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cdi_names_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gds_mofed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pass_device_specs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mig_device_specs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

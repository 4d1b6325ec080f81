/* test_contract.c -- the container contract end to end: the environment and
 * mounts the device plugin's container edits give a gpu-mem container
 * (devices/gpumem.c + devices/isolation.c, as gpumem_service.c chains
 * them; a DRA prepare uses the same isolation edits) are fed, exactly as NAME=value strings, to the parser that
 * libgpupool-cuda runs inside the container (cuda/cuda_config.c). If either
 * side renames a variable, changes the ordinal base, the value format or
 * the region path, a limit below goes missing or changes and this fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda_config.h"
#include "fixtures.h"
#include "gpumem.h"
#include "isolation.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)
#define MAX_ENV 64
#define GPU_BYTES (8 * GiB)

struct reply_case {
    enum pool_mem_unit unit;
    const char *idx;            /* ALIYUN_COM_GPU_MEM_IDX: the container's GPUs */
    unsigned long long units;   /* the container's aliyun.com/gpu-mem */
    unsigned long long per_gpu; /* the limit each GPU must get, in bytes */
};

/* The reply the plugin builds for one container: gpushare's environment,
 * then the limit (the container's bytes split evenly over its GPUs). */
static void plugin_reply(const struct reply_case *c, struct container_edits *out)
{
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    struct gpumem_assignment as;
    char err[512];
    fixture_inventory(&inv, 4, 0);
    for (size_t g = 0; g < inv.count; g++) /* in MiB, 4 x 40 GiB pass the kubelet's 4 MiB */
        inv.gpus[g].memory_bytes = GPU_BYTES;
    fixture_config(&cfg);
    cfg.resource_mode = RESOURCE_MODE_GPU_MEM;
    cfg.memory_unit = c->unit;
    if (gpumem_resource_build(&inv, &cfg, &set, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(gpumem_parse_idx(c->idx, &inv, &as, err, sizeof err), 0);
    as.pod_units = c->units;
    struct edits_options opts = {.device_list = EDITS_LIST_ENVVAR};
    assert_int_equal(gpumem_container_edits(&opts, c->unit, &inv, &set.resources[0], &as, c->units,
                                            out, err, sizeof err),
                     0);
    unsigned long long limits[POOL_MAX_GPUS];
    unsigned long long total = c->units * poolapi_unit_bytes(c->unit);
    for (size_t i = 0; i < as.gpu_count; i++)
        limits[i] = isolation_share(total, as.gpu_count);
    assert_int_equal(isolation_add_edits("/var/lib/gpupool/isolation",
                                         "/var/lib/gpupool/isolation/containers/uid_0", limits,
                                         as.gpu_count, out, err, sizeof err),
                     0);
    resource_set_free(&set);
    fixture_inventory_free(&inv);
}

/* The reply's env as the container runtime sets it: "KEY=value" strings,
 * then extra (a process's own variables), NULL-terminated, in the arena. */
static char **container_env(struct arena *a, const struct container_edits *r, const char *extra)
{
    assert_true(r->n_env + 2 <= MAX_ENV);
    char **env = arena_calloc(a, MAX_ENV, sizeof *env);
    assert_non_null(env);
    size_t n = 0;
    for (size_t i = 0; i < r->n_env; i++) {
        size_t len = strlen(r->env[i].key) + strlen(r->env[i].value) + 2;
        env[n] = arena_alloc(a, len);
        assert_non_null(env[n]);
        snprintf(env[n++], len, "%s=%s", r->env[i].key, r->env[i].value);
    }
    if (extra != NULL)
        env[n++] = (char *)extra;
    return env;
}

static const char *mount_of(const struct container_edits *r, const char *container)
{
    const struct container_mount *m = container_edits_mount(r, container);
    return m != NULL ? m->host_path : NULL;
}

static void test_reply_to_library(void **state)
{
    (void)state;
    static const struct reply_case cases[] = {
        {POOL_UNIT_GIB, "1", 3, 3 * GiB},
        {POOL_UNIT_GIB, "0,2", 5, 5 * GiB / 2},
        {POOL_UNIT_MIB, "3", 1500, 1500 * MiB},
        {POOL_UNIT_MIB, "1,3", 3001, 3001 * MiB / 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct reply_case *c = &cases[i];
        struct arena a = ARENA_INIT;
        struct container_edits r;
        container_edits_init(&r, &a);
        plugin_reply(c, &r);
        size_t gpus = strchr(c->idx, ',') != NULL ? 2 : 1;

        struct cudacfg cfg;
        cudacfg_load(&cfg, container_env(&a, &r, NULL));
        if (cfg.state != CUDACFG_ON)
            fail_msg("case %zu: the library's state is %d (%s)", i, (int)cfg.state, cfg.why);
        for (size_t g = 0; g < gpus; g++) {
            /* What CUDA and NVML (container ordinals, no renumbering) get. */
            assert_int_equal(cudacfg_limit(&cfg, (int)g, (int64_t)GPU_BYTES), c->per_gpu);
            assert_int_equal(cudacfg_container_limit(&cfg, (int)g, (int64_t)GPU_BYTES), c->per_gpu);
        }
        /* The region lives in the directory the plugin mounts read-write. */
        assert_string_equal(cfg.prefix, POOL_CONTAINER_REGION_PREFIX);
        const char *slash = strrchr(cfg.prefix, '/');
        char region_dir[sizeof cfg.prefix];
        snprintf(region_dir, sizeof region_dir, "%.*s", (int)(slash - cfg.prefix), cfg.prefix);
        assert_string_equal(mount_of(&r, region_dir),
                            "/var/lib/gpupool/isolation/containers/uid_0");

        /* A process that renumbers its GPUs keeps the right limit. */
        char visible[64];
        snprintf(visible, sizeof visible, "CUDA_VISIBLE_DEVICES=%zu", gpus - 1);
        cudacfg_load(&cfg, container_env(&a, &r, visible));
        assert_int_equal(cudacfg_limit(&cfg, 0, (int64_t)GPU_BYTES), c->per_gpu);
        arena_free(&a);
    }
}

/* ld.so reads the preload file the plugin installs; the path in it must be
 * where the plugin mounts the library, and the file it installs there is
 * the one mounted. */
static void test_preload_names_the_mounted_library(void **state)
{
    (void)state;
    char root[] = "/tmp/gp-contract-XXXXXX", lib[300], dir[300], path[400], err[1024];
    assert_non_null(mkdtemp(root));
    snprintf(lib, sizeof lib, "%s/built.so", root);
    snprintf(dir, sizeof dir, "%s/isolation", root);
    FILE *f = fopen(lib, "w");
    assert_non_null(f);
    assert_true(fputs("\177ELF not really", f) >= 0);
    assert_int_equal(fclose(f), 0);
    struct gp_config cfg;
    fixture_config(&cfg);
    cfg.resource_mode = RESOURCE_MODE_GPU_MEM;
    cfg.isolation = ISOLATION_MEMORY;
    cfg.isolation_dir = dir;
    cfg.isolation_library = lib;
    assert_int_equal(isolation_install(&cfg, err, sizeof err), 0);

    struct arena a = ARENA_INIT;
    struct container_edits r;
    container_edits_init(&r, &a);
    unsigned long long limit = GiB;
    assert_int_equal(isolation_add_edits(dir, "/x", &limit, 1, &r, err, sizeof err), 0);
    const char *preload_host = mount_of(&r, "/etc/ld.so.preload");
    assert_non_null(preload_host);
    f = fopen(preload_host, "r");
    assert_non_null(f);
    char line[400] = "";
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
    const char *library_host = mount_of(&r, line);
    if (library_host == NULL)
        fail_msg("the preload file names %s, which the reply does not mount", line);
    snprintf(path, sizeof path, "%s/%s", dir, ISOLATION_LIBRARY_NAME);
    assert_string_equal(library_host, path);
    arena_free(&a);
    snprintf(path, sizeof path, "rm -rf %s", root);
    assert_int_equal(system(path), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_to_library),
        cmocka_unit_test(test_preload_names_the_mounted_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests: isolation.c -- keys, limits, the reply's mounts and env, the
 * atomic install and removal that never follows a symlink (on a temporary
 * directory). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "arena.h"
#include "fixtures.h"
#include "isolation.h"
#include "resource.h"

static void test_pod_key(void **state)
{
    (void)state;
    char key[ISOLATION_KEY_LEN];
    assert_int_equal(isolation_pod_key("0f0e-AB12", 3, key, sizeof key), 0);
    assert_string_equal(key, "0f0e-AB12_3");
    /* never a path, never empty */
    assert_int_equal(isolation_pod_key("../etc", 0, key, sizeof key), -1);
    assert_int_equal(isolation_pod_key("a/b", 0, key, sizeof key), -1);
    assert_int_equal(isolation_pod_key("a_b", 0, key, sizeof key), -1);
    assert_int_equal(isolation_pod_key("", 0, key, sizeof key), -1);
    assert_int_equal(isolation_pod_key(NULL, 0, key, sizeof key), -1);
    char small[7];
    assert_int_equal(isolation_pod_key("abcd", 10, small, sizeof small), -1);
    assert_int_equal(isolation_pod_key("abc", 10, small, sizeof small), 0);
    assert_string_equal(small, "abc_10");
}

static void test_replica_key(void **state)
{
    (void)state;
    char key[ISOLATION_KEY_LEN];
    assert_int_equal(isolation_replica_key("GPU-1a.b::2", key, sizeof key), 0);
    assert_string_equal(key, "ts_GPU-1a.b__2");
    assert_int_equal(isolation_replica_key("../x/y", key, sizeof key), 0);
    assert_string_equal(key, "ts_.._x_y"); /* no separator survives: one entry, never a path */
    assert_int_equal(isolation_replica_key("", key, sizeof key), -1);
    char small[8];
    assert_int_equal(isolation_replica_key("GPU-1234", small, sizeof small), -1);
    assert_int_equal(isolation_replica_key("GPU-", small, sizeof small), 0);
}

static void test_share(void **state)
{
    (void)state;
    assert_true(isolation_share(7ull << 30, 2) == (7ull << 30) / 2);
    assert_true(isolation_share(5, 2) == 2); /* floor */
    assert_true(isolation_share(5, 0) == 0);
    assert_true(isolation_share(3ull << 30, 1) == 3ull << 30);
}

static void test_replica_limits(void **state)
{
    (void)state;
    struct gpu_inventory inv;
    struct gp_config cfg;
    struct resource_set set;
    char err[256];
    fixture_inventory(&inv, 2, 0);
    inv.gpus[1].memory_bytes = 16ull << 30;
    fixture_config(&cfg);
    fixture_time_slice(&cfg, "nvidia.com/gpu", 4);
    assert_int_equal(resource_set_build(&inv, &cfg, &set, err, sizeof err), 0);
    const struct resource *res = &set.resources[0];
    assert_true(res->shared);
    /* find replicas by ID */
    size_t pos[3];
    const char *want[3] = {"GPU-00000001-0000-0000-0000-000000000000::2",
                           "GPU-00000000-0000-0000-0000-000000000000::0",
                           "GPU-00000001-0000-0000-0000-000000000000::3"};
    for (size_t i = 0; i < 3; i++) {
        pos[i] = res->device_count;
        for (size_t j = 0; j < res->device_count; j++)
            if (strcmp(res->devices[j].id, want[i]) == 0)
                pos[i] = j;
        assert_true(pos[i] < res->device_count);
    }
    unsigned long long limits[4];
    size_t n = isolation_replica_limits(&inv, res, pos, 3, limits, 4);
    assert_int_equal(n, 2);                          /* two physical GPUs, first occurrence order */
    assert_true(limits[0] == (16ull << 30) / 4 * 2); /* GPU 1: two of its four replicas */
    assert_true(limits[1] == (40ull << 30) / 4);     /* GPU 0: one */
    assert_int_equal(isolation_replica_limits(&inv, res, pos, 3, limits, 1), 1);
    resource_set_free(&set);
    free(cfg.time_slices);
    fixture_inventory_free(&inv);
}

static void test_add_edits_keeps_what_was_there(void **state)
{
    (void)state;
    struct arena a = ARENA_INIT;
    struct container_edits r;
    container_edits_init(&r, &a);
    assert_int_equal(container_edits_set_env(&r, "NVIDIA_VISIBLE_DEVICES", "GPU-x"), 0);
    assert_int_equal(container_edits_add_mount(&r, "/dev/null",
                                               "/var/run/nvidia-container-devices/GPU-x", false),
                     0);
    unsigned long long limits[] = {3ull << 30, 1};
    char err[256];
    assert_int_equal(isolation_add_edits("/var/lib/gpupool/isolation",
                                         "/var/lib/gpupool/isolation/containers/u_0", limits, 2, &r,
                                         err, sizeof err),
                     0);
    assert_int_equal(r.n_mounts, 4);
    assert_string_equal(r.mounts[0].container_path, "/var/run/nvidia-container-devices/GPU-x");
    assert_string_equal(r.mounts[1].host_path, "/var/lib/gpupool/isolation/libgpupool-cuda.so");
    assert_string_equal(r.mounts[1].container_path, "/usr/local/gpupool/libgpupool-cuda.so");
    assert_true(r.mounts[1].read_only);
    assert_string_equal(r.mounts[2].host_path, "/var/lib/gpupool/isolation/ld.so.preload");
    assert_string_equal(r.mounts[2].container_path, "/etc/ld.so.preload");
    assert_true(r.mounts[2].read_only);
    assert_string_equal(r.mounts[3].host_path, "/var/lib/gpupool/isolation/containers/u_0");
    assert_string_equal(r.mounts[3].container_path, "/run/gpupool-cuda");
    assert_false(r.mounts[3].read_only);
    assert_int_equal(r.n_env, 4);
    assert_string_equal(container_edits_env(&r, "NVIDIA_VISIBLE_DEVICES"), "GPU-x");
    assert_string_equal(container_edits_env(&r, "CUDA_DEVICE_MEMORY_LIMIT_0"), "3221225472");
    assert_string_equal(container_edits_env(&r, "CUDA_DEVICE_MEMORY_LIMIT_1"), "1");
    assert_string_equal(container_edits_env(&r, "CUDA_DEVICE_MEMORY_SHARED_CACHE"),
                        "/run/gpupool-cuda/region");
    assert_null(container_edits_env(&r, "CUDA_DEVICE_MEMORY_LIMIT_2"));
    unsigned long long many[POOL_MAX_CONTAINER_GPUS + 1] = {0};
    assert_int_equal(
        isolation_add_edits("/d", "/d/c", many, POOL_MAX_CONTAINER_GPUS + 1, &r, err, sizeof err),
        -1);
    assert_non_null(strstr(err, "at most"));
    assert_int_equal(r.n_mounts, 4); /* untouched by the refusal */
    arena_free(&a);
}

/* ---- the file system -------------------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static char *read_text(const char *path)
{
    static char buf[4096];
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void install_config(struct gp_config *cfg, char *dir, char *lib)
{
    fixture_config(cfg);
    cfg->resource_mode = RESOURCE_MODE_GPU_MEM;
    cfg->isolation = ISOLATION_MEMORY;
    cfg->isolation_dir = dir;
    cfg->isolation_library = lib;
}

static void test_install_is_atomic_and_idempotent(void **state)
{
    (void)state;
    char root[] = "/tmp/gp-iso-XXXXXX";
    assert_non_null(mkdtemp(root));
    char lib[256], dir[256], path[512], err[1024];
    snprintf(lib, sizeof lib, "%s/lib.so", root);
    snprintf(dir, sizeof dir, "%s/a/b/isolation", root);
    struct gp_config cfg;
    install_config(&cfg, dir, lib);
    assert_true(isolation_active(&cfg));

    assert_int_equal(isolation_install(&cfg, err, sizeof err), -1); /* no library yet */
    assert_non_null(strstr(err, "--isolation-library"));
    assert_non_null(strstr(err, lib));

    write_text(lib, "v1");
    assert_int_equal(isolation_install(&cfg, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/libgpupool-cuda.so", dir);
    assert_string_equal(read_text(path), "v1");
    struct stat st1, st2;
    assert_int_equal(stat(path, &st1), 0);
    assert_int_equal(st1.st_mode & 07777, 0755);
    snprintf(path, sizeof path, "%s/ld.so.preload", dir);
    assert_string_equal(read_text(path), "/usr/local/gpupool/libgpupool-cuda.so\n");
    snprintf(path, sizeof path, "%s/containers", dir);
    assert_int_equal(stat(path, &st2), 0);
    assert_true(S_ISDIR(st2.st_mode));

    /* identical: the same inode stays */
    assert_int_equal(isolation_install(&cfg, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/libgpupool-cuda.so", dir);
    assert_int_equal(stat(path, &st2), 0);
    assert_true(st1.st_ino == st2.st_ino);
    /* changed: a new file, renamed into place */
    write_text(lib, "v2!");
    assert_int_equal(isolation_install(&cfg, err, sizeof err), 0);
    assert_int_equal(stat(path, &st2), 0);
    assert_true(st1.st_ino != st2.st_ino);
    assert_string_equal(read_text(path), "v2!");

    /* a file where the directory must be */
    char blocked[256];
    snprintf(blocked, sizeof blocked, "%s/file", root);
    write_text(blocked, "x");
    cfg.isolation_dir = blocked;
    assert_int_equal(isolation_install(&cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "--isolation-dir"));

    cfg.isolation = ISOLATION_NONE;
    assert_false(isolation_active(&cfg));
    cfg.isolation = ISOLATION_MEMORY;
    cfg.resource_mode = RESOURCE_MODE_GPU;
    assert_false(isolation_active(&cfg)); /* whole GPUs: nothing to limit */
    fixture_time_slice(&cfg, "nvidia.com/gpu", 2);
    assert_false(isolation_active(&cfg));
    cfg.time_slice_memory_limit = true;
    assert_true(isolation_active(&cfg));
    free(cfg.time_slices);

    int rootfd = open("/tmp", O_RDONLY | O_DIRECTORY);
    assert_true(rootfd >= 0);
    assert_int_equal(isolation_remove_tree(rootfd, root + strlen("/tmp/")), 0);
    close(rootfd);
}

static bool keep_none(void *ctx, const char *uid)
{
    (void)uid;
    (void)ctx;
    return false;
}

static void test_container_dir_and_prune_without_following_symlinks(void **state)
{
    (void)state;
    char root[] = "/tmp/gp-iso-XXXXXX";
    assert_non_null(mkdtemp(root));
    char containers[256], outside[256], precious[512], path[1024], link[1200], err[1024];
    snprintf(containers, sizeof containers, "%s/containers", root);
    snprintf(outside, sizeof outside, "%s/outside", root);
    assert_int_equal(mkdir(containers, 0755), 0);
    assert_int_equal(mkdir(outside, 0755), 0);
    snprintf(precious, sizeof precious, "%s/precious", outside);
    write_text(precious, "keep");

    mode_t old = umask(077);
    assert_int_equal(isolation_container_dir(root, "abc_0", path, sizeof path, err, sizeof err), 0);
    umask(old);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0777);
    /* reused when it exists */
    assert_int_equal(isolation_container_dir(root, "abc_0", path, sizeof path, err, sizeof err), 0);

    /* a container plants links to the outside, at several depths */
    snprintf(link, sizeof link, "%s/escape", path);
    assert_int_equal(symlink(outside, link), 0);
    snprintf(link, sizeof link, "%s/sub", path);
    assert_int_equal(mkdir(link, 0755), 0);
    snprintf(link, sizeof link, "%s/sub/file", path);
    assert_int_equal(symlink(precious, link), 0);
    /* a symlink in place of a region directory is refused, not used */
    snprintf(link, sizeof link, "%s/evil_1", containers);
    assert_int_equal(symlink(outside, link), 0);
    assert_int_equal(isolation_container_dir(root, "evil_1", path, sizeof path, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "not a directory"));
    /* names that are no pod key are left alone */
    snprintf(link, sizeof link, "%s/ts_GPU-1__0", containers);
    assert_int_equal(mkdir(link, 0777), 0);

    assert_int_equal(isolation_prune_pods(root, keep_none, NULL), 2); /* abc_0 and evil_1 */
    assert_string_equal(read_text(precious), "keep");
    snprintf(link, sizeof link, "%s/abc_0", containers);
    assert_int_equal(lstat(link, &st), -1);
    snprintf(link, sizeof link, "%s/evil_1", containers);
    assert_int_equal(lstat(link, &st), -1);
    assert_int_equal(lstat(outside, &st), 0);
    snprintf(link, sizeof link, "%s/ts_GPU-1__0", containers);
    assert_int_equal(lstat(link, &st), 0);

    int rootfd = open("/tmp", O_RDONLY | O_DIRECTORY);
    assert_true(rootfd >= 0);
    assert_int_equal(isolation_remove_tree(rootfd, root + strlen("/tmp/")), 0);
    close(rootfd);
}

/* A DRA claim's region directory: created under claims/ with 0777, reused,
 * refused for a UID that is no single name or a symlink in its place, and
 * removed without following a link the containers planted. */
static void test_claim_dir(void **state)
{
    (void)state;
    char root[] = "/tmp/gp-iso-claim-XXXXXX";
    assert_non_null(mkdtemp(root));
    char outside[256], precious[512], path[1024], link[1200], err[1024];
    snprintf(outside, sizeof outside, "%s/outside", root);
    assert_int_equal(mkdir(outside, 0755), 0);
    snprintf(precious, sizeof precious, "%s/precious", outside);
    write_text(precious, "keep");

    mode_t old = umask(077);
    assert_int_equal(isolation_claim_dir(root, "0f0e-AB12", path, sizeof path, err, sizeof err), 0);
    umask(old);
    char want[512];
    snprintf(want, sizeof want, "%s/claims/0f0e-AB12", root);
    assert_string_equal(path, want);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 07777, 0777);
    assert_int_equal(isolation_claim_dir(root, "0f0e-AB12", path, sizeof path, err, sizeof err), 0);

    const char *bad[] = {"", "../x", "a/b", "a_b", "."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(isolation_claim_dir(root, bad[i], path, sizeof path, err, sizeof err), -1);
        assert_int_equal(isolation_remove_claim_dir(root, bad[i], err, sizeof err), -1);
    }
    snprintf(link, sizeof link, "%s/claims/evil", root);
    assert_int_equal(symlink(outside, link), 0);
    assert_int_equal(isolation_claim_dir(root, "evil", path, sizeof path, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a directory"));

    /* The containers plant a link to the outside; removal unlinks it. */
    snprintf(link, sizeof link, "%s/claims/0f0e-AB12/escape", root);
    assert_int_equal(symlink(outside, link), 0);
    assert_int_equal(isolation_remove_claim_dir(root, "0f0e-AB12", err, sizeof err), 0);
    assert_int_equal(lstat(want, &st), -1);
    assert_int_equal(isolation_remove_claim_dir(root, "evil", err, sizeof err), 0);
    assert_string_equal(read_text(precious), "keep");
    assert_int_equal(isolation_remove_claim_dir(root, "0f0e-AB12", err, sizeof err), 0); /* gone */

    snprintf(link, sizeof link, "rm -rf %s", root);
    assert_int_equal(system(link), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pod_key),
        cmocka_unit_test(test_replica_key),
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_replica_limits),
        cmocka_unit_test(test_add_edits_keeps_what_was_there),
        cmocka_unit_test(test_install_is_atomic_and_idempotent),
        cmocka_unit_test(test_container_dir_and_prune_without_following_symlinks),
        cmocka_unit_test(test_claim_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests: configuration from flags, environment and file (config.c). */
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

#include <jansson.h>

#include "config.h"

#define MAX_ARGS 32

static char err[1024];

/* argv[0] is added; both lists NULL-terminated (NULL itself = empty). */
static enum config_result load(struct gp_config *cfg, const char *const *args,
                               const char *const *env)
{
    char *argv[MAX_ARGS] = {"gpupool-device-plugin"};
    char *envp[MAX_ARGS] = {NULL};
    int argc = 1;
    for (size_t i = 0; args != NULL && args[i] != NULL; i++)
        argv[argc++] = (char *)args[i];
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        envp[i] = (char *)env[i];
    err[0] = '\0';
    return config_load(cfg, argc, argv, envp, err, sizeof err);
}

static const char *source_dir(void)
{
    const char *d = getenv("GP_SOURCE_DIR");
    return d != NULL ? d : ".";
}

/* Path of a checked-in config under test/configs/. */
static const char *config_path(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/test/configs/%s", source_dir(), name);
    return path;
}

/* Writes `text` to a fresh temporary file whose name is returned (static). */
static const char *temp_config(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/gp-test-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

/* Loads `text` as --config-file and expects CONFIG_ERROR with exactly
 * "<file>:<want>". */
static void expect_file_error(const char *text, const char *want)
{
    struct gp_config cfg;
    const char *path = temp_config(text);
    const char *args[] = {"--config-file", path, NULL};
    char expected[1024];
    enum config_result r = load(&cfg, args, NULL);
    snprintf(expected, sizeof expected, "%s:%s", path, want);
    unlink(path);
    if (r != CONFIG_ERROR || strcmp(err, expected) != 0)
        print_error("want: %s\ngot:  %s\n", expected, err);
    assert_int_equal(r, CONFIG_ERROR);
    assert_string_equal(err, expected);
    config_free(&cfg); /* harmless after an error */
}

static void expect_cli_error(const char *const *args, const char *const *env, const char *want)
{
    struct gp_config cfg;
    assert_int_equal(load(&cfg, args, env), CONFIG_ERROR);
    assert_string_equal(err, want);
}

static void load_ok(struct gp_config *cfg, const char *const *args, const char *const *env)
{
    enum config_result r = load(cfg, args, env);
    if (r != CONFIG_OK)
        print_error("config_load: %s\n", err);
    assert_int_equal(r, CONFIG_OK);
}

static void load_file_ok(struct gp_config *cfg, const char *name)
{
    const char *args[] = {"--config-file", config_path(name), NULL};
    load_ok(cfg, args, NULL);
}

/* ------------------------------------------------------------------ */

static void test_defaults(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_ok(&cfg, NULL, NULL);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_NONE);
    assert_true(cfg.fail_on_init_error);
    assert_string_equal(cfg.nvidia_driver_root, "/");
    assert_string_equal(cfg.nvidia_dev_root, "/");
    assert_string_equal(cfg.mps_root, "");
    assert_false(cfg.gds_enabled || cfg.mofed_enabled || cfg.gdrcopy_enabled);
    assert_false(cfg.pass_device_specs);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_ENVVAR);
    assert_int_equal(cfg.device_id_strategy, DEVICE_ID_UUID);
    assert_string_equal(cfg.cdi_annotation_prefix, "cdi.k8s.io/");
    assert_string_equal(cfg.nvidia_ctk_path, "/usr/bin/nvidia-ctk");
    assert_string_equal(cfg.container_driver_root, "/driver-root");
    assert_int_equal(cfg.shared_alloc_policy, SHARED_ALLOC_DISTRIBUTED);
    assert_string_equal(cfg.kubelet_socket, "/var/lib/kubelet/device-plugins/kubelet.sock");
    assert_string_equal(cfg.config_file, "");
    assert_int_equal(cfg.verbosity, 0);
    assert_int_equal(cfg.health_recovery_probes, 3);
    assert_int_equal(cfg.health_probe_interval_ms, 5000);
    assert_null(cfg.disable_healthchecks);
    assert_null(cfg.enable_healthchecks);
    assert_int_equal(cfg.device_discovery_strategy, DEVICE_DISCOVERY_AUTO);
    assert_int_equal(cfg.imex_channel_count, 0);
    assert_false(cfg.imex_required);
    assert_int_equal(cfg.gpu_resource_count + cfg.mig_resource_count + cfg.time_slice_count, 0);
    assert_false(cfg.rename_by_default || cfg.fail_requests_greater_than_one);
    config_free(&cfg);
}

static void test_every_flag(void **state)
{
    (void)state;
    struct gp_config cfg;
    const char *args[] = {"--mig-strategy=mixed",
                          "--fail-on-init-error=false",
                          "--driver-root",
                          "/run/nvidia/driver",
                          "--dev-root=/dev-root",
                          "--pass-device-specs",
                          "--device-list-strategy",
                          "volume-mounts",
                          "--device-id-strategy=index",
                          "-gds-enabled",
                          "--mofed-enabled=TRUE",
                          "--gdrcopy-enabled=1",
                          "--cdi-annotation-prefix=x.io/",
                          "--nvidia-cdi-hook-path=/hook",
                          "--driver-root-ctr-path=/ctr",
                          "--mps-root=",
                          "--shared-devices-allocation-policy=packed",
                          "--device-discovery-strategy=nvml",
                          "--imex-channel-ids=0",
                          "--imex-required",
                          "--kubelet-socket=",
                          "--cdi-feature-flags=include-persistenced-socket",
                          "--cdi-feature-flags=disable-imex-channel-creation",
                          "--cdi-disable-hooks=all",
                          "--cdi-spec-dir=/cdi",
                          "--health-recovery-probes=0",
                          "--health-probe-interval=1m30s",
                          "-v",
                          "4",
                          NULL};
    load_ok(&cfg, args, NULL);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_MIXED);
    assert_false(cfg.fail_on_init_error);
    assert_string_equal(cfg.nvidia_driver_root, "/run/nvidia/driver");
    assert_string_equal(cfg.nvidia_dev_root, "/dev-root");
    assert_true(cfg.pass_device_specs);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_VOLUME_MOUNTS);
    assert_int_equal(cfg.device_id_strategy, DEVICE_ID_INDEX);
    assert_true(cfg.gds_enabled && cfg.mofed_enabled && cfg.gdrcopy_enabled);
    assert_string_equal(cfg.cdi_annotation_prefix, "x.io/");
    assert_string_equal(cfg.nvidia_ctk_path, "/hook");
    assert_string_equal(cfg.container_driver_root, "/ctr");
    assert_string_equal(cfg.mps_root, "");
    assert_int_equal(cfg.shared_alloc_policy, SHARED_ALLOC_PACKED);
    assert_int_equal(cfg.device_discovery_strategy, DEVICE_DISCOVERY_NVML);
    assert_int_equal(cfg.imex_channel_count, 1);
    assert_true(cfg.imex_required);
    assert_string_equal(cfg.kubelet_socket, "");
    assert_int_equal(cfg.cdi_feature_flags, CDI_FEATURE_INCLUDE_PERSISTENCED_SOCKET |
                                                CDI_FEATURE_DISABLE_IMEX_CHANNEL_CREATION);
    assert_int_equal(cfg.cdi_disabled_hooks, CDI_HOOK_ALL);
    assert_string_equal(cfg.cdi_spec_dir, "/cdi");
    assert_int_equal(cfg.health_recovery_probes, 0);
    assert_int_equal(cfg.health_probe_interval_ms, 90000);
    assert_int_equal(cfg.verbosity, 4);
    config_free(&cfg);
}

static void test_aliases(void **state)
{
    (void)state;
    struct gp_config cfg;
    const char *args[] = {"--nvidia-driver-root=/a",
                          "--nvidia-dev-root",
                          "/b",
                          "--nvidia-ctk-path=/c",
                          "--container-driver-root=/d",
                          "--v=2",
                          NULL};
    load_ok(&cfg, args, NULL);
    assert_string_equal(cfg.nvidia_driver_root, "/a");
    assert_string_equal(cfg.nvidia_dev_root, "/b");
    assert_string_equal(cfg.nvidia_ctk_path, "/c");
    assert_string_equal(cfg.container_driver_root, "/d");
    assert_int_equal(cfg.verbosity, 2);
    config_free(&cfg);
}

static void test_every_env(void **state)
{
    (void)state;
    struct gp_config cfg;
    const char *env[] = {"MIG_STRATEGY=single",
                         "FAIL_ON_INIT_ERROR=False",
                         "NVIDIA_DRIVER_ROOT=/drv",
                         "PASS_DEVICE_SPECS=1",
                         "DEVICE_LIST_STRATEGY=envvar,cdi-annotations",
                         "DEVICE_ID_STRATEGY=index",
                         "GDS_ENABLED=true",
                         "MOFED_ENABLED=TRUE",
                         "GDRCOPY_ENABLED=1",
                         "CDI_ANNOTATION_PREFIX=p/",
                         "NVIDIA_CTK_PATH=/ctk",
                         "CONTAINER_DRIVER_ROOT=/cdr",
                         "SHARED_DEVICES_ALLOCATION_POLICY=packed",
                         "DEVICE_DISCOVERY_STRATEGY=nvml",
                         "IMEX_CHANNEL_IDS=0",
                         "IMEX_REQUIRED=true",
                         "KUBELET_SOCKET=/tmp/k.sock",
                         "CDI_FEATURE_FLAGS=include-persistenced-socket",
                         "CDI_DISABLE_HOOKS=update-ldcache,chmod",
                         "GP_CDI_SPEC_DIR=/spec",
                         "GP_HEALTH_RECOVERY_PROBES=7",
                         "GP_HEALTH_PROBE_INTERVAL=250ms",
                         "DP_DISABLE_HEALTHCHECKS=xids,48",
                         "DP_ENABLE_HEALTHCHECKS=",
                         "UNRELATED=1",
                         NULL};
    load_ok(&cfg, NULL, env);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_SINGLE);
    assert_false(cfg.fail_on_init_error);
    assert_string_equal(cfg.nvidia_driver_root, "/drv");
    assert_string_equal(cfg.nvidia_dev_root, "/drv"); /* defaults to the driver root */
    assert_true(cfg.pass_device_specs);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_ENVVAR | DEVICE_LIST_CDI_ANNOTATIONS);
    assert_int_equal(cfg.device_id_strategy, DEVICE_ID_INDEX);
    assert_true(cfg.gds_enabled && cfg.mofed_enabled && cfg.gdrcopy_enabled);
    assert_string_equal(cfg.cdi_annotation_prefix, "p/");
    assert_string_equal(cfg.nvidia_ctk_path, "/ctk");
    assert_string_equal(cfg.container_driver_root, "/cdr");
    assert_string_equal(cfg.mps_root, "");
    assert_int_equal(cfg.shared_alloc_policy, SHARED_ALLOC_PACKED);
    assert_int_equal(cfg.device_discovery_strategy, DEVICE_DISCOVERY_NVML);
    assert_int_equal(cfg.imex_channel_count, 1);
    assert_true(cfg.imex_required);
    assert_string_equal(cfg.kubelet_socket, "/tmp/k.sock");
    assert_int_equal(cfg.cdi_feature_flags, CDI_FEATURE_INCLUDE_PERSISTENCED_SOCKET);
    assert_int_equal(cfg.cdi_disabled_hooks, CDI_HOOK_UPDATE_LDCACHE | CDI_HOOK_CHMOD);
    assert_string_equal(cfg.cdi_spec_dir, "/spec");
    assert_int_equal(cfg.health_recovery_probes, 7);
    assert_int_equal(cfg.health_probe_interval_ms, 250);
    assert_string_equal(cfg.disable_healthchecks, "xids,48"); /* verbatim */
    assert_string_equal(cfg.enable_healthchecks, "");
    config_free(&cfg);
}

/* The first variable named in the table wins over the legacy one. */
static void test_env_aliases(void **state)
{
    (void)state;
    struct gp_config cfg;
    const char *env[] = {"NVIDIA_CTK_PATH=/old", "NVIDIA_CDI_HOOK_PATH=/new",
                         "DRIVER_ROOT_CTR_PATH=/r", "NVIDIA_DEV_ROOT=/dv", NULL};
    load_ok(&cfg, NULL, env);
    assert_string_equal(cfg.nvidia_ctk_path, "/new");
    assert_string_equal(cfg.container_driver_root, "/r");
    assert_string_equal(cfg.nvidia_dev_root, "/dv");
    config_free(&cfg);
}

/* Empty typed variables count as unset, as in urfave/cli. */
static void test_env_empty(void **state)
{
    (void)state;
    struct gp_config cfg;
    const char *env[] = {"FAIL_ON_INIT_ERROR=", "MIG_STRATEGY=", "KUBELET_SOCKET=", NULL};
    load_ok(&cfg, NULL, env);
    assert_true(cfg.fail_on_init_error);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_NONE);
    assert_string_equal(cfg.kubelet_socket, "");
    config_free(&cfg);
}

static void test_list_strategies(void **state)
{
    (void)state;
    struct gp_config cfg;
    const char *repeated[] = {"--device-list-strategy=envvar", "--device-list-strategy", "cdi-cri",
                              NULL};
    load_ok(&cfg, repeated, NULL);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_ENVVAR | DEVICE_LIST_CDI_CRI);
    config_free(&cfg);

    const char *mixed[] = {"--device-list-strategy=volume-mounts,cdi-annotations",
                           "--device-list-strategy=cdi-cri", NULL};
    load_ok(&cfg, mixed, NULL);
    assert_int_equal(cfg.device_list_strategy,
                     DEVICE_LIST_VOLUME_MOUNTS | DEVICE_LIST_CDI_ANNOTATIONS | DEVICE_LIST_CDI_CRI);
    config_free(&cfg);

    /* The flag replaces the environment's list rather than adding to it. */
    const char *flag[] = {"--device-list-strategy=cdi-cri", NULL};
    const char *env[] = {"DEVICE_LIST_STRATEGY=envvar,volume-mounts", NULL};
    load_ok(&cfg, flag, env);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_CDI_CRI);
    config_free(&cfg);

    const char *file_list = "flags:\n  plugin:\n    deviceListStrategy: [envvar, cdi-cri]\n";
    const char *path = temp_config(file_list);
    const char *args[] = {"--config-file", path, NULL};
    load_ok(&cfg, args, NULL);
    unlink(path);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_ENVVAR | DEVICE_LIST_CDI_CRI);
    config_free(&cfg);
}

/* flag > env > file > default, field by field. */
static void test_precedence(void **state)
{
    (void)state;
    struct gp_config cfg;
    const char *path = temp_config("version: v1\n"
                                   "flags:\n"
                                   "  migStrategy: single\n"
                                   "  failOnInitError: false\n"
                                   "  nvidiaDriverRoot: /file\n"
                                   "  plugin:\n"
                                   "    deviceIDStrategy: index\n"
                                   "    passDeviceSpecs: true\n");
    const char *env[] = {"MIG_STRATEGY=mixed", "NVIDIA_DRIVER_ROOT=/env", NULL};
    /* file only */
    const char *a0[] = {"--config-file", path, NULL};
    load_ok(&cfg, a0, NULL);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_SINGLE);
    assert_false(cfg.fail_on_init_error);
    assert_string_equal(cfg.nvidia_driver_root, "/file");
    assert_int_equal(cfg.device_id_strategy, DEVICE_ID_INDEX);
    assert_true(cfg.pass_device_specs);
    assert_string_equal(cfg.config_file, path);
    config_free(&cfg);
    /* env over file, only for the fields env names */
    load_ok(&cfg, a0, env);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_MIXED);
    assert_string_equal(cfg.nvidia_driver_root, "/env");
    assert_false(cfg.fail_on_init_error);
    assert_int_equal(cfg.device_id_strategy, DEVICE_ID_INDEX);
    config_free(&cfg);
    /* flag over env over file */
    const char *a1[] = {"--config-file", path, "--mig-strategy=none", "--fail-on-init-error", NULL};
    load_ok(&cfg, a1, env);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_NONE);
    assert_true(cfg.fail_on_init_error);
    assert_string_equal(cfg.nvidia_driver_root, "/env");
    assert_int_equal(cfg.device_id_strategy, DEVICE_ID_INDEX);
    assert_true(cfg.pass_device_specs);
    config_free(&cfg);
    /* CONFIG_FILE from the environment */
    char cf[128];
    snprintf(cf, sizeof cf, "CONFIG_FILE=%s", path);
    const char *env2[] = {cf, NULL};
    load_ok(&cfg, NULL, env2);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_SINGLE);
    assert_string_equal(cfg.config_file, path);
    config_free(&cfg);
    /* last flag wins */
    const char *a2[] = {"--mig-strategy=mixed", "--mig-strategy=single", NULL};
    load_ok(&cfg, a2, NULL);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_SINGLE);
    config_free(&cfg);
    unlink(path);
}

static void test_durations(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int ms;
    } good[] = {{"5s", 5000},    {"500ms", 500}, {"1m30s", 90000}, {"1.5s", 1500},
                {"1h", 3600000}, {"2000us", 2},  {"0.5m", 30000},  {"1000000ns", 1}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct gp_config cfg;
        char arg[64];
        snprintf(arg, sizeof arg, "--health-probe-interval=%s", good[i].text);
        const char *args[] = {arg, NULL};
        load_ok(&cfg, args, NULL);
        assert_int_equal(cfg.health_probe_interval_ms, good[i].ms);
        config_free(&cfg);
    }
    static const char *const bad[] = {"5",    "s",     "5x", "-1s",         "",
                                      "1.s.", "500us", "0",  "99999999999h"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char arg[64], want[256];
        snprintf(arg, sizeof arg, "--health-probe-interval=%s", bad[i]);
        snprintf(want, sizeof want,
                 "invalid value \"%s\" for --health-probe-interval (GP_HEALTH_PROBE_INTERVAL): "
                 "want a duration such as 5s or 500ms (at least 1ms)",
                 bad[i]);
        const char *args[] = {arg, NULL};
        expect_cli_error(args, NULL, want);
    }
}

static void test_bad_cli_values(void **state)
{
    (void)state;
    const char *a1[] = {"--mig-strategy", "x", NULL};
    expect_cli_error(a1, NULL,
                     "invalid value \"x\" for --mig-strategy (MIG_STRATEGY): want none, single "
                     "or mixed");
    const char *e1[] = {"MIG_STRATEGY=Mixed", NULL};
    expect_cli_error(NULL, e1,
                     "invalid value \"Mixed\" for --mig-strategy (MIG_STRATEGY): want none, "
                     "single or mixed");
    const char *a2[] = {"--fail-on-init-error=maybe", NULL};
    expect_cli_error(a2, NULL,
                     "invalid value \"maybe\" for --fail-on-init-error (FAIL_ON_INIT_ERROR): "
                     "want true or false");
    const char *e2[] = {"PASS_DEVICE_SPECS=yes", NULL};
    expect_cli_error(NULL, e2,
                     "invalid value \"yes\" for --pass-device-specs (PASS_DEVICE_SPECS): want "
                     "true or false");
    const char *a3[] = {"--device-list-strategy=envvar,bogus", NULL};
    expect_cli_error(a3, NULL,
                     "invalid value \"bogus\" for --device-list-strategy (DEVICE_LIST_STRATEGY): "
                     "want envvar, volume-mounts, cdi-annotations or cdi-cri");
    const char *a4[] = {"--device-discovery-strategy=tegra", NULL};
    expect_cli_error(a4, NULL,
                     "invalid value \"tegra\" for --device-discovery-strategy "
                     "(DEVICE_DISCOVERY_STRATEGY): tegra (Jetson) devices are not supported by "
                     "gpupool (want auto or nvml)");
    const char *a5[] = {"--health-recovery-probes=-1", NULL};
    expect_cli_error(a5, NULL,
                     "invalid value \"-1\" for --health-recovery-probes "
                     "(GP_HEALTH_RECOVERY_PROBES): want an integer >= 0");
    const char *a6[] = {"--health-recovery-probes=3x", NULL};
    expect_cli_error(a6, NULL,
                     "invalid value \"3x\" for --health-recovery-probes "
                     "(GP_HEALTH_RECOVERY_PROBES): want an integer >= 0");
    const char *a7[] = {"--imex-channel-ids=1", NULL};
    expect_cli_error(a7, NULL,
                     "invalid value \"1\" for --imex-channel-ids (IMEX_CHANNEL_IDS): the only "
                     "valid channel lists are [] and [0]");
    const char *a8[] = {"-v=loud", NULL};
    expect_cli_error(a8, NULL, "invalid value \"loud\" for -v: want an integer >= 0");
    const char *a9[] = {"--device-id-strategy=", NULL};
    expect_cli_error(a9, NULL,
                     "invalid value \"\" for --device-id-strategy (DEVICE_ID_STRATEGY): want "
                     "uuid or index");
    const char *a10[] = {"--health-recovery-probes=99999999999", NULL};
    expect_cli_error(a10, NULL,
                     "invalid value \"99999999999\" for --health-recovery-probes "
                     "(GP_HEALTH_RECOVERY_PROBES): want an integer >= 0");
}

/* Options gpupool cannot honour are refused, never silently ignored. */
static void test_refused_options(void **state)
{
    (void)state;
    struct gp_config cfg;
    /* --mps-root is NVIDIA's: any absolute root is taken (used by sharing.mps). */
    const char *e2[] = {"MPS_ROOT=/var/mps", NULL};
    load_ok(&cfg, NULL, e2);
    assert_string_equal(cfg.mps_root, "/var/mps");
    assert_false(cfg.sharing_mps);
    config_free(&cfg);

    const char *a2[] = {"--cdi-feature-flags=include-persistenced-socket,bogus", NULL};
    expect_cli_error(a2, NULL,
                     "invalid value \"bogus\" for --cdi-feature-flags (CDI_FEATURE_FLAGS): want "
                     "include-persistenced-socket or disable-imex-channel-creation");
    const char *a3[] = {"--cdi-feature-flags=enable-explicit-driver-libraries", NULL};
    expect_cli_error(a3, NULL,
                     "invalid value \"enable-explicit-driver-libraries\" for --cdi-feature-flags "
                     "(CDI_FEATURE_FLAGS): gpupool's CDI spec writer does not implement this "
                     "nvidia-ctk feature (want include-persistenced-socket or "
                     "disable-imex-channel-creation)");
    const char *e3[] = {"CDI_DISABLE_HOOKS=update-ldcache,nope", NULL};
    expect_cli_error(NULL, e3,
                     "invalid value \"nope\" for --cdi-disable-hooks (CDI_DISABLE_HOOKS): want "
                     "all, create-symlinks, update-ldcache, enable-cuda-compat, "
                     "disable-device-node-modification or chmod");
}

/* --imex-required: NVIDIA's start-up check of the channel's device node. */
static void test_imex_host_check(void **state)
{
    (void)state;
    char root[] = "/tmp/gp-test-devroot-XXXXXX";
    assert_non_null(mkdtemp(root));
    char arg[64];
    snprintf(arg, sizeof arg, "--dev-root=%s", root);
    struct gp_config cfg;

    /* Required and missing: start-up fails, naming the node. */
    const char *a1[] = {arg, "--imex-channel-ids=0", "--imex-required", NULL};
    load_ok(&cfg, a1, NULL);
    assert_int_equal(config_check_host(&cfg, err, sizeof err), -1);
    char want[256];
    snprintf(want, sizeof want, "%s/dev/nvidia-caps-imex-channels/channel0 does not exist", root);
    if (strstr(err, want) == NULL || strstr(err, "--imex-required") == NULL)
        fail_msg("unexpected message: %s", err);
    config_free(&cfg);

    /* Not required and missing: the channel is dropped with a warning. */
    const char *a2[] = {arg, "--imex-channel-ids=0", NULL};
    load_ok(&cfg, a2, NULL);
    assert_int_equal(config_check_host(&cfg, err, sizeof err), 0);
    assert_int_equal(cfg.imex_channel_count, 0);
    config_free(&cfg);

    /* Present: kept. */
    char dir[128], node[160];
    snprintf(dir, sizeof dir, "%s/dev", root);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(dir, sizeof dir, "%s/dev/nvidia-caps-imex-channels", root);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(node, sizeof node, "%s/channel0", dir);
    FILE *f = fopen(node, "w");
    assert_non_null(f);
    fclose(f);
    load_ok(&cfg, a1, NULL);
    assert_int_equal(config_check_host(&cfg, err, sizeof err), 0);
    assert_int_equal(cfg.imex_channel_count, 1);
    config_free(&cfg);
    unlink(node);
    rmdir(dir);
    snprintf(dir, sizeof dir, "%s/dev", root);
    rmdir(dir);
    rmdir(root);
}

static void test_bad_cli_syntax(void **state)
{
    (void)state;
    const char *a1[] = {"--bogus", "--mig-strategy=none", "-x=1", NULL};
    expect_cli_error(a1, NULL, "unknown flags: --bogus, -x (see --help)");
    const char *a2[] = {"--nope=3", NULL};
    expect_cli_error(a2, NULL, "unknown flag: --nope (see --help)");
    const char *a3[] = {"--mig-strategy", NULL};
    expect_cli_error(a3, NULL, "flag needs an argument: --mig-strategy");
    const char *a4[] = {"--pass-device-specs", "false", NULL};
    expect_cli_error(a4, NULL,
                     "unexpected argument \"false\": gpupool-device-plugin takes no arguments");
    const char *a5[] = {"--help=yes", NULL};
    expect_cli_error(a5, NULL, "flag takes no value: --help");
}

static void test_help_and_version(void **state)
{
    (void)state;
    struct gp_config cfg;
    const char *a1[] = {"--mig-strategy=mixed", "-h", NULL};
    FILE *saved = stdout;
    stdout = fopen("/dev/null", "w");
    assert_int_equal(load(&cfg, a1, NULL), CONFIG_EXIT);
    config_free(&cfg);
    const char *a2[] = {"--version", NULL};
    assert_int_equal(load(&cfg, a2, NULL), CONFIG_EXIT);
    config_free(&cfg);
    fclose(stdout);
    stdout = saved;

    /* The usage text comes from the table: every flag, alias and variable. */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    config_print_usage(mem);
    fclose(mem);
    static const char *const must[] = {"--mig-strategy value",
                                       "$MIG_STRATEGY",
                                       "--nvidia-driver-root value",
                                       "--nvidia-ctk-path value",
                                       "$NVIDIA_CDI_HOOK_PATH, $NVIDIA_CTK_PATH",
                                       "--container-driver-root value",
                                       "--kubelet-socket value",
                                       "$GP_HEALTH_PROBE_INTERVAL",
                                       "$DP_DISABLE_HEALTHCHECKS",
                                       "none, single or mixed",
                                       "(default: \"envvar\")",
                                       "[file: flags.plugin.deviceListStrategy]",
                                       "--imex-required",
                                       "-v value",
                                       "--help, -h",
                                       "--version"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        if (strstr(text, must[i]) == NULL)
            fail_msg("usage lacks \"%s\":\n%s", must[i], text);
    assert_null(strstr(text, "gfd"));
    free(text);
}

/* ------------------------------------------------------------------ */
/* NVIDIA's documented config files, loaded unchanged.                 */

static void test_nvidia_flags_only(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "nvidia/flags-only.yaml");
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_NONE);
    assert_true(cfg.fail_on_init_error);
    assert_string_equal(cfg.nvidia_driver_root, "/");
    assert_false(cfg.pass_device_specs);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_ENVVAR);
    assert_int_equal(cfg.device_id_strategy, DEVICE_ID_UUID);
    assert_int_equal(cfg.time_slice_count, 0);
    config_free(&cfg);
}

static void test_nvidia_mig_mixed(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "nvidia/mig-mixed.yaml");
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_MIXED);
    assert_true(cfg.fail_on_init_error);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_ENVVAR);
    config_free(&cfg);
}

static void test_nvidia_time_slicing(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "nvidia/time-slicing.yaml");
    assert_int_equal(cfg.time_slice_count, 1);
    assert_string_equal(cfg.time_slices[0].name, "nvidia.com/gpu");
    assert_string_equal(cfg.time_slices[0].rename, "");
    assert_int_equal(cfg.time_slices[0].replicas, 10);
    assert_true(cfg.time_slices[0].all_devices);
    assert_int_equal(cfg.time_slices[0].device_count, 0);
    assert_false(cfg.rename_by_default);
    assert_false(cfg.fail_requests_greater_than_one);
    config_free(&cfg);

    load_file_ok(&cfg, "nvidia/time-slicing-operator.yaml");
    assert_int_equal(cfg.time_slice_count, 1);
    assert_int_equal(cfg.time_slices[0].replicas, 4);
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_NONE);
    config_free(&cfg);
}

static void test_nvidia_rename_by_default(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "nvidia/rename-by-default.yaml");
    assert_true(cfg.rename_by_default);
    assert_int_equal(cfg.time_slice_count, 1);
    assert_string_equal(cfg.time_slices[0].name, "nvidia.com/gpu");
    assert_string_equal(cfg.time_slices[0].rename, "nvidia.com/gpu.shared");
    config_free(&cfg);
}

static void test_nvidia_multiple_resources(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "nvidia/multiple-resources-mig-mixed.yaml");
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_MIXED);
    static const struct {
        const char *name;
        int replicas;
    } want[] = {{"nvidia.com/gpu", 8},
                {"nvidia.com/mig-1g.5gb", 2},
                {"nvidia.com/mig-2g.10gb", 2},
                {"nvidia.com/mig-3g.20gb", 3},
                {"nvidia.com/mig-7g.40gb", 7}};
    assert_int_equal(cfg.time_slice_count, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(cfg.time_slices[i].name, want[i].name);
        assert_int_equal(cfg.time_slices[i].replicas, want[i].replicas);
        assert_true(cfg.time_slices[i].all_devices);
    }
    config_free(&cfg);
}

static void test_nvidia_rename_resources(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "nvidia/rename.yaml");
    assert_int_equal(cfg.gpu_resource_count, 2);
    assert_string_equal(cfg.gpu_resources[0].pattern, "*A100*");
    assert_string_equal(cfg.gpu_resources[0].name, "nvidia.com/a100");
    assert_string_equal(cfg.gpu_resources[1].name, "nvidia.com/gpu");
    assert_true(cfg.fail_requests_greater_than_one);
    assert_int_equal(cfg.time_slice_count, 2);
    struct config_time_slice *ts = &cfg.time_slices[0];
    assert_string_equal(ts->name, "nvidia.com/a100");
    assert_string_equal(ts->rename, "nvidia.com/a100-shared");
    assert_false(ts->all_devices);
    assert_int_equal(ts->device_count, 3);
    assert_string_equal(ts->devices[0], "0");
    assert_string_equal(ts->devices[1], "1");
    assert_string_equal(ts->devices[2], "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763");
    assert_int_equal(ts->replicas, 4);
    assert_true(cfg.time_slices[1].all_devices);
    assert_string_equal(cfg.time_slices[1].rename, ""); /* renameByDefault is false */
    config_free(&cfg);
}

static void test_nvidia_imex_and_mps(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "nvidia/imex.yaml");
    assert_int_equal(cfg.imex_channel_count, 1);
    assert_true(cfg.imex_required);
    config_free(&cfg);

    /* NVIDIA's example has no mpsRoot: refused as NVIDIA's validateFlags does. */
    const char *path = config_path("nvidia/mps.yaml");
    const char *args[] = {"--config-file", path, NULL};
    expect_cli_error(args, NULL,
                     "using MPS requires --mps-root (MPS_ROOT, flags.mpsRoot) to be specified "
                     "as an absolute host path (NVIDIA Helm's is " CONFIG_HELM_MPS_ROOT ")");
    const char *with_root[] = {"--config-file", path, "--mps-root", "/run/nvidia/mps", NULL};
    load_ok(&cfg, with_root, NULL);
    assert_true(cfg.sharing_mps);
    assert_true(cfg.fail_requests_greater_than_one); /* MPS's default */
    assert_int_equal(cfg.time_slice_count, 1);
    assert_int_equal(cfg.time_slices[0].replicas, 10);
    config_free(&cfg);
}

/* ------------------------------------------------------------------ */
/* gpupool's own files.                                                */

static void test_gpupool_full(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "gpupool-full.yaml");
    assert_int_equal(cfg.mig_strategy, MIG_STRATEGY_SINGLE);
    assert_false(cfg.fail_on_init_error);
    assert_string_equal(cfg.mps_root, "/run/nvidia/mps");
    assert_string_equal(cfg.nvidia_driver_root, "/run/nvidia/driver");
    assert_string_equal(cfg.nvidia_dev_root, "/run/nvidia/dev");
    assert_true(cfg.gdrcopy_enabled && cfg.gds_enabled && cfg.mofed_enabled);
    assert_int_equal(cfg.device_discovery_strategy, DEVICE_DISCOVERY_NVML);
    assert_true(cfg.pass_device_specs);
    assert_int_equal(cfg.device_list_strategy, DEVICE_LIST_VOLUME_MOUNTS | DEVICE_LIST_CDI_CRI);
    assert_int_equal(cfg.device_id_strategy, DEVICE_ID_INDEX);
    assert_string_equal(cfg.cdi_annotation_prefix, "example.com/");
    assert_string_equal(cfg.nvidia_ctk_path, "/opt/bin/nvidia-ctk");
    assert_string_equal(cfg.container_driver_root, "/host-driver");
    assert_int_equal(cfg.shared_alloc_policy, SHARED_ALLOC_PACKED);
    assert_int_equal(cfg.health_recovery_probes, 5);
    assert_int_equal(cfg.health_probe_interval_ms, 90000);
    assert_int_equal(cfg.gpu_resource_count, 1);
    assert_string_equal(cfg.gpu_resources[0].name, "nvidia.com/a100");
    assert_int_equal(cfg.mig_resource_count, 1);
    assert_string_equal(cfg.mig_resources[0].pattern, "1g.*");
    assert_string_equal(cfg.mig_resources[0].name, "nvidia.com/mig-small");
    assert_true(cfg.rename_by_default && cfg.fail_requests_greater_than_one);
    assert_int_equal(cfg.time_slice_count, 2);
    assert_string_equal(cfg.time_slices[0].rename, "nvidia.com/a100.shared");
    assert_true(cfg.time_slices[0].all_devices);
    assert_int_equal(cfg.time_slices[0].first_n_devices, 2);
    assert_string_equal(cfg.time_slices[1].rename, "nvidia.com/small-shared"); /* explicit */
    assert_int_equal(cfg.time_slices[1].device_count, 2);
    assert_string_equal(cfg.time_slices[1].devices[1],
                        "MIG-GPU-b1028956-cfa2-0990-bf4a-5da9abb51763/1/0");
    assert_int_equal(cfg.imex_channel_count, 0);
    config_free(&cfg);

    load_file_ok(&cfg, "gpupool-health.yaml");
    assert_int_equal(cfg.health_recovery_probes, 0);
    assert_int_equal(cfg.health_probe_interval_ms, 500);
    config_free(&cfg);
}

static void test_checked_in_invalid(void **state)
{
    (void)state;
    char want[4200];
    const char *p1 = config_path("invalid-replicas.yaml");
    const char *a1[] = {"--config-file", p1, NULL};
    snprintf(want, sizeof want,
             "%s:6: sharing.timeSlicing.resources[0].replicas: want an integer, got a string", p1);
    expect_cli_error(a1, NULL, want);
    const char *p2 = config_path("invalid-unknown-key.yaml");
    const char *a2[] = {"--config-file", p2, NULL};
    snprintf(want, sizeof want, "%s:6: unknown key \"flags.plugin.passDeviceSpec\"", p2);
    expect_cli_error(a2, NULL, want);
    const char *a3[] = {"--config-file=/nonexistent/gp.yaml", NULL};
    expect_cli_error(a3, NULL,
                     "/nonexistent/gp.yaml: cannot open config file: No such file or directory");
    const char *a4[] = {"--config-file=/", NULL};
    expect_cli_error(a4, NULL, "/: cannot read config file: it is a directory");
    const char *p5 = temp_config("flags:\n  migStrategy: \xff\n");
    const char *a5[] = {"--config-file", p5, NULL};
    snprintf(want, sizeof want, "%s: invalid YAML: invalid leading UTF-8 octet at byte 22", p5);
    expect_cli_error(a5, NULL, want);
    unlink(p5);
}

static void test_file_errors(void **state)
{
    (void)state;
    expect_file_error("version: v2\n", "1: unknown version \"v2\": want v1");
    expect_file_error("flags: {}\nversion: [v1]\n", "2: version: want a string, got a list");
    expect_file_error("version: v1\nflags:\n  migStrategy: double\n",
                      "3: invalid value \"double\" for flags.migStrategy: want none, single or "
                      "mixed");
    expect_file_error("flags:\n  failOnInitError: [true]\n",
                      "2: flags.failOnInitError: want a bool, got a list");
    expect_file_error("flags:\n  failOnInitError: \"true\"\n",
                      "2: flags.failOnInitError: want a bool, got a string");
    expect_file_error("flags:\n  failOnInitError: maybe\n",
                      "2: invalid value \"maybe\" for flags.failOnInitError: want true or false");
    expect_file_error("flags:\n  nvidiaDriverRoot: {a: b}\n",
                      "2: flags.nvidiaDriverRoot: want a string, got a mapping");
    expect_file_error("flags:\n  plugin:\n    deviceListStrategy: [envvar, nope]\n",
                      "3: invalid value \"nope\" for flags.plugin.deviceListStrategy: want "
                      "envvar, volume-mounts, cdi-annotations or cdi-cri");
    expect_file_error("flags:\n  plugin:\n    deviceListStrategy: []\n",
                      "3: flags.plugin.deviceListStrategy: want at least one of envvar, "
                      "volume-mounts, cdi-annotations or cdi-cri");
    expect_file_error("flags:\n  plugin: true\n", "2: flags.plugin: want a mapping, got a scalar");
    expect_file_error("flags:\n  migStrategy: none\n  migStrategy: mixed\n",
                      "3: duplicate key \"flags.migStrategy\" (first at line 2)");
    expect_file_error("version: v1\nversion: v1\n",
                      "2: duplicate key \"version\" (first at line 1)");
    expect_file_error("flags:\n  bogus: 1\n", "2: unknown key \"flags.bogus\"");
    expect_file_error("bogus: 1\n", "1: unknown key \"bogus\"");
    expect_file_error("flags:\n  gfd:\n    oneshot: 3\n",
                      "3: invalid value \"3\" for flags.gfd.oneshot: want true or false");
    expect_file_error("flags:\n  health:\n    probeInterval: 5\n",
                      "3: invalid value \"5\" for flags.health.probeInterval: want a duration "
                      "such as 5s or 500ms (at least 1ms)");
    expect_file_error("flags:\n  health:\n    recoveryProbes: -2\n",
                      "3: invalid value \"-2\" for flags.health.recoveryProbes: want an integer "
                      ">= 0");
    expect_file_error("flags:\n  deviceDiscoveryStrategy: tegra\n",
                      "2: invalid value \"tegra\" for flags.deviceDiscoveryStrategy: tegra "
                      "(Jetson) devices are not supported by gpupool (want auto or nvml)");
    expect_file_error("imex:\n  channelIDs: [1]\n",
                      "2: invalid value \"1\" for imex.channelIDs: the only valid channel lists "
                      "are [] and [0]");
    expect_file_error("imex:\n  channelIDs: 0\n",
                      "2: imex.channelIDs: want a list of integers, got a scalar");
    expect_file_error("- a\n- b\n", "1: want a mapping at the top level, got a list");
    expect_file_error("flags: [\n", "2: invalid YAML: did not find expected node content while "
                                    "parsing a flow node");
}

static void test_file_errors_sharing(void **state)
{
    (void)state;
    expect_file_error("sharing:\n  timeSlicing:\n    resources: []\n",
                      "3: sharing.timeSlicing.resources: want a non-empty list of resources, "
                      "got an empty list");
    expect_file_error("sharing:\n  timeSlicing:\n    renameByDefault: true\n",
                      "3: sharing.timeSlicing: missing required key \"resources\"");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - replicas: 2\n",
                      "4: sharing.timeSlicing.resources[0]: missing required key \"name\"");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n",
                      "4: sharing.timeSlicing.resources[0]: missing required key \"replicas\"");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                      "      replicas: 1\n",
                      "5: invalid value \"1\" for sharing.timeSlicing.resources[0].replicas: want "
                      "an integer >= 2");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                      "      replicas: four\n",
                      "5: invalid value \"four\" for sharing.timeSlicing.resources[0].replicas: "
                      "want an integer >= 2");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                      "      replicas: 2\n      extra: 1\n",
                      "6: unknown key \"sharing.timeSlicing.resources[0].extra\"");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - name: Bad_Name\n"
                      "      replicas: 2\n",
                      "4: invalid value \"Bad_Name\" for sharing.timeSlicing.resources[0].name: "
                      "want a DNS-1123 subdomain after \"nvidia.com/\" (lower-case letters, "
                      "digits, '-' and '.')");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n"
                      "    - name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n"
                      "      replicas: 2\n",
                      "4: invalid value \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" "
                      "for sharing.timeSlicing.resources[0].name: the resource name "
                      "\"nvidia.com/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" is "
                      "longer than 63 characters");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                      "      replicas: 2\n      devices: some\n",
                      "6: invalid value \"some\" for sharing.timeSlicing.resources[0].devices: "
                      "want all, a count > 0, or a list of GPU indexes, \"gpu:mig\" indexes, "
                      "GPU-/MIG- UUIDs");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                      "      replicas: 2\n      devices:\n      - 0\n      - GPU-xyz\n",
                      "8: invalid value \"GPU-xyz\" for "
                      "sharing.timeSlicing.resources[0].devices[1]: want a GPU index, a "
                      "\"gpu:mig\" index or a GPU-/MIG- UUID");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n"
                      "      replicas: 2\n    - name: nvidia.com/gpu\n      replicas: 3\n",
                      "6: sharing.timeSlicing.resources[1]: resource nvidia.com/gpu is already "
                      "shared by sharing.timeSlicing.resources[0]");
    expect_file_error("sharing:\n  timeSlicing:\n    renameByDefault: [1]\n    resources: []\n",
                      "3: sharing.timeSlicing.renameByDefault: want a bool, got a list");
    expect_file_error("sharing:\n  spaceSlicing: {}\n", "2: unknown key \"sharing.spaceSlicing\"");
    expect_file_error("resources:\n  gpus:\n  - pattern: \"*\"\n",
                      "3: resources.gpus[0]: missing required key \"name\"");
    expect_file_error("resources:\n  gpus:\n  - name: x\n    pattern: \"\"\n",
                      "4: invalid value \"\" for resources.gpus[0].pattern: want 1 to 255 "
                      "characters");
    expect_file_error("resources:\n  tpus: []\n", "2: unknown key \"resources.tpus\"");
    /* MPS is validated like time-slicing */
    expect_file_error("sharing:\n  mps:\n    renameByDefault: true\n    resources: []\n",
                      "4: sharing.mps.resources: want a non-empty list of resources, got an "
                      "empty list");
}

/* Accepted edge cases: empty file, nulls, version "", YAML 1.1 booleans. */
static void test_file_edge_cases(void **state)
{
    (void)state;
    static const char *const ok[] = {"", "# nothing\n", "version: \"\"\nflags:\n",
                                     "flags:\n  gfd:\n  plugin:\n    deviceListStrategy: cdi-cri\n",
                                     /* 63 characters in all: the longest valid name */
                                     "resources:\n  gpus:\n  - pattern: x\n    name: "
                                     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
                                     "sharing:\n  mps:\n", "version: v1\nsharing: {}\n"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct gp_config cfg;
        const char *path = temp_config(ok[i]);
        const char *args[] = {"--config-file", path, NULL};
        enum config_result r = load(&cfg, args, NULL);
        unlink(path);
        if (r != CONFIG_OK)
            fail_msg("file %zu: %s", i, err);
        config_free(&cfg);
    }
}

static void test_json(void **state)
{
    (void)state;
    struct gp_config cfg;
    load_file_ok(&cfg, "nvidia/rename.yaml");
    char *text = config_to_json(&cfg);
    assert_non_null(text);
    json_error_t jerr;
    json_t *root = json_loads(text, 0, &jerr);
    assert_non_null(root);
    assert_string_equal(json_string_value(json_object_get(root, "version")), "v1");
    json_t *flags = json_object_get(root, "flags");
    assert_string_equal(json_string_value(json_object_get(flags, "migStrategy")), "none");
    assert_true(json_is_true(json_object_get(flags, "failOnInitError")));
    assert_string_equal(json_string_value(json_object_get(flags, "nvidiaDriverRoot")), "/");
    json_t *plugin = json_object_get(flags, "plugin");
    assert_string_equal(json_string_value(json_object_get(plugin, "deviceIDStrategy")), "uuid");
    json_t *dls = json_object_get(plugin, "deviceListStrategy");
    assert_int_equal(json_array_size(dls), 1);
    assert_string_equal(json_string_value(json_array_get(dls, 0)), "envvar");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(flags, "health"), "probeInterval")),
        "5s");
    json_t *gpus = json_object_get(json_object_get(root, "resources"), "gpus");
    assert_int_equal(json_array_size(gpus), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(gpus, 0), "name")),
                        "nvidia.com/a100");
    json_t *ts = json_object_get(json_object_get(root, "sharing"), "timeSlicing");
    assert_true(json_is_true(json_object_get(ts, "failRequestsGreaterThanOne")));
    json_t *r0 = json_array_get(json_object_get(ts, "resources"), 0);
    assert_string_equal(json_string_value(json_object_get(r0, "rename")), "nvidia.com/a100-shared");
    assert_int_equal(json_array_size(json_object_get(r0, "devices")), 3);
    assert_int_equal(json_integer_value(json_object_get(r0, "replicas")), 4);
    json_t *r1 = json_array_get(json_object_get(ts, "resources"), 1);
    assert_string_equal(json_string_value(json_object_get(r1, "devices")), "all");
    assert_int_equal(json_array_size(json_object_get(json_object_get(root, "imex"), "channelIDs")),
                     0);
    assert_true(
        json_is_null(json_object_get(json_object_get(root, "gpupool"), "disableHealthchecks")));
    /* NVIDIA's key order: version, flags, resources, sharing. */
    assert_true(strstr(text, "\"version\"") < strstr(text, "\"flags\""));
    assert_true(strstr(text, "\"flags\"") < strstr(text, "\"resources\""));
    assert_true(strstr(text, "\"resources\"") < strstr(text, "\"sharing\""));
    json_decref(root);
    free(text);
    config_free(&cfg);
}

/* The dump of a config, fed back as a file, gives the same config. */
static void test_json_round_trip(void **state)
{
    (void)state;
    struct gp_config a, b;
    load_file_ok(&a, "gpupool-full.yaml");
    char *text = config_to_json(&a);
    assert_non_null(text);
    json_t *root = json_loads(text, 0, NULL);
    assert_non_null(root);
    json_object_del(root, "gpupool"); /* command-line-only values */
    char *file_text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    const char *path = temp_config(file_text); /* JSON is YAML */
    const char *args[] = {"--config-file", path, NULL};
    load_ok(&b, args, NULL);
    unlink(path);
    char *text2 = config_to_json(&b);
    /* only the configFile differs */
    json_t *j1 = json_loads(text, 0, NULL), *j2 = json_loads(text2, 0, NULL);
    json_object_del(json_object_get(j1, "gpupool"), "configFile");
    json_object_del(json_object_get(j2, "gpupool"), "configFile");
    assert_true(json_equal(j1, j2));
    json_decref(j1);
    json_decref(j2);
    free(text);
    free(text2);
    free(file_text);
    config_free(&a);
    config_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_flag),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_every_env),
        cmocka_unit_test(test_env_aliases),
        cmocka_unit_test(test_env_empty),
        cmocka_unit_test(test_list_strategies),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_bad_cli_values),
        cmocka_unit_test(test_refused_options),
        cmocka_unit_test(test_imex_host_check),
        cmocka_unit_test(test_bad_cli_syntax),
        cmocka_unit_test(test_help_and_version),
        cmocka_unit_test(test_nvidia_flags_only),
        cmocka_unit_test(test_nvidia_mig_mixed),
        cmocka_unit_test(test_nvidia_time_slicing),
        cmocka_unit_test(test_nvidia_rename_by_default),
        cmocka_unit_test(test_nvidia_multiple_resources),
        cmocka_unit_test(test_nvidia_rename_resources),
        cmocka_unit_test(test_nvidia_imex_and_mps),
        cmocka_unit_test(test_gpupool_full),
        cmocka_unit_test(test_checked_in_invalid),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_file_errors_sharing),
        cmocka_unit_test(test_file_edge_cases),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_json_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* config.c -- the device plugin's options (config.h).
 *
 * ONE table, `specs[]`, has a row per option with its flag name and
 * aliases, environment variables, config-file / JSON path, type, field and
 * default; the option engine (options.h) generates argv and environment
 * parsing, the `flags:` / `imex:` part of the file walk, defaults, the JSON
 * dump and --help from it. The structured parts of NVIDIA's file
 * (`version`, `resources`, `sharing`) are records rather than options:
 * config_file.c walks them, handed over through the table's file_key.
 *
 * What is left here: the table, NVIDIA's IMEX channel list type, derived
 * values and the refusal of what gpupool cannot honour (finish()), and the
 * host checks made at start-up (config_check_host()). */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "config_file.h"
#include "errmsg.h"
#include "log.h"
#include "options.h"

#ifndef GP_VERSION
#define GP_VERSION "unknown"
#endif

#define FIELD(f) offsetof(struct gp_config, f)

/* Enum fields are written through an int: make sure that is their size. */
static_assert(sizeof(enum mig_strategy) == sizeof(int), "enum size");
static_assert(sizeof(enum device_id_strategy) == sizeof(int), "enum size");
static_assert(sizeof(enum shared_alloc_policy) == sizeof(int), "enum size");
static_assert(sizeof(enum device_discovery_strategy) == sizeof(int), "enum size");
static_assert(sizeof(enum resource_mode) == sizeof(int), "enum size");
static_assert(sizeof(enum pool_mem_unit) == sizeof(int), "enum size");

/* ------------------------------------------------------------------ */
/* imex.channelIDs: NVIDIA only supports the empty list and [0].        */

static int imex_parse(void *field, const char *text, bool append, char *why, size_t whylen)
{
    size_t *count_field = field;
    size_t count = append ? *count_field : 0;
    const char *p = text;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        char tok[32];
        long id;
        if (len == 0 || len >= sizeof tok) {
            snprintf(why, whylen, "want a list of integers");
            return -1;
        }
        memcpy(tok, p, len);
        tok[len] = '\0';
        if (options_parse_long(tok, 0, INT_MAX, &id) != 0) {
            snprintf(why, whylen, "want a list of integers");
            return -1;
        }
        if (id != 0 || ++count > 1) {
            snprintf(why, whylen, "the only valid channel lists are [] and [0]");
            return -1;
        }
        p += len + (p[len] == ',');
    }
    *count_field = count;
    return 0;
}

static json_t *imex_json(const void *field)
{
    json_t *a = json_array();
    if (a != NULL && *(const size_t *)field > 0)
        json_array_append_new(a, json_integer(0));
    return a;
}

static const struct option_custom imex_ids = {
    .parse = imex_parse,
    .to_json = imex_json,
    .type_name = "a list of integers",
    .list_only = true,
    .plain = true,
};

/* ------------------------------------------------------------------ */
/* The table.                                                          */

static const struct option_value mig_values[] = {
    {"none", MIG_STRATEGY_NONE, NULL},
    {"single", MIG_STRATEGY_SINGLE, NULL},
    {"mixed", MIG_STRATEGY_MIXED, NULL},
    {NULL, 0, NULL},
};
static const struct option_value list_values[] = {
    {"envvar", DEVICE_LIST_ENVVAR, NULL},
    {"volume-mounts", DEVICE_LIST_VOLUME_MOUNTS, NULL},
    {"cdi-annotations", DEVICE_LIST_CDI_ANNOTATIONS, NULL},
    {"cdi-cri", DEVICE_LIST_CDI_CRI, NULL},
    {NULL, 0, NULL},
};
static const struct option_value id_values[] = {
    {"uuid", DEVICE_ID_UUID, NULL},
    {"index", DEVICE_ID_INDEX, NULL},
    {NULL, 0, NULL},
};
static const struct option_value policy_values[] = {
    {"distributed", SHARED_ALLOC_DISTRIBUTED, NULL},
    {"packed", SHARED_ALLOC_PACKED, NULL},
    {NULL, 0, NULL},
};
static const struct option_value discovery_values[] = {
    {"auto", DEVICE_DISCOVERY_AUTO, NULL},
    {"nvml", DEVICE_DISCOVERY_NVML, NULL},
    {"tegra", 0, "tegra (Jetson) devices are not supported by gpupool"},
    {NULL, 0, NULL},
};
static const struct option_value resource_mode_values[] = {
    {"gpu", RESOURCE_MODE_GPU, NULL},
    {"gpu-mem", RESOURCE_MODE_GPU_MEM, NULL},
    {NULL, 0, NULL},
};
static const struct option_value isolation_values[] = {
    {"memory", ISOLATION_MEMORY, NULL},
    {"none", ISOLATION_NONE, NULL},
    {NULL, 0, NULL},
};
static const struct option_value memory_unit_values[] = {
    {"GiB", POOL_UNIT_GIB, NULL},
    {"MiB", POOL_UNIT_MIB, NULL},
    {NULL, 0, NULL},
};
/* nvidia-ctk's hook names; the spec writer (cdi.c) emits these hooks. */
static const struct option_value hook_values[] = {
    {"all", (int)CDI_HOOK_ALL, NULL},
    {"create-symlinks", CDI_HOOK_CREATE_SYMLINKS, NULL},
    {"update-ldcache", CDI_HOOK_UPDATE_LDCACHE, NULL},
    {"enable-cuda-compat", CDI_HOOK_ENABLE_CUDA_COMPAT, NULL},
    {"disable-device-node-modification", CDI_HOOK_DISABLE_DEVICE_NODE_MODIFICATION, NULL},
    {"chmod", CDI_HOOK_CHMOD, NULL},
    {NULL, 0, NULL},
};
/* nvidia-ctk's feature flags that gpupool's spec writer implements. */
static const struct option_value feature_values[] = {
    {"include-persistenced-socket", CDI_FEATURE_INCLUDE_PERSISTENCED_SOCKET, NULL},
    {"disable-imex-channel-creation", CDI_FEATURE_DISABLE_IMEX_CHANNEL_CREATION, NULL},
    {"enable-explicit-driver-libraries", 0,
     "gpupool's CDI spec writer does not implement this nvidia-ctk feature"},
    {"no-additional-gids-for-device-nodes", 0,
     "gpupool's CDI spec writer does not implement this nvidia-ctk feature"},
    {"allow-additional-gids", 0,
     "gpupool's CDI spec writer does not implement this nvidia-ctk feature"},
    {NULL, 0, NULL},
};

#define IN_FILE OPT_IN_FILE

/* Rows with a file path and no flag are GFD's keys of the shared NVIDIA
 * file: accepted and type-checked, then dropped. */
static const struct option_spec specs[] = {
    {.flag = "mig-strategy",
     .env = {"MIG_STRATEGY"},
     .path = "flags.migStrategy",
     .flags = IN_FILE,
     .type = OPT_ENUM,
     .offset = FIELD(mig_strategy),
     .def = "none",
     .values = mig_values,
     .help = "the desired strategy for exposing MIG devices on GPUs that support it"},
    {.flag = "fail-on-init-error",
     .env = {"FAIL_ON_INIT_ERROR"},
     .path = "flags.failOnInitError",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = FIELD(fail_on_init_error),
     .def = "true",
     .help = "fail the plugin if an error is encountered during initialization, otherwise "
             "block indefinitely"},
    {.flag = "driver-root",
     .alias = {"nvidia-driver-root"},
     .env = {"NVIDIA_DRIVER_ROOT"},
     .path = "flags.nvidiaDriverRoot",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(nvidia_driver_root),
     .def = "/",
     .help = "the root path for the NVIDIA driver installation (typically / or "
             "/run/nvidia/driver)"},
    {.flag = "dev-root",
     .alias = {"nvidia-dev-root"},
     .env = {"NVIDIA_DEV_ROOT"},
     .path = "flags.nvidiaDevRoot",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(nvidia_dev_root),
     .def = "",
     .help = "the root path for the NVIDIA device nodes; empty = the driver root"},
    {.flag = "pass-device-specs",
     .env = {"PASS_DEVICE_SPECS"},
     .path = "flags.plugin.passDeviceSpecs",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = FIELD(pass_device_specs),
     .def = "false",
     .help = "pass the list of DeviceSpecs to the kubelet on Allocate()"},
    {.flag = "device-list-strategy",
     .env = {"DEVICE_LIST_STRATEGY"},
     .path = "flags.plugin.deviceListStrategy",
     .flags = IN_FILE,
     .type = OPT_ENUM_SET,
     .offset = FIELD(device_list_strategy),
     .def = "envvar",
     .values = list_values,
     .help = "the desired strategy for passing the device list to the underlying runtime; "
             "several may be given (repeated flag or comma-separated)"},
    {.flag = "device-id-strategy",
     .env = {"DEVICE_ID_STRATEGY"},
     .path = "flags.plugin.deviceIDStrategy",
     .flags = IN_FILE,
     .type = OPT_ENUM,
     .offset = FIELD(device_id_strategy),
     .def = "uuid",
     .values = id_values,
     .help = "the desired strategy for passing device IDs to the underlying runtime"},
    {.flag = "gdrcopy-enabled",
     .env = {"GDRCOPY_ENABLED"},
     .path = "flags.gdrcopyEnabled",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = FIELD(gdrcopy_enabled),
     .def = "false",
     .help = "ensure that containers that request NVIDIA GPU resources are started with "
             "GDRCopy support"},
    {.flag = "gds-enabled",
     .env = {"GDS_ENABLED"},
     .path = "flags.gdsEnabled",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = FIELD(gds_enabled),
     .def = "false",
     .help = "ensure that containers that request NVIDIA GPU resources are started with "
             "GPUDirect Storage support"},
    {.flag = "mofed-enabled",
     .env = {"MOFED_ENABLED"},
     .path = "flags.mofedEnabled",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = FIELD(mofed_enabled),
     .def = "false",
     .help = "ensure that containers that request NVIDIA GPU resources are started with "
             "MOFED support"},
    {.flag = "cdi-annotation-prefix",
     .env = {"CDI_ANNOTATION_PREFIX"},
     .path = "flags.plugin.cdiAnnotationPrefix",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(cdi_annotation_prefix),
     .def = "cdi.k8s.io/",
     .help = "the prefix to use for CDI container annotation keys"},
    {.flag = "nvidia-cdi-hook-path",
     .alias = {"nvidia-ctk-path"},
     .env = {"NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"},
     .path = "flags.plugin.nvidiaCTKPath",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(nvidia_ctk_path),
     .def = "/usr/bin/nvidia-ctk",
     .help = "the path to use for NVIDIA CDI hooks in the generated CDI specification"},
    {.flag = "driver-root-ctr-path",
     .alias = {"container-driver-root"},
     .env = {"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"},
     .path = "flags.plugin.containerDriverRoot",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(container_driver_root),
     .def = "/driver-root",
     .help = "the path where the NVIDIA driver root is mounted in the plugin's container "
             "(where the CDI spec writer looks for libraries and binaries)"},
    {.flag = "mps-root",
     .env = {"MPS_ROOT"},
     .path = "flags.mpsRoot",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(mps_root),
     .def = "",
     .help = "the MPS root path on the host (NVIDIA Helm's is " CONFIG_HELM_MPS_ROOT
             "): sharing.mps's control daemons keep their pipe and log directories under "
             "<root>/<resource>/ (docs/mps.md)"},
    {.flag = "mps-control",
     .env = {"GP_MPS_CONTROL"},
     .path = "flags.mpsControl",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(mps_control),
     .def = "",
     .help = "the nvidia-cuda-mps-control binary that sharing.mps runs; empty = "
             "<driver-root>/usr/bin/nvidia-cuda-mps-control, else <driver-root>/bin/"},
    {.flag = "shared-devices-allocation-policy",
     .env = {"SHARED_DEVICES_ALLOCATION_POLICY"},
     .path = "flags.plugin.sharedDevicesAllocationPolicy",
     .flags = IN_FILE,
     .type = OPT_ENUM,
     .offset = FIELD(shared_alloc_policy),
     .def = "distributed",
     .values = policy_values,
     .help = "how replicas of shared GPUs are preferred: spread over GPUs or packed onto few"},
    {.flag = "device-discovery-strategy",
     .env = {"DEVICE_DISCOVERY_STRATEGY"},
     .path = "flags.deviceDiscoveryStrategy",
     .flags = IN_FILE,
     .type = OPT_ENUM,
     .offset = FIELD(device_discovery_strategy),
     .def = "auto",
     .values = discovery_values,
     .help = "the strategy used to discover devices (gpupool always uses NVML)"},
    {.flag = "imex-channel-ids",
     .env = {"IMEX_CHANNEL_IDS"},
     .path = "imex.channelIDs",
     .flags = IN_FILE,
     .type = OPT_CUSTOM,
     .offset = FIELD(imex_channel_count),
     .custom = &imex_ids,
     .help = "IMEX channel IDs to inject into containers; the only valid lists are none and 0"},
    {.flag = "imex-required",
     .env = {"IMEX_REQUIRED"},
     .path = "imex.required",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = FIELD(imex_required),
     .def = "false",
     .help = "refuse to start when a configured IMEX channel has no device node under the "
             "dev root (otherwise the channel is dropped with a warning)"},
    {.flag = "kubelet-socket",
     .env = {"KUBELET_SOCKET"},
     .path = "gpupool.kubeletSocket",
     .type = OPT_STRING,
     .offset = FIELD(kubelet_socket),
     .def = "/var/lib/kubelet/device-plugins/kubelet.sock",
     .help = "the kubelet's registration socket; its directory holds the plugin sockets; "
             "empty = do not register"},
    {.flag = "config-file",
     .env = {"CONFIG_FILE"},
     .path = "gpupool.configFile",
     .flags = OPT_CONFIG_FILE,
     .type = OPT_STRING,
     .offset = FIELD(config_file),
     .def = "",
     .help = "the path to a config file (NVIDIA's `version: v1` format)"},
    {.flag = "cdi-feature-flags",
     .env = {"CDI_FEATURE_FLAGS"},
     .path = "gpupool.cdiFeatureFlags",
     .type = OPT_ENUM_SET,
     .offset = FIELD(cdi_feature_flags),
     .values = feature_values,
     .help = "feature flags for the generated CDI specification (repeated or comma-separated)"},
    {.flag = "cdi-disable-hooks",
     .env = {"CDI_DISABLE_HOOKS"},
     .path = "gpupool.cdiDisableHooks",
     .type = OPT_ENUM_SET,
     .offset = FIELD(cdi_disabled_hooks),
     .values = hook_values,
     .help = "hooks to leave out of the generated CDI specification (repeated or "
             "comma-separated)"},
    {.flag = "cdi-spec-dir",
     .env = {"GP_CDI_SPEC_DIR"},
     .path = "gpupool.cdiSpecDir",
     .type = OPT_STRING,
     .offset = FIELD(cdi_spec_dir),
     .def = "/var/run/cdi",
     .help = "gpupool: directory the CDI spec is written to with a cdi-* device list strategy"},
    {.flag = "health-recovery-probes",
     .env = {"GP_HEALTH_RECOVERY_PROBES"},
     .path = "flags.health.recoveryProbes",
     .flags = IN_FILE,
     .type = OPT_INT,
     .offset = FIELD(health_recovery_probes),
     .def = "3",
     .help = "gpupool: consecutive good NVML probes that bring an Unhealthy GPU back; 0 = never"},
    {.flag = "health-probe-interval",
     .env = {"GP_HEALTH_PROBE_INTERVAL"},
     .path = "flags.health.probeInterval",
     .flags = IN_FILE,
     .type = OPT_DURATION,
     .offset = FIELD(health_probe_interval_ms),
     .def = "5s",
     .min = 1,
     .help = "gpupool: time between recovery probes of an Unhealthy GPU (Go duration: 5s, "
             "500ms)"},
    {.flag = "resource-mode",
     .env = {"GP_RESOURCE_MODE"},
     .path = "flags.resourceMode",
     .flags = IN_FILE,
     .type = OPT_ENUM,
     .offset = FIELD(resource_mode),
     .def = "gpu",
     .values = resource_mode_values,
     .help = "gpupool: `gpu` (whole GPUs, MIG, time-slicing) or `gpu-mem` (GPU memory units "
             "as aliyun.com/gpu-mem, gpushare-compatible; see docs/gpumem.md)"},
    {.flag = "gpu-memory-unit",
     .env = {"GP_GPU_MEMORY_UNIT"},
     .path = "flags.memoryUnit",
     .flags = IN_FILE,
     .type = OPT_ENUM,
     .offset = FIELD(memory_unit),
     .def = "GiB",
     .values = memory_unit_values,
     .help = "gpu-mem mode: the unit of one aliyun.com/gpu-mem device, GiB or MiB (the "
             "extender's flag of the same name must match)",
     /* gpushare's spelling, which the extender never had: one name for
      * one setting in both programs, the old one kept for manifests. */
     .deprecated_flag = "memory-unit",
     .deprecated_env = "GP_MEMORY_UNIT"},
    {.flag = "kubeconfig",
     .env = {"KUBECONFIG"},
     .path = "flags.kubeconfig",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(kubeconfig),
     .def = "",
     .help = "gpu-mem mode: kubeconfig for the API server; empty = ~/.kube/config, else the "
             "in-cluster service account"},
    {.flag = "node-name",
     .env = {"NODE_NAME"},
     .path = "flags.nodeName",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(node_name),
     .def = "",
     .help = "gpu-mem mode (required): this node's name (downward API spec.nodeName)"},
    {.flag = "pod-resources-socket",
     .env = {"GP_POD_RESOURCES_SOCKET"},
     .path = "flags.podResourcesSocket",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(pod_resources_socket),
     .def = "/var/lib/kubelet/pod-resources/kubelet.sock",
     .help = "gpu-mem mode: the kubelet's PodResources socket (identifies the pod of an "
             "Allocate)"},
    {.flag = "state-dir",
     .env = {"GP_STATE_DIR"},
     .path = "flags.stateDir",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(state_dir),
     .def = "/var/lib/gpupool",
     .help = "gpu-mem mode: directory of the allocation ledger (must survive plugin restarts)"},
    {.flag = "allocate-timeout",
     .env = {"GP_ALLOCATE_TIMEOUT"},
     .path = "flags.allocateTimeout",
     .flags = IN_FILE,
     .type = OPT_DURATION,
     .offset = FIELD(allocate_wait_ms),
     .def = "10s",
     .min = 1,
     .help = "gpu-mem mode: how long one Allocate waits for its pod to become certain "
             "(watch lag, a rejected pod's status) before it fails"},
    {.flag = "api-write-deadline",
     .env = {"GP_API_WRITE_DEADLINE"},
     .path = "flags.apiWriteDeadline",
     .flags = IN_FILE,
     .type = OPT_DURATION,
     .offset = FIELD(api_write_deadline_ms),
     .def = "5m",
     .min = 1,
     .help = "gpu-mem mode: how long a pod's ASSIGNED=true patch is retried (backoff with "
             "jitter, honouring Retry-After) before the plugin gives up with an Event"},
    {.flag = "isolation",
     .env = {"GP_ISOLATION"},
     .path = "flags.isolation",
     .flags = IN_FILE,
     .type = OPT_ENUM,
     .offset = FIELD(isolation),
     .def = "memory",
     .values = isolation_values,
     .help = "gpupool: `memory` enforces each container's GPU-memory share with "
             "libgpupool-cuda (gpu-mem mode, and time-slicing with "
             "sharing.timeSlicing.memoryLimit); `none` injects nothing"},
    {.flag = "isolation-dir",
     .env = {"GP_ISOLATION_DIR"},
     .path = "flags.isolationDir",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(isolation_dir),
     .def = "",
     .help = "gpupool: host directory of the library, the preload file and the per-container "
             "region directories (the kubelet mounts from it); empty = <state-dir>/isolation"},
    {.flag = "isolation-library",
     .env = {"GP_ISOLATION_LIBRARY"},
     .path = "flags.isolationLibrary",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = FIELD(isolation_library),
     .def = "/usr/lib/gpupool/libgpupool-cuda.so",
     .help = "gpupool: the libgpupool-cuda.so copied into --isolation-dir at start (the "
             "image ships it here)"},
    {.flag = "metrics-addr",
     .env = {"GP_METRICS_ADDR"},
     .path = "flags.metricsAddr",
     .flags = IN_FILE,
     .type = OPT_HOSTPORT,
     .offset = FIELD(metrics_addr),
     .def = "",
     .help = "gpupool: serve Prometheus metrics on HOST:PORT (GET /metrics; [::1]:PORT for "
             "IPv6, :PORT for all interfaces); empty = off (see docs/metrics.md)"},
    {.flag = "node-labels",
     .env = {"GP_NODE_LABELS"},
     .path = "flags.nodeLabels",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = FIELD(node_labels),
     .def = "false",
     .help = "gpupool: label this node as NVIDIA's gpu-feature-discovery does "
             "(nvidia.com/gpu.product, ...); needs --node-name and API access"},
    {.flag = "v",
     .path = "gpupool.verbosity",
     .type = OPT_INT,
     .offset = FIELD(verbosity),
     .def = "0",
     .help = "log verbosity (klog -v)"},
    {.env = {"DP_DISABLE_HEALTHCHECKS"},
     .path = "gpupool.disableHealthchecks",
     .type = OPT_STRING,
     .offset = FIELD(disable_healthchecks),
     .help = "`all`, `xids` or a comma-separated list of XIDs that do not make a GPU Unhealthy"},
    {.env = {"DP_ENABLE_HEALTHCHECKS"},
     .path = "gpupool.enableHealthchecks",
     .type = OPT_STRING,
     .offset = FIELD(enable_healthchecks),
     .help = "`all` or a comma-separated list of XIDs that make a GPU Unhealthy even if "
             "ignored"},
    /* gpu-feature-discovery's keys of the shared file. */
    {.path = "flags.useNodeFeatureAPI",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = OPTION_NO_FIELD},
    {.path = "flags.gfd.oneshot", .flags = IN_FILE, .type = OPT_BOOL, .offset = OPTION_NO_FIELD},
    {.path = "flags.gfd.noTimestamp",
     .flags = IN_FILE,
     .type = OPT_BOOL,
     .offset = OPTION_NO_FIELD},
    {.path = "flags.gfd.sleepInterval",
     .flags = IN_FILE,
     .type = OPT_DURATION,
     .offset = OPTION_NO_FIELD},
    {.path = "flags.gfd.outputFile",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = OPTION_NO_FIELD},
    {.path = "flags.gfd.machineTypeFile",
     .flags = IN_FILE,
     .type = OPT_STRING,
     .offset = OPTION_NO_FIELD},
    {.flag = "help", .alias = {"h"}, .type = OPT_HELP, .help = "show help"},
    {.flag = "version", .type = OPT_VERSION, .help = "print the version"},
};

static const struct options_table table = {
    .program = "gpupool-device-plugin",
    .version = GP_VERSION,
    .summary = "A Kubernetes device plugin for NVIDIA GPUs, compatible with NVIDIA's\n"
               "k8s-device-plugin flags, environment variables and config file.",
    .specs = specs,
    .count = sizeof specs / sizeof specs[0],
    .file_key = config_file_key,
};

/* ------------------------------------------------------------------ */
/* Load / free.                                                        */

/* Derived values and refusals, once every source has been applied. */
static int finish(struct gp_config *cfg, char *err, size_t errlen)
{
    if (cfg->nvidia_dev_root == NULL || cfg->nvidia_dev_root[0] == '\0') {
        char *v = strdup(cfg->nvidia_driver_root ? cfg->nvidia_driver_root : "/");
        if (v == NULL)
            return gp_errf(err, errlen, "out of memory");
        free(cfg->nvidia_dev_root);
        cfg->nvidia_dev_root = v;
    }
    if (cfg->device_list_strategy == 0)
        return gp_errf(err, errlen,
                       "--device-list-strategy (DEVICE_LIST_STRATEGY): want at "
                       "least one strategy");
    /* NVIDIA's validateFlags: MPS needs a root and whole GPUs per resource. */
    if (cfg->sharing_mps && (cfg->mps_root == NULL || cfg->mps_root[0] != '/'))
        return gp_errf(err, errlen,
                       "using MPS requires --mps-root (MPS_ROOT, flags.mpsRoot) to be specified "
                       "as an absolute host path (NVIDIA Helm's is " CONFIG_HELM_MPS_ROOT ")");
    if (cfg->sharing_mps && cfg->mig_strategy == MIG_STRATEGY_MIXED)
        return gp_errf(err, errlen, "using --mig-strategy=mixed with MPS is not supported");
    if (cfg->sharing_mps && cfg->resource_mode != RESOURCE_MODE_GPU)
        return gp_errf(err, errlen,
                       "sharing.mps shares whole GPUs: it needs --resource-mode=gpu, not gpu-mem");
    if (cfg->isolation_dir == NULL || cfg->isolation_dir[0] == '\0') {
        const char *state = cfg->state_dir ? cfg->state_dir : "";
        size_t len = strlen(state) + sizeof "/isolation";
        char *v = malloc(len);
        if (v == NULL)
            return gp_errf(err, errlen, "out of memory");
        snprintf(v, len, "%s/isolation", state);
        free(cfg->isolation_dir);
        cfg->isolation_dir = v;
    }
    if (cfg->isolation_dir[0] != '/')
        return gp_errf(err, errlen,
                       "invalid value \"%s\" for --isolation-dir (GP_ISOLATION_DIR, "
                       "flags.isolationDir): want an absolute host path (the kubelet mounts "
                       "from it)",
                       cfg->isolation_dir);
    if (cfg->isolation == ISOLATION_MEMORY &&
        (cfg->isolation_library == NULL || cfg->isolation_library[0] == '\0'))
        return gp_errf(err, errlen,
                       "--isolation-library (GP_ISOLATION_LIBRARY, flags.isolationLibrary) is "
                       "empty: name the libgpupool-cuda.so to install, or set --isolation=none");
    if (cfg->isolation == ISOLATION_NONE && cfg->time_slice_memory_limit)
        return gp_errf(err, errlen,
                       "sharing.timeSlicing.memoryLimit asks for memory limits but --isolation "
                       "(GP_ISOLATION, flags.isolation) is none: drop one of them");
    if (cfg->node_labels && (cfg->node_name == NULL || cfg->node_name[0] == '\0'))
        return gp_errf(err, errlen,
                       "--node-labels (GP_NODE_LABELS, flags.nodeLabels) needs this "
                       "node's name: set --node-name or NODE_NAME (downward API "
                       "spec.nodeName)");
    return 0;
}

enum config_result config_load(struct gp_config *cfg, int argc, char **argv, char **envp, char *err,
                               size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    enum options_result r = options_load(&table, cfg, argc, argv, envp, err, errlen);
    if (r == OPTIONS_OK && finish(cfg, err, errlen) != 0)
        r = OPTIONS_ERROR;
    if (r != OPTIONS_OK)
        config_free(cfg); /* the caller may or may not free: both are safe */
    if (r == OPTIONS_OK && cfg->config_file != NULL && cfg->config_file[0] != '\0')
        log_v(1, "loaded config file %s", cfg->config_file);
    return r == OPTIONS_OK ? CONFIG_OK : r == OPTIONS_EXIT ? CONFIG_EXIT : CONFIG_ERROR;
}

void config_free(struct gp_config *cfg)
{
    options_free(&table, cfg);
    config_file_free(cfg);
    memset(cfg, 0, sizeof *cfg);
}

bool config_uses_cdi(const struct gp_config *cfg)
{
    return (cfg->device_list_strategy & (DEVICE_LIST_CDI_ANNOTATIONS | DEVICE_LIST_CDI_CRI)) != 0;
}

int config_check_host(struct gp_config *cfg, char *err, size_t errlen)
{
    if (cfg->imex_channel_count == 0)
        return 0;
    char path[4096];
    const char *root = cfg->nvidia_dev_root ? cfg->nvidia_dev_root : "/";
    snprintf(path, sizeof path, "%s%s", strcmp(root, "/") == 0 ? "" : root,
             CONFIG_IMEX_CHANNEL0_NODE);
    struct stat st;
    if (stat(path, &st) == 0)
        return 0;
    if (cfg->imex_required)
        return gp_errf(err, errlen,
                       "IMEX channel 0 is required (--imex-required, imex.required) but %s does "
                       "not exist: %s; create the channel on the host (IMEX daemon / "
                       "nvidia-modprobe) or check --dev-root",
                       path, strerror(errno));
    log_warn("IMEX channel 0 is configured but %s does not exist (%s); containers get no "
             "IMEX channel (set --imex-required to make this an error)",
             path, strerror(errno));
    cfg->imex_channel_count = 0;
    return 0;
}

/* ------------------------------------------------------------------ */
/* JSON and usage, both generated from the table.                      */

char *config_to_json(const struct gp_config *cfg)
{
    /* Created first so that the dump has NVIDIA's key order. */
    json_t *root = json_pack("{s:s,s:{},s:{},s:{},s:{},s:{}}", "version", "v1", "flags",
                             "resources", "sharing", "imex", "gpupool");
    if (root == NULL)
        return NULL;
    char *out = NULL;
    if (options_to_json(&table, cfg, root) != NULL && config_file_to_json(root, cfg) == 0)
        out = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    return out;
}

void config_print_usage(FILE *out)
{
    options_print_usage(&table, out);
}

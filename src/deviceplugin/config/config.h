/* config.h -- gpupool-device-plugin configuration, NVIDIA-compatible.
 *
 * One table of options (config.c, run by the option engine in options.h)
 * drives the command line, the environment and the `flags:` / `imex:` part
 * of the `version: v1` config file (same names as NVIDIA's
 * k8s-device-plugin); config_file.c walks the structured parts
 * (`resources:`, `sharing:`). Precedence: flag > environment > file >
 * default. Invalid input of any kind is rejected before anything is
 * served, with `file:line: what` for the file and `--flag`/`ENV` naming
 * for the rest. Options gpupool cannot honour (unknown --cdi-feature-flags /
 * --cdi-disable-hooks words) are refused.
 * Owner: struct gp_config is embedded by the caller; config_free() releases
 * what config_load() allocated. Not thread-safe; read-only once loaded. */
#ifndef GP_CONFIG_H
#define GP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "options.h"
#include "poolapi_unit.h"
#include "compiler.h"

#define CONFIG_NAME_LEN 64 /* resource names: "nvidia.com/" + 52 */
#define CONFIG_PATTERN_LEN 256
#define CONFIG_DEVICE_REF_LEN 96
/* NVIDIA's Helm chart's MPS root (mps.root). */
#define CONFIG_HELM_MPS_ROOT "/run/nvidia/mps"
/* IMEX channel 0, which imex.channelIDs [0] hands to a container. */
#define CONFIG_IMEX_CHANNEL0_NODE "/dev/nvidia-caps-imex-channels/channel0"

enum mig_strategy { MIG_STRATEGY_NONE, MIG_STRATEGY_SINGLE, MIG_STRATEGY_MIXED };
enum device_id_strategy { DEVICE_ID_UUID, DEVICE_ID_INDEX };
enum shared_alloc_policy { SHARED_ALLOC_DISTRIBUTED, SHARED_ALLOC_PACKED };
/* --device-discovery-strategy; NVIDIA's `tegra` is rejected as unsupported. */
enum device_discovery_strategy { DEVICE_DISCOVERY_AUTO, DEVICE_DISCOVERY_NVML };
/* --resource-mode: whole GPUs (NVIDIA's resources) or GPU-memory units
 * (gpushare's aliyun.com/gpu-mem, see gpumem.h). */
enum resource_mode { RESOURCE_MODE_GPU, RESOURCE_MODE_GPU_MEM };
/* --isolation: hand containers the memory-limit library (isolation.h). */
enum isolation_mode { ISOLATION_MEMORY, ISOLATION_NONE };

/* --cdi-disable-hooks is a set of the hooks the CDI spec would carry
 * (cdi.c); `all` is every bit. */
enum cdi_hook_bits {
    CDI_HOOK_CREATE_SYMLINKS = 1u << 0,
    CDI_HOOK_UPDATE_LDCACHE = 1u << 1,
    CDI_HOOK_ENABLE_CUDA_COMPAT = 1u << 2,
    CDI_HOOK_DISABLE_DEVICE_NODE_MODIFICATION = 1u << 3,
    CDI_HOOK_CHMOD = 1u << 4,
    CDI_HOOK_ALL = (1u << 5) - 1,
};

/* --cdi-feature-flags: the nvidia-ctk feature flags gpupool's spec writer
 * implements; any other word is refused. */
enum cdi_feature_bits {
    CDI_FEATURE_INCLUDE_PERSISTENCED_SOCKET = 1u << 0,   /* bind the persistenced socket */
    CDI_FEATURE_DISABLE_IMEX_CHANNEL_CREATION = 1u << 1, /* gpupool never creates them */
};

/* --device-list-strategy is a set. */
enum device_list_strategy_bits {
    DEVICE_LIST_ENVVAR = 1u << 0,
    DEVICE_LIST_VOLUME_MOUNTS = 1u << 1,
    DEVICE_LIST_CDI_ANNOTATIONS = 1u << 2,
    DEVICE_LIST_CDI_CRI = 1u << 3,
};

/* resources.gpus[] / resources.mig[]: devices whose name (GPU) or profile
 * (MIG) matches the `*` wildcard pattern are served as `name`. */
struct config_resource_pattern {
    char pattern[CONFIG_PATTERN_LEN];
    char name[CONFIG_NAME_LEN]; /* always fully qualified: "nvidia.com/..." */
};

/* sharing.timeSlicing.resources[] */
struct config_time_slice {
    char name[CONFIG_NAME_LEN]; /* fully qualified resource being shared */
    /* Fully qualified advertised name; "" = keep name. config_load() already
     * applies renameByDefault: an entry without `rename` gets name + ".shared"
     * when sharing.timeSlicing.renameByDefault is true, so readers only look
     * at this field. */
    char rename[CONFIG_NAME_LEN];
    int replicas;     /* >= 2 */
    bool all_devices; /* devices: all (default), also true for a count, see below */
    /* devices: <N> (NVIDIA's "count" form): share only the first N devices
     * of the resource; 0 = not given. all_devices stays true with a count so
     * that code which ignores this field behaves as NVIDIA does (all). */
    unsigned first_n_devices;
    size_t device_count;
    char (*devices)[CONFIG_DEVICE_REF_LEN]; /* "0", "1:0", "GPU-...", "MIG-..." */
};

struct gp_config {
    /* flags */
    enum mig_strategy mig_strategy;
    bool fail_on_init_error;
    char *nvidia_driver_root; /* default "/" */
    char *nvidia_dev_root;    /* default = nvidia_driver_root */
    char *mps_root;           /* host directory of the MPS pipes; required with sharing.mps */
    char *mps_control;        /* nvidia-cuda-mps-control; "" = found under the driver root */
    bool gds_enabled, mofed_enabled, gdrcopy_enabled;
    bool pass_device_specs;
    unsigned device_list_strategy; /* DEVICE_LIST_* bits, never 0 */
    enum device_id_strategy device_id_strategy;
    char *cdi_annotation_prefix; /* default "cdi.k8s.io/" */
    char *nvidia_ctk_path;       /* default "/usr/bin/nvidia-ctk" */
    char *container_driver_root; /* default "/driver-root" */
    enum shared_alloc_policy shared_alloc_policy;
    char *
        kubelet_socket; /* default /var/lib/kubelet/device-plugins/kubelet.sock; "" = don't register */
    char *config_file;                                        /* "" = none */
    int verbosity;                                            /* -v */
    enum device_discovery_strategy device_discovery_strategy; /* default auto */
    /* imex.channelIDs: NVIDIA allows only [] and [0], so a count suffices:
     * 0 = no channel, 1 = channel 0. */
    size_t imex_channel_count;
    bool imex_required;
    unsigned cdi_feature_flags;  /* CDI_FEATURE_* bits from --cdi-feature-flags */
    unsigned cdi_disabled_hooks; /* CDI_HOOK_* bits from --cdi-disable-hooks */
    char *cdi_spec_dir;          /* where the CDI spec is written, default /var/run/cdi */

    /* GPU-memory mode (gpumem.h, docs/gpumem.md) */
    enum resource_mode resource_mode; /* default RESOURCE_MODE_GPU */
    enum pool_mem_unit memory_unit;   /* default GiB (poolapi_unit.h) */
    char *kubeconfig;                 /* "" = $KUBECONFIG handling of kube.h / in-cluster */
    char *node_name;                  /* NODE_NAME; required in gpu-mem mode */
    char *pod_resources_socket;       /* the kubelet's PodResources socket */
    char *state_dir;                  /* gpu-mem allocation ledger directory */
    int allocate_wait_ms;             /* longest wait of one gpu-mem Allocate for its pod */
    int api_write_deadline_ms;        /* gpu-mem: how long a pod patch is retried */

    /* Memory limits inside containers (isolation.h, docs/gpumem.md) */
    enum isolation_mode isolation; /* default memory (effective in gpu-mem mode) */
    char *isolation_dir;           /* host directory; "" in the table = <state-dir>/isolation */
    char *isolation_library;       /* the library copied into isolation_dir */

    /* Observability (plugin_metrics.h, nodelabels.h) */
    struct option_hostport metrics_addr; /* --metrics-addr; .text "" = no metrics server */
    bool node_labels;                    /* --node-labels: write GFD-compatible node labels */

    /* gpupool's own health knobs (flags / env / flags.health.* in the file) */
    int health_recovery_probes; /* consecutive good probes to recover, default 3; 0 = never recover */
    int health_probe_interval_ms; /* default 5000 */
    /* DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS verbatim (NULL = unset);
     * health.c interprets them as NVIDIA's plugin does. */
    char *disable_healthchecks;
    char *enable_healthchecks;

    /* resources */
    size_t gpu_resource_count;
    struct config_resource_pattern *gpu_resources;
    size_t mig_resource_count;
    struct config_resource_pattern *mig_resources;

    /* sharing.timeSlicing, or sharing.mps when sharing_mps is set (the
     * records are the same; the two exclude each other as in NVIDIA's) */
    bool sharing_mps;
    bool rename_by_default;
    bool fail_requests_greater_than_one;
    /* sharing.timeSlicing.memoryLimit (gpupool extension): each replica gets
     * its device's memory / replicas as a limit */
    bool time_slice_memory_limit;
    size_t time_slice_count;
    struct config_time_slice *time_slices;
};

enum config_result {
    CONFIG_OK = 0,
    CONFIG_EXIT = 1,   /* --help or --version was printed to stdout: exit 0 */
    CONFIG_ERROR = -1, /* err holds the message: exit non-zero */
};

/* Builds the configuration from defaults, the file named by --config-file /
 * CONFIG_FILE, the environment (envp, NULL-terminated, as main's) and argv. */
GP_MUST_USE enum config_result config_load(struct gp_config *cfg, int argc, char **argv,
                                           char **envp, char *err, size_t errlen);
void config_free(struct gp_config *cfg);

/* The merged configuration as a JSON document (NVIDIA's shape: version,
 * flags, resources, sharing), malloc'd; NULL on allocation failure. */
GP_MUST_USE char *config_to_json(const struct gp_config *cfg);

/* Usage text for --help, generated from the option table. */
void config_print_usage(FILE *out);

/* True with a cdi-annotations or cdi-cri device list strategy: the plugin
 * then writes the CDI spec its replies name (cdi.h). */
bool config_uses_cdi(const struct gp_config *cfg);

/* Start-up checks of the host the configuration names, as NVIDIA's plugin
 * makes them: an IMEX channel that is configured but has no device node
 * under the dev root (<dev-root>/dev/nvidia-caps-imex-channels/channel0)
 * is an error when imex.required, else a warning and the channel is
 * dropped from cfg (so no reply names it). Returns 0 or -1 + err. */
int config_check_host(struct gp_config *cfg, char *err, size_t errlen) GP_MUST_USE;

#endif

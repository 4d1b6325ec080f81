/* dra_daemon.c -- the DRA kubelet plugin's supervisor (see dra_daemon.h). */
#include "dra_daemon.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "arena.h"
#include "cdi.h"
#include "config.h"
#include "container_edits.h"
#include "dra_devices.h"
#include "dra_plugin.h"
#include "dra_prepare.h"
#include "dra_slices.h"
#include "errmsg.h"
#include "gpu.h"
#include "health.h"
#include "isolation.h"
#include "kube.h"
#include "log.h"
#include "node_state.h"
#include "nvml.h"
#include "pid_map.h"
#include "options.h"
#include "poolapi_names.h"
#include "rpc.h"

#define PROGRAM "gpupool-dra-plugin"
#define API_TIMEOUT_MS 10000
#define CHECK_INTERVAL_S 1


struct dra_config {
    char *driver_name;
    char *node_name;
    char *kubeconfig;
    char *kubelet_root;
    char *state_dir;
    char *cdi_root;
    char *isolation_dir;
    char *isolation_library;
    char *driver_root;
    char *dev_root;
    char *container_driver_root;
    char *nvidia_ctk_path;
    int consumable_capacity; /* enum dra_consumable (the option engine stores an int) */
    int health_recovery_probes;
    int health_probe_interval_ms;
    char *disable_healthchecks;
    char *enable_healthchecks;
    int verbosity;
};

static const struct option_value capacity_values[] = {
    {.name = "auto", .value = DRA_CONSUMABLE_AUTO},
    {.name = "on", .value = DRA_CONSUMABLE_ON},
    {.name = "off", .value = DRA_CONSUMABLE_OFF},
    {.name = NULL},
};

#define FIELD(f) offsetof(struct dra_config, f)
static const struct option_spec specs[] = {
    {.flag = "driver-name",
     .env = {"DRIVER_NAME"},
     .type = OPT_STRING,
     .offset = FIELD(driver_name),
     .def = POOL_DRA_DRIVER_DEFAULT,
     .help = "the DRA driver name claims and DeviceClasses select (gpu.nvidia.com serves claims "
             "written for NVIDIA's DRA driver unchanged)"},
    {.flag = "node-name",
     .env = {"NODE_NAME"},
     .type = OPT_STRING,
     .offset = FIELD(node_name),
     .def = "",
     .help = "this node's name: the pool of its devices (required; the DaemonSet sets NODE_NAME)"},
    {.flag = "kubeconfig",
     .env = {"KUBECONFIG"},
     .type = OPT_STRING,
     .offset = FIELD(kubeconfig),
     .def = "",
     .help = "kubeconfig file; empty: ~/.kube/config, else the in-cluster service account"},
    {.flag = "kubelet-root-dir",
     .env = {"KUBELET_ROOT_DIR"},
     .type = OPT_STRING,
     .offset = FIELD(kubelet_root),
     .def = "/var/lib/kubelet",
     .help = "the kubelet's root: registration on <root>/plugins_registry/<driver>-reg.sock, "
             "the DRA service on <root>/plugins/<driver>/dra.sock"},
    {.flag = "state-dir",
     .env = {"GP_DRA_STATE_DIR"},
     .type = OPT_STRING,
     .offset = FIELD(state_dir),
     .def = "",
     .help = "directory of the prepared-claims checkpoint (checkpoint.json); empty: "
             "<kubelet-root-dir>/plugins/<driver>"},
    {.flag = "cdi-root",
     .env = {"CDI_ROOT"},
     .type = OPT_STRING,
     .offset = FIELD(cdi_root),
     .def = "/var/run/cdi",
     .help = "where the per-claim CDI specs are written (the container runtime's CDI directory)"},
    {.flag = "isolation-dir",
     .env = {"GP_ISOLATION_DIR"},
     .type = OPT_STRING,
     .offset = FIELD(isolation_dir),
     .def = "/var/lib/gpupool/isolation",
     .help = "host directory of libgpupool-cuda, its preload file and the claims' region "
             "directories (claims/<claim-uid>); the same layout as the device plugin's"},
    {.flag = "isolation-library",
     .env = {"GP_ISOLATION_LIBRARY"},
     .type = OPT_STRING,
     .offset = FIELD(isolation_library),
     .def = "/usr/lib/gpupool/libgpupool-cuda.so",
     .help = "the libgpupool-cuda.so installed into --isolation-dir at start; empty: no memory "
             "limits (claims for a share of a GPU are then refused)"},
    {.flag = "driver-root",
     .alias = {"nvidia-driver-root"},
     .env = {"NVIDIA_DRIVER_ROOT"},
     .type = OPT_STRING,
     .offset = FIELD(driver_root),
     .def = "/",
     .help = "root of the NVIDIA driver installation (where libnvidia-ml.so.1 is found)"},
    {.flag = "dev-root",
     .alias = {"nvidia-dev-root"},
     .env = {"NVIDIA_DEV_ROOT"},
     .type = OPT_STRING,
     .offset = FIELD(dev_root),
     .def = "",
     .help = "root of the NVIDIA device nodes on the host (hostPath of /dev/nvidia*); empty: "
             "--driver-root"},
    {.flag = "container-driver-root",
     .alias = {"driver-root-ctr-path"},
     .env = {"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"},
     .type = OPT_STRING,
     .offset = FIELD(container_driver_root),
     .def = "/driver-root",
     .help = "where this container sees --driver-root (the driver files the CDI specs mount are "
             "looked for there; --driver-root itself when it does not exist)"},
    {.flag = "nvidia-ctk-path",
     .alias = {"nvidia-cdi-hook-path"},
     .env = {"NVIDIA_CTK_PATH", "NVIDIA_CDI_HOOK_PATH"},
     .type = OPT_STRING,
     .offset = FIELD(nvidia_ctk_path),
     .def = "/usr/bin/nvidia-ctk",
     .help = "the host's nvidia-ctk (or nvidia-cdi-hook), run by the CDI hooks that create the "
             "driver's symlinks and update the container's ld cache"},
    {.flag = "consumable-capacity",
     .env = {"GP_CONSUMABLE_CAPACITY"},
     .type = OPT_ENUM,
     .values = capacity_values,
     .offset = FIELD(consumable_capacity),
     .def = "auto",
     .help = "publish GPUs with allocatable memory shares (KEP-5075): auto asks the API server"},
    {.flag = "health-recovery-probes",
     .env = {"GP_HEALTH_RECOVERY_PROBES"},
     .type = OPT_INT,
     .offset = FIELD(health_recovery_probes),
     .def = "3",
     .help = "consecutive good NVML probes that bring an Unhealthy GPU back; 0 = never (as the "
             "device plugin)"},
    {.flag = "health-probe-interval",
     .env = {"GP_HEALTH_PROBE_INTERVAL"},
     .type = OPT_DURATION,
     .offset = FIELD(health_probe_interval_ms),
     .def = "5s",
     .min = 1,
     .help = "time between recovery probes of an Unhealthy GPU (Go duration: 5s, 500ms)"},
    {.env = {"DP_DISABLE_HEALTHCHECKS"},
     .type = OPT_STRING,
     .offset = FIELD(disable_healthchecks),
     .help = "`all`, `xids` or a comma-separated list of XIDs that do not make a GPU Unhealthy"},
    {.env = {"DP_ENABLE_HEALTHCHECKS"},
     .type = OPT_STRING,
     .offset = FIELD(enable_healthchecks),
     .help = "`all` or a comma-separated list of XIDs that make a GPU Unhealthy even if ignored"},
    {.flag = "v",
     .env = {"LOG_LEVEL"},
     .type = OPT_INT,
     .offset = FIELD(verbosity),
     .def = "0",
     .min = 0,
     .max = 10,
     .help = "log verbosity"},
    {.flag = "help", .alias = {"h"}, .type = OPT_HELP, .help = "show this help"},
    {.flag = "version", .type = OPT_VERSION, .help = "show the version"},
};

static const struct options_table table = {
    .program = PROGRAM,
    .version = GP_VERSION,
    .summary = "The gpupool DRA kubelet plugin: prepares ResourceClaims for this node's GPUs "
               "and enforces memory shares with libgpupool-cuda.",
    .specs = specs,
    .count = sizeof specs / sizeof specs[0],
};

struct daemon {
    struct dra_config cfg;
    char state_dir[PATH_MAX];
    char registration[PATH_MAX];
    char endpoint[PATH_MAX];
    struct nvml *nvml;
    struct gpu_inventory inv;
    bool have_inventory;
    struct dra_device_table devices;
    struct arena edits_arena;
    struct container_edits node_edits; /* in edits_arena */
    struct kube_client *kube;
    struct node_state state; /* per-GPU health: health.c writes, the plugin observes */
    bool have_state;
    struct health_monitor *health;
    struct pid_map *pid_map; /* claims' host pid maps; NULL without the library */
    struct dra_preparer preparer;
    bool have_preparer;
    struct rpc_runtime *rpc;
    struct dra_plugin *plugin;
    struct dra_slices *slices;
};

/* ---- the claim source: the API server -------------------------------------------- */

static int get_claim(void *ctx, const char *ns, const char *name, json_t **out, char *err,
                     size_t errlen)
{
    struct daemon *d = ctx;
    char path[600];
    if (snprintf(path, sizeof path, "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", ns,
                 name) >= (int)sizeof path)
        return gp_errf(err, errlen, "the claim's name is too long");
    /* namespace and name reach a URL path: DNS names only */
    for (const char *p = path; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' ||
              *p == '/'))
            return gp_errf(err, errlen, "namespace \"%.64s\" or name \"%.64s\" is not a DNS name",
                           ns, name);
    struct kube_error kerr = {0};
    if (kube_get(d->kube, path, out, &kerr) != 0) {
        if (kerr.http_status != 0)
            return gp_errf(err, errlen, "the API server answered %d %s: %s", kerr.http_status,
                           kerr.reason, kerr.message);
        return gp_errf(err, errlen, "%s: %s", kerr.reason, kerr.message);
    }
    return 0;
}

/* ---- ResourceSlices ------------------------------------------------------------------ */

/* The ResourceSlice publisher (dra_slices.h) over this node's inventory and
 * GPU state: it writes the pool and keeps it true (a kubelet restart
 * deletes it, a health change rewrites it). It follows the same state as
 * the health stream, so a GPU that turns UNHEALTHY there leaves the pool.
 * Started after the plugin serves: no slice names a device the kubelet
 * could not prepare yet. */
static int start_slices(struct daemon *d, char *err, size_t errlen)
{
    int cuda = 0; /* 12040 -> cudaDriverVersion "12.4.0"; 0: left out */
    if (d->nvml->SystemGetCudaDriverVersion == NULL ||
        d->nvml->SystemGetCudaDriverVersion(&cuda) != NVML_SUCCESS)
        cuda = 0;
    const struct dra_slices_options so = {
        .client = d->kube,
        .driver = d->cfg.driver_name,
        .node = d->cfg.node_name,
        .consumable = (enum dra_consumable)d->cfg.consumable_capacity,
        .cuda_driver_version = cuda,
    };
    if (dra_slices_start(&so, &d->inv, NULL, &d->slices, err, errlen) != 0 ||
        dra_slices_follow(d->slices, &d->state, err, errlen) != 0)
        return -1;
    return 0;
}

/* Leaves the slices in place: a restarted plugin takes them over. */
static void stop_slices(struct daemon *d)
{
    char err[GP_ERR_LEN];
    if (dra_slices_stop(d->slices, false, err, sizeof err) != 0)
        log_warn("stopping the ResourceSlice publisher: %s", err);
    d->slices = NULL;
}

/* ---- health ------------------------------------------------------------------------------ */

/* Every DRA device's health from the GPU state (a GPU's change reaches its
 * MIG devices and a MIG device's its GPU: node_state.h applies the rule,
 * so each device simply reads its own record). The plugin sends the health
 * stream only when some device changed. */
static void sync_health(struct daemon *d)
{
    for (size_t i = 0; i < d->devices.count; i++) {
        const struct dra_node_device *dev = &d->devices.devices[i];
        bool healthy = node_state_healthy(&d->state, dev->gpu, dev->mig);
        const char *why = node_state_gpu_lost(&d->state, dev->gpu)
                              ? "the GPU is lost (fallen off the bus, or NVML cannot read it)"
                              : "a critical XID error, or NVML probes failing (the plugin's "
                                "log has it); it recovers after good probes";
        dra_plugin_set_health(d->plugin, i, healthy, healthy ? NULL : why);
    }
}

/* node_state observer: runs on the health thread, one change at a time. */
static void on_health_change(void *ctx, const struct node_state_change *change)
{
    (void)change;
    sync_health(ctx);
}

static int start_health(struct daemon *d, char *err, size_t errlen)
{
    if (node_state_add_observer(&d->state, d, on_health_change) != 0)
        return gp_errf(err, errlen, "cannot observe the GPUs' health: too many observers");
    sync_health(d); /* lost GPUs are unhealthy from the start */
    struct gp_config policy = {0};
    policy.health_recovery_probes = d->cfg.health_recovery_probes;
    policy.health_probe_interval_ms = d->cfg.health_probe_interval_ms;
    policy.disable_healthchecks = d->cfg.disable_healthchecks;
    policy.enable_healthchecks = d->cfg.enable_healthchecks;
    char why[GP_ERR_LEN];
    if (health_monitor_start(d->nvml, &d->inv, &d->state, NULL, &policy, &d->health, why,
                             sizeof why) != 0)
        log_warn("Failed to start health checks: %s", why);
    return 0;
}

/* ---- setup ------------------------------------------------------------------------------ */

static int install_isolation(struct daemon *d, char *err, size_t errlen)
{
    if (d->cfg.isolation_library[0] == '\0') {
        log_warn("--isolation-library is empty: no GPU-memory limits on this node; claims for a "
                 "share of a GPU are refused");
        return 0;
    }
    if (d->cfg.isolation_dir[0] != '/')
        return gp_errf(err, errlen, "--isolation-dir %s is not an absolute host path",
                       d->cfg.isolation_dir);
    struct gp_config iso = {0};
    iso.isolation_dir = d->cfg.isolation_dir;
    iso.isolation_library = d->cfg.isolation_library;
    return isolation_install(&iso, err, errlen);
}

static int setup(struct daemon *d, char *err, size_t errlen)
{
    struct dra_config *c = &d->cfg;
    if (c->node_name[0] == '\0')
        return gp_errf(err, errlen,
                       "--node-name (NODE_NAME) is required: it names this node's "
                       "pool");
    if (strchr(c->driver_name, '/') != NULL || c->driver_name[0] == '\0')
        return gp_errf(err, errlen, "--driver-name \"%s\" is not a DNS subdomain", c->driver_name);
    if (snprintf(d->registration, sizeof d->registration, "%s/plugins_registry/%s-reg.sock",
                 c->kubelet_root, c->driver_name) >= (int)sizeof d->registration ||
        snprintf(d->endpoint, sizeof d->endpoint, "%s/plugins/%s/dra.sock", c->kubelet_root,
                 c->driver_name) >= (int)sizeof d->endpoint)
        return gp_errf(err, errlen, "--kubelet-root-dir is too long");
    if (c->state_dir[0] != '\0')
        snprintf(d->state_dir, sizeof d->state_dir, "%s", c->state_dir);
    else
        snprintf(d->state_dir, sizeof d->state_dir, "%s/plugins/%s", c->kubelet_root,
                 c->driver_name);

    if (nvml_open(c->driver_root, &d->nvml, err, errlen) != 0 ||
        gpu_inventory_load(d->nvml, &d->inv, err, errlen) != 0)
        return -1;
    d->have_inventory = true;
    if (dra_devices_build(&d->inv, &d->devices, err, errlen) != 0 ||
        node_state_init(&d->state, &d->inv, err, errlen) != 0)
        return -1;
    d->have_state = true;
    for (size_t i = 0; i < d->devices.count; i++)
        log_info("device %s: %s, %llu MiB%s", d->devices.devices[i].name,
                 d->devices.devices[i].uuid,
                 (unsigned long long)(d->devices.devices[i].memory >> 20),
                 d->devices.devices[i].lost ? " (lost)" : "");

    struct kube_client_options ko = {
        .kubeconfig = c->kubeconfig[0] ? c->kubeconfig : NULL,
        .timeout_ms = API_TIMEOUT_MS,
        .retry = {.max_attempts = 3},
    };
    char kerr[GP_ERR_LEN];
    d->kube = kube_client_new(&ko, kerr, sizeof kerr);
    if (d->kube == NULL)
        return gp_errf(err, errlen,
                       "cannot configure the Kubernetes API client (--kubeconfig, KUBECONFIG or "
                       "the in-cluster service account): %s",
                       kerr);
    /* Before anything is served: a claim must never be promised a limit
     * the node cannot give. */
    if (install_isolation(d, err, errlen) != 0)
        return -1;
    /* What every GPU container needs of the driver, found once: the
     * device plugin's node-wide edits (devices/cdi.h), every hook on. */
    const struct cdi_options driver = {
        .driver_root = c->driver_root,
        .dev_root = c->dev_root[0] ? c->dev_root : c->driver_root,
        .container_driver_root = c->container_driver_root,
        .ctk_path = c->nvidia_ctk_path,
        .hook_create_symlinks = true,
        .hook_enable_cuda_compat = true,
        .hook_update_ldcache = true,
    };
    container_edits_init(&d->node_edits, &d->edits_arena);
    if (cdi_node_edits(&driver, &d->inv, &d->node_edits, err, errlen) != 0)
        return -1;
    const struct dra_edits_options edits = {
        .driver = c->driver_name,
        .cdi_root = c->cdi_root,
        .isolation_dir = c->isolation_library[0] ? c->isolation_dir : NULL,
        .dev_root = driver.dev_root,
        .node_edits = &d->node_edits,
    };
    const struct dra_claim_source source = {.get = get_claim, .ctx = d};
    if (dra_preparer_open(&d->preparer, d->state_dir, &edits, &d->devices, c->node_name, &source,
                          err, errlen) != 0)
        return -1;
    d->have_preparer = true;
    if (rpc_runtime_start(&d->rpc, err, errlen) != 0)
        return -1;
    const struct dra_plugin_options po = {
        .driver = c->driver_name,
        .pool = c->node_name,
        .registration_path = d->registration,
        .endpoint = d->endpoint,
        .devices = &d->devices,
        .preparer = &d->preparer,
    };
    if (dra_plugin_start(d->rpc, &po, &d->plugin, err, errlen) != 0 ||
        start_health(d, err, errlen) != 0)
        return -1;
    /* Each limited claim's containers learn their processes' host pids: NVML's
     * process utilization and the compute limit inside them need it (docs/isolation.md). */
    char why[GP_ERR_LEN];
    if (c->isolation_library[0] != '\0' &&
        pid_map_start(c->isolation_dir, ISOLATION_CLAIMS_NAME, d->nvml, &d->inv, &d->pid_map, why,
                      sizeof why) != 0)
        log_warn("Claims' NVML process utilization and compute limits stay blind: %s", why);
    return start_slices(d, err, errlen);
}

static void teardown(struct daemon *d)
{
    stop_slices(d);
    pid_map_stop(d->pid_map); /* before NVML and the inventory go */
    d->pid_map = NULL;
    /* the monitor writes the state, whose observer feeds the plugin */
    health_monitor_stop(d->health);
    d->health = NULL;
    if (d->have_state)
        node_state_remove_observer(&d->state, d, on_health_change);
    dra_plugin_stop(d->plugin);
    d->plugin = NULL;
    if (d->rpc != NULL)
        rpc_runtime_stop(d->rpc);
    d->rpc = NULL;
    if (d->have_preparer)
        dra_preparer_close(&d->preparer);
    d->have_preparer = false;
    kube_client_free(d->kube);
    d->kube = NULL;
    if (d->have_state)
        node_state_free(&d->state);
    d->have_state = false;
    dra_devices_free(&d->devices);
    arena_free(&d->edits_arena);
    if (d->have_inventory)
        gpu_inventory_free(&d->inv);
    d->have_inventory = false;
    nvml_close(d->nvml);
    d->nvml = NULL;
}

static int event_loop(struct daemon *d, int signal_fd, int timer_fd)
{
    unsigned ticks = 0;
    struct pollfd fds[2] = {{.fd = signal_fd, .events = POLLIN},
                            {.fd = timer_fd, .events = POLLIN}};
    for (;;) {
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            log_error("poll: %s", strerror(errno));
            return 1;
        }
        if (fds[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(signal_fd, &si, sizeof si) == (ssize_t)sizeof si) {
                log_info("Received signal \"%s\", shutting down.", strsignal((int)si.ssi_signo));
                return 0;
            }
        }
        if (fds[1].revents & POLLIN) {
            uint64_t n;
            char err[GP_ERR_LEN];
            if (read(timer_fd, &n, sizeof n) < 0)
                continue;
            if (dra_plugin_check_sockets(d->plugin, err, sizeof err) < 0) {
                log_error("cannot serve again: %s", err);
                return 1;
            }
            if (++ticks % (DRA_HEALTH_RESEND_S / CHECK_INTERVAL_S) == 0)
                dra_plugin_refresh_health(d->plugin);
        }
    }
}

int dra_daemon_run(int argc, char **argv, char **envp)
{
    struct daemon d = {0};
    char err[GP_ERR_LEN * 2];
    signal(SIGPIPE, SIG_IGN);
    enum options_result r = options_load(&table, &d.cfg, argc, argv, envp, err, sizeof err);
    if (r != OPTIONS_OK) {
        if (r == OPTIONS_ERROR)
            fprintf(stderr, PROGRAM ": %s\n", err);
        return r == OPTIONS_EXIT ? 0 : 2;
    }
    /* Blocked before any thread exists: gRPC's, the worker and NVML's
     * inherit the mask, and signals reach only the signalfd. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    log_set_verbosity(d.cfg.verbosity);
    log_info("Starting " PROGRAM " %s (driver %s, node %s)", GP_VERSION, d.cfg.driver_name,
             d.cfg.node_name);
    int status = 1;
    int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);
    int timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct itimerspec every = {.it_interval = {CHECK_INTERVAL_S, 0},
                               .it_value = {CHECK_INTERVAL_S, 0}};
    if (signal_fd < 0 || timer_fd < 0 || timerfd_settime(timer_fd, 0, &every, NULL) != 0) {
        log_error("cannot create event descriptors: %s", strerror(errno));
    } else if (setup(&d, err, sizeof err) != 0) {
        log_error("%s", err);
        fprintf(stderr, PROGRAM ": %s\n", err);
    } else {
        status = event_loop(&d, signal_fd, timer_fd);
    }
    teardown(&d);
    if (signal_fd >= 0)
        close(signal_fd);
    if (timer_fd >= 0)
        close(timer_fd);
    options_free(&table, &d.cfg);
    log_info(PROGRAM " exiting with status %d", status);
    return status;
}

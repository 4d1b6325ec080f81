/* daemon.c -- the device plugin's supervisor (see daemon.h). */
#include "daemon.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "cdi.h"
#include "clock.h"
#include "config.h"
#include "gpu.h"
#include "gpumem_service.h"
#include "health.h"
#include "isolation.h"
#include "log.h"
#include "mps_control.h"
#include "plugin_metrics.h"
#include "nodelabels.h"
#include "pid_map.h"
#include "nvml.h"
#include "plugin.h"
#include "rpc.h"

#define DAEMON_DEFAULT_SOCKET_DIR "/var/lib/kubelet/device-plugins"
#define DAEMON_REGISTER_TIMEOUT_MS 5000
#define DAEMON_RETRY_MIN_MS 250  /* retries: the delay doubles per failure ... */
#define DAEMON_RETRY_MAX_MS 5000 /* ... up to this */
/* A kubelet socket event starts a fresh, short sequence instead: the new
 * kubelet creates its socket a moment before it listens, and a pod
 * admitted before we re-register fails for good. 10, 20, 40, 40, ... ms
 * for 5 s, whatever the slow delay had grown to; then the slow one again. */
#define DAEMON_FAST_RETRY_MIN_MS 10
#define DAEMON_FAST_RETRY_MAX_MS 40
#define DAEMON_FAST_RETRY_WINDOW_MS 5000
#define DAEMON_ERR_LEN 1024

enum setup_result { SETUP_SERVING = 0, SETUP_IDLE = 1, SETUP_FATAL = -1 };

struct daemon {
    int argc;
    char **argv;
    char **envp;
    struct gp_config cfg;
    struct nvml *nvml;
    struct gpu_inventory inv;
    bool have_inventory;
    struct plugin_node node;
    bool have_node;
    /* Per resource: CLOCK_REALTIME of its registration; {0, 0} = not registered. */
    struct timespec *registered_at;
    /* Per resource: its server (owned), NULL while not serving; allocated with
     * registered_at. */
    struct rpc_server **servers;
    struct rpc_runtime *rpc;
    struct rpc_client *kubelet; /* pre-connected for the first registration, then NULL */
    struct health_monitor *health;
    /* The services beside the node are the daemon's: it starts them, they
     * (or the daemon) register with the node, and it stops them. */
    struct gpumem_service *gpumem;  /* --resource-mode=gpu-mem; NULL otherwise */
    struct plugin_metrics *metrics; /* --metrics-addr; NULL = off; lives across reloads */
    struct mps_control *mps;        /* sharing.mps's control daemons; NULL = none */
    struct pid_map *pid_map;        /* limited containers' pid maps; NULL = no isolation */
    struct node_labeler *labeler;   /* --node-labels; NULL = off */
    char socket_dir[PATH_MAX];
    const char *kubelet_socket_name; /* basename inside socket_dir; NULL = no registration */
    int signal_fd, inotify_fd, timer_fd;
    int watch; /* inotify watch descriptor, -1 when none */
    /* While socket_dir is missing: a watch on its nearest existing ancestor,
     * which reports the next path component's creation (-1 when none). */
    int ancestor_watch;
    char ancestor[PATH_MAX];
    int retry_ms;           /* next retry delay */
    int64_t fast_until_ms;  /* clock_now_ms() end of the fast sequence; 0 = none */
    unsigned fast_failures; /* failed attempts in it (logged once, then at -v 1) */
};

/* ---- small helpers ------------------------------------------------------ */

static bool in_fast_retries(const struct daemon *d)
{
    return d->fast_until_ms != 0 && clock_now_ms() < d->fast_until_ms;
}

/* Schedules the next retry (replacing any pending one) and backs off:
 * doubling up to DAEMON_FAST_RETRY_MAX_MS inside a fast sequence, else up
 * to DAEMON_RETRY_MAX_MS. A successful registration resets the delay. */
static void arm_retry(struct daemon *d)
{
    struct itimerspec its = {.it_value = {.tv_sec = d->retry_ms / 1000,
                                          .tv_nsec = (long)(d->retry_ms % 1000) * 1000000L}};
    if (timerfd_settime(d->timer_fd, 0, &its, NULL) != 0)
        log_error("cannot arm the retry timer: %s", strerror(errno));
    bool fast = in_fast_retries(d);
    int max = fast ? DAEMON_FAST_RETRY_MAX_MS : DAEMON_RETRY_MAX_MS;
    if (!fast && d->retry_ms < DAEMON_RETRY_MIN_MS)
        d->retry_ms = DAEMON_RETRY_MIN_MS; /* the fast sequence is over */
    else if (d->retry_ms < max)
        d->retry_ms = d->retry_ms * 2 < max ? d->retry_ms * 2 : max;
}

/* A kubelet socket event: the next attempts come 10, 20, 40 ms apart
 * whatever the slow delay had grown to. */
static void start_fast_retries(struct daemon *d)
{
    d->fast_until_ms = clock_now_ms() + DAEMON_FAST_RETRY_WINDOW_MS;
    d->fast_failures = 0;
    d->retry_ms = DAEMON_FAST_RETRY_MIN_MS;
}

static void resolve_socket_dir(struct daemon *d)
{
    const char *sock = d->cfg.kubelet_socket;
    d->kubelet_socket_name = NULL;
    if (sock == NULL || sock[0] == '\0') {
        snprintf(d->socket_dir, sizeof d->socket_dir, "%s", DAEMON_DEFAULT_SOCKET_DIR);
        return;
    }
    const char *slash = strrchr(sock, '/');
    if (slash == NULL) {
        snprintf(d->socket_dir, sizeof d->socket_dir, ".");
        d->kubelet_socket_name = sock;
    } else {
        int len = slash == sock ? 1 : (int)(slash - sock);
        snprintf(d->socket_dir, sizeof d->socket_dir, "%.*s", len, sock);
        d->kubelet_socket_name = slash + 1;
    }
}

static void drop_ancestor_watch(struct daemon *d)
{
    /* A removed ancestor's watch is gone already (EINVAL): nothing to undo. */
    if (d->ancestor_watch >= 0 && d->ancestor_watch != d->watch)
        (void)inotify_rm_watch(d->inotify_fd, d->ancestor_watch);
    d->ancestor_watch = -1;
    d->ancestor[0] = '\0';
}

/* The nearest existing directory above socket_dir (which is missing) into
 * `out`; "/" or "." at worst, which always exist. */
static void nearest_ancestor(const struct daemon *d, char *out, size_t len)
{
    snprintf(out, len, "%s", d->socket_dir);
    for (;;) {
        char *slash = strrchr(out, '/');
        if (slash == NULL) {
            snprintf(out, len, ".");
            return;
        }
        if (slash == out) {
            out[1] = '\0';
            return;
        }
        *slash = '\0';
        struct stat st;
        if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
            return;
    }
}

/* Watches socket_dir; true when a new watch was placed (the directory has
 * just been found). While it is missing, the nearest existing ancestor is
 * watched instead, so that the directory's re-creation is seen at once
 * rather than at the next slow retry (up to 5 s later): a kubelet started
 * on a fresh root creates the directory and its socket within
 * milliseconds. Each event there comes back here, one component deeper
 * until the directory itself exists. */
static bool watch_socket_dir(struct daemon *d)
{
    if (d->watch >= 0)
        return false;
    /* Bounded: each pass either ends or moves to another ancestor, which a
     * racing rm -rf / mkdir -p can make happen a few times at most. */
    for (int pass = 0; pass < 8; pass++) {
        d->watch = inotify_add_watch(d->inotify_fd, d->socket_dir,
                                     IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM |
                                         IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
        if (d->watch >= 0) {
            drop_ancestor_watch(d);
            return true;
        }
        if (errno != ENOENT)
            break;
        char up[PATH_MAX];
        nearest_ancestor(d, up, sizeof up);
        if (d->ancestor_watch >= 0 && strcmp(up, d->ancestor) == 0)
            return false; /* already watched; its next creation brings us back */
        int wd =
            inotify_add_watch(d->inotify_fd, up,
                              IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR);
        if (wd < 0)
            continue; /* removed meanwhile: look again */
        if (wd != d->ancestor_watch)
            drop_ancestor_watch(d);
        d->ancestor_watch = wd;
        snprintf(d->ancestor, sizeof d->ancestor, "%s", up);
        /* and look again: the directory may have appeared before the
         * watch was in place, and then no event will tell us */
    }
    log_warn("cannot watch %s for kubelet restarts (%s); retrying in %d ms", d->socket_dir,
             strerror(errno), d->retry_ms);
    arm_retry(d);
    return false;
}

/* Forgets both watches (the directory may change on SIGHUP). */
static void unwatch_socket_dir(struct daemon *d)
{
    drop_ancestor_watch(d);
    if (d->watch >= 0)
        (void)inotify_rm_watch(d->inotify_fd, d->watch);
    d->watch = -1;
}

static void socket_path(const struct daemon *d, size_t resource, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", d->socket_dir,
             plugin_node_resource(&d->node, resource)->socket_name);
}

/* ---- registration ------------------------------------------------------- */

static bool is_registered(const struct daemon *d, size_t i)
{
    return d->registered_at[i].tv_sec != 0 || d->registered_at[i].tv_nsec != 0;
}

/* Fails fast when nothing answers on the socket (a kubelet that is
 * restarting): the retry timer and inotify bring the next attempt, and the
 * main loop never sits in a call while signals and events wait. */
static int register_with_kubelet(struct daemon *d, const struct rpc_buf *req, char *err,
                                 size_t errlen)
{
    struct rpc_client *client = d->kubelet;
    if (client == NULL && rpc_client_open(d->rpc, d->cfg.kubelet_socket, &client, err, errlen) != 0)
        return -1;
    int rc = rpc_client_call(client, PLUGIN_REGISTER_METHOD, req->data, req->len,
                             DAEMON_REGISTER_TIMEOUT_MS, false, NULL, err, errlen);
    if (client != d->kubelet)
        rpc_client_close(client);
    return rc;
}

static void register_one(struct daemon *d, size_t i)
{
    const struct resource *res = plugin_node_resource(&d->node, i);
    char err[DAEMON_ERR_LEN];
    struct rpc_buf req = {0};

    if (d->kubelet_socket_name == NULL) {
        /* --kubelet-socket "": serve without registering */
        clock_gettime(CLOCK_REALTIME, &d->registered_at[i]);
        return;
    }
    struct stat st;
    if (stat(d->cfg.kubelet_socket, &st) != 0) {
        /* Not blocking here keeps signals responsive; inotify reports the
         * socket's creation and the retry timer covers a missed event. */
        if (d->retry_ms == DAEMON_RETRY_MIN_MS)
            log_info("Waiting for the kubelet socket %s to register '%s'", d->cfg.kubelet_socket,
                     res->name);
        arm_retry(d);
        return;
    }
    if (plugin_node_register_request(&d->node, i, &req) != 0) {
        log_error("cannot encode the registration of %s: out of memory", res->name);
        arm_retry(d);
        return;
    }
    int rc = register_with_kubelet(d, &req, err, sizeof err);
    metrics_count_registration(d->metrics, res->name, rc == 0);
    if (rc == 0) {
        d->retry_ms = in_fast_retries(d) ? DAEMON_FAST_RETRY_MIN_MS : DAEMON_RETRY_MIN_MS;
        clock_gettime(CLOCK_REALTIME, &d->registered_at[i]);
        log_info("Registered device plugin for '%s' with Kubelet (endpoint %s, %zu devices)",
                 res->name, res->socket_name, res->device_count);
    } else if (in_fast_retries(d) && d->fast_failures++ > 0) {
        /* the kubelet is starting: one error line per sequence is enough */
        log_v(1,
              "Could not register device plugin for '%s' with Kubelet at %s: %s; retrying in %d ms",
              res->name, d->cfg.kubelet_socket, err, d->retry_ms);
        arm_retry(d);
    } else {
        log_error("Could not register device plugin for '%s' with Kubelet at %s: %s; "
                  "retrying in %d ms",
                  res->name, d->cfg.kubelet_socket, err, d->retry_ms);
        arm_retry(d);
    }
    free(req.data);
}

/* ---- servers ------------------------------------------------------------ */

static void stop_servers(struct daemon *d)
{
    if (!d->have_node || d->servers == NULL)
        return;
    for (size_t i = 0; i < plugin_node_resource_count(&d->node); i++) {
        struct rpc_server *srv = d->servers[i];
        if (srv == NULL)
            continue;
        plugin_node_attach_server(&d->node, i, NULL);
        rpc_server_stop(srv);
        d->servers[i] = NULL;
        d->registered_at[i] = (struct timespec){0, 0};
    }
}

/* Returns -1 only when another live process serves one of our sockets:
 * taking it over would break that process, so we refuse to run. */
/* Starts the server of resource i if it is not running. Returns -1 only
 * when another live process serves the socket: taking it over would break
 * that process, so we refuse to run. */
static int start_server(struct daemon *d, size_t i)
{
    char err[DAEMON_ERR_LEN], path[PATH_MAX + RESOURCE_SOCKET_LEN];
    if (d->servers[i] != NULL)
        return 0;
    struct rpc_handlers h = plugin_node_handlers(&d->node, i);
    struct rpc_server *srv = NULL;
    socket_path(d, i, path, sizeof path);
    if (rpc_server_start(d->rpc, path, &h, &srv, err, sizeof err) != 0) {
        if (strstr(err, "another live process") != NULL) {
            log_error("%s", err);
            return -1;
        }
        log_error("Could not start device plugin for '%s' on %s: %s; retrying in %d ms",
                  plugin_node_resource(&d->node, i)->name, path, err, d->retry_ms);
        arm_retry(d);
        return 0;
    }
    d->servers[i] = srv;
    plugin_node_attach_server(&d->node, i, srv);
    log_info("Starting GRPC server for '%s' on %s", plugin_node_resource(&d->node, i)->name, path);
    return 0;
}

/* Each resource registers as soon as its own server runs, so the kubelet
 * sees the first resource without waiting for the others' servers. */
static int start_servers(struct daemon *d)
{
    for (size_t i = 0; i < plugin_node_resource_count(&d->node); i++) {
        if (start_server(d, i) != 0)
            return -1;
        if (!is_registered(d, i) && d->servers[i] != NULL)
            register_one(d, i);
    }
    return 0;
}

static int restart_servers(struct daemon *d, const char *why)
{
    if (!d->have_node)
        return 0;
    log_info("%s: restarting device plugin servers", why);
    stop_servers(d);
    return start_servers(d);
}

/* ---- setup / teardown ------------------------------------------------------ */

/* The node's allocate observer when metrics are on (plugin.h). */
static void observe_allocate(void *ctx, const char *resource, double seconds, bool ok)
{
    metrics_observe_allocate(ctx, resource, seconds, ok);
}

static void teardown(struct daemon *d)
{
    /* Scrapes stop reading the node and NVML before they are freed. */
    metrics_attach(d->metrics, NULL, NULL, NULL);
    nodelabels_stop(d->labeler);
    d->labeler = NULL;
    pid_map_stop(d->pid_map);
    d->pid_map = NULL;
    mps_control_stop(d->mps); /* after the servers: no Allocate hands out a stopped pipe */
    d->mps = NULL;
    health_monitor_stop(d->health);
    d->health = NULL;
    stop_servers(d);
    gpumem_service_stop(d->gpumem); /* after the servers: parked calls are cancelled */
    d->gpumem = NULL;
    if (d->have_node) {
        if (d->metrics != NULL)
            plugin_node_remove_allocate_observer(&d->node, d->metrics, observe_allocate);
        plugin_node_free(&d->node);
    }
    d->have_node = false;
    free(d->registered_at);
    d->registered_at = NULL;
    free(d->servers);
    d->servers = NULL;
    if (d->have_inventory)
        gpu_inventory_free(&d->inv);
    d->have_inventory = false;
    nvml_close(d->nvml);
    d->nvml = NULL;
}

/* NVML or the GPUs cannot be used: fatal with failOnInitError, else idle
 * (a DaemonSet also lands on nodes without GPUs). */
static enum setup_result init_failure(struct daemon *d, const char *what, const char *err)
{
    if (d->cfg.fail_on_init_error) {
        log_error("%s: %s", what, err);
        log_error("If this is a GPU node, check that the NVIDIA driver is loaded, that "
                  "--driver-root/NVIDIA_DRIVER_ROOT points at it and that the container runtime "
                  "exposes it. If this is not a GPU node, deploy the plugin with "
                  "--fail-on-init-error=false to let it idle.");
        return SETUP_FATAL;
    }
    log_warn("%s: %s", what, err);
    log_info("No devices found. Waiting indefinitely.");
    return SETUP_IDLE;
}

static void log_inventory(const struct gpu_inventory *inv)
{
    for (size_t i = 0; i < inv->count; i++) {
        const struct gpu_device *g = &inv->gpus[i];
        log_info("GPU %u: %s %s, %llu MiB, PCI %s, NUMA %d, CC %d.%d, MIG %s (%zu devices)",
                 g->index, g->uuid, g->name, g->memory_bytes >> 20, g->pci_bus_id, g->numa_node,
                 g->cc_major, g->cc_minor,
                 g->mig_enabled ? "enabled" : (g->mig_capable ? "disabled" : "unsupported"),
                 g->mig_count);
    }
}

/* The configuration, narrowed to what the CDI spec writer reads. */
static struct cdi_options cdi_options_from(const struct gp_config *cfg)
{
    unsigned off = cfg->cdi_disabled_hooks;
    return (struct cdi_options){
        .driver_root = cfg->nvidia_driver_root,
        .dev_root = cfg->nvidia_dev_root,
        .container_driver_root = cfg->container_driver_root,
        .ctk_path = cfg->nvidia_ctk_path,
        .hook_create_symlinks = !(off & CDI_HOOK_CREATE_SYMLINKS),
        .hook_enable_cuda_compat = !(off & CDI_HOOK_ENABLE_CUDA_COMPAT),
        .hook_update_ldcache = !(off & CDI_HOOK_UPDATE_LDCACHE),
        .persistenced_socket = cfg->cdi_feature_flags & CDI_FEATURE_INCLUDE_PERSISTENCED_SOCKET,
        .id_by_index = cfg->device_id_strategy == DEVICE_ID_INDEX,
        .spec_dir = cfg->cdi_spec_dir,
    };
}

enum build_result { BUILD_OK = 0, BUILD_DOES_NOT_APPLY = -1, BUILD_NO_CDI_SPEC = -2 };

/* The resources of inv under cfg, and their CDI spec when a cdi-*
 * strategy asks for one: everything that can fail on a configuration that
 * parses, so that a reload finds out before it stops the running state.
 * On failure err says why and the node is left unbuilt. */
static enum build_result build_node(const struct gp_config *cfg, const struct gpu_inventory *inv,
                                    struct plugin_node *node, char *err, size_t errlen)
{
    if (plugin_node_init(node, cfg, inv, err, errlen) != 0)
        return BUILD_DOES_NOT_APPLY;
    struct cdi_options cdi = cdi_options_from(cfg);
    if (config_uses_cdi(cfg) &&
        cdi_write_spec(&cdi, inv, plugin_node_resources(node), err, errlen) != 0) {
        plugin_node_free(node);
        return BUILD_NO_CDI_SPEC;
    }
    return BUILD_OK;
}

/* At start a spec that cannot be replaced (a read-only or full
 * --cdi-spec-dir) is not fatal when one is already there: the runtime
 * resolves the devices from it, and stopping would take every GPU of the
 * node away. Without any spec, pods could not start: fatal as before. */
static bool cdi_spec_present(const struct gp_config *cfg)
{
    char path[PATH_MAX];
    struct stat st;
    return snprintf(path, sizeof path, "%s/%s", cfg->cdi_spec_dir, CDI_SPEC_FILE) <
               (int)sizeof path &&
           stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* Serves d->node (built from d->inv under d->cfg): health monitoring,
 * servers. No node means no GPUs. */
static enum setup_result serve(struct daemon *d)
{
    char err[DAEMON_ERR_LEN];

    if (!d->have_node || plugin_node_resource_count(&d->node) == 0) {
        log_info("No devices found. Waiting indefinitely.");
        return SETUP_IDLE;
    }
    /* Before anything is served: a container must never be promised a
     * limit the node cannot give (docs/gpumem.md, "Memory limits"). */
    if (isolation_active(&d->cfg) && isolation_install(&d->cfg, err, sizeof err) != 0) {
        log_error("Cannot enforce GPU-memory limits (--isolation=memory): %s", err);
        return SETUP_FATAL;
    }
    /* MPS before the replicas are advertised: a container given a pipe
     * must find a daemon behind it (docs/mps.md). */
    if (mps_control_start(&d->cfg, &d->inv, &d->node, &d->mps, err, sizeof err) != 0)
        return init_failure(d, "MPS cannot run (sharing.mps)", err);
    if (d->cfg.resource_mode == RESOURCE_MODE_GPU_MEM &&
        gpumem_service_start(&d->cfg, &d->inv, &d->node, d->rpc, &d->gpumem, err, sizeof err) !=
            0) {
        log_error("Cannot serve GPU memory (--resource-mode=gpu-mem): %s", err);
        return SETUP_FATAL;
    }
    size_t n = plugin_node_resource_count(&d->node);
    d->registered_at = calloc(n, sizeof *d->registered_at);
    d->servers = calloc(n, sizeof *d->servers);
    if (d->registered_at == NULL || d->servers == NULL) {
        log_error("out of memory");
        return SETUP_FATAL;
    }
    if (d->metrics != NULL &&
        plugin_node_add_allocate_observer(&d->node, d->metrics, observe_allocate) != 0) {
        log_error("cannot observe Allocate for the metrics: too many observers");
        return SETUP_FATAL;
    }
    metrics_attach(d->metrics, d->nvml, &d->inv, &d->node);
    metrics_set_pod_resources(d->metrics, d->rpc, d->cfg.pod_resources_socket);
    /* Containers' live use: their regions, named through the gpu-mem
     * view (no view in the other modes: regions and processes keep the
     * directory name, docs/metrics.md). */
    const struct usage_names names = {d->gpumem, gpumem_service_name_container};
    metrics_set_usage_source(d->metrics, isolation_active(&d->cfg) ? d->cfg.isolation_dir : NULL,
                             d->gpumem != NULL ? &names : NULL);
    /* Each limited container learns its processes' host pids (for NVML's
     * process utilization inside it, docs/isolation.md). */
    if (isolation_active(&d->cfg) &&
        pid_map_start(d->cfg.isolation_dir, ISOLATION_CONTAINERS_NAME, d->nvml, &d->inv,
                      &d->pid_map, err, sizeof err) != 0)
        log_warn("Containers' NVML process utilization will stay empty: %s", err);
    /* Labels are written on their own thread: the API server never
     * delays the kubelet seeing the devices. */
    if (d->cfg.node_labels && nodelabels_start(&d->cfg, &d->inv, &d->labeler, err, sizeof err) != 0)
        log_error("Cannot write node labels (--node-labels): %s", err);
    /* Health first: an XID between registration and the event set's
     * creation would otherwise be lost. */
    if (health_monitor_start(d->nvml, &d->inv, plugin_node_state(&d->node), d->metrics, &d->cfg,
                             &d->health, err, sizeof err) != 0)
        log_warn("Failed to start health checks: %s", err);
    watch_socket_dir(d);
    if (start_servers(d) != 0)
        return SETUP_FATAL;
    return SETUP_SERVING;
}

static enum setup_result setup(struct daemon *d)
{
    char err[DAEMON_ERR_LEN];

    if (config_check_host(&d->cfg, err, sizeof err) != 0) {
        log_error("Invalid configuration for this node: %s", err);
        return SETUP_FATAL;
    }
    if (nvml_open(d->cfg.nvidia_driver_root, &d->nvml, err, sizeof err) != 0)
        return init_failure(d, "Failed to initialize NVML", err);
    if (gpu_inventory_load(d->nvml, &d->inv, err, sizeof err) != 0)
        return init_failure(d, "Failed to enumerate GPUs", err);
    d->have_inventory = true;
    log_inventory(&d->inv);
    if (d->inv.count > 0) {
        enum build_result built = build_node(&d->cfg, &d->inv, &d->node, err, sizeof err);
        char cdi_err[DAEMON_ERR_LEN];
        if (built == BUILD_NO_CDI_SPEC && cdi_spec_present(&d->cfg) &&
            plugin_node_init(&d->node, &d->cfg, &d->inv, cdi_err, sizeof cdi_err) == 0) {
            log_error("Cannot replace the CDI spec (--device-list-strategy cdi-*): %s; serving "
                      "with the spec already in %s (gpupool_deviceplugin_file_write_errors_total "
                      "counts it; a SIGHUP writes it again)",
                      err, d->cfg.cdi_spec_dir);
            built = BUILD_OK;
        }
        if (built != BUILD_OK) {
            log_error("%s: %s",
                      built == BUILD_NO_CDI_SPEC
                          ? "Failed to write the CDI spec (--device-list-strategy cdi-*)"
                          : "Invalid configuration for this node",
                      err);
            return SETUP_FATAL;
        }
        d->have_node = true;
    }
    return serve(d);
}

static void log_config(const struct gp_config *cfg)
{
    char *json = config_to_json(cfg);
    if (json == NULL) {
        log_warn("cannot render the configuration: out of memory");
        return;
    }
    log_info("Running with config:\n%s", json);
    free(json);
}

/* What a reload builds before it touches the running state. */
struct next_state {
    struct gp_config cfg;
    struct nvml *nvml;
    struct gpu_inventory inv;
    bool have_inventory;
    struct plugin_node node; /* built once, moved into the daemon */
    bool have_node;
};

static void next_state_free(struct next_state *next)
{
    if (next->have_node)
        plugin_node_free(&next->node);
    if (next->have_inventory)
        gpu_inventory_free(&next->inv);
    nvml_close(next->nvml);
    config_free(&next->cfg);
}

/* NVML, the inventory, the resources and the CDI spec, all for the new
 * configuration: anything that can make it unservable fails here, while
 * the running state is untouched (a failed spec write leaves the old spec
 * in place: the write is atomic). The resources are built once, so their
 * warnings are logged once per reload. NVML is opened a second time (its
 * init is reference-counted) so that a changed driver root takes effect. */
static int prepare_reload(struct next_state *next, const char **what, char *err, size_t errlen)
{
    *what = "the new configuration does not apply to this host";
    if (config_check_host(&next->cfg, err, errlen) != 0)
        return -1;
    *what = "cannot initialize NVML";
    if (nvml_open(next->cfg.nvidia_driver_root, &next->nvml, err, errlen) != 0)
        return -1;
    *what = "cannot enumerate GPUs";
    if (gpu_inventory_load(next->nvml, &next->inv, err, errlen) != 0)
        return -1;
    next->have_inventory = true;
    if (next->inv.count == 0)
        return 0;
    enum build_result built = build_node(&next->cfg, &next->inv, &next->node, err, errlen);
    if (built != BUILD_OK) {
        *what = built == BUILD_NO_CDI_SPEC
                    ? "cannot write the CDI spec (--device-list-strategy cdi-*)"
                    : "the new configuration does not apply to this node";
        return -1;
    }
    next->have_node = true;
    return 0;
}

/* SIGHUP: the new state is built first; the running one stays in force,
 * served and registered, when the new one is invalid or does not apply
 * (whatever --fail-on-init-error says: stopping would only take the
 * node's GPUs away). */
static enum setup_result reload(struct daemon *d)
{
    struct next_state next = {0};
    char err[DAEMON_ERR_LEN];
    enum setup_result running = d->have_node ? SETUP_SERVING : SETUP_IDLE;
    enum config_result r = config_load(&next.cfg, d->argc, d->argv, d->envp, err, sizeof err);
    if (r != CONFIG_OK) {
        if (r == CONFIG_ERROR)
            log_error("SIGHUP: keeping the running configuration, the new one is invalid: %s", err);
        if (r == CONFIG_EXIT)
            config_free(&next.cfg);
        return running;
    }
    log_info("Received SIGHUP, building the new state from the reloaded configuration");
    const char *what = NULL;
    if (prepare_reload(&next, &what, err, sizeof err) != 0) {
        log_error("SIGHUP: keeping the running configuration and devices: %s: %s", what, err);
        next_state_free(&next);
        return running;
    }
    log_info("SIGHUP: the new state is valid; restarting with it");
    if (strcmp(next.cfg.metrics_addr.text ? next.cfg.metrics_addr.text : "",
               d->cfg.metrics_addr.text ? d->cfg.metrics_addr.text : "") != 0)
        log_warn("SIGHUP: --metrics-addr changed; the metrics server keeps its address until "
                 "the plugin restarts");
    teardown(d);
    config_free(&d->cfg);
    d->cfg = next.cfg;
    d->nvml = next.nvml;
    d->inv = next.inv;
    d->have_inventory = true;
    if (next.have_node) {
        plugin_node_move(&d->node, &next.node, &d->cfg, &d->inv);
        d->have_node = true;
    }
    log_set_verbosity(d->cfg.verbosity);
    unwatch_socket_dir(d); /* serve() watches the new configuration's directory */
    resolve_socket_dir(d);
    log_config(&d->cfg);
    log_inventory(&d->inv);
    return serve(d);
}

/* ---- events --------------------------------------------------------------- */

static bool is_our_socket_gone(const struct daemon *d, const char *name)
{
    if (!d->have_node)
        return false;
    for (size_t i = 0; i < plugin_node_resource_count(&d->node); i++) {
        if (strcmp(name, plugin_node_resource(&d->node, i)->socket_name) != 0)
            continue;
        char path[PATH_MAX + RESOURCE_SOCKET_LEN];
        struct stat st;
        socket_path(d, i, path, sizeof path);
        /* Our own restart deletes and re-creates the file; only a socket
         * that is still missing means somebody else removed it. */
        return stat(path, &st) != 0;
    }
    return false;
}

/* The kubelet that created its socket at `created` already has our
 * registration when every resource registered after that moment. This
 * folds the two events of one kubelet restart (our sockets deleted, its
 * socket created) into one re-registration. */
static bool registered_since_kubelet_start(const struct daemon *d)
{
    struct stat st;
    if (!d->have_node || d->registered_at == NULL || stat(d->cfg.kubelet_socket, &st) != 0)
        return false;
    for (size_t i = 0; i < plugin_node_resource_count(&d->node); i++) {
        const struct timespec *t = &d->registered_at[i];
        if (!is_registered(d, i) || t->tv_sec < st.st_ctim.tv_sec ||
            (t->tv_sec == st.st_ctim.tv_sec && t->tv_nsec <= st.st_ctim.tv_nsec))
            return false;
    }
    return true;
}

/* socket_dir has just been watched again after it was missing. Our sockets
 * went with the old directory; a kubelet that already made its socket
 * there may not listen yet, so the short retry sequence starts as on the
 * socket's IN_CREATE (which came before our watch and is not reported). */
static const char *socket_dir_found(struct daemon *d)
{
    struct stat st;
    log_info("socket directory %s exists again; watching it", d->socket_dir);
    if (d->kubelet_socket_name != NULL && stat(d->cfg.kubelet_socket, &st) == 0)
        start_fast_retries(d);
    return "socket directory re-created";
}

/* Returns the restart reason, or NULL. */
static const char *read_inotify(struct daemon *d)
{
    _Alignas(struct inotify_event) char buf[4096];
    const char *why = NULL;
    bool look_again = false; /* the directory or an ancestor changed */
    for (;;) {
        ssize_t n = read(d->inotify_fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof *ev + ev->len;
            if (ev->wd == d->ancestor_watch && d->ancestor_watch >= 0) {
                /* Something was created in the ancestor (perhaps the next
                 * component of our path), or the ancestor went away. */
                if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF))
                    drop_ancestor_watch(d);
                look_again = true;
                continue;
            }
            if (ev->wd != d->watch || d->watch < 0)
                continue; /* a watch dropped earlier (its IN_IGNORED) */
            if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
                log_warn("socket directory %s was removed; watching for its return", d->socket_dir);
                /* a moved directory keeps its watch: drop it (harmless
                 * EINVAL when the kernel has removed it already) */
                (void)inotify_rm_watch(d->inotify_fd, d->watch);
                d->watch = -1;
                look_again = true;
                continue;
            }
            if (ev->len == 0)
                continue;
            if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && d->kubelet_socket_name &&
                strcmp(ev->name, d->kubelet_socket_name) == 0) {
                start_fast_retries(d);
                if (registered_since_kubelet_start(d))
                    log_v(1, "kubelet socket re-created; already registered with this kubelet");
                else
                    why = "inotify: kubelet socket created (kubelet restarted)";
            } else if ((ev->mask & (IN_DELETE | IN_MOVED_FROM)) && !why &&
                       is_our_socket_gone(d, ev->name))
                why = "inotify: plugin socket deleted";
        }
    }
    if (look_again && watch_socket_dir(d))
        why = socket_dir_found(d);
    return why;
}

enum loop_action { LOOP_CONTINUE, LOOP_EXIT, LOOP_FAIL };

static enum loop_action on_signal(struct daemon *d)
{
    struct signalfd_siginfo si;
    if (read(d->signal_fd, &si, sizeof si) != (ssize_t)sizeof si)
        return LOOP_CONTINUE;
    if (si.ssi_signo != SIGHUP) {
        log_info("Received signal \"%s\", shutting down.", strsignal((int)si.ssi_signo));
        return LOOP_EXIT;
    }
    return reload(d) == SETUP_FATAL ? LOOP_FAIL : LOOP_CONTINUE;
}

static enum loop_action on_timer(struct daemon *d)
{
    uint64_t expirations;
    if (read(d->timer_fd, &expirations, sizeof expirations) < 0)
        return LOOP_CONTINUE;
    /* the fallback when a watch could not be placed */
    if (watch_socket_dir(d))
        (void)socket_dir_found(d);
    if (d->have_node && d->registered_at != NULL)
        return start_servers(d) == 0 ? LOOP_CONTINUE : LOOP_FAIL;
    return LOOP_CONTINUE;
}

static int event_loop(struct daemon *d)
{
    struct pollfd fds[3] = {
        {.fd = d->signal_fd, .events = POLLIN},
        {.fd = d->inotify_fd, .events = POLLIN},
        {.fd = d->timer_fd, .events = POLLIN},
    };
    for (;;) {
        if (poll(fds, 3, -1) < 0) {
            if (errno == EINTR)
                continue;
            log_error("poll: %s", strerror(errno));
            return 1;
        }
        enum loop_action a = LOOP_CONTINUE;
        if (fds[0].revents & POLLIN)
            a = on_signal(d);
        if (a == LOOP_CONTINUE && (fds[1].revents & POLLIN)) {
            const char *why = read_inotify(d);
            if (why != NULL && restart_servers(d, why) != 0)
                a = LOOP_FAIL;
        }
        if (a == LOOP_CONTINUE && (fds[2].revents & POLLIN))
            a = on_timer(d);
        if (a != LOOP_CONTINUE)
            return a == LOOP_EXIT ? 0 : 1;
    }
}

/* ---- entry ------------------------------------------------------------------ */

/* The HTTP/2 handshake with the kubelet runs while NVML enumerates, which
 * takes it off the exec -> Register path. Best effort: on any failure the
 * registration opens its own channel. */
static void preconnect_kubelet(struct daemon *d)
{
    char err[DAEMON_ERR_LEN];
    struct stat st;
    if (d->kubelet_socket_name == NULL || stat(d->cfg.kubelet_socket, &st) != 0)
        return;
    if (rpc_client_open(d->rpc, d->cfg.kubelet_socket, &d->kubelet, err, sizeof err) != 0) {
        log_v(1, "cannot pre-connect to the kubelet: %s", err);
        d->kubelet = NULL;
        return;
    }
    rpc_client_connect(d->kubelet);
}

static int open_event_fds(struct daemon *d, const sigset_t *signals)
{
    d->signal_fd = signalfd(-1, signals, SFD_CLOEXEC);
    d->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    d->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (d->signal_fd < 0 || d->inotify_fd < 0 || d->timer_fd < 0) {
        log_error("cannot create event descriptors: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static void close_event_fds(struct daemon *d)
{
    if (d->signal_fd >= 0)
        close(d->signal_fd);
    if (d->inotify_fd >= 0)
        close(d->inotify_fd);
    if (d->timer_fd >= 0)
        close(d->timer_fd);
}

int daemon_run(int argc, char **argv, char **envp)
{
    struct daemon d = {.argc = argc,
                       .argv = argv,
                       .envp = envp,
                       .signal_fd = -1,
                       .inotify_fd = -1,
                       .timer_fd = -1,
                       .watch = -1,
                       .ancestor_watch = -1,
                       .retry_ms = DAEMON_RETRY_MIN_MS};
    char err[DAEMON_ERR_LEN];
    int status = 1;

    signal(SIGPIPE, SIG_IGN);
    /* Loaded while SIGTERM still has its default action: no thread exists
     * yet, and a parse (bounded anyway, yamlcfg.h) must never make the
     * process ignore a stop request (D8 of the reliability review). */
    enum config_result r = config_load(&d.cfg, argc, argv, envp, err, sizeof err);
    if (r == CONFIG_EXIT) {
        config_free(&d.cfg);
        return 0;
    }
    if (r == CONFIG_ERROR) {
        fprintf(stderr, "gpupool-device-plugin: %s\n", err);
        log_error("invalid configuration: %s", err);
        return 1;
    }
    /* Blocked before any thread exists, so gRPC's and the health thread
     * inherit the mask and signals reach only the signalfd (a signal sent
     * before this point has already ended the process). */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGHUP);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    log_set_verbosity(d.cfg.verbosity);
    log_info("Starting gpupool-device-plugin %s", GP_VERSION);
    resolve_socket_dir(&d);

    if (open_event_fds(&d, &signals) != 0)
        goto out;
    if (rpc_runtime_start(&d.rpc, err, sizeof err) != 0) {
        log_error("cannot start gRPC: %s", err);
        goto out;
    }
    if (d.cfg.metrics_addr.text != NULL && d.cfg.metrics_addr.text[0] != '\0') {
        if (metrics_start(&d.cfg.metrics_addr, &d.metrics, err, sizeof err) != 0) {
            fprintf(stderr, "gpupool-device-plugin: --metrics-addr: %s\n", err);
            log_error("Cannot serve metrics (--metrics-addr): %s", err);
            goto out;
        }
        log_info("Serving Prometheus metrics on http://%s/metrics",
                 metrics_bound_address(d.metrics));
    }
    preconnect_kubelet(&d);
    enum setup_result s = setup(&d);
    rpc_client_close(d.kubelet); /* later registrations use fresh channels */
    d.kubelet = NULL;
    /* The merged configuration is logged after registration so that it
     * does not delay the kubelet seeing the devices. */
    log_config(&d.cfg);
    if (s != SETUP_FATAL)
        status = event_loop(&d);
out:
    teardown(&d);
    metrics_stop(d.metrics);
    rpc_runtime_stop(d.rpc);
    close_event_fds(&d);
    config_free(&d.cfg);
    log_info("gpupool-device-plugin exiting with status %d", status);
    return status;
}

/* extender.h -- gpupool-scheduler-extender: configuration, start-up order, routes.
 *
 * Life cycle (what cmd/gpupool-scheduler-extender.c does):
 *   extender_config_load()   flags > environment > defaults (options.h)
 *   extender_new()           API clients and the empty cache; contacts nothing
 *   extender_start_sync()    three reflector threads: nodes, pods, kube-system
 *                            ConfigMaps (LIST, then WATCH for ever)
 *   extender_wait_synced()   until each has finished its first LIST
 *   extender_serve()         only now the port opens: no request ever meets
 *                            a half-filled cache; with --leader-elect the
 *                            election starts (leader.h): only the Lease
 *                            holder binds, the others forward /bind to it
 *   extender_free()          releases a held Lease (after the binds in flight),
 *                            stops HTTP, cancels the reflectors, frees all
 *
 * Routes (prefix = --prefix, default /gpupool-scheduler):
 *   POST <prefix>/filter|prioritize|bind, and the same under
 *        /gpushare-scheduler (gpushare's scheduler configs work unchanged)
 *   GET  /healthz (200 "ok" once synced), /version,
 *        /inspect[/<node>], <prefix>/inspect[/<node>], /gpushare-scheduler/inspect[/<node>]
 *   GET  /ui (the live web view, ui.h), /ui/pool.json (pool_view.h)
 *   GET  /metrics on its own port, --metrics-port (extender_metrics.h)
 * docs/extender.md documents every flag, path and JSON shape. */
#ifndef GP_EXTENDER_EXTENDER_H
#define GP_EXTENDER_EXTENDER_H

#include <stdbool.h>
#include <stddef.h>

#include "httpd.h"
#include "poolapi_unit.h"
#include "compiler.h"

#define EXTENDER_DEFAULT_PREFIX "/gpupool-scheduler"
#define EXTENDER_GPUSHARE_PREFIX "/gpushare-scheduler"

struct extender_config {
    int port;
    char *address;
    char *kubeconfig;
    int verbosity;
    int policy; /* enum placement_policy */
    char *tls_cert, *tls_key;
    char *client_ca; /* PEM CA file: require client certificates; "" = none */
    char *prefix;
    int max_request_bytes;
    int list_page_size;
    int api_timeout_ms;
    int bind_unknown_hold_ms;           /* BIND_UNKNOWN_HOLD_MS by default */
    int metrics_port;                   /* 0: no metrics server */
    int ui_node_metrics_port;           /* /ui's used figures (ui_usage.h); 0: off */
    int ui_node_metrics_from;           /* 0: direct to the nodes, 1: the node proxy */
    int ui_node_metrics_interval_ms;    /* between the starts of two sweeps */
    enum pool_mem_unit gpu_memory_unit; /* the unit of aliyun.com/gpu-mem (poolapi_unit.h) */
    /* Leader election (leader.h, docs/ha.md): only the Lease holder binds. */
    bool leader_elect;
    char *leader_elect_lease; /* namespace/name */
    int lease_duration_ms, renew_deadline_ms, retry_period_ms, fence_margin_ms;
    char *advertise_url; /* this replica's bind URL base, as followers reach it */
};

enum extender_config_result {
    EXTENDER_CONFIG_OK = 0,
    EXTENDER_CONFIG_EXIT = 1,
    EXTENDER_CONFIG_ERROR = -1
};

/* Parses argv and the environment into cfg (zeroed by the caller).
 * EXIT: --help or --version was printed. */
enum extender_config_result extender_config_load(struct extender_config *cfg, int argc, char **argv,
                                                 char **envp, char *err, size_t errlen) GP_MUST_USE;
void extender_config_free(struct extender_config *cfg);

struct extender;

/* Reads the kubeconfig / service account and TLS files; no network. */
struct extender *extender_new(const struct extender_config *cfg, char *err,
                              size_t errlen) GP_MUST_USE;
int extender_start_sync(struct extender *ext, char *err, size_t errlen) GP_MUST_USE;
/* Waits up to timeout_ms for the first LIST of every collection; true when done. */
bool extender_wait_synced(struct extender *ext, int timeout_ms);
int extender_serve(struct extender *ext, char *err, size_t errlen) GP_MUST_USE;
int extender_port(const struct extender *ext);
void extender_free(struct extender *ext);

/* The request handler (httpd_handler_fn), exposed for tests. */
void extender_handle(void *ext, const struct httpd_request *req, struct httpd_response *resp);

#endif

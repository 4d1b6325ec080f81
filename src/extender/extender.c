/* extender.c -- the extender's context: flags, API clients, reflector
 * threads, start-up order, routes (see extender.h). */
#include "clock.h"
#include "extender.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "bind.h"
#include "cache.h"
#include "kube.h"
#include "leader.h"
#include "log.h"
#include "extender_metrics.h"
#include "options.h"
#include "placement.h"
#include "pool_view.h"
#include "protocol.h"
#include "ui.h"
#include "ui_usage.h"

#ifndef GP_VERSION
#define GP_VERSION "0.0.0"
#endif

/* Binds go through a few API clients: one client serializes its calls on
 * one connection, so each call takes an idle one (round-robin could queue
 * a bind behind a busy connection while another sat idle). */
#define API_CLIENTS 4
#define TLS_FILE_MAX (1 << 20)

/* ---- configuration ------------------------------------------------------- */

/* -v / LOG_LEVEL: a klog level, or gpushare's LOG_LEVEL words. */
static int parse_verbosity(void *field, const char *text, bool append, char *why, size_t whylen)
{
    (void)append;
    static const struct {
        const char *word;
        int level;
    } words[] = {{"debug", 4}, {"info", 0}, {"warn", 0}, {"warning", 0}, {"error", 0}};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (strcasecmp(text, words[i].word) == 0) {
            *(int *)field = words[i].level;
            return 0;
        }
    }
    long v;
    if (options_parse_long(text, 0, 10, &v) != 0) {
        snprintf(why, whylen, "want a level 0..10 or debug, info, warn, error");
        return -1;
    }
    *(int *)field = (int)v;
    return 0;
}

static const struct option_custom verbosity_type = {
    .parse = parse_verbosity, .type_name = "a level", .plain = false};

static const struct option_value policy_values[] = {
    {.name = "gpupool", .value = PLACEMENT_GPUPOOL},
    {.name = "default", .value = PLACEMENT_GPUPOOL},
    {.name = "binpack", .value = PLACEMENT_BINPACK},
    {.name = "spread", .value = PLACEMENT_SPREAD},
    {.name = NULL},
};

/* The option engine stores an OPT_ENUM as an int. */
static_assert(sizeof(enum pool_mem_unit) == sizeof(int), "enum size");
/* --ui-node-metrics-from: how the sweep reaches the agents (ui_usage.h). */
enum { NODE_METRICS_DIRECT, NODE_METRICS_PROXY };
static const struct option_value node_metrics_from_values[] = {
    {.name = "direct", .value = NODE_METRICS_DIRECT},
    {.name = "proxy", .value = NODE_METRICS_PROXY},
    {.name = NULL},
};
static const struct option_value unit_values[] = {
    {.name = "GiB", .value = POOL_UNIT_GIB},
    {.name = "MiB", .value = POOL_UNIT_MIB},
    {.name = NULL},
};

#define FIELD(f) offsetof(struct extender_config, f)
static const struct option_spec specs[] = {
    {.flag = "port",
     .env = {"PORT"},
     .type = OPT_INT,
     .offset = FIELD(port),
     .def = "39999",
     .min = 0,
     .max = 65535,
     .help = "TCP port to serve on (0: any free port, logged)"},
    {.flag = "address",
     .env = {"GP_ADDRESS"},
     .type = OPT_STRING,
     .offset = FIELD(address),
     .def = "127.0.0.1",
     .help = "numeric IPv4/IPv6 address to listen on (also --metrics-port's); 0.0.0.0: every "
             "IPv4 address (deploy/ sets it: kube-scheduler reaches the pod through a Service)"},
    {.flag = "kubeconfig",
     .env = {"KUBECONFIG"},
     .type = OPT_STRING,
     .offset = FIELD(kubeconfig),
     .def = "",
     .help = "kubeconfig file; empty: ~/.kube/config, else the in-cluster service account"},
    {.flag = "v",
     .env = {"LOG_LEVEL"},
     .type = OPT_CUSTOM,
     .custom = &verbosity_type,
     .offset = FIELD(verbosity),
     .def = "0",
     .help = "log verbosity 0..10 (LOG_LEVEL also takes gpushare's debug|info|warn|error)"},
    {.flag = "policy",
     .env = {"GP_POLICY"},
     .type = OPT_ENUM,
     .values = policy_values,
     .offset = FIELD(policy),
     .def = "gpupool",
     .help = "GPU placement: gpupool (fragmentation-aware; `default` is the same), binpack "
             "(gpushare's best fit) or spread"},
    {.flag = "tls-cert",
     .alias = {"tls-cert-file"},
     .env = {"GP_TLS_CERT"},
     .type = OPT_STRING,
     .offset = FIELD(tls_cert),
     .def = "",
     .help = "PEM certificate file: serve HTTPS (with --tls-key)"},
    {.flag = "tls-key",
     .alias = {"tls-private-key-file"},
     .env = {"GP_TLS_KEY"},
     .type = OPT_STRING,
     .offset = FIELD(tls_key),
     .def = "",
     .help = "PEM private key file for --tls-cert"},
    {.flag = "client-ca-file",
     .env = {"GP_CLIENT_CA_FILE"},
     .type = OPT_STRING,
     .offset = FIELD(client_ca),
     .def = "",
     .help = "PEM CA file: the verbs, /inspect and /ui answer only clients whose certificate it "
             "signed (kube-scheduler's tlsConfig certFile/keyFile); /healthz and /version stay "
             "open. Needs --tls-cert"},
    {.flag = "prefix",
     .env = {"GP_URL_PREFIX"},
     .type = OPT_STRING,
     .offset = FIELD(prefix),
     .def = EXTENDER_DEFAULT_PREFIX,
     .help =
         "URL prefix of the verbs (<prefix>/filter, /prioritize, /bind); " EXTENDER_GPUSHARE_PREFIX
         " always answers too"},
    {.flag = "max-request-bytes",
     .env = {"GP_MAX_REQUEST_BYTES"},
     .type = OPT_INT,
     .offset = FIELD(max_request_bytes),
     .def = "4194304",
     .min = 1024,
     .max = 1 << 30,
     .help = "largest request body accepted; larger ones get 413. 4 MiB: 100,000 node names "
             "of up to 38 characters, 65,000 of up to 60 (nodeCacheCapable: true, "
             "percentageOfNodesToScore: 100); nodeCacheCapable: false sends whole Nodes "
             "(~5 KB each): raise it, and the memory limit, ~13 bytes of memory per byte"},
    {.flag = "list-page-size",
     .env = {"GP_LIST_PAGE_SIZE"},
     .type = OPT_INT,
     .offset = FIELD(list_page_size),
     .def = "500",
     .min = 1,
     .max = 10000,
     .help = "objects per LIST page (bounds memory during a (re-)list: one page's JSON). "
             "Each page costs etcd 3.4 a walk of the whole collection's index, so a full "
             "list costs it objects^2 / this: 100 took 29 s to sync 65,000 nodes, 500 17 s"},
    {.flag = "api-timeout",
     .env = {"GP_API_TIMEOUT"},
     .type = OPT_DURATION,
     .offset = FIELD(api_timeout_ms),
     .def = "10s",
     .min = 1,
     .help = "time limit of one API request made by a bind"},
    {.flag = "bind-unknown-hold",
     .env = {"GP_BIND_UNKNOWN_HOLD"},
     .type = OPT_DURATION,
     .offset = FIELD(bind_unknown_hold_ms),
     .def = "60s",
     .min = 1,
     .help = "how long a bind whose Binding got no answer (or a 5xx) keeps its GPU charge before "
             "the pod, read back unbound, may be bound again; at least kube-apiserver's "
             "--request-timeout"},
    {.flag = "metrics-port",
     .env = {"GP_METRICS_PORT"},
     .type = OPT_INT,
     .offset = FIELD(metrics_port),
     .def = "39998",
     .min = 0,
     .max = 65535,
     .help = "TCP port of the Prometheus /metrics endpoint (plain HTTP, same --address); 0: off"},
    {.flag = "ui-node-metrics-port",
     .env = {"GP_UI_NODE_METRICS_PORT"},
     .type = OPT_INT,
     .offset = FIELD(ui_node_metrics_port),
     .def = "0",
     .min = 0,
     .max = 65535,
     .help = "the node agents' metrics port (their --metrics-addr): every GPU-sharing node's "
             "agent is read once per --ui-node-metrics-interval for /ui/usage.json (used beside "
             "booked, read by kubectl gpupool top); 0: off"},
    {.flag = "ui-node-metrics-from",
     .env = {"GP_UI_NODE_METRICS_FROM"},
     .type = OPT_ENUM,
     .values = node_metrics_from_values,
     .offset = FIELD(ui_node_metrics_from),
     .def = "direct",
     .help = "direct: GET http://<node address>:<port>/metrics (its first InternalIP, else "
             "ExternalIP, else Hostname), no credentials sent, no "
             "RBAC; proxy: through the API server's node proxy (RBAC: get nodes/proxy)"},
    {.flag = "ui-node-metrics-interval",
     .env = {"GP_UI_NODE_METRICS_INTERVAL"},
     .type = OPT_DURATION,
     .offset = FIELD(ui_node_metrics_interval_ms),
     .def = "15s",
     .min = 1000,
     .help = "time between the starts of two sweeps of the node agents (one at a time; each "
             "within 10 s or the interval, whichever is shorter)"},
    {.flag = "gpu-memory-unit",
     .env = {"GP_GPU_MEMORY_UNIT"},
     .type = OPT_ENUM,
     .values = unit_values,
     .offset = FIELD(gpu_memory_unit),
     .def = "GiB",
     .help = "unit of aliyun.com/gpu-mem (the device plugin's): GiB or MiB; scales the "
             "*_bytes metrics and labels /ui"},
    {.flag = "leader-elect",
     .env = {"GP_LEADER_ELECT"},
     .type = OPT_BOOL,
     .offset = FIELD(leader_elect),
     .def = "false",
     .help = "run as one of several replicas: only the holder of --leader-elect-lease binds, "
             "the others forward /bind to it (docs/ha.md)"},
    {.flag = "leader-elect-lease",
     .env = {"GP_LEADER_ELECT_LEASE"},
     .type = OPT_STRING,
     .offset = FIELD(leader_elect_lease),
     .def = "kube-system/gpupool-scheduler-extender",
     .help = "namespace/name of the coordination.k8s.io/v1 Lease of the election"},
    {.flag = "leader-elect-lease-duration",
     .env = {"GP_LEADER_ELECT_LEASE_DURATION"},
     .type = OPT_DURATION,
     .offset = FIELD(lease_duration_ms),
     .def = "10s",
     .min = 1000,
     .help = "how long a candidate waits, after the Lease last changed, before taking it "
             "(whole seconds)"},
    {.flag = "leader-elect-renew-deadline",
     .env = {"GP_LEADER_ELECT_RENEW_DEADLINE"},
     .type = OPT_DURATION,
     .offset = FIELD(renew_deadline_ms),
     .def = "7s",
     .min = 1,
     .help = "the holder steps down when no renew succeeded for this long"},
    {.flag = "leader-elect-retry-period",
     .env = {"GP_LEADER_ELECT_RETRY_PERIOD"},
     .type = OPT_DURATION,
     .offset = FIELD(retry_period_ms),
     .def = "2s",
     .min = 1,
     .help = "interval of the holder's renews and the candidates' reads of the Lease"},
    {.flag = "leader-elect-fence-margin",
     .env = {"GP_LEADER_ELECT_FENCE_MARGIN"},
     .type = OPT_DURATION,
     .offset = FIELD(fence_margin_ms),
     .def = "2s",
     .min = 1,
     .help = "the holder binds only until (start of its last renew) + lease duration - margin"},
    {.flag = "advertise-url",
     .env = {"GP_ADVERTISE_URL"},
     .type = OPT_STRING,
     .offset = FIELD(advertise_url),
     .def = "",
     .help = "base URL other replicas forward binds to (http://host:port); empty: "
             "http(s)://$POD_IP:<port> when POD_IP is set"},
    {.flag = "help", .alias = {"h"}, .type = OPT_HELP, .help = "show this help"},
    {.flag = "version", .type = OPT_VERSION, .help = "print the version"},
};

static const struct options_table table = {
    .program = "gpupool-scheduler-extender",
    .version = GP_VERSION,
    .summary = "kube-scheduler extender for GPU-memory sharing (gpushare-compatible): "
               "filter, prioritize and bind pods requesting aliyun.com/gpu-mem.",
    .specs = specs,
    .count = sizeof(specs) / sizeof(specs[0]),
};

/* "/x/" -> "/x"; must start with '/' and hold no '?', '#', or spaces. */
static int normalize_prefix(char *prefix, char *err, size_t errlen)
{
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/')
        prefix[--n] = '\0';
    if (prefix[0] != '/' || strpbrk(prefix, "?# \t") || strcmp(prefix, "/") == 0) {
        snprintf(err, errlen, "--prefix %s: want a path such as %s", prefix,
                 EXTENDER_DEFAULT_PREFIX);
        return -1;
    }
    return 0;
}

static const char *env_value(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

/* The leader's configuration out of the flags (strings borrowed from cfg;
 * lease_ns/lease_name are the caller's buffers). */
static int leader_config_of(const struct extender_config *cfg, struct leader_config *lc,
                            char *lease_ns, char *lease_name, size_t namelen, char *err,
                            size_t errlen)
{
    const char *slash = strchr(cfg->leader_elect_lease, '/');
    size_t nslen = slash ? (size_t)(slash - cfg->leader_elect_lease) : 0;
    if (!slash || nslen == 0 || nslen >= namelen || strlen(slash + 1) >= namelen ||
        strspn(cfg->leader_elect_lease, "abcdefghijklmnopqrstuvwxyz0123456789-./") !=
            strlen(cfg->leader_elect_lease)) {
        snprintf(err, errlen, "--leader-elect-lease %s: want namespace/name (lower-case DNS names)",
                 cfg->leader_elect_lease);
        return -1;
    }
    memcpy(lease_ns, cfg->leader_elect_lease, nslen);
    lease_ns[nslen] = '\0';
    snprintf(lease_name, namelen, "%s", slash + 1);
    *lc = (struct leader_config){
        .lease_namespace = lease_ns,
        .lease_name = lease_name,
        .bind_url = cfg->advertise_url,
        .lease_duration_ms = cfg->lease_duration_ms,
        .renew_deadline_ms = cfg->renew_deadline_ms,
        .retry_period_ms = cfg->retry_period_ms,
        .margin_ms = cfg->fence_margin_ms,
    };
    if (leader_config_check(lc, err, errlen) < 0) {
        size_t used = strlen(err);
        snprintf(err + used, errlen - used, " (--leader-elect-* flags)");
        return -1;
    }
    return 0;
}

/* --leader-elect's flags; fills --advertise-url from POD_IP when empty. */
static int leader_flags_check(struct extender_config *cfg, char **envp, char *err, size_t errlen)
{
    char ns[256], name[256];
    struct leader_config lc;
    if (leader_config_of(cfg, &lc, ns, name, sizeof(ns), err, errlen) < 0)
        return -1;
    const char *ip = env_value(envp, "POD_IP");
    if (!*cfg->advertise_url && ip && *ip && cfg->port > 0) {
        char url[LEADER_URL_MAX];
        bool v6 = strchr(ip, ':') != NULL;
        snprintf(url, sizeof(url), "%s://%s%s%s:%d", *cfg->tls_cert ? "https" : "http",
                 v6 ? "[" : "", ip, v6 ? "]" : "", cfg->port);
        char *copy = strdup(url);
        if (!copy) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        free(cfg->advertise_url);
        cfg->advertise_url = copy;
    }
    size_t n = strlen(cfg->advertise_url);
    while (n > 0 && cfg->advertise_url[n - 1] == '/')
        cfg->advertise_url[--n] = '\0';
    if (n && strncmp(cfg->advertise_url, "http://", 7) != 0 &&
        strncmp(cfg->advertise_url, "https://", 8) != 0) {
        snprintf(err, errlen, "--advertise-url %s: want http://host:port or https://host:port",
                 cfg->advertise_url);
        return -1;
    }
    if (n + strlen(cfg->prefix) + 8 >= LEADER_URL_MAX) {
        snprintf(err, errlen, "--advertise-url too long");
        return -1;
    }
    if (!n)
        log_warn("--leader-elect without --advertise-url or POD_IP: while another replica "
                 "holds the lease, nothing can forward binds here");
    return 0;
}

enum extender_config_result extender_config_load(struct extender_config *cfg, int argc, char **argv,
                                                 char **envp, char *err, size_t errlen)
{
    enum options_result r = options_load(&table, cfg, argc, argv, envp, err, errlen);
    if (r == OPTIONS_EXIT)
        return EXTENDER_CONFIG_EXIT;
    if (r != OPTIONS_OK)
        return EXTENDER_CONFIG_ERROR;
    if (normalize_prefix(cfg->prefix, err, errlen) < 0)
        goto fail;
    if (!*cfg->tls_cert != !*cfg->tls_key) {
        snprintf(err, errlen, "--tls-cert and --tls-key go together");
        goto fail;
    }
    if (cfg->leader_elect && leader_flags_check(cfg, envp, err, errlen) < 0)
        goto fail;
    if (*cfg->client_ca && !*cfg->tls_cert) {
        snprintf(err, errlen, "--client-ca-file needs --tls-cert and --tls-key (HTTPS)");
        goto fail;
    }
    return EXTENDER_CONFIG_OK;
fail:
    options_free(&table, cfg);
    return EXTENDER_CONFIG_ERROR;
}

void extender_config_free(struct extender_config *cfg)
{
    options_free(&table, cfg);
}

/* ---- the context ---------------------------------------------------------- */

enum { SYNC_NODES = 1, SYNC_PODS = 2, SYNC_CONFIGMAPS = 4, SYNC_ALL = 7 };

struct extender;

/* One watched collection and the cache calls that keep it. */
struct collection {
    struct extender *ext;
    const char *path, *kind;
    unsigned sync_bit;
    void (*begin)(struct cache *);
    void (*end)(struct cache *);
    int (*upsert)(struct cache *, const json_t *, char *, size_t);
    void (*remove)(struct cache *, const json_t *);
    pthread_t thread;
    bool started;
    /* Leader election: a fired token re-lists (kube_reflector_run_relist);
     * list_epoch is the leader epoch read when the running LIST began,
     * done_epoch that of the last LIST completed. NULL/0 without election
     * and for ConfigMaps, which the proof does not need. */
    struct kube_cancel *relist;
    uint64_t list_epoch;
    _Atomic uint64_t done_epoch;
};

struct extender {
    const struct extender_config *cfg; /* borrowed: outlives the extender */
    struct kube_client *watch_client;  /* reflectors: each watch has its own connection */
    struct kube_client *api[API_CLIENTS];
    atomic_bool api_busy[API_CLIENTS]; /* a call is using api[i] */
    atomic_uint next_api;
    struct kube_cancel *cancel;
    struct cache *cache;
    struct collection collections[3];
    struct kube_client *leader_client; /* the Lease's: short timeout, no retries */
    struct leader *leader;             /* NULL without --leader-elect */
    pthread_mutex_t sync_lock;
    pthread_cond_t sync_cond;
    unsigned synced;   /* SYNC_* bits */
    atomic_bool ready; /* all synced: /healthz ok */
    struct httpd *http;
    struct httpd *metrics_http; /* NULL when --metrics-port 0 */
    struct metrics metrics;
    struct ui_usage *ui_usage; /* NULL when --ui-node-metrics-port 0 */
    char *tls_cert_pem, *tls_key_pem;
    char *client_ca_pem; /* NULL: no client certificates asked for */
    size_t max_body;
};

static char *read_small_file(const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(TLS_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, TLS_FILE_MAX + 1, f) : 0;
    bool bad = !buf || ferror(f) || n > TLS_FILE_MAX || n == 0;
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "%s: %s", path,
                 !buf     ? "out of memory"
                 : n == 0 ? "empty or unreadable"
                          : "larger than 1 MiB");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static void on_acquired(void *ctx, uint64_t epoch);
static void on_role(void *ctx, enum leader_role role);

/* The Lease's own client and the leader (started by extender_serve). Its
 * calls must end well inside the renew deadline, and a retry after the
 * server may have acted would only meet a 409. */
static int leader_setup(struct extender *ext, const struct kube_client_options *base, char *err,
                        size_t errlen)
{
    const struct extender_config *cfg = ext->cfg;
    struct kube_client_options opt = *base;
    opt.timeout_ms = cfg->retry_period_ms < 1000 ? 1000 : cfg->retry_period_ms;
    opt.connect_timeout_ms = opt.timeout_ms;
    opt.retry.max_attempts = 1;
    if (!(ext->leader_client = kube_client_new(&opt, err, errlen)))
        return -1;
    char ns[256], name[256], url[LEADER_URL_MAX] = "";
    struct leader_config lc;
    if (leader_config_of(cfg, &lc, ns, name, sizeof(ns), err, errlen) < 0)
        return -1;
    if (*cfg->advertise_url)
        snprintf(url, sizeof(url), "%s%s/bind", cfg->advertise_url, cfg->prefix);
    lc.bind_url = url;
    lc.on_acquired = on_acquired;
    lc.on_role = on_role;
    lc.ctx = ext;
    for (int i = 0; i < 2; i++) /* nodes and pods: what a bind reads */
        if (!(ext->collections[i].relist = kube_cancel_new())) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    if (!(ext->leader = leader_new(&lc, ext->leader_client, err, errlen)))
        return -1;
    atomic_store(&ext->metrics.leader_role, (int)LEADER_ROLE_CANDIDATE);
    return 0;
}

struct extender *extender_new(const struct extender_config *cfg, char *err, size_t errlen)
{
    struct extender *ext = calloc(1, sizeof(*ext));
    if (!ext) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ext->cfg = cfg;
    ext->max_body = (size_t)cfg->max_request_bytes;
    metrics_init(&ext->metrics);
    pthread_mutex_init(&ext->sync_lock, NULL);
    pthread_cond_init(&ext->sync_cond, NULL);
    log_set_verbosity(cfg->verbosity);
    struct kube_client_options opt = {
        .kubeconfig = *cfg->kubeconfig ? cfg->kubeconfig : NULL,
        .user_agent = "gpupool-scheduler-extender/" GP_VERSION,
        .timeout_ms = cfg->api_timeout_ms,
    };
    if (!(ext->watch_client = kube_client_new(&opt, err, errlen)))
        goto fail;
    for (int i = 0; i < API_CLIENTS; i++)
        if (!(ext->api[i] = kube_client_new(&opt, err, errlen)))
            goto fail;
    if (!(ext->cancel = kube_cancel_new()) ||
        !(ext->cache = cache_new((enum placement_policy)cfg->policy))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (cfg->leader_elect && leader_setup(ext, &opt, err, errlen) < 0)
        goto fail;
    /* opt's strings are cfg's, which outlives the extender. */
    if (cfg->ui_node_metrics_port > 0 &&
        !(ext->ui_usage = ui_usage_new(&opt, ext->cache, cfg->ui_node_metrics_port,
                                       cfg->ui_node_metrics_from == NODE_METRICS_DIRECT,
                                       cfg->ui_node_metrics_interval_ms))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (*cfg->tls_cert) {
        if (!(ext->tls_cert_pem = read_small_file(cfg->tls_cert, err, errlen)) ||
            !(ext->tls_key_pem = read_small_file(cfg->tls_key, err, errlen)))
            goto fail;
    }
    if (*cfg->client_ca && !(ext->client_ca_pem = read_small_file(cfg->client_ca, err, errlen)))
        goto fail;
    return ext;
fail:
    extender_free(ext);
    return NULL;
}

/* ---- reflectors ----------------------------------------------------------- */

static const char *object_name(const json_t *obj)
{
    const json_t *meta = json_object_get(obj, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    return name ? name : "?";
}

static int on_list_begin(void *ctx)
{
    struct collection *c = ctx;
    if (c->relist) /* read after the token was reset: this LIST starts after that epoch began */
        c->list_epoch = leader_epoch(c->ext->leader);
    c->begin(c->ext->cache);
    return 0;
}

/* A fresh LIST of nodes or pods ended: the cache is proven current for an
 * epoch once both were listed after it began. */
static void leader_proof(struct extender *ext, struct collection *c)
{
    if (!c->relist)
        return;
    atomic_store(&c->done_epoch, c->list_epoch);
    uint64_t nodes = atomic_load(&ext->collections[0].done_epoch);
    uint64_t pods = atomic_load(&ext->collections[1].done_epoch);
    uint64_t epoch = nodes < pods ? nodes : pods;
    if (epoch > 0)
        leader_mark_synced(ext->leader, epoch);
}

static void on_acquired(void *ctx, uint64_t epoch)
{
    struct extender *ext = ctx;
    (void)epoch;
    for (int i = 0; i < 2; i++)
        kube_cancel_fire(ext->collections[i].relist);
}

static void on_role(void *ctx, enum leader_role role)
{
    struct extender *ext = ctx;
    atomic_store(&ext->metrics.leader_role, (int)role);
}

static int on_item(json_t *item, void *ctx)
{
    struct collection *c = ctx;
    char err[320] = "";
    if (c->upsert(c->ext->cache, item, err, sizeof(err)) < 0)
        log_warn("%s %s ignored: %s", c->kind, object_name(item), err);
    else if (err[0])
        log_v(1, "%s %s: %s", c->kind, object_name(item), err);
    return 0;
}

static int on_list_end(const char *rv, void *ctx)
{
    struct collection *c = ctx;
    struct extender *ext = c->ext;
    c->end(ext->cache);
    log_v(1, "listed %s at resourceVersion %s", c->path, rv);
    leader_proof(ext, c);
    pthread_mutex_lock(&ext->sync_lock);
    ext->synced |= c->sync_bit;
    if (ext->synced == SYNC_ALL)
        atomic_store(&ext->ready, true);
    pthread_cond_broadcast(&ext->sync_cond);
    pthread_mutex_unlock(&ext->sync_lock);
    return 0;
}

static int on_event(enum kube_event_type type, json_t *object, void *ctx)
{
    struct collection *c = ctx;
    log_v(5, "%s %s %s", kube_event_type_name(type), c->kind, object_name(object));
    if (type == KUBE_EVENT_DELETED)
        c->remove(c->ext->cache, object);
    else if (type == KUBE_EVENT_ADDED || type == KUBE_EVENT_MODIFIED)
        return on_item(object, ctx);
    return 0;
}

static void on_error(const struct kube_error *err, void *ctx)
{
    struct collection *c = ctx;
    log_warn("watching %s: %s (%s); retrying, serving from the cache meanwhile", c->path,
             err->message, err->reason);
}

static void *reflector_thread(void *arg)
{
    struct collection *c = arg;
    static const struct kube_reflector_ops ops = {
        .list_begin = on_list_begin,
        .list_item = on_item,
        .list_end = on_list_end,
        .event = on_event,
        .on_error = on_error,
    };
    struct kube_error err = {0};
    enum kube_result r =
        kube_reflector_run_relist(c->ext->watch_client, c->path, c->ext->cfg->list_page_size, &ops,
                                  c, c->ext->cancel, c->relist, &err);
    if (r != KUBE_CANCELLED)
        log_error("watching %s stopped: %s", c->path, err.message);
    return NULL;
}

int extender_start_sync(struct extender *ext, char *err, size_t errlen)
{
    const struct collection defs[3] = {
        {ext, "/api/v1/nodes", "node", SYNC_NODES, cache_nodes_list_begin, cache_nodes_list_end,
         cache_node_upsert, cache_node_delete, 0, false, NULL, 0, 0},
        {ext, "/api/v1/pods", "pod", SYNC_PODS, cache_pods_list_begin, cache_pods_list_end,
         cache_pod_upsert, cache_pod_delete, 0, false, NULL, 0, 0},
        {ext, "/api/v1/namespaces/kube-system/configmaps", "configmap", SYNC_CONFIGMAPS,
         cache_configmaps_list_begin, cache_configmaps_list_end, cache_configmap_upsert,
         cache_configmap_delete, 0, false, NULL, 0, 0},
    };
    for (int i = 0; i < 3; i++) {
        struct collection *c = &ext->collections[i];
        struct kube_cancel *relist = c->relist; /* made by extender_new */
        *c = defs[i];
        c->relist = relist;
        int rc = pthread_create(&c->thread, NULL, reflector_thread, c);
        if (rc != 0) {
            snprintf(err, errlen, "cannot start a thread: %s", strerror(rc));
            return -1;
        }
        c->started = true;
    }
    return 0;
}

bool extender_wait_synced(struct extender *ext, int timeout_ms)
{
    struct timespec deadline = clock_deadline(CLOCK_REALTIME, timeout_ms);
    pthread_mutex_lock(&ext->sync_lock);
    while (ext->synced != SYNC_ALL)
        if (pthread_cond_timedwait(&ext->sync_cond, &ext->sync_lock, &deadline) != 0)
            break;
    bool done = ext->synced == SYNC_ALL;
    pthread_mutex_unlock(&ext->sync_lock);
    return done;
}

/* ---- the API as bind.c sees it ------------------------------------------- */

/* An idle client (*slot: its index, to give back), or, when all are busy,
 * one to queue behind (*slot -1). */
static struct kube_client *take_client(struct extender *ext, int *slot)
{
    unsigned start = atomic_fetch_add(&ext->next_api, 1);
    for (unsigned i = 0; i < API_CLIENTS; i++) {
        unsigned k = (start + i) % API_CLIENTS;
        if (!atomic_exchange(&ext->api_busy[k], true)) {
            *slot = (int)k;
            return ext->api[k];
        }
    }
    *slot = -1;
    return ext->api[start % API_CLIENTS];
}

static void give_client(struct extender *ext, int slot)
{
    if (slot >= 0)
        atomic_store(&ext->api_busy[slot], false);
}

static int api_get_pod(void *ctx, const char *ns, const char *name, int64_t deadline_ns,
                       json_t **out, struct kube_error *err)
{
    char path[600];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
    int slot;
    struct kube_client *client = take_client(ctx, &slot);
    int rc = kube_get_until(client, path, deadline_ns, out, err);
    give_client(ctx, slot);
    return rc;
}

static int api_create_binding(void *ctx, const char *ns, const char *name, const char *uid,
                              const char *node, const json_t *annotations, int64_t deadline_ns,
                              struct kube_error *err)
{
    int slot;
    struct kube_client *client = take_client(ctx, &slot);
    int rc = kube_bind_pod(client, ns, name, uid && *uid ? uid : NULL, node, annotations,
                           deadline_ns, err);
    give_client(ctx, slot);
    return rc;
}

/* ---- routes ----------------------------------------------------------------- */

static void reply(struct httpd_response *resp, int status, const char *type, char *body, size_t len)
{
    resp->status = body ? status : 500;
    resp->content_type = type;
    resp->body = body;
    resp->len = len;
}

static void reply_error(struct httpd_response *resp, int status, const char *message)
{
    size_t len;
    char *body = protocol_error(message, &len);
    reply(resp, status, "application/json", body, len);
}

/* Counts the verdicts on their way to the reply. */
struct filter_tally {
    struct filter_result result;
    size_t passed, failed;
};

static void tally_verdict(void *ctx, size_t i, bool fits, const char *reason)
{
    struct filter_tally *t = ctx;
    if (fits)
        t->passed++;
    else
        t->failed++;
    protocol_filter_add(&t->result, i, fits, reason);
}

static void handle_filter(struct extender *ext, const char *body, size_t len,
                          struct httpd_response *resp)
{
    struct extender_args args;
    struct cache_query q;
    struct filter_tally t = {.passed = 0};
    char err[512];
    size_t n;
    if (protocol_parse_args(body, len, &args, err, sizeof(err)) < 0) {
        metrics_count(&ext->metrics.bad_requests[METRICS_FILTER], 1);
        log_v(1, "filter: bad request: %s", err);
        char *out = protocol_filter_error(err, &n);
        reply(resp, 400, "application/json", out, n);
        return;
    }
    if (cache_query_init(ext->cache, &args.facts, true, false, &q, err, sizeof(err)) < 0) {
        char *out = protocol_filter_error(err, &n);
        reply(resp, 500, "application/json", out, n);
        protocol_args_free(&args);
        return;
    }
    protocol_filter_begin(&t.result, &args);
    cache_evaluate(ext->cache, &q, args.names, args.count, tally_verdict, &t, NULL);
    metrics_count(&ext->metrics.filter_nodes_passed, t.passed);
    metrics_count(&ext->metrics.filter_nodes_failed, t.failed);
    char *out = protocol_filter_finish(&t.result, &n);
    log_v(4, "filter %s/%s over %zu nodes", args.facts.ns, args.facts.name, args.count);
    reply(resp, 200, "application/json", out, n);
    cache_query_free(&q);
    protocol_args_free(&args);
}

static void handle_prioritize(struct extender *ext, const char *body, size_t len,
                              struct httpd_response *resp)
{
    struct extender_args args;
    struct cache_query q;
    char err[512];
    if (protocol_parse_args(body, len, &args, err, sizeof(err)) < 0) {
        metrics_count(&ext->metrics.bad_requests[METRICS_PRIORITIZE], 1);
        log_v(1, "prioritize: bad request: %s", err);
        reply_error(resp, 400, err);
        return;
    }
    double *scores = malloc(sizeof(double) * (args.count ? args.count : 1));
    int *priorities = malloc(sizeof(int) * (args.count ? args.count : 1));
    if (!scores || !priorities ||
        cache_query_init(ext->cache, &args.facts, false, true, &q, err, sizeof(err)) < 0) {
        reply_error(resp, 500, "out of memory");
    } else {
        cache_evaluate(ext->cache, &q, args.names, args.count, NULL, NULL, scores);
        placement_scores_to_priorities(scores, args.count, PROTOCOL_MAX_PRIORITY, priorities);
        size_t n;
        char *out = protocol_priorities(&args, priorities, &n);
        reply(resp, 200, "application/json", out, n);
        cache_query_free(&q);
    }
    free(scores);
    free(priorities);
    protocol_args_free(&args);
}

/* The header a forwarded bind carries: the receiver never forwards again. */
#define FORWARDED_HEADER "X-Gpupool-Forwarded"
/* kube-scheduler's default extender httpTimeout: past it the scheduler
 * has given up on the follower's answer anyway. */
#define FORWARD_TIMEOUT_MS 5000
#define FORWARD_MAX_ANSWER 65536

/* A follower's /bind: once to the holder, its answer returned as is. */
static void forward_bind(struct extender *ext, const char *url, const char *body, size_t len,
                         const struct binding_args *args, struct httpd_response *resp)
{
    long status = 0;
    char *answer = NULL, err[512];
    if (kube_http_post(url, FORWARDED_HEADER ": 1", body, len, FORWARD_TIMEOUT_MS,
                       FORWARD_MAX_ANSWER, &status, &answer, err, sizeof(err)) == 0 &&
        status == 200) {
        metrics_count(&ext->metrics.binds_forwarded_answered, 1);
        log_v(2, "bind %s/%s to %s forwarded to the leader at %s", args->pod_namespace,
              args->pod_name, args->node, url);
        reply(resp, 200, "application/json", answer, strlen(answer));
        return;
    }
    metrics_count(&ext->metrics.binds_forwarded_failed, 1);
    if (answer)
        snprintf(err, sizeof(err), "HTTP %ld", status);
    free(answer);
    log_info("bind %s/%s to %s: forwarding to the leader failed: %s", args->pod_namespace,
             args->pod_name, args->node, err);
    char message[LEADER_URL_MAX + 600];
    snprintf(message, sizeof(message), "not the leader, retry (forwarding to %s failed: %s)", url,
             err);
    reply_error(resp, 200, message);
}

static void handle_bind(struct extender *ext, const struct httpd_request *req, const char *body,
                        size_t len, struct httpd_response *resp)
{
    struct binding_args args;
    char err[768];
    if (protocol_parse_binding(body, len, &args, err, sizeof(err)) < 0) {
        metrics_count(&ext->metrics.bad_requests[METRICS_BIND], 1);
        metrics_count(&ext->metrics.binds[METRICS_BIND_BAD_REQUEST], 1);
        log_v(1, "bind: bad request: %s", err);
        reply_error(resp, 400, err);
        return;
    }
    int64_t deadline = clock_now_ns() + (int64_t)ext->cfg->api_timeout_ms * 1000000;
    if (ext->leader) {
        struct leader_permit permit;
        leader_bind_begin(ext->leader, &permit);
        const char *forwarded = httpd_header(req, FORWARDED_HEADER);
        if (permit.verdict == LEADER_FORWARD && !forwarded) {
            forward_bind(ext, permit.url, body, len, &args, resp);
            protocol_binding_free(&args);
            return;
        }
        if (permit.verdict != LEADER_BIND) {
            /* An ExtenderBindingResult Error: kube-scheduler re-queues the pod. */
            metrics_count(&ext->metrics.binds_not_leader, 1);
            log_info("bind %s/%s to %s refused: %s%s", args.pod_namespace, args.pod_name, args.node,
                     permit.verdict == LEADER_FORWARD ? "forwarded to a follower; " : "",
                     permit.verdict == LEADER_FORWARD ? "not the leader, retry" : permit.why);
            reply_error(resp, 200,
                        permit.verdict == LEADER_FORWARD ? "not the leader, retry" : permit.why);
            protocol_binding_free(&args);
            return;
        }
        if (permit.fence_ns < deadline)
            deadline = permit.fence_ns; /* no write of ours may land after a successor starts */
    }
    const struct bind_api api = {ext, api_get_pod, api_create_binding,
                                 (int64_t)ext->cfg->bind_unknown_hold_ms * 1000000};
    enum bind_result result = bind_pod_result(ext->cache, &api, &args, deadline, err, sizeof(err));
    if (ext->leader)
        leader_bind_end(ext->leader);
    metrics_count(&ext->metrics.binds[result], 1);
    if (result != BIND_OK) {
        log_info("bind %s/%s to %s refused: %s", args.pod_namespace, args.pod_name, args.node, err);
        /* 200 with Error: kube-scheduler then reports our message (on
         * any other status it reports only the status code). */
        reply_error(resp, 200, err);
    } else {
        reply_error(resp, 200, "");
    }
    protocol_binding_free(&args);
}

static void handle_inspect(struct extender *ext, const char *node, struct httpd_response *resp)
{
    json_t *view = cache_inspect(ext->cache, node && *node ? node : NULL);
    size_t n;
    char *out = protocol_dump(view, &n);
    int status = json_object_get(view, "error") ? 404 : 200;
    json_decref(view);
    reply(resp, status, "application/json", out, n);
}

static void handle_pool(struct extender *ext, struct httpd_response *resp)
{
    size_t n = 0;
    char *out = pool_json(ext->cache, poolapi_unit_name(ext->cfg->gpu_memory_unit), &n);
    reply(resp, 200, "application/json", out, n);
}

/* The verb after one of our prefixes ("filter"), or NULL. */
static const char *verb_of(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(path, prefix, n) == 0 && path[n] == '/')
        return path + n + 1;
    return NULL;
}

static void route_get(struct extender *ext, const char *path, struct httpd_response *resp)
{
    const char *verb = verb_of(path, ext->cfg->prefix);
    if (!verb)
        verb = verb_of(path, EXTENDER_GPUSHARE_PREFIX);
    if (!verb && path[0] == '/')
        verb = path + 1;
    if (strcmp(path, "/healthz") == 0) {
        bool ready = atomic_load(&ext->ready);
        reply(resp, ready ? 200 : 503, "text/plain", strdup(ready ? "ok" : "not synced"),
              ready ? 2 : 10);
    } else if (strcmp(path, "/version") == 0) {
        reply(resp, 200, "text/plain", strdup(GP_VERSION), strlen(GP_VERSION));
    } else if (strcmp(path, "/ui") == 0 || strcmp(path, "/ui/") == 0) {
        size_t n;
        const char *page = ui_page(&n);
        char *copy = malloc(n);
        if (copy)
            memcpy(copy, page, n);
        reply(resp, 200, "text/html; charset=utf-8", copy, n);
    } else if (strcmp(path, "/ui/pool.json") == 0) {
        handle_pool(ext, resp);
    } else if (strcmp(path, "/ui/usage.json") == 0) {
        size_t n = 0;
        char *out = ext->ui_usage ? ui_usage_json(ext->ui_usage, &n) : NULL;
        if (ext->ui_usage)
            reply(resp, 200, "application/json", out, n);
        else
            reply_error(resp, 404, "node metrics are off (--ui-node-metrics-port)");
    } else if (verb && strcmp(verb, "inspect") == 0) {
        handle_inspect(ext, NULL, resp);
    } else if (verb && strncmp(verb, "inspect/", 8) == 0) {
        handle_inspect(ext, verb + 8, resp);
    } else {
        reply_error(resp, 404, "no such path");
    }
}

/* Whether a Content-Type names JSON ("application/json; charset=utf-8"
 * too), as kube-scheduler's always does. */
static bool is_json_type(const char *type)
{
    static const char json[] = "application/json";
    size_t n = sizeof(json) - 1;
    return type && strncasecmp(type, json, n) == 0 &&
           (type[n] == '\0' || type[n] == ';' || type[n] == ' ');
}

void extender_handle(void *ctx, const struct httpd_request *req, struct httpd_response *resp)
{
    struct extender *ext = ctx;
    const char *method = req->method, *path = req->path, *body = req->body;
    size_t len = req->len;
    const char *verb = verb_of(path, ext->cfg->prefix);
    if (!verb)
        verb = verb_of(path, EXTENDER_GPUSHARE_PREFIX);
    bool is_verb = verb && (strcmp(verb, "filter") == 0 || strcmp(verb, "prioritize") == 0 ||
                            strcmp(verb, "bind") == 0);
    /* Browsers: kube-scheduler and curl send no Origin; a web page's
     * cross-origin request always carries one (docs/security.md). A
     * "simple" text/plain POST needs no CORS preflight, so the verbs
     * also insist on JSON. */
    if (httpd_header(req, "Origin")) {
        reply_error(resp, 403, "cross-origin requests (with an Origin header) are refused");
        return;
    }
    bool post = strcmp(method, "POST") == 0;
    if (post && is_verb && !is_json_type(httpd_header(req, "Content-Type"))) {
        reply_error(resp, 415, "the verbs take Content-Type: application/json");
        return;
    }
    if (post && is_verb) {
        uint64_t start = (uint64_t)clock_now_ns();
        enum metrics_verb which;
        if (strcmp(verb, "filter") == 0) {
            which = METRICS_FILTER;
            handle_filter(ext, body, len, resp);
        } else if (strcmp(verb, "prioritize") == 0) {
            which = METRICS_PRIORITIZE;
            handle_prioritize(ext, body, len, resp);
        } else {
            which = METRICS_BIND;
            handle_bind(ext, req, body, len, resp);
        }
        metrics_observe(&ext->metrics.duration[which], (uint64_t)clock_now_ns() - start);
    } else if (is_verb) {
        reply_error(resp, 405, "use POST");
    } else if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0) {
        route_get(ext, path, resp);
    } else {
        reply_error(resp, 405, "method not allowed");
    }
}

/* The metrics port answers GET /metrics only. */
static void metrics_handle(void *ctx, const struct httpd_request *req, struct httpd_response *resp)
{
    struct extender *ext = ctx;
    const char *method = req->method, *path = req->path;
    if (strcmp(path, "/metrics") != 0) {
        reply_error(resp, 404, "no such path; metrics are at /metrics");
        return;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        reply_error(resp, 405, "use GET");
        return;
    }
    char err[256];
    size_t n = 0;
    char *text = extender_metrics_render(&ext->metrics, ext->cache,
                                         poolapi_unit_bytes(ext->cfg->gpu_memory_unit), &n, err,
                                         sizeof(err));
    if (!text)
        log_warn("/metrics: %s", err);
    reply(resp, 200, "text/plain; version=0.0.4; charset=utf-8", text, n);
}

/* Connection limits (docs/security.md). kube-scheduler binds in parallel,
 * one connection per bind in flight, all from one address: the per-address
 * limit stays above any burst it makes, the total above a few such
 * clients; a thread per connection costs only its touched stack. A full
 * table closes an idle connection of the address holding the most to
 * admit a newcomer from an address holding fewer (httpd.h), so clients
 * that fill it from a few addresses cannot keep the kubelet's probe or
 * kube-scheduler out. A connection must deliver each request within the
 * idle timeout of its accept or previous reply (httpd.h
 * request_deadline_s), so neither idle nor trickling connections hold a
 * slot longer. kube-scheduler's HTTP
 * client keeps idle connections 90 s, so it is the extender that closes
 * them; Go's client then dials afresh. */
#define EXTENDER_MAX_CONNECTIONS 1024
#define EXTENDER_PER_IP_CONNECTIONS 128
#define EXTENDER_IDLE_TIMEOUT_S 15
/* Bytes of request bodies held at once (503 beyond: the pod is retried
 * later): the larger of 8 MiB and two bodies of --max-request-bytes. A
 * body is held until its reply is sent, so this also bounds how many
 * large documents are parsed at once (each ~12 x its text at worst,
 * protocol.h), whatever the number of connections. */
#define EXTENDER_BODIES_MIN_BYTES ((size_t)8 << 20)

/* A metrics port that cannot be opened (taken by a second extender on the
 * host, say) is logged as an error, and scheduling goes on: metrics are
 * worth less than placing pods. */
static void serve_metrics(struct extender *ext)
{
    if (ext->cfg->metrics_port == 0)
        return;
    const struct httpd_options opt = {
        .host = ext->cfg->address,
        .port = (unsigned)ext->cfg->metrics_port,
        .what = "metrics port",
        .max_body = 1024,
        .thread_per_connection = true,
        .max_connections = 64,
        .per_ip_limit = 8, /* a scraper uses one; one client cannot take the rest */
        .idle_timeout_s = EXTENDER_IDLE_TIMEOUT_S,
        .request_deadline_s = EXTENDER_IDLE_TIMEOUT_S,
    };
    char why[256];
    if (httpd_start(&opt, metrics_handle, ext, &ext->metrics_http, why, sizeof(why)) != 0) {
        log_error("no /metrics: cannot open metrics port %d: %s", ext->cfg->metrics_port, why);
        return;
    }
    log_info("metrics at http://<address>:%u/metrics", httpd_port(ext->metrics_http));
}


int extender_serve(struct extender *ext, char *err, size_t errlen)
{
    /* A liveness probe presents no client certificate. */
    static const char *const open_paths[] = {"/healthz", "/version", NULL};
    size_t held_bodies = ext->max_body * 2;
    if (held_bodies < EXTENDER_BODIES_MIN_BYTES)
        held_bodies = EXTENDER_BODIES_MIN_BYTES;
    const char *address = ext->cfg->address;
    if (address && *address && !httpd_host_is_numeric(address)) { /* no resolver at start-up */
        snprintf(err, errlen, "--address %s is not a numeric IPv4 or IPv6 address", address);
        return -1;
    }
    const struct httpd_options opt = {
        .host = address,
        .port = (unsigned)ext->cfg->port,
        .what = "address",
        .tls_cert_pem = ext->tls_cert_pem,
        .tls_key_pem = ext->tls_key_pem,
        .tls_client_ca_pem = ext->client_ca_pem,
        .open_paths = open_paths,
        .max_body = ext->max_body,
        .max_body_total = held_bodies,
        .thread_per_connection = true, /* a bind blocks on the API server */
        .max_connections = EXTENDER_MAX_CONNECTIONS,
        .per_ip_limit = EXTENDER_PER_IP_CONNECTIONS,
        .idle_timeout_s = EXTENDER_IDLE_TIMEOUT_S,
        .request_deadline_s = EXTENDER_IDLE_TIMEOUT_S,
    };
    if (httpd_start(&opt, extender_handle, ext, &ext->http, err, errlen) != 0)
        return -1;
    serve_metrics(ext);
    /* The cache holds the nodes by now (the port opens after the first
     * LISTs): the first sweep finds them. Every replica sweeps, leader or
     * not: any of them may answer /ui/usage.json. */
    if (ext->ui_usage && ui_usage_start(ext->ui_usage, err, errlen) != 0)
        return -1;
    /* The election starts once this replica can answer forwarded binds. */
    if (ext->leader && leader_start(ext->leader, err, errlen) < 0)
        return -1;
    return 0;
}

int extender_port(const struct extender *ext)
{
    return ext->http ? (int)httpd_port(ext->http) : -1;
}

void extender_free(struct extender *ext)
{
    if (!ext)
        return;
    /* First: no new bind, the ones in flight end, the Lease is released
     * while HTTP still answers (forwarded binds meet a refusal, not a
     * closed port). */
    leader_free(ext->leader);
    httpd_stop(ext->http);
    httpd_stop(ext->metrics_http);
    if (ext->cancel)
        kube_cancel_fire(ext->cancel);
    for (int i = 0; i < 3; i++)
        if (ext->collections[i].started)
            pthread_join(ext->collections[i].thread, NULL);
    kube_cancel_free(ext->cancel);
    ui_usage_free(ext->ui_usage); /* its sweep reads the cache */
    cache_free(ext->cache);
    kube_client_free(ext->watch_client);
    kube_client_free(ext->leader_client);
    for (int i = 0; i < 3; i++)
        kube_cancel_free(ext->collections[i].relist);
    for (int i = 0; i < API_CLIENTS; i++)
        kube_client_free(ext->api[i]);
    free(ext->tls_cert_pem);
    free(ext->tls_key_pem);
    free(ext->client_ca_pem);
    pthread_mutex_destroy(&ext->sync_lock);
    pthread_cond_destroy(&ext->sync_cond);
    free(ext);
}

/* cli.c -- arguments, the three LISTs, and the choice of view (cli.h). */
#include "cli.h"

#include "clock.h"
#include "kube.h"
#include "log.h"
#include "options.h"
#include "pool_dra.h"
#include "pool_model.h"
#include "render.h"
#include "usage_extender.h"
#include "usage_fetch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLI_PAGE_LIMIT 500
/* A watch-cache LIST comes in one answer: 5,000 real nodes of ~15 KB each
 * are 75 MB. Bigger lists are read again in pages (list_collection). */
#define CLI_MAX_LIST_BYTES ((size_t)256 << 20)
#define GPUSHARE_PROGRAM "kubectl-inspect-gpushare"

enum output { OUTPUT_TABLE, OUTPUT_WIDE, OUTPUT_JSON };

struct cli_options {
    char *kubeconfig;
    char *context;
    char *cluster;
    char *user;
    int exec_timeout_ms;
    char *pod_namespace;
    bool cache;
    int output;
    bool details;
    int verbosity;
    /* top, and the used figures of inspect -o wide */
    bool metrics;
    int from; /* enum usage_source */
    char *extender_service;
    int metrics_port;
    int workers;
    int metrics_timeout_ms;
    int sort_by;
    bool all_namespaces;
    char *selector;
    char *node_name;
};

static const struct option_value outputs[] = {
    {.name = "table", .value = OUTPUT_TABLE},
    {.name = "wide", .value = OUTPUT_WIDE},
    {.name = "json", .value = OUTPUT_JSON},
    {NULL, 0, NULL},
};

/* The flags every command shares, laid out as table rows: */
/* clang-format off */
#define KUBE_FLAGS                                                                              \
    {.flag = "kubeconfig", .type = OPT_STRING,                                                  \
     .offset = offsetof(struct cli_options, kubeconfig), .def = "",                           \
     .help = "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"},            \
    {.flag = "context", .type = OPT_STRING, .offset = offsetof(struct cli_options, context),  \
     .def = "", .help = "kubeconfig context (default: its current-context)"},                  \
    {.flag = "cluster", .type = OPT_STRING, .offset = offsetof(struct cli_options, cluster),  \
     .def = "", .help = "kubeconfig cluster to use instead of the context's"},                 \
    {.flag = "user", .type = OPT_STRING, .offset = offsetof(struct cli_options, user),        \
     .def = "", .help = "kubeconfig user to use instead of the context's"},                    \
    {.flag = "exec-timeout", .type = OPT_DURATION,                                             \
     .offset = offsetof(struct cli_options, exec_timeout_ms), .def = "60s", .min = 1,         \
     .help = "how long an exec credential plugin may run before it is killed"},               \
    {.flag = "cache", .type = OPT_BOOL, .offset = offsetof(struct cli_options, cache),           \
     .def = "true",                                                                            \
     .help = "read the lists from the apiserver's watch cache (resourceVersion=0: fast, may "  \
             "lag etcd by a moment); false: from etcd, 500 objects per page, like kubectl get"}, \
    {.flag = "v", .type = OPT_INT, .offset = offsetof(struct cli_options, verbosity),          \
     .def = "0", .min = 0, .max = 10, .help = "log verbosity (1: timings, on stderr)"},        \
    {.flag = "help", .alias = {"h"}, .type = OPT_HELP, .help = "show this help"},              \
    {.flag = "version", .type = OPT_VERSION, .help = "print the version"}
/* clang-format on */

enum usage_source { FROM_AUTO, FROM_AGENTS, FROM_EXTENDER };

static const struct option_value sources[] = {
    {.name = "auto", .value = FROM_AUTO},
    {.name = "agents", .value = FROM_AGENTS},
    {.name = "extender", .value = FROM_EXTENDER},
    {NULL, 0, NULL},
};

static const struct option_value sort_keys[] = {
    {.name = "name", .value = TOP_SORT_NAME},
    {.name = "booked", .value = TOP_SORT_BOOKED},
    {.name = "used", .value = TOP_SORT_USED},
    {.name = "sm", .value = TOP_SORT_SM},
    {NULL, 0, NULL},
};

/* Where the used figures come from (usage_fetch.h), for top and wide: */
/* clang-format off */
#define METRICS_FLAGS                                                                          \
    {.flag = "from", .type = OPT_ENUM, .values = sources,                                     \
     .offset = offsetof(struct cli_options, from), .def = "auto",                             \
     .help = "used figures: extender (its background sweep of the agents, one request, up "   \
             "to one interval old; GPU-sharing nodes only), agents (each node's through the "  \
             "node proxy, one request per node) or auto (the extender, the agents for nodes "  \
             "it does not cover, all agents when it cannot be read)"},                        \
    {.flag = "extender-service", .type = OPT_STRING,                                          \
     .offset = offsetof(struct cli_options, extender_service),                                \
     .def = "kube-system/gpupool-scheduler-extender:http",                                    \
     .help = "--from auto|extender: its Service, NAMESPACE/NAME:PORT, read through the API "  \
             "server's service proxy"},                                                       \
    {.flag = "metrics-port", .type = OPT_INT,                                                 \
     .offset = offsetof(struct cli_options, metrics_port), .def = "9401", .min = 1,          \
     .max = 65535,                                                                            \
     .help = "the node agents' metrics port (their --metrics-addr), read through the API "    \
             "server's node proxy (--from agents, and auto's fallback)"},                     \
    {.flag = "workers", .type = OPT_INT, .offset = offsetof(struct cli_options, workers),    \
     .def = "64", .min = 1, .max = 1024,                                                      \
     .help = "node agents read at the same time (one connection each)"},                     \
    {.flag = "metrics-timeout", .type = OPT_DURATION,                                         \
     .offset = offsetof(struct cli_options, metrics_timeout_ms), .def = "5s", .min = 1,     \
     .help = "time for the used figures: the extender's answer (and its first sweep, when "    \
             "it has just started) or every agent's; those not read by then show no data"}

/* inspect's and gpushare's, not top's: */
#define DETAILS_FLAG                                                                           \
    {.flag = "details", .alias = {"d"}, .type = OPT_BOOL,                                      \
     .offset = offsetof(struct cli_options, details), .def = "false",                          \
     .help = "per node: GPUs and the pods on them"}
/* clang-format on */

static const struct option_spec gpupool_specs[] = {
    KUBE_FLAGS,
    DETAILS_FLAG,
    {.flag = "namespace",
     .alias = {"n"},
     .type = OPT_STRING,
     .offset = offsetof(struct cli_options, pod_namespace),
     .def = "",
     .help = "list only this namespace's pods in -d and json (totals stay cluster-wide)"},
    {.flag = "output",
     .alias = {"o"},
     .type = OPT_ENUM,
     .values = outputs,
     .offset = offsetof(struct cli_options, output),
     .def = "table",
     .help = "table (a row per node), wide (a row per GPU, with the agents' used memory "
             "and SM utilization) or json"},
    {.flag = "metrics",
     .type = OPT_BOOL,
     .offset = offsetof(struct cli_options, metrics),
     .def = "true",
     .help = "-o wide: read the node agents' metrics for the USED and SM columns"},
    METRICS_FLAGS,
};

static const struct option_spec gpushare_specs[] = {KUBE_FLAGS, DETAILS_FLAG};

static const struct option_spec top_specs[] = {
    KUBE_FLAGS,
    METRICS_FLAGS,
    {.flag = "namespace",
     .alias = {"n"},
     .type = OPT_STRING,
     .offset = offsetof(struct cli_options, pod_namespace),
     .def = "",
     .help = "pods: this namespace's (default: the context's namespace)"},
    {.flag = "all-namespaces",
     .alias = {"A"},
     .type = OPT_BOOL,
     .offset = offsetof(struct cli_options, all_namespaces),
     .def = "false",
     .help = "pods: of every namespace"},
    {.flag = "selector",
     .alias = {"l"},
     .type = OPT_STRING,
     .offset = offsetof(struct cli_options, selector),
     .def = "",
     .help = "label selector: of pods (top pods) or nodes (top gpus)"},
    {.flag = "node",
     .type = OPT_STRING,
     .offset = offsetof(struct cli_options, node_name),
     .def = "",
     .help = "only this node's pods or GPUs (its figures from the extender's sweep, else "
             "from its agent)"},
    {.flag = "sort-by",
     .type = OPT_ENUM,
     .values = sort_keys,
     .offset = offsetof(struct cli_options, sort_by),
     .def = "name",
     .help = "name, or largest first: booked, used, sm"},
    {.flag = "output",
     .alias = {"o"},
     .type = OPT_ENUM,
     .values = outputs,
     .offset = offsetof(struct cli_options, output),
     .def = "table",
     .help = "table, wide (more columns: utilization of memory, processes, UUID, a bar) "
             "or json"},
};

static const struct options_table top_table = {
    .program = "kubectl-gpupool top",
    .version = GP_VERSION,
    .summary = "kubectl gpupool top [pods|gpus] [--node N] [-n NS|-A] [-l SEL] [--sort-by K] "
               "[-o wide|json]\n\n"
               "GPU use beside what is booked: per pod (booked GPU memory, its limit, the\n"
               "memory it uses, SM utilization) or per GPU (total, booked, used, SM\n"
               "utilization). Used figures come from the node agents' /metrics: by\n"
               "default from the scheduler extender's background sweep of them, one\n"
               "request through its Service (RBAC: get services/proxy), and from each\n"
               "agent through the API server's node proxy (RBAC: get nodes/proxy) for\n"
               "the nodes the sweep does not cover, or all of them when the extender\n"
               "cannot be read (--from). A figure an agent did not give reads \"no data\".",
    .specs = top_specs,
    .count = sizeof top_specs / sizeof top_specs[0],
};

static const struct options_table gpupool_table = {
    .program = "kubectl-gpupool",
    .version = GP_VERSION,
    .summary = "kubectl gpupool inspect [NODE] [-d] [-o wide|json]\n\n"
               "Shows the GPU pool: per node and per GPU the GPU memory allocated to\n"
               "shares (aliyun.com/gpu-mem pods), pending shares, unhealthy GPUs, and the\n"
               "whole-GPU / replica / MIG resources (nvidia.com/*) requested against\n"
               "what the nodes offer, with cluster totals.",
    .specs = gpupool_specs,
    .count = sizeof gpupool_specs / sizeof gpupool_specs[0],
};

static const struct options_table gpushare_table = {
    .program = GPUSHARE_PROGRAM,
    .version = GP_VERSION,
    .summary = "kubectl inspect gpushare [-d] [NODE]\n\n"
               "gpushare's inspect tables, computed by gpupool.",
    .specs = gpushare_specs,
    .count = sizeof gpushare_specs / sizeof gpushare_specs[0],
};

/* ---- arguments ---- */

static bool flag_takes_value(const struct options_table *t, const char *arg)
{
    const char *name = arg + (arg[1] == '-' ? 2 : 1);
    if (strchr(name, '='))
        return false;
    for (size_t i = 0; i < t->count; i++) {
        const struct option_spec *o = &t->specs[i];
        const char *names[3] = {o->flag, o->alias[0], o->alias[1]};
        for (int k = 0; k < 3 && names[k]; k++)
            if (strcmp(names[k], name) == 0)
                return o->type != OPT_BOOL && o->type != OPT_HELP && o->type != OPT_VERSION;
    }
    return false;
}

/* The option engine takes flags only: positional words (the command, the
 * node) are moved out of argv first, flags may come before or after them. */
static int split_args(const struct options_table *t, int argc, char **argv, char **flags,
                      int *nflags, char **words, int *nwords)
{
    *nflags = 0;
    *nwords = 0;
    flags[(*nflags)++] = argv[0];
    bool only_words = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!only_words && strcmp(arg, "--") == 0) {
            only_words = true;
        } else if (!only_words && arg[0] == '-' && arg[1] != '\0') {
            flags[(*nflags)++] = argv[i];
            if (flag_takes_value(t, arg) && i + 1 < argc)
                flags[(*nflags)++] = argv[++i];
        } else {
            words[(*nwords)++] = argv[i];
        }
    }
    return 0;
}

enum command { CMD_INSPECT, CMD_TOP_PODS, CMD_TOP_GPUS };

struct invocation {
    bool gpushare; /* kubectl-inspect-gpushare personality */
    enum command command;
    const struct options_table *table; /* the one opt was parsed with */
    struct cli_options opt;
    const char *node; /* NULL: all nodes */
};

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Returns 0 to run, 1 when help/version was printed, 2 on a usage error. */
static int parse_args(int argc, char **argv, struct invocation *inv, FILE *errout)
{
    inv->gpushare = argc > 0 && strcmp(base_name(argv[0]), GPUSHARE_PROGRAM) == 0;
    const struct options_table *t = inv->gpushare ? &gpushare_table : &gpupool_table;
    inv->table = t;
    char **flags = calloc((size_t)argc + 1, sizeof *flags);
    char **words = calloc((size_t)argc + 1, sizeof *words);
    char err[512];
    int nflags, nwords, rc = 2;
    if (!flags || !words || argc < 1) {
        fprintf(errout, "error: out of memory\n");
        goto out;
    }
    split_args(t, argc, argv, flags, &nflags, words, &nwords);
    if (!inv->gpushare) {
        /* The command picks the flag table; top's flags that take a value
         * are a superset of inspect's, so splitting with top's finds the
         * command wherever the flags are. */
        split_args(&top_table, argc, argv, flags, &nflags, words, &nwords);
        if (nwords > 0 && strcmp(words[0], "top") == 0)
            t = &top_table;
        else
            split_args(t, argc, argv, flags, &nflags, words, &nwords);
        inv->table = t;
    }
    enum options_result r = OPTIONS_ERROR;
    if (options_defaults(t, &inv->opt, err, sizeof err) == 0)
        r = options_apply_argv(t, &inv->opt, nflags, flags, err, sizeof err);
    if (r != OPTIONS_OK) {
        if (r == OPTIONS_ERROR)
            fprintf(errout, "error: %s\n", err);
        rc = r == OPTIONS_EXIT ? 1 : 2;
        goto out;
    }
    int first = 0;
    if (!inv->gpushare) {
        if (nwords == 0 || strcmp(words[0], "help") == 0) {
            options_print_usage(t, nwords ? stdout : errout);
            rc = nwords ? 1 : 2;
            goto out;
        }
        if (strcmp(words[0], "version") == 0) {
            options_print_version(t, stdout);
            rc = 1;
            goto out;
        }
        if (strcmp(words[0], "top") == 0) {
            const char *view = nwords > 1 ? words[1] : "pods";
            if (strcmp(view, "pods") == 0 || strcmp(view, "pod") == 0 || strcmp(view, "po") == 0)
                inv->command = CMD_TOP_PODS;
            else if (strcmp(view, "gpus") == 0 || strcmp(view, "gpu") == 0)
                inv->command = CMD_TOP_GPUS;
            else {
                fprintf(errout, "error: unknown view \"%s\" (top pods, top gpus)\n", view);
                goto out;
            }
            if (nwords > 2) {
                fprintf(errout, "error: unexpected \"%s\" (use --node to pick a node)\n", words[2]);
                goto out;
            }
            inv->node = inv->opt.node_name[0] ? inv->opt.node_name : NULL;
            rc = 0;
            goto out;
        }
        if (strcmp(words[0], "inspect") != 0) {
            fprintf(errout,
                    "error: unknown command \"%s\" (commands: inspect, top, version, help)\n",
                    words[0]);
            goto out;
        }
        first = 1;
    }
    if (nwords - first > 1) {
        fprintf(errout, "error: expected at most one node name, got \"%s\" and \"%s\"\n",
                words[first], words[first + 1]);
        goto out;
    }
    inv->node = nwords > first ? words[first] : NULL;
    rc = 0;
out:
    free(flags);
    free(words);
    return rc;
}

/* ---- reading the cluster ---- */

/* One collection's LIST. Items go to `add` (into the pool) or, for the
 * pods read beside the nodes, to `pods`. */
struct reader {
    struct kube_client *client;
    unsigned flags; /* KUBE_LIST_ANY_VERSION unless --cache=false */
    struct pool *pool;
    int (*add)(struct pool *pool, const json_t *item);
    struct pool_pods *pods;
    const char *what, *path;
    struct kube_error err;
    int rc;
};

static int on_item(json_t *item, void *ctx)
{
    struct reader *r = ctx;
    return r->pods ? pool_pods_add(r->pods, item) : r->add(r->pool, item);
}

/* A local failure: no HTTP status or reason of the server's. */
static void out_of_memory(struct kube_error *err, const char *reading)
{
    snprintf(err->message, sizeof err->message, "out of memory%s%s",
             reading ? " while reading " : "", reading ? reading : "");
    err->http_status = 0;
    err->reason[0] = '\0';
}

static double now_ms(void)
{
    return (double)clock_now_ns() / 1e6;
}

/* LISTs r->path. A watch-cache answer too big for the client's body limit
 * is asked for again page by page from etcd (nothing was delivered yet). */
static int list_collection(struct reader *r)
{
    double start = now_ms();
    enum kube_result res = kube_list(r->client, r->path, CLI_PAGE_LIMIT,
                                     r->flags | KUBE_LIST_PROTOBUF, on_item, r, NULL, &r->err);
    if (res == KUBE_ERROR && r->flags != KUBE_LIST_CONSISTENT &&
        strcmp(r->err.reason, "TooLarge") == 0) {
        log_v(1, "%s: too large for one answer; listing again in pages", r->what);
        res = kube_list(r->client, r->path, CLI_PAGE_LIMIT,
                        KUBE_LIST_CONSISTENT | KUBE_LIST_PROTOBUF, on_item, r, NULL, &r->err);
    }
    if (res == KUBE_OK)
        log_v(1, "listed %s in %.1f ms", r->what, now_ms() - start);
    if (res == KUBE_ERROR && strcmp(r->err.reason, "CallbackError") == 0)
        out_of_memory(&r->err, r->what); /* the pool's callbacks fail only for memory */
    if (res == KUBE_GONE)                /* a continue token expired: run() starts over */
        r->err.http_status = 410;
    return res == KUBE_OK ? 0 : -1;
}

static int list_into(struct reader *r, const char *what, const char *path,
                     int (*add)(struct pool *, const json_t *))
{
    r->what = what;
    r->path = path;
    r->add = add;
    return list_collection(r);
}

static void *list_in_thread(void *arg)
{
    struct reader *r = arg;
    r->rc = list_collection(r);
    return NULL;
}

static char *selector_path(const char *base, const char *field, const char *value)
{
    size_t len = strlen(field) + strlen(value) + 2;
    char *selector = malloc(len);
    if (!selector)
        return NULL;
    snprintf(selector, len, "%s=%s", field, value);
    char *escaped = kube_escape(selector);
    free(selector);
    if (!escaped)
        return NULL;
    size_t plen = strlen(base) + strlen(escaped) + 32;
    char *path = malloc(plen);
    if (path)
        snprintf(path, plen, "%s?fieldSelector=%s", base, escaped);
    free(escaped);
    return path;
}

/* base?fieldSelector=..&labelSelector=.. (either may be NULL or ""). */
static char *query_path(const char *base, const char *field_selector, const char *label_selector)
{
    bool fs = field_selector && field_selector[0], ls = label_selector && label_selector[0];
    char *f = fs ? kube_escape(field_selector) : NULL;
    char *l = ls ? kube_escape(label_selector) : NULL;
    char *path = NULL;
    if ((!fs || f) && (!ls || l)) {
        size_t len = strlen(base) + (f ? strlen(f) : 0) + (l ? strlen(l) : 0) + 40;
        path = malloc(len);
        if (path)
            snprintf(path, len, "%s%s%s%s%s%s", base, fs || ls ? "?" : "",
                     fs ? "fieldSelector=" : "", fs ? f : "", fs && ls ? "&" : "",
                     ls ? "labelSelector=" : "");
        if (path && ls)
            strcat(path, l);
    }
    free(f);
    free(l);
    return path;
}

/* The collections one invocation reads: inspect reads every pod and node;
 * top pods only the namespace's and selector's pods, top gpus only the
 * selector's nodes. */
struct scope {
    bool dra;                  /* read DRA's slices and claims too (inspect) */
    const char *pods_base;     /* "/api/v1/pods" or ".../namespaces/NS/pods" */
    const char *pod_selector;  /* label selector, NULL for all */
    const char *node_selector; /* label selector, NULL for all */
};

static int read_configmaps(struct reader *r, const char *path, FILE *errout, bool quiet)
{
    if (list_into(r, "configmaps", path, pool_add_configmap) == 0)
        return 0;
    if (r->err.http_status != 403 && r->err.http_status != 401)
        return -1;
    if (!quiet)
        fprintf(errout, "warning: unhealthy-GPU ConfigMaps not readable: %s\n", r->err.message);
    return 0;
}

#define DRA_SLICES_PATH "/apis/resource.k8s.io/v1/resourceslices"
#define DRA_CLAIMS_PATH "/apis/resource.k8s.io/v1/resourceclaims"

/* One of DRA's collections (pool_dra.h), in JSON (the client decodes
 * protobuf for core kinds only). A server without resource.k8s.io/v1 (404:
 * before 1.34, or DRA off) has no DRA to show; one whose RBAC hides it
 * (403) gets a warning, as the ConfigMaps do; a 401 is the error it is. */
static int read_dra(struct reader *r, const char *what, const char *path,
                    int (*add)(struct pool *, const json_t *), FILE *errout, bool quiet)
{
    r->what = what;
    r->path = path;
    r->add = add;
    enum kube_result res =
        kube_list(r->client, path, CLI_PAGE_LIMIT, r->flags, on_item, r, NULL, &r->err);
    if (res == KUBE_OK)
        return 0;
    if (res == KUBE_ERROR && strcmp(r->err.reason, "CallbackError") == 0) {
        out_of_memory(&r->err, what);
        return -1;
    }
    if (res == KUBE_GONE)
        r->err.http_status = 410; /* run() starts over */
    if (r->err.http_status == 404) {
        log_v(1, "%s: not served (%s): no DRA", what, r->err.message);
        return 0;
    }
    /* 403 only: a 401 (bad credentials) fails everything else too. */
    if (r->err.http_status == 403) {
        if (!quiet)
            fprintf(errout, "warning: %s not readable: %s\n", what, r->err.message);
        return 0;
    }
    return -1;
}

static int read_dra_slices(struct reader *r, const char *path, FILE *errout, bool quiet)
{
    if (read_dra(r, "resourceslices", path, pool_add_resourceslice, errout, quiet) != 0)
        return -1;
    if (pool_dra_index(r->pool) != 0) {
        out_of_memory(&r->err, "resourceslices");
        return -1;
    }
    return 0;
}

/* inspect NODE: the node, its unhealthy-GPU ConfigMap, its pods. */
static int read_node(struct reader *r, const char *node, const struct scope *scope, FILE *errout,
                     bool quiet)
{
    int rc = -1;
    json_t *obj = NULL;
    char *nodes_path = NULL, *cm_path = NULL, *pods_path = NULL;
    char *escaped = kube_escape(node);
    size_t len = escaped ? strlen(escaped) + 16 : 0;
    nodes_path = escaped ? malloc(len) : NULL;
    if (nodes_path)
        snprintf(nodes_path, len, "/api/v1/nodes/%s", escaped);
    free(escaped);
    if (!nodes_path)
        goto oom;
    char field[300];
    snprintf(field, sizeof field, "spec.nodeName=%s", node);
    if (scope->dra) {
        char *slices_path = query_path(DRA_SLICES_PATH, field, NULL);
        int drc = slices_path ? read_dra_slices(r, slices_path, errout, quiet) : -1;
        free(slices_path);
        if (!slices_path)
            goto oom;
        if (drc != 0)
            goto out;
    }
    if (kube_get(r->client, nodes_path, &obj, &r->err) != 0)
        goto out;
    int added = pool_add_node(r->pool, obj);
    json_decref(obj);
    if (added != 0)
        goto oom;
    char cm_name[300];
    snprintf(cm_name, sizeof cm_name, POOL_CM_UNHEALTHY_PREFIX "%s", node);
    cm_path = selector_path("/api/v1/namespaces/kube-system/configmaps", "metadata.name", cm_name);
    pods_path = query_path(scope->pods_base, field, scope->pod_selector);
    if (!cm_path || !pods_path)
        goto oom;
    if (read_configmaps(r, cm_path, errout, quiet) == 0 &&
        list_into(r, "pods", pods_path, pool_add_pod) == 0 &&
        (!scope->dra || r->pool->ndra == 0 ||
         read_dra(r, "resourceclaims", DRA_CLAIMS_PATH, pool_add_resourceclaim, errout, quiet) ==
             0))
        rc = 0;
    goto out;
oom:
    out_of_memory(&r->err, NULL);
out:
    free(nodes_path);
    free(cm_path);
    free(pods_path);
    return rc;
}

/* The whole pool. The pods are listed in a second thread, on a second
 * connection, while this one lists the nodes and the ConfigMaps: at
 * thousands of nodes the apiserver's time to encode each list is most of
 * the wait, and two lists encode in parallel. Pods are kept as small
 * records (pool_pods) until the nodes they run on are known. */
static int read_all(struct reader *r, struct kube_client *pods_client, const struct scope *scope,
                    FILE *errout, bool quiet)
{
    struct pool_pods pods = {0};
    char *pods_path = query_path(scope->pods_base, NULL, scope->pod_selector);
    char *nodes_path = query_path("/api/v1/nodes", NULL, scope->node_selector);
    if (!pods_path || !nodes_path) {
        free(pods_path);
        free(nodes_path);
        out_of_memory(&r->err, NULL);
        return -1;
    }
    struct reader pr = {.client = pods_client ? pods_client : r->client,
                        .flags = r->flags,
                        .pods = &pods,
                        .what = "pods",
                        .path = pods_path};
    pthread_t thread;
    bool threaded = pods_client != NULL && pthread_create(&thread, NULL, list_in_thread, &pr) == 0;
    /* The slices first: a node with DRA devices is a pool node. */
    int rc = scope->dra ? read_dra_slices(r, DRA_SLICES_PATH, errout, quiet) : 0;
    if (rc == 0)
        rc = list_into(r, "nodes", nodes_path, pool_add_node);
    if (rc == 0 && r->pool->nnodes > 0)
        rc = read_configmaps(r, "/api/v1/namespaces/kube-system/configmaps", errout, quiet);
    if (rc == 0 && r->pool->ndra > 0)
        rc = read_dra(r, "resourceclaims", DRA_CLAIMS_PATH, pool_add_resourceclaim, errout, quiet);
    if (threaded)
        pthread_join(thread, NULL);
    else if (rc == 0 && r->pool->nnodes > 0)
        list_in_thread(&pr); /* no second connection or thread: one after the other */
    if (rc == 0 && (threaded || r->pool->nnodes > 0) && pr.rc != 0) {
        r->err = pr.err;
        rc = -1;
    }
    if (rc == 0 && pool_add_pods(r->pool, &pods) != 0) {
        out_of_memory(&r->err, "pods");
        rc = -1;
    }
    pool_pods_free(&pods);
    free(pods_path);
    free(nodes_path);
    return rc;
}

static int read_cluster(struct reader *r, struct kube_client *pods_client,
                        const struct invocation *inv, const struct scope *scope, FILE *errout)
{
    return inv->node ? read_node(r, inv->node, scope, errout, inv->gpushare)
                     : read_all(r, pods_client, scope, errout, inv->gpushare);
}

static void report_error(const struct invocation *inv, const struct kube_error *err, FILE *out,
                         FILE *errout)
{
    if (inv->gpushare) /* gpushare's wording, on stdout */
        fprintf(out, "Failed due to %s\n", err->message);
    else if (err->http_status > 0 && err->reason[0])
        fprintf(errout, "Error from server (%s): %s\n", err->reason, err->message);
    else
        fprintf(errout, "error: %s\n", err->message);
}

static bool wants_usage(const struct invocation *inv)
{
    return inv->command != CMD_INSPECT || (!inv->gpushare && inv->opt.output == OUTPUT_WIDE &&
                                           !inv->opt.details && inv->opt.metrics);
}

static int render(const struct invocation *inv, const struct pool *pool,
                  const struct node_usage *usage, FILE *out)
{
    bool json = inv->opt.output == OUTPUT_JSON, wide = inv->opt.output == OUTPUT_WIDE;
    if (inv->command == CMD_TOP_PODS)
        return render_top_pods(pool, usage, inv->opt.sort_by, json, wide, out);
    if (inv->command == CMD_TOP_GPUS)
        return render_top_gpus(pool, usage, inv->opt.sort_by, json, wide, out);
    if (inv->gpushare)
        return inv->opt.details ? render_gpushare_details(pool, out)
                                : render_gpushare_summary(pool, out);
    if (json)
        return render_json(pool, out);
    if (inv->opt.details)
        return render_details(pool, out);
    return wide ? render_wide(pool, usage, out) : render_table(pool, out);
}

/* The nodes whose agents a view needs: top pods, those running a listed
 * pod (so -n or -l cut the fan-out too); otherwise every pool node. */
static bool node_in_view(const struct invocation *inv, const struct pool_node *n)
{
    if (inv->command != CMD_TOP_PODS)
        return true;
    for (size_t r = 0; r < n->nresources; r++)
        if (n->resources[r].npods > 0)
            return true;
    return n->nshares > 0;
}

/* Reads the agents (through the node proxy) of names[k] whose got[k] is
 * still USAGE_NOT_READ: every node, or after the extender's sweep those
 * it does not cover (whole-GPU and time-sliced nodes). -1 with err when no
 * worker could start. */
static int read_agents(const struct invocation *inv, const struct kube_client_options *kopt,
                       const char **names, struct node_usage *got, size_t n, bool via_extender,
                       char *err, size_t errlen)
{
    const char **ask = calloc(n ? n : 1, sizeof *ask);
    size_t *at = calloc(n ? n : 1, sizeof *at);
    struct node_usage *fresh = calloc(n ? n : 1, sizeof *fresh);
    size_t m = 0;
    int rc = -1;
    if (!ask || !at || !fresh) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < n; k++)
        if (got[k].state == USAGE_NOT_READ) {
            ask[m] = names[k];
            at[m++] = k;
        }
    if (via_extender)
        log_v(1, "%zu of %zu nodes are not in the extender's sweep: reading their agents", m, n);
    struct usage_fetch_options fo = {.client = kopt,
                                     .port = inv->opt.metrics_port,
                                     .workers = inv->opt.workers,
                                     .timeout_ms = inv->opt.metrics_timeout_ms};
    struct usage_fetch_stats st = {0};
    rc = m > 0 ? usage_fetch(&fo, ask, m, fresh, &st, err, errlen) : 0;
    for (size_t j = 0; j < m; j++) {
        got[at[j]] = fresh[j]; /* moved */
        fresh[j] = (struct node_usage){0};
    }
out:
    free(ask);
    free(at);
    free(fresh);
    return rc;
}

/* Reads the agents of the view's nodes into usage[] (pool order). Failed
 * nodes are summed up on errout: their figures read "no data". */
static int read_usage(const struct invocation *inv, const struct kube_client_options *kopt,
                      struct kube_client *client, const struct pool *pool, struct node_usage *usage,
                      FILE *errout)
{
    const char **names = calloc(pool->nnodes ? pool->nnodes : 1, sizeof *names);
    struct node_usage *got = calloc(pool->nnodes ? pool->nnodes : 1, sizeof *got);
    size_t *where = calloc(pool->nnodes ? pool->nnodes : 1, sizeof *where);
    size_t n = 0;
    int rc = -1;
    if (!names || !got || !where) {
        fprintf(errout, "error: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < pool->nnodes; i++)
        if (node_in_view(inv, pool->nodes[i])) {
            names[n] = pool->nodes[i]->name;
            where[n++] = i;
        }
    struct usage_fetch_stats st = {0};
    char err[512];
    bool via_extender = false;
    if (inv->opt.from != FROM_AGENTS && n > 0) { /* no node in the view: nothing to ask */
        via_extender =
            usage_from_extender(client, inv->opt.extender_service, inv->opt.metrics_timeout_ms,
                                names, n, got, err, sizeof err) == 0;
        if (!via_extender) {
            /* Nothing of it is kept: the agents are read for every node. */
            for (size_t k = 0; k < n; k++) {
                node_usage_free(&got[k]);
                got[k] = (struct node_usage){0};
            }
            if (inv->opt.from == FROM_EXTENDER)
                fprintf(errout, "warning: the extender's figures not read: %s\n", err);
            else /* auto: no extender, or one without node metrics, is normal */
                log_v(1, "the extender's figures not read (%s): reading the node agents", err);
        }
    }
    if (inv->opt.from == FROM_EXTENDER) {
        for (size_t k = 0; k < n; k++)
            if (got[k].state == USAGE_NOT_READ && via_extender)
                got[k].state = USAGE_FAILED; /* its reason is set */
    } else if (read_agents(inv, kopt, names, got, n, via_extender, err, sizeof err) != 0) {
        fprintf(errout, "warning: node agents' metrics not read: %s\n", err);
    }
    for (size_t k = 0; k < n; k++)
        st.failed += got[k].state == USAGE_FAILED;
    if (st.failed > 0) {
        size_t shown = 0;
        for (size_t k = 0; k < n && shown < 3; k++)
            if (got[k].state == USAGE_FAILED) {
                fprintf(errout, "warning: no metrics from node %s: %s\n", names[k], got[k].error);
                shown++;
            }
        if (st.failed > shown)
            fprintf(errout, "warning: no metrics from %zu more nodes (-v 2 names them)\n",
                    st.failed - shown);
        /* The agents' reader logs its own failures at -v 2, but not those
         * of the extender's sweep: name every one here. */
        for (size_t k = 0, seen = 0; k < n; k++)
            if (got[k].state == USAGE_FAILED && seen++ >= shown)
                log_v(2, "no metrics from node %s: %s", names[k], got[k].error);
    }
    for (size_t k = 0; k < n; k++) {
        usage[where[k]] = got[k]; /* moved: got's records are not freed here */
        got[k] = (struct node_usage){0};
    }
    rc = 0;
out:
    free(names);
    free(got);
    free(where);
    return rc;
}

static int run(const struct invocation *inv, FILE *out, FILE *errout)
{
    char err[1024];
    struct kube_client_options kopt = {
        .kubeconfig = inv->opt.kubeconfig[0] ? inv->opt.kubeconfig : NULL,
        .context = inv->opt.context[0] ? inv->opt.context : NULL,
        .cluster = inv->opt.cluster[0] ? inv->opt.cluster : NULL,
        .user = inv->opt.user[0] ? inv->opt.user : NULL,
        .exec_timeout_ms = inv->opt.exec_timeout_ms,
        .user_agent =
            inv->gpushare ? GPUSHARE_PROGRAM "/" GP_VERSION : "kubectl-gpupool/" GP_VERSION,
        .connect_timeout_ms = 5000,
        .max_body_bytes = CLI_MAX_LIST_BYTES,
        .retry = {.max_attempts = 3, .initial_backoff_ms = 100, .max_backoff_ms = 1000},
    };
    struct reader r = {.client = kube_client_new(&kopt, err, sizeof err),
                       .flags = inv->opt.cache ? KUBE_LIST_ANY_VERSION : KUBE_LIST_CONSISTENT};
    if (!r.client) {
        struct kube_error e = {0};
        snprintf(e.message, sizeof e.message, "%s", err);
        report_error(inv, &e, out, errout);
        return 1;
    }
    /* The pods' connection; without one, pods are listed after the nodes. */
    struct kube_client *pods_client = inv->node ? NULL : kube_client_new(&kopt, err, sizeof err);
    struct pool pool;
    const char *ns =
        inv->opt.pod_namespace && inv->opt.pod_namespace[0] ? inv->opt.pod_namespace : NULL;
    struct scope scope = {.pods_base = "/api/v1/pods",
                          .dra = inv->command == CMD_INSPECT && !inv->gpushare};
    char pods_base[512];
    if (inv->command == CMD_TOP_PODS) {
        /* kubectl top's rule: the context's namespace unless -n or -A. */
        if (inv->opt.all_namespaces)
            ns = NULL;
        else if (!ns)
            ns = kube_client_namespace(r.client);
        char *escaped = ns ? kube_escape(ns) : NULL;
        if (escaped) {
            snprintf(pods_base, sizeof pods_base, "/api/v1/namespaces/%s/pods", escaped);
            scope.pods_base = pods_base;
        }
        free(escaped);
        scope.pod_selector = inv->opt.selector;
    } else if (inv->command == CMD_TOP_GPUS) {
        ns = NULL;
        scope.node_selector = inv->opt.selector;
    }
    double start = now_ms();
    int rc = 1;
    pool_init(&pool, inv->node, ns);
    r.pool = &pool;
    int read = read_cluster(&r, pods_client, inv, &scope, errout);
    if (read != 0 && (r.err.http_status == 410 || strcmp(r.err.reason, "Interrupted") == 0)) {
        /* A continue token expired mid-list, or an answer broke off after
         * some of its items: start over once, part of the pool was read. */
        log_v(1, "starting over: %s", r.err.message);
        pool_free(&pool);
        pool_init(&pool, inv->node, ns);
        read = read_cluster(&r, pods_client, inv, &scope, errout);
    }
    struct node_usage *usage = NULL;
    if (read != 0) {
        report_error(inv, &r.err, out, errout);
    } else {
        pool_finish(&pool);
        pool_dra_finish(&pool);
        if (pool.warning[0])
            log_v(1, "%s", pool.warning);
        log_v(1, "read %zu pool nodes and %zu pods in %.1f ms", pool.nnodes, pool.pods_seen,
              now_ms() - start);
        if (wants_usage(inv) && !(usage = calloc(pool.nnodes ? pool.nnodes : 1, sizeof *usage))) {
            fprintf(errout, "error: out of memory\n");
        } else if (usage && read_usage(inv, &kopt, r.client, &pool, usage, errout) != 0) {
            /* out of memory, said */
        } else if (render(inv, &pool, usage, out) != 0 || fflush(out) != 0) {
            fprintf(errout, "error: writing the output failed\n");
        } else {
            rc = 0;
        }
        log_v(1, "done in %.1f ms", now_ms() - start);
    }
    for (size_t i = 0; usage && i < pool.nnodes; i++)
        node_usage_free(&usage[i]);
    free(usage);
    pool_free(&pool);
    kube_client_free(pods_client);
    kube_client_free(r.client);
    return rc;
}

int cli_main(int argc, char **argv, FILE *out, FILE *errout)
{
    struct invocation inv = {0};
    int rc = parse_args(argc, argv, &inv, errout);
    if (rc == 0) {
        log_set_verbosity(inv.opt.verbosity);
        rc = run(&inv, out, errout);
    } else if (rc == 1) {
        rc = 0; /* help or version */
    }
    if (inv.table)
        options_free(inv.table, &inv.opt);
    return rc;
}

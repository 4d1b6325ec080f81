/* dra_plugin.c -- registration, the DRAPlugin service and the health stream (see dra_plugin.h). */
#include "dra_plugin.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "arena.h"
#include "clock.h"
#include "dra_health.pb-c.h"
#include "dra_v1.pb-c.h"
#include "errmsg.h"
#include "log.h"
#include "pluginregistration.pb-c.h"

/* The generated names carry the whole package; these say the same shorter. */
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest PrepareRequest;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse PrepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry
    PrepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PrepareOne;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device WireDevice;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest UnprepareRequest;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse UnprepareResponse;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry
    UnprepareEntry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse UnprepareOne;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim WireClaim;

enum dra_method {
    DRA_PREPARE_V1,
    DRA_UNPREPARE_V1,
    DRA_PREPARE_V1BETA1,
    DRA_UNPREPARE_V1BETA1,
    DRA_WATCH_HEALTH,
    DRA_METHOD_COUNT,
};

/* v1 and v1beta1 have the same messages (v1beta1 lacks Device.share_id):
 * both decode with the v1 descriptors and share the handlers. */
static const struct rpc_method DRA_METHODS[DRA_METHOD_COUNT] = {
    [DRA_PREPARE_V1] = {"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
                        RPC_METHOD_UNARY},
    [DRA_UNPREPARE_V1] = {"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
                          RPC_METHOD_UNARY},
    [DRA_PREPARE_V1BETA1] = {"/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"
                             "NodePrepareResources",
                             RPC_METHOD_UNARY},
    [DRA_UNPREPARE_V1BETA1] = {"/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"
                               "NodeUnprepareResources",
                               RPC_METHOD_UNARY},
    [DRA_WATCH_HEALTH] = {"/" DRA_SERVICE_HEALTH "/NodeWatchResources", RPC_METHOD_STREAM},
};

enum reg_method { REG_GET_INFO, REG_NOTIFY, REG_METHOD_COUNT };

static const struct rpc_method REG_METHODS[REG_METHOD_COUNT] = {
    [REG_GET_INFO] = {"/pluginregistration.Registration/GetInfo", RPC_METHOD_UNARY},
    [REG_NOTIFY] = {"/pluginregistration.Registration/NotifyRegistrationStatus", RPC_METHOD_UNARY},
};

#define HEALTH_MESSAGE_LEN 256
/* The kubelet gives each call 45 s. Claims still waiting when a request has
 * run this long are answered with an error instead of being prepared after
 * the kubelet stopped listening (it asks again for what is missing). */
#define REQUEST_BUDGET_MS 40000

struct device_health {
    bool healthy;
    char message[HEALTH_MESSAGE_LEN];
};

/* One parked prepare/unprepare call, for the worker. */
struct job {
    enum dra_method method;
    ProtobufCMessage *request; /* owned: protobuf_c_message_free_unpacked */
    struct rpc_deferred *deferred;
    struct job *next;
};

struct dra_plugin {
    struct dra_plugin_options o;
    struct rpc_runtime *rt;
    struct rpc_server *reg_server, *dra_server;

    pthread_mutex_t lock; /* jobs, stopping, health, generation */
    pthread_cond_t wake;
    struct job *head, *tail;
    bool stopping;
    pthread_t worker;
    bool have_worker;

    /* Guards dra_server for notifies from the health thread while the main
     * thread may restart it (never taken on the gRPC thread). */
    pthread_mutex_t server_lock;

    struct device_health *health; /* o.devices->count entries */
    uint64_t generation;
};

/* ---- answering claims (the worker) ----------------------------------------------- */

static bool is_v1(enum dra_method m)
{
    return m == DRA_PREPARE_V1 || m == DRA_UNPREPARE_V1;
}

/* One claim's devices into the reply (everything in the arena). */
static int fill_devices(struct arena *a, PrepareOne *one, const struct dra_claim_entry *e, bool v1)
{
    one->n_devices = e->device_count;
    one->devices = arena_calloc(a, e->device_count ? e->device_count : 1, sizeof *one->devices);
    if (one->devices == NULL)
        return -1;
    for (size_t i = 0; i < e->device_count; i++) {
        const struct dra_device *d = &e->devices[i];
        WireDevice *w = arena_alloc(a, sizeof *w);
        char **ids = arena_calloc(a, 1, sizeof *ids);
        char **reqs = arena_calloc(a, 1, sizeof *reqs);
        if (w == NULL || ids == NULL || reqs == NULL)
            return -1;
        k8s__io__kubelet__pkg__apis__dra__v1__device__init(w);
        w->pool_name = (char *)d->pool;
        w->device_name = (char *)d->device;
        ids[0] = (char *)d->cdi_id;
        w->n_cdi_device_ids = 1;
        w->cdi_device_ids = ids;
        if (d->request[0] != '\0') {
            reqs[0] = (char *)d->request;
            w->n_request_names = 1;
            w->request_names = reqs;
        }
        /* v1beta1 has no field 5; an empty string is not sent either */
        if (v1 && d->share_id[0] != '\0')
            w->share_id = (char *)d->share_id;
        one->devices[i] = w;
    }
    return 0;
}

static int answer_prepare(struct dra_plugin *p, const PrepareRequest *req, bool v1,
                          struct rpc_buf *out)
{
    struct arena a = ARENA_INIT;
    PrepareResponse resp =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
    int rc = -1;
    int64_t started = clock_now_ms();
    resp.claims = arena_calloc(&a, req->n_claims ? req->n_claims : 1, sizeof *resp.claims);
    if (resp.claims == NULL)
        goto out;
    /* Completed entries are copied out: the checkpoint's array moves as
     * later claims of the same request are added. */
    for (size_t i = 0; i < req->n_claims; i++) {
        const WireClaim *c = req->claims[i];
        bool seen = false;
        for (size_t k = 0; k < resp.n_claims && !seen; k++)
            seen = strcmp(resp.claims[k]->key, c->uid) == 0;
        if (seen)
            continue; /* one answer per UID: the map has one key each */
        PrepareEntry *entry = arena_alloc(&a, sizeof *entry);
        PrepareOne *one = arena_alloc(&a, sizeof *one);
        if (entry == NULL || one == NULL)
            goto out;
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init(
            entry);
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init(one);
        entry->key = arena_strdup(&a, c->uid);
        entry->value = one;
        if (entry->key == NULL)
            goto out;
        const struct dra_claim_entry *e = NULL;
        char err[GP_ERR_LEN];
        if (clock_now_ms() - started > REQUEST_BUDGET_MS) {
            snprintf(err, sizeof err,
                     "not prepared: the request ran out of time (%d s) on earlier claims; the "
                     "kubelet asks again",
                     REQUEST_BUDGET_MS / 1000);
            one->error = arena_strdup(&a, err);
            if (one->error == NULL)
                goto out;
        } else if (dra_prepare_claim(p->o.preparer, c->namespace_, c->name, c->uid, &e, err,
                                     sizeof err) != 0) {
            log_error("NodePrepareResources: claim %s/%s (%s): %s", c->namespace_, c->name, c->uid,
                      err);
            one->error = arena_strdup(&a, err);
            if (one->error == NULL)
                goto out;
        } else {
            struct dra_claim_entry *copy = arena_alloc(&a, sizeof *copy);
            struct dra_device *devs =
                arena_calloc(&a, e->device_count ? e->device_count : 1, sizeof *devs);
            if (copy == NULL || devs == NULL)
                goto out;
            *copy = *e;
            if (e->device_count > 0) /* a claim with no device of ours has none */
                memcpy(devs, e->devices, e->device_count * sizeof *devs);
            copy->devices = devs;
            if (fill_devices(&a, one, copy, v1) != 0)
                goto out;
        }
        resp.claims[resp.n_claims++] = entry;
    }
    out->len =
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__get_packed_size(
            &resp);
    out->data = malloc(out->len ? out->len : 1);
    if (out->data == NULL)
        goto out;
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__pack(&resp, out->data);
    rc = 0;
out:
    arena_free(&a);
    return rc;
}

static int answer_unprepare(struct dra_plugin *p, const UnprepareRequest *req, struct rpc_buf *out)
{
    struct arena a = ARENA_INIT;
    UnprepareResponse resp =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
    int rc = -1;
    resp.claims = arena_calloc(&a, req->n_claims ? req->n_claims : 1, sizeof *resp.claims);
    if (resp.claims == NULL)
        goto out;
    for (size_t i = 0; i < req->n_claims; i++) {
        const WireClaim *c = req->claims[i];
        bool seen = false;
        for (size_t k = 0; k < resp.n_claims && !seen; k++)
            seen = strcmp(resp.claims[k]->key, c->uid) == 0;
        if (seen)
            continue;
        UnprepareEntry *entry = arena_alloc(&a, sizeof *entry);
        UnprepareOne *one = arena_alloc(&a, sizeof *one);
        if (entry == NULL || one == NULL)
            goto out;
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init(
            entry);
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init(one);
        entry->key = arena_strdup(&a, c->uid);
        entry->value = one;
        if (entry->key == NULL)
            goto out;
        char err[GP_ERR_LEN];
        if (dra_unprepare_claim(p->o.preparer, c->uid, err, sizeof err) != 0) {
            log_error("NodeUnprepareResources: claim %s/%s (%s): %s", c->namespace_, c->name,
                      c->uid, err);
            one->error = arena_strdup(&a, err);
            if (one->error == NULL)
                goto out;
        }
        resp.claims[resp.n_claims++] = entry;
    }
    out->len =
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__get_packed_size(
            &resp);
    out->data = malloc(out->len ? out->len : 1);
    if (out->data == NULL)
        goto out;
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__pack(&resp, out->data);
    rc = 0;
out:
    arena_free(&a);
    return rc;
}

/* 0 with *resp filled, or -1 (out of memory: INTERNAL). */
static int run_job(struct dra_plugin *p, const struct job *j, struct rpc_buf *resp)
{
    bool prepare = j->method == DRA_PREPARE_V1 || j->method == DRA_PREPARE_V1BETA1;
    if (prepare)
        return answer_prepare(p, (const PrepareRequest *)j->request, is_v1(j->method), resp);
    return answer_unprepare(p, (const UnprepareRequest *)j->request, resp);
}

static void finish_job(struct dra_plugin *p, struct job *j)
{
    struct rpc_buf resp = {0};
    if (run_job(p, j, &resp) == 0)
        rpc_call_complete(j->deferred, RPC_OK, &resp, NULL);
    else
        rpc_call_complete(j->deferred, RPC_INTERNAL, &resp, "out of memory");
    protobuf_c_message_free_unpacked(j->request, NULL);
    free(j);
}

static void *worker_main(void *arg)
{
    struct dra_plugin *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->head == NULL && !p->stopping)
            pthread_cond_wait(&p->wake, &p->lock);
        struct job *j = p->head;
        if (j == NULL)
            break; /* stopping with nothing left */
        p->head = j->next;
        if (p->head == NULL)
            p->tail = NULL;
        pthread_mutex_unlock(&p->lock);
        finish_job(p, j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* ---- the DRA socket's handlers (gRPC thread) --------------------------------------- */

static enum rpc_status dra_unary(void *ctx, struct rpc_call *call, size_t method,
                                 const uint8_t *req, size_t req_len, struct rpc_buf *resp,
                                 char *msg, size_t msglen)
{
    struct dra_plugin *p = ctx;
    bool prepare = method == DRA_PREPARE_V1 || method == DRA_PREPARE_V1BETA1;
    ProtobufCMessage *m =
        prepare
            ? (ProtobufCMessage *)
                  k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__unpack(
                      NULL, req_len, req)
            : (ProtobufCMessage *)
                  k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__unpack(
                      NULL, req_len, req);
    if (m == NULL) {
        snprintf(msg, msglen, "cannot decode the %s request",
                 prepare ? "NodePrepareResources" : "NodeUnprepareResources");
        return RPC_INVALID_ARGUMENT;
    }
    struct job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
        snprintf(msg, msglen, "out of memory");
        return RPC_INTERNAL;
    }
    j->method = (enum dra_method)method;
    j->request = m;
    j->deferred = rpc_call_defer(call);
    if (j->deferred == NULL) {
        /* cannot park it: answer here, the rest waits meanwhile */
        int rc = run_job(p, j, resp);
        protobuf_c_message_free_unpacked(m, NULL);
        free(j);
        if (rc != 0) {
            snprintf(msg, msglen, "out of memory");
            return RPC_INTERNAL;
        }
        return RPC_OK;
    }
    pthread_mutex_lock(&p->lock);
    if (p->tail != NULL)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return RPC_DEFERRED;
}

/* NodeWatchResources: every device of the table, with its health. */
static int health_snapshot(void *ctx, struct rpc_buf *out, uint64_t *generation)
{
    struct dra_plugin *p = ctx;
    const struct dra_device_table *t = p->o.devices;
    struct arena a = ARENA_INIT;
    V1alpha1__NodeWatchResourcesResponse resp = V1ALPHA1__NODE_WATCH_RESOURCES_RESPONSE__INIT;
    int rc = -1;
    int64_t now = clock_wall_ns() / 1000000000;
    pthread_mutex_lock(&p->lock);
    *generation = p->generation;
    resp.devices = arena_calloc(&a, t->count ? t->count : 1, sizeof *resp.devices);
    if (resp.devices == NULL)
        goto out;
    for (size_t i = 0; i < t->count; i++) {
        V1alpha1__DeviceHealth *h = arena_alloc(&a, sizeof *h);
        V1alpha1__DeviceIdentifier *id = arena_alloc(&a, sizeof *id);
        if (h == NULL || id == NULL)
            goto out;
        v1alpha1__device_health__init(h);
        v1alpha1__device_identifier__init(id);
        id->pool_name = (char *)p->o.pool;
        id->device_name = (char *)t->devices[i].name;
        h->device = id;
        h->health = p->health[i].healthy ? V1ALPHA1__HEALTH_STATUS__HEALTHY
                                         : V1ALPHA1__HEALTH_STATUS__UNHEALTHY;
        /* the monitor watches all the time: every list is "determined now",
         * and the kubelet, which ages a device's health out after a
         * timeout, is sent the list again before that (dra_plugin_refresh_health) */
        h->last_updated_time = now;
        if (p->health[i].message[0] != '\0') {
            h->message = arena_strdup(&a, p->health[i].message);
            if (h->message == NULL)
                goto out;
        }
        resp.devices[resp.n_devices++] = h;
    }
    out->len = v1alpha1__node_watch_resources_response__get_packed_size(&resp);
    out->data = malloc(out->len ? out->len : 1);
    if (out->data == NULL)
        goto out;
    v1alpha1__node_watch_resources_response__pack(&resp, out->data);
    rc = 0;
out:
    pthread_mutex_unlock(&p->lock);
    arena_free(&a);
    return rc;
}

/* ---- registration (gRPC thread) ------------------------------------------------------ */

static enum rpc_status reg_unary(void *ctx, struct rpc_call *call, size_t method,
                                 const uint8_t *req, size_t req_len, struct rpc_buf *resp,
                                 char *msg, size_t msglen)
{
    struct dra_plugin *p = ctx;
    if (method == REG_NOTIFY) {
        Pluginregistration__RegistrationStatus *s =
            pluginregistration__registration_status__unpack(NULL, req_len, req);
        if (s == NULL) {
            snprintf(msg, msglen, "cannot decode RegistrationStatus");
            return RPC_INVALID_ARGUMENT;
        }
        if (s->plugin_registered)
            log_info("Registered DRA driver %s with the kubelet (endpoint %s)", p->o.driver,
                     p->o.endpoint);
        else
            log_error("The kubelet refused DRA driver %s: %s", p->o.driver,
                      s->error[0] ? s->error : "(no reason given)");
        pluginregistration__registration_status__free_unpacked(s, NULL);
        resp->data = malloc(1);
        resp->len = 0;
        if (resp->data == NULL) {
            snprintf(msg, msglen, "out of memory");
            return RPC_INTERNAL;
        }
        return RPC_OK;
    }
    /* GetInfo: the service versions in our order of preference (the
     * kubelet takes the first it supports), then the health service. */
    static const char *const versions[] = {DRA_SERVICE_V1, DRA_SERVICE_V1BETA1, DRA_SERVICE_HEALTH};
    Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
    info.type = DRA_PLUGIN_TYPE;
    info.name = (char *)p->o.driver;
    info.endpoint = (char *)p->o.endpoint;
    info.n_supported_versions = sizeof versions / sizeof versions[0];
    info.supported_versions = (char **)versions;
    resp->len = pluginregistration__plugin_info__get_packed_size(&info);
    resp->data = malloc(resp->len ? resp->len : 1);
    if (resp->data == NULL) {
        snprintf(msg, msglen, "out of memory");
        return RPC_INTERNAL;
    }
    pluginregistration__plugin_info__pack(&info, resp->data);
    return RPC_OK;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static int make_parent(const char *path, char *err, size_t errlen)
{
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return gp_errf(err, errlen, "path too long: %s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    for (char *q = dir + 1;; q++) {
        if (*q != '/' && *q != '\0')
            continue;
        char c = *q;
        *q = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return gp_errf(err, errlen, "cannot create directory %s: %s", dir, strerror(errno));
        if (c == '\0')
            return 0;
        *q = c;
    }
}

static int start_dra_server(struct dra_plugin *p, char *err, size_t errlen)
{
    const struct rpc_handlers h = {.ctx = p,
                                   .methods = DRA_METHODS,
                                   .method_count = DRA_METHOD_COUNT,
                                   .unary = dra_unary,
                                   .snapshot = health_snapshot};
    if (make_parent(p->o.endpoint, err, errlen) != 0)
        return -1;
    return rpc_server_start(p->rt, p->o.endpoint, &h, &p->dra_server, err, errlen);
}

static int start_reg_server(struct dra_plugin *p, char *err, size_t errlen)
{
    const struct rpc_handlers h = {
        .ctx = p, .methods = REG_METHODS, .method_count = REG_METHOD_COUNT, .unary = reg_unary};
    if (make_parent(p->o.registration_path, err, errlen) != 0)
        return -1;
    return rpc_server_start(p->rt, p->o.registration_path, &h, &p->reg_server, err, errlen);
}

int dra_plugin_start(struct rpc_runtime *rt, const struct dra_plugin_options *o,
                     struct dra_plugin **out, char *err, size_t errlen)
{
    struct dra_plugin *p = calloc(1, sizeof *p);
    if (p == NULL)
        return gp_errf(err, errlen, "out of memory");
    p->o = *o;
    p->rt = rt;
    p->health = calloc(o->devices->count ? o->devices->count : 1, sizeof *p->health);
    if (p->health == NULL) {
        free(p);
        return gp_errf(err, errlen, "out of memory");
    }
    for (size_t i = 0; i < o->devices->count; i++) {
        p->health[i].healthy = !o->devices->devices[i].lost;
        if (o->devices->devices[i].lost)
            snprintf(p->health[i].message, HEALTH_MESSAGE_LEN, "the GPU is lost (NVML)");
    }
    p->generation = 1;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->server_lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (pthread_create(&p->worker, NULL, worker_main, p) != 0) {
        gp_errf(err, errlen, "cannot start the worker thread");
        dra_plugin_stop(p);
        return -1;
    }
    p->have_worker = true;
    if (start_dra_server(p, err, errlen) != 0 || start_reg_server(p, err, errlen) != 0) {
        dra_plugin_stop(p);
        return -1;
    }
    log_info("Serving DRA driver %s on %s (registration %s)", o->driver, o->endpoint,
             o->registration_path);
    *out = p;
    return 0;
}

static bool socket_present(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

int dra_plugin_check_sockets(struct dra_plugin *p, char *err, size_t errlen)
{
    int restarted = 0;
    if (!socket_present(p->o.endpoint)) {
        log_warn("DRA socket %s is gone: serving it again", p->o.endpoint);
        pthread_mutex_lock(&p->server_lock);
        rpc_server_stop(p->dra_server);
        p->dra_server = NULL;
        int rc = start_dra_server(p, err, errlen);
        pthread_mutex_unlock(&p->server_lock);
        if (rc != 0)
            return -1;
        restarted++;
    }
    if (!socket_present(p->o.registration_path)) {
        log_warn("registration socket %s is gone: serving it again", p->o.registration_path);
        rpc_server_stop(p->reg_server);
        p->reg_server = NULL;
        if (start_reg_server(p, err, errlen) != 0)
            return -1;
        restarted++;
    }
    return restarted;
}

void dra_plugin_set_health(struct dra_plugin *p, size_t index, bool healthy, const char *message)
{
    if (p == NULL || index >= p->o.devices->count)
        return;
    pthread_mutex_lock(&p->lock);
    struct device_health *h = &p->health[index];
    bool changed = h->healthy != healthy;
    if (changed) {
        h->healthy = healthy;
        snprintf(h->message, sizeof h->message, "%s", message ? message : "");
        p->generation++;
    }
    pthread_mutex_unlock(&p->lock);
    if (!changed)
        return;
    pthread_mutex_lock(&p->server_lock);
    if (p->dra_server != NULL)
        rpc_server_notify(p->dra_server);
    pthread_mutex_unlock(&p->server_lock);
}

void dra_plugin_refresh_health(struct dra_plugin *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->generation++;
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_lock(&p->server_lock);
    if (p->dra_server != NULL)
        rpc_server_notify(p->dra_server);
    pthread_mutex_unlock(&p->server_lock);
}

void dra_plugin_stop(struct dra_plugin *p)
{
    if (p == NULL)
        return;
    /* The servers first: parked calls are cancelled and no new job comes. */
    rpc_server_stop(p->reg_server);
    pthread_mutex_lock(&p->server_lock);
    rpc_server_stop(p->dra_server);
    p->dra_server = NULL;
    pthread_mutex_unlock(&p->server_lock);
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    if (p->have_worker)
        pthread_join(p->worker, NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->server_lock);
    pthread_mutex_destroy(&p->lock);
    free(p->health);
    free(p);
}

/* gpucheck_kubelet -- the kubelet's device manager, reduced to what the GPU
 * conformance kit reads, in C so that it travels in the kit's bundle (a GPU
 * node has Python but no grpcio; test/sim/kubelet_sim.py needs it).
 *
 *   gpupool-gpucheck-kubelet DIR [--allocate N] [--duration-ms MS]
 *
 * Serves v1beta1.Registration on DIR/kubelet.sock. A Register is refused,
 * as the kubelet refuses it, when the version is not v1beta1 or the resource
 * is not an extended resource name; otherwise, before Register returns, the
 * plugin is dialled back at DIR/<endpoint> for GetDevicePluginOptions. Then
 * one ListAndWatch stream per resource; with --allocate N the first N
 * healthy devices of each resource's first snapshot are allocated once
 * (one container). Runs until SIGTERM/SIGINT or MS milliseconds.
 *
 * stdout, one flushed line per event (the kit parses it; values have no
 * spaces):
 *   listening socket=PATH
 *   register resource=R version=V endpoint=E pre_start=0|1 preferred=0|1
 *   register-refused resource=R why=WORD
 *   list resource=R n=N healthy=H unhealthy=U
 *   device resource=R id=ID health=H numa=N|-        (one per device, after list)
 *   allocate resource=R ids=A,B status=CODE          (then env/mount lines)
 *   env resource=R NAME=VALUE
 *   stream-ended resource=R
 *   stopped
 * Exit 0 after a stop, 1 when the kubelet cannot start, 2 on a usage error. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.pb-c.h"
#include "rpc.h"
#include "rpc_test_client.h"

#define MAX_RESOURCES 16
#define CALL_TIMEOUT_MS 5000
#define POLL_MS 20

struct resource {
    char name[128];
    char endpoint[4200]; /* DIR/<endpoint> */
    bool fresh;          /* registered (again) since the stream was opened */
    struct rpc_client *client;
    struct rpc_watch *watch;
    bool allocated;
};

struct kubelet {
    const char *dir;
    struct rpc_runtime *rt;
    pthread_mutex_t lock; /* resources[], count */
    struct resource resources[MAX_RESOURCES];
    int count;
};

/* Every line is read by another process while this one runs: flush each. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* What the kubelet accepts as an extended resource: domain/name, outside
 * the kubernetes.io domain. */
static bool extended_resource_name(const char *name)
{
    const char *slash = strchr(name, '/');
    if (slash == NULL || slash == name || slash[1] == '\0' || strchr(slash + 1, '/') != NULL)
        return false;
    size_t domain = (size_t)(slash - name);
    return !(domain >= 13 && strncmp(slash - 13, "kubernetes.io", 13) == 0);
}

static enum rpc_status on_register(void *ctx, const uint8_t *req, size_t len, char *msg,
                                   size_t msglen)
{
    struct kubelet *k = ctx;
    V1beta1__RegisterRequest *r = v1beta1__register_request__unpack(NULL, len, req);
    if (r == NULL) {
        say("register-refused resource=? why=undecodable");
        snprintf(msg, msglen, "undecodable RegisterRequest");
        return RPC_INVALID_ARGUMENT;
    }
    const char *why = NULL;
    if (strcmp(r->version, "v1beta1") != 0)
        why = "version";
    else if (!extended_resource_name(r->resource_name))
        why = "resource-name";
    else if (r->endpoint[0] == '\0' || strchr(r->endpoint, '/') != NULL)
        why = "endpoint";
    if (why != NULL) {
        say("register-refused resource=%s why=%s", r->resource_name, why);
        snprintf(msg, msglen, "invalid RegisterRequest: %s", why);
        v1beta1__register_request__free_unpacked(r, NULL);
        return RPC_INVALID_ARGUMENT;
    }
    struct resource reg = {.fresh = true};
    snprintf(reg.name, sizeof reg.name, "%s", r->resource_name);
    snprintf(reg.endpoint, sizeof reg.endpoint, "%s/%s", k->dir, r->endpoint);
    char version[32];
    snprintf(version, sizeof version, "%s", r->version);
    v1beta1__register_request__free_unpacked(r, NULL);

    /* The kubelet asks for the options before it answers Register. */
    struct rpc_buf resp = {0};
    int status = 0;
    char err[512];
    if (rpc_test_call(k->rt, reg.endpoint, "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                      (const uint8_t *)"", 0, CALL_TIMEOUT_MS, &resp, &status, err,
                      sizeof err) != 0) {
        say("register-refused resource=%s why=options-call-failed", reg.name);
        snprintf(msg, msglen, "GetDevicePluginOptions: %s", err);
        return RPC_UNAVAILABLE;
    }
    V1beta1__DevicePluginOptions *opt =
        v1beta1__device_plugin_options__unpack(NULL, resp.len, resp.data);
    free(resp.data);
    if (opt == NULL) {
        say("register-refused resource=%s why=undecodable-options", reg.name);
        snprintf(msg, msglen, "undecodable DevicePluginOptions");
        return RPC_INVALID_ARGUMENT;
    }
    say("register resource=%s version=%s endpoint=%s pre_start=%d preferred=%d", reg.name, version,
        strrchr(reg.endpoint, '/') + 1, opt->pre_start_required ? 1 : 0,
        opt->get_preferred_allocation_available ? 1 : 0);
    v1beta1__device_plugin_options__free_unpacked(opt, NULL);

    pthread_mutex_lock(&k->lock);
    int at = 0;
    while (at < k->count && strcmp(k->resources[at].name, reg.name) != 0)
        at++;
    enum rpc_status rc = RPC_OK;
    if (at == MAX_RESOURCES) {
        snprintf(msg, msglen, "more than %d resources", MAX_RESOURCES);
        rc = RPC_RESOURCE_EXHAUSTED;
    } else if (at == k->count) {
        k->resources[k->count++] = reg;
    } else {
        /* A re-registration: the main loop replaces the stream. */
        snprintf(k->resources[at].endpoint, sizeof k->resources[at].endpoint, "%s", reg.endpoint);
        k->resources[at].fresh = true;
    }
    pthread_mutex_unlock(&k->lock);
    return rc;
}

static void close_stream(struct resource *r)
{
    rpc_test_watch_close(r->watch);
    rpc_client_close(r->client);
    r->watch = NULL;
    r->client = NULL;
}

static void open_stream(struct kubelet *k, struct resource *r)
{
    char err[512];
    close_stream(r);
    if (rpc_client_open(k->rt, r->endpoint, &r->client, err, sizeof err) != 0 ||
        rpc_test_watch_open(r->client, &r->watch, err, sizeof err) != 0) {
        fprintf(stderr, "gpucheck-kubelet: ListAndWatch %s: %s\n", r->name, err);
        close_stream(r);
    }
}

static void allocate(struct resource *r, const V1beta1__ListAndWatchResponse *list, int want)
{
    char *ids[64];
    char joined[4096] = "";
    size_t n = 0, used = 0;
    for (size_t i = 0; i < list->n_devices && n < (size_t)want && n < 64; i++) {
        if (strcmp(list->devices[i]->health, "Healthy") != 0)
            continue;
        ids[n++] = list->devices[i]->id;
        int w = snprintf(joined + used, sizeof joined - used, "%s%s", used ? "," : "",
                         list->devices[i]->id);
        if (w > 0 && (size_t)w < sizeof joined - used)
            used += (size_t)w;
    }
    r->allocated = true;
    if (n < (size_t)want) {
        say("allocate resource=%s ids=%s status=too-few-healthy-devices", r->name,
            used ? joined : "-");
        return;
    }
    V1beta1__ContainerAllocateRequest creq = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    V1beta1__ContainerAllocateRequest *creqs[1] = {&creq};
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    creq.n_devices_ids = n;
    creq.devices_ids = ids;
    req.n_container_requests = 1;
    req.container_requests = creqs;
    size_t len = v1beta1__allocate_request__get_packed_size(&req);
    uint8_t *buf = malloc(len + 1);
    if (buf == NULL) {
        say("allocate resource=%s ids=%s status=out-of-memory", r->name, joined);
        return;
    }
    v1beta1__allocate_request__pack(&req, buf);
    struct rpc_buf resp = {0};
    int status = 0;
    char msg[512];
    int rc = rpc_test_client_call(r->client, "/v1beta1.DevicePlugin/Allocate", buf, len,
                                  CALL_TIMEOUT_MS, &resp, &status, msg, sizeof msg);
    free(buf);
    if (rc != 0) {
        say("allocate resource=%s ids=%s status=%d", r->name, joined, status);
        return;
    }
    V1beta1__AllocateResponse *ar = v1beta1__allocate_response__unpack(NULL, resp.len, resp.data);
    free(resp.data);
    if (ar == NULL || ar->n_container_responses != 1) {
        say("allocate resource=%s ids=%s status=bad-response", r->name, joined);
        if (ar != NULL)
            v1beta1__allocate_response__free_unpacked(ar, NULL);
        return;
    }
    say("allocate resource=%s ids=%s status=0", r->name, joined);
    const V1beta1__ContainerAllocateResponse *c = ar->container_responses[0];
    for (size_t i = 0; i < c->n_envs; i++)
        say("env resource=%s %s=%s", r->name, c->envs[i]->key, c->envs[i]->value);
    v1beta1__allocate_response__free_unpacked(ar, NULL);
}

static void print_list(const struct resource *r, const V1beta1__ListAndWatchResponse *list)
{
    size_t healthy = 0;
    for (size_t i = 0; i < list->n_devices; i++)
        healthy += strcmp(list->devices[i]->health, "Healthy") == 0;
    say("list resource=%s n=%zu healthy=%zu unhealthy=%zu", r->name, list->n_devices, healthy,
        list->n_devices - healthy);
    for (size_t i = 0; i < list->n_devices; i++) {
        const V1beta1__Device *d = list->devices[i];
        char numa[32] = "-";
        if (d->topology != NULL && d->topology->n_nodes > 0)
            snprintf(numa, sizeof numa, "%lld", (long long)d->topology->nodes[0]->id);
        say("device resource=%s id=%s health=%s numa=%s", r->name, d->id, d->health, numa);
    }
}

/* One message from r's stream if one is there within timeout_ms. */
static void poll_stream(struct resource *r, int timeout_ms, int allocate_n)
{
    struct rpc_buf msg = {0};
    char err[512];
    int rc = rpc_test_watch_next(r->watch, timeout_ms, &msg, NULL, err, sizeof err);
    if (rc == 0)
        return;
    if (rc < 0) {
        say("stream-ended resource=%s", r->name);
        close_stream(r);
        return;
    }
    V1beta1__ListAndWatchResponse *list =
        v1beta1__list_and_watch_response__unpack(NULL, msg.len, msg.data);
    free(msg.data);
    if (list == NULL) {
        fprintf(stderr, "gpucheck-kubelet: %s: undecodable ListAndWatchResponse\n", r->name);
        return;
    }
    print_list(r, list);
    if (allocate_n > 0 && !r->allocated)
        allocate(r, list, allocate_n);
    v1beta1__list_and_watch_response__free_unpacked(list, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int usage(void)
{
    fprintf(stderr, "usage: gpupool-gpucheck-kubelet DIR [--allocate N] [--duration-ms MS]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        return usage();
    struct kubelet k = {.dir = argv[1]};
    int allocate_n = 0;
    long duration_ms = -1;
    for (int i = 2; i < argc; i++) {
        char *end = NULL;
        if (i + 1 >= argc)
            return usage();
        long v = strtol(argv[i + 1], &end, 10);
        if (end == argv[i + 1] || *end != '\0' || v < 0)
            return usage();
        if (strcmp(argv[i], "--allocate") == 0 && v <= 64)
            allocate_n = (int)v;
        else if (strcmp(argv[i], "--duration-ms") == 0)
            duration_ms = v;
        else
            return usage();
        i++;
    }
    char socket_path[4200];
    if ((size_t)snprintf(socket_path, sizeof socket_path, "%s/kubelet.sock", k.dir) >=
        sizeof socket_path)
        return usage();

    /* gRPC's threads inherit this mask, so the stop signals reach only
     * the sigtimedwait below. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &stop, NULL) != 0 || pthread_mutex_init(&k.lock, NULL) != 0) {
        fprintf(stderr, "gpucheck-kubelet: cannot set up signals\n");
        return 1;
    }
    char err[512];
    struct rpc_test_kubelet *srv = NULL;
    if (rpc_runtime_start(&k.rt, err, sizeof err) != 0) {
        fprintf(stderr, "gpucheck-kubelet: %s\n", err);
        return 1;
    }
    if (rpc_test_kubelet_start(socket_path, on_register, &k, &srv, err, sizeof err) != 0) {
        fprintf(stderr, "gpucheck-kubelet: %s\n", err);
        rpc_runtime_stop(k.rt);
        return 1;
    }
    say("listening socket=%s", socket_path);

    double end_at = duration_ms >= 0 ? now_ms() + (double)duration_ms : -1;
    const struct timespec no_wait = {0, 0};
    while (end_at < 0 || now_ms() < end_at) {
        if (sigtimedwait(&stop, NULL, &no_wait) > 0)
            break;
        int open = 0;
        pthread_mutex_lock(&k.lock);
        int count = k.count;
        for (int i = 0; i < count; i++) {
            if (k.resources[i].fresh) {
                k.resources[i].fresh = false;
                k.resources[i].allocated = false;
                open_stream(&k, &k.resources[i]);
            }
        }
        pthread_mutex_unlock(&k.lock);
        /* Only this thread touches the streams; the register thread only
         * appends entries and sets fresh, under the lock. */
        for (int i = 0; i < count; i++) {
            if (k.resources[i].watch != NULL) {
                open++;
                poll_stream(&k.resources[i], POLL_MS, allocate_n);
            }
        }
        if (open == 0) {
            const struct timespec idle = {0, POLL_MS * 1000000L};
            if (sigtimedwait(&stop, NULL, &idle) > 0)
                break;
        }
    }
    rpc_test_kubelet_stop(srv);
    for (int i = 0; i < k.count; i++)
        close_stream(&k.resources[i]);
    rpc_runtime_stop(k.rt);
    pthread_mutex_destroy(&k.lock);
    say("stopped");
    return 0;
}

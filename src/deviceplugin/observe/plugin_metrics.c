/* plugin_metrics.c -- the device plugin's Prometheus endpoint (see plugin_metrics.h). */
#include "plugin_metrics.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "clock.h"
#include "errmsg.h"
#include "file.h"
#include "httpd.h"
#include "log.h"
#include "plugin.h"
#include "podresources.h"
#include "prom.h"
#include "resource.h"

/* The handler formats text and makes one gRPC call (PodResources List),
 * which runs the core's transport on this thread: the same budget as the
 * RPC thread's, doubled for the sanitizer build's larger frames. */
#define METRICS_STACK_BYTES (512 * 1024)
/* Scrapers are few and each uses one connection: a per-address limit
 * keeps one client from taking every slot (16, not fewer: `kubectl
 * port-forward` reaches a host-network pod from 127.0.0.1 and its closed
 * streams linger a moment, and make e2e saw a 5th scrape refused at 4), and a request must arrive
 * within the timeout of its accept (or previous reply), so connections
 * that trickle a header line now and then are closed, and a full table
 * closes an idle connection of the heaviest address to admit a scraper
 * from another (httpd.h). One polling thread serves them all: a
 * connection costs a descriptor and its buffer, not a thread. */
#define METRICS_MAX_CONNECTIONS 64
#define METRICS_PER_IP_CONNECTIONS 16
#define METRICS_CONNECTION_TIMEOUT_S 10
#define METRICS_MAX_RESOURCES 64 /* distinct resource names over all reloads */
#define METRICS_MAX_XIDS 256     /* distinct (GPU, XID) pairs kept */
/* Telemetry is read at scrape time; a GPU whose NVML calls hang must not
 * stall the scrape for ever: once this much time went, later GPUs are
 * left out of that scrape (gpupool_gpu_telemetry_complete says so). */
#define METRICS_NVML_BUDGET_NS (2LL * 1000000000LL)
/* The kubelet answers List from memory; a stuck one must not hold the
 * scrape (nor metrics_set_pod_resources, which waits for it) for long. */
#define METRICS_POD_RESOURCES_TIMEOUT_MS 1000

/* Allocate latency buckets, seconds: an Allocate is sub-millisecond in
 * whole-GPU mode and waits for the API in gpu-mem mode. */
static const double allocate_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                          0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                          1,      2.5,     5,      10};
#define BUCKETS (sizeof allocate_buckets / sizeof allocate_buckets[0])

/* Per resource name: written by the RPC thread (Allocate) and the main
 * thread (registrations); slots are only ever appended, never moved. */
struct resource_counters {
    char name[CONFIG_NAME_LEN];
    atomic_ullong buckets[BUCKETS]; /* non-cumulative; summed when rendered */
    atomic_ullong count, errors, sum_ns;
    atomic_ullong registrations_ok, registrations_failed;
};

struct xid_counter {
    unsigned gpu_index;
    char uuid[GPU_UUID_LEN];
    char model[GPU_NAME_LEN];
    unsigned long long xid;
    unsigned long long count;
};

struct plugin_metrics {
    struct httpd *http;

    pthread_mutex_t slots_lock; /* appending to resources[] */
    struct resource_counters resources[METRICS_MAX_RESOURCES];
    atomic_size_t resource_count; /* release on append, acquire on read */

    pthread_mutex_t xid_lock;
    struct xid_counter xids[METRICS_MAX_XIDS];
    size_t xid_count;
    unsigned long long xids_dropped; /* pairs beyond METRICS_MAX_XIDS */

    pthread_mutex_t attach_lock; /* held by a scrape while it reads the node */
    struct nvml *nvml;
    const struct gpu_inventory *inv;
    struct plugin_node *node;
    char *isolation_dir;      /* owned; NULL = no regions read */
    struct usage_names names; /* ctx borrowed until the next attach */
    struct usage_state usage; /* the scrape thread's, under attach_lock */

    /* The kubelet's PodResources API, for devices_allocated. Held by a
     * scrape for its whole List, so the client is used by one thread at a
     * time (the HTTP thread, or a test calling plugin_metrics_render). */
    pthread_mutex_t pr_lock;
    struct rpc_runtime *pr_runtime;        /* borrowed; outlives m */
    char *pr_socket;                       /* owned; NULL = not configured */
    struct podresources_client *pr_client; /* opened by a scrape, closed on failure */
    bool pr_failing;                       /* the last List failed (logged once per streak) */
};

/* ---- counters ------------------------------------------------------------------ */

static struct resource_counters *find_resource(struct plugin_metrics *m, const char *name)
{
    size_t n = atomic_load_explicit(&m->resource_count, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if (strcmp(m->resources[i].name, name) == 0)
            return &m->resources[i];
    return NULL;
}

/* Lock-free once the slot exists (every call after a resource's first). */
static struct resource_counters *resource_slot(struct plugin_metrics *m, const char *name)
{
    struct resource_counters *r = find_resource(m, name);
    if (r != NULL)
        return r;
    pthread_mutex_lock(&m->slots_lock);
    r = find_resource(m, name);
    size_t n = atomic_load_explicit(&m->resource_count, memory_order_relaxed);
    if (r == NULL && n < METRICS_MAX_RESOURCES) {
        r = &m->resources[n];
        snprintf(r->name, sizeof r->name, "%s", name);
        atomic_store_explicit(&m->resource_count, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&m->slots_lock);
    return r;
}

void metrics_observe_allocate(struct plugin_metrics *m, const char *resource, double seconds,
                              bool ok)
{
    if (m == NULL)
        return;
    struct resource_counters *r = resource_slot(m, resource);
    if (r == NULL)
        return;
    size_t b = 0;
    while (b < BUCKETS && seconds > allocate_buckets[b])
        b++;
    if (b < BUCKETS)
        atomic_fetch_add_explicit(&r->buckets[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->sum_ns, (unsigned long long)(seconds * 1e9),
                              memory_order_relaxed);
    if (!ok)
        atomic_fetch_add_explicit(&r->errors, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->count, 1, memory_order_relaxed);
}

void metrics_count_registration(struct plugin_metrics *m, const char *resource, bool ok)
{
    if (m == NULL)
        return;
    struct resource_counters *r = resource_slot(m, resource);
    if (r != NULL)
        atomic_fetch_add_explicit(ok ? &r->registrations_ok : &r->registrations_failed, 1,
                                  memory_order_relaxed);
}

void metrics_count_xid(struct plugin_metrics *m, const struct gpu_device *g, unsigned long long xid)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->xid_lock);
    size_t i = 0;
    while (i < m->xid_count && !(strcmp(m->xids[i].uuid, g->uuid) == 0 && m->xids[i].xid == xid))
        i++;
    if (i == m->xid_count && i < METRICS_MAX_XIDS) {
        struct xid_counter *c = &m->xids[m->xid_count++];
        c->gpu_index = g->index;
        snprintf(c->uuid, sizeof c->uuid, "%s", g->uuid);
        snprintf(c->model, sizeof c->model, "%s", g->name);
        c->xid = xid;
    }
    if (i < m->xid_count)
        m->xids[i].count++;
    else
        m->xids_dropped++;
    pthread_mutex_unlock(&m->xid_lock);
}

/* ---- rendering ----------------------------------------------------------------- */

static void put_gpu_labels(struct buf *f, unsigned index, const char *uuid, const char *model)
{
    buf_printf(f, "{gpu=\"%u\",gpu_uuid=\"", index);
    prom_label_value(f, uuid);
    buf_str(f, "\",model=\"");
    prom_label_value(f, model);
    buf_add(f, "\"", 1);
}

static void put_gpu_sample(struct buf *f, const char *name, const struct gpu_device *g, double v)
{
    buf_str(f, name);
    put_gpu_labels(f, g->index, g->uuid, g->name);
    buf_printf(f, "} %.17g\n", v);
}

static void render_xids(struct plugin_metrics *m, struct buf *f)
{
    prom_header(f, "gpupool_gpu_xid_errors_total", "counter",
                "XID events NVML reported per GPU and XID code, ignored ones included.");
    pthread_mutex_lock(&m->xid_lock);
    for (size_t i = 0; i < m->xid_count; i++) {
        const struct xid_counter *c = &m->xids[i];
        buf_str(f, "gpupool_gpu_xid_errors_total");
        put_gpu_labels(f, c->gpu_index, c->uuid, c->model);
        buf_printf(f, ",xid=\"%llu\"} %llu\n", c->xid, c->count);
    }
    unsigned long long dropped = m->xids_dropped;
    pthread_mutex_unlock(&m->xid_lock);
    prom_header(f, "gpupool_gpu_xid_errors_untracked_total", "counter",
                "XID events not broken down because the table of (GPU, XID) pairs is full.");
    buf_printf(f, "gpupool_gpu_xid_errors_untracked_total %llu\n", dropped);
}

static void render_resources(struct plugin_metrics *m, struct buf *f)
{
    size_t n = atomic_load_explicit(&m->resource_count, memory_order_acquire);
    prom_header(
        f, "gpupool_deviceplugin_allocate_duration_seconds", "histogram",
        "Time to answer one Allocate call (gpu-mem mode: until the parked call is answered).");
    for (size_t i = 0; i < n; i++) {
        struct resource_counters *r = &m->resources[i];
        /* count first: a concurrent Allocate may land in a bucket after
         * this, never make +Inf smaller than the buckets below it. */
        unsigned long long total = atomic_load(&r->count), cumulative = 0;
        uint64_t sums[BUCKETS];
        for (size_t b = 0; b < BUCKETS; b++) {
            cumulative += atomic_load(&r->buckets[b]);
            if (cumulative > total)
                cumulative = total;
            sums[b] = cumulative;
        }
        char labels[CONFIG_NAME_LEN + 16];
        snprintf(labels, sizeof labels, "resource=\"%s\"", r->name);
        prom_histogram(f, "gpupool_deviceplugin_allocate_duration_seconds", labels,
                       allocate_buckets, sums, BUCKETS, total,
                       (double)atomic_load(&r->sum_ns) / 1e9);
    }
    prom_header(f, "gpupool_deviceplugin_allocate_errors_total", "counter",
                "Allocate calls answered with an error status.");
    for (size_t i = 0; i < n; i++)
        buf_printf(f, "gpupool_deviceplugin_allocate_errors_total{resource=\"%s\"} %llu\n",
                   m->resources[i].name, atomic_load(&m->resources[i].errors));
    prom_header(f, "gpupool_deviceplugin_registrations_total", "counter",
                "Registration attempts with the kubelet, by result.");
    for (size_t i = 0; i < n; i++) {
        struct resource_counters *r = &m->resources[i];
        buf_printf(f,
                   "gpupool_deviceplugin_registrations_total{resource=\"%s\",result=\"success\"} "
                   "%llu\n",
                   r->name, atomic_load(&r->registrations_ok));
        buf_printf(f,
                   "gpupool_deviceplugin_registrations_total{resource=\"%s\",result=\"failure\"} "
                   "%llu\n",
                   r->name, atomic_load(&r->registrations_failed));
    }
    prom_header(f, "gpupool_deviceplugin_file_write_errors_total", "counter",
                "Failed writes of the plugin's own files (gpu-mem ledger, CDI spec, isolation "
                "library): a full --state-dir, a read-only --cdi-spec-dir.");
    buf_printf(f, "gpupool_deviceplugin_file_write_errors_total %llu\n", file_replace_failures());
}

static void render_devices(struct plugin_node *node, struct buf *f)
{
    size_t count = plugin_node_resource_count(node);
    prom_header(f, "gpupool_deviceplugin_devices_advertised", "gauge",
                "Devices advertised to the kubelet per resource.");
    for (size_t r = 0; r < count; r++)
        buf_printf(f, "gpupool_deviceplugin_devices_advertised{resource=\"%s\"} %zu\n",
                   plugin_node_resource(node, r)->name,
                   plugin_node_resource(node, r)->device_count);
    prom_header(f, "gpupool_deviceplugin_devices_healthy", "gauge",
                "Devices advertised Healthy per resource.");
    for (size_t r = 0; r < count; r++) {
        const struct resource *res = plugin_node_resource(node, r);
        /* Read under the node's lock: the health thread writes it. */
        size_t healthy = plugin_node_healthy_devices(node, r);
        buf_printf(f, "gpupool_deviceplugin_devices_healthy{resource=\"%s\"} %zu\n", res->name,
                   healthy);
    }
}

/* The advertised resource names, copied so that the List runs without
 * attach_lock. *names is one malloc'd block (free()); -1 when out of memory. */
static int copy_resource_names(const struct plugin_node *node, const char ***names, size_t *n)
{
    size_t count = plugin_node_resource_count(node);
    const char **ptrs = malloc(count * (sizeof *ptrs + CONFIG_NAME_LEN) + 1);
    if (ptrs == NULL)
        return -1;
    char *text = (char *)(ptrs + count);
    for (size_t r = 0; r < count; r++) {
        ptrs[r] = text + r * CONFIG_NAME_LEN;
        memcpy(text + r * CONFIG_NAME_LEN, plugin_node_resource(node, r)->name, CONFIG_NAME_LEN);
    }
    *names = ptrs;
    *n = count;
    return 0;
}

/* Opens the client when needed and counts; closes it on failure so that
 * the next scrape starts on a fresh channel instead of a backed-off one.
 * Called with pr_lock held. */
static int count_allocated(struct plugin_metrics *m, const char *const names[], size_t n,
                           size_t counts[], char *err, size_t errlen)
{
    if (m->pr_client == NULL &&
        podresources_open(m->pr_runtime, m->pr_socket, &m->pr_client, err, errlen) != 0)
        return -1;
    if (podresources_count(m->pr_client, names, n, counts, METRICS_POD_RESOURCES_TIMEOUT_MS, err,
                           errlen) != 0) {
        podresources_close(m->pr_client);
        m->pr_client = NULL;
        return -1;
    }
    return 0;
}

/* gpupool_deviceplugin_pod_resources_up, and the allocated counts when the
 * List answered. Nothing when no socket is configured. */
static void render_allocated(struct plugin_metrics *m, const char *const names[], size_t n,
                             struct buf *f)
{
    size_t *counts = calloc(n + 1, sizeof *counts);
    char err[512];
    pthread_mutex_lock(&m->pr_lock);
    if (m->pr_socket == NULL || m->pr_runtime == NULL) {
        pthread_mutex_unlock(&m->pr_lock);
        free(counts);
        return;
    }
    int rc = -1;
    if (counts == NULL)
        snprintf(err, sizeof err, "out of memory");
    else
        rc = count_allocated(m, names, n, counts, err, sizeof err);
    if (rc != 0 && !m->pr_failing)
        log_warn("metrics: cannot count allocated devices from the kubelet's PodResources API "
                 "on %s (gpupool_deviceplugin_devices_allocated left out until it answers): %s",
                 m->pr_socket, err);
    else if (rc == 0 && m->pr_failing)
        log_info("metrics: the kubelet's PodResources API on %s answers again", m->pr_socket);
    m->pr_failing = rc != 0;
    pthread_mutex_unlock(&m->pr_lock);

    prom_header(f, "gpupool_deviceplugin_pod_resources_up", "gauge",
                "1 when the kubelet's PodResources List answered this scrape, else 0.");
    buf_printf(f, "gpupool_deviceplugin_pod_resources_up %d\n", rc == 0);
    prom_header(f, "gpupool_deviceplugin_devices_allocated", "gauge",
                "Device IDs of the resource the kubelet assigned to containers (PodResources).");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        buf_str(f, "gpupool_deviceplugin_devices_allocated{resource=\"");
        prom_label_value(f, names[i]);
        buf_printf(f, "\"} %zu\n", counts[i]);
    }
    free(counts);
}

/* NVML values of one GPU; a call that fails leaves its gauge out. */
struct gpu_telemetry {
    bool have_memory, have_util, have_temp, have_power;
    nvmlMemory_t memory;
    nvmlUtilization_t util;
    unsigned temp_c, power_mw;
};

static void read_telemetry(struct nvml *nvml, const struct gpu_device *g, struct gpu_telemetry *t)
{
    nvmlDevice_t h;
    memset(t, 0, sizeof *t);
    if (nvml->DeviceGetHandleByUUID(g->uuid, &h) != NVML_SUCCESS)
        return;
    t->have_memory = nvml->DeviceGetMemoryInfo(h, &t->memory) == NVML_SUCCESS;
    t->have_util = nvml->DeviceGetUtilizationRates != NULL &&
                   nvml->DeviceGetUtilizationRates(h, &t->util) == NVML_SUCCESS;
    t->have_temp = nvml->DeviceGetTemperature != NULL &&
                   nvml->DeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &t->temp_c) == NVML_SUCCESS;
    t->have_power = nvml->DeviceGetPowerUsage != NULL &&
                    nvml->DeviceGetPowerUsage(h, &t->power_mw) == NVML_SUCCESS;
}

static void render_gpus(struct nvml *nvml, const struct gpu_inventory *inv,
                        struct plugin_node *node, struct buf *f)
{
    size_t n = inv->count;
    struct node_gpu_state *state = calloc(n + 1, sizeof *state);
    struct gpu_telemetry *tel = calloc(n + 1, sizeof *tel);
    if (state == NULL || tel == NULL)
        goto out;
    /* A GPU is healthy when it and every MIG device of it is. */
    node_state_gpus(plugin_node_state(node), state, n);

    int64_t start = clock_now_ns();
    bool complete = true;
    for (size_t i = 0; i < n; i++) {
        if (state[i].lost)
            continue; /* its calls would only answer GPU_IS_LOST, or hang */
        if (clock_now_ns() - start > METRICS_NVML_BUDGET_NS) {
            complete = false;
            break;
        }
        read_telemetry(nvml, &inv->gpus[i], &tel[i]);
    }

    prom_header(f, "gpupool_gpu_healthy", "gauge",
                "1 when every device of the GPU is advertised Healthy, else 0.");
    for (size_t i = 0; i < n; i++)
        put_gpu_sample(f, "gpupool_gpu_healthy", &inv->gpus[i], state[i].healthy);
    prom_header(f, "gpupool_gpu_memory_total_bytes", "gauge", "GPU memory size (NVML).");
    for (size_t i = 0; i < n; i++)
        if (tel[i].have_memory)
            put_gpu_sample(f, "gpupool_gpu_memory_total_bytes", &inv->gpus[i],
                           (double)tel[i].memory.total);
    prom_header(f, "gpupool_gpu_memory_used_bytes", "gauge", "GPU memory in use (NVML).");
    for (size_t i = 0; i < n; i++)
        if (tel[i].have_memory)
            put_gpu_sample(f, "gpupool_gpu_memory_used_bytes", &inv->gpus[i],
                           (double)tel[i].memory.used);
    prom_header(f, "gpupool_gpu_sm_utilization_ratio", "gauge",
                "Fraction of the last sample period a kernel ran on the GPU (NVML, 0-1).");
    for (size_t i = 0; i < n; i++)
        if (tel[i].have_util)
            put_gpu_sample(f, "gpupool_gpu_sm_utilization_ratio", &inv->gpus[i],
                           tel[i].util.gpu / 100.0);
    prom_header(f, "gpupool_gpu_temperature_celsius", "gauge", "GPU core temperature (NVML).");
    for (size_t i = 0; i < n; i++)
        if (tel[i].have_temp)
            put_gpu_sample(f, "gpupool_gpu_temperature_celsius", &inv->gpus[i], tel[i].temp_c);
    prom_header(f, "gpupool_gpu_power_watts", "gauge", "GPU power draw (NVML).");
    for (size_t i = 0; i < n; i++)
        if (tel[i].have_power)
            put_gpu_sample(f, "gpupool_gpu_power_watts", &inv->gpus[i], tel[i].power_mw / 1000.0);
    prom_header(f, "gpupool_gpu_telemetry_complete", "gauge",
                "0 when NVML was too slow and some GPUs were left out of this scrape.");
    buf_printf(f, "gpupool_gpu_telemetry_complete %d\n", complete);
out:
    free(state);
    free(tel);
}

/* Containers' and processes' use; lost GPUs are not asked. Called with
 * attach_lock held. */
static void render_usage(struct plugin_metrics *m, struct buf *f)
{
    size_t n = m->inv->count;
    struct node_gpu_state *state = calloc(n + 1, sizeof *state);
    bool *skip = calloc(n + 1, sizeof *skip);
    if (state != NULL && skip != NULL) {
        node_state_gpus(plugin_node_state(m->node), state, n);
        for (size_t i = 0; i < n; i++)
            skip[i] = state[i].lost;
        usage_render(f, &m->usage, m->isolation_dir, m->nvml, m->inv, skip, &m->names);
    }
    free(state);
    free(skip);
}

char *plugin_metrics_render(struct plugin_metrics *m)
{
    struct buf text = {0}, *f = &text;
    const char **names = NULL;
    size_t n_names = 0;
    bool attached = false;
    prom_build_info(f, "gpupool-device-plugin");
    pthread_mutex_lock(&m->attach_lock);
    if (m->node != NULL && m->inv != NULL && m->nvml != NULL) {
        render_gpus(m->nvml, m->inv, m->node, f);
        render_usage(m, f);
        render_devices(m->node, f);
        attached = copy_resource_names(m->node, &names, &n_names) == 0;
    }
    pthread_mutex_unlock(&m->attach_lock);
    /* Only while a node is served: idle, there is nothing to count. */
    if (attached)
        render_allocated(m, names, n_names, f);
    free(names);
    render_xids(m, f);
    render_resources(m, f);
    return buf_take(&text, NULL);
}

void metrics_attach(struct plugin_metrics *m, struct nvml *nvml, const struct gpu_inventory *inv,
                    struct plugin_node *node)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->attach_lock);
    m->nvml = nvml;
    m->inv = inv;
    m->node = node;
    free(m->isolation_dir);
    m->isolation_dir = NULL;
    m->names = (struct usage_names){0};
    usage_state_reset(&m->usage);
    pthread_mutex_unlock(&m->attach_lock);
}

void metrics_set_usage_source(struct plugin_metrics *m, const char *isolation_dir,
                              const struct usage_names *names)
{
    if (m == NULL)
        return;
    char *copy = NULL;
    if (isolation_dir != NULL && isolation_dir[0] != '\0' && (copy = strdup(isolation_dir)) == NULL)
        log_warn("metrics: out of memory: no gpupool_container_gpu_* series");
    pthread_mutex_lock(&m->attach_lock);
    free(m->isolation_dir);
    m->isolation_dir = copy;
    m->names = names != NULL ? *names : (struct usage_names){0};
    pthread_mutex_unlock(&m->attach_lock);
}

void metrics_set_pod_resources(struct plugin_metrics *m, struct rpc_runtime *rt,
                               const char *socket_path)
{
    if (m == NULL)
        return;
    char *copy = NULL;
    if (socket_path != NULL && socket_path[0] != '\0') {
        copy = strdup(socket_path);
        if (copy == NULL)
            log_warn("metrics: out of memory: gpupool_deviceplugin_devices_allocated is off");
    }
    pthread_mutex_lock(&m->pr_lock);
    if (m->pr_socket == NULL || copy == NULL || strcmp(m->pr_socket, copy) != 0 ||
        m->pr_runtime != rt) {
        podresources_close(m->pr_client); /* its channel points at the old socket */
        m->pr_client = NULL;
        m->pr_failing = false;
    }
    free(m->pr_socket);
    m->pr_socket = copy;
    m->pr_runtime = rt;
    pthread_mutex_unlock(&m->pr_lock);
}

/* ---- HTTP ---------------------------------------------------------------------- */

static void reply_static(struct httpd_response *resp, int status, const char *text)
{
    resp->status = status;
    resp->content_type = "text/plain; charset=utf-8";
    resp->body = (char *)text;
    resp->len = strlen(text);
    resp->body_static = true;
}

static void on_request(void *ctx, const struct httpd_request *req, struct httpd_response *resp)
{
    struct plugin_metrics *m = ctx;
    if (strcmp(req->path, "/metrics") != 0) {
        reply_static(resp, 404, "404 page not found: the only path is /metrics\n");
        return;
    }
    if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
        reply_static(resp, 405, "405 method not allowed: use GET\n");
        return;
    }
    char *text = plugin_metrics_render(m);
    if (text == NULL) {
        reply_static(resp, 500, "500 out of memory\n");
        return;
    }
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    resp->body = text;
    resp->len = strlen(text);
}

int metrics_start(const struct option_hostport *addr, struct plugin_metrics **out, char *err,
                  size_t errlen)
{
    *out = NULL;
    struct plugin_metrics *m = calloc(1, sizeof *m);
    if (m == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&m->slots_lock, NULL);
    pthread_mutex_init(&m->xid_lock, NULL);
    pthread_mutex_init(&m->attach_lock, NULL);
    pthread_mutex_init(&m->pr_lock, NULL);
    const struct httpd_options opt = {
        .host = addr->host,
        .port = addr->port,
        .what = "metrics address",
        .max_body = 0, /* a body is ignored; the reply goes out at its end */
        .thread_per_connection = false,
        .max_connections = METRICS_MAX_CONNECTIONS,
        .per_ip_limit = METRICS_PER_IP_CONNECTIONS,
        .idle_timeout_s = METRICS_CONNECTION_TIMEOUT_S,
        .request_deadline_s = METRICS_CONNECTION_TIMEOUT_S,
        .listen_backlog = 16,
        .thread_stack_bytes = METRICS_STACK_BYTES,
    };
    if (httpd_start(&opt, on_request, m, &m->http, err, errlen) != 0) {
        metrics_stop(m);
        return -1;
    }
    *out = m;
    return 0;
}

const char *metrics_bound_address(const struct plugin_metrics *m)
{
    return httpd_bound_address(m->http);
}

void metrics_stop(struct plugin_metrics *m)
{
    if (m == NULL)
        return;
    httpd_stop(m->http); /* joins the thread: no scrape runs any more */
    podresources_close(m->pr_client);
    free(m->pr_socket);
    free(m->isolation_dir);
    usage_state_reset(&m->usage);
    pthread_mutex_destroy(&m->pr_lock);
    pthread_mutex_destroy(&m->slots_lock);
    pthread_mutex_destroy(&m->xid_lock);
    pthread_mutex_destroy(&m->attach_lock);
    free(m);
}

/* extender_metrics.c -- counters on the hot path, exposition text on scrape (see extender_metrics.h). */
#include "extender_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "pool_view.h"
#include "prom.h"

/* Upper bounds in nanoseconds: filter over 5,000 nodes takes 1-5 ms, a
 * bind one or two API round trips, so 100 us .. 10 s covers both. */
static const uint64_t bucket_ns[METRICS_BUCKETS] = {
    100000,   250000,    500000,    1000000,   2500000,    5000000,    10000000,   25000000,
    50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000, 5000000000, 10000000000,
};

static const char *const verb_names[METRICS_VERBS] = {"filter", "prioritize", "bind"};

void metrics_init(struct metrics *m)
{
    for (int v = 0; v < METRICS_VERBS; v++) {
        for (int b = 0; b <= METRICS_BUCKETS; b++)
            atomic_init(&m->duration[v].counts[b], 0);
        atomic_init(&m->duration[v].sum_ns, 0);
        atomic_init(&m->bad_requests[v], 0);
    }
    for (int r = 0; r < METRICS_BIND_RESULTS; r++)
        atomic_init(&m->binds[r], 0);
    atomic_init(&m->filter_nodes_passed, 0);
    atomic_init(&m->filter_nodes_failed, 0);
    atomic_init(&m->leader_role, -1);
    atomic_init(&m->binds_forwarded_answered, 0);
    atomic_init(&m->binds_forwarded_failed, 0);
    atomic_init(&m->binds_not_leader, 0);
}

void metrics_observe(struct metrics_histogram *h, uint64_t elapsed_ns)
{
    int b = 0;
    while (b < METRICS_BUCKETS && elapsed_ns > bucket_ns[b])
        b++;
    metrics_count(&h->counts[b], 1);
    metrics_count(&h->sum_ns, elapsed_ns);
}

static uint64_t load(const atomic_uint_fast64_t *counter)
{
    return atomic_load_explicit(counter, memory_order_relaxed);
}

/* ---- rendering ------------------------------------------------------------- */

/* One family for the three verbs: the verb is a label value, not part of
 * the name, so one query covers them all (Prometheus naming). */
static void histogram(struct buf *out, const struct metrics_histogram *h, const char *verb)
{
    static const char name[] = "gpupool_extender_request_duration_seconds";
    char labels[48];
    snprintf(labels, sizeof(labels), "verb=\"%s\"", verb);
    double bounds[METRICS_BUCKETS];
    uint64_t cumulative[METRICS_BUCKETS], total = 0;
    for (int b = 0; b < METRICS_BUCKETS; b++) {
        total += load(&h->counts[b]);
        cumulative[b] = total;
        bounds[b] = (double)bucket_ns[b] / 1e9;
    }
    total += load(&h->counts[METRICS_BUCKETS]);
    prom_histogram(out, name, labels, bounds, cumulative, METRICS_BUCKETS, total,
                   (double)load(&h->sum_ns) / 1e9);
}

static void counters(struct buf *out, const struct metrics *m)
{
    prom_header(out, "gpupool_extender_binds_total", "counter",
                "Bind requests by result: bound, or the step that failed.");
    for (int r = 0; r < METRICS_BIND_RESULTS; r++)
        buf_printf(out, "gpupool_extender_binds_total{result=\"%s\"} %llu\n",
                   r == METRICS_BIND_BAD_REQUEST ? "bad_request"
                                                 : bind_result_name((enum bind_result)r),
                   (unsigned long long)load(&m->binds[r]));
    prom_header(out, "gpupool_extender_bad_requests_total", "counter",
                "Requests refused with 400 because their body could not be read.");
    for (int v = 0; v < METRICS_VERBS; v++)
        buf_printf(out, "gpupool_extender_bad_requests_total{verb=\"%s\"} %llu\n", verb_names[v],
                   (unsigned long long)load(&m->bad_requests[v]));
    prom_header(out, "gpupool_extender_filter_nodes_total", "counter",
                "Nodes evaluated by filter requests, by verdict.");
    buf_printf(out, "gpupool_extender_filter_nodes_total{result=\"passed\"} %llu\n",
               (unsigned long long)load(&m->filter_nodes_passed));
    buf_printf(out, "gpupool_extender_filter_nodes_total{result=\"failed\"} %llu\n",
               (unsigned long long)load(&m->filter_nodes_failed));
    prom_header(out, "gpupool_extender_binds_forwarded_total", "counter",
                "Binds forwarded to the lease holder: answered by it, or failed (refused, retry).");
    buf_printf(out, "gpupool_extender_binds_forwarded_total{result=\"answered\"} %llu\n",
               (unsigned long long)load(&m->binds_forwarded_answered));
    buf_printf(out, "gpupool_extender_binds_forwarded_total{result=\"failed\"} %llu\n",
               (unsigned long long)load(&m->binds_forwarded_failed));
    prom_header(out, "gpupool_extender_binds_not_leader_total", "counter",
                "Binds refused (retryable) because this replica may not bind now.");
    buf_printf(out, "gpupool_extender_binds_not_leader_total %llu\n",
               (unsigned long long)load(&m->binds_not_leader));
    int role = atomic_load_explicit(&m->leader_role, memory_order_relaxed);
    prom_header(out, "gpupool_extender_leader_state", "gauge",
                "Leader election role of this replica (1 for the current one; disabled: "
                "--leader-elect off).");
    buf_printf(out, "gpupool_extender_leader_state{state=\"disabled\"} %d\n", role < 0);
    for (int r = 0; r < LEADER_ROLES; r++)
        buf_printf(out, "gpupool_extender_leader_state{state=\"%s\"} %d\n",
                   leader_role_name((enum leader_role)r), role == r);
}

struct gpu_lines {
    struct buf *out;
    struct buf cores; /* the cores family, appended after the memory one */
    uint64_t unit_bytes;
};

static void gpu_line(void *ctx, const struct pool_gpu *gpu)
{
    struct gpu_lines *g = ctx;
    static const char name[] = "gpupool_extender_gpu_memory_allocated_bytes{node=\"";
    buf_add(g->out, name, sizeof(name) - 1);
    prom_label_value(g->out, gpu->node);
    buf_add(g->out, "\",gpu=\"", 7);
    buf_u64(g->out, gpu->index);
    buf_add(g->out, "\"} ", 3);
    buf_u64(g->out, gpu->used * g->unit_bytes);
    buf_add(g->out, "\n", 1);
    static const char cores[] = "gpupool_extender_gpu_cores_allocated{node=\"";
    buf_add(&g->cores, cores, sizeof(cores) - 1);
    prom_label_value(&g->cores, gpu->node);
    buf_add(&g->cores, "\",gpu=\"", 7);
    buf_u64(&g->cores, gpu->index);
    buf_add(&g->cores, "\"} ", 3);
    buf_u64(&g->cores, gpu->cores_used);
    buf_add(&g->cores, "\n", 1);
}

static void cache_gauges(struct buf *out, struct cache *cache, const struct pool_totals *t,
                         uint64_t unit_bytes)
{
    struct cache_stats s;
    cache_stats(cache, &s);
    prom_gauge(out, "gpupool_extender_cache_nodes", "Nodes in the cache (GPU-sharing or not).",
               (double)s.nodes);
    prom_gauge(out, "gpupool_extender_cache_gpu_nodes", "GPU-sharing nodes in the cache.",
               (double)s.gpu_nodes);
    prom_gauge(out, "gpupool_extender_cache_pods", "Pods in the cache.", (double)s.pods);
    prom_gauge(out, "gpupool_extender_cache_assumed_pods",
               "Pods bound by the extender that the API has not shown bound yet.",
               (double)s.assumed);
    prom_gauge(out, "gpupool_extender_gpus", "GPUs of the GPU-sharing nodes.", (double)t->gpus);
    prom_gauge(out, "gpupool_extender_unhealthy_gpus", "GPUs marked unhealthy (take no new pods).",
               (double)t->unhealthy_gpus);
    prom_gauge(out, "gpupool_extender_cluster_gpu_memory_bytes",
               "GPU memory of every GPU-sharing node.", (double)(t->memory_total * unit_bytes));
    prom_gauge(out, "gpupool_extender_cluster_gpu_memory_allocated_bytes",
               "GPU memory charged to pods, cluster-wide (assumed binds included).",
               (double)(t->memory_used * unit_bytes));
    prom_gauge(out, "gpupool_extender_cluster_gpu_cores",
               "gpupool.io/gpu-cores of every GPU-sharing node (100 per GPU).",
               (double)t->cores_total);
    prom_gauge(out, "gpupool_extender_cluster_gpu_cores_allocated",
               "gpupool.io/gpu-cores booked by pods, cluster-wide (assumed binds included).",
               (double)t->cores_used);
    prom_gauge(out, "gpupool_extender_fragmentation_ratio",
               "Share of the free memory of healthy GPUs on GPUs with less free than the median "
               "per-GPU pod share (0..1).",
               t->fragmentation);
}

char *extender_metrics_render(const struct metrics *m, struct cache *cache, uint64_t unit_bytes,
                              size_t *len, char *err, size_t errlen)
{
    struct buf text = {0}, *out = &text;
    prom_build_info(out, "gpupool-scheduler-extender");
    prom_header(out, "gpupool_extender_request_duration_seconds", "histogram",
                "Time to answer a request, from its body read to its reply, by verb.");
    for (int v = 0; v < METRICS_VERBS; v++)
        histogram(out, &m->duration[v], verb_names[v]);
    counters(out, m);
    prom_header(out, "gpupool_extender_gpu_memory_allocated_bytes", "gauge",
                "GPU memory charged to pods on one GPU (assumed binds included).");
    struct gpu_lines lines = {.out = out, .unit_bytes = unit_bytes};
    struct pool_totals totals;
    int rc = pool_walk(cache, gpu_line, &lines, &totals, err, errlen);
    if (rc == 0) {
        prom_header(out, "gpupool_extender_gpu_cores_allocated", "gauge",
                    "gpupool.io/gpu-cores booked by pods on one GPU, percent (assumed binds "
                    "included).");
        size_t cores_len;
        char *cores = buf_take(&lines.cores, &cores_len);
        if (cores)
            buf_add(out, cores, cores_len);
        else
            out->failed = true; /* out of memory: the answer is refused below */
        free(cores);
        cache_gauges(out, cache, &totals, unit_bytes);
    } else {
        buf_free(&lines.cores);
    }
    char *body = buf_take(&text, len);
    if (rc < 0 || !body) {
        if (rc == 0)
            snprintf(err, errlen, "out of memory");
        free(body);
        return NULL;
    }
    return body;
}

/* extender_filter_bench.c -- the extender's hot paths in-process, without
 * HTTP or an API server: a cache of NODES nodes x 8 GPUs (PODS pods bound
 * with gpushare annotations), then
 *   filter      what handle_filter does for an ExtenderArgs whose NodeNames
 *               is every node: parse, query, evaluate, encode the reply
 *   prioritize  parse, snapshot query, evaluate with scores
 *   lookup      cache_evaluate alone (the name -> node table and the fit)
 *   inspect     cache_inspect(NULL), and the longest wait of a pod update
 *               (which takes state_lock) while another thread runs inspects
 * and VmRSS once the cache is filled (the process holds nothing else).
 * Usage: extender_filter_bench [NODES [ROUNDS [filter]]]   (5000, 200);
 * "filter" stops after the filter series (for perf record). */
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "ext_fixtures.h"
#include "protocol.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *samples, size_t n)
{
    qsort(samples, n, sizeof(*samples), compare_double);
    printf("%-12s p50 %8.1f us  p90 %8.1f us  p99 %8.1f us  max %8.1f us  (n=%zu)\n", what,
           samples[n / 2], samples[(n * 9) / 10], samples[(n * 99) / 100], samples[n - 1], n);
}

static long rss_kib(void)
{
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static void tally(void *ctx, size_t i, bool fits, const char *reason)
{
    protocol_filter_add(ctx, i, fits, reason);
}

static char *request_body(int nodes, size_t *len)
{
    json_t *pod = fx_pod("pending-uid", "pending", 8, NULL, NULL);
    json_t *names = json_array();
    char name[64];
    for (int i = 0; i < nodes; i++) {
        snprintf(name, sizeof(name), "gpu-node-%05d.bench.example.com", i);
        json_array_append_new(names, json_string(name));
    }
    json_t *args = json_pack("{s:o, s:n, s:o}", "Pod", pod, "Nodes", "NodeNames", names);
    char *body = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    *len = strlen(body);
    return body;
}

static int fill(struct cache *cache, int nodes, int pods)
{
    char err[256], name[64], uid[64], idx[8];
    cache_nodes_list_begin(cache);
    for (int i = 0; i < nodes; i++) {
        snprintf(name, sizeof(name), "gpu-node-%05d.bench.example.com", i);
        json_t *node = fx_node(name, 8 * 32, 8);
        int rc = cache_node_upsert(cache, node, err, sizeof(err));
        json_decref(node);
        if (rc < 0)
            return fprintf(stderr, "node: %s\n", err), -1;
    }
    cache_nodes_list_end(cache);
    cache_pods_list_begin(cache);
    for (int i = 0; i < pods; i++) {
        snprintf(name, sizeof(name), "gpu-node-%05d.bench.example.com", i % nodes);
        snprintf(uid, sizeof(uid), "0000-%08d", i);
        snprintf(idx, sizeof(idx), "%d", (i / nodes) % 8);
        json_t *pod = fx_pod(uid, uid, 4, name, idx);
        int rc = cache_pod_upsert(cache, pod, err, sizeof(err));
        json_decref(pod);
        if (rc < 0)
            return fprintf(stderr, "pod: %s\n", err), -1;
    }
    cache_pods_list_end(cache);
    return 0;
}

static double filter_once(struct cache *cache, const char *body, size_t len, size_t *out_len)
{
    struct extender_args args;
    struct cache_query q;
    struct filter_result r;
    char err[512];
    double t0 = now_us();
    if (protocol_parse_args(body, len, &args, err, sizeof(err)) < 0 ||
        cache_query_init(cache, &args.facts, true, false, &q, err, sizeof(err)) < 0) {
        fprintf(stderr, "filter: %s\n", err);
        exit(1);
    }
    protocol_filter_begin(&r, &args);
    cache_evaluate(cache, &q, args.names, args.count, tally, &r, NULL);
    char *out = protocol_filter_finish(&r, out_len);
    double t = now_us() - t0;
    free(out);
    cache_query_free(&q);
    protocol_args_free(&args);
    return t;
}

static double prioritize_once(struct cache *cache, const char *body, size_t len)
{
    struct extender_args args;
    struct cache_query q;
    char err[512];
    double t0 = now_us();
    if (protocol_parse_args(body, len, &args, err, sizeof(err)) < 0 ||
        cache_query_init(cache, &args.facts, false, true, &q, err, sizeof(err)) < 0) {
        fprintf(stderr, "prioritize: %s\n", err);
        exit(1);
    }
    double *scores = malloc(sizeof(double) * args.count);
    cache_evaluate(cache, &q, args.names, args.count, NULL, NULL, scores);
    double t = now_us() - t0;
    free(scores);
    cache_query_free(&q);
    protocol_args_free(&args);
    return t;
}

struct inspector {
    struct cache *cache;
    atomic_bool stop;
    int runs;
};

static void *inspect_loop(void *arg)
{
    struct inspector *in = arg;
    while (!atomic_load(&in->stop)) {
        json_t *v = cache_inspect(in->cache, NULL);
        json_decref(v);
        in->runs++;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 5000;
    int rounds = argc > 2 ? atoi(argv[2]) : 200;
    if (nodes <= 0 || rounds <= 0)
        return fprintf(stderr, "usage: %s [NODES [ROUNDS]]\n", argv[0]), 2;
    struct cache *cache = cache_new(PLACEMENT_BINPACK);
    if (!cache || fill(cache, nodes, nodes * 4) < 0)
        return 1;
    printf("VmRSS after filling the cache: %ld KiB\n", rss_kib());
    size_t len, out_len = 0;
    char *body = request_body(nodes, &len);
    double *samples = malloc(sizeof(double) * (size_t)rounds);

    for (int i = 0; i < rounds; i++)
        samples[i] = filter_once(cache, body, len, &out_len);
    printf("%d nodes x 8 GPUs, %d pods; request %zu bytes, filter reply %zu bytes\n", nodes,
           nodes * 4, len, out_len);
    report("filter", samples, (size_t)rounds);
    if (argc > 3 && strcmp(argv[3], "filter") == 0) {
        free(samples);
        free(body);
        cache_free(cache);
        return 0;
    }

    for (int i = 0; i < rounds; i++)
        samples[i] = prioritize_once(cache, body, len);
    report("prioritize", samples, (size_t)rounds);

    /* The lookup and fit alone, over names already parsed. */
    struct extender_args args;
    struct cache_query q;
    char err[512];
    if (protocol_parse_args(body, len, &args, err, sizeof(err)) < 0 ||
        cache_query_init(cache, &args.facts, false, false, &q, err, sizeof(err)) < 0)
        return fprintf(stderr, "%s\n", err), 1;
    for (int i = 0; i < rounds; i++) {
        double t0 = now_us();
        cache_evaluate(cache, &q, args.names, args.count, NULL, NULL, NULL);
        samples[i] = now_us() - t0;
    }
    report("evaluate", samples, (size_t)rounds);
    cache_query_free(&q);
    protocol_args_free(&args);

    int inspects = rounds / 10 ? rounds / 10 : 1;
    for (int i = 0; i < inspects; i++) {
        double t0 = now_us();
        json_t *v = cache_inspect(cache, NULL);
        samples[i] = now_us() - t0;
        json_decref(v);
    }
    report("inspect", samples, (size_t)inspects);

    /* A pod update (state_lock) while inspects run beside it. */
    struct inspector in = {.cache = cache};
    pthread_t thread;
    pthread_create(&thread, NULL, inspect_loop, &in);
    json_t *pod =
        fx_pod("0000-00000000", "0000-00000000", 4, "gpu-node-00000.bench.example.com", "0");
    for (int i = 0; i < rounds; i++) {
        double t0 = now_us();
        if (cache_pod_upsert(cache, pod, err, sizeof(err)) < 0)
            return fprintf(stderr, "%s\n", err), 1;
        samples[i] = now_us() - t0;
        struct timespec pause = {0, 2000000};
        nanosleep(&pause, NULL);
    }
    atomic_store(&in.stop, true);
    pthread_join(thread, NULL);
    json_decref(pod);
    report("pod update", samples, (size_t)rounds);
    printf("(beside %d inspects)\n", in.runs);

    free(samples);
    free(body);
    cache_free(cache);
    return 0;
}

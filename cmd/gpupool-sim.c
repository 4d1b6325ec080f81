/* gpupool-sim -- replays an openb GPU trace through the placement engine.
 *
 *   gpupool-sim --nodes NODES.csv --pods PODS.csv [--policy P]
 *               [--seed N | --seeds A..B] [--demand PCT] [--jobs N] [-o text|json]
 *
 * Seeds run in parallel threads (--jobs, default 2); output is in seed
 * order whatever the thread timing. Errors go to the klog-format log and
 * exit 1. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "placement.h"
#include "replay.h"
#include "trace.h"

#define MAX_SEEDS 100000
#define MAX_JOBS 64

struct sim_options {
    const char *nodes_path;
    const char *pods_path;
    enum placement_policy policy;
    uint64_t seed_first, seed_last;
    unsigned demand_percent;
    unsigned jobs;
    bool json;
};

/* Shared by the worker threads: each takes the next seed index. */
struct sim_batch {
    const struct sim_trace *trace;
    const struct sim_options *opt;
    struct sim_result *results;
    size_t count;
    atomic_size_t next;
    atomic_bool failed;
    pthread_mutex_t err_lock;
    char err[600]; /* room for a replay's 512-byte message and the seed */
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: gpupool-sim --nodes NODES.csv --pods PODS.csv [options]\n"
            "\n"
            "Replays an openb trace (Alibaba cluster-trace-gpu-v2023) through the gpupool\n"
            "placement engine with the FGD artifact's protocol and reports the share of\n"
            "cluster milli-GPU allocated at the end.\n"
            "\n"
            "  --nodes FILE     node list: sn,cpu_milli,memory_mib,gpu,model\n"
            "  --pods FILE      pod list (11-column or 5-column openb format)\n"
            "  --policy P       gpupool (default), binpack or spread\n"
            "  --seed N         one replay with seed N (default 42)\n"
            "  --seeds A..B     one replay per seed A to B, and their mean\n"
            "  --demand PCT     GPU demand as %% of capacity (default %d)\n"
            "  --jobs N         replays run in parallel (default 2)\n"
            "  -o text|json     a table (default) or JSON Lines: one object per seed,\n"
            "                   then {\"summary\":true,...,\"mean_alloc_pct\":...}\n"
            "  -h, --help       this text\n",
            SIM_DEFAULT_DEMAND_PERCENT);
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno == ERANGE || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_seed_range(const char *s, uint64_t *first, uint64_t *last)
{
    const char *dots = strstr(s, "..");
    if (!dots)
        return -1;
    char head[32];
    size_t len = (size_t)(dots - s);
    if (len == 0 || len >= sizeof(head))
        return -1;
    memcpy(head, s, len);
    head[len] = '\0';
    if (parse_u64(head, UINT64_MAX, first) < 0 || parse_u64(dots + 2, UINT64_MAX, last) < 0)
        return -1;
    return *first <= *last && *last - *first < MAX_SEEDS ? 0 : -1;
}

/* Returns 0 to run, 1 when --help was printed, -1 on a usage error. */
static int parse_args(int argc, char **argv, struct sim_options *opt)
{
    enum { OPT_NODES = 256, OPT_PODS, OPT_POLICY, OPT_SEED, OPT_SEEDS, OPT_DEMAND, OPT_JOBS };
    static const struct option longopts[] = {
        {"nodes", required_argument, NULL, OPT_NODES},
        {"pods", required_argument, NULL, OPT_PODS},
        {"policy", required_argument, NULL, OPT_POLICY},
        {"seed", required_argument, NULL, OPT_SEED},
        {"seeds", required_argument, NULL, OPT_SEEDS},
        {"demand", required_argument, NULL, OPT_DEMAND},
        {"jobs", required_argument, NULL, OPT_JOBS},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *opt = (struct sim_options){.policy = PLACEMENT_GPUPOOL,
                                .seed_first = 42,
                                .seed_last = 42,
                                .demand_percent = SIM_DEFAULT_DEMAND_PERCENT,
                                .jobs = 2};
    bool seed_given = false;
    uint64_t v;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_NODES:
            opt->nodes_path = optarg;
            break;
        case OPT_PODS:
            opt->pods_path = optarg;
            break;
        case OPT_POLICY:
            if (placement_policy_parse(optarg, &opt->policy) < 0) {
                log_error("--policy: unknown policy '%s' (gpupool, binpack, spread)", optarg);
                return -1;
            }
            break;
        case OPT_SEED:
        case OPT_SEEDS:
            if (seed_given) {
                log_error("give one of --seed and --seeds, once");
                return -1;
            }
            seed_given = true;
            if (c == OPT_SEED && parse_u64(optarg, UINT64_MAX, &opt->seed_first) == 0) {
                opt->seed_last = opt->seed_first;
            } else if (c == OPT_SEED ||
                       parse_seed_range(optarg, &opt->seed_first, &opt->seed_last) < 0) {
                log_error("%s: '%s' is not %s", c == OPT_SEED ? "--seed" : "--seeds", optarg,
                          c == OPT_SEED ? "a non-negative integer"
                                        : "a range A..B with A <= B (at most 100000 seeds)");
                return -1;
            }
            break;
        case OPT_DEMAND:
            if (parse_u64(optarg, 10000, &v) < 0 || v == 0) {
                log_error("--demand: '%s' is not a percentage in 1..10000", optarg);
                return -1;
            }
            opt->demand_percent = (unsigned)v;
            break;
        case OPT_JOBS:
            if (parse_u64(optarg, MAX_JOBS, &v) < 0 || v == 0) {
                log_error("--jobs: '%s' is not a number in 1..%d", optarg, MAX_JOBS);
                return -1;
            }
            opt->jobs = (unsigned)v;
            break;
        case 'o':
            if (strcmp(optarg, "json") == 0) {
                opt->json = true;
            } else if (strcmp(optarg, "text") == 0) {
                opt->json = false;
            } else {
                log_error("-o: unknown output format '%s' (text, json)", optarg);
                return -1;
            }
            break;
        case 'h':
            usage(stdout);
            return 1;
        case ':':
            log_error("option %s needs a value", argv[optind - 1]);
            return -1;
        default:
            log_error("unknown option %s (see --help)", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        log_error("unexpected argument '%s' (see --help)", argv[optind]);
        return -1;
    }
    if (!opt->nodes_path || !opt->pods_path) {
        log_error("--nodes and --pods are required (see --help)");
        return -1;
    }
    return 0;
}

static void *worker(void *arg)
{
    struct sim_batch *b = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&b->next, 1);
        if (i >= b->count || atomic_load(&b->failed))
            return NULL;
        char err[512];
        if (sim_replay(b->trace, b->opt->policy, b->opt->seed_first + i, b->opt->demand_percent,
                       &b->results[i], err, sizeof(err)) < 0) {
            pthread_mutex_lock(&b->err_lock);
            if (!atomic_exchange(&b->failed, true))
                snprintf(b->err, sizeof(b->err), "seed %" PRIu64 ": %s", b->opt->seed_first + i,
                         err);
            pthread_mutex_unlock(&b->err_lock);
            return NULL;
        }
    }
}

static int run_all(const struct sim_trace *trace, const struct sim_options *opt,
                   struct sim_result *results, size_t count)
{
    struct sim_batch b = {.trace = trace, .opt = opt, .results = results, .count = count};
    atomic_init(&b.next, 0);
    atomic_init(&b.failed, false);
    pthread_mutex_init(&b.err_lock, NULL);
    pthread_t threads[MAX_JOBS];
    size_t started = 0, jobs = opt->jobs < count ? opt->jobs : count;
    for (; started < jobs; started++)
        if (pthread_create(&threads[started], NULL, worker, &b) != 0)
            break;
    if (started == 0)
        worker(&b); /* no thread could start: run here */
    for (size_t i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&b.err_lock);
    if (atomic_load(&b.failed)) {
        log_error("%s", b.err);
        return -1;
    }
    return 0;
}

static int print_json(const struct sim_options *opt, const struct sim_result *results, size_t count,
                      double mean)
{
    const char *policy = placement_policy_name(opt->policy);
    for (size_t i = 0; i <= count; i++) {
        json_t *o;
        if (i < count) {
            const struct sim_result *r = &results[i];
            o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f}", "policy", policy, "seed",
                          (json_int_t)r->seed, "pods", (json_int_t)r->pods, "failed",
                          (json_int_t)r->failed, "alloc_milli", (json_int_t)r->alloc_milli,
                          "capacity_milli", (json_int_t)r->capacity_milli, "alloc_pct",
                          r->alloc_pct);
        } else {
            o = json_pack("{s:b, s:s, s:I, s:f}", "summary", 1, "policy", policy, "seeds",
                          (json_int_t)count, "mean_alloc_pct", mean);
        }
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(o);
        if (!line) {
            log_error("out of memory formatting JSON");
            return -1;
        }
        printf("%s\n", line);
        free(line);
    }
    return 0;
}

static void print_text(const struct sim_options *opt, const struct sim_result *results,
                       size_t count, double mean)
{
    printf("%-8s %6s %7s %7s %12s %14s %8s\n", "policy", "seed", "pods", "failed", "alloc_milli",
           "capacity_milli", "alloc_%");
    for (size_t i = 0; i < count; i++) {
        const struct sim_result *r = &results[i];
        printf("%-8s %6" PRIu64 " %7zu %7zu %12" PRIu64 " %14" PRIu64 " %8.2f\n",
               placement_policy_name(opt->policy), r->seed, r->pods, r->failed, r->alloc_milli,
               r->capacity_milli, r->alloc_pct);
    }
    printf("mean alloc: %.2f%% over %zu seed%s\n", mean, count, count == 1 ? "" : "s");
}

int main(int argc, char **argv)
{
    struct sim_options opt;
    int rc = parse_args(argc, argv, &opt);
    if (rc != 0)
        return rc > 0 ? 0 : 1;

    struct sim_trace trace;
    sim_trace_init(&trace);
    char err[512];
    if (sim_load_nodes(&trace, opt.nodes_path, err, sizeof(err)) < 0 ||
        sim_load_pods(&trace, opt.pods_path, err, sizeof(err)) < 0) {
        log_error("%s", err);
        sim_trace_free(&trace);
        return 1;
    }
    size_t count = (size_t)(opt.seed_last - opt.seed_first) + 1;
    struct sim_result *results = calloc(count, sizeof(*results));
    if (!results) {
        log_error("out of memory");
        sim_trace_free(&trace);
        return 1;
    }
    rc = run_all(&trace, &opt, results, count);
    if (rc == 0) {
        double sum = 0.0;
        for (size_t i = 0; i < count; i++)
            sum += results[i].alloc_pct;
        double mean = sum / (double)count;
        if (opt.json)
            rc = print_json(&opt, results, count, mean);
        else
            print_text(&opt, results, count, mean);
    }
    if (fflush(stdout) != 0 && rc == 0) {
        log_error("writing the output: %s", strerror(errno));
        rc = -1;
    }
    free(results);
    sim_trace_free(&trace);
    return rc == 0 ? 0 : 1;
}

/* placement_bench.c -- CPU cost of placement_score() as the extender pays it.
 *
 * A prioritize request scores every candidate node for one pod. This builds
 * a workload model with 64 pod shapes (shares of many sizes, whole 1/2/4/8
 * GPUs, CPU-only, some limited to a GPU model) and 5,000 nodes of 8 GPUs in
 * random states of use, then scores all nodes for a one-GPU share, a whole
 * GPU and a CPU-only pod, for each policy. Prints ns per score and the time
 * of one 5,000-node pass (CPU time of this process), plus a checksum of the
 * scores and chosen GPUs so that two builds of the engine can be compared
 * for identical results. The GPUs also carry cores (100 each, booked in
 * proportion to their memory); the first cases ask none, as before cores
 * existed, and the `+cores` cases score pods against a workload model
 * whose shares all ask cores (cores = units / 10, as gpupool-sim counts
 * them), the share pod asking cores too.
 *
 *   placement_bench [PASSES]      (default 20 passes over the 5,000 nodes) */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "placement.h"

#define BENCH_NODES 5000
#define BENCH_GPUS 8
#define BENCH_UNITS 1000 /* milli-GPU, as gpupool-sim counts */

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A small deterministic generator (xorshift64*): the bench must build the
 * same cluster on every run for the checksum to mean anything. */
static uint64_t next_random(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * UINT64_C(2685821657736338717);
}

static uint64_t random_below(uint64_t *state, uint64_t bound)
{
    return next_random(state) % bound;
}

/* 64 shapes: 44 shares of distinct sizes, whole 1/2/4/8, CPU-only ones,
 * and model-limited shares and whole GPUs, each observed a few times. */
static int build_model(struct placement_ctx *ctx, uint64_t *rng, bool with_cores)
{
    static const char *const models[] = {"G2", "T4", "V100"};
    int ids[3];
    placement_ctx_init(ctx);
    for (int m = 0; m < 3; m++)
        if ((ids[m] = placement_model_id(ctx, models[m])) < 0)
            return -1;
    for (uint32_t shape = 0; ctx->class_count < PLACEMENT_MAX_CLASSES; shape++) {
        struct placement_request req = {.cpu = 2000 + random_below(rng, 16) * 1000,
                                        .memory = 4096 + random_below(rng, 64) * 1024};
        if (shape < 44) {
            req.gpu_count = 1;
            req.units = 20 + shape * 22;
            req.cores = with_cores ? (uint32_t)(req.units / 10) : 0;
        } else if (shape < 48) {
            req.gpu_count = 1u << (shape - 44);
            req.whole = true;
            req.units = BENCH_UNITS;
        } else if (shape < 54) {
            req.gpu_count = 0;
            req.cpu = 4000 + shape * 1000;
        } else {
            req.gpu_count = 1;
            req.whole = shape % 2 == 0;
            req.units = req.whole ? BENCH_UNITS : 100 + shape * 10;
            req.cores = with_cores && !req.whole ? (uint32_t)(req.units / 10) : 0;
            req.models = UINT64_C(1) << ids[shape % 3];
        }
        uint32_t times = 1 + (uint32_t)random_below(rng, 20);
        for (uint32_t t = 0; t < times; t++)
            placement_stats_observe(ctx, &req);
    }
    return 0;
}

static void build_nodes(struct placement_node *nodes, uint64_t *rng)
{
    for (size_t i = 0; i < BENCH_NODES; i++) {
        struct placement_node *n = &nodes[i];
        memset(n, 0, sizeof(*n));
        n->cpu_allocatable = 96000;
        n->cpu_requested = random_below(rng, 80) * 1000;
        n->memory_allocatable = 393216;
        n->memory_requested = random_below(rng, 300000);
        n->gpu_count = BENCH_GPUS;
        n->model = (int32_t)(i % 3);
        for (uint32_t g = 0; g < BENCH_GPUS; g++) {
            n->gpu_total[g] = BENCH_UNITS;
            /* a third untouched, a third full, the rest partly used */
            uint64_t kind = random_below(rng, 3);
            n->gpu_used[g] = kind == 0   ? 0
                             : kind == 1 ? BENCH_UNITS
                                         : random_below(rng, BENCH_UNITS);
            n->cores_total[g] = 100;
            n->cores_used[g] = (uint32_t)(n->gpu_used[g] / 10);
        }
    }
}

struct bench_case {
    const char *name;
    struct placement_request req;
};

static void run_case(const struct placement_ctx *ctx, enum placement_policy policy,
                     const struct placement_node *nodes, const struct bench_case *bc, int passes)
{
    double checksum = 0.0;
    size_t feasible = 0;
    double start = cpu_seconds();
    for (int p = 0; p < passes; p++) {
        for (size_t i = 0; i < BENCH_NODES; i++) {
            struct placement_choice choice;
            double score = placement_score(ctx, policy, &nodes[i], &bc->req, &choice);
            if (p != 0 || score == PLACEMENT_NO_FIT)
                continue;
            feasible++;
            checksum += score * (double)(i % 97 + 1);
            for (uint32_t k = 0; k < choice.count; k++)
                checksum += (double)(choice.gpu[k] + 1) * (double)(i % 89 + 1) * 1e-3;
        }
    }
    double seconds = cpu_seconds() - start;
    double per_score_ns = seconds * 1e9 / ((double)passes * BENCH_NODES);
    printf("%-8s %-15s %8.0f ns/score %8.3f ms/5000 nodes  (%zu feasible, checksum %.9g)\n",
           placement_policy_name(policy), bc->name, per_score_ns, per_score_ns * BENCH_NODES / 1e6,
           feasible, checksum);
}

int main(int argc, char **argv)
{
    int passes = argc > 1 ? atoi(argv[1]) : 20;
    if (passes <= 0) {
        fprintf(stderr, "usage: placement_bench [PASSES > 0]\n");
        return 2;
    }
    uint64_t rng = UINT64_C(0x9e3779b97f4a7c15);
    uint64_t rng_cores = rng; /* the same shapes, with cores */
    struct placement_ctx *ctx = malloc(sizeof(*ctx));
    struct placement_ctx *ctx_cores = malloc(sizeof(*ctx_cores));
    struct placement_node *nodes = malloc(BENCH_NODES * sizeof(*nodes));
    if (!ctx || !ctx_cores || !nodes || build_model(ctx, &rng, false) < 0 ||
        build_model(ctx_cores, &rng_cores, true) < 0) {
        fprintf(stderr, "placement_bench: setup failed\n");
        free(ctx);
        free(ctx_cores);
        free(nodes);
        return 1;
    }
    build_nodes(nodes, &rng);
    const struct bench_case cases[] = {
        {"share-470", {.cpu = 8000, .memory = 16384, .gpu_count = 1, .units = 470}},
        {"whole-1", {.cpu = 8000, .memory = 16384, .gpu_count = 1, .whole = true, .units = 1000}},
        {"whole-2", {.cpu = 16000, .memory = 32768, .gpu_count = 2, .whole = true, .units = 1000}},
        {"cpu-only", {.cpu = 16000, .memory = 32768}},
    };
    const struct bench_case cases_cores[] = {
        {"share-470+cores",
         {.cpu = 8000, .memory = 16384, .gpu_count = 1, .units = 470, .cores = 47}},
        {"whole-1+cores",
         {.cpu = 8000, .memory = 16384, .gpu_count = 1, .whole = true, .units = 1000}},
    };
    printf("%u shapes, %d nodes x %d GPUs, %d passes\n", ctx->class_count, BENCH_NODES, BENCH_GPUS,
           passes);
    const enum placement_policy policies[] = {PLACEMENT_GPUPOOL, PLACEMENT_BINPACK};
    for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++)
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
            run_case(ctx, policies[p], nodes, &cases[c], passes);
    for (size_t p = 0; p < sizeof(policies) / sizeof(policies[0]); p++)
        for (size_t c = 0; c < sizeof(cases_cores) / sizeof(cases_cores[0]); c++)
            run_case(ctx_cores, policies[p], nodes, &cases_cores[c], passes);
    free(ctx);
    free(ctx_cores);
    free(nodes);
    return 0;
}

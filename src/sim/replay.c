/* replay.c -- workload construction and replay (see replay.h). */
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- PRNG: splitmix64 seeds xoshiro256** -------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void sim_rng_seed(struct sim_rng *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t sim_rng_next(struct sim_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t sim_rng_below(struct sim_rng *rng, uint64_t bound)
{
    /* Reject the top partial range so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do
        x = sim_rng_next(rng);
    while (x >= limit);
    return x % bound;
}

/* ---- workload ----------------------------------------------------------- */

int sim_workload(const struct sim_trace *trace, uint64_t seed, unsigned demand_percent,
                 size_t **order_out, size_t *count_out, char *err, size_t errlen)
{
    uint64_t capacity = sim_trace_capacity_milli(trace);
    if (trace->pod_count == 0 || capacity == 0) {
        snprintf(err, errlen, "the trace has no %s", trace->pod_count == 0 ? "pods" : "GPUs");
        return -1;
    }
    uint64_t demand = 0;
    for (size_t i = 0; i < trace->pod_count; i++)
        demand += trace->pods[i].demand_milli;
    uint64_t target = capacity * demand_percent / 100;
    if (demand == 0 && target > 0) {
        snprintf(err, errlen, "the trace's pods demand no GPU: cannot reach %u%% of capacity",
                 demand_percent);
        return -1;
    }

    size_t count = trace->pod_count, cap = trace->pod_count * 2 + 16;
    size_t *order = malloc(cap * sizeof(*order));
    if (!order) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        order[i] = i;

    struct sim_rng rng;
    sim_rng_seed(&rng, seed);
    while (demand < target) {
        if (count == cap) {
            size_t *grown = realloc(order, cap * 2 * sizeof(*order));
            if (!grown) {
                free(order);
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            order = grown;
            cap *= 2;
        }
        size_t pick = (size_t)sim_rng_below(&rng, trace->pod_count);
        order[count++] = pick;
        demand += trace->pods[pick].demand_milli;
    }
    for (size_t i = count; i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)sim_rng_below(&rng, i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    if (demand > target) {
        /* Too much already: keep the prefix that reaches the target. */
        uint64_t sum = 0;
        size_t keep = 0;
        while (keep < count && sum < target)
            sum += trace->pods[order[keep++]].demand_milli;
        count = keep;
    }
    *order_out = order;
    *count_out = count;
    return 0;
}

/* ---- replay ------------------------------------------------------------- */

/* The best node for req, or -1; its GPUs in *choice. */
static long best_node(const struct placement_ctx *ctx, enum placement_policy policy,
                      const struct placement_node *nodes, size_t node_count,
                      const struct placement_request *req, struct placement_choice *choice)
{
    long best = -1;
    double best_score = PLACEMENT_NO_FIT;
    struct placement_choice candidate;
    for (size_t i = 0; i < node_count; i++) {
        double score = placement_score(ctx, policy, &nodes[i], req, &candidate);
        if (score == PLACEMENT_NO_FIT || (best >= 0 && score <= best_score))
            continue;
        best = (long)i;
        best_score = score;
        *choice = candidate;
    }
    return best;
}

int sim_replay(const struct sim_trace *trace, enum placement_policy policy, uint64_t seed,
               unsigned demand_percent, struct sim_result *result, char *err, size_t errlen)
{
    size_t *order, count;
    if (sim_workload(trace, seed, demand_percent, &order, &count, err, errlen) < 0)
        return -1;
    struct placement_node *nodes = malloc(trace->node_count * sizeof(*nodes));
    struct placement_ctx *ctx = malloc(sizeof(*ctx));
    if (!nodes || !ctx) {
        free(nodes);
        free(ctx);
        free(order);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(nodes, trace->nodes, trace->node_count * sizeof(*nodes));
    *ctx = trace->models;

    memset(result, 0, sizeof(*result));
    result->seed = seed;
    result->pods = count;
    int rc = 0;
    for (size_t k = 0; k < count && rc == 0; k++) {
        const struct placement_request *req = &trace->pods[order[k]].req;
        placement_stats_observe(ctx, req);
        struct placement_choice choice;
        long n = best_node(ctx, policy, nodes, trace->node_count, req, &choice);
        if (n < 0) {
            result->failed++;
            continue;
        }
        char why[160];
        if (placement_commit(&nodes[n], req, &choice, why, sizeof(why)) < 0) {
            snprintf(err, errlen, "internal error: committing pod %zu on node %s: %s", order[k],
                     nodes[n].name ? nodes[n].name : "?", why);
            rc = -1;
        }
    }
    for (size_t i = 0; i < trace->node_count; i++)
        for (uint32_t g = 0; g < nodes[i].gpu_count; g++) {
            result->alloc_milli += nodes[i].gpu_used[g];
            result->capacity_milli += nodes[i].gpu_total[g];
        }
    result->alloc_pct = result->capacity_milli
                            ? 100.0 * (double)result->alloc_milli / (double)result->capacity_milli
                            : 0.0;
    free(nodes);
    free(ctx);
    free(order);
    return rc;
}

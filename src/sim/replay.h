/* replay.h -- the FGD artifact's replay protocol over a loaded trace.
 *
 * One replay, for one policy and one seed:
 *   1. Workload: the trace's pods, resampled uniformly with replacement
 *      (extra copies added) until their GPU demand reaches demand_percent
 *      of the cluster's GPU capacity, then shuffled (seeded). If the trace
 *      alone already demands more, the shuffled list is cut right after the
 *      pod that reaches the target (CPU-only pods before it are kept).
 *   2. Each pod, in that order, is first shown to the online workload model
 *      (placement_stats_observe, as the extender sees pods in filter) and
 *      then tried once: every node is scored, the best feasible one wins
 *      (ties: lowest node index), the policy's GPUs are committed. A pod
 *      that fits nowhere is dropped and counted as failed.
 *   3. Result: milli-GPU allocated / cluster milli-GPU at the end.
 * Deterministic for a given trace, policy, seed and demand_percent; the
 * PRNG is our own xoshiro256** seeded through splitmix64. Replays share the
 * trace read-only, so several may run in parallel threads. */
#ifndef GP_SIM_REPLAY_H
#define GP_SIM_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "placement.h"
#include "trace.h"
#include "compiler.h"

#define SIM_DEFAULT_DEMAND_PERCENT 130

struct sim_result {
    uint64_t seed;
    size_t pods;          /* pods tried */
    size_t failed;        /* pods that fit nowhere */
    uint64_t alloc_milli; /* milli-GPU allocated at the end */
    uint64_t capacity_milli;
    double alloc_pct; /* 100 * alloc / capacity */
};

/* xoshiro256** state. */
struct sim_rng {
    uint64_t s[4];
};

void sim_rng_seed(struct sim_rng *rng, uint64_t seed);
uint64_t sim_rng_next(struct sim_rng *rng);
/* Uniform in [0, bound) without modulo bias; bound > 0. */
uint64_t sim_rng_below(struct sim_rng *rng, uint64_t bound);

/* Builds the workload of step 1: *order receives indexes into trace->pods
 * (malloc'd, caller frees), *count their number. Returns 0, or -1 with err
 * (no pods, no GPU capacity, out of memory). */
int sim_workload(const struct sim_trace *trace, uint64_t seed, unsigned demand_percent,
                 size_t **order, size_t *count, char *err, size_t errlen) GP_MUST_USE;

/* Runs one replay. Returns 0, or -1 with err. */
int sim_replay(const struct sim_trace *trace, enum placement_policy policy, uint64_t seed,
               unsigned demand_percent, struct sim_result *result, char *err,
               size_t errlen) GP_MUST_USE;

#endif

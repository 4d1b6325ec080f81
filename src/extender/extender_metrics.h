/* extender_metrics.h -- the extender's Prometheus metrics (text exposition format 0.0.4).
 *
 * The hot paths (filter, prioritize, bind) only add to relaxed atomics:
 * no lock, no allocation. Everything else (cache sizes, per-GPU charges,
 * fragmentation) is read from the cache when /metrics is scraped.
 *
 * Histogram buckets are stored per bucket (not cumulative) and summed when
 * rendered, so one observation is one atomic add to its bucket plus one to
 * the sum; a scrape that races an observation may see the bucket without
 * the sum, never a non-monotonic series.
 *
 * Names (docs/metrics.md, the reference):
 *   gpupool_build_info{program,version,revision}                gauge, 1
 *   gpupool_extender_request_duration_seconds{verb}             histogram
 *   gpupool_extender_binds_total{result}                        counter
 *   gpupool_extender_bad_requests_total{verb}                   counter
 *   gpupool_extender_filter_nodes_total{result="passed|failed"} counter
 *   gpupool_extender_cache_{nodes,gpu_nodes,pods,assumed_pods}  gauge
 *   gpupool_extender_gpu_memory_allocated_bytes{node,gpu}       gauge
 *   gpupool_extender_cluster_gpu_memory_bytes / _allocated_bytes cluster gauges
 *   gpupool_extender_fragmentation_ratio                        gauge
 *   gpupool_extender_leader_state{state}                        gauge (1 for the current one)
 *   gpupool_extender_binds_forwarded_total{result}              counter
 *   gpupool_extender_binds_not_leader_total                     counter
 *
 * Ownership: a struct metrics lives in the extender's context; render's
 * text is the caller's (free()). */
#ifndef GP_EXTENDER_METRICS_H
#define GP_EXTENDER_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "bind.h"
#include "cache.h"
#include "leader.h"
#include "compiler.h"

#define METRICS_BUCKETS 16 /* finite upper bounds; one more slot for +Inf */

struct metrics_histogram {
    atomic_uint_fast64_t counts[METRICS_BUCKETS + 1];
    atomic_uint_fast64_t sum_ns;
};

enum metrics_verb { METRICS_FILTER, METRICS_PRIORITIZE, METRICS_BIND, METRICS_VERBS };

/* The bind results counted: bind.h's outcomes, then a request we could not read. */
#define METRICS_BIND_BAD_REQUEST BIND_RESULTS
#define METRICS_BIND_RESULTS (BIND_RESULTS + 1)

struct metrics {
    struct metrics_histogram duration[METRICS_VERBS];
    atomic_uint_fast64_t bad_requests[METRICS_VERBS];
    atomic_uint_fast64_t binds[METRICS_BIND_RESULTS];
    atomic_uint_fast64_t filter_nodes_passed, filter_nodes_failed;
    /* Leader election (leader.h): the role, -1 when --leader-elect is off;
     * binds forwarded to the holder (answered by it, or not); binds
     * refused because this replica may not bind (not the holder, cache
     * not yet proven current, fence passed, no holder known). */
    atomic_int leader_role;
    atomic_uint_fast64_t binds_forwarded_answered, binds_forwarded_failed;
    atomic_uint_fast64_t binds_not_leader;
};

/* Zeroes m (a plain memset is not enough for atomics in theory). */
void metrics_init(struct metrics *m);

/* Durations: clock_now_ns() (clock.h) differences. */
void metrics_observe(struct metrics_histogram *h, uint64_t elapsed_ns);
static inline void metrics_count(atomic_uint_fast64_t *counter, uint64_t n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

/* The whole exposition text (NUL-terminated, *len without it), or NULL with
 * a message. unit_bytes: bytes per unit of aliyun.com/gpu-mem. */
char *extender_metrics_render(const struct metrics *m, struct cache *cache, uint64_t unit_bytes,
                              size_t *len, char *err, size_t errlen) GP_MUST_USE;

#endif
